/* life.c -- cancelling an order (life.h): the lookup that proves ownership, then the
 * decision -- life.lua on the buyer's stock bucket (stream mode), or one SQL transaction
 * (sync mode).
 *
 * Pay: life.lua too (stream mode), whose refunds wait in the bucket's outbox for the
 * order writer (src/writer/writer_refund.c); in sync mode one SQL transaction (store.h
 * move 'y'), whose refunds (the payment rows at 5) the order writer sends from SQL.
 *
 * The script goes as EVAL with its text, not a preloaded SHA: a cancel is rare next to a
 * grab, and the scripts every connection loads (rds_script.h) stay the hot path's. */
#include "order/life.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "api/orders.h"
#include "core/app.h"
#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "embedded.h"
#include "redis/rds.h"
#include "sale/buckets.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/worker.h"
#include "store/store.h"

typedef struct cancel {
    worker_t *w;
    life_done_fn done;
    void *ctx;
    int64_t user_id, order_id, voucher_id;
    int bucket, nbuckets;
    int rc;     /* the SQL job's STORE_* */
    int was;    /* ... and the status it found */
    /* pay */
    int pay;
    char pid[LIFE_PAYMENT_ID_MAX + 1];
    int64_t amount, pay_value;
    int sync_new;   /* sync mode: the payment's row was written now */
    int known;      /* stream mode: its row's status in SQL (0 none, -1 another order's) */
    int fresh;      /* decided now (not an answer repeated): counted in /metrics */
    life_rc_t told; /* --redis-wait-replicas: the script's answer, told once WAIT confirmed it */
    int queued;     /* ... and whether it queued an event (the stream leaves the drained set) */
    char kv[64];    /* the bucket's voucher hash: WAIT goes to its node */
} cancel_t;

static cancel_t *op_new(worker_t *w, int64_t order_id, life_done_fn done, void *ctx)
{
    cancel_t *c = xcalloc(1, sizeof *c);
    c->w = w;
    c->done = done;
    c->ctx = ctx;
    c->order_id = order_id;
    return c;
}

/* A decision made now (rc its answer) counted in /metrics, once. */
static void count_decided(cancel_t *c, life_rc_t rc)
{
    if (c->fresh && (rc == LIFE_DONE || rc == LIFE_REFUNDED))
        shard_inc(!c->pay ? &c->w->m->life_cancels
                  : rc == LIFE_DONE ? &c->w->m->pay_taken : &c->w->m->pay_refunded);
    c->fresh = 0;
}

static void finish(cancel_t *c, life_rc_t rc)
{
    life_done_fn done = c->done;
    void *ctx = c->ctx;
    count_decided(c, rc);
    free(c);
    done(ctx, rc);
}

/* A status that is not 1, as the answer a cancel gets: paid or used is refused; 4, 5, 6
 * were cancelled (5 and 6: then a late payment was refunded), so cancelled already. */
static life_rc_t settled(int status)
{
    return status == 2 || status == 3 ? LIFE_PAID : LIFE_ALREADY;
}

/* ---------------------------------------------------------------- sync mode: SQL alone */

static void run_sql_cancel(store_t *st, void *arg)
{
    cancel_t *c = arg;
    if (!st)
        c->rc = STORE_ERR;
    else if (c->w->app->cfg.cancel_frees_buyer)   /* the row moves aside: the buyer may buy again */
        c->rc = store_order_cancel_free(st, c->order_id, clock_wall_s(), &c->was);
    else
        c->rc = store_order_cancel(st, c->order_id, clock_wall_s(), &c->was);
}

static void done_sql_cancel(worker_t *w, void *arg)
{
    cancel_t *c = arg;
    (void)w;
    if (c->rc == STORE_ERR)
        finish(c, LIFE_DB_DOWN);
    else if (c->rc == STORE_NOTFOUND)
        finish(c, LIFE_NOTFOUND);
    else {
        c->fresh = c->was == 1;
        finish(c, c->was == 1 ? LIFE_DONE : settled(c->was));
    }
}

/* ---------------------------------------------------------------- stream mode: life.lua */

/* The bucket's stream may be in the drained set (its sale ended, every order written):
 * the event just queued there must be read, so it leaves the set. Without a reply to
 * wait for -- the writers' sweep takes out a drained stream that shows lag anyway
 * (writer_sweep.c), this only saves that wait. */
static void undrain(cancel_t *c)
{
    char member[48];
    int n = key_bmember(member, sizeof member, NULL, 0, c->voucher_id, c->bucket, c->nbuckets);
    if (n < 0)
        return;
    const char *argv[3] = {"SREM", KEY_DRAINED, member};
    size_t lens[3] = {4, strlen(KEY_DRAINED), (size_t)n};
    rds_command(c->w->rds, NULL, NULL, 3, argv, lens);
}

/* ---------------------------------------------------------------- pay */

void life_refund_env(life_refund_env_t *e, int64_t order_id, const char *payment_id,
                     int64_t amount)
{
    snprintf(e->order, sizeof e->order, "SECKILL_ORDER_ID=%lld", (long long)order_id);
    snprintf(e->payment, sizeof e->payment, "SECKILL_PAYMENT_ID=%s", payment_id);
    snprintf(e->amount, sizeof e->amount, "SECKILL_AMOUNT=%lld", (long long)amount);
    e->env[0] = e->order;
    e->env[1] = e->payment;
    e->env[2] = e->amount;
    e->env[3] = NULL;
}

/* 1 at most once a second across the workers: a refusal that every caller meets (a master
 * short of its replicas, a cluster failing over) is one log line a second, not one a call. */
static int log_now(void)
{
    static uint64_t last_ms;
    uint64_t now = clock_now_ms(), last = __atomic_load_n(&last_ms, __ATOMIC_RELAXED);
    return now - last >= 1000 && __atomic_compare_exchange_n(&last_ms, &last, now, 0,
                                                             __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* An error reply that says this master cannot take the decision now, before the script
 * wrote anything: short of its min-replicas-to-write (--redis-wait-replicas, a master whose
 * replica is gone), the cluster failing over, a node loading its data or a replica. */
static int cannot_write_now(const char *err)
{
    static const char *const codes[] = {"NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN", "LOADING",
                                        "MASTERDOWN", "READONLY"};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        size_t n = strlen(codes[i]);
        if (strncmp(err, codes[i], n) == 0 && (err[n] == ' ' || err[n] == '\0'))
            return 1;
    }
    return 0;
}

/* The answer to a Redis call that failed: RETRY when Redis said it cannot take it now
 * (nothing was written), else REDIS_DOWN. */
static life_rc_t redis_failed(const redisReply *rep)
{
    return rep != NULL && rep->type == REDIS_REPLY_ERROR && cannot_write_now(rep->str)
               ? LIFE_RETRY : LIFE_REDIS_DOWN;
}

/* The script's answer goes out: the stream leaves the drained set after an event, and a
 * refund decided is in the bucket's outbox (the writer sends it). */
static void told(cancel_t *c)
{
    if (c->queued)
        undrain(c);
    finish(c, c->told);
}

/* --redis-wait-replicas: WAIT's answer. A decision the replicas do not have could be undone
 * by a failover -- a cancel answered success and the order then paid, or a payment answered
 * PAID and the order then timed out with its unit sold again -- so short of N (or without
 * an answer) the caller hears 503 系统繁忙，请重试; the retry answers from the decision
 * (life.lua answers a decided order or payment the same again), and is told once the
 * replicas have it. */
static void on_wait(redisReply *rep, void *priv)
{
    cancel_t *c = priv;
    int want = c->w->app->cfg.redis_wait_replicas;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer >= want) {
        told(c);
        return;
    }
    if (log_now()) {
        log_warn("life: %s of order %lld: %lld of %d replicas acknowledged in time; the "
                 "caller is asked to retry", c->pay ? "payment" : "cancel",
                 (long long)c->order_id,
                 rep != NULL && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1LL, want);
    }
    if (c->queued)
        undrain(c);   /* the event is queued all the same: the writer must read it */
    count_decided(c, c->told);   /* decided all the same: its retry answers "already" */
    finish(c, LIFE_RETRY);
}

/* 1 when a WAIT went out for c's answer (--redis-wait-replicas N > 0): on the connection
 * that carried the script, the node of the bucket's slot (rds_command_at routes by the
 * voucher key); half the Redis deadline, so the command's own deadline never fires first. */
static int replicated(cancel_t *c)
{
    int want = c->w->app->cfg.redis_wait_replicas;
    if (want <= 0)
        return 0;
    char n[16], t[16];
    int tmo = c->w->app->cfg.redis_timeout_ms / 2;
    int ln = snprintf(n, sizeof n, "%d", want);
    int lt = snprintf(t, sizeof t, "%d", tmo > 0 ? tmo : 1);
    const char *argv[3] = {"WAIT", n, t};
    size_t lens[3] = {4, (size_t)ln, (size_t)lt};
    rds_command_at(c->w->rds, c->kv, strlen(c->kv), on_wait, c, 3, argv, lens);
    return 1;
}

/* life.lua's answer (its header lists them) as the caller's, with what follows a decision
 * made now: the stream leaves the drained set, a refund goes out. */
static void on_script(redisReply *rep, void *priv)
{
    cancel_t *c = priv;
    if (redis_failed(rep) == LIFE_RETRY) {
        /* nothing was written (Redis refuses the script at its first write): the caller
         * asks again, as a buyer whose admission a master refused does */
        if (log_now())
            log_warn("life: %s of order %lld: %s; the caller is asked to retry",
                     c->pay ? "payment" : "cancel", (long long)c->order_id, rep->str);
        finish(c, LIFE_RETRY);
        return;
    }
    if (rep == NULL || rep->type != REDIS_REPLY_INTEGER) {
        if (rep != NULL)
            log_error("life: %s of order %lld: %s", c->pay ? "payment" : "cancel",
                      (long long)c->order_id,
                      rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        finish(c, LIFE_REDIS_DOWN);
        return;
    }
    long long code = rep->integer;
    life_rc_t rc;
    switch (code) {
    case 0:
        rc = LIFE_DONE;
        break;
    case 1:
    case 10:
        rc = LIFE_ALREADY;
        break;
    case 2:
        rc = c->pay ? LIFE_REFUNDED : LIFE_PAID;
        break;
    case 12:
        rc = LIFE_REFUNDED;
        break;
    case 3:
        rc = LIFE_NOTFOUND;
        break;
    default:   /* 5: the voucher's keys are not in this Redis (lost, not yet rebuilt) */
        log_warn("life: order %lld: voucher %lld has no stock in Redis", (long long)c->order_id,
                 (long long)c->voucher_id);
        rc = LIFE_REDIS_DOWN;
        break;
    }
    c->told = rc;
    c->queued = code == 0 || (c->pay && code == 2);
    c->fresh = c->queued;
    if (code <= 2 || code == 10 || code == 12) {
        if (replicated(c))
            return;
    }
    told(c);
}

/* The voucher's bucket count known: life.lua on the buyer's home bucket (buckets.h). */
static void run_script(cancel_t *c)
{
    char tag[48], kv[64], kb[64], kst[64], ks[64], kr[64], oid[SB_DEC_MAX], uid[SB_DEC_MAX],
        amt[SB_DEC_MAX];
    c->bucket = buckets_home(c->user_id, c->nbuckets);
    unsigned salt = c->bucket > 0 ? key_bsalt(c->voucher_id, c->bucket, c->nbuckets) : 0;
    if (key_btag_salt(tag, sizeof tag, c->voucher_id, c->bucket, salt) < 0 ||
        key_voucher_t(kv, sizeof kv, tag) < 0 || key_buyers_t(kb, sizeof kb, tag) < 0 ||
        key_ostate_t(kst, sizeof kst, tag) < 0 || key_stream_t(ks, sizeof ks, tag) < 0 ||
        key_refunds_t(kr, sizeof kr, tag) < 0) {
        finish(c, LIFE_NOTFOUND);
        return;
    }
    memcpy(c->kv, kv, sizeof c->kv);
    int lo = sb_dec(oid, c->order_id), lu = sb_dec(uid, c->user_id), la = sb_dec(amt, c->amount);
    if (!c->pay) {
        const char *op = c->w->app->cfg.cancel_frees_buyer ? "cancel-free" : "cancel";
        const char *argv[10] = {"EVAL", script_life_lua, "4", kv, kb, kst, ks, op, oid, uid};
        size_t lens[10] = {4, strlen(script_life_lua), 1, strlen(kv), strlen(kb), strlen(kst),
                           strlen(ks), strlen(op), (size_t)lo, (size_t)lu};
        rds_command(c->w->rds, on_script, c, 10, argv, lens);
        return;
    }
    /* pay: KEYS[5] the bucket's refund outbox, ARGV[5] the amount */
    const char *argv[13] = {"EVAL", script_life_lua, "5", kv, kb, kst, ks, kr, "pay", oid, uid,
                            c->pid, amt};
    size_t lens[13] = {4, strlen(script_life_lua), 1, strlen(kv), strlen(kb), strlen(kst),
                       strlen(ks), strlen(kr), 3, (size_t)lo, (size_t)lu, strlen(c->pid),
                       (size_t)la};
    rds_command(c->w->rds, on_script, c, 13, argv, lens);
}

static void on_buckets(redisReply *rep, void *priv)
{
    cancel_t *c = priv;
    if (rep == NULL || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL)) {
        finish(c, redis_failed(rep));
        return;
    }
    int64_t k = 1;
    if (rep->type == REDIS_REPLY_STRING && (sb_parse_pos(rep->str, rep->len, &k) != 0 ||
                                            k > BUCKETS_MAX))
        k = 1;
    c->nbuckets = (int)k;
    run_script(c);
}

static void ask_buckets(cancel_t *c);
static void claim_payment(cancel_t *c);

/* ---------------------------------------------------------------- a payment id's order
 *
 * A payment id belongs to one order. SQL's payment row says so once the writer has it;
 * until then (the event waits in the stream, a second or so, longer while SQL is down) a
 * notice of the same id for another order would reach another bucket's script, which
 * knows only its own orders' payments, and be taken too: two orders paid by one payment,
 * the second without its row. So the first notice of an id claims it in Redis --
 * `SET seckill:payid:<paymentId> <orderId> NX EX 3600`, an hour that outlasts the writer's
 * lag, after which SQL's row answers -- and a notice of an id claimed by another order is
 * refused (订单不存在, as SQL's row and sync mode answer). The key is the id's own (on a
 * Redis Cluster, a slot of its own): the script's keys stay the bucket's. */

#define PAYID_TTL_S "3600"
#define PAYID_KEY_MAX (sizeof "seckill:payid:" + LIFE_PAYMENT_ID_MAX)

static void on_payid_owner(redisReply *rep, void *priv)
{
    cancel_t *c = priv;
    int64_t owner = 0;
    if (rep == NULL || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL)) {
        finish(c, redis_failed(rep));
        return;
    }
    if (rep->type == REDIS_REPLY_NIL) {   /* expired between the SET and the GET: claim again */
        claim_payment(c);
        return;
    }
    if (sb_parse_pos(rep->str, rep->len, &owner) != 0 || owner != c->order_id) {
        finish(c, LIFE_NOTFOUND);   /* this payment id is another order's */
        return;
    }
    ask_buckets(c);
}

static void on_payid_claim(redisReply *rep, void *priv)
{
    cancel_t *c = priv;
    if (rep != NULL && rep->type == REDIS_REPLY_STATUS) {   /* OK: claimed now */
        ask_buckets(c);
        return;
    }
    if (rep == NULL || rep->type != REDIS_REPLY_NIL) {
        finish(c, redis_failed(rep));
        return;
    }
    char k[PAYID_KEY_MAX];   /* claimed before: by whom? */
    int n = key_payid(k, sizeof k, c->pid);
    if (n < 0) {
        finish(c, LIFE_NOTFOUND);
        return;
    }
    const char *argv[2] = {"GET", k};
    size_t lens[2] = {3, (size_t)n};
    rds_command(c->w->rds, on_payid_owner, c, 2, argv, lens);
}

static void claim_payment(cancel_t *c)
{
    char k[PAYID_KEY_MAX], oid[SB_DEC_MAX];
    int n = key_payid(k, sizeof k, c->pid);
    if (n < 0) {
        finish(c, LIFE_NOTFOUND);
        return;
    }
    int lo = sb_dec(oid, c->order_id);
    const char *argv[6] = {"SET", k, oid, "NX", "EX", PAYID_TTL_S};
    size_t lens[6] = {3, (size_t)n, (size_t)lo, 2, 2, strlen(PAYID_TTL_S)};
    rds_command(c->w->rds, on_payid_claim, c, 6, argv, lens);
}

static void run_pay_read(store_t *st, void *arg)
{
    cancel_t *c = arg;
    store_order_t o;
    c->rc = st ? store_order_get(st, c->order_id, &o) : STORE_ERR;
    if (c->rc != STORE_OK)
        return;
    c->user_id = o.user_id;
    c->voucher_id = o.voucher_id;
    c->was = o.status;
    store_voucher_t v;
    c->rc = store_voucher_get(st, o.voucher_id, &v);
    if (c->rc != STORE_OK)
        return;
    c->pay_value = v.pay_value;
    store_voucher_clear(&v);
    if (c->amount != c->pay_value)
        return;
    if (c->w->app->cfg.mode != MODE_SYNC) {
        /* a payment SQL has answered (its row): the same answer, also once Redis lost its
         * state hash -- the script is not asked again */
        store_payment_t p;
        int prc = store_payment_get(st, c->pid, &p);
        if (prc == STORE_ERR)
            c->rc = STORE_ERR;
        else if (prc == STORE_OK)
            c->known = p.order_id == c->order_id ? p.status : -1;
        return;
    }
    /* sync mode: the decision is SQL's, in one transaction -- 1 -> 2 with the payment row
     * (2), else 4 -> 5 (5: to refund); the same payment again answered from its row */
    store_move_t m = {.order_id = c->order_id, .now = clock_wall_s(), .kind = 'y',
                      .amount = c->amount};
    snprintf(m.payment_id, sizeof m.payment_id, "%s", c->pid);
    c->rc = store_orders_move(st, &m, 1);
    if (c->rc == STORE_OK)
        c->rc = m.rc;
    c->was = m.pay_order != c->order_id ? -1 : m.pay_status;
    c->sync_new = m.pay_new;
}

static void done_pay_read(worker_t *w, void *arg)
{
    cancel_t *c = arg;
    (void)w;
    if (c->rc == STORE_NOTFOUND) {
        finish(c, LIFE_NOT_YET);   /* admitted and not written yet, or no such order */
        return;
    }
    if (c->rc != STORE_OK) {
        finish(c, LIFE_DB_DOWN);
        return;
    }
    if (c->amount != c->pay_value) {
        finish(c, LIFE_BAD_AMOUNT);
        return;
    }
    if (c->w->app->cfg.mode != MODE_SYNC) {
        if (c->known < 0)
            finish(c, LIFE_NOTFOUND);   /* this payment id paid another order */
        else if (c->known)
            finish(c, c->known == 2 ? LIFE_ALREADY : LIFE_REFUNDED);
        else
            claim_payment(c);
        return;
    }
    if (c->was < 0) {   /* this payment id paid another order */
        finish(c, LIFE_NOTFOUND);
        return;
    }
    c->fresh = c->sync_new;
    if (c->was == 2) {
        finish(c, c->sync_new ? LIFE_DONE : LIFE_ALREADY);
        return;
    }
    /* a refund decided now (its row at 5) is sent by the order writer (writer_refund.c) */
    finish(c, LIFE_REFUNDED);
}

void life_pay(worker_t *w, int64_t order_id, const char *payment_id, int64_t amount,
              life_done_fn done, void *ctx)
{
    if (w->app->cfg.mode != MODE_STREAM && w->app->cfg.mode != MODE_SYNC) {
        done(ctx, LIFE_UNSUPPORTED);
        return;
    }
    cancel_t *c = op_new(w, order_id, done, ctx);
    c->pay = 1;
    c->amount = amount;
    snprintf(c->pid, sizeof c->pid, "%s", payment_id);
    if (jobs_submit(w->app->jobs, w, run_pay_read, done_pay_read, c) != 0)
        finish(c, LIFE_BUSY);
}

/* The order is this user's (found by orders.h). */
static void on_found(void *ctx, orders_rc_t rc, const orders_rec_t *recs, size_t n)
{
    cancel_t *c = ctx;
    switch (rc) {
    case ORDERS_OK:
        break;
    case ORDERS_NOTFOUND:
        finish(c, LIFE_NOTFOUND);
        return;
    case ORDERS_REDIS_DOWN:
        finish(c, LIFE_REDIS_DOWN);
        return;
    case ORDERS_BUSY:
        finish(c, LIFE_BUSY);
        return;
    default:
        finish(c, LIFE_DB_DOWN);
        return;
    }
    if (n != 1 || recs[0].user_id != c->user_id) {
        finish(c, LIFE_NOTFOUND);
        return;
    }
    if (recs[0].persisted && recs[0].status != 1) {
        finish(c, settled(recs[0].status));
        return;
    }
    c->voucher_id = recs[0].voucher_id;
    if (c->w->app->cfg.mode == MODE_SYNC) {
        if (jobs_submit(c->w->app->jobs, c->w, run_sql_cancel, done_sql_cancel, c) != 0)
            finish(c, LIFE_BUSY);
        return;
    }
    ask_buckets(c);
}

/* The voucher's bucket count (its hash's `buckets`), then the script. */
static void ask_buckets(cancel_t *c)
{
    char kv[64];
    if (key_voucher(kv, sizeof kv, c->voucher_id) < 0) {
        finish(c, LIFE_NOTFOUND);
        return;
    }
    const char *argv[3] = {"HGET", kv, "buckets"};
    size_t lens[3] = {4, strlen(kv), 7};
    rds_command(c->w->rds, on_buckets, c, 3, argv, lens);
}

void life_cancel(worker_t *w, int64_t user_id, int64_t order_id, life_done_fn done, void *ctx)
{
    if (w->app->cfg.mode != MODE_STREAM && w->app->cfg.mode != MODE_SYNC) {
        done(ctx, LIFE_UNSUPPORTED);
        return;
    }
    cancel_t *c = op_new(w, order_id, done, ctx);
    c->user_id = user_id;
    orders_get(w, user_id, order_id, on_found, c);
}
