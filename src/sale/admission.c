/* admission.c -- flash-sale decisions: a verdict cache, then src/sale/admit.lua (EVALSHA).
 *
 * One script for every caller: a call carries one or more admissions of one voucher and
 * decides each as if it ran alone, one after the other (a single admission is a batch of
 * one). Coalescing (stream mode): per worker and voucher at most one call is in flight;
 * the admissions that arrive while it is out wait in the voucher's lane and go together
 * in the next call (up to BATCH_MAX). Unloaded, every admission goes at once (a batch of
 * one); loaded, Redis pays its per-call cost once per batch instead of once per buyer.
 * Queue mode, the lab's list/pubsub transports and --redis-wait-replicas send every
 * admission alone (a batch of one, no lane).
 *
 * Stock buckets (buckets.h): the voucher's K is learned once per worker (bk_learn) before
 * its first admission; each admission goes to the buyer's home bucket (lanes are per
 * voucher and bucket), and a home bucket's sold out waits for a refill and tries again;
 * only a refill that found every bucket empty makes it the voucher's verdict.
 *
 * Verdict cache: per worker, a small set-associative table voucher id -> (verdict, until).
 * Only verdicts that are the same for every user are kept (sold out, ended, not started,
 * no such voucher), for soldout_cache_ms. When an entry expires the next request asks
 * Redis again, so at most one request per worker per interval learns a changed state
 * (stock put back, a voucher published later). admission_publish() on this worker drops
 * the voucher's entry at once.
 *
 * Contexts of requests waiting for Redis come from a per-worker free list, so the hot
 * path does not call malloc once the list has warmed up. The cache is reference-counted
 * by those contexts: adm_cache_free() may run while commands are still pending (their
 * callbacks come later with a NULL reply) and the memory goes with the last of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "sale/admission.h"
#include "core/app.h"
#include "sale/buckets.h"
#include "core/clock.h"
#include "http/http_req.h"
#include "core/key.h"
#include "core/log.h"
#include "sale/orderid.h"
#include "sale/ordq.h"
#include "redis/rds.h"
#include "core/sb.h"
#include "sale/vcache.h"
#include "rebuild/rebuild_watch.h"
#include "store/store.h"
#include "server/worker.h"
#include "core/xmem.h"

#define VERDICT_SLOTS 1024u
#define CTX_FREE_MAX 4096
#define LANES 64u
#define BATCH_MAX 64
#define REFILL_ROUNDS_MAX 16   /* a bucketed buyer's tries at home between refills */

typedef struct adm_ctx {
    struct adm_cache *ac;
    struct adm_ctx *next;       /* free list link; a lane's waiting list */
    http_req_t *r;
    admission_cb cb;
    int64_t voucher_id;
    int64_t user_id;
    admission_order_t order;    /* its id and digits: the script's argument, the answer */
    int64_t now;                /* wall seconds at admission (queue mode's create_time) */
    struct ordq *q;             /* queue mode: the place held for this order, else NULL */
    int wait_replicas;          /* --redis-wait-replicas: WAIT for this many after admission */
    bk_route_t rt;              /* the voucher's stock buckets (rt.k = 1: none) */
    int bucket;                 /* the buyer's home bucket */
    int rounds;                 /* refills this admission waited for */
} adm_ctx_t;

/* Coalescing: per worker and voucher, at most one admit.lua call in flight; the
 * admissions that arrive meanwhile wait here and go together in the next call. */
typedef struct lane {
    int64_t voucher_id;         /* 0 = unused */
    int bucket;                 /* a stock bucket of it (buckets.h), 0 when unbucketed */
    int inflight;               /* a call for this voucher is out */
    adm_ctx_t *head, *tail;     /* waiting, in arrival order */
    int nwait;
} lane_t;

/* One admit.lua call: its admissions, in ARGV order. */
typedef struct batch {
    struct adm_cache *ac;
    worker_t *w;
    lane_t *lane;               /* NULL: a call outside the lanes (always one admission) */
    int n;
    int resent;                 /* sent again after Redis lost its scripts (on_batch) */
    adm_ctx_t *item[BATCH_MAX];
} batch_t;

struct adm_cache {
    vcache_t *verdicts;         /* voucher -> cached answer code (int), until clock_now_ms() */
    lane_t lanes[LANES];
    uint64_t ttl_ms;            /* cfg.soldout_cache_ms */
    adm_ctx_t *free_ctx;
    int nfree;
    int outstanding;            /* contexts handed out and not yet returned */
    int dead;                   /* adm_cache_free() ran; free with the last context */
    uint64_t last_err_log_ms;
    bk_cache_t *bk;             /* stock-bucket routes and refills (buckets.c) */
};

/* ------------------------------------------------------------ messages */

void admission_order_set(admission_order_t *o, int64_t id)
{
    o->id = id;
    o->len = sb_dec(o->dec, id);
}

const char *admission_msg(int code)
{
    switch (code) {
    case ADMIT_SOLD_OUT: return "库存不足";
    case ADMIT_DUPLICATE: return "不能重复下单";
    case ADMIT_NOT_STARTED: return "秒杀尚未开始！";
    case ADMIT_ENDED: return "秒杀已经结束！";
    case ADMIT_NO_VOUCHER: return "优惠券不存在";
    case ADMIT_UNAVAILABLE: return "服务器异常";
    case ADMIT_RETRY: return "系统繁忙，请重试";
    default: return NULL;
    }
}

const char *admission_code(int code)
{
    switch (code) {
    case ADMIT_SOLD_OUT: return "SOLD_OUT";
    case ADMIT_DUPLICATE: return "DUPLICATE";
    case ADMIT_NOT_STARTED: return "NOT_STARTED";
    case ADMIT_ENDED: return "ENDED";
    case ADMIT_NO_VOUCHER: return "NO_VOUCHER";
    case ADMIT_UNAVAILABLE: return "UNAVAILABLE";
    case ADMIT_RETRY: return "RETRY";
    default: return NULL;
    }
}

outcome_t admission_outcome(int code)
{
    switch (code) {
    case ADMIT_OK: return OUT_OK;
    case ADMIT_SOLD_OUT: return OUT_SOLD_OUT;
    case ADMIT_DUPLICATE: return OUT_DUPLICATE;
    case ADMIT_NOT_STARTED: return OUT_NOT_STARTED;
    case ADMIT_ENDED: return OUT_ENDED;
    case ADMIT_NO_VOUCHER: return OUT_NO_VOUCHER;
    case ADMIT_UNAVAILABLE: return OUT_UNAVAILABLE;
    case ADMIT_RETRY: return OUT_UNAVAILABLE;
    default: return OUT_OTHER;
    }
}

/* ------------------------------------------------------------ verdict cache */

static int cacheable(int code)
{
    return code == ADMIT_SOLD_OUT || code == ADMIT_ENDED || code == ADMIT_NOT_STARTED ||
           code == ADMIT_NO_VOUCHER;
}

/* A cached answer for the voucher (an ADMIT_* code), or NULL. */
static const int *verdict_get(struct adm_cache *ac, int64_t voucher_id, uint64_t now)
{
    return vcache_get(ac->verdicts, voucher_id, now);
}

static void verdict_put(struct adm_cache *ac, int64_t voucher_id, int code, uint64_t until)
{
    *(int *)vcache_put(ac->verdicts, voucher_id, until) = code;
}

static void verdict_drop(struct adm_cache *ac, int64_t voucher_id)
{
    vcache_drop(ac->verdicts, voucher_id);
}

/* ------------------------------------------------------------ contexts */

static adm_ctx_t *ctx_get(struct adm_cache *ac)
{
    adm_ctx_t *c = ac->free_ctx;
    if (c != NULL) {
        ac->free_ctx = c->next;
        ac->nfree--;
    } else {
        c = xmalloc(sizeof(*c));
    }
    c->ac = ac;
    ac->outstanding++;
    return c;
}

static void cache_destroy(struct adm_cache *ac)
{
    while (ac->free_ctx != NULL) {
        adm_ctx_t *c = ac->free_ctx;
        ac->free_ctx = c->next;
        free(c);
    }
    bk_cache_free(ac->bk);
    vcache_free(ac->verdicts);
    free(ac);
}

static void ctx_put(adm_ctx_t *c)
{
    struct adm_cache *ac = c->ac;
    ac->outstanding--;
    if (ac->dead || ac->nfree >= CTX_FREE_MAX) {
        free(c);
        if (ac->dead && ac->outstanding == 0) {
            cache_destroy(ac);
        }
        return;
    }
    c->next = ac->free_ctx;
    ac->free_ctx = c;
    ac->nfree++;
}

/* ------------------------------------------------------------ admission */

/* --redis-wait-replicas: the WAIT's answer. Redis replication is asynchronous; WAIT n t
 * returns once n replicas have acknowledged every write this connection made before it
 * (the admission included), or after t ms with how many did. Fewer than n -- or no
 * answer -- and a failover could forget the order: the buyer hears "retry", never
 * success. (A retry then finds the order if it survived: 不能重复下单.) */
static void on_wait(struct redisReply *rep, void *priv)
{
    adm_ctx_t *c = priv;
    http_req_t *r = c->r;
    admission_cb cb = c->cb;
    admission_order_t order = c->order;
    int ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer >= c->wait_replicas;
    if (!ok && rep != NULL && !c->ac->dead) {
        uint64_t now = clock_now_ms();
        if (now - c->ac->last_err_log_ms >= 1000) {
            c->ac->last_err_log_ms = now;
            if (rep->type == REDIS_REPLY_INTEGER)
                log_warn("admission: WAIT: %lld of %d replicas acknowledged in time; the buyer "
                         "is asked to retry", (long long)rep->integer, c->wait_replicas);
            else
                log_warn("admission: WAIT: %.*s", rep->type == REDIS_REPLY_ERROR ? (int)rep->len : 16,
                         rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        }
    }
    ctx_put(c);
    cb(r, ok ? ADMIT_OK : ADMIT_RETRY, ok ? &order : NULL);
}

/* WAIT goes on the connection that carried the admission: on a cluster, the one to the
 * node of the voucher's slot (rds_command_at routes by the voucher key). Its timeout is
 * half the Redis deadline, so the command's own deadline never fires first. */
static void send_wait(adm_ctx_t *c)
{
    worker_t *w = c->r->w;
    char kv[64], kb[64], ks[64], n[16], t[16];
    int lv, lb, ls;
    if (bk_keys(c->voucher_id, c->bucket, c->rt.salt[c->bucket], kv, kb, ks, &lv, &lb, &ls) < 0)
        lv = -1;
    int tmo = w->app->cfg.redis_timeout_ms / 2;
    int ln = snprintf(n, sizeof n, "%d", c->wait_replicas);
    int lt = snprintf(t, sizeof t, "%d", tmo > 0 ? tmo : 1);
    const char *argv[3] = { "WAIT", n, t };
    size_t lens[3] = { 4, (size_t)ln, (size_t)lt };
    if (lv < 0) {
        on_wait(NULL, c);
        return;
    }
    rds_command_at(w->rds, kv, (size_t)lv, on_wait, c, 3, argv, lens);
}

/* Logs an error reply or a reply of an unknown shape, at most once a second. */
static void log_bad_reply(struct adm_cache *ac, const redisReply *rep, const char *script)
{
    uint64_t now = clock_now_ms();
    if (ac->dead || now - ac->last_err_log_ms < 1000) {
        return;
    }
    ac->last_err_log_ms = now;
    if (rep->type == REDIS_REPLY_ERROR) {
        log_error("admission: redis error: %.*s", (int)(rep->len > 200 ? 200 : rep->len),
                  rep->str);
    } else {
        log_error("admission: unexpected reply type %d from %s", rep->type, script);
    }
}

/* A reply element as an admission code; ADMIT_UNAVAILABLE when it is none. */
static int reply_code(const redisReply *rep)
{
    return rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer >= ADMIT_OK &&
           rep->integer <= ADMIT_NO_VOUCHER ? (int)rep->integer : ADMIT_UNAVAILABLE;
}

/* A verdict the whole voucher shares: a bucket's sold out is not the voucher's (a refill
 * may follow), nor is a bucket b >= 1 without its keys. */
static int cache_ok(const adm_ctx_t *c, int code)
{
    return cacheable(code) &&
           !(c->rt.k > 1 && (code == ADMIT_SOLD_OUT || (code == ADMIT_NO_VOUCHER && c->bucket > 0)));
}

static void admit_send(adm_ctx_t *c);
static void finish(adm_ctx_t *c, int code);
static void on_learned(void *priv, int k);

/* The refill (buckets.h) a bucketed buyer's sold-out home waited for: units moved in, or
 * on their way between buckets (try at home again, where a refill looks again), every
 * bucket empty (sold out for the whole voucher) or unknown (retry: never a sold out while
 * stock may be left). */
static void on_refilled(void *priv, int64_t rc)
{
    adm_ctx_t *c = priv;
    if ((rc > 0 || rc == BK_IN_FLIGHT) && !c->ac->dead && ++c->rounds <= REFILL_ROUNDS_MAX) {
        admit_send(c);
        return;
    }
    if (rc == 0) {
        c->rt.k = 1;   /* the voucher's verdict now: cached like any sold out */
        finish(c, ADMIT_SOLD_OUT);
        return;
    }
    finish(c, ADMIT_RETRY);
}

/* The end of one admission whose code Redis decided: caches, queue mode, WAIT, then the
 * caller's callback. A bucketed buyer's sold-out home first waits for a refill. */
static void finish(adm_ctx_t *c, int code)
{
    struct adm_cache *ac = c->ac;
    http_req_t *r = c->r;
    admission_cb cb = c->cb;
    if (c->rt.k > 1 && !ac->dead) {
        if (code == ADMIT_SOLD_OUT) {
            bk_refill(r->w, ac->bk, c->voucher_id, &c->rt, c->bucket, 1, on_refilled, c);
            return;
        }
        if (code == ADMIT_NO_VOUCHER) {
            /* The bucket's keys are gone: Redis lost data, and a rebuild may have put the
             * voucher back unbucketed. Learn K again and try once more. */
            bk_forget(ac->bk, c->voucher_id);
            if (c->bucket > 0 && c->rounds == 0) {
                c->rounds++;
                bk_learn(r->w, ac->bk, c->voucher_id, on_learned, c);
                return;
            }
        }
    }
    if (cache_ok(c, code) && !ac->dead && ac->ttl_ms > 0) {
        verdict_put(ac, c->voucher_id, code, clock_now_ms() + ac->ttl_ms);
    }
    if (code == ADMIT_NO_VOUCHER && !ac->dead) {
        /* Redis may have lost it: if SQL knows it, it is rebuilt and the verdict
         * above expires within soldout_cache_ms. */
        rebuild_watch_poke(r->w->app->rebuild, c->voucher_id);
    }
    if (c->q != NULL) {
        /* Queue mode: the place was reserved before asking Redis, so an admitted order
         * always fits; anything else gives the place back. */
        if (code == ADMIT_OK) {
            /* Not fenced: the queue holds no Redis generation (see ordq.h for what queue
             * mode loses anyway). */
            store_order_t o = {c->order.id, c->user_id, c->voucher_id, 1, c->now,
                               STORE_EPOCH_ANY};
            ordq_push(c->q, &o);
        } else {
            ordq_release(c->q);
        }
    }
    if (code == ADMIT_OK && c->wait_replicas > 0 && !ac->dead) {
        send_wait(c);
        return;
    }
    if (code != ADMIT_OK) {
        ctx_put(c);
        cb(r, code, NULL);
        return;
    }
    admission_order_t order = c->order;   /* the context goes back before the callback */
    ctx_put(c);
    cb(r, code, &order);
}

/* ------------------------------------------------------------ coalescing */

static lane_t *lane_find(struct adm_cache *ac, int64_t voucher_id, int bucket, int create)
{
    uint64_t h = ((uint64_t)voucher_id + (uint64_t)bucket) * UINT64_C(0x9e3779b97f4a7c15);
    for (unsigned i = 0; i < LANES; i++) {
        lane_t *l = &ac->lanes[(h + i) & (LANES - 1)];
        if (l->voucher_id == voucher_id && l->bucket == bucket) {
            return l;
        }
        if (l->voucher_id == 0) {
            if (!create) {
                return NULL;
            }
            l->voucher_id = voucher_id;
            l->bucket = bucket;
            return l;
        }
    }
    return NULL;   /* every lane taken by busy vouchers: the caller sends alone */
}

static void batch_send(lane_t *l, struct adm_cache *ac, worker_t *w);
static int batch_call(batch_t *b, int64_t voucher_id);

static void on_batch(struct redisReply *rep, void *priv)
{
    batch_t *b = priv;
    struct adm_cache *ac = b->ac;
    lane_t *l = b->lane;
    if (rds_is_noscript(rep) && !b->resent && !ac->dead) {
        /* Redis lost its scripts (SCRIPT FLUSH, a restart without them): rds has queued
         * their reload on this connection, so the same call sent now runs after it. */
        b->resent = 1;
        if (batch_call(b, b->item[0]->voucher_id) == 0) {
            return;
        }
    }
    int ok = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == (size_t)b->n;
    if (rep != NULL && !ok) {
        /* An error reply (script bug, OOM, READONLY replica...) or a shape we do not
         * know: worth a log line, but not one per request. */
        log_bad_reply(ac, rep, "admit.lua");
    }
    int n = b->n;
    adm_ctx_t *item[BATCH_MAX];
    int code[BATCH_MAX];
    for (int i = 0; i < n; i++) {
        item[i] = b->item[i];
        code[i] = ok ? reply_code(rep->element[i]) : ADMIT_UNAVAILABLE;
    }
    worker_t *w = b->w;
    free(b);
    /* Cache this batch's verdicts first: the waiting admissions are then answered from
     * memory if the voucher sold out, and the rest go out before any callback runs. */
    for (int i = 0; i < n; i++) {
        if (cache_ok(item[i], code[i]) && !ac->dead && ac->ttl_ms > 0) {
            verdict_put(ac, item[i]->voucher_id, code[i], clock_now_ms() + ac->ttl_ms);
        }
    }
    if (l != NULL) {
        l->inflight = 0;
        batch_send(l, ac, w);
    }
    for (int i = 0; i < n; i++) {
        finish(item[i], code[i]);
    }
}

/* Sends b as one admit.lua call (src/sale/admit.lua: KEYS voucher, buyers, stream or the
 * lab's list/channel; ARGV voucherId, transport, then userId, orderId per admission).
 * The transport is the items' (a lane holds stream-mode admissions only). Returns -1,
 * having sent nothing, when a key does not fit. */
static int batch_call(batch_t *b, int64_t voucher_id)
{
    worker_t *w = b->w;
    char kv[64], kb[64], ks[64], vid[SB_DEC_MAX], uid[BATCH_MAX][SB_DEC_MAX];
    const char *argv[5 + 2 * BATCH_MAX];
    size_t lens[5 + 2 * BATCH_MAX];
    /* The keys of the items' home bucket (a lane is one bucket's; unbucketed: bucket 0,
     * the voucher's own keys). */
    const adm_ctx_t *c0 = b->item[0];
    int lv, lb, ls;
    if (bk_keys(voucher_id, c0->bucket, c0->rt.salt[c0->bucket], kv, kb, ks, &lv, &lb, &ls) < 0) {
        return -1;
    }
    order_mode_t mode = w->app->cfg.mode;
    const char *tr = b->item[0]->q != NULL ? "queue" : mode == MODE_LIST ? "list"
                     : mode == MODE_PUBSUB ? "pubsub" : "stream";
    const char *k3 = ks;
    if (mode == MODE_LIST || mode == MODE_PUBSUB) {
        k3 = mode == MODE_LIST ? KEY_LAB_LIST : KEY_LAB_CHANNEL;
        ls = (int)strlen(k3);
    }
    argv[0] = kv; lens[0] = (size_t)lv;
    argv[1] = kb; lens[1] = (size_t)lb;
    argv[2] = k3; lens[2] = (size_t)ls;
    int nk = 3;
    int na = nk;
    argv[na] = vid; lens[na++] = (size_t)sb_dec(vid, voucher_id);
    argv[na] = tr; lens[na++] = strlen(tr);
    for (int k = 0; k < b->n; k++) {
        const adm_ctx_t *c = b->item[k];
        argv[na] = uid[k];
        lens[na++] = (size_t)sb_dec(uid[k], c->user_id);
        argv[na] = c->order.dec;
        lens[na++] = (size_t)c->order.len;
    }
    /* When Redis is down on_batch runs before this returns. */
    rds_evalsha(w->rds, SCRIPT_ADMIT, on_batch, b, nk, na, argv, lens);
    return 0;
}

/* Sends the lane's waiting admissions (up to BATCH_MAX) as one call, unless one is in
 * flight. Those a cached verdict now answers are answered without Redis. */
static void batch_send(lane_t *l, struct adm_cache *ac, worker_t *w)
{
    while (!l->inflight && l->head != NULL) {
        const int *v = ac->ttl_ms > 0 && !ac->dead
                       ? verdict_get(ac, l->voucher_id, clock_now_ms()) : NULL;
        if (v != NULL) {
            adm_ctx_t *c = l->head;
            l->head = c->next;
            l->nwait--;
            shard_inc(&w->m->soldout_local);
            int code = *v;
            http_req_t *r = c->r;
            admission_cb cb = c->cb;
            ctx_put(c);
            cb(r, code, NULL);
            continue;
        }
        batch_t *b = xmalloc(sizeof(*b));
        b->ac = ac;
        b->w = w;
        b->lane = l;
        b->n = 0;
        b->resent = 0;
        while (l->head != NULL && b->n < BATCH_MAX) {
            adm_ctx_t *c = l->head;
            l->head = c->next;
            l->nwait--;
            b->item[b->n++] = c;
        }
        if (l->head == NULL) {
            l->tail = NULL;
        }
        /* When Redis is down on_batch runs before batch_call returns, clears inflight
         * and sends (and fails) the rest. */
        l->inflight = 1;
        if (batch_call(b, l->voucher_id) != 0) {
            l->inflight = 0;
            for (int i = 0; i < b->n; i++) {
                finish(b->item[i], ADMIT_UNAVAILABLE);
            }
            free(b);
        }
    }
    if (!l->inflight && l->head == NULL) {
        l->voucher_id = 0;   /* idle: the lane is free for any voucher */
        l->tail = NULL;
    }
}

void admission_try(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb)
{
    worker_t *w = r->w;
    struct adm_cache *ac = w->adm;
    if (ac != NULL && ac->ttl_ms > 0) {
        const int *v = verdict_get(ac, voucher_id, clock_now_ms());
        if (v != NULL) {
            shard_inc(&w->m->soldout_local);
            cb(r, *v, NULL);
            return;
        }
    }
    adm_ctx_t *c = ac != NULL ? ctx_get(ac) : NULL;
    if (c == NULL) {
        cb(r, ADMIT_UNAVAILABLE, NULL);
        return;
    }
    c->q = w->app->ordq;
    if (c->q != NULL && ordq_reserve(c->q) < 0) {
        ctx_put(c);
        cb(r, ADMIT_UNAVAILABLE, NULL);   /* queue full: refuse before taking stock */
        return;
    }
    /* The loop's cached clock (clock.h), not one more read per admission: the order id's
     * second and queue mode's create_time are seconds. */
    int64_t now = (int64_t)(clock_now_wall_ms() / 1000u);
    c->r = r;
    c->cb = cb;
    c->wait_replicas = w->app->cfg.redis_wait_replicas;
    c->voucher_id = voucher_id;
    c->user_id = user_id;
    admission_order_set(&c->order, orderid_next(now));
    c->now = now;
    c->rounds = 0;
    const bk_route_t *rt = bk_lookup(ac->bk, voucher_id, clock_now_ms());
    if (rt == NULL) {
        bk_learn(w, ac->bk, voucher_id, on_learned, c);
        return;
    }
    c->rt = *rt;
    admit_send(c);
}

/* K learned (buckets.h): route the admission, or answer for a voucher Redis does not
 * have (as admit.lua would: cached, and the rebuild watch poked). */
static void on_learned(void *priv, int k)
{
    adm_ctx_t *c = priv;
    bk_route_fill(&c->rt, c->voucher_id, k);
    if (k <= 0) {
        c->bucket = 0;
        finish(c, k == 0 ? ADMIT_NO_VOUCHER : ADMIT_UNAVAILABLE);
        return;
    }
    admit_send(c);
}

/* Sends one admission to the buyer's home bucket (the voucher itself when unbucketed):
 * into the bucket's lane (stream mode), or alone. */
static void admit_send(adm_ctx_t *c)
{
    struct adm_cache *ac = c->ac;
    worker_t *w = c->r->w;
    int64_t voucher_id = c->voucher_id;
    c->bucket = bk_home(c->user_id, c->rt.k);
    c->next = NULL;
    if (w->app->cfg.mode == MODE_STREAM && c->q == NULL && c->wait_replicas == 0) {
        lane_t *l = lane_find(ac, voucher_id, c->bucket, 1);
        if (l != NULL) {
            if (l->tail != NULL) {
                l->tail->next = c;
            } else {
                l->head = c;
            }
            l->tail = c;
            l->nwait++;
            batch_send(l, ac, w);
            return;
        }
    }
    /* Alone: a batch of one outside the lanes. */
    batch_t *b = xmalloc(sizeof(*b));
    b->ac = ac;
    b->w = w;
    b->lane = NULL;
    b->n = 1;
    b->resent = 0;
    b->item[0] = c;
    if (batch_call(b, voucher_id) != 0) {
        free(b);
        finish(c, ADMIT_UNAVAILABLE);
    }
}

/* ------------------------------------------------------------ publishing */

typedef struct pub {
    http_req_t *r;
    void (*done)(http_req_t *r, int ok);
    int left;
    int ok;
    int64_t voucher_id;
} pub_t;

static void pub_step(pub_t *p, int ok, const char *what, const redisReply *rep)
{
    if (!ok) {
        p->ok = 0;
        if (rep != NULL && rep->type == REDIS_REPLY_ERROR) {
            log_error("publish voucher %lld: %s failed: %.*s", (long long)p->voucher_id, what,
                      (int)(rep->len > 200 ? 200 : rep->len), rep->str);
        } else {
            log_error("publish voucher %lld: %s failed: %s", (long long)p->voucher_id, what,
                      rep == NULL ? "redis unavailable" : "unexpected reply");
        }
    }
    if (--p->left > 0) {
        return;
    }
    http_req_t *r = p->r;
    void (*done)(http_req_t *, int) = p->done;
    int all_ok = p->ok;
    free(p);
    done(r, all_ok);
}

static void on_xgroup(struct redisReply *rep, void *priv)
{
    int ok = rep != NULL &&
             ((rep->type == REDIS_REPLY_STATUS) ||
              (rep->type == REDIS_REPLY_ERROR && rep->len >= 9 &&
               memcmp(rep->str, "BUSYGROUP", 9) == 0));
    pub_step(priv, ok, "XGROUP CREATE", rep);
}

static void on_sadd(struct redisReply *rep, void *priv)
{
    pub_step(priv, rep != NULL && rep->type == REDIS_REPLY_INTEGER, "SADD", rep);
}

static void on_hset(struct redisReply *rep, void *priv)
{
    pub_step(priv, rep != NULL && rep->type == REDIS_REPLY_INTEGER, "HSET", rep);
}

/* The order matters: the stream and its group exist and the writers know the stream
 * before the voucher hash makes it sellable, so no admitted order can land in a stream
 * nobody reads. The stock goes last and only if absent (HSETNX): admission needs stock to
 * sell, and a rebuild from SQL (rebuild.h) that got there first -- it looks for a stock
 * field -- is never overwritten. The four go out pipelined; done runs after the last. */
void admission_publish(struct http_req *r, int64_t voucher_id, int64_t stock, int64_t begin,
                       int64_t end, void (*done)(struct http_req *r, int ok))
{
    worker_t *w = r->w;
    char kv[64], ks[64], vid[24], sst[24], sbe[24], sen[24];
    int lv = key_voucher(kv, sizeof(kv), voucher_id);
    int ls = key_stream(ks, sizeof(ks), voucher_id);
    pub_t *p = xmalloc(sizeof(*p));
    if (lv < 0 || ls < 0) {
        free(p);
        done(r, 0);
        return;
    }
    if (w->adm != NULL) {
        verdict_drop(w->adm, voucher_id);
    }
    p->r = r;
    p->done = done;
    p->left = 4;
    p->ok = 1;
    p->voucher_id = voucher_id;
    int li = snprintf(vid, sizeof(vid), "%lld", (long long)voucher_id);
    int l1 = snprintf(sst, sizeof(sst), "%lld", (long long)stock);
    int l2 = snprintf(sbe, sizeof(sbe), "%lld", (long long)begin);
    int l3 = snprintf(sen, sizeof(sen), "%lld", (long long)end);

    const char *xg[6] = { "XGROUP", "CREATE", ks, KEY_GROUP, "0", "MKSTREAM" };
    size_t xgl[6] = { 6, 6, (size_t)ls, strlen(KEY_GROUP), 1, 8 };
    const char *sa[3] = { "SADD", KEY_STREAMS, vid };
    size_t sal[3] = { 4, strlen(KEY_STREAMS), (size_t)li };
    const char *hs[6] = { "HSET", kv, "begin", sbe, "end", sen };
    size_t hsl[6] = { 4, (size_t)lv, 5, (size_t)l2, 3, (size_t)l3 };
    const char *hn[4] = { "HSETNX", kv, "stock", sst };
    size_t hnl[4] = { 6, (size_t)lv, 5, (size_t)l1 };

    /* p lives until the fourth reply, which cannot come before the fourth send. */
    rds_command(w->rds, on_xgroup, p, 6, xg, xgl);
    rds_command(w->rds, on_sadd, p, 3, sa, sal);
    rds_command(w->rds, on_hset, p, 6, hs, hsl);
    rds_command(w->rds, on_hset, p, 4, hn, hnl);
}

/* ------------------------------------------------------------ lifetime */

int adm_cache_init(struct worker *w)
{
    struct adm_cache *ac = xcalloc(1, sizeof(*ac));
    int ms = w->app->cfg.soldout_cache_ms;
    ac->ttl_ms = ms > 0 ? (uint64_t)ms : 0;
    ac->bk = bk_cache_new();
    ac->verdicts = vcache_new(VERDICT_SLOTS, sizeof(int));
    w->adm = ac;
    return 0;
}

void adm_cache_free(struct worker *w)
{
    struct adm_cache *ac = w->adm;
    if (ac == NULL) {
        return;
    }
    w->adm = NULL;
    ac->dead = 1;
    if (ac->outstanding == 0) {
        cache_destroy(ac);
    }
}
