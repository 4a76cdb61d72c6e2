/* rebuild_life.c -- the order lifecycle's state for a rebuild from SQL (see rebuild_life.h).
 *
 * The orders are one array sorted by order id (a bsearch per event or kept state); a
 * million orders cost 32 MB and a sort. */
#include "rebuild/rebuild_life.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/key.h"
#include "core/log.h"
#include "core/pairs.h"
#include "core/xmem.h"
#include "redis/rconn.h"
#include "sale/buckets.h"
#include "sale/orderid.h"
#include "sale/sentry.h"

#define PAGE 10000          /* stream entries per XRANGE, fields per HSCAN; payments per
                               SQL read */
#define HSET_CHUNK 1000     /* fields per HSET */

void rebuild_life_add(rebuild_life_t *l, int64_t order_id, int64_t user_id, int status,
                      int64_t update_s, int pay_timeout_s)
{
    char st = 0;
    if (status == 2 || status == 3)
        st = 'p';
    else if (status == 5 || status == 6)
        st = 'r';
    else if (status == 4)
        /* the event's ts is the row's update time: a timeout is decided at the deadline
         * or after it, a buyer's cancel before it (but for the sweep's second or so) */
        st = pay_timeout_s > 0 && orderid_time(order_id) > ORDERID_EPOCH &&
                     update_s - orderid_time(order_id) >= pay_timeout_s
                 ? 't'
                 : 'c';
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1024;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (rebuild_life_order_t){order_id, user_id, st ? update_s : 0, st, 0,
                                          status != 0};
    l->sorted = 0;
}

static int cmp_order(const void *a, const void *b)
{
    int64_t x = ((const rebuild_life_order_t *)a)->order_id;
    int64_t y = ((const rebuild_life_order_t *)b)->order_id;
    return x < y ? -1 : x > y;
}

static rebuild_life_order_t *find(rebuild_life_t *l, int64_t order_id)
{
    if (!l->sorted) {
        if (l->n > 1)
            qsort(l->v, l->n, sizeof *l->v, cmp_order);
        l->sorted = 1;
    }
    rebuild_life_order_t key = {.order_id = order_id};
    return l->n ? bsearch(&key, l->v, l->n, sizeof *l->v, cmp_order) : NULL;
}

void rebuild_life_aside(rebuild_life_t *l, const rebuild_life_order_t *v, size_t n)
{
    size_t n0 = l->n;
    char *known = xrealloc(NULL, n ? n : 1);
    for (size_t i = 0; i < n; i++) {   /* every look-up first: one sort */
        rebuild_life_order_t *o = n0 ? find(l, v[i].order_id) : NULL;
        known[i] = o != NULL;
        if (!o || o->user_id != v[i].user_id)
            continue;   /* (another buyer's id: not possible in SQL, ignored) */
        /* its cancel committed between the two reads: the side table's row is the later */
        if (!o->st || (o->st != 'p' && v[i].st == 'r')) {
            o->st = v[i].st;
            o->ts = v[i].ts;
        }
        o->freed = 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (known[i])
            continue;
        rebuild_life_add(l, v[i].order_id, v[i].user_id, 4, 0, 0);
        rebuild_life_order_t *a = &l->v[l->n - 1];
        a->st = v[i].st;
        a->ts = v[i].ts;
        a->freed = 1;
    }
    free(known);
}

void rebuild_life_unknown(rebuild_life_t *l, const pairs_t *cur)
{
    size_t n0 = l->n;
    char *known = xrealloc(NULL, cur->n ? cur->n : 1);
    for (size_t i = 0; i < cur->n; i++)   /* (an entry read twice: the same pair again) */
        known[i] = (n0 && find(l, cur->v[i].b) != NULL) ||
                   (i > 0 && cur->v[i].a == cur->v[i - 1].a && cur->v[i].b == cur->v[i - 1].b);
    for (size_t i = 0; i < cur->n; i++)
        if (!known[i])
            rebuild_life_add(l, cur->v[i].b, cur->v[i].a, 0, 0, 0);
    free(known);
}

int rebuild_life_payments(store_t *st, int64_t voucher_id, rebuild_life_t *l, char *err,
                          size_t errlen)
{
    int64_t after = 0;
    char after_pay[STORE_PAYMENT_ID_MAX + 1] = "";
    for (;;) {
        store_refund_t *page = NULL;
        size_t n = 0;
        if (store_voucher_payments(st, voucher_id, after, after_pay, PAGE, &page, &n) !=
            STORE_OK) {
            snprintf(err, errlen, "SQL payments: %s", store_errmsg(st));
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            const rebuild_life_order_t *o = find(l, page[i].order_id);
            if (!o)
                continue;   /* an order of a bucket that kept its keys */
            l->pay = xrealloc(l->pay, (l->npay + 1) * sizeof *l->pay);
            rebuild_life_pay_t *p = &l->pay[l->npay++];
            memcpy(p->id, page[i].payment_id, sizeof p->id);
            p->order_id = o->order_id;
            p->user_id = o->user_id;
            p->amount = page[i].amount;
            p->status = page[i].status;
        }
        if (n) {
            after = page[n - 1].order_id;
            memcpy(after_pay, page[n - 1].payment_id, sizeof after_pay);
        }
        free(page);
        if (n < PAGE)
            return 0;
    }
}

typedef char pay_id_t[STORE_PAYMENT_ID_MAX + 1];

/* Hands every entry of stream key (its fields, an array) to each(ctx, fields), a page of
 * PAGE entries per XRANGE. 0, or -1 (err) when Redis failed. */
static int xrange_all(redisContext *c, const char *key, void (*each)(void *, const redisReply *),
                      void *ctx, char *err, size_t errlen)
{
    char from[48] = "-", why[256];
    for (;;) {
        redisReply *r = rconn_cmdf(c, why, sizeof why, "XRANGE %s %s + COUNT %d", key, from,
                                   PAGE);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            snprintf(err, errlen, "XRANGE %s: %s", key, r ? "unexpected reply" : why);
            freeReplyObject(r);
            return -1;
        }
        size_t n = r->elements;
        for (size_t i = 0; i < n; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
                e->element[0]->type != REDIS_REPLY_STRING ||
                e->element[1]->type != REDIS_REPLY_ARRAY)
                continue;
            snprintf(from, sizeof from, "(%s", e->element[0]->str);
            each(ctx, e->element[1]);
        }
        freeReplyObject(r);
        if (n < PAGE)
            return 0;
    }
}

/* The payment ids an outbox holds (xrange_all's ctx). */
typedef struct outbox_ids {
    pay_id_t *ids;
    size_t n;
} outbox_ids_t;

static void outbox_entry(void *ctx, const redisReply *f)
{
    outbox_ids_t *o = ctx;
    for (size_t j = 0; j + 1 < f->elements; j += 2)
        if (f->element[j]->type == REDIS_REPLY_STRING &&
            strcmp(f->element[j]->str, "payment") == 0 &&
            f->element[j + 1]->type == REDIS_REPLY_STRING) {
            o->ids = xrealloc(o->ids, (o->n + 1) * sizeof *o->ids);
            snprintf(o->ids[o->n++], sizeof *o->ids, "%s", f->element[j + 1]->str);
        }
}

int rebuild_life_requeue(redisContext *c, const char *tag, const rebuild_life_t *l, int b,
                         int k, char *err, size_t errlen)
{
    char kr[96], why[256];
    size_t due = 0;
    for (size_t i = 0; i < l->npay; i++)
        due += l->pay[i].status == 5 && buckets_home(l->pay[i].user_id, k) == b;
    if (due == 0)
        return 0;
    if (key_refunds_t(kr, sizeof kr, tag) < 0) {
        snprintf(err, errlen, "bucket %s: key out of range", tag);
        return -1;
    }
    outbox_ids_t have = {0};
    size_t added = 0;
    int rc = xrange_all(c, kr, outbox_entry, &have, err, errlen);
    for (size_t i = 0; rc == 0 && i < l->npay; i++) {
        const rebuild_life_pay_t *p = &l->pay[i];
        int there = p->status != 5 || buckets_home(p->user_id, k) != b;
        for (size_t j = 0; j < have.n && !there; j++)
            there = strcmp(have.ids[j], p->id) == 0;
        if (there)
            continue;
        redisReply *r = rconn_cmdf(c, why, sizeof why,
                                   "XADD %s * order %lld payment %s amount %lld user %lld", kr,
                                   (long long)p->order_id, p->id, (long long)p->amount,
                                   (long long)p->user_id);
        if (!r) {
            snprintf(err, errlen, "XADD %s: %s", kr, why);
            rc = -1;
        }
        added += r != NULL;
        freeReplyObject(r);
    }
    free(have.ids);
    if (added)
        log_info("rebuild: %zu refunds SQL has at 5 back in %s", added, kr);
    return rc;
}

/* Whether an event entry's fields carry `free 1` (life.lua's cancel-free, expire-free). */
static int entry_frees(const redisReply *f)
{
    for (size_t i = 0; f->type == REDIS_REPLY_ARRAY && i + 1 < f->elements; i += 2)
        if (f->element[i]->type == REDIS_REPLY_STRING && strcmp(f->element[i]->str, "free") == 0)
            return f->element[i + 1]->type == REDIS_REPLY_STRING &&
                   strcmp(f->element[i + 1]->str, "1") == 0;
    return 0;
}

/* Moves o to state st at ts if life.lua could: 1 moved, 0 not (a replay, or an older
 * decision than the one it has). The buyer must be the order's. */
static int advance(rebuild_life_order_t *o, char st, int64_t ts, int64_t user_id)
{
    if (!o || o->user_id != user_id)
        return 0;
    int ok = o->st == 0 ? (st == 'c' || st == 't' || st == 'p')
                        : (st == 'r' && (o->st == 'c' || o->st == 't'));
    if (ok) {
        o->st = st;
        o->ts = ts;
    }
    return ok;
}

/* One entry of a surviving order stream (xrange_all's each): its events (one ev, or an
 * expire call's evs) move their orders. A bad entry moves none (the writer's dead letter). */
static void event_entry(void *ctx, const redisReply *f)
{
    rebuild_life_t *l = ctx;
    sentry_evit_t it, chk;
    sentry_ev_t ev;
    size_t bound;
    const char *reason = NULL;
    if (sentry_evopen(f, &it, &bound, &reason) != 1)
        return;
    int rc;
    for (chk = it; (rc = sentry_evnext(&chk, &ev, &reason)) == 1;)
        ;
    if (rc < 0)
        return;
    int frees = entry_frees(f);
    while (sentry_evnext(&it, &ev, &reason) == 1) {
        rebuild_life_order_t *o = find(l, ev.order_id);
        l->events += advance(o, ev.kind, ev.ts, ev.user_id);
        if (o && o->user_id == ev.user_id && (ev.kind == 'c' || ev.kind == 't') && frees)
            o->freed = 1;
    }
}

int rebuild_life_events(redisContext *c, const char *ks, rebuild_life_t *l, char *err,
                        size_t errlen)
{
    return xrange_all(c, ks, event_entry, l, err, errlen);
}

/* One field of a surviving state hash: an order's state moves it; anything else (a
 * payment's answer, a state of an order not among the buyers) is kept as it is. */
static void keep_field(rebuild_life_t *l, int b, const redisReply *f, const redisReply *v)
{
    char st = 0;
    long long ts = 0, uid = 0;
    char *end = NULL;
    long long oid = strtoll(f->str, &end, 10);
    rebuild_life_order_t *o = NULL;
    if (end && *end == '\0' && oid > 0 &&
        sscanf(v->str, "%c %lld %lld", &st, &ts, &uid) == 3 && (o = find(l, oid)) != NULL) {
        /* Redis decided it: that wins over SQL and the stream, which only lag behind */
        if (o->user_id == uid && (st == 'c' || st == 't' || st == 'p' || st == 'r')) {
            l->kept += o->st != st;
            o->st = st;
            o->ts = ts;
        }
        return;
    }
    l->x = xrealloc(l->x, (l->nx + 1) * sizeof *l->x);
    l->x[l->nx++] = (rebuild_life_extra_t){b, xstrdup(f->str), xstrdup(v->str)};
}

int rebuild_life_keep(redisContext *c, const char *ko, int b, rebuild_life_t *l, char *err,
                      size_t errlen)
{
    char cur[32] = "0", why[256];
    do {
        redisReply *r = rconn_cmdf(c, why, sizeof why, "HSCAN %s %s COUNT %d", ko, cur, PAGE);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            snprintf(err, errlen, "HSCAN %s: %s", ko, r ? "unexpected reply" : why);
            freeReplyObject(r);
            return -1;
        }
        snprintf(cur, sizeof cur, "%s", r->element[0]->str);
        const redisReply *a = r->element[1];
        for (size_t i = 0; i + 1 < a->elements; i += 2)
            if (a->element[i]->type == REDIS_REPLY_STRING &&
                a->element[i + 1]->type == REDIS_REPLY_STRING)
                keep_field(l, b, a->element[i], a->element[i + 1]);
        freeReplyObject(r);
    } while (strcmp(cur, "0") != 0);
    return 0;
}

void rebuild_life_buyers(rebuild_life_t *l, pairs_t *out)
{
    for (size_t i = 0; i < l->n; i++)
        if (!l->v[i].freed)
            pairs_push(out, l->v[i].user_id, l->v[i].order_id);
    pairs_sort(out);   /* by user, then order id: a user's later order last */
    size_t w = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (i + 1 < out->n && out->v[i + 1].a == out->v[i].a) {
            rebuild_life_order_t *o = find(l, out->v[i].b);
            if (o)
                o->freed = 1;
            continue;
        }
        out->v[w++] = out->v[i];
    }
    out->n = w;
}

void rebuild_life_count(const rebuild_life_t *l, int b, int k, rebuild_life_counts_t *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < l->n; i++) {
        const rebuild_life_order_t *o = &l->v[i];
        if (!o->st || buckets_home(o->user_id, k) != b)
            continue;
        out->states++;
        out->paid += o->st == 'p';
        out->timedout += o->st == 't';
        out->returned += o->st != 'p';
    }
    for (size_t i = 0; i < l->n; i++)
        out->freed += l->v[i].freed && buckets_home(l->v[i].user_id, k) == b;
}

int rebuild_life_stage(redisContext *c, const char *kt, const rebuild_life_t *l, int b, int k,
                       char *err, size_t errlen)
{
    char why[256];
    redisReply *r;
    const char **argv = xrealloc(NULL, (2 + 2 * HSET_CHUNK) * sizeof *argv);
    char(*buf)[96] = xrealloc(NULL, 2 * HSET_CHUNK * sizeof *buf);
    size_t i = 0, j = 0, p = 0;
    int rc = 0;
    while (rc == 0 && (i < l->n || j < l->nx || p < l->npay)) {
        int argc = 2;
        argv[0] = "HSET";
        argv[1] = kt;
        for (int m = 0; m < HSET_CHUNK && (i < l->n || j < l->nx || p < l->npay);) {
            if (p < l->npay) {
                /* SQL's payment answers first: a surviving hash's own (the extras) are
                 * written after them, and the same field keeps Redis's answer */
                const rebuild_life_pay_t *y = &l->pay[p++];
                if (buckets_home(y->user_id, k) != b)
                    continue;
                snprintf(buf[2 * m], sizeof buf[0], "%lld/%s", (long long)y->order_id, y->id);
                argv[argc++] = buf[2 * m];
                argv[argc++] = y->status == 2 ? "0" : "2";
            } else if (i < l->n) {
                const rebuild_life_order_t *o = &l->v[i++];
                if (!o->st || buckets_home(o->user_id, k) != b)
                    continue;
                snprintf(buf[2 * m], sizeof buf[0], "%lld", (long long)o->order_id);
                snprintf(buf[2 * m + 1], sizeof buf[0], "%c %lld %lld", o->st,
                         (long long)o->ts, (long long)o->user_id);
                argv[argc++] = buf[2 * m];
                argv[argc++] = buf[2 * m + 1];
            } else {
                const rebuild_life_extra_t *x = &l->x[j++];
                if (x->bucket != b)
                    continue;
                argv[argc++] = x->field;
                argv[argc++] = x->value;
            }
            m++;
        }
        if (argc == 2)
            break;
        r = rconn_cmd(c, why, sizeof why, argc, argv, NULL);
        if (!r) {
            snprintf(err, errlen, "HSET %s: %s", kt, why);
            rc = -1;
        }
        freeReplyObject(r);
    }
    free(argv);
    free(buf);
    return rc;
}

void rebuild_life_free(rebuild_life_t *l)
{
    for (size_t i = 0; i < l->nx; i++) {
        free(l->x[i].field);
        free(l->x[i].value);
    }
    free(l->x);
    free(l->v);
    free(l->pay);
    memset(l, 0, sizeof *l);
}
