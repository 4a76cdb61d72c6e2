/* writer_life.c -- lifecycle events in the order streams (writer_int.h), each a CAS on the
 * order's status (a replay changes nothing): a cancelled or timed-out order
 * (src/order/life.lua) becomes status 4 with its unit back in the voucher's SQL stock;
 * a paid one 2 with pay_time; a cancelled one whose payment is to be refunded 5 (退款中:
 * 6 once the refund is sent, writer_refund.c) -- a batch's events in one transaction
 * (store_orders_move), each payment's row (tb_voucher_payment) with its order's move. An
 * event whose entry carries `free 1` (--cancel-frees-buyer) is a move 'f': the cancel, and
 * the row to tb_voucher_order_cancelled, so the buyer's next order fits in SQL (writer.c
 * writes a batch in rounds so the event comes before that order); a late payment's refund
 * finds the row there.
 *
 * An event follows its order's own entry in the same stream, and a batch writes its
 * orders before its events, so within one writer the insert always comes first. With
 * several writers reading one consumer group (instances, or a claim after a crash) the
 * order's entry may be in another writer's batch not yet committed: SQL has no such order
 * yet, and the event waits -- it is not acked, and the claim pass hands it out again once
 * idle (--claim-idle-ms). An event whose order SQL still lacks EVENT_WAIT_S after
 * it was queued (the order went to the dead letters or was fenced by a rebuild) goes to
 * the dead letters too.
 *
 * Payment deadlines (--pay-timeout-s): the stream is the due index. Its entries are in
 * admission order (an entry's id is its admission's millisecond by Redis's clock) and it
 * is never trimmed, so the orders past their deadline are the entries from the sweep's
 * cursor up to now - timeout. Every DUE_EVERY_MS the writer reads them (XRANGE, a page at
 * a time) for each stream it reads and runs life.lua's expire on their orders: one still
 * unpaid is cancelled there exactly as its buyer would cancel it (state t, unit back, a t
 * event, applied by this same file -- a call's events in one evs entry, sentry.h, applied
 * as one unit); one paid or cancelled meanwhile is left as it is.
 * The cursor, seckill:paysweep:{tag}, moves in the same script call, after that call's
 * orders were decided: a crash repeats a page at most (the script decides each order
 * once), a restart goes on where the last sweep stopped. Nothing is written per order at
 * admission or by the batch: an order costs its share of one script call at its deadline.
 * The calls hold SWEEP_CALL_ORDERS orders at most, go one at a time, and at most
 * --timeout-rate orders a second (call_pace): a wave of deadlines leaves Redis and the CPU
 * to the sale, and the writer's batches run in the pace's pauses.
 *
 * A drained stream (writer_sweep.c) whose sweep timed orders out leaves the drained set and
 * is read again at once: its t events are due in SQL, and lookups must ask its bucket.
 *
 * The SQL scan (scan_page): SQL's unpaid orders past their deadline, read by primary key
 * from a cursor kept in memory (order ids begin with their creation second, orderid.h),
 * each row about once per process life. In stream mode the backstop, for orders whose
 * Redis state was lost (a failover, a rebuild), through life.lua on each order's bucket --
 * on a Redis Cluster through the cluster client; in sync mode (no Redis state, no stream)
 * the timeout itself, a SQL CAS per order. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "core/xmem.h"
#include "embedded.h"
#include "redis/rds_script.h"
#include "sale/buckets.h"
#include "sale/orderid.h"
#include "writer/writer_int.h"

#define EVENT_WAIT_S 3600
#define SWEEP_PAGE 200            /* stream entries read per XRANGE */
#define SWEEP_CALL_ORDERS 32      /* orders per expire call: about 0.5 ms inside Redis, the
                                   * longest a sale's command waits behind the sweep */
#define SWEEP_BUDGET_MS 250       /* a pass gives the batches the writer back after this
                                   * (the SQL scan and the streams, each) */
#define SWEEP_AFTER_S 86400       /* a sale this long past end + timeout is not swept */
#define DUE_EVERY_MS 500          /* the payment-deadline sweeps (writer.c calls
                                   * writer_life_sweep at least this often) */

/* A payment event's pay field, "<paymentId> <amount> <0|2>" (life.lua): 0, or -1 when
 * it is malformed. No field: e->pay_id stays "". */
static int pay_field(wentry_t *e, const redisReply *f)
{
    e->pay_id[0] = '\0';
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        if (!str_eq(f->element[i], "pay"))
            continue;
        const redisReply *v = f->element[i + 1];
        char buf[STORE_PAYMENT_ID_MAX + 48];
        if (!is_str(v) || v->len >= sizeof buf)
            return -1;
        memcpy(buf, v->str, v->len);
        buf[v->len] = '\0';
        long long amount;
        int answer, n = 0;
        char id[STORE_PAYMENT_ID_MAX + 1];
        if (sscanf(buf, "%64s %lld %d%n", id, &amount, &answer, &n) != 3 || buf[n] != '\0' ||
            amount < 0 || (answer != 0 && answer != 2))
            return -1;
        memcpy(e->pay_id, id, sizeof id);
        e->pay_amount = amount;
        e->pay_answer = answer;
    }
    return 0;
}

/* A c or t event whose entry carries `free 1` (life.lua under --cancel-frees-buyer: the
 * buyer left the buyers hash): its move is 'f', which also moves the row aside in SQL. The
 * entry says it, not this process's flag, so a writer started with another setting applies
 * what the script decided. */
static int frees_buyer(const redisReply *f)
{
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && k->len == 4 && memcmp(k->str, "free", 4) == 0 &&
            v->type == REDIS_REPLY_STRING && v->len == 1 && v->str[0] == '1')
            return 1;
    }
    return 0;
}

int writer_life_parse(writer_t *wr, wentry_t *e, const redisReply *fields)
{
    sentry_evit_t it;
    size_t bound;
    const char *reason = NULL;
    int rc = sentry_evopen(fields, &it, &bound, &reason);
    if (rc == 0)
        return 0;
    e->kind = E_DEAD;
    e->reason = reason;
    if (rc < 0)
        return 1;
    if (wr->nevs + bound > wr->capevs) {
        while (wr->nevs + bound > wr->capevs)
            wr->capevs = wr->capevs ? wr->capevs * 2 : 256;
        wr->evs = xrealloc(wr->evs, wr->capevs * sizeof *wr->evs);
    }
    /* taken as they are checked, counted into the batch only once all are good (as an
     * order entry's orders, writer.c) */
    int frees = frees_buyer(fields);
    size_t nv = 0;
    sentry_ev_t *ev = &wr->evs[wr->nevs];
    while ((rc = sentry_evnext(&it, &ev[nv], &e->reason)) == 1) {
        if (frees && (ev[nv].kind == 'c' || ev[nv].kind == 't'))
            ev[nv].kind = 'f';
        if (ev[nv++].user_id > WRITER_MAX_USER_ID) {
            e->reason = "userId out of range";
            return 1;
        }
    }
    if (rc < 0)
        return 1;   /* e->reason says why */
    if (pay_field(e, fields) != 0) {
        e->reason = "bad pay field";
        return 1;
    }
    e->v0 = wr->nevs;
    e->nv = nv;
    e->ev = ev[0];
    wr->nevs += nv;
    e->kind = E_EVENT;
    e->reason = NULL;
    return 1;
}

/* An event of the entry's (order oid) is of an order not in SQL (yet): the entry waits, or
 * once it is old goes to the dead letters (its other events applied: the dead letter keeps
 * the whole entry). */
static int not_yet(writer_t *wr, wentry_t *e, int64_t oid)
{
    int64_t queued_s = strtoll(e->id, NULL, 10) / 1000;
    if ((int64_t)time(NULL) - queued_s < EVENT_WAIT_S) {
        e->kind = E_WAIT;
        return 0;
    }
    e->kind = E_DEAD;
    e->reason = "event of an order SQL never had";
    log_error("writer: %s entry %s: %s (order %lld): moved to seckill:dead:{%s}",
              wr->streams[e->si].key, e->id, e->reason, (long long)oid,
              wr->streams[e->si].tag);
    return 1;
}

int writer_life_held(writer_t *wr, const wentry_t *e, const store_order_t *orders, size_t n)
{
    if (!wr->app->cfg.cancel_frees_buyer || !wr->st)
        return 0;
    if ((int64_t)time(NULL) - strtoll(e->id, NULL, 10) / 1000 >= EVENT_WAIT_S)
        return 0;   /* no event is that late: a duplicate after all, acked as before */
    for (size_t i = 0; i < n; i++) {
        store_order_t o;
        int rc = store_order_get(wr->st, orders[i].id, &o);
        if (rc == STORE_NOTFOUND || rc == STORE_ERR) {
            log_info("writer: %s entry %s: order %lld waits for its buyer's earlier order to "
                     "be cancelled in SQL", wr->streams[e->si].key, e->id,
                     (long long)orders[i].id);
            return 1;
        }
    }
    return 0;
}

/* The batch's events applied in one SQL transaction (store_orders_move): a wave of
 * timeouts costs one commit per batch, not per order. */
size_t writer_life_apply(writer_t *wr, int round)
{
    size_t ne = 0, n = 0, dead = 0;
    for (size_t i = 0; i < wr->nents; i++)
        if (wr->ents[i].kind == E_EVENT && wr->ents[i].round == round) {
            ne++;
            n += wr->ents[i].nv;
        }
    if (ne == 0)
        return 0;
    store_move_t *mv = xmalloc(n * sizeof *mv);
    size_t *at = xmalloc(ne * sizeof *at);     /* the round's event entries */
    size_t *own = xmalloc(n * sizeof *own);    /* each move's entry: its place in at */
    int64_t *miss = xcalloc(ne, sizeof *miss); /* an entry's first order SQL lacks */
    ne = 0;
    for (size_t i = 0; i < wr->nents; i++)
        if (wr->ents[i].kind == E_EVENT && wr->ents[i].round == round)
            at[ne++] = i;
    /* by voucher, stably (an order's events keep their stream order): every writer's
     * transaction takes the vouchers' stock rows in the same order, so two of them never
     * deadlock on MariaDB; one voucher's batch (the usual) stays as it is */
    for (size_t j = 1; j < ne; j++) {
        size_t x = at[j], y = j;
        int64_t vid = wr->streams[wr->ents[x].si].vid;
        for (; y > 0 && wr->streams[wr->ents[at[y - 1]].si].vid > vid; y--)
            at[y] = at[y - 1];
        at[y] = x;
    }
    n = 0;
    for (size_t k = 0; k < ne; k++) {
        const wentry_t *e = &wr->ents[at[k]];
        for (size_t v = e->v0; v < e->v0 + e->nv; v++, n++) {
            const sentry_ev_t *ev = &wr->evs[v];
            char kind = ev->kind == 't' ? 'c' : ev->kind;   /* c, f, p, r */
            own[n] = k;
            mv[n] = (store_move_t){.order_id = ev->order_id, .now = ev->ts, .kind = kind};
            /* its payment's row, same transaction (a payment's entry is its one event) */
            if (e->pay_id[0] && (kind == 'p' || kind == 'r')) {
                memcpy(mv[n].payment_id, e->pay_id, sizeof e->pay_id);
                mv[n].amount = e->pay_amount;
                mv[n].pay_status = kind == 'p' && e->pay_answer == 0 ? 2 : 5;
            }
        }
    }
    char err[512] = "";
    if (!wr->st)
        wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
    if (!wr->st || store_orders_move(wr->st, mv, n) != STORE_OK) {
        /* none applied, all left pending: the claim pass brings them back */
        log_warn("writer: %zu lifecycle events (first: %s entry %s) not applied (%s); they "
                 "stay pending", n, wr->streams[wr->ents[at[0]].si].key, wr->ents[at[0]].id,
                 wr->st ? store_errmsg(wr->st) : err);
        for (size_t k = 0; k < ne; k++)
            wr->ents[at[k]].kind = E_WAIT;
        metric_inc(&wr->m->sql_errors);
        goto out;
    }
    for (size_t j = 0; j < n; j++) {
        wentry_t *e = &wr->ents[at[own[j]]];
        int was = mv[j].was, want = mv[j].kind == 'p' ? 2 : mv[j].kind == 'r' ? 5 : 4;
        /* a cancel's replay (c, or f finding its row aside) may find 5 or 6: refunded since */
        int refunded = was == 6 || (was == 5 && mv[j].kind != 'p');
        /* a refund's row written: the outbox of this stream has it to send */
        if (mv[j].rc == STORE_OK && mv[j].pay_status == 5) {
            wr->streams[e->si].refund_quiet = 0;
            wr->due_at = 0;   /* at once, not at the next pass */
        }
        if (mv[j].payment_id[0] && mv[j].rc == STORE_OK && mv[j].pay_order != mv[j].order_id)
            log_error("writer: %s entry %s: payment %s of order %lld is order %lld's in SQL "
                      "(a payment id used twice); its row left as it is",
                      wr->streams[e->si].key, e->id, mv[j].payment_id,
                      (long long)mv[j].order_id, (long long)mv[j].pay_order);
        if (mv[j].rc == STORE_NOTFOUND) {
            if (miss[own[j]] == 0)
                miss[own[j]] = mv[j].order_id;
        } else if (mv[j].kind == 'r' && was == 1) {
            e->kind = E_WAIT;   /* its cancel is still on its way (another writer's batch) */
        } else if (e->pay_id[0] && e->pay_answer == 2) {
            /* a refund: the order moved to 5 (from a cancel), or stays as it was (paid, or
             * refunded by another payment) */
        } else if (was != (mv[j].kind == 'r' ? 4 : 1) && was != want && !refunded) {
            /* Redis decided from its state; SQL says otherwise: SQL is the record */
            log_error("writer: %s entry %s: event %c of order %lld found status %d in SQL; "
                      "left as it is", wr->streams[e->si].key, e->id, e->ev.kind,
                      (long long)mv[j].order_id, was);
        }
    }
    /* an entry is one unit: acked once every event of it is in SQL */
    for (size_t k = 0; k < ne; k++)
        if (miss[k] != 0)
            dead += (size_t)not_yet(wr, &wr->ents[at[k]], miss[k]);
out:
    free(mv);
    free(at);
    free(own);
    free(miss);
    return dead;
}

/* ---------------------------------------------------------------- payment deadlines */

/* Stream mode (Redis decides, the SQL scan is the backstop) and sync mode (the SQL scan
 * decides). */
static int timeouts_on(const writer_t *wr)
{
    return wr->app->cfg.pay_timeout_s > 0 &&
           (wr->app->cfg.mode == MODE_STREAM || wr->app->cfg.mode == MODE_SYNC);
}

/* A bucket's keys for life.lua (its header). */
typedef struct lkeys {
    char kv[96], kb[96], kst[96], ks[96], kcur[96];
} lkeys_t;

static int lkeys_fill(lkeys_t *k, const char *tag)
{
    return key_voucher_t(k->kv, sizeof k->kv, tag) < 0 || key_buyers_t(k->kb, sizeof k->kb, tag) < 0 ||
                   key_ostate_t(k->kst, sizeof k->kst, tag) < 0 ||
                   key_stream_t(k->ks, sizeof k->ks, tag) < 0 ||
                   key_paysweep_t(k->kcur, sizeof k->kcur, tag) < 0
               ? -1
               : 0;
}

#define CALL_CURSOR 9             /* the cursor's place in an expire call's arguments */

/* An expire call being built: its orders' decimal ids (argv points into dec until the
 * call is appended). */
typedef struct expire_call {
    size_t n;                        /* arguments so far */
    size_t orders;
    char (*dec)[24];                 /* 2 per order */
    size_t capdec;
} expire_call_t;

/* life.lua's SHA1 in hex, computed once: the calls go as EVALSHA -- EVAL would send the
 * script's ~10 KB and have Redis hash it on every call of a wave. A Redis that does not
 * have it (NOSCRIPT: restarted, flushed) gets the call once more as EVAL (call_eval),
 * which loads it. */
static char life_sha[2 * 20 + 1];
static pthread_once_t life_sha_once = PTHREAD_ONCE_INIT;

static void life_sha_make(void)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(script_life_lua, strlen(script_life_lua), md, &len, EVP_sha1(), NULL) != 1 ||
        len != 20)
        return;   /* life_sha stays "": every call goes as EVAL */
    for (unsigned i = 0; i < len; i++)
        snprintf(life_sha + 2 * i, 3, "%02x", md[i]);
}

/* The call in wr->argv as EVAL with the script's text (its first two arguments). */
static void call_eval(writer_t *wr)
{
    wr->argv[0] = "EVAL";
    wr->argvlen[0] = 4;
    wr->argv[1] = script_life_lua;
    wr->argvlen[1] = strlen(script_life_lua);
}

static void call_begin(writer_t *wr, expire_call_t *c, const lkeys_t *k)
{
    c->n = 0;
    c->orders = 0;
    pthread_once(&life_sha_once, life_sha_make);
    writer_args(wr, &c->n, life_sha[0] ? "EVALSHA" : "EVAL");
    writer_args(wr, &c->n, life_sha[0] ? life_sha : script_life_lua);
    writer_args(wr, &c->n, "5");
    writer_args(wr, &c->n, k->kv);
    writer_args(wr, &c->n, k->kb);
    writer_args(wr, &c->n, k->kst);
    writer_args(wr, &c->n, k->ks);
    writer_args(wr, &c->n, k->kcur);
    writer_args(wr, &c->n, wr->app->cfg.cancel_frees_buyer ? "expire-free" : "expire");
    writer_args(wr, &c->n, "");   /* the cursor (argument CALL_CURSOR): call_end sets it */
}

static void call_add(writer_t *wr, expire_call_t *c, int64_t oid, int64_t uid)
{
    if (2 * (c->orders + 1) > c->capdec) {
        c->capdec = c->capdec ? 2 * c->capdec : 2 * (SWEEP_CALL_ORDERS + 64);
        c->dec = xrealloc(c->dec, c->capdec * sizeof *c->dec);
    }
    char *o = c->dec[2 * c->orders], *u = c->dec[2 * c->orders + 1];
    snprintf(o, sizeof *c->dec, "%lld", (long long)oid);
    snprintf(u, sizeof *c->dec, "%lld", (long long)uid);
    c->orders++;
}

/* Completes the call in wr->argv (c->n arguments), moving the cursor to cursor ("" keeps
 * it). */
static void call_close(writer_t *wr, expire_call_t *c, const char *cursor)
{
    wr->argv[CALL_CURSOR] = cursor;
    wr->argvlen[CALL_CURSOR] = strlen(cursor);
    /* the pairs last: dec may have moved while they were added */
    for (size_t i = 0; i < 2 * c->orders; i++)
        writer_args(wr, &c->n, c->dec[i]);
}

/* Appends the call to the writer's pipeline. */
static void call_end(writer_t *wr, expire_call_t *c, const char *cursor)
{
    call_close(wr, c, cursor);
    writer_append(wr, c->n);
}

/* One expire call's answer: the orders it timed out; *cursor (if not NULL) the cursor
 * Redis answered. */
static long expire_answer(const redisReply *x, const char *where, char *cursor)
{
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        x->element[0]->type == REDIS_REPLY_INTEGER) {
        const redisReply *c = x->element[1];
        if (cursor && is_str(c) && c->len > 0 && c->len < ENTRY_ID_MAX) {
            memcpy(cursor, c->str, c->len);
            cursor[c->len] = '\0';
        }
        return (long)x->element[0]->integer;
    }
    if (x->type == REDIS_REPLY_ERROR)
        log_error("writer: %s: payment timeout: %s", where, x->str);
    return 0;
}

/* Whether --timeout-rate allows a call of n orders now (the stream sweep's and the SQL
 * scan's calls share the pace; force: the call ends an entry whose first orders went, and
 * goes now, its orders counted): 1, counting them, or 0 -- the pass ends (wr->paced) and
 * the writer's own work (the orders, the events the calls made) runs until the pace
 * allows the next call (writer_life_wait_ms). The sale gets Redis and the CPU meanwhile. */
static int call_pace(writer_t *wr, size_t n, int force)
{
    int rate = wr->app->cfg.timeout_rate;
    if (rate <= 0)
        return 1;
    uint64_t now = clock_mono_ns();
    if (wr->pace_ns > now && !force) {
        wr->paced = 1;
        return 0;
    }
    if (now > wr->pace_ns + 100000000u)
        wr->pace_ns = now;   /* idle a while: no credit for it beyond 100 ms */
    wr->pace_ns += (uint64_t)n * 1000000000u / (uint64_t)rate;
    return 1;
}

int writer_life_wait_ms(const writer_t *wr, int ms)
{
    if (!wr->paced)
        return ms;
    uint64_t now = clock_mono_ns();
    uint64_t left = wr->pace_ns > now ? (wr->pace_ns - now + 999999u) / 1000000u : 1;
    return left < (uint64_t)ms ? (int)left : ms;
}

/* Sends the call in wr->argv alone and reads its answer: the orders it timed out (the
 * cursor Redis answered in cursor), -2 when the pace holds it back (call_pace, force as
 * there), or -1
 * when the connection was lost. One call at a time: a call holds Redis for about
 * SWEEP_CALL_ORDERS orders' time, and a sale's commands get Redis between two calls (calls
 * pipelined back to back would hold it for all of them). */
static long call_send(writer_t *wr, expire_call_t *c, const char *last, const char *where,
                      char *cursor, int force)
{
    if (!call_pace(wr, c->orders, force))
        return -2;
    call_end(wr, c, last);
    void *rv = NULL;
    if (redisGetReply(wr->rc, &rv) != REDIS_OK)
        return writer_redis_fail(wr, "EVALSHA life.lua expire", NULL);
    if (rds_script_noscript(rv)) {
        call_eval(wr);
        writer_append(wr, c->n);
        if (redisGetReply(wr->rc, &rv) != REDIS_OK)
            return writer_redis_fail(wr, "EVAL life.lua expire", NULL);
    }
    return expire_answer(rv, where, cursor);
}

/* The sweep's cursor of s, from Redis the first time: 0, or -1 when the connection was
 * lost. "" = from the stream's start. */
static int cursor_load(writer_t *wr, wstream_t *s, const lkeys_t *k)
{
    if (s->paysweep_known)
        return 0;
    size_t n = 0;
    writer_args(wr, &n, "GET");
    writer_args(wr, &n, k->kcur);
    redisReply *r = writer_cmd(wr, n);
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        return writer_redis_fail(wr, "GET paysweep", r);
    s->paysweep[0] = '\0';
    if (is_str(r) && r->len < ENTRY_ID_MAX) {
        memcpy(s->paysweep, r->str, r->len);
        s->paysweep[r->len] = '\0';
    }
    s->paysweep_known = 1;
    return 0;
}

/* Sweeps stream s up to entry id end ("<ms>"): a page at a time while pages come full and
 * the pass's time lasts (until). 0, 1 when the time ran out with more due, or -1 when the
 * connection was lost. */
static int sweep_stream(writer_t *wr, wstream_t *s, const char *end, uint64_t until,
                        expire_call_t *c)
{
    lkeys_t k;
    if (lkeys_fill(&k, s->tag) != 0)
        return 0;
    if (cursor_load(wr, s, &k) != 0)
        return -1;
    for (;;) {
        char start[ENTRY_ID_MAX + 1], count[8];
        if (s->paysweep[0])
            snprintf(start, sizeof start, "(%s", s->paysweep);
        else
            strcpy(start, "-");
        snprintf(count, sizeof count, "%d", SWEEP_PAGE);
        rarena_reset(wr->arena);   /* the previous page's replies are done with */
        size_t n = 0;
        writer_args(wr, &n, "XRANGE");
        writer_args(wr, &n, k.ks);
        writer_args(wr, &n, start);
        writer_args(wr, &n, end);
        writer_args(wr, &n, "COUNT");
        writer_args(wr, &n, count);
        redisReply *r = writer_cmd(wr, n);
        if (r == NULL || r->type == REDIS_REPLY_ERROR)
            return writer_redis_fail(wr, "XRANGE", r);
        if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
            return 0;
        long expired = 0;
        char cur[ENTRY_ID_MAX] = "";
        size_t got = r->elements;
        const char *last = NULL, *ended = NULL;   /* the page's last entry, the last call's */
        int split = 0;   /* the open call holds the rest of an entry whose first orders went */
        long x = 0;
        call_begin(wr, c, &k);
        for (size_t i = 0; i < r->elements && x >= 0; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || !is_str(e->element[0]) ||
                e->element[0]->len >= ENTRY_ID_MAX)
                continue;
            const char *before = last;   /* the open call's orders are up to this entry */
            last = e->element[0]->str;
            sentry_evit_t evit;
            sentry_it_t it;
            size_t bound;
            const char *why;
            sentry_t o;
            /* events, and entries that are no orders (the dead letters' business), skipped */
            if (sentry_evopen(e->element[1], &evit, &bound, &why) != 0 ||
                sentry_open(e->element[1], &it, &bound, &why) != 0)
                continue;
            /* a bad entry is one unit: none of it (checked whole first) */
            sentry_it_t chk = it;
            size_t norders = 0;
            int rc;
            while ((rc = sentry_next(&chk, &o, &why)) == 1)
                norders++;
            if (rc < 0)
                continue;
            /* the open call goes first when this entry would overflow it */
            if (c->orders > 0 && c->orders + norders > SWEEP_CALL_ORDERS) {
                if ((x = call_send(wr, c, before, s->key, cur, split)) < 0)
                    break;
                expired += x;
                ended = before;
                split = 0;
                call_begin(wr, c, &k);
            }
            /* an entry of more orders than a call: its first calls keep the cursor where it
             * is (the entry is read again after a crash; expire decides each order once),
             * and the pace lets its rest go at once (or the next pass would begin with the
             * same first orders again) */
            for (size_t j = 0; j < norders && sentry_next(&it, &o, &why) == 1 && x >= 0; j++) {
                call_add(wr, c, o.order_id, o.user_id);
                if (c->orders < SWEEP_CALL_ORDERS || j + 1 == norders)
                    continue;
                if ((x = call_send(wr, c, "", s->key, cur, split)) < 0)
                    break;
                expired += x;
                split = 1;
                call_begin(wr, c, &k);
            }
        }
        if (x == -1)
            return -1;
        /* paced (-2): the rest of the page next pass, from the cursor */
        if (x >= 0 && last && (last != ended || c->orders > 0)) {
            /* also a page of events alone: the cursor moves on */
            if ((x = call_send(wr, c, last, s->key, cur, split)) == -1)
                return -1;
            expired += x > 0 ? x : 0;
        }
        if (expired > 0) {
            metric_add(&wr->m->orders_timed_out, (uint64_t)expired);
            log_info("writer: %s: %ld unpaid orders timed out and cancelled", s->key, expired);
        }
        if (cur[0])
            strcpy(s->paysweep, cur);   /* ours, or a sweeper's ahead of us */
        /* an ended sale's stream the writers no longer read: its t events are to be read
         * now, and lookups must ask its bucket again (orders.h) */
        if (expired > 0 && s->drained && writer_sweep_undrain(wr, s) != 0)
            return -1;
        if (wr->paced)
            return 1;
        if (!last || got < SWEEP_PAGE || stopping(wr))
            return 0;
        if (clock_mono_ms() >= until)
            return 1;
    }
}

/* The SQL scan: unpaid orders SQL has past their deadline, read by primary key after
 * wr->scan_id (order ids begin with their creation second, orderid.h), SCAN_MAX a page.
 *
 * Stream mode, the backstop: each order through life.lua expire on its buyer's bucket,
 * one call per run of orders on one bucket, paced with the stream sweep's calls
 * (call_pace) -- on one Redis on the writer's connection; on a Redis Cluster through the
 * cluster client to the bucket's node (a sub-writer's own connection reaches its node's
 * slots alone). Due:
 * created before now - timeout - 1 (the stream sweep, to the millisecond, comes first).
 *
 * Sync mode (orders in SQL alone), the timeout itself: the page's orders cancelled as the
 * buyer's cancel does, a CAS 1 -> 4 with the unit back in the voucher's SQL stock, in one
 * transaction (store_orders_move): with several instances scanning, the CAS decides each
 * order once. Due: createTime + timeout has passed (the payDeadline the order shows).
 *
 * The cursor: a page that comes full moves it to its last order; one that reaches the
 * bound moves it to the bound, but never past SCAN_HOLD_S + the SQL deadline before it --
 * an order whose transaction was still open when the page was read (an id of an earlier
 * second committed later) is read by a later pass. Rows behind the cursor are not read
 * again in this process's life. */
#define SCAN_MAX 256
#define SCAN_HOLD_S 2

static int sync_mode(const writer_t *wr)
{
    return wr->app->cfg.mode == MODE_SYNC;
}

/* Sync mode: the page's orders timed out in SQL. 0, or -1 when SQL failed (none moved). */
static int scan_cancel(writer_t *wr, const store_order_t *o, size_t n)
{
    store_move_t *mv = xmalloc((n ? n : 1) * sizeof *mv);
    int64_t now = (int64_t)time(NULL);
    for (size_t i = 0; i < n; i++)
        mv[i] = (store_move_t){.order_id = o[i].id, .now = now, .kind = 'c'};
    int rc = store_orders_move(wr->st, mv, n);
    size_t moved = 0;
    for (size_t i = 0; rc == STORE_OK && i < n; i++)
        moved += mv[i].rc == STORE_OK && mv[i].was == 1;
    free(mv);
    if (rc != STORE_OK) {
        log_warn("writer: payment timeout: %zu orders not cancelled (%s); the next pass tries "
                 "again", n, store_errmsg(wr->st));
        metric_inc(&wr->m->sql_errors);
        return -1;
    }
    if (moved > 0)
        log_info("writer: SQL scan: %zu unpaid orders timed out and cancelled", moved);
    return 0;
}

/* Sends the open expire call, paced, and adds the orders it timed out to *expired: on one
 * Redis on the writer's connection, on a cluster through the cluster client to the
 * bucket's node. 0, or -1 when it found no answer. */
static int scan_send(writer_t *wr, expire_call_t *c, const lkeys_t *k, long *expired)
{
    if (!wr->node_mode) {
        long x = call_send(wr, c, "", "SQL scan", NULL, 0);
        if (x < 0)
            return -1;
        *expired += x;
        return 0;
    }
    if (!call_pace(wr, c->orders, 0))
        return -1;
    call_close(wr, c, "");
    char why[300] = "";
    redisReply *x = rcl_sync_command(wr->rcs, k->kv, strlen(k->kv), (int)c->n, wr->argv,
                                     wr->argvlen, why, sizeof why);
    if (rds_script_noscript(x)) {
        freeReplyObject(x);
        call_eval(wr);
        x = rcl_sync_command(wr->rcs, k->kv, strlen(k->kv), (int)c->n, wr->argv, wr->argvlen,
                             why, sizeof why);
    }
    if (x == NULL) {
        log_warn("writer: SQL scan: expire on %s: %s; the next pass tries again", k->kv, why);
        return -1;
    }
    *expired += expire_answer(x, "SQL scan", NULL);
    freeReplyObject(x);
    return 0;
}

/* Stream mode: the orders o[0..n) through expire, a call per run of orders on one bucket
 * (at most SWEEP_CALL_ORDERS a call). Returns how many are done with: all, or fewer when
 * SQL failed (the bucket count) or a call found no answer -- the rest wait for the next
 * pass. *expired: the orders the calls timed out. */
static size_t scan_expire(writer_t *wr, const store_order_t *o, size_t n, long *expired)
{
    expire_call_t c = {0};
    char tag[48], open_tag[48] = "";
    lkeys_t keys;
    int64_t last_vid = 0;
    int k = 1;
    size_t i = 0, done = 0;   /* done: the orders before the open call's first */
    *expired = 0;
    for (; i < n; i++) {
        if (o[i].voucher_id != last_vid) {
            k = 1;
            if (store_voucher_buckets(wr->st, o[i].voucher_id, &k) != STORE_OK)
                break;
            last_vid = o[i].voucher_id;
        }
        if (key_btag(tag, sizeof tag, o[i].voucher_id, buckets_home(o[i].user_id, k), k) < 0)
            continue;
        if (open_tag[0] && (strcmp(tag, open_tag) != 0 || c.orders >= SWEEP_CALL_ORDERS)) {
            open_tag[0] = '\0';
            if (scan_send(wr, &c, &keys, expired) != 0)
                goto out;
            done = i;
        }
        if (!open_tag[0]) {
            if (lkeys_fill(&keys, tag) != 0)
                continue;
            strcpy(open_tag, tag);
            call_begin(wr, &c, &keys);
        }
        call_add(wr, &c, o[i].id, o[i].user_id);
    }
    if (!open_tag[0] || scan_send(wr, &c, &keys, expired) == 0)
        done = i;
out:
    free(c.dec);
    return done;
}

/* One page of the scan: 0 (*full: the page was full), or -1 when the connection was
 * lost. */
static int scan_page(writer_t *wr, int *full)
{
    char err[512] = "";
    *full = 0;
    if (!wr->st && !(wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err)))
        return 0;   /* SQL down: the next pass */
    int64_t now = (int64_t)time(NULL), timeout = wr->app->cfg.pay_timeout_s;
    /* order ids below bound << 32 are due: sync mode's at the deadline they show (creation
     * second + timeout), the backstop's a second after the latest their creation allows */
    int64_t bound = (sync_mode(wr) ? now - timeout + 1 : now - timeout - 1) - ORDERID_EPOCH;
    int64_t hold = bound - SCAN_HOLD_S - wr->sql_timeout_ms / 1000;
    if (bound <= 0)
        return 0;
    const store_arg_t args[2] = {{wr->scan_id, 0}, {bound << 32, 0}};
    store_order_t *o = NULL;
    size_t n = 0;
    if (store_exec_orders(wr->st,
                          "SELECT id, user_id, voucher_id, status, create_time FROM "
                          "tb_voucher_order WHERE id > ? AND id < ? AND status = 1 ORDER BY id "
                          "LIMIT 256",
                          args, 2, &o, &n) != STORE_OK) {
        log_warn("writer: payment timeout scan: %s", store_errmsg(wr->st));
        return 0;
    }
    size_t done = n;
    long expired = 0;
    if (n > 0 && sync_mode(wr))
        done = scan_cancel(wr, o, n) == 0 ? n : 0;
    else if (n > 0)
        done = scan_expire(wr, o, n, &expired);
    if (done == n) {
        *full = n == SCAN_MAX;
        int64_t to = (hold > 0 ? hold : 0) << 32;
        if (*full)
            wr->scan_id = o[n - 1].id;
        else if (to - 1 > wr->scan_id)
            wr->scan_id = to - 1;
    } else if (done > 0) {
        wr->scan_id = o[done - 1].id;
    }
    free(o);
    if (expired > 0) {
        metric_add(&wr->m->orders_timed_out, (uint64_t)expired);
        log_info("writer: SQL scan: %ld unpaid orders timed out and cancelled", expired);
    }
    return 0;
}

/* Stream mode: a rebuild from SQL since the last pass (KEY_REBUILT changed) sends the scan
 * back to SQL's first order. The rebuild brings unpaid orders back with their buyers in
 * a new stream the sweep has no entry of -- among them orders whose timeout Redis had
 * decided and lost with the old stream before SQL had its event, which this cursor passed
 * then (the script's "already"); read again, their deadlines are decided anew. On a
 * cluster the scanner's node holds the key (the registry's slot). 0, or -1 when the
 * connection was lost. */
static int scan_rebuilt(writer_t *wr)
{
    if (sync_mode(wr))
        return 0;
    size_t n = 0;
    writer_args(wr, &n, "GET");
    writer_args(wr, &n, KEY_REBUILT);
    redisReply *r = writer_cmd(wr, n);
    if (r == NULL)
        return writer_redis_fail(wr, "GET " KEY_REBUILT, NULL);
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)
        return 0;   /* (MOVED: the slot map changed; the scanner is chosen again) */
    char now[sizeof wr->rebuilt] = "";
    if (r->type == REDIS_REPLY_STRING)
        snprintf(now, sizeof now, "%.*s", (int)r->len, r->str);
    if (wr->rebuilt_known && strcmp(now, wr->rebuilt) != 0 && wr->scan_id > 0) {
        log_info("writer: SQL scan: a voucher was rebuilt from SQL; reading SQL's unpaid "
                 "orders from the first again");
        wr->scan_id = 0;
    }
    memcpy(wr->rebuilt, now, sizeof now);
    wr->rebuilt_known = 1;
    return 0;
}

/* The scan's pass: pages while they come full, until until. 0, 1 when the time ran out
 * with more to read, or -1 when the connection was lost. */
static int scan_sql(writer_t *wr, uint64_t until)
{
    int full = 1;
    while (full && !stopping(wr))
        if (scan_page(wr, &full) != 0)
            return -1;
        else if (wr->paced || (full && clock_mono_ms() >= until))
            return 1;
    return 0;
}

/* Whether this writer runs the SQL scan: on one Redis the writer; on a cluster one
 * sub-writer, the one whose node holds the stream registry's slot (each order goes to its
 * bucket's node through the cluster client). */
static int scanner(writer_t *wr)
{
    if (wr->cluster)
        return 0;
    return !wr->node_mode || (wr->rcs != NULL && writer_cluster_mine(wr, KEY_STREAMS));
}

/* A pass held back by --timeout-rate: the next once the pace allows its next call. */
static void paced_again(writer_t *wr)
{
    if (wr->paced)
        wr->due_at = wr->timeouts_at =
            clock_mono_ms() + (uint64_t)writer_life_wait_ms(wr, DUE_EVERY_MS);
}

/* The streams' deadlines (stream mode): every stream this writer reads, from its cursor up
 * to now - timeout, for at most SWEEP_BUDGET_MS. 0 (*more: the time ran out with more
 * due), or -1 when the connection was lost. No SQL: the streams hold every order Redis
 * knows, and the script decides from Redis's state alone. */
static int sweep_streams(writer_t *wr, int *more)
{
    int64_t now = (int64_t)time(NULL);
    uint64_t mono = clock_mono_ms();
    /* an entry of millisecond <= end is past its deadline */
    char end[32];
    snprintf(end, sizeof end, "%lld",
             (long long)((int64_t)clock_wall_ms() - (int64_t)wr->app->cfg.pay_timeout_s * 1000));
    expire_call_t c = {0};
    int rc = 0;
    size_t nstreams = wr->app->cfg.mode == MODE_STREAM ? wr->nstreams : 0;
    for (size_t si = 0; si < nstreams && !stopping(wr) && rc >= 0 && !wr->paced; si++) {
        wstream_t *s = &wr->streams[si];
        /* every deadline is at most the sale's end + the timeout */
        if (s->vknown && now > s->vend + wr->app->cfg.pay_timeout_s + SWEEP_AFTER_S)
            continue;
        rc = sweep_stream(wr, s, end, mono + SWEEP_BUDGET_MS, &c);
        *more |= rc > 0;
    }
    free(c.dec);
    return rc < 0 ? -1 : 0;
}

/* A pass begins: its wall-clock start (every deadline up to it is due now), the sweeper's
 * slot in /metrics taken the first time (its lag counts from then until a pass keeps up). */
static int64_t pass_begin(writer_t *wr)
{
    int64_t t0 = (int64_t)clock_wall_ms();
    if (wr->sweep_slot == 0)
        wr->sweep_slot = metrics_sweeper_claim(wr->m, t0) + 1;
    return t0;
}

/* A pass that left nothing due (not cut short by its time or the pace): every deadline up
 * to its start t0 is decided. */
static void pass_kept_up(writer_t *wr, int64_t t0)
{
    metrics_sweeper_done(wr->m, wr->sweep_slot - 1, t0);
}

void writer_life_free(writer_t *wr)
{
    metrics_sweeper_release(wr->m, wr->sweep_slot - 1);
    wr->sweep_slot = 0;
}

int writer_life_deadlines(writer_t *wr)
{
    if (!timeouts_on(wr) || wr->app->cfg.mode != MODE_STREAM || !wr->rc ||
        clock_mono_ms() < wr->timeouts_at)
        return 0;
    uint64_t start = clock_mono_ms();
    wr->timeouts_at = start + DUE_EVERY_MS;
    wr->paced = 0;
    int more = 0;
    int64_t t0 = pass_begin(wr);
    if (sweep_streams(wr, &more) != 0)
        return -1;
    if (!more && !wr->paced)
        pass_kept_up(wr, t0);
    /* more due than one pass's time: the next pass after a pause as long as this one (the
     * sale's grabs share Redis with the wave, half and half, as beside the batches) */
    if (more)
        wr->timeouts_at = 2 * clock_mono_ms() - start;
    paced_again(wr);
    return 0;
}

int writer_life_sweep(writer_t *wr)
{
    if (!wr->rc)
        return -1;   /* lost earlier this turn: the next turn reconnects first */
    if (writer_refund_run(wr) != 0)
        return -1;
    if (!timeouts_on(wr) || clock_mono_ms() < wr->timeouts_at)
        return 0;
    wr->timeouts_at = clock_mono_ms() + DUE_EVERY_MS;
    wr->paced = 0;
    /* the streams first: they hold every order Redis knows */
    int more = 0;
    int64_t t0 = pass_begin(wr);
    if (sweep_streams(wr, &more) != 0)
        return -1;
    if (!sync_mode(wr) && !more && !wr->paced)
        pass_kept_up(wr, t0);   /* the SQL scan is the backstop: the streams keep the promise */
    uint64_t mono = clock_mono_ms();
    if (mono >= wr->scan_at && scanner(wr) && !wr->paced) {
        /* the backstop every quarter of the timeout, 1 s to 60 s; sync mode's timeout at
         * every pass; at once again while pages come full */
        int every = sync_mode(wr) ? 0 : wr->app->cfg.pay_timeout_s * 250;
        if (every > 0)
            every = every < 1000 ? 1000 : every > 60000 ? 60000 : every;
        wr->scan_at = mono + (uint64_t)every;
        if (scan_rebuilt(wr) != 0)
            return -1;
        int rc = scan_sql(wr, mono + SWEEP_BUDGET_MS);
        if (rc < 0)
            return -1;
        if (rc > 0)
            wr->scan_at = 0;
        more |= rc;
        if (sync_mode(wr) && rc == 0 && !wr->paced)
            pass_kept_up(wr, t0);   /* sync mode: the scan decides every deadline */
    }
    /* more due than one pass's time: the next pass after the writer's next batch (a wave of
     * deadlines shares the writer with the orders and the events it makes, half and half) */
    if (more)
        wr->due_at = wr->timeouts_at = 0;
    paced_again(wr);
    return 0;
}
