/* rebuild_watch.c -- the thread that finds vouchers Redis lost and rebuilds them (see
 * rebuild_watch.h for when it looks; rebuild.h for what a rebuild does). */
#include "server/events.h"
#include "rebuild/rebuild_watch.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "sale/bucket_sweep.h"
#include "redis/rcl_sync.h"
#include "redis/rconn.h"
#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "server/metrics.h"
#include "rebuild/rebuild.h"
#include "room/pow.h"
#include "sale/onsale.h"
#include "store/store.h"
#include "core/xmem.h"

#define CHECK_EVERY_MS 1000
#define LIST_EVERY_MS 2000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define POKE_MAX 64
#define NOT_SALE_MAX 256
#define REG_ENDED_S 3600             /* ended sales still checked in the registry: a backlog
                                        may wait in their streams that long */
#define REG_BATCH 256                /* members per SMISMEMBER */

typedef struct known {
    int64_t id;
    int64_t end;                     /* sale end, epoch seconds (windows never change) */
    int k;                           /* stock buckets (SQL): each is watched */
} known_t;

struct rebuild_watch {
    app_t *app;
    pthread_t tid;
    pthread_mutex_t mu;              /* guards stop, pokes; with cv for naps */
    pthread_cond_t cv;
    int stop;
    int64_t pokes[POKE_MAX];
    int npokes;

    rcl_sync_route_t rt;                  /* one Redis, or the cluster (per-key contexts) */
    int up;                          /* rt is open */
    store_t *st;
    int backoff_ms;
    int down_logged;
    known_t *known;                  /* every flash-sale voucher seen in SQL */
    size_t nknown;
    uint64_t list_at;
    int64_t not_sale[NOT_SALE_MAX];  /* poked ids SQL does not know (ring) */
    size_t nnot_sale;
    int64_t refused[NOT_SALE_MAX];   /* bucketed vouchers not rebuilt, already logged (ring) */
    size_t nrefused;
};

/* ---------------------------------------------------------------- helpers */

static int stopping(rebuild_watch_t *w)
{
    pthread_mutex_lock(&w->mu);
    int s = w->stop;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Sleeps up to ms; stop ends it early, and so does a poke if wake_on_poke. */
static void nap(rebuild_watch_t *w, int ms, int wake_on_poke)
{
    struct timespec ts = clock_mono_after(ms);
    pthread_mutex_lock(&w->mu);
    while (!w->stop && (!wake_on_poke || w->npokes == 0) &&
           pthread_cond_timedwait(&w->cv, &w->mu, &ts) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&w->mu);
}

static void drop_redis(rebuild_watch_t *w, const char *why)
{
    if (!w->down_logged) {
        log_warn("rebuild watch: Redis unusable (%s); retrying", why);
        w->down_logged = 1;
    }
    if (w->up) {   /* after the log: why may be a context's own errstr */
        rcl_sync_route_close(&w->rt);
        memset(&w->rt, 0, sizeof w->rt);
        w->up = 0;
    }
}

static void drop_sql(rebuild_watch_t *w, const char *why)
{
    log_warn("rebuild watch: SQL: %s", why);
    store_close(w->st);
    w->st = NULL;
}

static int ensure_sql(rebuild_watch_t *w)
{
    if (w->st)
        return 0;
    char err[512];
    w->st = store_open(w->app->db_url, w->app->cfg.sql_timeout_ms, err, sizeof err);
    if (!w->st) {
        log_warn("rebuild watch: SQL: %s", err);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- one voucher */

static void rebuild_one(rebuild_watch_t *w, int64_t vid, const char *why)
{
    rebuild_opts_t o = {.owner = w->app->name, .rt = &w->rt,
                        .pay_timeout_s = w->app->cfg.pay_timeout_s};
    rebuild_result_t res;
    char err[512] = "";
    char kv[64];
    redisContext *c = NULL, *g = NULL;
    if (key_voucher(kv, sizeof kv, vid) < 0)
        return;
    c = rcl_sync_route_key(&w->rt, kv, err, sizeof err);
    if (c)
        g = rcl_sync_route_key(&w->rt, KEY_STREAMS, err, sizeof err);
    if (!c || !g) {
        drop_redis(w, err);
        return;
    }
    int rc = rebuild_voucher(c, g, w->st, vid, &o, &res, err, sizeof err);
    switch (rc) {
    case REBUILD_REFUSED:
        /* Looked at again every pass (an operator may fix it), logged once. */
        for (size_t k = 0; k < NOT_SALE_MAX && k < w->nrefused; k++)
            if (w->refused[k] == vid)
                return;
        w->refused[w->nrefused++ % NOT_SALE_MAX] = vid;
        log_error("voucher %lld: Redis lost its keys (%s) but not all of its stock buckets; "
                  "not rebuilt: %s", (long long)vid, why, err);
        break;
    case REBUILD_DONE:
        if (w->app->metrics)
            metric_inc(&w->app->metrics->redis_rebuilds);
        log_warn("voucher %lld: Redis had lost its keys (%s); rebuilt from SQL: stock %lld "
                 "of %lld, %lld buyers (%lld from SQL, %lld from the surviving stream), "
                 "generation %lld",
                 (long long)vid, why, (long long)res.stock, (long long)res.initial,
                 (long long)res.buyers, (long long)res.from_sql, (long long)res.from_stream,
                 (long long)res.epoch);
        events_add(EV_REBUILD, vid, "sale %lld rebuilt in Redis from SQL (%s): stock %lld, "
                   "%lld buyers", (long long)vid, why, (long long)res.stock,
                   (long long)res.buyers);
        break;
    case REBUILD_PRESENT:
        break;
    case REBUILD_BUSY:
        log_info("voucher %lld: another instance is rebuilding its Redis keys", (long long)vid);
        break;
    case REBUILD_NOT_SALE:
        w->not_sale[w->nnot_sale++ % NOT_SALE_MAX] = vid;
        break;
    default:
        log_error("voucher %lld: rebuilding its Redis keys failed: %s", (long long)vid, err);
        if (res.sql_failed)
            drop_sql(w, err);
        else
            drop_redis(w, err);
    }
}

/* ---------------------------------------------------------------- the passes */

/* Re-reads the flash-sale vouchers from SQL; windows of new ones are read once. */
static int refresh_list(rebuild_watch_t *w)
{
    int64_t *ids = NULL;
    size_t n = 0;
    if (store_seckill_ids(w->st, &ids, &n) != STORE_OK) {
        drop_sql(w, store_errmsg(w->st));
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < w->nknown && w->known[k].id != ids[i])
            k++;
        if (k < w->nknown)
            continue;
        store_voucher_t v;
        memset(&v, 0, sizeof v);
        int rc = store_voucher_get(w->st, ids[i], &v);
        int64_t begin = v.begin_time, end = v.end_time;
        int on_sale = onsale_voucher(v.is_seckill, v.type, v.status);
        store_voucher_clear(&v);
        if (rc == STORE_OK && !on_sale)
            continue;
        int nb = 1;
        store_room_t room = {0};
        if (rc == STORE_OK && (store_voucher_buckets(w->st, ids[i], &nb) != STORE_OK ||
                               store_voucher_room(w->st, ids[i], &room) != STORE_OK))
            rc = STORE_ERR;
        if (rc == STORE_ERR) {
            drop_sql(w, store_errmsg(w->st));
            free(ids);
            return -1;
        }
        if (rc != STORE_OK)
            continue;
        if (room.bot_gate)   /* --code-gate sale: this instance learns the gated window */
            pow_gate_sale(w->app, ids[i], begin, end);
        w->known = xrealloc(w->known, (w->nknown + 1) * sizeof *w->known);
        w->known[w->nknown].id = ids[i];
        w->known[w->nknown].end = end;
        w->known[w->nknown].k = nb;
        w->nknown++;
    }
    free(ids);
    return 0;
}

/* The order-id slot counter (KEY_INSTANCE, orderid.h) goes with a lost Redis; a new
 * instance would then lease this one's slot again and mint the same order ids. Putting it
 * back to at least our slot, every pass, closes that to the time between a loss and the
 * next pass (<= 1 s). */
static void keep_slot_counter(rebuild_watch_t *w)
{
    char why[256];
    redisContext *c = rcl_sync_route_key(&w->rt, KEY_INSTANCE, why, sizeof why);
    if (!c) {
        drop_redis(w, why);
        return;
    }
    redisReply *r = rconn_cmdf(c, why, sizeof why, "EVAL %s 1 %s %u",
                               "if (tonumber(redis.call('GET', KEYS[1])) or 0) < "
                               "tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) "
                               "return 1 end return 0",
                               KEY_INSTANCE, (unsigned)w->app->instance_slot);
    if (!r) {
        log_warn("rebuild watch: keeping %s: %s", KEY_INSTANCE, why);
        return;
    }
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
        log_warn("%s was gone or behind (Redis lost data?): set back to this instance's "
                 "order-id slot %u", KEY_INSTANCE, (unsigned)w->app->instance_slot);
    freeReplyObject(r);
}

/* A member of seckill:streams the watch expects: bucket b of voucher vid with k buckets. */
typedef struct reg_member {
    int64_t vid;
    int b, k;
    char mem[48];
} reg_member_t;

/* One SMISMEMBER for m[0..n); each missing member whose stream exists (EXISTS on the
 * stream's node) is added again. A stream that is gone has nothing to read: its voucher's
 * rebuild lists it. */
static void registry_batch(rebuild_watch_t *w, redisContext *g, const reg_member_t *m, size_t n)
{
    const char *argv[REG_BATCH + 2] = { "SMISMEMBER", KEY_STREAMS };
    char why[256];
    for (size_t i = 0; i < n; i++)
        argv[2 + i] = m[i].mem;
    redisReply *r = rconn_cmd(g, why, sizeof why, (int)(n + 2), argv, NULL);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != n) {
        drop_redis(w, r ? "SMISMEMBER: unexpected reply" : why);
        freeReplyObject(r);
        return;
    }
    for (size_t i = 0; i < n && w->up; i++) {
        char ks[64], mem[48];
        if (r->element[i]->type != REDIS_REPLY_INTEGER || r->element[i]->integer != 0 ||
            key_bmember(mem, sizeof mem, ks, sizeof ks, m[i].vid, m[i].b, m[i].k) < 0)
            continue;
        redisContext *c = rcl_sync_route_key(&w->rt, ks, why, sizeof why);
        redisReply *e = c ? rconn_cmdf(c, why, sizeof why, "EXISTS %s", ks) : NULL;
        int64_t there = 0;
        if (!e) {
            drop_redis(w, why);
            break;
        }
        rconn_int(e, &there);
        freeReplyObject(e);
        if (!there)
            continue;
        redisReply *a = rconn_cmdf(g, why, sizeof why, "SADD %s %s", KEY_STREAMS, mem);
        if (!a) {
            drop_redis(w, why);
            break;
        }
        if (a->type == REDIS_REPLY_INTEGER && a->integer == 1)
            log_warn("%s had lost %s (Redis lost data on its node?): listed again, so the "
                     "writers read %s", KEY_STREAMS, mem, ks);
        freeReplyObject(a);
    }
    freeReplyObject(r);
}

/* seckill:streams lives on one node (on a cluster, one master of several): if that node
 * loses its data while the streams' nodes keep theirs, no writer reads the streams it no
 * longer lists and their admitted orders never reach SQL. Every pass asks, in one
 * SMISMEMBER per REG_BATCH members, whether every bucket of every sale SQL knows (live,
 * or ended less than REG_ENDED_S ago) is listed; only a missing one costs more. */
static void keep_registry(rebuild_watch_t *w)
{
    int64_t now = (int64_t)time(NULL);
    char why[256];
    redisContext *g = rcl_sync_route_key(&w->rt, KEY_STREAMS, why, sizeof why);
    if (!g) {
        drop_redis(w, why);
        return;
    }
    reg_member_t *m = xmalloc(REG_BATCH * sizeof *m);
    size_t n = 0;
    for (size_t i = 0; w->up && i < w->nknown; i++) {
        if (w->known[i].end <= now - REG_ENDED_S)
            continue;
        for (int b = 0; b < w->known[i].k && w->up; b++) {
            m[n] = (reg_member_t){.vid = w->known[i].id, .b = b, .k = w->known[i].k};
            if (key_bmember(m[n].mem, sizeof m[n].mem, NULL, 0, m[n].vid, b, m[n].k) < 0)
                continue;
            if (++n == REG_BATCH) {
                registry_batch(w, g, m, n);
                n = 0;
            }
        }
    }
    if (n > 0 && w->up)
        registry_batch(w, g, m, n);
    free(m);
}

/* One HEXISTS per live voucher (on its node); rebuilds those without stock. */
static void check_all(rebuild_watch_t *w, const char *why)
{
    keep_slot_counter(w);
    if (!w->up)
        return;
    uint64_t now_ms = clock_mono_ms();
    if (now_ms >= w->list_at) {
        if (refresh_list(w) != 0)
            return;
        w->list_at = now_ms + LIST_EVERY_MS;
    }
    int64_t now = (int64_t)time(NULL);
    for (size_t i = 0; i < w->nknown && w->up && w->st && !stopping(w); i++) {
        if (w->known[i].end <= now)
            continue;
        char err[256];
        redisContext *c = NULL;
        int p = -1;
        char kv[64];
        if (key_voucher(kv, sizeof kv, w->known[i].id) < 0)
            continue;
        c = rcl_sync_route_key(&w->rt, kv, err, sizeof err);
        if (c)
            p = rebuild_present(c, w->known[i].id, err, sizeof err);
        if (p == 1 && w->known[i].k > 1) {
            /* a bucketed voucher: any lost bucket is rebuilt (K more HEXISTS) */
            unsigned mask = 0;
            p = bucket_sweep_present(&w->rt, w->known[i].id, w->known[i].k, &mask, err,
                                     sizeof err) < 0
                    ? -1
                    : mask == (1u << w->known[i].k) - 1;
        }
        if (p < 0) {
            drop_redis(w, err);
            return;
        }
        if (p == 0)
            rebuild_one(w, w->known[i].id, why);
    }
    if (w->up && !stopping(w))
        keep_registry(w);
    if (w->up && !stopping(w)) {
        /* stock-bucket transfers a crash cut short */
        bks_wait_t wt = {w->app->cfg.redis_wait_replicas, w->app->cfg.redis_timeout_ms / 2};
        int swept = bucket_sweep_all(&w->rt, &wt);
        if (swept > 0 && w->app->metrics)
            metric_add(&w->app->metrics->bucket_swept, (uint64_t)swept);
    }
}

static void handle_pokes(rebuild_watch_t *w)
{
    int64_t ids[POKE_MAX];
    pthread_mutex_lock(&w->mu);
    int n = w->npokes;
    memcpy(ids, w->pokes, (size_t)n * sizeof ids[0]);
    w->npokes = 0;
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < n && w->up && w->st; i++) {
        int skip = 0;
        for (size_t k = 0; k < NOT_SALE_MAX && k < w->nnot_sale; k++)
            skip |= w->not_sale[k] == ids[i];
        if (!skip)
            rebuild_one(w, ids[i], "admission found no voucher");
    }
}

static void *watch_main(void *arg)
{
    rebuild_watch_t *w = arg;
    log_set_thread_name("rebuild");
    uint64_t next_check = 0;
    while (!stopping(w)) {
        if (!w->up) {
            char err[512];
            w->up = rcl_sync_route_open(w->app->redis_url, w->app->cfg.redis_timeout_ms, &w->rt, err,
                                   sizeof err) == 0;
            if (!w->up) {
                if (!w->down_logged) {
                    log_warn("rebuild watch: Redis unusable (%s); retrying", err);
                    w->down_logged = 1;
                }
                nap(w, w->backoff_ms, 0);
                w->backoff_ms = w->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                                   : w->backoff_ms * 2;
                continue;
            }
            if (w->down_logged)
                log_info("rebuild watch: Redis usable again: looking for lost vouchers");
            w->down_logged = 0;
            w->backoff_ms = BACKOFF_MIN_MS;
            next_check = 0;   /* (re)connected: look at once */
        }
        if (ensure_sql(w) != 0) {
            nap(w, BACKOFF_MAX_MS, 0);
            continue;
        }
        handle_pokes(w);
        uint64_t now = clock_mono_ms();
        if (w->up && w->st && now >= next_check) {
            check_all(w, next_check == 0 ? "found at start or after a reconnect"
                                         : "found by the periodic check");
            next_check = now + CHECK_EVERY_MS;
        }
        now = clock_mono_ms();
        if (w->up && w->st && next_check > now)
            nap(w, (int)(next_check - now), 1);
    }
    log_info("rebuild watch: stopped");
    return NULL;
}

/* ---------------------------------------------------------------- lifetime */

rebuild_watch_t *rebuild_watch_start(struct app *app, char *err, size_t errlen)
{
    rebuild_watch_t *w = xcalloc(1, sizeof *w);
    w->app = app;
    w->backoff_ms = BACKOFF_MIN_MS;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->mu, NULL);
    int rc = pthread_create(&w->tid, NULL, watch_main, w);
    if (rc != 0) {
        snprintf(err, errlen, "rebuild watch: cannot start thread: %s", strerror(rc));
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    return w;
}

void rebuild_watch_poke(rebuild_watch_t *w, int64_t voucher_id)
{
    if (!w || voucher_id <= 0)
        return;
    pthread_mutex_lock(&w->mu);
    int dup = 0;
    for (int i = 0; i < w->npokes; i++)
        dup |= w->pokes[i] == voucher_id;
    if (!dup && w->npokes < POKE_MAX) {
        w->pokes[w->npokes++] = voucher_id;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

void rebuild_watch_stop(rebuild_watch_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->tid, NULL);
    if (w->up)
        rcl_sync_route_close(&w->rt);
    store_close(w->st);
    free(w->known);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
