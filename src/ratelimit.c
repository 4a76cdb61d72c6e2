/* ratelimit.c -- token buckets for the abuse limits (see ratelimit.h).
 *
 * A table is RL_ENTRIES buckets in sets of WAYS; a key's set is a seeded mix of the key,
 * so nobody can pick keys (sequential user ids, phone numbers) that all land in one set
 * and push a particular bucket out. Inside a set the lookup is a linear scan of WAYS
 * keys, all in one or two cache lines of the key array.
 *
 * Where the tables live:
 *   - flash-sale limits: one table per limit per worker thread, found through a
 *     pthread key and created on the thread's first use; the key's destructor frees them
 *     when the thread ends. No lock, no sharing.
 *   - /user/code and /user/login limits: one table per limit per process, created on
 *     first use, guarded by one mutex, freed by a destructor at exit.
 * Rates come from the configuration of the request's app when a table is created; a
 * process serves one configuration, so the tables never need to change. */
#include "ratelimit.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api.h"
#include "app.h"
#include "http.h"
#include "metrics.h"
#include "worker.h"

#define WAYS 8u

_Static_assert(RL__COUNT == METRICS_RL_KINDS, "metrics.h counts every limit of ratelimit.h");

typedef struct rl_entry {
    uint64_t key;        /* 0 = free */
    uint64_t last_ms;    /* when tokens was last brought up to date */
    double tokens;
} rl_entry_t;

struct rl_table {
    rl_entry_t *e;
    size_t nsets;        /* a power of two */
    double per_ms;       /* refill, tokens per millisecond */
    double burst;
    uint64_t seed;
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

rl_table_t *rl_table_new(double per_s, double burst, size_t entries, uint64_t seed)
{
    if (!(per_s > 0) || !(burst >= 1)) {
        return NULL;
    }
    size_t nsets = 1;
    while (nsets * WAYS < entries) {
        nsets *= 2;
    }
    rl_table_t *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return NULL;
    }
    t->e = calloc(nsets * WAYS, sizeof(*t->e));
    if (t->e == NULL) {
        free(t);
        return NULL;
    }
    t->nsets = nsets;
    t->per_ms = per_s / 1000.0;
    t->burst = burst;
    t->seed = seed;
    return t;
}

void rl_table_free(rl_table_t *t)
{
    if (t != NULL) {
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

int rl_table_take(rl_table_t *t, uint64_t key, uint64_t now_ms)
{
    if (key == 0) {
        key = 1;
    }
    rl_entry_t *set = &t->e[(mix(key ^ t->seed) & (t->nsets - 1)) * WAYS];
    rl_entry_t *e = NULL, *victim = NULL;
    for (unsigned i = 0; i < WAYS; i++) {
        if (set[i].key == key) {
            e = &set[i];
            break;
        }
    }
    if (e == NULL) {
        /* A free way, else one that has refilled (forgetting it loses nothing), else
         * the least recently used. */
        for (unsigned i = 0; i < WAYS && victim == NULL; i++) {
            if (set[i].key == 0 || refilled(t, &set[i], now_ms) >= t->burst) {
                victim = &set[i];
            }
        }
        if (victim == NULL) {
            victim = &set[0];
            for (unsigned i = 1; i < WAYS; i++) {
                if (set[i].last_ms < victim->last_ms) {
                    victim = &set[i];
                }
            }
        }
        e = victim;
        e->key = key;
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

uint64_t rl_key_ip(const char *peer)
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

uint64_t rl_key_digits(const char *z)
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
    default: return NULL;
    }
}

static int per_worker(rl_kind_t kind)
{
    return kind == RL_USER_SECKILL || kind == RL_IP_SECKILL;
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

/* Per-thread tables of the flash-sale limits. */
typedef struct rl_thread {
    rl_table_t *t[RL__COUNT];
    int tried[RL__COUNT];        /* creation attempted (a failure is not retried per request) */
} rl_thread_t;

static pthread_key_t thread_key;
static pthread_once_t thread_once = PTHREAD_ONCE_INIT;

static void thread_free(void *p)
{
    rl_thread_t *th = p;
    for (int i = 0; i < RL__COUNT; i++) {
        rl_table_free(th->t[i]);
    }
    free(th);
}

static void thread_key_make(void)
{
    pthread_key_create(&thread_key, thread_free);
}

/* Per-process tables of the /user/code and /user/login limits. */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static rl_table_t *shared_t[RL__COUNT];
static int shared_tried[RL__COUNT];

/* At exit (after the workers are joined), so that valgrind finds nothing of ours still
 * allocated. A late caller would find the tables gone and be let through. */
__attribute__((destructor)) static void shared_free(void)
{
    pthread_mutex_lock(&shared_mu);
    for (int i = 0; i < RL__COUNT; i++) {
        rl_table_free(shared_t[i]);
        shared_t[i] = NULL;
        shared_tried[i] = 1;
    }
    pthread_mutex_unlock(&shared_mu);
}

static int take(const http_req_t *r, rl_kind_t kind, const config_rate_t *lim, uint64_t key,
                uint64_t now_ms)
{
    const app_t *app = r->w->app;
    if (per_worker(kind)) {
        pthread_once(&thread_once, thread_key_make);
        rl_thread_t *th = pthread_getspecific(thread_key);
        if (th == NULL) {
            th = calloc(1, sizeof(*th));
            if (th == NULL || pthread_setspecific(thread_key, th) != 0) {
                free(th);
                return 1;   /* out of memory: fail open, the limit is a guard, not a gate */
            }
        }
        if (th->t[kind] == NULL && !th->tried[kind]) {
            th->tried[kind] = 1;
            double ps, b;
            int threads = app->nworkers > 0 ? app->nworkers : app->cfg.threads;
            ratelimit_per_worker(lim->per_s, lim->burst, threads, &ps, &b);
            th->t[kind] = rl_table_new(ps, b, RL_ENTRIES, random_seed());
        }
        return th->t[kind] == NULL || rl_table_take(th->t[kind], key, now_ms);
    }
    pthread_mutex_lock(&shared_mu);
    if (shared_t[kind] == NULL && !shared_tried[kind]) {
        shared_tried[kind] = 1;
        shared_t[kind] = rl_table_new(lim->per_s, lim->burst >= 1 ? lim->burst : 1, RL_ENTRIES,
                                      random_seed());
    }
    int ok = shared_t[kind] == NULL || rl_table_take(shared_t[kind], key, now_ms);
    pthread_mutex_unlock(&shared_mu);
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

int ratelimit_allow_peer(http_req_t *r, rl_kind_t kind)
{
    if (limit_on(r, kind) == NULL) {
        return 1;   /* off: not even the address parse */
    }
    return ratelimit_allow(r, kind, rl_key_ip(r->peer));
}

int ratelimit_allow(http_req_t *r, rl_kind_t kind, uint64_t key)
{
    const config_rate_t *lim = limit_on(r, kind);
    if (lim == NULL) {
        return 1;
    }
    /* The time the request was complete: no extra clock read on the hot path. */
    uint64_t now_ms = r->start_ns / 1000000u;
    if (take(r, kind, lim, key, now_ms)) {
        return 1;
    }
    metrics_shard_t *m = r->w->m;
    if (m != NULL) {
        metric_inc(&m->rate_limited);
        metric_inc(&m->rate_limited_by[kind]);
    }
    return 0;
}

void ratelimit_reply(http_req_t *r)
{
    api_error(r, 429, RL_MSG, RL_CODE);
}
