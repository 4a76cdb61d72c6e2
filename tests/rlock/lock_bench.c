/*
 * lock_bench.c -- rlock benchmark (not a test): `make rlock-bench` or
 *   build/rlock_bench [--url redis://...] [--seconds S] [--procs P]
 *                     [--threads T] [--handoffs N]
 * Without --url / $REDIS_URL it starts its own redis-server on a free
 * loopback port.  All figures come from one run against one server:
 *
 *  1. commands per uncontended lock+unlock: client round trips (counted by
 *     the library) and Redis total_commands_processed (which also counts
 *     the commands a script runs inside);
 *  2. uncontended lock+unlock per second (each thread its own client and
 *     key) beside a baseline of plain SET NX PX + compare-and-delete
 *     EVALSHA on the same client connections;
 *  3. hand-off latency on one hot key across processes: from just before
 *     the holder's unlock to the return of the next holder's acquire, p50 /
 *     p99 / max, beside the PING round trip; plus client commands per
 *     contended acquisition and hand-offs that took > 100 ms (a lost
 *     wake-up would wait for the 10 s lease).
 *
 * The baseline reaches into the client's command connection (rlock_int.h)
 * so both run over exactly the same sockets.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "rlock_int.h"

static const char *url;
static double seconds = 2.0;
static int procs = 4, threads = 4, handoffs = 4000;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Redis' own CPU time (user + sys) in microseconds. */
static double server_cpu_us(redisContext *r)
{
    redisReply *x = redisCommand(r, "INFO cpu");
    double v = -1;
    if (x && x->type == REDIS_REPLY_STRING) {
        const char *u = strstr(x->str, "used_cpu_user:"), *sy = strstr(x->str, "used_cpu_sys:");
        if (u && sy) v = (atof(u + strlen("used_cpu_user:")) + atof(sy + strlen("used_cpu_sys:"))) * 1e6;
    }
    if (x) freeReplyObject(x);
    return v;
}

static long long server_commands(redisContext *r)
{
    redisReply *x = redisCommand(r, "INFO stats");
    long long v = -1;
    if (x && x->type == REDIS_REPLY_STRING) {
        const char *p = strstr(x->str, "total_commands_processed:");
        if (p) v = atoll(p + strlen("total_commands_processed:"));
    }
    if (x) freeReplyObject(x);
    return v;
}

/* ---- the baseline: SET NX PX + compare-and-delete on c's connection ---- */

static bool baseline_op(rlock_client_t *c, const char *key, const char *token)
{
    bool ok = false;
    pthread_mutex_lock(&c->cmd_mu);
    if (!c->cmd.ctx) {   /* connect + load scripts through the library */
        redisReply *r = NULL;
        const char *k[] = { key }, *a[] = { token };
        if (rlock__conn_eval(c, &c->cmd, RLOCK__S_CAD, 1, k, 1, a, &r) == RLOCK_OK)
            freeReplyObject(r);
    }
    if (c->cmd.ctx) {
        const char *argv[] = { "SET", key, token, "NX", "PX", "10000" };
        atomic_fetch_add(&c->ncommands, 1);
        redisReply *r = redisCommandArgv(c->cmd.ctx, 6, argv, NULL);
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        const char *k[] = { key }, *a[] = { token };
        if (ok && rlock__conn_eval(c, &c->cmd, RLOCK__S_CAD, 1, k, 1, a, &r) == RLOCK_OK) {
            ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            freeReplyObject(r);
        } else {
            ok = false;
        }
    }
    pthread_mutex_unlock(&c->cmd_mu);
    return ok;
}

/* ---- 1 + 2: uncontended ---- */

enum variant { V_BASELINE, V_LEASE, V_WATCHDOG, V_SIMPLE, V_FAIR, NV };
static const char *vname[NV] = { "baseline SET NX PX + CAD", "reentrant, lease",
                                 "reentrant, watchdog", "simple (SET NX PX)", "fair, lease" };

struct tp_arg {
    int idx;
    double secs;
    long ops[NV];
    int64_t us[NV];
    long errors;
    rlock_client_t *c;
};

static bool one_op(rlock_client_t *c, rlock_t *l, enum variant v, const char *key, const char *token)
{
    switch (v) {
    case V_BASELINE: return baseline_op(c, key, token);
    case V_WATCHDOG: return rlock_try_lock(l, 0, RLOCK_WATCHDOG) == RLOCK_OK && rlock_unlock(l) == RLOCK_OK;
    default: return rlock_try_lock(l, 0, 10000) == RLOCK_OK && rlock_unlock(l) == RLOCK_OK;
    }
}

static rlock_t *open_for(rlock_client_t *c, enum variant v, const char *name)
{
    rlock_t *l = NULL;
    rlock_kind_t k = v == V_SIMPLE ? RLOCK_SIMPLE : v == V_FAIR ? RLOCK_FAIR : RLOCK_REENTRANT;
    if (v == V_BASELINE) return NULL;
    rlock_open(c, name, k, "bench", 0, &l);
    return l;
}

/*
 * Every thread alternates blocks of 100 ops of each variant and times each
 * block, so all variants run under the same (noisy, shared-CPU) conditions;
 * a variant's rate is its ops over the time spent in its blocks.
 */
static void *tp_thread(void *p)
{
    struct tp_arg *a = p;
    char name[NV][64], key[96], token[96];
    rlock_t *l[NV];
    snprintf(key, sizeof key, "bench-base-%d", a->idx);
    snprintf(token, sizeof token, "%s:bench", rlock_client_id(a->c));
    for (int v = 0; v < NV; v++) {
        snprintf(name[v], sizeof name[v], "bench-tp-%d-%d", a->idx, v);
        l[v] = open_for(a->c, (enum variant)v, name[v]);
        for (int i = 0; i < 50; i++) one_op(a->c, l[v], (enum variant)v, key, token);  /* warm-up */
    }
    int64_t end = th_now_us() + (int64_t)(a->secs * NV * 1e6);
    while (th_now_us() < end) {
        for (int v = 0; v < NV; v++) {
            int64_t t0 = th_now_us();
            for (int i = 0; i < 100; i++) {
                if (one_op(a->c, l[v], (enum variant)v, key, token)) a->ops[v]++;
                else a->errors++;
            }
            a->us[v] += th_now_us() - t0;
        }
    }
    for (int v = 0; v < NV; v++) rlock_close(l[v]);
    return NULL;
}

/* rates[v] = sum over threads of ops/s spent in variant v */
static void throughput(int nthreads, rlock_client_t **clients, double rates[NV])
{
    pthread_t t[64];
    struct tp_arg a[64];
    for (int i = 0; i < nthreads; i++) {
        a[i] = (struct tp_arg){ .idx = i, .secs = seconds, .c = clients[i] };
        pthread_create(&t[i], NULL, tp_thread, &a[i]);
    }
    long errors = 0;
    for (int v = 0; v < NV; v++) rates[v] = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(t[i], NULL);
        errors += a[i].errors;
        for (int v = 0; v < NV; v++)
            if (a[i].us[v] > 0) rates[v] += (double)a[i].ops[v] * 1e6 / (double)a[i].us[v];
    }
    if (errors) fprintf(stderr, "  (%ld errors)\n", errors);
}

static void commands_per_op(redisContext *r, rlock_client_t *c)
{
    printf("1. Commands per uncontended lock+unlock (10000 ops each)\n");
    printf("   %-28s %14s %16s %18s\n", "variant", "round trips/op", "redis cmds/op*",
           "redis CPU us/op**");
    for (int v = 0; v < NV; v++) {
        char name[64], key[64], token[96];
        snprintf(name, sizeof name, "bench-cmd-%d", v);
        snprintf(key, sizeof key, "bench-cmd-base");
        snprintf(token, sizeof token, "%s:bench", rlock_client_id(c));
        rlock_t *l = open_for(c, (enum variant)v, name);
        for (int i = 0; i < 10; i++) one_op(c, l, (enum variant)v, key, token);
        rlock_stats_t s0, s1;
        rlock_client_stats(c, &s0);
        long long t0 = server_commands(r);
        double cpu0 = server_cpu_us(r);
        const int n = 10000;
        for (int i = 0; i < n; i++) one_op(c, l, (enum variant)v, key, token);
        double cpu1 = server_cpu_us(r);
        long long t1 = server_commands(r);
        rlock_client_stats(c, &s1);
        printf("   %-28s %14.2f %16.2f %18.2f\n", vname[v], (double)(s1.commands - s0.commands) / n,
               (double)(t1 - t0 - 2) / n, (cpu1 - cpu0) / n);
        rlock_close(l);
    }
    printf("   * Redis total_commands_processed, which also counts the commands a\n"
           "     script runs inside (HGET, PEXPIRE, INCR, PUBLISH...).\n"
           "   ** Redis used_cpu_user + used_cpu_sys over the 10000 ops (includes the\n"
           "     server's network I/O; robust to client-side scheduling noise).\n\n");
}

/* ---- 3: hand-off ---- */

#define MAX_SAMPLES 200000
struct shm {
    _Atomic int64_t release_us;
    _Atomic int releaser;
    _Atomic long nsamples;
    _Atomic long self_handoffs;
    _Atomic long acquisitions;
    _Atomic long commands;
    _Atomic int stop;
    int64_t samples[MAX_SAMPLES];
};

static struct shm *S;

struct ho_arg {
    rlock_client_t *c;
    const char *name;
    rlock_kind_t kind;
    int id;
};

static void *ho_thread(void *p)
{
    struct ho_arg *a = p;
    char owner[32];
    snprintf(owner, sizeof owner, "w%d", a->id);
    rlock_t *l = NULL;
    rlock_open(a->c, a->name, a->kind, owner, 0, &l);
    unsigned seed = (unsigned)a->id * 7919u;
    while (!atomic_load(&S->stop)) {
        if (rlock_try_lock(l, 2000, 10000) != RLOCK_OK) continue;
        int64_t now = th_now_us();
        int64_t rel = atomic_exchange(&S->release_us, 0);
        if (rel) {
            long i = atomic_fetch_add(&S->nsamples, 1);
            if (i < MAX_SAMPLES) S->samples[i] = now - rel;
            if (atomic_load(&S->releaser) == a->id) atomic_fetch_add(&S->self_handoffs, 1);
        }
        atomic_fetch_add(&S->acquisitions, 1);
        atomic_store(&S->releaser, a->id);
        atomic_store(&S->release_us, th_now_us());
        rlock_unlock(l);
        usleep(200 + rand_r(&seed) % 800);   /* think time: others get to wait */
    }
    rlock_close(l);
    return NULL;
}

static void ho_worker(int proc, const char *name, rlock_kind_t kind)
{
    rlock_client_t *c = th_client(url, 0);
    pthread_t t[64];
    struct ho_arg a[64];
    for (int i = 0; i < threads; i++) {
        a[i] = (struct ho_arg){ .c = c, .name = name, .kind = kind, .id = proc * 100 + i + 1 };
        pthread_create(&t[i], NULL, ho_thread, &a[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    rlock_stats_t s;
    rlock_client_stats(c, &s);
    atomic_fetch_add(&S->commands, (long)s.commands);
    rlock_client_free(c);
}

static void handoff(rlock_kind_t kind, double rtt_p50_us)
{
    char name[64];
    th_name(name, sizeof name, "bench-hot");
    memset(S, 0, sizeof *S);
    pid_t pid[64];
    for (int p = 0; p < procs; p++) {
        pid[p] = fork();
        if (pid[p] == 0) {
            ho_worker(p, name, kind);
            _exit(0);
        }
    }
    int64_t end = th_now_ms() + 60000;
    while (atomic_load(&S->nsamples) < handoffs && th_now_ms() < end) th_sleep_ms(20);
    atomic_store(&S->stop, 1);
    for (int p = 0; p < procs; p++) waitpid(pid[p], NULL, 0);
    long n = atomic_load(&S->nsamples);
    if (n > MAX_SAMPLES) n = MAX_SAMPLES;
    qsort(S->samples, (size_t)n, sizeof S->samples[0], cmp_i64);
    long slow = 0;
    for (long i = 0; i < n; i++) slow += S->samples[i] > 100000;
    double p50 = (double)S->samples[n / 2], p99 = (double)S->samples[(n * 99) / 100];
    printf("   %-10s %7ld %9.3f %9.3f %9.3f %8.2f %8ld %7.1f%%   %s\n",
           kind == RLOCK_FAIR ? "fair" : "reentrant", n, p50 / 1000, p99 / 1000,
           (double)S->samples[n - 1] / 1000,
           (double)atomic_load(&S->commands) / (double)atomic_load(&S->acquisitions), slow,
           100.0 * (double)atomic_load(&S->self_handoffs) / (double)n,
           p50 <= rtt_p50_us + 300 ? "p50 <= RTT+0.3ms: yes" : "p50 <= RTT+0.3ms: NO");
}

static double ping_p50_us(redisContext *r, double *p99)
{
    int64_t s[2000];
    for (int i = 0; i < 2000; i++) {
        int64_t t0 = th_now_us();
        redisReply *x = redisCommand(r, "PING");
        s[i] = th_now_us() - t0;
        if (x) freeReplyObject(x);
    }
    qsort(s, 2000, sizeof s[0], cmp_i64);
    *p99 = (double)s[1980];
    return (double)s[1000];
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--url") && i + 1 < argc) url = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--procs") && i + 1 < argc) procs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--handoffs") && i + 1 < argc) handoffs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--url U] [--seconds S] [--procs P] [--threads T] [--handoffs N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (procs < 1 || procs > 64 || threads < 1 || threads > 64) return 2;
    S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (S == MAP_FAILED) return 1;
    if (!url) url = th_url();   /* starts a private redis-server unless $REDIS_URL */
    redisContext *r = th_connect(url);
    if (!r) {
        fprintf(stderr, "cannot connect to %s\n", url);
        return 1;
    }
    redisReply *x = redisCommand(r, "INFO server");
    const char *ver = x && x->str ? strstr(x->str, "redis_version:") : NULL;
    char vbuf[32] = "?";
    if (ver) sscanf(ver, "redis_version:%31[^\r]", vbuf);
    if (x) freeReplyObject(x);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("rlock_bench: redis %s at %s, %ld CPUs, same host (loopback)\n\n", vbuf, url, ncpu);
    double ping_p99;
    double ping = ping_p50_us(r, &ping_p99);

    /* Hand-off first: fork() before this process has any threads. */
    printf("3. Hand-off latency, one hot key, %d processes x %d threads, empty critical\n"
           "   section, 0.2-1 ms think time; from just before unlock to the next holder's\n"
           "   acquire returning.  PING round trip: p50 %.3f ms, p99 %.3f ms.\n",
           procs, threads, ping / 1000, ping_p99 / 1000);
    printf("   %-10s %7s %9s %9s %9s %8s %8s %8s\n", "kind", "samples", "p50 ms", "p99 ms",
           "max ms", "cmds/acq", ">100ms", "same-thr");
    handoff(RLOCK_REENTRANT, ping);
    handoff(RLOCK_FAIR, ping);
    printf("   cmds/acq = client round trips per acquisition under contention (acquire\n"
           "   attempts + unlock); >100ms = hand-offs slower than 100 ms (a lost wake-up\n"
           "   would wait for the 10 s lease); same-thr = next holder was the releaser.\n\n");

    rlock_client_t *c = th_client(url, 0);
    commands_per_op(r, c);

    printf("2. Uncontended lock+unlock per second (each thread its own client/connection\n"
           "   and keys)\n");
    int tcounts[2] = { 1, 4 };
    for (int k = 0; k < 2; k++) {
        int nt = tcounts[k];
        rlock_client_t *cl[64];
        for (int i = 0; i < nt; i++) cl[i] = i == 0 ? c : th_client(url, 0);
        printf("   threads=%d (%.1f s per variant, interleaved in 100-op blocks)\n", nt, seconds);
        double rates[NV];
        throughput(nt, cl, rates);
        for (int v = 0; v < NV; v++)
            printf("     %-28s %10.0f ops/s  %5.2fx baseline\n", vname[v], rates[v],
                   rates[v] / rates[V_BASELINE]);
        for (int i = 1; i < nt; i++) rlock_client_free(cl[i]);
    }
    rlock_client_free(c);
    redisFree(r);
    return 0;
}
