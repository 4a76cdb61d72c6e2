/* admission.c -- flash-sale decisions: a verdict cache, then src/sale/admit.lua (EVALSHA).
 *
 * One script for every caller: a call carries one or more admissions of one voucher and
 * decides each as if it ran alone, one after the other (a single admission is a batch of
 * one). Coalescing (stream mode): per worker and voucher at most one call is in flight;
 * the admissions that arrive while it is out wait in the voucher's lane and go together
 * in the next call (up to BATCH_MAX). Unloaded, every admission goes at once (a batch of
 * one); loaded, Redis pays its per-call cost once per batch instead of once per buyer.
 * Queue mode and --redis-wait-replicas send every admission alone (a batch of one, no
 * lane). With --redis-wait-replicas the master itself refuses an admission before it
 * takes stock when it has fewer in-sync replicas than promised (min-replicas-to-write,
 * set by the writer: src/writer/writer_guard.c): NOREPLICAS, answered 503 RETRY.
 *
 * Stock buckets (buckets.h): what a worker knows of a voucher includes its K. A voucher
 * whose K it does not know yet is routed as unbucketed (its own keys) and the call asks
 * admit.lua to check K: either the codes come back (K = 1, known from then on: its
 * admissions never ask again nor touch buckets.c) or the voucher's K does, and this
 * worker sends each admission to the buyer's home bucket from then on (lanes are per
 * voucher, bucket and K). A home bucket's sold out waits for a refill and tries again;
 * only a refill that found every bucket empty makes it the voucher's verdict.
 *
 * Verdict cache: per worker, a small set-associative table voucher id -> (verdict, until,
 * and the voucher's K, which outlives the verdict: vcache_find).
 * Only verdicts that are the same for every user are kept (sold out, ended, not started,
 * no such voucher, paused), for soldout_cache_ms. When an entry expires the next request asks
 * Redis again, so at most one request per worker per interval learns a changed state
 * (stock put back, a voucher published later). Publishing a voucher on this worker
 * (publish.h) drops its entry at once.
 *
 * Contexts of requests waiting for Redis come from a per-worker free list, so the hot
 * path does not call malloc once the list has warmed up. The cache is reference-counted
 * by those contexts: admission_cache_free() may run while commands are still pending (their
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
#define REROUTES_MAX 2         /* routes an admission may be sent by again (buckets.h) */
#define ADMIT_REROUTE (-100)   /* internal: admit.lua answered another K than the call's */

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
    buckets_route_t rt;         /* the voucher's stock buckets (rt.k = 1: none, the rest unset) */
    int bucket;                 /* the buyer's home bucket (0 when unbucketed) */
    int rounds;                 /* refills this admission waited for */
    int reroutes;               /* times it was sent again by another route */
    int check;                  /* K not known: the call asks admit.lua to check it */
} adm_ctx_t;

/* Coalescing: per worker and voucher, at most one admit.lua call in flight; the
 * admissions that arrive meanwhile wait here and go together in the next call. */
typedef struct lane {
    int64_t voucher_id;         /* 0 = unused */
    int bucket;                 /* a stock bucket of it (buckets.h), 0 when unbucketed */
    int k;                      /* the K its admissions were routed by (admit.lua checks it) */
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
    int check;                  /* the call asked admit.lua to check K (an item's check) */
    adm_ctx_t *item[BATCH_MAX];
} batch_t;

struct adm_cache {
    vcache_t *verdicts;         /* voucher -> known_t: the answer until clock_now_ms(), K */
    lane_t lanes[LANES];
    uint64_t ttl_ms;            /* cfg.soldout_cache_ms */
    adm_ctx_t *free_ctx;
    int nfree;
    int outstanding;            /* contexts handed out and not yet returned */
    int dead;                   /* admission_cache_free() ran; free with the last context */
    uint64_t last_err_log_ms;
    buckets_cache_t *bk;        /* stock-bucket routes and refills (buckets.c) */
};

/* What this worker knows of a voucher: one entry of the verdict cache. */
typedef struct known {
    int verdict;                /* an ADMIT_* code every buyer gets, until the entry's expiry */
    int k;                      /* its stock buckets, learned from admit.lua (buckets.h): 1
                                 * unbucketed, > 1 bucketed (buckets.c has the route), 0 not
                                 * known yet; kept after the verdict expires */
} known_t;

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
    case ADMIT_PAUSED: return "秒杀已暂停";
    case ADMIT_QUEUE_REQUIRED: return "请先排队";
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
    case ADMIT_PAUSED: return "PAUSED";
    case ADMIT_QUEUE_REQUIRED: return "QUEUE_REQUIRED";
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
    case ADMIT_PAUSED: return OUT_PAUSED;
    case ADMIT_QUEUE_REQUIRED: return OUT_QUEUE_REQUIRED;
    case ADMIT_UNAVAILABLE: return OUT_UNAVAILABLE;
    case ADMIT_RETRY: return OUT_UNAVAILABLE;
    default: return OUT_OTHER;
    }
}

/* ------------------------------------------------------------ verdict cache */

static int cacheable(int code)
{
    return code == ADMIT_SOLD_OUT || code == ADMIT_ENDED || code == ADMIT_NOT_STARTED ||
           code == ADMIT_NO_VOUCHER || code == ADMIT_PAUSED;
}

/* A cached answer for the voucher (an ADMIT_* code), or NULL. */
static const int *verdict_get(struct adm_cache *ac, int64_t voucher_id, uint64_t now)
{
    const known_t *kn = vcache_get(ac->verdicts, voucher_id, now);
    return kn != NULL ? &kn->verdict : NULL;
}

static void verdict_put(struct adm_cache *ac, int64_t voucher_id, int code, uint64_t until)
{
    ((known_t *)vcache_put(ac->verdicts, voucher_id, until))->verdict = code;
}

/* The voucher's K as this worker knows it (0: not known). */
static int known_k(struct adm_cache *ac, int64_t voucher_id)
{
    const known_t *kn = vcache_find(ac->verdicts, voucher_id);
    return kn != NULL ? kn->k : 0;
}

/* Keeps the voucher's K, beside its verdict if it has one (a new entry carries no verdict:
 * it expired before it was made). */
static void known_k_set(struct adm_cache *ac, int64_t voucher_id, int k)
{
    known_t *kn = vcache_find(ac->verdicts, voucher_id);
    if (kn == NULL) {
        kn = vcache_put(ac->verdicts, voucher_id, 0);
    }
    kn->k = k;
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
    buckets_cache_free(ac->bk);
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

/* The caller hears the code (with the order when admitted); the context goes back first,
 * so the callback may start another admission. */
static void answer(adm_ctx_t *c, int code)
{
    http_req_t *r = c->r;
    admission_cb cb = c->cb;
    admission_order_t order = c->order;
    ctx_put(c);
    cb(r, code, code == ADMIT_OK ? &order : NULL);
}

/* --redis-wait-replicas: the WAIT's answer. Redis replication is asynchronous; WAIT n t
 * returns once n replicas have acknowledged every write this connection made before it
 * (the admission included), or after t ms with how many did. Fewer than n -- or no
 * answer -- and a failover could forget the order: the buyer hears "retry", never
 * success. (A retry then finds the order if it survived: 不能重复下单.) */
static void on_wait(struct redisReply *rep, void *priv)
{
    adm_ctx_t *c = priv;
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
    answer(c, ok ? ADMIT_OK : ADMIT_RETRY);
}

/* The admission keys of c's home bucket (voucher hash, buyers, stream) into 64-byte
 * buffers: the voucher's own keys when it is unbucketed or the buyer's home is bucket 0,
 * so an unbucketed admission never calls into buckets.c. 0, or -1 if one did not fit. */
static int home_keys(const adm_ctx_t *c, char *kv, char *kb, char *ks, int *lv, int *lb,
                     int *ls)
{
    if (c->bucket > 0)
        return buckets_keys(c->voucher_id, c->bucket, c->rt.salt[c->bucket], kv, kb, ks, lv, lb,
                            ls);
    *lv = key_voucher(kv, 64, c->voucher_id);
    *lb = key_buyers(kb, 64, c->voucher_id);
    *ls = key_stream(ks, 64, c->voucher_id);
    return *lv < 0 || *lb < 0 || *ls < 0 ? -1 : 0;
}

/* WAIT goes on the connection that carried the admission: on a cluster, the one to the
 * node of the home bucket's slot (rds_command_at routes by its voucher key). Its timeout
 * is half the Redis deadline, so the command's own deadline never fires first. */
static void send_wait(adm_ctx_t *c)
{
    worker_t *w = c->r->w;
    char kv[64], kb[64], ks[64], n[16], t[16];
    int lv, lb, ls;
    if (home_keys(c, kv, kb, ks, &lv, &lb, &ls) < 0) {
        on_wait(NULL, c);
        return;
    }
    int tmo = w->app->cfg.redis_timeout_ms / 2;
    int ln = snprintf(n, sizeof n, "%d", c->wait_replicas);
    int lt = snprintf(t, sizeof t, "%d", tmo > 0 ? tmo : 1);
    const char *argv[3] = { "WAIT", n, t };
    size_t lens[3] = { 4, (size_t)ln, (size_t)lt };
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
           rep->integer <= ADMIT_PAUSED ? (int)rep->integer : ADMIT_UNAVAILABLE;
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

/* The route c goes by, from the voucher's K as this worker knows it: unbucketed (only
 * rt.k is set: nothing else of the route is read), bucketed (the route buckets.c keeps;
 * if it has gone, K counts as not known), or not known -- routed as unbucketed, and the
 * call asks admit.lua to check. */
static void route_by(adm_ctx_t *c, int k)
{
    const buckets_route_t *rt = k > 1 ? buckets_route(c->ac->bk, c->voucher_id) : NULL;
    if (rt != NULL) {
        c->rt = *rt;
        c->check = 0;
    } else {
        c->rt.k = 1;
        c->check = k != 1;
    }
}

/* Sends c again by the route of the K now known (admit.lua answered another K, or a
 * bucket's keys are gone): at most REROUTES_MAX times, then 503 (retry) -- a voucher
 * whose K keeps changing under it is not sold by guesswork. */
static void reroute(adm_ctx_t *c, int k)
{
    if (++c->reroutes > REROUTES_MAX || c->ac->dead) {
        finish(c, ADMIT_RETRY);
        return;
    }
    route_by(c, k);
    admit_send(c);
}

/* The refill (buckets.h) a bucketed buyer's sold-out home waited for: units moved in, or
 * on their way between buckets (try at home again, where a refill looks again), every
 * bucket empty (sold out for the whole voucher) or unknown (retry: never a sold out while
 * stock may be left). */
static void on_refilled(void *priv, int64_t rc)
{
    adm_ctx_t *c = priv;
    if ((rc > 0 || rc == BUCKETS_IN_FLIGHT) && !c->ac->dead && ++c->rounds <= REFILL_ROUNDS_MAX) {
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

/* Step 1 of finish: a bucketed buyer's answer that is not yet the voucher's. A sold-out
 * home waits for a refill; a bucket without its keys (Redis lost them; a rebuild may have
 * put the voucher back unbucketed) sends the buyer once by bucket 0, which answers the K
 * it has now. 1 when the admission goes on, 0 when code is the answer. */
static int bucket_goes_on(adm_ctx_t *c, int code)
{
    struct adm_cache *ac = c->ac;
    if (c->rt.k < 2 || ac->dead) {
        return 0;
    }
    if (code == ADMIT_SOLD_OUT) {
        buckets_refill(c->r->w, ac->bk, c->voucher_id, &c->rt, c->bucket, 1, on_refilled, c);
        return 1;
    }
    if (code == ADMIT_NO_VOUCHER) {
        buckets_forget(ac->bk, c->voucher_id);
        known_k_set(ac, c->voucher_id, 0);
        if (c->bucket > 0 && c->reroutes == 0) {
            reroute(c, 0);
            return 1;
        }
    }
    return 0;
}

/* Step 2: a verdict every buyer of the voucher would get is answered from memory for
 * soldout_cache_ms; a voucher Redis does not have is worth a look in SQL. */
static void remember_verdict(adm_ctx_t *c, int code)
{
    struct adm_cache *ac = c->ac;
    if (cache_ok(c, code) && !ac->dead && ac->ttl_ms > 0) {
        verdict_put(ac, c->voucher_id, code, clock_now_ms() + ac->ttl_ms);
    }
    if (code == ADMIT_NO_VOUCHER && !ac->dead) {
        /* Redis may have lost it: if SQL knows it, it is rebuilt and the verdict
         * above expires within soldout_cache_ms. */
        rebuild_watch_poke(c->r->w->app->rebuild, c->voucher_id);
    }
}

/* Step 3, queue mode: the place was reserved before asking Redis, so an admitted order
 * always fits; anything else gives the place back. */
static void settle_queue_place(adm_ctx_t *c, int code)
{
    if (c->q == NULL) {
        return;
    }
    if (code == ADMIT_OK) {
        /* Not fenced: the queue holds no Redis generation (see ordq.h for what queue
         * mode loses anyway). */
        store_order_t o = {c->order.id, c->user_id, c->voucher_id, 1, c->now, STORE_EPOCH_ANY};
        ordq_push(c->q, &o);
    } else {
        ordq_release(c->q);
    }
}

/* Step 4, --redis-wait-replicas: an admitted order is told only once the replicas have
 * it (send_wait answers). 1 when the WAIT went out. */
static int awaits_replicas(adm_ctx_t *c, int code)
{
    if (code != ADMIT_OK || c->wait_replicas <= 0 || c->ac->dead) {
        return 0;
    }
    send_wait(c);
    return 1;
}

/* The end of one admission whose code Redis decided. */
static void finish(adm_ctx_t *c, int code)
{
    if (bucket_goes_on(c, code)) {
        return;
    }
    remember_verdict(c, code);
    settle_queue_place(c, code);
    if (awaits_replicas(c, code)) {
        return;
    }
    answer(c, code);
}

/* ------------------------------------------------------------ coalescing */

/* The lane of (voucher, bucket, K): admissions routed by different K never share a call,
 * since admit.lua checks one K per call. */
static lane_t *lane_find(struct adm_cache *ac, int64_t voucher_id, int bucket, int k)
{
    uint64_t h = ((uint64_t)voucher_id + (uint64_t)bucket) * UINT64_C(0x9e3779b97f4a7c15);
    for (unsigned i = 0; i < LANES; i++) {
        lane_t *l = &ac->lanes[(h + i) & (LANES - 1)];
        if (l->voucher_id == voucher_id && l->bucket == bucket && l->k == k) {
            return l;
        }
        if (l->voucher_id == 0) {
            l->voucher_id = voucher_id;
            l->bucket = bucket;
            l->k = k;
            return l;
        }
    }
    return NULL;   /* every lane taken by busy vouchers: the caller sends alone */
}

static void batch_send(lane_t *l, struct adm_cache *ac, worker_t *w);
static int batch_call(batch_t *b, int64_t voucher_id);

/* What the answer to a call that asked admit.lua to check K says of it (buckets.h): an
 * integer is the voucher's K (nothing was decided: the buyers go again, to their homes);
 * codes past the check (any but no-voucher, which comes before it) mean K = 1; 0 when it
 * says nothing. */
static int checked_k(const redisReply *rep, int ok)
{
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER) {
        return rep->integer >= 2 && rep->integer <= BUCKETS_MAX ? (int)rep->integer : 0;
    }
    int code = ok ? reply_code(rep->element[0]) : ADMIT_UNAVAILABLE;
    return code >= ADMIT_OK && code != ADMIT_NO_VOUCHER ? 1 : 0;
}

static void on_batch(struct redisReply *rep, void *priv)
{
    batch_t *b = priv;
    struct adm_cache *ac = b->ac;
    lane_t *l = b->lane;
    int ok = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == (size_t)b->n;
    int k = b->check && !ac->dead ? checked_k(rep, ok) : 0;
    if (k > 1) {
        buckets_learn(ac->bk, b->item[0]->voucher_id, k);
    }
    if (k >= 1) {
        known_k_set(ac, b->item[0]->voucher_id, k);
    }
    int rerouted = k > 1;
    /* --redis-wait-replicas: the master has fewer in-sync replicas than the promise and
     * refused admit.lua's first write (min-replicas-to-write, src/writer/writer_guard.c):
     * nothing was taken; the buyer retries. The writer logs the master's state once. */
    int noreplicas = rep != NULL && rep->type == REDIS_REPLY_ERROR && rep->len >= 10 &&
                     memcmp(rep->str, "NOREPLICAS", 10) == 0;
    if (!rerouted && rep != NULL && !ok && !noreplicas) {
        /* An error reply (script bug, OOM, READONLY replica...) or a shape we do not
         * know: worth a log line, but not one per request. */
        log_bad_reply(ac, rep, "admit.lua");
    }
    int n = b->n;
    adm_ctx_t *item[BATCH_MAX];
    int code[BATCH_MAX];
    for (int i = 0; i < n; i++) {
        item[i] = b->item[i];
        code[i] = rerouted ? ADMIT_REROUTE : ok ? reply_code(rep->element[i])
                  : noreplicas ? ADMIT_RETRY : ADMIT_UNAVAILABLE;
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
        if (code[i] == ADMIT_REROUTE) {
            reroute(item[i], k);
        } else {
            finish(item[i], code[i]);
        }
    }
}

/* Sends b as one admit.lua call (src/sale/admit.lua: KEYS voucher, buyers, stream; ARGV
 * voucherId, transport, K if an item asks the check, then userId, orderId per admission).
 * The transport is the items' (a lane holds stream-mode admissions only). Returns -1,
 * having sent nothing, when a key does not fit. */
static int batch_call(batch_t *b, int64_t voucher_id)
{
    worker_t *w = b->w;
    char kv[64], kb[64], ks[64], vid[SB_DEC_MAX], karg[SB_DEC_MAX], uid[BATCH_MAX][SB_DEC_MAX];
    const char *argv[6 + 2 * BATCH_MAX];
    size_t lens[6 + 2 * BATCH_MAX];
    /* The keys of the items' home bucket (a lane is one bucket's of one K). */
    const adm_ctx_t *c0 = b->item[0];
    int lv, lb, ls;
    if (home_keys(c0, kv, kb, ks, &lv, &lb, &ls) < 0) {
        return -1;
    }
    const char *tr = b->item[0]->q != NULL ? "queue" : "stream";
    argv[0] = kv; lens[0] = (size_t)lv;
    argv[1] = kb; lens[1] = (size_t)lb;
    argv[2] = ks; lens[2] = (size_t)ls;
    int nk = 3;
    int na = nk;
    argv[na] = vid; lens[na++] = (size_t)sb_dec(vid, voucher_id);
    argv[na] = tr; lens[na++] = strlen(tr);
    b->check = 0;
    for (int k = 0; k < b->n; k++) {
        b->check |= b->item[k]->check;
    }
    if (b->check) {
        argv[na] = karg; lens[na++] = (size_t)sb_dec(karg, c0->rt.k);
    }
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
    c->reroutes = 0;
    route_by(c, known_k(ac, voucher_id));
    admit_send(c);
}

/* Sends one admission to the buyer's home bucket (the voucher itself when unbucketed):
 * into the lane of its bucket and K (stream mode), or alone. */
static void admit_send(adm_ctx_t *c)
{
    struct adm_cache *ac = c->ac;
    worker_t *w = c->r->w;
    int64_t voucher_id = c->voucher_id;
    c->bucket = c->rt.k > 1 ? buckets_home(c->user_id, c->rt.k) : 0;
    c->next = NULL;
    if (w->app->cfg.mode == MODE_STREAM && c->q == NULL && c->wait_replicas == 0) {
        lane_t *l = lane_find(ac, voucher_id, c->bucket, c->rt.k);
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
    b->item[0] = c;
    if (batch_call(b, voucher_id) != 0) {
        free(b);
        finish(c, ADMIT_UNAVAILABLE);
    }
}

/* ------------------------------------------------------------ lifetime */

void admission_forget(struct worker *w, int64_t voucher_id)
{
    if (w->adm != NULL) {
        verdict_drop(w->adm, voucher_id);
    }
}

int admission_cache_init(struct worker *w)
{
    struct adm_cache *ac = xcalloc(1, sizeof(*ac));
    int ms = w->app->cfg.soldout_cache_ms;
    ac->ttl_ms = ms > 0 ? (uint64_t)ms : 0;
    ac->bk = buckets_cache_new();
    ac->verdicts = vcache_new(VERDICT_SLOTS, sizeof(known_t));
    w->adm = ac;
    return 0;
}

void admission_cache_free(struct worker *w)
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
