/* lockcheck.c -- `seckill redis lock-check`: do sync mode's locks exclude each other here?
 *
 * Threads contend for a set of lock names through lockmap.h (what sync mode uses: one
 * Redis, or each lock on the master owning its slot of a Redis Cluster). Each critical
 * section is a deliberately non-atomic read-modify-write of a counter in Redis
 * (GET, sleep, SET) plus an "inside" marker (SET NX): two holders at once show up as an
 * overlap (the marker was already set) and as a lost increment. The counter and marker of
 * lock N are seckill:lockcheck:{N}:n and :in, in N's slot, so on a cluster they live on
 * the same master as the lock. Run it from several processes at once and compare each
 * counter with the sum of the acquisitions the processes report (`--json`): any
 * difference is a double grant. The tests do exactly that (test_rcluster_ops.py). */
#include "cmd/lockcheck.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "cmd/cmd_args.h"
#include "core/clock.h"
#include "sale/lockmap.h"
#include "redis/rcl_sync.h"
#include "core/xmem.h"

#define LKC_MAX_LOCKS 1024
#define LKC_MAX_THREADS 64

typedef struct lkc_run {
    const char *url;
    const char *prefix;
    int nlocks, nthreads, hold_ms, timeout_ms;
    int64_t lease_ms, wait_ms;
    uint64_t end_ms;
    lkm_t *m;
    pthread_mutex_t mu;                 /* the counters below */
    uint64_t acquired[LKC_MAX_LOCKS];
    uint64_t overlaps, timeouts, errors, lost, cs_errors;
    int64_t quarantine_ms;
    FILE *intervals;                    /* --intervals: "name start_us end_us" per hold */
    const char *ivpath;                 /* --intervals */
    int seconds, json;                  /* --seconds, --json */
} lkc_run_t;

#define F(field) CMD_ARGS_FIELD(lkc_run_t, field)

static const cmd_arg_t lkc_arg_rows[] = {
    {"redis", CMD_ARG_PTR, F(url), 0, 0, "URL",
     "redis://..., unix:PATH or redis+cluster://h1:p1,..."},
    {"locks", CMD_ARG_INT, F(nlocks), 1, LKC_MAX_LOCKS, "N",
     "lock names PREFIX:0 .. PREFIX:N-1 [12]"},
    {"prefix", CMD_ARG_PTR, F(prefix), 0, 0, "P", "[lockcheck]"},
    {"threads", CMD_ARG_INT, F(nthreads), 1, LKC_MAX_THREADS, "T", "contending threads [8]"},
    {"seconds", CMD_ARG_INT, F(seconds), 1, 3600, "S", "how long to contend [3]"},
    {"hold-ms", CMD_ARG_INT, F(hold_ms), 0, 60000, "M", "sleep inside each critical section [2]"},
    {"lease-ms", CMD_ARG_I64, F(lease_ms), 1, 3600000, "L",
     "lock lease [5000] (shorter than --hold-ms shows overlaps)"},
    {"wait-ms", CMD_ARG_I64, F(wait_ms), 0, 3600000, "W", "acquire budget [2000]"},
    {"timeout-ms", CMD_ARG_INT, F(timeout_ms), 1, 600000, "N",
     "deadline of each Redis call [2000]"},
    {"quarantine-ms", CMD_ARG_I64, F(quarantine_ms), 0, 3600000, "Q",
     "after a failover seen here, no lock of the replaced\n"
     "master's slots for Q ms [the lease] (0: none, to see why)"},
    {"intervals", CMD_ARG_PTR, F(ivpath), 0, 0, "FILE",
     "write 'name start_us end_us' (CLOCK_MONOTONIC, comparable\n"
     "across processes of one host) for every hold"},
    {"json", CMD_ARG_SET, CMD_ARGS_SET(lkc_run_t, json, 1), 0, 0, NULL,
     "one JSON object instead of text"},
};
static const cmd_args_t lkc_args_spec = {
    lkc_arg_rows, sizeof lkc_arg_rows / sizeof lkc_arg_rows[0], 18};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: seckill redis lock-check --redis URL [options]\n\n"
            "Threads contend for --locks lock names through the service's lock layer (on a\n"
            "Redis Cluster each lock on the master owning its slot); every critical section\n"
            "is a non-atomic GET/sleep/SET of a counter in Redis and an 'inside' marker.\n"
            "Prints how often each lock was acquired and how many overlaps were seen.\n"
            "Run several at once and compare seckill:lockcheck:{NAME}:n with the sum of\n"
            "their acquisitions. Exit 0 = no overlap seen, 1 = overlaps, 2 = usage/connection.\n"
            "\n");
    cmd_args_help(f, &lkc_args_spec);
}

static void nap_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static redisReply *cmd(redisContext *c, int argc, const char **argv)
{
    return c != NULL ? redisCommandArgv(c, argc, argv, NULL) : NULL;
}

/* The critical section: marker, GET, sleep, SET, marker off. -1 on a Redis failure. */
static int critical(lkc_run_t *r, rcl_sync_route_t *rt, const char *name)
{
    char nkey[600], ikey[600], err[200], val[32];
    snprintf(nkey, sizeof nkey, "seckill:lockcheck:{%s}:n", name);
    snprintf(ikey, sizeof ikey, "seckill:lockcheck:{%s}:in", name);
    redisContext *c = rcl_sync_route_key(rt, nkey, err, sizeof err);
    /* The marker outlives a section but not by much: one left behind by a holder whose
     * DEL failed (its master died) must not count as an overlap for long. */
    char px[24];
    snprintf(px, sizeof px, "%d", r->hold_ms + 2000);
    const char *set_in[] = { "SET", ikey, "1", "NX", "PX", px };
    redisReply *a = cmd(c, 6, set_in);
    if (a == NULL || a->type == REDIS_REPLY_ERROR) {
        if (a != NULL)
            freeReplyObject(a);
        return -1;
    }
    int mine = a->type != REDIS_REPLY_NIL;
    freeReplyObject(a);
    if (!mine) {
        pthread_mutex_lock(&r->mu);
        r->overlaps++;
        pthread_mutex_unlock(&r->mu);
    }
    const char *get[] = { "GET", nkey };
    redisReply *g = cmd(c, 2, get);
    if (g == NULL || (g->type != REDIS_REPLY_STRING && g->type != REDIS_REPLY_NIL)) {
        if (g != NULL)
            freeReplyObject(g);
        return -1;
    }
    long long v = g->type == REDIS_REPLY_STRING ? strtoll(g->str, NULL, 10) : 0;
    freeReplyObject(g);
    if (r->hold_ms > 0)
        nap_ms(r->hold_ms);
    snprintf(val, sizeof val, "%lld", v + 1);
    const char *set[] = { "SET", nkey, val };
    redisReply *s = cmd(c, 3, set);
    int ok = s != NULL && s->type != REDIS_REPLY_ERROR;
    if (s != NULL)
        freeReplyObject(s);
    if (mine) {
        const char *del[] = { "DEL", ikey };
        redisReply *d = cmd(c, 2, del);
        if (d != NULL)
            freeReplyObject(d);
    }
    return ok ? 0 : -1;
}

static void *contender(void *arg)
{
    lkc_run_t *r = arg;
    rcl_sync_route_t rt = { 0 };
    int route_up = 0;
    char err[200];
    unsigned seed = (unsigned)clock_mono_ns() ^ (unsigned)(uintptr_t)&rt;
    while (clock_mono_ms() < r->end_ms) {
        int i = (int)(rand_r(&seed) % (unsigned)r->nlocks);
        char name[300];
        snprintf(name, sizeof name, "%s:%d", r->prefix, i);
        rlock_t *l = NULL;
        rlock_status_t st = lockmap_try_lock(r->m, name, r->wait_ms, r->lease_ms, &l);
        if (st != RLOCK_OK) {
            pthread_mutex_lock(&r->mu);
            if (st == RLOCK_TIMEOUT)
                r->timeouts++;
            else
                r->errors++;
            pthread_mutex_unlock(&r->mu);
            if (st != RLOCK_TIMEOUT)
                nap_ms(10);
            continue;
        }
        uint64_t t_in = clock_mono_ns() / 1000u;
        /* The counter's connections: (re)opened after any failure, so a failover or a
         * MOVED is followed with a fresh slot map. */
        if (!route_up)
            route_up = rcl_sync_route_open(r->url, r->timeout_ms, &rt, err, sizeof err) == 0;
        int cs = route_up ? critical(r, &rt, name) : -1;
        if (cs != 0 && route_up) {
            rcl_sync_route_close(&rt);
            route_up = 0;
        }
        uint64_t t_out = clock_mono_ns() / 1000u;
        rlock_status_t us = lockmap_unlock(r->m, l);
        pthread_mutex_lock(&r->mu);
        if (r->intervals != NULL)
            fprintf(r->intervals, "%s %llu %llu\n", name, (unsigned long long)t_in,
                    (unsigned long long)t_out);
        if (cs == 0)
            r->acquired[i]++;     /* counted only when its increment reached Redis */
        else
            r->cs_errors++;
        if (us == RLOCK_LOST)
            r->lost++;
        else if (us != RLOCK_OK)
            r->errors++;
        pthread_mutex_unlock(&r->mu);
    }
    if (route_up)
        rcl_sync_route_close(&rt);
    return NULL;
}

int lockcheck_main(int argc, char **argv)
{
    lkc_run_t *r = xcalloc(1, sizeof *r);
    r->prefix = "lockcheck";
    r->nlocks = 12;
    r->nthreads = 8;
    r->seconds = 3;
    r->hold_ms = 2;
    r->lease_ms = 5000;
    r->wait_ms = 2000;
    r->timeout_ms = 2000;
    r->quarantine_ms = -1;
    int status = cmd_args_main(&lkc_args_spec, "lock-check", usage, argc, argv, r);
    if (status < 0 && (r->url == NULL || strlen(r->prefix) > 200 || strchr(r->prefix, '{') ||
                       strchr(r->prefix, '}'))) {
        fprintf(stderr, "lock-check: --redis URL is required; --prefix: at most 200 bytes, no "
                        "braces (see --help)\n");
        status = 2;
    }
    if (status >= 0) {
        free(r);
        return status;
    }
    char err[300];
    const char *ivpath = r->ivpath;
    lkm_opts_t o = { .timeout_ms = r->timeout_ms,
                     .quarantine_ms = r->quarantine_ms >= 0 ? r->quarantine_ms : r->lease_ms };
    if (ivpath != NULL && (r->intervals = fopen(ivpath, "w")) == NULL) {
        fprintf(stderr, "lock-check: %s: %s\n", ivpath, strerror(errno));
        free(r);
        return 2;
    }
    r->m = lockmap_new(r->url, &o, err, sizeof err);
    if (r->m == NULL) {
        fprintf(stderr, "lock-check: %s\n", err);
        if (r->intervals != NULL)
            fclose(r->intervals);
        free(r);
        return 2;
    }
    pthread_mutex_init(&r->mu, NULL);
    uint64_t t0 = clock_mono_ms();
    r->end_ms = t0 + (uint64_t)r->seconds * 1000u;
    pthread_t th[LKC_MAX_THREADS];
    int started = 0;
    for (int i = 0; i < r->nthreads; i++)
        if (pthread_create(&th[started], NULL, contender, r) == 0)
            started++;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    double secs = (double)(clock_mono_ms() - t0) / 1000.0;
    lkm_stats_t ls;
    lockmap_get_stats(r->m, &ls);
    uint64_t total = 0;
    for (int i = 0; i < r->nlocks; i++)
        total += r->acquired[i];
    if (r->json) {
        printf("{\"acquired\":%llu,\"overlaps\":%llu,\"lost\":%llu,\"timeouts\":%llu,"
               "\"errors\":%llu,\"section_errors\":%llu,\"retries\":%llu,\"failovers\":%llu,"
               "\"quarantined\":%llu,\"seconds\":%.3f,\"locks\":{",
               (unsigned long long)total, (unsigned long long)r->overlaps,
               (unsigned long long)r->lost, (unsigned long long)r->timeouts,
               (unsigned long long)r->errors, (unsigned long long)r->cs_errors,
               (unsigned long long)ls.retries, (unsigned long long)ls.failovers,
               (unsigned long long)ls.quarantined, secs);
        for (int i = 0; i < r->nlocks; i++)
            printf("%s\"%s:%d\":%llu", i ? "," : "", r->prefix, i,
                   (unsigned long long)r->acquired[i]);
        printf("}}\n");
    } else {
        printf("lock-check: %llu critical sections over %d locks in %.1f s by %d threads: "
               "%llu overlaps, %llu lost locks, %llu timeouts, %llu errors\n",
               (unsigned long long)total, r->nlocks, secs, started,
               (unsigned long long)r->overlaps, (unsigned long long)r->lost,
               (unsigned long long)r->timeouts, (unsigned long long)r->errors);
    }
    status = r->overlaps > 0 ? 1 : 0;
    if (r->intervals != NULL && fclose(r->intervals) != 0) {
        fprintf(stderr, "lock-check: %s: %s\n", ivpath, strerror(errno));
        status = 2;
    }
    lockmap_free(r->m);
    pthread_mutex_destroy(&r->mu);
    free(r);
    return status;
}
