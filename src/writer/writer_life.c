/* writer_life.c -- lifecycle events in the order streams (writer_int.h), each a CAS on the
 * order's status (a replay changes nothing): a cancelled or timed-out order
 * (src/order/life.lua) becomes status 4 with its unit back in the voucher's SQL stock
 * (store_order_cancel); a paid one 2 with pay_time (store_order_pay); a cancelled one
 * whose payment was refunded 6 with refund_time (store_order_refund).
 *
 * An event follows its order's own entry in the same stream, and a batch writes its
 * orders before its events, so within one writer the insert always comes first. With
 * several writers reading one consumer group (instances, or a claim after a crash) the
 * order's entry may be in another writer's batch not yet committed: SQL has no such order
 * yet, and the event waits -- it is not acked, and the claim pass hands it out again once
 * idle (--writer-claim-idle-ms). An event whose order SQL still lacks EVENT_WAIT_S after
 * it was queued (the order went to the dead letters or was fenced by a rebuild) goes to
 * the dead letters too.
 *
 * Payment deadlines (--pay-timeout-s): after a batch commits, its orders go into their
 * bucket's due index, seckill:due:{tag}, member "<orderId>:<userId>", score createTime +
 * timeout (createTime is the admission's second by Redis's clock) -- the grab itself pays
 * nothing for it. Every DUE_EVERY_MS the writer takes each stream's due members up to now
 * and runs life.lua's expire on each: an order still unpaid is cancelled there exactly as
 * its buyer would (state t, unit back, event t, applied by this same file), one paid or
 * cancelled meanwhile is only taken out of the index. With several instances every writer
 * sweeps; the script decides each order once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "core/xmem.h"
#include "embedded.h"
#include "sale/buckets.h"
#include "writer/writer_int.h"

#define EVENT_WAIT_S 3600
#define SWEEP_BATCH "64"          /* due orders taken per stream and pass */
#define SWEEP_AFTER_S 86400       /* a sale this long past end + timeout is not swept */

int writer_life_parse(writer_t *wr, wentry_t *e, const redisReply *fields)
{
    const char *reason = NULL;
    int rc = sentry_event(fields, &e->ev, &reason);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        e->kind = E_DEAD;
        e->reason = reason;
    } else if (e->ev.user_id > WRITER_MAX_USER_ID) {
        e->kind = E_DEAD;
        e->reason = "userId out of range";
    } else {
        e->kind = E_EVENT;
        e->reason = NULL;
    }
    (void)wr;
    return 1;
}

/* The event's order is not in SQL (yet): wait, or give up on it once it is old. */
static int not_yet(writer_t *wr, wentry_t *e)
{
    int64_t queued_s = strtoll(e->id, NULL, 10) / 1000;
    if ((int64_t)time(NULL) - queued_s < EVENT_WAIT_S) {
        e->kind = E_WAIT;
        return 0;
    }
    e->kind = E_DEAD;
    e->reason = "event of an order SQL never had";
    log_error("writer: %s entry %s: %s (order %lld): moved to seckill:dead:{%s}",
              wr->streams[e->si].key, e->id, e->reason, (long long)e->ev.order_id,
              wr->streams[e->si].tag);
    return 1;
}

size_t writer_life_apply(writer_t *wr)
{
    size_t dead = 0;
    for (size_t i = 0; i < wr->nents; i++) {
        wentry_t *e = &wr->ents[i];
        if (e->kind != E_EVENT)
            continue;
        char err[512] = "";
        if (!wr->st)
            wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
        int was = 0;
        int rc = STORE_ERR, want = 1;
        if (wr->st) {
            switch (e->ev.kind) {
            case 'p':
                rc = store_order_pay(wr->st, e->ev.order_id, e->ev.ts, &was);
                want = 2;
                break;
            case 'r':
                rc = store_order_refund(wr->st, e->ev.order_id, e->ev.ts, &was);
                want = 6;
                break;
            default:
                rc = store_order_cancel(wr->st, e->ev.order_id, e->ev.ts, &was);
                want = 4;
                break;
            }
        }
        if (rc == STORE_NOTFOUND) {
            dead += (size_t)not_yet(wr, e);
        } else if (rc != STORE_OK) {
            /* left pending: the claim pass brings it back */
            log_warn("writer: %s entry %s: event %c of order %lld not applied (%s); it stays "
                     "pending", wr->streams[e->si].key, e->id, e->ev.kind, (long long)e->ev.order_id,
                     wr->st ? store_errmsg(wr->st) : err);
            e->kind = E_WAIT;
            metric_inc(&wr->m->sql_errors);
        } else if (e->ev.kind == 'r' && was == 1) {
            e->kind = E_WAIT;   /* its cancel is still on its way (another writer's batch) */
        } else if (was != (e->ev.kind == 'r' ? 4 : 1) && was != want) {
            /* Redis decided from its state; SQL says otherwise: SQL is the record */
            log_error("writer: %s entry %s: event %c of order %lld found status %d in SQL; "
                      "left as it is", wr->streams[e->si].key, e->id, e->ev.kind,
                      (long long)e->ev.order_id, was);
        }
    }
    return dead;
}

/* ---------------------------------------------------------------- payment deadlines */

static int timeouts_on(const writer_t *wr)
{
    return wr->app->cfg.pay_timeout_s > 0 && wr->app->cfg.mode == MODE_STREAM;
}

size_t writer_life_due(writer_t *wr)
{
    if (!timeouts_on(wr))
        return 0;
    enum { SCORE = 24, MEMBER = 48 };   /* bytes per order's score and member */
    size_t cmds = 0, off = 0;   /* handle_batch packed the E_ORDER entries' orders in order */
    char key[96];
    for (size_t i = 0; i < wr->nents;) {
        size_t si = wr->ents[i].si, count = 0;
        for (; i < wr->nents && wr->ents[i].si == si; i++)
            if (wr->ents[i].kind == E_ORDER)
                count += wr->ents[i].no;
        if (count == 0 || key_due_t(key, sizeof key, wr->streams[si].tag) < 0) {
            off += count;
            continue;
        }
        /* the arguments point into text: it lives until the command is appended */
        char *text = xmalloc(count * (SCORE + MEMBER));
        size_t n = 0;
        writer_args(wr, &n, "ZADD");
        writer_args(wr, &n, key);
        for (size_t k = 0; k < count; k++) {
            const store_order_t *o = &wr->orders[off + k];
            char *sc = text + k * (SCORE + MEMBER), *mb = sc + SCORE;
            snprintf(sc, SCORE, "%lld", (long long)(o->create_time + wr->app->cfg.pay_timeout_s));
            snprintf(mb, MEMBER, "%lld:%lld", (long long)o->id, (long long)o->user_id);
            writer_args(wr, &n, sc);
            writer_args(wr, &n, mb);
        }
        writer_append(wr, n);
        free(text);
        off += count;
        cmds++;
    }
    return cmds;
}

/* A bucket's keys for life.lua (its header). */
typedef struct lkeys {
    char kv[96], kb[96], kst[96], kdue[96], ks[96];
} lkeys_t;

static int lkeys_fill(lkeys_t *k, const char *tag)
{
    return key_voucher_t(k->kv, sizeof k->kv, tag) < 0 || key_buyers_t(k->kb, sizeof k->kb, tag) < 0 ||
                   key_ostate_t(k->kst, sizeof k->kst, tag) < 0 ||
                   key_due_t(k->kdue, sizeof k->kdue, tag) < 0 ||
                   key_stream_t(k->ks, sizeof k->ks, tag) < 0
               ? -1
               : 0;
}

/* Appends EVAL life.lua expire of order oid of user uid (decimal strings). */
static void append_expire(writer_t *wr, const lkeys_t *k, const char *oid, const char *uid)
{
    size_t n = 0;
    writer_args(wr, &n, "EVAL");
    writer_args(wr, &n, script_life_lua);
    writer_args(wr, &n, "5");
    writer_args(wr, &n, k->kv);
    writer_args(wr, &n, k->kb);
    writer_args(wr, &n, k->kst);
    writer_args(wr, &n, k->kdue);
    writer_args(wr, &n, k->ks);
    writer_args(wr, &n, "expire");
    writer_args(wr, &n, oid);
    writer_args(wr, &n, uid);
    writer_append(wr, n);
}

/* Reads the answers of sent appended expires: how many cancelled an order (0), or -1 when
 * the connection was lost. */
static long expire_answers(writer_t *wr, size_t sent, const char *where)
{
    long expired = 0;
    for (size_t i = 0; i < sent; i++) {
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK)
            return writer_redis_fail(wr, "EVAL life.lua expire", NULL);
        redisReply *x = rv;
        if (x->type == REDIS_REPLY_INTEGER && x->integer == 0)
            expired++;
        else if (x->type == REDIS_REPLY_ERROR)
            log_error("writer: %s: payment timeout: %s", where, x->str);
    }
    if (expired > 0)
        log_info("writer: %s: %ld unpaid orders timed out and cancelled", where, expired);
    return expired;
}

/* One pass over stream s's due index: 0, or -1 when the connection was lost. */
static int sweep_stream(writer_t *wr, const wstream_t *s, const char *now)
{
    lkeys_t k;
    if (lkeys_fill(&k, s->tag) != 0)
        return 0;
    size_t n = 0;
    writer_args(wr, &n, "ZRANGEBYSCORE");
    writer_args(wr, &n, k.kdue);
    writer_args(wr, &n, "-inf");
    writer_args(wr, &n, now);
    writer_args(wr, &n, "LIMIT");
    writer_args(wr, &n, "0");
    writer_args(wr, &n, SWEEP_BATCH);
    redisReply *r = writer_cmd(wr, n);
    if (r == NULL)
        return writer_redis_fail(wr, "ZRANGEBYSCORE", NULL);
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return 0;
    size_t sent = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *m = r->element[i];
        char oid[24], uid[24];
        const char *colon = is_str(m) ? memchr(m->str, ':', m->len) : NULL;
        size_t lo = colon ? (size_t)(colon - m->str) : 0, lu = colon ? m->len - lo - 1 : 0;
        if (!colon || lo == 0 || lo >= sizeof oid || lu == 0 || lu >= sizeof uid)
            continue;
        memcpy(oid, m->str, lo);
        oid[lo] = '\0';
        memcpy(uid, colon + 1, lu);
        uid[lu] = '\0';
        append_expire(wr, &k, oid, uid);   /* r (in the arena) stays valid: no reset */
        sent++;
    }
    return expire_answers(wr, sent, s->key) < 0 ? -1 : 0;
}

/* The backstop: orders SQL has unpaid past their deadline (the due index lost them: a
 * Redis failover, a rebuild), up to SCAN_MAX a pass, each run through life.lua expire on
 * its buyer's bucket. One Redis only: on a cluster a sub-writer's connection reaches its
 * own node's slots alone (docs/lifecycle.md). 0, or -1 when the connection was lost. */
#define SCAN_MAX "256"
static int scan_sql(writer_t *wr)
{
    char err[512] = "";
    if (!wr->st && !(wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err)))
        return 0;   /* SQL down: the next pass */
    const store_arg_t before = {(int64_t)time(NULL) - wr->app->cfg.pay_timeout_s - 1, 1};
    store_order_t *o = NULL;
    size_t n = 0;
    if (store_exec_orders(wr->st,
                          "SELECT id, user_id, voucher_id, status, create_time FROM "
                          "tb_voucher_order WHERE status = 1 AND create_time < ? ORDER BY id "
                          "LIMIT " SCAN_MAX,
                          &before, 1, &o, &n) != STORE_OK) {
        log_warn("writer: payment timeout scan: %s", store_errmsg(wr->st));
        return 0;
    }
    size_t sent = 0;
    for (size_t i = 0; i < n; i++) {
        int k = 1;
        char tag[48], oid[24], uid[24];
        lkeys_t keys;
        if (store_voucher_buckets(wr->st, o[i].voucher_id, &k) != STORE_OK)
            break;
        int b = buckets_home(o[i].user_id, k);
        if (key_btag(tag, sizeof tag, o[i].voucher_id, b, k) < 0 || lkeys_fill(&keys, tag) != 0)
            continue;
        snprintf(oid, sizeof oid, "%lld", (long long)o[i].id);
        snprintf(uid, sizeof uid, "%lld", (long long)o[i].user_id);
        append_expire(wr, &keys, oid, uid);
        sent++;
    }
    free(o);
    return expire_answers(wr, sent, "SQL scan") < 0 ? -1 : 0;
}

int writer_life_sweep(writer_t *wr)
{
    if (!timeouts_on(wr))
        return 0;
    int64_t now = (int64_t)time(NULL);
    char nows[32];
    snprintf(nows, sizeof nows, "%lld", (long long)now);
    uint64_t mono = clock_mono_ms();
    if (!wr->node_mode && !wr->cluster && mono >= wr->scan_at) {
        /* every quarter of the timeout, 1 s to 60 s */
        int every = wr->app->cfg.pay_timeout_s * 250;
        wr->scan_at = mono + (uint64_t)(every < 1000 ? 1000 : every > 60000 ? 60000 : every);
        if (scan_sql(wr) != 0)
            return -1;
    }
    for (size_t si = 0; si < wr->nstreams && !stopping(wr); si++) {
        const wstream_t *s = &wr->streams[si];
        /* every deadline is at most the sale's end + the timeout */
        if (s->vknown && now > s->vend + wr->app->cfg.pay_timeout_s + SWEEP_AFTER_S)
            continue;
        if (sweep_stream(wr, s, nows) != 0)
            return -1;
    }
    return 0;
}
