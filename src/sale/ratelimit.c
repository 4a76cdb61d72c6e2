/* ratelimit.c -- token buckets for the abuse limits (see ratelimit.h).
 *
 * A table is RL_ENTRIES buckets in sets of WAYS; a key's set is a seeded mix of the key,
 * so nobody can pick keys (sequential user ids, phone numbers) that all land in one set
 * and push a particular bucket out. Inside a set the lookup is a linear scan of WAYS
 * keys, all in one or two cache lines of the key array.
 *
 * Where the tables live (all made at start, so no request ever allocates one):
 *   - flash-sale limits: one table per limit per worker, in w->rl. No lock, no sharing.
 *   - /user/code and /user/login limits: one table per limit per process, in app->rl,
 *     guarded by one mutex (the per-phone code limit has none: it is kept in Redis).
 * Rates come from the app's configuration; a process serves one configuration, so the
 * tables never need to change. */
#include "sale/ratelimit.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/app.h"
#include "core/log.h"
#include "http/clientip.h"
#include "http/http_req.h"
#include "server/metrics.h"
#include "server/worker.h"
#include "core/xmem.h"

#define WAYS 8u

_Static_assert(RL__COUNT == METRICS_RL_KINDS, "metrics.h counts every limit of ratelimit.h");

/* A bucket's state; its key is kept apart (keys[]) so that the lookup, which compares
 * the keys of a whole set, reads one cache line: 8 keys of 8 bytes. */
typedef struct rl_entry {
    uint64_t last_ms;    /* when tokens was last brought up to date */
    double tokens;
} rl_entry_t;

struct rl_table {
    uint64_t *keys;      /* 0 = free; set i is keys[i * WAYS .. i * WAYS + WAYS), 64-aligned */
    void *keys_mem;      /* the allocation keys lies in */
    rl_entry_t *e;       /* the buckets, in the same order */
    size_t nsets;        /* a power of two */
    double per_ms;       /* refill, tokens per millisecond */
    double burst;
    uint64_t seed;
    int full;            /* RL_FULL_* */
};

/* The per-instance tables (app->rl). */
struct rl_shared {
    pthread_mutex_t mu;
    rl_table_t *t[RL__COUNT];
    int refusing[RL__COUNT];   /* the code budget: refusing now (one log line a change) */
    uint64_t pair_seed;        /* ratelimit_key_pair's secret */
};

/* A worker's own tables (w->rl). */
struct rl_worker {
    rl_table_t *t[RL__COUNT];
};

/* ------------------------------------------------------------ the table */

static uint64_t mix(uint64_t x)
{
    /* splitmix64's finaliser: every key bit affects every output bit. */
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

rl_table_t *ratelimit_table_new(double per_s, double burst, size_t entries, uint64_t seed, int full)
{
    if (!(per_s > 0) || !(burst >= 1)) {
        return NULL;
    }
    size_t nsets = 1;
    while (nsets * WAYS < entries) {
        nsets *= 2;
    }
    rl_table_t *t = xcalloc(1, sizeof(*t));
    _Static_assert(WAYS * sizeof(uint64_t) == 64, "a set's keys fill one cache line");
    t->keys_mem = xcalloc(nsets * WAYS + WAYS, sizeof(uint64_t));   /* + room to align */
    t->keys = (uint64_t *)(((uintptr_t)t->keys_mem + 63) & ~(uintptr_t)63);
    t->e = xcalloc(nsets * WAYS, sizeof(*t->e));
    t->nsets = nsets;
    t->per_ms = per_s / 1000.0;
    t->burst = burst;
    t->seed = seed;
    t->full = full;
    return t;
}

void ratelimit_table_free(rl_table_t *t)
{
    if (t != NULL) {
        free(t->keys_mem);
        free(t->e);
        free(t);
    }
}

/* tokens of e brought up to now (not stored). */
static double refilled(const rl_table_t *t, const rl_entry_t *e, uint64_t now_ms)
{
    double v = e->tokens;
    if (now_ms > e->last_ms) {
        v += (double)(now_ms - e->last_ms) * t->per_ms;
    }
    return v < t->burst ? v : t->burst;
}

int ratelimit_table_take(rl_table_t *t, uint64_t key, uint64_t now_ms)
{
    if (key == 0) {
        key = 1;
    }
    size_t base = (size_t)(mix(key ^ t->seed) & (t->nsets - 1)) * WAYS;
    uint64_t *keys = &t->keys[base];
    rl_entry_t *set = &t->e[base];
    /* Both the set's keys and its buckets are usually cache misses (a new buyer's key;
     * its victim search reads the buckets too): start loading the buckets now, so the
     * two misses overlap instead of following one another (perf: they were ~80 % of
     * this function). */
    __builtin_prefetch(&set[0]);
    __builtin_prefetch(&set[WAYS - 1]);
    rl_entry_t *e = NULL;
    for (unsigned i = 0; i < WAYS; i++) {
        if (keys[i] == key) {
            e = &set[i];
            break;
        }
    }
    if (e == NULL) {
        /* A free way, else one that has refilled (forgetting it loses nothing), else
         * (open tables only) the least recently used. */
        int victim = -1;
        for (unsigned i = 0; i < WAYS && victim < 0; i++) {
            if (keys[i] == 0 || refilled(t, &set[i], now_ms) >= t->burst) {
                victim = (int)i;
            }
        }
        if (victim < 0 && t->full == RL_FULL_REFUSES) {
            return 0;   /* every way is in use: refuse rather than forget a spent bucket */
        }
        if (victim < 0) {
            victim = 0;
            for (unsigned i = 1; i < WAYS; i++) {
                if (set[i].last_ms < set[victim].last_ms) {
                    victim = (int)i;
                }
            }
        }
        keys[victim] = key;
        e = &set[victim];
        e->tokens = t->burst;
        e->last_ms = now_ms;
    }
    double v = refilled(t, e, now_ms);
    if (now_ms > e->last_ms) {
        e->last_ms = now_ms;
    }
    if (v >= 1.0) {
        e->tokens = v - 1.0;
        return 1;
    }
    e->tokens = v;
    return 0;
}

/* ------------------------------------------------------------ keys */

uint64_t ratelimit_key_ip(const char *peer)
{
    if (peer == NULL) {
        return 1;
    }
    unsigned char a[16];
    if (inet_pton(AF_INET, peer, a) == 1) {
        return (UINT64_C(1) << 32) | ((uint64_t)a[0] << 24 | (uint64_t)a[1] << 16 |
                                      (uint64_t)a[2] << 8 | (uint64_t)a[3]);
    }
    if (inet_pton(AF_INET6, peer, a) == 1) {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, 12) == 0) {   /* ::ffff:a.b.c.d is an IPv4 client */
            return (UINT64_C(1) << 32) | ((uint64_t)a[12] << 24 | (uint64_t)a[13] << 16 |
                                          (uint64_t)a[14] << 8 | (uint64_t)a[15]);
        }
        uint64_t k = 0;
        for (int i = 0; i < 8; i++) {
            k = k << 8 | a[i];
        }
        /* ::/64 (::1 and friends) would be 0 or collide with the IPv4 tag space only in
         * prefixes nobody routes; 0 is reserved for "free". */
        return k != 0 ? k : 2;
    }
    return 1;
}

uint64_t ratelimit_key_digits(const char *z)
{
    if (z == NULL || *z == '\0') {
        return 0;
    }
    uint64_t v = 0;
    size_t n = 0;
    for (; z[n] != '\0'; n++) {
        if (z[n] < '0' || z[n] > '9' || n >= 19) {
            return 0;
        }
        v = v * 10 + (uint64_t)(z[n] - '0');
    }
    return v;
}

/* ------------------------------------------------------------ the service's limits */

void ratelimit_per_worker(double per_s, double burst, int threads, double *w_per_s,
                          double *w_burst)
{
    int n = threads > 0 ? threads : 1;
    *w_per_s = per_s / n;
    double b = burst / n;
    *w_burst = b >= 1.0 ? b : 1.0;
}

static const config_rate_t *limit_of(const config_t *cfg, rl_kind_t kind)
{
    switch (kind) {
    case RL_USER_SECKILL: return &cfg->rate_user_seckill;
    case RL_IP_SECKILL: return &cfg->rate_ip_seckill;
    case RL_IP_CODE: return &cfg->rate_ip_code;
    case RL_PHONE_CODE: return &cfg->rate_phone_code;
    case RL_PHONE_LOGIN: return &cfg->rate_phone_login;
    case RL_IP_LOGIN: return &cfg->rate_ip_login;
    case RL_USER_LOOKUP: return &cfg->rate_user_lookup;
    case RL_CODE_BUDGET: return &cfg->code_budget;
    default: return NULL;
    }
}

static int per_worker(rl_kind_t kind)
{
    return kind == RL_USER_SECKILL || kind == RL_IP_SECKILL;
}

/* A limit whose table may evict: it guards capacity or cost, not a secret. */
static int evicts(rl_kind_t kind)
{
    return per_worker(kind) || kind == RL_IP_CODE;
}

static uint64_t random_seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof(s), GRND_NONBLOCK) != (ssize_t)sizeof(s)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = mix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&ts);
    }
    return s;
}

/* Makes the tables of the limits that are on and are (per_worker_tables) or are not
 * per-worker. threads > 0 divides a per-worker limit. Returns 0 or -1. */
static int tables_make(rl_table_t **t, const config_t *cfg, int per_worker_tables, int threads)
{
    for (int k = 0; k < RL__COUNT; k++) {
        const config_rate_t *lim = limit_of(cfg, (rl_kind_t)k);
        if (lim == NULL || !(lim->per_s > 0) || per_worker((rl_kind_t)k) != per_worker_tables ||
            k == RL_PHONE_CODE) {   /* in Redis (logincode.h) */
            continue;
        }
        if (per_worker_tables) {
            double ps, b;
            ratelimit_per_worker(lim->per_s, lim->burst, threads, &ps, &b);
            t[k] = ratelimit_table_new(ps, b, RL_ENTRIES, random_seed(), RL_FULL_EVICTS);
        } else {
            t[k] = ratelimit_table_new(lim->per_s, lim->burst >= 1 ? lim->burst : 1,
                                       k == RL_CODE_BUDGET ? WAYS : RL_ENTRIES, random_seed(),
                                       evicts((rl_kind_t)k) ? RL_FULL_EVICTS : RL_FULL_REFUSES);
        }
        if (t[k] == NULL) {
            return -1;
        }
    }
    return 0;
}

static void tables_free(rl_table_t **t)
{
    for (int k = 0; k < RL__COUNT; k++) {
        ratelimit_table_free(t[k]);
        t[k] = NULL;
    }
}

int ratelimit_app_init(app_t *app)
{
    struct rl_shared *sh = xcalloc(1, sizeof(*sh));
    pthread_mutex_init(&sh->mu, NULL);
    sh->pair_seed = random_seed();
    app->rl = sh;
    return tables_make(sh->t, &app->cfg, 0, 0);   /* on failure the caller frees */
}

void ratelimit_app_free(app_t *app)
{
    struct rl_shared *sh = app->rl;
    if (sh == NULL) {
        return;
    }
    tables_free(sh->t);
    pthread_mutex_destroy(&sh->mu);
    free(sh);
    app->rl = NULL;
}

int ratelimit_worker_init(worker_t *w)
{
    struct rl_worker *rw = xcalloc(1, sizeof(*rw));
    w->rl = rw;
    const app_t *app = w->app;
    return tables_make(rw->t, &app->cfg, 1, app->cfg.threads);
}

void ratelimit_worker_free(worker_t *w)
{
    struct rl_worker *rw = w->rl;
    if (rw == NULL) {
        return;
    }
    tables_free(rw->t);
    free(rw);
    w->rl = NULL;
}

/* Takes a token; a limit that is on but has no table (init was skipped: tests, fuzz
 * targets) refuses the limits that fail closed and lets the others through. */
static int take(const http_req_t *r, rl_kind_t kind, uint64_t key, uint64_t now_ms)
{
    worker_t *w = r->w;
    if (per_worker(kind)) {
        struct rl_worker *rw = w->rl;
        return rw == NULL || rw->t[kind] == NULL || ratelimit_table_take(rw->t[kind], key, now_ms);
    }
    struct rl_shared *sh = w->app->rl;
    if (sh == NULL || sh->t[kind] == NULL) {
        return 0;
    }
    pthread_mutex_lock(&sh->mu);
    int ok = ratelimit_table_take(sh->t[kind], key, now_ms);
    int changed = kind == RL_CODE_BUDGET && sh->refusing[kind] != !ok;
    if (changed) {
        sh->refusing[kind] = !ok;
    }
    pthread_mutex_unlock(&sh->mu);
    if (changed && !ok) {
        const config_rate_t *lim = limit_of(&w->app->cfg, kind);
        log_warn("login code budget spent (%.0f a minute, burst %.0f): /user/code answers 503 "
                 "until it refills (--code-budget)", lim->per_s * 60, lim->burst);
    } else if (changed) {
        log_info("login code budget available again");
    }
    return ok;
}

/* The limit, or NULL when it is off. */
static const config_rate_t *limit_on(const http_req_t *r, rl_kind_t kind)
{
    if ((unsigned)kind >= RL__COUNT || r->w == NULL || r->w->app == NULL) {
        return NULL;
    }
    const config_rate_t *lim = limit_of(&r->w->app->cfg, kind);
    return lim != NULL && lim->per_s > 0 ? lim : NULL;
}

uint64_t ratelimit_peer_key(const http_req_t *r)
{
    char buf[64];   /* the client behind a trusted proxy (clientip.h) */
    const clientip_set_t *trusted = r->w != NULL && r->w->app != NULL ? r->w->app->trusted : NULL;
    return ratelimit_key_ip(clientip_of(trusted, r->peer, r->forwarded_for, buf, sizeof buf));
}

uint64_t ratelimit_key_pair(const http_req_t *r, uint64_t a, uint64_t b)
{
    const struct rl_shared *sh = r->w != NULL && r->w->app != NULL ? r->w->app->rl : NULL;
    uint64_t k = mix(mix(a ^ (sh != NULL ? sh->pair_seed : 0)) ^ b);
    return k != 0 ? k : 1;
}

int ratelimit_allow_peer(http_req_t *r, rl_kind_t kind)
{
    if (limit_on(r, kind) == NULL) {
        return 1;   /* off: not even the address parse */
    }
    return ratelimit_allow(r, kind, ratelimit_peer_key(r));
}

void ratelimit_count(http_req_t *r, rl_kind_t kind)
{
    metrics_shard_t *m = r->w != NULL ? r->w->m : NULL;
    if (m != NULL && (unsigned)kind < RL__COUNT) {
        shard_inc(&m->rate_limited);
        shard_inc(&m->rate_limited_by[kind]);
    }
}

int ratelimit_allow(http_req_t *r, rl_kind_t kind, uint64_t key)
{
    const config_rate_t *lim = limit_on(r, kind);
    if (lim == NULL) {
        return 1;
    }
    /* The time the request was complete: no extra clock read on the hot path. */
    uint64_t now_ms = r->start_ns / 1000000u;
    if (take(r, kind, key, now_ms)) {
        return 1;
    }
    ratelimit_count(r, kind);
    return 0;
}

int ratelimit_retry_after_s(const http_req_t *r, rl_kind_t kind)
{
    const config_rate_t *lim = limit_on(r, kind);
    if (lim == NULL) {
        return 1;
    }
    double s = 1.0 / lim->per_s;   /* one token's refill time */
    return s < 1 ? 1 : s > 86400 ? 86400 : (int)(s + 0.999);
}
