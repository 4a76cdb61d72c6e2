/* audit.c -- `seckill audit`: the flash-sale invariants, checked from Redis and SQL.
 *
 * Per voucher the audit reads, in this order (the order is what makes it safe on a live
 * deployment, where orders keep moving from Redis to SQL while it reads):
 *
 *   1. the stream's consumer-group position: smallest pending id and last-delivered id.
 *      Every entry below both was acked at that moment, and the writer acks only after
 *      its SQL commit -- so such an order is already in SQL when step 2 reads;
 *   2. SQL: the voucher row, its (order count, stock) pair in one read transaction, and
 *      every order of the voucher (paged by id); then a lab SQL step's, if any
 *      (lab_store_voucher_counts);
 *   3. Redis, in one MULTI/EXEC: voucher hash (stock, begin, end), buyer count, stream
 *      length, dead letters -- so (stock, admitted) is one moment;
 *   4. the buyer hash (HSCAN; buyers are never removed, so every buyer present at step 2
 *      is returned) and the whole stream (XRANGE in pages).
 *
 * Then: an SQL order must be a buyer (buyers only grow, and were read after SQL). A buyer
 * missing from SQL is excused only if its stream entry was in flight at step 1 (pending,
 * or after the last-delivered id); once drained, nothing is excused. Each store's
 * (stock, count) pair is atomic, so stock equations hold exactly at any time.
 *
 * Everything is compared by sorting arrays of 64-bit pairs and merging: no hash tables,
 * a million orders cost a few tens of MB and well under a second. */
#include "cmd/audit.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "cmd/bench_redis.h"
#include "cmd/cmd_args.h"
#include "sale/bucket_sweep.h"
#include "redis/rcl_sync.h"
#include "core/pairs.h"
#include "redis/rconn.h"
#include "core/clock.h"
#include "core/datadir.h"
#include "core/key.h"
#include "core/sb.h"
#include "sale/order_mode.h"
#include "sale/sentry.h"
#include "store/store.h"
#include "core/xmem.h"
#include "lab/lab_store.h"

#define PAGE 10000
#define DETAIL 400
#define MAX_CHECKS 32

/* ==== small helpers ==== */

static void fmt_time(int64_t t, char *buf, size_t len)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!localtime_r(&tt, &tm) || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, len, "@%lld", (long long)t);
}

/* ==== the record file ==== */

int audit_record_read(const char *path, audit_record_t *rec, char *err, size_t errlen)
{
    memset(rec, 0, sizeof *rec);
    rec->voucher_id = rec->stock = rec->unanswered = -1;
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[512];
    size_t cap = 0, capso = 0, capmb = 0, lineno = 0;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#') {
            char *p;
            long long v;
            int c;
            if ((p = strstr(line, "voucher=")) && sscanf(p + 8, "%lld", &v) == 1)
                rec->voucher_id = v;
            if ((p = strstr(line, "stock=")) && sscanf(p + 6, "%lld", &v) == 1)
                rec->stock = v;
            if ((p = strstr(line, "unanswered=")) && sscanf(p + 11, "%lld", &v) == 1)
                rec->unanswered = v;
            if ((p = strstr(line, "complete=")) && sscanf(p + 9, "%d", &c) == 1)
                rec->complete = c != 0;
            continue;
        }
        long long oid = 0, uid = 0;
        /* a buyer answered sold out (v2), or 503 (v3) */
        int sold = strncmp(line, "soldout ", 8) == 0, maybe = strncmp(line, "maybe ", 6) == 0;
        if (sold || maybe) {
            if (sscanf(line + (sold ? 8 : 6), "%lld", &uid) != 1) {
                snprintf(err, errlen, "%s:%zu: expected '%s <user id>'", path, lineno,
                         sold ? "soldout" : "maybe");
                rc = -1;
                break;
            }
            int64_t **v = sold ? &rec->soldout : &rec->maybe;
            size_t *n = sold ? &rec->nsoldout : &rec->nmaybe, *c = sold ? &capso : &capmb;
            if (*n == *c) {
                *c = *c ? *c * 2 : 1024;
                *v = xrealloc(*v, *c * sizeof **v);
            }
            (*v)[(*n)++] = uid;
            continue;
        }
        int k = sscanf(line, "%lld %lld", &oid, &uid);
        if (k < 1) {
            if (strspn(line, " \t\r\n") == strlen(line))
                continue;
            snprintf(err, errlen, "%s:%zu: expected '<order id> [<user id>]'", path, lineno);
            rc = -1;
            break;
        }
        if (rec->n == cap) {
            cap = cap ? cap * 2 : 1024;
            rec->answers = xrealloc(rec->answers, cap * sizeof *rec->answers);
        }
        rec->answers[rec->n].order_id = oid;
        rec->answers[rec->n].user_id = k == 2 ? uid : 0;
        rec->n++;
    }
    if (f != stdin)
        fclose(f);
    if (rc < 0) {
        free(rec->answers);
        rec->answers = NULL;
        rec->n = 0;
        free(rec->soldout);
        rec->soldout = NULL;
        rec->nsoldout = 0;
        free(rec->maybe);
        rec->maybe = NULL;
        rec->nmaybe = 0;
    }
    return rc;
}

int audit_record_write(const char *path, const audit_record_t *rec, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "# seckill-bench-record v1 voucher=%lld stock=%lld complete=%d unanswered=%lld\n",
            (long long)rec->voucher_id, (long long)rec->stock, rec->complete ? 1 : 0,
            (long long)rec->unanswered);
    for (size_t i = 0; i < rec->n; i++)
        fprintf(f, "%lld %lld\n", (long long)rec->answers[i].order_id,
                (long long)rec->answers[i].user_id);
    for (size_t i = 0; i < rec->nsoldout; i++)
        fprintf(f, "soldout %lld\n", (long long)rec->soldout[i]);
    for (size_t i = 0; i < rec->nmaybe; i++)
        fprintf(f, "maybe %lld\n", (long long)rec->maybe[i]);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ==== reading one voucher ==== */

typedef struct vdata {
    int64_t vid;
    char kv[64], kb[64], ks[64], kd[64];

    /* step 1: stream position */
    int group_found;
    int64_t pending, lag;             /* lag -1 = unknown */
    int have_smallest;
    sid_t smallest, last_delivered;

    /* step 2: SQL */
    int64_t sql_begin, sql_end, sql_stock, sql_count;
    pairs_t sql_by_id;                /* (order id, user id), ascending id */
    pairs_t sql_by_user;              /* (user id, order id) */
    pairs_t sql_live_by_user;         /* ... of live orders (status 1, 2, 3): one per user,
                                       * the buyer's in Redis (a cancel under
                                       * --cancel-frees-buyer lets its buyer order again) */
    int64_t sql_outside, sql_outside_example;

    /* step 3: Redis snapshot */
    int r_exists, r_has_window;
    int64_t r_stock, r_begin, r_end, admitted, xlen, dead;
    int64_t seeded, epoch;            /* set by a rebuild from SQL (rebuild.h), else 0 */
    int64_t returned;                 /* units cancelled orders gave back (life.lua): the
                                       * buyers less these hold stock */
    int64_t freed;                    /* buyers a cancel or timeout removed from the buyer
                                       * hash (--cancel-frees-buyer): their orders count
                                       * in returned, no longer in the buyers */
    int64_t sql_cancelled;            /* SQL orders of status 4, 5 or 6 (cancelled; then refunded) */

    /* step 4 */
    pairs_t buyers;                   /* (user id, order id), sorted by user */
    pairs_t buyers_by_order;          /* (order id, user id) */
    pairs_t st_by_user;               /* stream entries (user id, order id) */
    pairs_t st_by_order;              /* (order id, user id) */
    pairs_t inflight_users;           /* (user id, order id) of entries in flight at step 1 */
    pairs_t inflight_orders;          /* (order id, user id) */
    int64_t st_outside, st_outside_example, st_bad;
    int have_snap_last;               /* the stream's last entry at step 3 ... */
    sid_t snap_last;
    int64_t st_orders;                /* ... and the orders of the entries up to it (an
                                       * entry holds one admission call's orders) */

    /* stock buckets (buckets.h): buckets 1..nbuckets-1 are read like bucket 0 (the
     * voucher's own keys) into bk[] and summed into the fields above */
    int nbuckets;
    int replicas_promised, replicas_in_sync;   /* the voucher's master: min-replicas-to-write
                                                * and its in-sync replicas (read_promise) */
    struct vdata *bk;
    int64_t in_transit;               /* units taken from a bucket, not yet applied */
    int64_t window_differs;           /* buckets whose window is not bucket 0's */
} vdata_t;

static void vdata_free(vdata_t *d)
{
    pairs_free(&d->sql_by_id);
    pairs_free(&d->sql_by_user);
    pairs_free(&d->sql_live_by_user);
    pairs_free(&d->buyers);
    pairs_free(&d->buyers_by_order);
    pairs_free(&d->st_by_user);
    pairs_free(&d->st_by_order);
    pairs_free(&d->inflight_users);
    pairs_free(&d->inflight_orders);
    for (int b = 1; d->bk && b < d->nbuckets; b++)
        vdata_free(&d->bk[b - 1]);
    free(d->bk);
    d->bk = NULL;
}

/* Value of a field in a flat [k, v, k, v...] reply array. */
static const redisReply *field(const redisReply *arr, const char *name)
{
    if (!arr || arr->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < arr->elements; i += 2) {
        const redisReply *k = arr->element[i];
        if (k && (k->type == REDIS_REPLY_STRING || k->type == REDIS_REPLY_STATUS) &&
            strcmp(k->str, name) == 0)
            return arr->element[i + 1];
    }
    return NULL;
}

typedef struct sgroup {
    int found;
    int64_t pending, lag;             /* lag -1 when Redis does not know it */
    sid_t last_delivered;
    int have_smallest;
    sid_t smallest;
} sgroup_t;

/* XINFO GROUPS + XPENDING (+ XINFO STREAM when lag is unknown). 0, or -1 + err.
 * pending and lag come from the one XINFO GROUPS reply, so "drained" (both 0) is one
 * moment of the group; XPENDING, a later read, gives only the smallest pending id. */
static int read_group(redisContext *c, const char *ks, sgroup_t *g, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->lag = -1;
    char why[256];
    redisReply *r = rconn_cmdf(c, why, sizeof why, "XINFO GROUPS %s", ks);
    if (!r) {
        if (strstr(why, "no such key"))
            return 0;   /* no stream: nothing was ever admitted (or it was deleted) */
        snprintf(err, errlen, "XINFO GROUPS %s: %s", ks, why);
        return -1;
    }
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *gr = r->element[i];
        const redisReply *name = field(gr, "name");
        if (!name || name->type != REDIS_REPLY_STRING || strcmp(name->str, KEY_GROUP) != 0)
            continue;
        g->found = 1;
        rconn_int(field(gr, "pending"), &g->pending);
        const redisReply *ld = field(gr, "last-delivered-id");
        if (ld && ld->type == REDIS_REPLY_STRING)
            bench_redis_sid_parse(ld->str, &g->last_delivered);
        const redisReply *lag = field(gr, "lag");
        int64_t v;
        if (lag && rconn_int(lag, &v) == 0)
            g->lag = v;
    }
    freeReplyObject(r);
    if (!g->found)
        return 0;
    if (g->lag != 0) {
        /* Redis < 7, or lag unknown after deletions: compare with the last entry id. And
         * a lag above 0 may be a stale counter: a Redis 7.0 replica does not carry the
         * group's entries-read (XREADGROUP reaches it as XCLAIM ... LASTID), so once
         * promoted it can report entries as undelivered that the group has read. The ids
         * decide: nothing is undelivered when last-delivered-id is the last entry's. */
        r = rconn_cmdf(c, why, sizeof why, "XINFO STREAM %s", ks);
        if (!r) {
            snprintf(err, errlen, "XINFO STREAM %s: %s", ks, why);
            return -1;
        }
        const redisReply *lg = field(r, "last-generated-id");
        sid_t last;
        if (lg && lg->type == REDIS_REPLY_STRING && bench_redis_sid_parse(lg->str, &last) == 0)
            g->lag = bench_redis_sid_cmp(last, g->last_delivered) <= 0 ? 0 : g->lag > 0 ? g->lag : 1;
        freeReplyObject(r);
    }
    r = rconn_cmdf(c, why, sizeof why, "XPENDING %s %s", ks, KEY_GROUP);
    if (!r) {
        snprintf(err, errlen, "XPENDING %s: %s", ks, why);
        return -1;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
        const redisReply *sm = r->element[1];
        if (sm && sm->type == REDIS_REPLY_STRING &&
            bench_redis_sid_parse(sm->str, &g->smallest) == 0)
            g->have_smallest = 1;
    }
    freeReplyObject(r);
    return 0;
}

/* ==== SQL: the product's orders, and the lab's ====
 * A database where a lab SQL step has run (docs/lab.md) holds that step's orders in
 * lab_voucher_order (lab_store.h): the audit counts and lists them with the product's, so
 * that its figures show what the step let through. They are read after the product's.
 * That table changes only while a SQL step runs, whose stock update and insert are two
 * autocommit statements anyway: no moment of the product's (count, stock) pair is lost. */

/* store_voucher_orders or lab_store_voucher_orders */
typedef int orders_page_t(store_t *s, int64_t voucher_id, int64_t after_id, size_t max,
                          store_order_t **out, size_t *n);

/* Every order of the voucher that page reads, by pages in id order, into d. */
static int read_orders(store_t *st, vdata_t *d, orders_page_t *page, char *err, size_t errlen)
{
    int64_t after = INT64_MIN;
    for (;;) {
        store_order_t *o = NULL;
        size_t n = 0;
        if (page(st, d->vid, after, PAGE, &o, &n) != STORE_OK) {
            snprintf(err, errlen, "SQL orders: %s", store_errmsg(st));
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            pairs_push(&d->sql_by_id, o[i].id, o[i].user_id);
            pairs_push(&d->sql_by_user, o[i].user_id, o[i].id);
            if (o[i].status >= 1 && o[i].status <= 3)
                pairs_push(&d->sql_live_by_user, o[i].user_id, o[i].id);
            d->sql_cancelled += o[i].status >= 4 && o[i].status <= 6;
            if (o[i].create_time < d->sql_begin || o[i].create_time >= d->sql_end) {
                if (d->sql_outside++ == 0)
                    d->sql_outside_example = o[i].id;
            }
        }
        if (n > 0)
            after = o[n - 1].id;
        free(o);
        if (n < PAGE)
            return 0;
    }
}

static int read_sql(store_t *st, vdata_t *d, char *err, size_t errlen)
{
    store_voucher_t v;
    int rc = store_voucher_get(st, d->vid, &v);
    if (rc == STORE_NOTFOUND || (rc == STORE_OK && !v.is_seckill)) {
        if (rc == STORE_OK)
            store_voucher_clear(&v);
        snprintf(err, errlen, "voucher %lld is not a flash-sale voucher in SQL", (long long)d->vid);
        return -1;
    }
    if (rc != STORE_OK) {
        snprintf(err, errlen, "SQL: %s", store_errmsg(st));
        return -1;
    }
    d->sql_begin = v.begin_time;
    d->sql_end = v.end_time;
    store_voucher_clear(&v);
    if (lab_store_voucher_counts(st, d->vid, &d->sql_count, &d->sql_stock) != STORE_OK) {
        snprintf(err, errlen, "SQL counts: %s", store_errmsg(st));
        return -1;
    }
    if (read_orders(st, d, store_voucher_orders, err, errlen) < 0)
        return -1;
    size_t product = d->sql_by_id.n;
    if (read_orders(st, d, lab_store_voucher_orders, err, errlen) < 0)
        return -1;
    if (d->sql_by_id.n > product)
        pairs_sort(&d->sql_by_id);   /* two id-ordered runs: one */
    pairs_sort(&d->sql_by_user);
    pairs_sort(&d->sql_live_by_user);
    return 0;
}

static int read_redis_snapshot(redisContext *c, vdata_t *d, char *err, size_t errlen)
{
    char why[256];
    redisAppendCommand(c, "MULTI");
    redisAppendCommand(c, "EXISTS %s", d->kv);
    redisAppendCommand(c, "HMGET %s stock begin end seeded ep returned freed", d->kv);
    redisAppendCommand(c, "HLEN %s", d->kb);
    redisAppendCommand(c, "XLEN %s", d->ks);
    redisAppendCommand(c, "XLEN %s", d->kd);
    redisAppendCommand(c, "XREVRANGE %s + - COUNT 1", d->ks);   /* its last entry's id */
    redisAppendCommand(c, "EXEC");
    redisReply *r = NULL;
    for (int i = 0; i < 7; i++) {   /* +OK and six +QUEUED */
        if (redisGetReply(c, (void **)&r) != REDIS_OK) {
            snprintf(err, errlen, "Redis: %s", c->errstr);
            return -1;
        }
        int bad = r->type == REDIS_REPLY_ERROR;
        if (bad)
            snprintf(why, sizeof why, "%s", r->str);
        freeReplyObject(r);
        if (bad) {
            snprintf(err, errlen, "Redis MULTI: %s", why);
            redisGetReply(c, (void **)&r);   /* EXEC answers EXECABORT */
            if (r)
                freeReplyObject(r);
            return -1;
        }
    }
    if (redisGetReply(c, (void **)&r) != REDIS_OK) {
        snprintf(err, errlen, "Redis: %s", c->errstr);
        return -1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
        snprintf(err, errlen, "Redis EXEC: unexpected reply");
        freeReplyObject(r);
        return -1;
    }
    int64_t v;
    d->r_exists = rconn_int(r->element[0], &v) == 0 && v > 0;
    const redisReply *h = r->element[1];
    d->r_stock = 0;
    d->r_has_window = 0;
    d->seeded = 0;
    d->epoch = 0;
    d->returned = 0;
    d->freed = 0;
    if (h->type == REDIS_REPLY_ARRAY && h->elements == 7) {
        rconn_int(h->element[0], &d->r_stock);
        d->r_has_window = rconn_int(h->element[1], &d->r_begin) == 0 &&
                          rconn_int(h->element[2], &d->r_end) == 0;
        rconn_int(h->element[3], &d->seeded);
        rconn_int(h->element[4], &d->epoch);
        rconn_int(h->element[5], &d->returned);
        rconn_int(h->element[6], &d->freed);
    }
    rconn_int(r->element[2], &d->admitted);
    rconn_int(r->element[3], &d->xlen);
    rconn_int(r->element[4], &d->dead);
    const redisReply *lr = r->element[5];
    d->have_snap_last = lr->type == REDIS_REPLY_ARRAY && lr->elements == 1 &&
                        lr->element[0]->type == REDIS_REPLY_ARRAY &&
                        lr->element[0]->elements >= 1 &&
                        lr->element[0]->element[0]->type == REDIS_REPLY_STRING &&
                        bench_redis_sid_parse(lr->element[0]->element[0]->str, &d->snap_last) == 0;
    freeReplyObject(r);
    return 0;
}

static int read_buyers(redisContext *c, vdata_t *d, char *err, size_t errlen)
{
    char why[256], cursor[32] = "0";
    do {
        redisReply *r = rconn_cmdf(c, why, sizeof why, "HSCAN %s %s COUNT %d", d->kb, cursor, PAGE);
        if (!r) {
            snprintf(err, errlen, "HSCAN %s: %s", d->kb, why);
            return -1;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING) {
            freeReplyObject(r);
            snprintf(err, errlen, "HSCAN %s: unexpected reply", d->kb);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        const redisReply *a = r->element[1];
        for (size_t i = 0; a->type == REDIS_REPLY_ARRAY && i + 1 < a->elements; i += 2) {
            int64_t u = 0, o = 0;
            if (rconn_int(a->element[i], &u) != 0 || rconn_int(a->element[i + 1], &o) != 0)
                u = o = -1;   /* not numbers: will not match anything in SQL */
            pairs_push(&d->buyers, u, o);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    /* HSCAN may return an element twice; the hash holds each user once. */
    pairs_sort(&d->buyers);
    size_t w = 0;
    for (size_t i = 0; i < d->buyers.n; i++)
        if (w == 0 || d->buyers.v[i].a != d->buyers.v[w - 1].a || d->buyers.v[i].b != d->buyers.v[w - 1].b)
            d->buyers.v[w++] = d->buyers.v[i];
    d->buyers.n = w;
    for (size_t i = 0; i < d->buyers.n; i++)
        pairs_push(&d->buyers_by_order, d->buyers.v[i].b, d->buyers.v[i].a);
    pairs_sort(&d->buyers_by_order);
    return 0;
}

static int in_flight(const vdata_t *d, sid_t id)
{
    if (!d->group_found)
        return 1;   /* no consumer group: nothing was ever delivered */
    if (d->have_smallest && bench_redis_sid_cmp(id, d->smallest) >= 0)
        return 1;
    return bench_redis_sid_cmp(id, d->last_delivered) > 0;
}

/* One entry of the stream (sentry_scan): its orders into d's stream arrays. */
static int stream_entry(void *ctx, const char *eid, const sentry_t *o, size_t n,
                        const char *reason)
{
    vdata_t *d = ctx;
    sid_t sid;
    if (bench_redis_sid_parse(eid, &sid) != 0)
        return 0;
    if (reason != NULL) {
        d->st_bad++;
        return 0;
    }
    int flight = in_flight(d, sid);
    if (d->have_snap_last && bench_redis_sid_cmp(sid, d->snap_last) <= 0)
        d->st_orders += (int64_t)n;
    for (size_t i = 0; i < n; i++) {   /* an entry holds one call's orders */
        int64_t user = o[i].user_id, oid = o[i].order_id;
        pairs_push(&d->st_by_user, user, oid);
        pairs_push(&d->st_by_order, oid, user);
        int64_t ts = o[i].ts > 0 ? o[i].ts : (int64_t)(sid.ms / 1000);
        if (d->r_has_window && (ts < d->r_begin || ts >= d->r_end)) {
            if (d->st_outside++ == 0)
                d->st_outside_example = oid;
        }
        if (flight) {
            pairs_push(&d->inflight_users, user, oid);
            pairs_push(&d->inflight_orders, oid, user);
        }
    }
    return 0;
}

static int read_stream(redisContext *c, vdata_t *d, char *err, size_t errlen)
{
    if (sentry_scan(c, d->ks, stream_entry, d, err, errlen) != 0)   /* sentry.h */
        return -1;
    pairs_sort(&d->st_by_user);
    pairs_sort(&d->st_by_order);
    pairs_sort(&d->inflight_users);
    pairs_sort(&d->inflight_orders);
    return 0;
}

/* ==== checks and the report ==== */

enum { C_OK, C_FAIL, C_INFO, C_SKIP };
static const char *const cstat[] = {"ok", "FAIL", "info", "skip"};

typedef struct check {
    const char *inv;                  /* "I1".."I5" or "--" */
    const char *id;
    int status;
    char detail[DETAIL];
} check_t;

typedef struct report {
    check_t c[MAX_CHECKS];
    int n;
    int violations;
    /* Every order answered success that is in neither SQL nor the stream: the exact
     * list a reader needs after a Redis crash (F3), not just a count. Owned; freed with
     * the report. */
    int64_t *vanished;
    size_t nvanished, capvanished;
    /* The lab's figures (lab_figures): what each course step got wrong, as numbers. */
    int64_t lab_oversold, lab_dup_buyers, lab_lost, lab_refused_in_stock, lab_buyers;
} report_t;

static void report_vanished(report_t *rp, int64_t id)
{
    if (rp->nvanished == rp->capvanished) {
        rp->capvanished = rp->capvanished ? rp->capvanished * 2 : 64;
        rp->vanished = xrealloc(rp->vanished, rp->capvanished * sizeof *rp->vanished);
    }
    rp->vanished[rp->nvanished++] = id;
}

static void add(report_t *rp, const char *inv, const char *id, int status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add(report_t *rp, const char *inv, const char *id, int status, const char *fmt, ...)
{
    if (rp->n >= MAX_CHECKS)
        return;
    check_t *c = &rp->c[rp->n++];
    c->inv = inv;
    c->id = id;
    c->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    if (status == C_FAIL)
        rp->violations++;
}

#define LL(x) ((long long)(x))

/* ==== the order mode: which store keeps the sale ====
 * A mode that admits in Redis (stream, queue) keeps the sale in Redis and SQL follows; a
 * mode whose row has sql_counts (sync, the lab's SQL steps: order_mode.h) takes each order
 * in SQL alone and leaves Redis the published voucher. Each is checked by what it keeps. */
typedef struct audit_mode {
    char name[64];          /* the mode's name, or the names the live instances gave */
    int sql;                /* 1: SQL alone keeps the sale */
    char how[160];          /* how it was found, for the report */
} audit_mode_t;

/* Adds one announced mode name to m. */
static void mode_seen(audit_mode_t *m, const char *name, int *sql_seen, int *redis_seen)
{
    const order_mode_row_t *row = order_mode_row(order_mode_find(name));
    if (!row)
        return;   /* a mode this binary does not know: it tells nothing */
    if (row->sql_counts)
        (*sql_seen)++;
    else
        (*redis_seen)++;
    size_t len = strlen(m->name);
    if (len == 0)
        snprintf(m->name, sizeof m->name, "%s", name);
    else if (strcmp(m->name, name) != 0 && len + strlen(name) + 3 < sizeof m->name)
        snprintf(m->name + len, sizeof m->name - len, ", %s", name);
}

/* The modes the live instances announce for the sale board (board.lua's keys), read-only:
 * SMEMBERS of the set, GET of each instance's snapshot. Unreadable parts are left out. */
static void announced_modes(rcl_sync_route_t *rt, audit_mode_t *m, int *sql_seen,
                            int *redis_seen)
{
    char err[256];
    redisContext *c = rcl_sync_route_key(rt, KEY_BOARD_INSTANCES, err, sizeof err);
    redisReply *set = c ? rconn_cmdf(c, err, sizeof err, "SMEMBERS %s", KEY_BOARD_INSTANCES)
                        : NULL;
    for (size_t i = 0; set && set->type == REDIS_REPLY_ARRAY && i < set->elements; i++) {
        const redisReply *e = set->element[i];
        if (e->type != REDIS_REPLY_STRING)
            continue;
        redisReply *snap = rconn_cmdf(c, err, sizeof err, "GET %s%b", KEY_BOARD_INSTANCE,
                                      e->str, (size_t)e->len);
        json_t *j = snap && snap->type == REDIS_REPLY_STRING
                        ? json_loadb(snap->str, snap->len, 0, NULL) : NULL;
        const char *name = json_string_value(json_object_get(j, "mode"));
        if (name)
            mode_seen(m, name, sql_seen, redis_seen);
        json_decref(j);
        if (snap)
            freeReplyObject(snap);
    }
    if (set)
        freeReplyObject(set);
}

/* o->mode, or else the live instances' (stream's checks when none is live, or when they
 * run modes of both kinds). 0, or -1 for an unknown --mode with the reason in err. */
static int audit_mode(const audit_opts_t *o, rcl_sync_route_t *rt, audit_mode_t *m, char *err,
                      size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (o->mode) {
        const order_mode_row_t *row = order_mode_row(order_mode_find(o->mode));
        if (!row) {
            snprintf(err, errlen, "--mode %s: not a mode of `seckill serve --mode`", o->mode);
            return -1;
        }
        snprintf(m->name, sizeof m->name, "%s", o->mode);
        m->sql = row->sql_counts != NULL;
        snprintf(m->how, sizeof m->how, "given");
        return 0;
    }
    int sql_seen = 0, redis_seen = 0;
    announced_modes(rt, m, &sql_seen, &redis_seen);
    if (sql_seen != 0 && redis_seen == 0) {
        m->sql = 1;
        snprintf(m->how, sizeof m->how, "announced by the live instances");
    } else if (redis_seen != 0 && sql_seen == 0) {
        snprintf(m->how, sizeof m->how, "announced by the live instances");
    } else {
        snprintf(m->how, sizeof m->how, "%s: checked as stream mode (--mode names it)",
                 sql_seen ? "live instances keep sales in Redis and in SQL"
                          : "no live instance announced its mode");
        snprintf(m->name, sizeof m->name, "stream");
    }
    return 0;
}

/* I3 in a mode that admits in Redis: every live SQL order is a buyer with the same order
 * id, and every buyer's order is in SQL (in-flight entries excused unless drained).
 * Returns how many buyers are not in SQL. */
static int64_t check_admitted(const vdata_t *d, int drained_wanted, report_t *rp)
{
    int64_t not_admitted = 0, other_id = 0, ex_na = 0;
    const pairs_t *live = &d->sql_live_by_user;
    for (size_t i = 0; i < live->n; i++) {
        ssize_t k = pairs_find(&d->buyers, live->v[i].a);
        if (k < 0) {
            if (not_admitted++ == 0)
                ex_na = live->v[i].b;
        } else if (d->buyers.v[k].b != live->v[i].b) {
            if (not_admitted + other_id++ == 0)
                ex_na = live->v[i].b;
        }
    }
    if (not_admitted || other_id)
        add(rp, "I3", "sql-admitted", C_FAIL,
            "%lld SQL orders were never admitted in Redis, %lld carry another order id than "
            "the buyer hash (e.g. order %lld)", LL(not_admitted), LL(other_id), LL(ex_na));
    else
        add(rp, "I3", "sql-admitted", C_OK, "all %lld live SQL orders are buyers in Redis with "
                                            "the same order id", LL(live->n));
    int64_t missing = 0, excused = 0, ex_m = 0;
    for (size_t i = 0; i < d->buyers.n; i++) {
        if (pairs_find(&d->sql_by_id, d->buyers.v[i].b) >= 0)
            continue;
        missing++;
        if (pairs_find(&d->inflight_users, d->buyers.v[i].a) >= 0)
            excused++;
        else if (missing - excused == 1)
            ex_m = d->buyers.v[i].b;
    }
    char ebuf[64] = "";
    int mfail = missing - excused > 0 || (drained_wanted && missing > 0);
    if (mfail && missing - excused > 0)
        snprintf(ebuf, sizeof ebuf, "; e.g. order %lld", LL(ex_m));
    add(rp, "I3", "admitted-persisted", mfail ? C_FAIL : C_OK,
        "%lld buyers, %lld SQL orders: %lld admitted orders not in SQL, of which %lld still in "
        "the stream%s%s",
        LL(d->buyers.n), LL(d->sql_by_user.n), LL(missing), LL(excused),
        drained_wanted && missing ? " (after drain: none may be)" : "", ebuf);
    return missing;
}

static void check_voucher(const audit_opts_t *o, const audit_mode_t *m, vdata_t *d,
                          int drained_wanted, report_t *rp)
{
    int64_t S = o->initial_stock;
    int known = S >= 0;
    int drained = d->pending == 0 && d->lag == 0;   /* at step 1 */
    /* The skip detail of a Redis-side check in a mode that keeps the sale in SQL. */
    char sqlonly[96];
    snprintf(sqlonly, sizeof sqlonly, "%.60s mode takes each order in SQL alone", m->name);

    /* ---- I1 ---- */
    /* A cancelled order gave its unit back: the stock equations count the buyers holding
     * one (live), as SQL counts orders of status 1, 2 or 3 (store_voucher_counts). A freed
     * buyer left the buyer hash with that cancel: initial = stock + buyers - returned +
     * freed. */
    int64_t live = d->admitted - d->returned + d->freed;
    if (known && m->sql)
        add(rp, "I1", "no-oversell", d->sql_count <= S ? C_OK : C_FAIL,
            "SQL orders %lld, initial stock %lld", LL(d->sql_count), LL(S));
    else if (known)
        add(rp, "I1", "no-oversell", d->sql_count <= S && live <= S ? C_OK : C_FAIL,
            "SQL live orders %lld, admitted %lld less %lld cancelled, initial stock %lld",
            LL(d->sql_count), LL(d->admitted), LL(d->returned), LL(S));
    else
        add(rp, "I1", "no-oversell", C_SKIP,
            "initial stock not given (--stock): only stock-nonneg and stock-agree apply; "
            "derived initial %lld", LL(d->r_stock + live));
    add(rp, "I1", "stock-nonneg", d->r_stock >= 0 && d->sql_stock >= 0 ? C_OK : C_FAIL,
        "Redis stock %lld, SQL stock %lld", LL(d->r_stock), LL(d->sql_stock));
    if (known && m->sql) {
        add(rp, "I1", "redis-stock", C_SKIP, "%s", sqlonly);
    } else if (known) {
        add(rp, "I1", "redis-stock", d->r_stock == S - live ? C_OK : C_FAIL,
            "Redis stock %lld %s initial %lld - live admitted %lld = %lld", LL(d->r_stock),
            d->r_stock == S - live ? "=" : "!=", LL(S), LL(live), LL(S - live));
    }
    if (known) {
        add(rp, "I1", "sql-stock", d->sql_stock == S - d->sql_count ? C_OK : C_FAIL,
            "SQL stock %lld %s initial %lld - persisted %lld = %lld", LL(d->sql_stock),
            d->sql_stock == S - d->sql_count ? "=" : "!=", LL(S), LL(d->sql_count),
            LL(S - d->sql_count));
    } else {
        add(rp, "I1", "redis-stock", C_SKIP, "needs --stock");
        add(rp, "I1", "sql-stock", C_SKIP, "needs --stock");
    }
    int64_t ir = d->r_stock + live, is = d->sql_stock + d->sql_count;
    add(rp, "I1", "stock-agree", ir == is ? C_OK : C_FAIL,
        "Redis stock + admitted = %lld %s SQL stock + persisted = %lld%s", LL(ir),
        ir == is ? "=" : "!=", LL(is), ir == is ? "" : " (stock drift or an order outside "
                                                        "the pipeline)");
    /* Each cancel gave one unit back in Redis (returned) and, once the writer applied its
     * event, one in SQL (status 4 with stock + 1 in one transaction). A mode that keeps the
     * sale in SQL cancels there alone: no count in Redis (sql-stock and stock-agree hold
     * its returned units). */
    if (m->sql)
        add(rp, "I1", "cancel-returned", C_SKIP, "%s", sqlonly);
    else
        add(rp, "I1", "cancel-returned",
            d->returned == d->sql_cancelled ? C_OK : drained ? C_FAIL : C_INFO,
            "units returned by cancels: Redis %lld %s SQL cancelled or refunded orders %lld%s",
            LL(d->returned), d->returned == d->sql_cancelled ? "=" : "!=",
            LL(d->sql_cancelled),
            d->returned == d->sql_cancelled || drained ? "" : " (events still in the stream)");
    /* After a rebuild from SQL, `seeded` buyers came from SQL, not from this stream. */
    int64_t via_stream = d->admitted - d->seeded;
    if (m->sql) {   /* Redis holds the published voucher, and the buyers a rebuild seeded */
        add(rp, "I1", "redis-idle", via_stream == 0 && d->xlen == 0 ? C_OK : C_FAIL,
            "%lld buyers admitted in Redis, %lld stream entries%s", LL(via_stream),
            LL(d->xlen), via_stream || d->xlen ? " (an instance of a Redis mode sold this "
                                                 "voucher too)" : "");
    } else {
        /* Counted in the entries that were there at the snapshot (step 3): an entry holds
         * the orders of one admission call (sentry.h). */
        /* a freed buyer's cancelled order is in the stream, no longer a buyer */
        via_stream += d->freed;
        add(rp, "I1", "stream-entries", d->st_orders == via_stream ? C_OK : C_FAIL,
            "stream orders %lld (in %lld entries) %s admitted %lld%s%s", LL(d->st_orders),
            LL(d->xlen), d->st_orders == via_stream ? "=" : "!=",
            LL(via_stream), d->seeded ? " (buyers minus those rebuilt from SQL)" :
                            d->freed ? " (buyers and freed buyers)" : "",
            d->st_bad ? " (some entries unreadable)" : "");
    }

    /* ---- I2 ---- */
    int64_t ex = 0;
    int64_t dsql = pairs_dups(&d->sql_live_by_user, &ex);
    if (dsql)
        add(rp, "I2", "dup-sql", C_FAIL,
            "%lld users have more than one live SQL order, e.g. user %lld", LL(dsql), LL(ex));
    else
        add(rp, "I2", "dup-sql", C_OK, "%lld live SQL orders, %lld distinct users",
            LL(d->sql_live_by_user.n), LL(d->sql_live_by_user.n));
    int64_t dbo = pairs_dups(&d->buyers_by_order, &ex);
    if (dbo)
        add(rp, "I2", "dup-buyers", C_FAIL, "%lld order ids belong to more than one buyer, e.g. %lld",
            LL(dbo), LL(ex));
    else
        add(rp, "I2", "dup-buyers", C_OK, "%lld buyers, %lld distinct order ids", LL(d->buyers.n),
            LL(d->buyers_by_order.n));
    int64_t exo = 0;
    int64_t dsu = pairs_dups(&d->st_by_user, &ex), dso = pairs_dups(&d->st_by_order, &exo);
    /* a freed buyer may order again: at most one more stream order per freed buyer */
    if (dsu <= d->freed && d->freed > 0 && !dso)
        add(rp, "I2", "dup-stream", C_OK, "%lld orders, %lld users with more than one (at "
            "most the %lld freed buyers), one per order id", LL(d->st_by_user.n), LL(dsu),
            LL(d->freed));
    else if (dsu || dso)
        add(rp, "I2", "dup-stream", C_FAIL,
            "%lld users with more than one stream entry (e.g. user %lld), %lld order ids "
            "queued twice (e.g. %lld)", LL(dsu), LL(ex), LL(dso), LL(exo));
    else
        add(rp, "I2", "dup-stream", C_OK, "%lld orders, one per user and per order id",
            LL(d->st_by_user.n));
    pairs_t ans = {0}, ans_user = {0};
    if (o->have_answers) {
        for (size_t i = 0; i < o->nanswers; i++) {
            pairs_push(&ans, o->answers[i].order_id, o->answers[i].user_id);
            if (o->answers[i].user_id)
                pairs_push(&ans_user, o->answers[i].user_id, o->answers[i].order_id);
        }
        pairs_sort(&ans);
        pairs_sort(&ans_user);
        int64_t da = pairs_dups(&ans, &ex), du = pairs_dups(&ans_user, &exo);
        if (da || du)
            add(rp, "I2", "dup-answers", C_FAIL,
                "%lld order ids answered success twice (e.g. %lld), %lld users answered "
                "success twice (e.g. %lld)", LL(da), LL(ex), LL(du), LL(exo));
        else
            add(rp, "I2", "dup-answers", C_OK, "%lld success answers, all distinct%s", LL(ans.n),
                ans_user.n ? " (orders and users)" : "");
    } else {
        add(rp, "I2", "dup-answers", C_SKIP, "no record of answers (--orders)");
    }

    /* ---- I3 ---- */
    int64_t missing = 0;   /* admitted orders not in SQL (stream and queue modes) */
    if (m->sql) {
        add(rp, "I3", "sql-admitted", C_SKIP, "%s", sqlonly);
        add(rp, "I3", "admitted-persisted", C_SKIP, "%s", sqlonly);
    } else {
        missing = check_admitted(d, drained_wanted, rp);
    }
    char ebuf[64] = "";
    if (o->have_answers) {
        int64_t lost = 0, inflight = 0, wrong_user = 0, ex_l = 0;
        for (size_t i = 0; i < ans.n; i++) {
            if (i > 0 && ans.v[i].a == ans.v[i - 1].a)
                continue;
            ssize_t k = pairs_find(&d->sql_by_id, ans.v[i].a);
            if (k < 0) {
                if (!drained_wanted && pairs_find(&d->inflight_orders, ans.v[i].a) >= 0) {
                    inflight++;
                } else {
                    if (lost++ == 0)
                        ex_l = ans.v[i].a;
                    report_vanished(rp, ans.v[i].a);
                }
            } else if (ans.v[i].b && d->sql_by_id.v[k].b != ans.v[i].b) {
                if (lost + wrong_user++ == 0)
                    ex_l = ans.v[i].a;
            }
        }
        ebuf[0] = '\0';
        if (lost || wrong_user)
            snprintf(ebuf, sizeof ebuf, "; e.g. order %lld", LL(ex_l));
        add(rp, "I3", "answered-persisted", lost || wrong_user ? C_FAIL : C_OK,
            "%lld answered success: %lld not in SQL, %lld stored for another user, %lld still "
            "in the stream%s%s",
            LL(ans.n), LL(lost), LL(wrong_user), LL(inflight), ebuf,
            lost && d->epoch > 0 ? " (Redis was rebuilt from SQL: orders answered but not "
                                   "yet persisted when Redis lost them are gone)" : "");
        if (o->answers_complete) {
            /* A 503 says the order may have been taken (docs/api.md): an order of a
             * buyer answered 503 is excused; 503s to buyers the client cannot name
             * excuse that many orders, as lost answers do. */
            pairs_t maybe = {0};
            int64_t tol = o->unanswered > 0 ? o->unanswered : 0, never = 0, maybe_n = 0,
                    ex_n = 0;
            for (size_t i = 0; i < o->nmaybe; i++) {
                if (o->maybe_users[i] != 0)
                    pairs_push(&maybe, o->maybe_users[i], 0);
                else
                    tol++;
            }
            pairs_sort(&maybe);
            for (size_t i = 0; i < d->sql_by_id.n; i++) {
                if (pairs_find(&ans, d->sql_by_id.v[i].a) >= 0)
                    continue;
                if (pairs_find(&maybe, d->sql_by_id.v[i].b) >= 0)
                    maybe_n++;
                else if (never++ == 0)
                    ex_n = d->sql_by_id.v[i].a;
            }
            pairs_free(&maybe);
            ebuf[0] = '\0';
            if (never)
                snprintf(ebuf, sizeof ebuf, "; e.g. order %lld", LL(ex_n));
            add(rp, "I3", "persisted-answered", never > tol ? C_FAIL : C_OK,
                "%lld SQL orders were never answered success (answers the client lost: "
                "%lld)%s; %lld more of buyers answered 503 (may have been taken)",
                LL(never), LL(tol), ebuf, LL(maybe_n));
        } else {
            add(rp, "I3", "persisted-answered", C_SKIP,
                "the record does not cover every request to this voucher");
        }
    } else {
        add(rp, "I3", "answered-persisted", C_SKIP, "no record of answers (--orders)");
        add(rp, "I3", "persisted-answered", C_SKIP, "no record of answers (--orders)");
    }
    pairs_free(&ans);
    pairs_free(&ans_user);

    /* ---- I5 ---- */
    char b[32], e[32];
    fmt_time(d->sql_begin, b, sizeof b);
    fmt_time(d->sql_end, e, sizeof e);
    if (d->sql_outside || d->st_outside)
        add(rp, "I5", "window", C_FAIL,
            "%lld SQL orders and %lld stream entries outside [%s, %s), e.g. order %lld",
            LL(d->sql_outside), LL(d->st_outside), b, e,
            LL(d->sql_outside ? d->sql_outside_example : d->st_outside_example));
    else
        add(rp, "I5", "window", C_OK, "every order created in [%s, %s)", b, e);
    if (!d->r_has_window)
        add(rp, "I5", "window-agree", d->r_exists ? C_FAIL : C_SKIP,
            d->r_exists ? "Redis voucher hash has no begin/end" : "voucher not in Redis");
    else
        add(rp, "I5", "window-agree",
            d->r_begin == d->sql_begin && d->r_end == d->sql_end ? C_OK : C_FAIL,
            "Redis [%lld, %lld) vs SQL [%lld, %lld)", LL(d->r_begin), LL(d->r_end),
            LL(d->sql_begin), LL(d->sql_end));

    /* ---- stream ---- */
    if (!m->sql && d->replicas_promised > 0) {
        /* Admitted, not in SQL, on a master short of its replicas: no writer persists them
         * (docs/redis-cluster.md, "A master died and did not come back"). */
        int short_ = d->replicas_in_sync < d->replicas_promised;
        add(rp, "--", "stranded", short_ && missing > 0 ? C_FAIL : C_OK,
            "master has %d of %d promised in-sync replicas: %lld admitted orders not in SQL "
            "%s", d->replicas_in_sync, d->replicas_promised, LL(missing),
            !short_ ? "(persistable)" : missing > 0 ? "are STRANDED until a replica "
            "attaches (the writer persists only replicated orders)" : "(none stranded; "
            "the voucher is not sellable until a replica attaches)");
    }
    if (m->sql)
        add(rp, "--", "stream-drained", C_SKIP, "%.60s mode writes no order stream", m->name);
    else if (drained_wanted)
        add(rp, "--", "stream-drained", drained ? C_OK : C_FAIL, "pending %lld, lag %lld",
            LL(d->pending), LL(d->lag));
    else
        add(rp, "--", "stream-drained", C_INFO, "pending %lld, lag %lld%s", LL(d->pending),
            LL(d->lag), drained ? " (drained)" : " (orders still on their way to SQL)");
    if (d->nbuckets > 1) {
        int64_t twice = pairs_dups(&d->buyers, &ex);
        add(rp, "I2", "one-bucket", twice == 0 && d->window_differs == 0 ? C_OK : C_FAIL,
            "%d stock buckets: %lld users bought in more than one (e.g. user %lld), %lld "
            "buckets with another window than bucket 0's; %lld units in transfer between "
            "buckets (counted in Redis stock)", d->nbuckets, LL(twice), LL(twice ? ex : 0),
            LL(d->window_differs), LL(d->in_transit));
    }
    add(rp, "--", "dead-letters", d->dead == 0 ? C_OK : C_FAIL,
        "%lld entries in %s%s", LL(d->dead), d->kd, d->dead ? " (admitted orders the writer "
                                                              "could not write)" : "");
}

/* The lab's figures (docs/lab.md), from the same data the checks use:
 *   oversold          SQL orders beyond the initial stock
 *   duplicate buyers  users with more than one SQL order
 *   lost              admitted orders (buyer hash) or success answers not in SQL
 *   refused in stock  buyers answered "sold out" who have no order, while stock is left
 *                     (needs their user ids: seeded tokens, not API logins)
 *                     at the end: stock only goes down, so every such refusal happened
 *                     while stock remained. The stock that decided is Redis's where the
 *                     voucher is sold through Redis, else SQL's: the smaller of the two. */
static void lab_figures(const audit_opts_t *o, const vdata_t *d, report_t *rp)
{
    int64_t ex = 0;
    rp->lab_oversold = o->initial_stock >= 0 && d->sql_count > o->initial_stock
                           ? d->sql_count - o->initial_stock : 0;
    rp->lab_dup_buyers = pairs_dups(&d->sql_by_user, &ex);
    pairs_t lost = {0};
    for (size_t i = 0; i < d->buyers.n; i++)
        if (pairs_find(&d->sql_by_user, d->buyers.v[i].a) < 0)
            pairs_push(&lost, d->buyers.v[i].b, 0);
    for (size_t i = 0; o->have_answers && i < o->nanswers; i++)
        if (pairs_find(&d->sql_by_id, o->answers[i].order_id) < 0)
            pairs_push(&lost, o->answers[i].order_id, 0);
    pairs_sort(&lost);
    rp->lab_lost = 0;
    for (size_t i = 0; i < lost.n; i++)
        if (i == 0 || lost.v[i].a != lost.v[i - 1].a)
            rp->lab_lost++;
    pairs_free(&lost);
    int64_t left = d->sql_stock;
    if (d->r_exists && d->r_stock < left)
        left = d->r_stock;
    rp->lab_refused_in_stock = 0;
    if (left > 0 && o->nsoldout > 0) {
        pairs_t ref = {0};
        for (size_t i = 0; i < o->nsoldout; i++)   /* 0: a buyer the client cannot name */
            if (o->soldout_users[i] != 0 && pairs_find(&d->sql_by_user, o->soldout_users[i]) < 0)
                pairs_push(&ref, o->soldout_users[i], 0);
        pairs_sort(&ref);
        for (size_t i = 0; i < ref.n; i++)
            if (i == 0 || ref.v[i].a != ref.v[i - 1].a)
                rp->lab_refused_in_stock++;
        pairs_free(&ref);
    }
    rp->lab_buyers = 0;   /* distinct users with an order */
    for (size_t i = 0; i < d->sql_by_user.n; i++)
        if (i == 0 || d->sql_by_user.v[i].a != d->sql_by_user.v[i - 1].a)
            rp->lab_buyers++;
}

static void print_report(FILE *out, const vdata_t *d, const audit_opts_t *o,
                         const audit_mode_t *m, const report_t *rp)
{
    char b[32], e[32];
    fmt_time(d->sql_begin, b, sizeof b);
    fmt_time(d->sql_end, e, sizeof e);
    fprintf(out, "voucher %lld: window [%s, %s), initial stock %s\n", LL(d->vid), b, e,
            o->initial_stock >= 0 ? "given" : "not given");
    fprintf(out, "  mode:  %s (%s): the sale is kept in %s\n", m->name, m->how,
            m->sql ? "SQL alone" : "Redis, and SQL follows");
    fprintf(out, "  Redis: stock %lld, admitted %lld, stream %lld entries (pending %lld, lag "
                 "%lld), dead letters %lld%s\n",
            LL(d->r_stock), LL(d->admitted), LL(d->xlen), LL(d->pending), LL(d->lag), LL(d->dead),
            d->r_exists ? "" : " [no voucher hash]");
    fprintf(out, "  SQL:   stock %lld, orders %lld\n", LL(d->sql_stock), LL(d->sql_count));
    if (d->epoch > 0)
        fprintf(out, "  rebuilt from SQL: Redis generation %lld, %lld buyers seeded from SQL\n",
                LL(d->epoch), LL(d->seeded));
    for (int i = 0; i < rp->n; i++)
        fprintf(out, "  %-4s  %s %-19s %s\n", cstat[rp->c[i].status], rp->c[i].inv, rp->c[i].id,
                rp->c[i].detail);
    fprintf(out, "  lab:  oversold %lld, duplicate buyers %lld, lost admitted orders %lld, "
                 "refused while stock remained %lld (%lld buyers with an order)\n",
            LL(rp->lab_oversold), LL(rp->lab_dup_buyers), LL(rp->lab_lost),
            LL(rp->lab_refused_in_stock), LL(rp->lab_buyers));
}

static void json_report(sb_t *j, const vdata_t *d, const audit_opts_t *o,
                        const audit_mode_t *m, const report_t *rp)
{
    sb_puts(j, "{\"mode\":");
    sb_json_str(j, m->name, strlen(m->name));
    sb_printf(j, ",\"kept_in\":\"%s\",", m->sql ? "sql" : "redis");
    sb_printf(j,
              "\"voucher\":%lld,\"initial_stock\":%lld,\"begin\":%lld,\"end\":%lld,"
              "\"redis\":{\"stock\":%lld,\"admitted\":%lld,\"stream_entries\":%lld,"
              "\"pending\":%lld,\"lag\":%lld,\"dead_letters\":%lld},"
              "\"sql\":{\"stock\":%lld,\"orders\":%lld},\"violations\":%d,\"checks\":[",
              LL(d->vid), LL(o->initial_stock), LL(d->sql_begin), LL(d->sql_end), LL(d->r_stock),
              LL(d->admitted), LL(d->xlen), LL(d->pending), LL(d->lag), LL(d->dead),
              LL(d->sql_stock), LL(d->sql_count), rp->violations);
    for (int i = 0; i < rp->n; i++) {
        sb_printf(j, "%s{\"invariant\":\"%s\",\"check\":\"%s\",\"status\":\"%s\",\"detail\":",
                  i ? "," : "", rp->c[i].inv, rp->c[i].id, rp->c[i].status == C_FAIL ? "fail"
                                                           : rp->c[i].status == C_OK  ? "ok"
                                                           : rp->c[i].status == C_INFO ? "info"
                                                                                       : "skip");
        sb_json_str(j, rp->c[i].detail, strlen(rp->c[i].detail));
        sb_puts(j, "}");
    }
    sb_printf(j, "],\"lab\":{\"oversold\":%lld,\"duplicate_buyers\":%lld,\"lost\":%lld,"
                 "\"refused_in_stock\":%lld,\"buyers\":%lld}",
              LL(rp->lab_oversold), LL(rp->lab_dup_buyers), LL(rp->lab_lost),
              LL(rp->lab_refused_in_stock), LL(rp->lab_buyers));
    sb_puts(j, ",\"vanished\":[");
    for (size_t k = 0; k < rp->nvanished; k++)
        sb_printf(j, "%s%lld", k ? "," : "", LL(rp->vanished[k]));
    sb_puts(j, "]}");
}

/* ==== stock buckets ==== */

/* K, from bucket 0's voucher hash (field buckets; absent: 1). */
static int bucket_count(redisContext *c, const vdata_t *d)
{
    char why[128];
    redisReply *r = rconn_cmdf(c, why, sizeof why, "HGET %s buckets", d->kv);
    int64_t k = 1;
    if (r)
        rconn_int(r, &k);
    freeReplyObject(r);
    return k >= 2 && k <= KEY_BUCKETS_MAX ? (int)k : 1;
}

static int bucket_keys(vdata_t *t, int64_t vid, int b, int k)
{
    char tag[48];
    t->vid = vid;
    return key_btag(tag, sizeof tag, vid, b, k) < 0 || key_voucher_t(t->kv, sizeof t->kv, tag) < 0 ||
                   key_buyers_t(t->kb, sizeof t->kb, tag) < 0 ||
                   key_stream_t(t->ks, sizeof t->ks, tag) < 0 || key_dead_t(t->kd, sizeof t->kd, tag) < 0
               ? -1
               : 0;
}

/* Reads the consumer group of t's stream (t->ks) into t's stream-position fields. */
/* The voucher's master and --redis-wait-replicas' promise (min-replicas-to-write, set by
 * the writer: src/writer/writer_guard.c): how many in-sync replicas it has (online, lag
 * within min-replicas-max-lag). Short of the promise, its admissions not yet in SQL are
 * stranded: the writer persists only replicated orders. Best effort: a Redis that does not
 * answer CONFIG GET (renamed, ACL) counts as promising nothing. */
static void read_promise(redisContext *c, vdata_t *d)
{
    char why[128];
    int64_t n = 0, maxlag = 10;
    d->replicas_promised = d->replicas_in_sync = 0;
    redisReply *r = rconn_cmdf(c, why, sizeof why, "CONFIG GET min-replicas-*");
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        if (k->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(k->str, "min-replicas-to-write") == 0)
            rconn_int(r->element[i + 1], &n);
        else if (strcmp(k->str, "min-replicas-max-lag") == 0)
            rconn_int(r->element[i + 1], &maxlag);
    }
    freeReplyObject(r);
    if (n <= 0)
        return;
    d->replicas_promised = (int)n;
    r = rconn_cmdf(c, why, sizeof why, "INFO replication");
    for (const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "\nslave") : NULL;
         p; p = strstr(p + 1, "\nslave")) {
        char state[32];
        int lag;
        if (sscanf(p, "\nslave%*d:ip=%*[^,],port=%*d,state=%31[^,],offset=%*d,lag=%d", state,
                   &lag) == 2 && strcmp(state, "online") == 0 && lag <= maxlag)
            d->replicas_in_sync++;
    }
    freeReplyObject(r);
}

static int read_vgroup(redisContext *c, vdata_t *t, char *err, size_t errlen)
{
    read_promise(c, t);
    sgroup_t g;
    if (read_group(c, t->ks, &g, err, errlen) < 0)
        return -1;
    t->group_found = g.found;
    t->pending = g.pending;
    t->lag = g.found ? g.lag : 0;
    t->have_smallest = g.have_smallest;
    t->smallest = g.smallest;
    t->last_delivered = g.last_delivered;
    return 0;
}

/* Step 1 for buckets 1..K-1 (before SQL, as for bucket 0): their stream positions. */
static int read_bucket_groups(rcl_sync_route_t *rt, redisContext *c0, vdata_t *d, char *err,
                              size_t errlen)
{
    d->nbuckets = bucket_count(c0, d);
    if (d->nbuckets < 2)
        return 0;
    d->bk = xcalloc((size_t)d->nbuckets - 1, sizeof *d->bk);
    for (int b = 1; b < d->nbuckets; b++) {
        vdata_t *t = &d->bk[b - 1];
        redisContext *c;
        if (bucket_keys(t, d->vid, b, d->nbuckets) < 0) {
            snprintf(err, errlen, "bucket %d: key out of range", b);
            return -1;
        }
        if (!(c = rcl_sync_route_key(rt, t->ks, err, errlen)) || read_vgroup(c, t, err, errlen) < 0)
            return -1;
    }
    return 0;
}

static void pairs_append(pairs_t *to, const pairs_t *from)
{
    for (size_t i = 0; i < from->n; i++)
        pairs_push(to, from->v[i].a, from->v[i].b);
    pairs_sort(to);
}

/* Steps 3 and 4 for buckets 1..K-1, summed into d; then the units in transfer, which
 * count as Redis stock (they are in no bucket for the moment). Each bucket is one
 * moment of its own: on a quiet voucher the sums are exact, during a sale they mix
 * moments a few milliseconds apart. */
static int read_bucket_rest(rcl_sync_route_t *rt, vdata_t *d, char *err, size_t errlen)
{
    for (int b = 1; b < d->nbuckets; b++) {
        vdata_t *t = &d->bk[b - 1];
        redisContext *c = rcl_sync_route_key(rt, t->ks, err, errlen);
        if (!c || read_redis_snapshot(c, t, err, errlen) < 0)
            return -1;
        if (!t->group_found)
            t->lag = t->xlen;
        if (read_buyers(c, t, err, errlen) < 0 || read_stream(c, t, err, errlen) < 0)
            return -1;
        d->pending += t->pending;
        d->lag += t->lag;
        d->r_stock += t->r_stock;
        d->admitted += t->admitted;
        d->returned += t->returned;
        d->freed += t->freed;
        d->xlen += t->xlen;
        d->st_orders += t->st_orders;
        d->dead += t->dead;
        d->seeded += t->seeded;
        d->st_outside += t->st_outside;
        d->st_bad += t->st_bad;
        if (!t->r_has_window || t->r_begin != d->r_begin || t->r_end != d->r_end)
            d->window_differs++;
        pairs_append(&d->buyers, &t->buyers);
        pairs_append(&d->buyers_by_order, &t->buyers_by_order);
        pairs_append(&d->st_by_user, &t->st_by_user);
        pairs_append(&d->st_by_order, &t->st_by_order);
        pairs_append(&d->inflight_users, &t->inflight_users);
        pairs_append(&d->inflight_orders, &t->inflight_orders);
    }
    if (bucket_sweep_in_transit(rt, d->vid, d->nbuckets, &d->in_transit, err, errlen) < 0)
        return -1;
    d->r_stock += d->in_transit;
    return 0;
}

/* ==== the run ==== */

static int voucher_keys(vdata_t *d)
{
    return key_dead(d->kd, sizeof d->kd, d->vid) < 0 || key_voucher(d->kv, sizeof d->kv, d->vid) < 0 || key_buyers(d->kb, sizeof d->kb, d->vid) < 0 ||
                   key_stream(d->ks, sizeof d->ks, d->vid) < 0
               ? -1
               : 0;
}

/* Waiting for the drain of a bucketed voucher: adds the pending and undelivered entries
 * of buckets 1..K-1 to g (and, given admitted, their buyers). */
static int drain_buckets(rcl_sync_route_t *rt, const vdata_t *v, sgroup_t *g, int64_t *admitted,
                         char *err, size_t errlen)
{
    for (int b = 1; b < v->nbuckets; b++) {
        vdata_t t;
        sgroup_t tg;
        memset(&t, 0, sizeof t);
        redisContext *c;
        if (bucket_keys(&t, v->vid, b, v->nbuckets) < 0 ||
            !(c = rcl_sync_route_key(rt, t.ks, err, errlen)) || read_group(c, t.ks, &tg, err, errlen) < 0)
            return -1;
        char why[128];
        if (!tg.found || admitted) {
            redisReply *r = rconn_cmdf(c, why, sizeof why, admitted ? "HLEN %s" : "XLEN %s",
                                       admitted ? t.kb : t.ks);
            int64_t x = 0;
            if (r)
                rconn_int(r, &x);
            freeReplyObject(r);
            if (admitted)
                *admitted += x;
            else
                tg.lag = x;
        }
        g->pending += tg.pending;
        g->lag += tg.lag > 0 ? tg.lag : 0;
    }
    return 0;
}

/* SQLite: refuse a file that does not exist (store_open would create one). */
static int db_exists(const char *url, char *err, size_t errlen)
{
    if (strncasecmp(url, "sqlite:", 7) != 0)
        return 0;
    const char *p = url + 7;
    if (strncmp(p, "//", 2) == 0)
        p += 2;
    if (strcmp(p, ":memory:") == 0)
        return 0;
    struct stat st;
    if (stat(p, &st) != 0) {
        snprintf(err, errlen, "no database at %s: %s", p, strerror(errno));
        return -1;
    }
    return 0;
}

int audit_wait_drain(const char *redis_url, const char *db_url, int64_t vid, int timeout_ms,
                     audit_drain_t *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (db_exists(db_url, err, errlen) < 0)
        return -1;
    rcl_sync_route_t rt;
    if (rcl_sync_route_open(redis_url, 5000, &rt, err, errlen) < 0)
        return -1;
    store_t *st = store_open(db_url, 10000, err, errlen);
    if (!st) {
        rcl_sync_route_close(&rt);
        return -1;
    }
    vdata_t v;
    memset(&v, 0, sizeof v);
    v.vid = vid;
    voucher_keys(&v);
    redisContext *c = rcl_sync_route_key(&rt, v.ks, err, errlen);
    if (!c) {
        store_close(st);
        rcl_sync_route_close(&rt);
        return -1;
    }
    uint64_t t0 = clock_mono_ns(), first = 0, last = 0;
    uint64_t retry_until = 0;   /* the deadline of the current run of failed reads */
    int64_t prev = -1;
    int rc = 0;
    v.nbuckets = bucket_count(c, &v);
    for (;;) {
        sgroup_t g;
        if (read_group(c, v.ks, &g, err, errlen) < 0 ||
            drain_buckets(&rt, &v, &g, NULL, err, errlen) < 0) {
            /* a failover or reshard under the wait: the map again, the voucher's node again */
            if (!retry_until)
                retry_until = rcl_sync_route_deadline(&rt);
            if (rcl_sync_route_retry(&rt, retry_until, err) && (c = rcl_sync_route_key(&rt, v.ks, err, errlen))) {
                v.nbuckets = bucket_count(c, &v);
                continue;
            }
            rc = -1;
            break;
        }
        retry_until = 0;
        int64_t count = 0, stock = 0;
        if (lab_store_voucher_counts(st, vid, &count, &stock) == STORE_ERR) {
            snprintf(err, errlen, "SQL: %s", store_errmsg(st));
            rc = -1;
            break;
        }
        uint64_t now = clock_mono_ns();
        if (prev < 0) {
            d->persisted_start = count;
        } else if (count != prev) {
            if (!first)
                first = now;
            last = now;
        }
        prev = count;
        d->persisted_end = count;
        d->pending = g.pending;
        d->lag = g.lag;
        if (!g.found) {
            /* no group (yet): undelivered = every entry of the stream */
            char why[128];
            redisReply *r = rconn_cmdf(c, why, sizeof why, "XLEN %s", v.ks);
            d->lag = 0;
            if (r) {
                rconn_int(r, &d->lag);
                freeReplyObject(r);
            }
        }
        d->drained = d->pending == 0 && d->lag == 0;
        if (d->drained || now - t0 >= (uint64_t)timeout_ms * 1000000u)
            break;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    d->seconds = (double)(clock_mono_ns() - t0) / 1e9;
    d->active_seconds = first ? (double)(last - first) / 1e9 : 0;
    retry_until = rcl_sync_route_deadline(&rt);
    while (rc == 0) {
        redisReply *r = rconn_cmdf(c, err, errlen, "HLEN %s", v.kb);
        d->admitted = 0;
        if (r) {
            rconn_int(r, &d->admitted);
            freeReplyObject(r);
        }
        sgroup_t g;
        memset(&g, 0, sizeof g);
        if (r && drain_buckets(&rt, &v, &g, &d->admitted, err, errlen) == 0)
            break;
        if (!rcl_sync_route_retry(&rt, retry_until, err) || !(c = rcl_sync_route_key(&rt, v.ks, err, errlen)))
            rc = -1;
    }
    store_close(st);
    rcl_sync_route_close(&rt);
    return rc;
}

/* Everything the checks need of one voucher, from Redis and SQL. */
static int read_voucher(rcl_sync_route_t *rt, store_t *st, vdata_t *d, char *err, size_t errlen)
{
    /* Every key of the voucher shares its hash tag: one node answers them all. */
    redisContext *c = rcl_sync_route_key(rt, d->ks, err, errlen);
    if (!c)
        return -1;
    int rc = read_vgroup(c, d, err, errlen);
    if (rc == 0)
        rc = read_bucket_groups(rt, c, d, err, errlen);
    if (rc == 0)
        rc = read_sql(st, d, err, errlen);
    if (rc == 0)
        rc = read_redis_snapshot(c, d, err, errlen);
    if (rc == 0 && !d->group_found)
        d->lag = d->xlen;   /* no consumer group: nothing was ever delivered to a writer */
    if (rc == 0)
        rc = read_buyers(c, d, err, errlen);
    if (rc == 0)
        rc = read_stream(c, d, err, errlen);
    if (rc == 0 && d->nbuckets > 1)
        rc = read_bucket_rest(rt, d, err, errlen);
    return rc;
}

/* read_voucher, read again from the start when a cluster changed under it (a failover, a
 * reshard) until the route's deadline: the reads are a snapshot, so a half-read one is
 * thrown away. */
static int read_voucher_retried(rcl_sync_route_t *rt, store_t *st, vdata_t *d, char *err,
                                size_t errlen)
{
    uint64_t deadline = rcl_sync_route_deadline(rt);
    int rc;
    while ((rc = read_voucher(rt, st, d, err, errlen)) < 0 && rcl_sync_route_retry(rt, deadline, err)) {
        int64_t vid = d->vid;
        vdata_free(d);
        memset(d, 0, sizeof *d);
        d->vid = vid;
        voucher_keys(d);
    }
    return rc;
}

int audit_run(const audit_opts_t *o)
{
    FILE *out = o->out ? o->out : stdout;
    char err[512];
    int timeout = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    if (!o->redis_url || !o->db_url) {
        fprintf(stderr, "seckill audit: needs --redis and --db (or --data-dir)\n");
        return 2;
    }
    if (db_exists(o->db_url, err, sizeof err) < 0) {
        fprintf(stderr, "seckill audit: %s\n", err);
        return 2;
    }
    store_t *st = store_open(o->db_url, timeout, err, sizeof err);
    if (!st) {
        fprintf(stderr, "seckill audit: %s\n", err);
        return 2;
    }
    rcl_sync_route_t rt;
    if (rcl_sync_route_open(o->redis_url, timeout, &rt, err, sizeof err) < 0) {
        fprintf(stderr, "seckill audit: %s\n", err);
        store_close(st);
        return 2;
    }
    int64_t *all = NULL;
    const int64_t *vids = o->vouchers;
    size_t nv = o->nvouchers;
    if (!vids || nv == 0) {
        if (store_seckill_ids(st, &all, &nv) != STORE_OK) {
            fprintf(stderr, "seckill audit: SQL: %s\n", store_errmsg(st));
            store_close(st);
            rcl_sync_route_close(&rt);
            return 2;
        }
        vids = all;
    }
    if ((o->initial_stock >= 0 || o->have_answers) && nv != 1) {
        fprintf(stderr, "seckill audit: --stock and --orders describe one voucher: give --voucher\n");
        free(all);
        store_close(st);
        rcl_sync_route_close(&rt);
        return 2;
    }
    audit_mode_t mode;
    if (audit_mode(o, &rt, &mode, err, sizeof err) < 0) {
        fprintf(stderr, "seckill audit: %s\n", err);
        free(all);
        store_close(st);
        rcl_sync_route_close(&rt);
        return 2;
    }
    int status = 0, total_viol = 0;
    sb_t j = SB_INIT;
    sb_puts(&j, "{\"vouchers\":[");
    for (size_t i = 0; i < nv && status != 2; i++) {
        vdata_t d;
        memset(&d, 0, sizeof d);
        d.vid = vids[i];
        if (voucher_keys(&d) < 0) {
            fprintf(stderr, "seckill audit: bad voucher id\n");
            status = 2;
            break;
        }
        int drained_wanted = 0;
        if (o->wait_drain_ms > 0) {
            audit_drain_t dr;
            if (audit_wait_drain(o->redis_url, o->db_url, d.vid, o->wait_drain_ms, &dr, err,
                                 sizeof err) < 0) {
                fprintf(stderr, "seckill audit: voucher %lld: %s\n", LL(d.vid), err);
                status = 2;
                break;
            }
            drained_wanted = 1;
        }
        int rc = read_voucher_retried(&rt, st, &d, err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, "seckill audit: voucher %lld: %s\n", LL(d.vid), err);
            vdata_free(&d);
            status = 2;
            break;
        }
        if (!d.r_exists && d.admitted == 0 && d.xlen == 0 && d.sql_count == 0 && !o->vouchers) {
            fprintf(out, "voucher %lld: not published to Redis and nothing sold: skipped\n",
                    LL(d.vid));
            vdata_free(&d);
            continue;
        }
        report_t *rp = xcalloc(1, sizeof *rp);
        check_voucher(o, &mode, &d, drained_wanted, rp);
        lab_figures(o, &d, rp);
        print_report(out, &d, o, &mode, rp);
        if (rp->nvanished) {
            fprintf(out, "voucher %lld: %zu orders answered success are in neither SQL nor "
                    "the stream:", LL(d.vid), rp->nvanished);
            for (size_t k = 0; k < rp->nvanished; k++)
                fprintf(out, " %lld", LL(rp->vanished[k]));
            fputc('\n', out);
        }
        if (j.len > strlen("{\"vouchers\":["))
            sb_puts(&j, ",");
        json_report(&j, &d, o, &mode, rp);
        total_viol += rp->violations;
        if (rp->violations)
            status = 1;
        free(rp->vanished);
        free(rp);
        vdata_free(&d);
    }
    sb_printf(&j, "],\"violations\":%d,\"status\":%d}\n", total_viol, status);
    if (status != 2) {
        fprintf(out, "audit: %d violation%s\n", total_viol, total_viol == 1 ? "" : "s");
        if (o->json)
            fputs(sb_cstr(&j), o->json);
    }
    fflush(out);
    sb_free(&j);
    free(all);
    store_close(st);
    rcl_sync_route_close(&rt);
    return status;
}

/* ==== command line ==== */

typedef struct audit_args {
    const char *data_dir, *redis, *db, *orders, *json, *mode;
    int64_t vouchers[64];
    size_t nvouchers;
    int64_t stock, unanswered, wait_drain_s;
    int timeout_ms;
} audit_args_t;

#define F(field) CMD_ARGS_FIELD(audit_args_t, field)

static const cmd_arg_t audit_arg_rows[] = {
    {"data-dir", CMD_ARG_PTR, F(data_dir), 0, 0, "DIR",
     "the embedded default's files: Redis unix:DIR/redis/redis.sock,\n"
     "SQL sqlite:DIR/seckill.db (default ./var when neither\n"
     "--redis nor --db is given)"},
    {"redis", CMD_ARG_PTR, F(redis), 0, 0, "URL",
     "redis://[:password@]host:port[/db] or unix:PATH"},
    {"db", CMD_ARG_PTR, F(db), 0, 0, "URL", "sqlite:PATH (or the URL the service uses)"},
    {"voucher", CMD_ARG_I64S, F(vouchers), 1, 9e18, "ID",
     "audit this voucher (repeatable); default: every flash-sale voucher",
     offsetof(audit_args_t, nvouchers)},
    {"stock", CMD_ARG_I64, F(stock), 0, 9e18, "N",
     "its initial stock: enables no-oversell, redis-stock, sql-stock"},
    {"orders", CMD_ARG_PTR, F(orders), 0, 0, "FILE",
     "the record `seckill bench --record` wrote: success answers;\n"
     "its header supplies --voucher, --stock and --unanswered"},
    {"unanswered", CMD_ARG_I64, F(unanswered), 0, 9e18, "N",
     "requests whose answer was lost (excused in persisted-answered)"},
    {"mode", CMD_ARG_PTR, F(mode), 0, 0, "NAME",
     "the service's --mode: which checks apply (a sync or lab SQL\n"
     "sale is kept in SQL alone) [the mode the live instances\n"
     "announce; stream's checks when none does]"},
    {"wait-drain", CMD_ARG_I64, F(wait_drain_s), 0, 86400, "SEC",
     "first wait up to SEC for the order stream to drain; then it\n"
     "must be drained and every admitted order must be in SQL"},
    {"json", CMD_ARG_PTR, F(json), 0, 0, "FILE", "also write a JSON report (- = stdout)"},
    {"timeout-ms", CMD_ARG_INT, F(timeout_ms), 10, 600000, "N",
     "deadline of each Redis command and SQL call [10000]"},
};
static const cmd_args_t audit_args_spec = {
    audit_arg_rows, sizeof audit_arg_rows / sizeof audit_arg_rows[0], 20};

static void audit_usage(FILE *f)
{
    fprintf(f,
            "usage: seckill audit [options]\n\n"
            "Checks a deployment's Redis and SQL for the flash-sale invariants (no oversell,\n"
            "no duplicate, no lost admission, sale window, stream drained) and prints each\n"
            "check with its figures. Read-only. Exit status 0 = all hold, 1 = violation,\n"
            "2 = could not audit.\n\n");
    cmd_args_help(f, &audit_args_spec);
}

int audit_main(int argc, char **argv)
{
    audit_args_t a = {.stock = -1, .unanswered = -1};
    int exit_now = cmd_args_main(&audit_args_spec, "seckill audit", audit_usage, argc, argv, &a);
    if (exit_now >= 0)
        return exit_now;
    char err[PATH_MAX + 64];
    audit_opts_t o;
    memset(&o, 0, sizeof o);
    o.initial_stock = a.stock;
    o.unanswered = a.unanswered;
    char rbuf[DATADIR_URL_MAX], dbuf[DATADIR_URL_MAX];
    if (datadir_urls(a.data_dir, &a.redis, &a.db, rbuf, dbuf, err, sizeof err) < 0) {
        fprintf(stderr, "seckill audit: %s\n", err);
        return 2;
    }
    audit_record_t rec;
    memset(&rec, 0, sizeof rec);
    if (a.orders) {
        if (audit_record_read(a.orders, &rec, err, sizeof err) < 0) {
            fprintf(stderr, "seckill audit: %s\n", err);
            return 2;
        }
        if (a.nvouchers == 0 && rec.voucher_id > 0)
            a.vouchers[a.nvouchers++] = rec.voucher_id;
        if (o.initial_stock < 0 && rec.stock >= 0)
            o.initial_stock = rec.stock;
        if (o.unanswered < 0)
            o.unanswered = rec.unanswered;
        o.answers = rec.answers;
        o.nanswers = rec.n;
        o.have_answers = 1;
        o.answers_complete = rec.complete;
        o.soldout_users = rec.soldout;
        o.nsoldout = rec.nsoldout;
        o.maybe_users = rec.maybe;
        o.nmaybe = rec.nmaybe;
    }
    FILE *jf = NULL;
    if (a.json) {
        jf = strcmp(a.json, "-") == 0 ? stdout : fopen(a.json, "w");
        if (!jf) {
            fprintf(stderr, "seckill audit: %s: %s\n", a.json, strerror(errno));
            free(rec.answers);
            free(rec.soldout);
            free(rec.maybe);
            return 2;
        }
    }
    o.redis_url = a.redis;
    o.db_url = a.db;
    o.vouchers = a.nvouchers ? a.vouchers : NULL;
    o.nvouchers = a.nvouchers;
    o.mode = a.mode;
    o.wait_drain_ms = (int)(a.wait_drain_s * 1000);
    o.timeout_ms = a.timeout_ms;
    o.json = jf;
    o.out = jf == stdout ? stderr : stdout;
    int rc = audit_run(&o);
    if (jf && jf != stdout)
        fclose(jf);
    free(rec.answers);
    free(rec.soldout);
    free(rec.maybe);
    return rc;
}
