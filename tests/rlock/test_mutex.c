/*
 * test_mutex.c -- mutual exclusion across processes (locks.md S1, scaled
 * down): 4 processes x 8 threads, each doing a non-atomic GET / pause / SET
 * read-modify-write on a shared Redis key inside the lock, plus an "inside"
 * counter (INCR on entry must return 1, DECR on exit) that detects overlap
 * directly.  Final value exact, zero overlaps, for every exclusive kind.
 *
 * The binary re-executes itself as the worker processes ("child" mode); each
 * worker shares one rlock client among its 8 threads (the documented
 * shared-client mode), and each thread is its own owner.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"

#define PROCS 4
#define THREADS 8

/* ---- worker process ---- */

struct worker {
    rlock_client_t *c;
    const char *url, *name;
    rlock_kind_t kind;
    int iters;
    int64_t lease;
    int hold_us;
    int overlaps, errors, timeouts;
};

static void *worker_thread(void *p)
{
    struct worker *w = p;
    redisContext *r = th_connect(w->url);
    rlock_t *l = NULL;
    if (!r || rlock_open(w->c, w->name, w->kind, NULL, 0, &l) != RLOCK_OK) {
        w->errors++;
        return NULL;
    }
    char counter[128], inside[128];
    snprintf(counter, sizeof counter, "%s:counter", w->name);
    snprintf(inside, sizeof inside, "%s:inside", w->name);
    unsigned seed = (unsigned)(uintptr_t)&r ^ (unsigned)getpid();
    for (int i = 0; i < w->iters; i++) {
        int64_t t0 = th_now_ms();
        rlock_status_t st = rlock_try_lock(l, 20000, w->lease);
        if (st == RLOCK_TIMEOUT) {
            /* Not a failure of exclusion: these locks are not fair, and on a loaded host
             * one process's waiters can lose every race for longer than the wait. Wait
             * again for the same iteration; the parent prints how often. (A run at load
             * 18 took 24.8 s instead of 4 and counted 5 errors, of a kind it did not
             * record: every error now prints its kind on stderr.) */
            __atomic_add_fetch(&w->timeouts, 1, __ATOMIC_SEQ_CST);
            i--;
            continue;
        }
        if (st != RLOCK_OK) {
            fprintf(stderr, "worker %d: try_lock: %s after %lld ms\n", (int)getpid(),
                    rlock_status_str(st), (long long)(th_now_ms() - t0));
            __atomic_add_fetch(&w->errors, 1, __ATOMIC_SEQ_CST);
            continue;
        }
        redisReply *x = redisCommand(r, "INCR %s", inside);
        if (!x || x->integer != 1) __atomic_add_fetch(&w->overlaps, 1, __ATOMIC_SEQ_CST);
        if (x) freeReplyObject(x);
        x = redisCommand(r, "GET %s", counter);
        long long v = (x && x->type == REDIS_REPLY_STRING) ? atoll(x->str) : 0;
        if (x) freeReplyObject(x);
        usleep((useconds_t)(rand_r(&seed) % 300 + w->hold_us));  /* widen the race window */
        x = redisCommand(r, "SET %s %lld", counter, v + 1);
        if (x) freeReplyObject(x);
        x = redisCommand(r, "DECR %s", inside);
        if (x) freeReplyObject(x);
        if (!rlock_is_valid(l)) {
            fprintf(stderr, "worker %d: not valid %lld ms after try_lock began\n",
                    (int)getpid(), (long long)(th_now_ms() - t0));
            __atomic_add_fetch(&w->errors, 1, __ATOMIC_SEQ_CST);
        }
        st = rlock_unlock(l);
        if (st != RLOCK_OK) {
            fprintf(stderr, "worker %d: unlock: %s\n", (int)getpid(), rlock_status_str(st));
            __atomic_add_fetch(&w->errors, 1, __ATOMIC_SEQ_CST);
        }
    }
    rlock_close(l);
    redisFree(r);
    return NULL;
}

static int child_main(int argc, char **argv)
{
    if (argc < 8) return 2;
    struct worker w = { .url = argv[2], .name = argv[3], .kind = (rlock_kind_t)atoi(argv[4]),
                        .iters = atoi(argv[5]), .lease = atoll(argv[6]), .hold_us = atoi(argv[7]) };
    w.c = th_client(w.url, 0);
    if (!w.c) return 3;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker_thread, &w);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    rlock_client_free(w.c);
    printf("%d %d %d\n", w.overlaps, w.errors, w.timeouts);
    fflush(stdout);
    return 0;
}

/* ---- parent ---- */

/* Returns the overlaps seen; *errors_out = unlock/validity failures. */
static int run(rlock_kind_t kind, int iters, int64_t lease, int hold_us, int *errors_out,
               long long *value)
{
    char name[64], kind_s[8], iters_s[16], lease_s[24], hold_s[16];
    snprintf(hold_s, sizeof hold_s, "%d", hold_us);
    th_name(name, sizeof name, "mutex");
    snprintf(kind_s, sizeof kind_s, "%d", (int)kind);
    snprintf(iters_s, sizeof iters_s, "%d", iters);
    snprintf(lease_s, sizeof lease_s, "%lld", (long long)lease);
    char *args[] = { "child", (char *)th_url(), name, kind_s, iters_s, lease_s, hold_s, NULL };
    pid_t pid[PROCS];
    int out[PROCS];
    int64_t t0 = th_now_ms();
    for (int i = 0; i < PROCS; i++) {
        pid[i] = th_spawn_self(args, NULL, &out[i]);
        assert_true(pid[i] > 0);
    }
    int overlaps = 0, errors = 0, timeouts = 0;
    for (int i = 0; i < PROCS; i++) {
        char line[64] = "";
        if (!th_read_line(out[i], line, sizeof line, 60000)) {
            fprintf(stderr, "worker %d: no result (exit %d)\n", i, th_wait_exit(pid[i], 5000));
            fail();
        }
        int o = -1, e = -1, to = -1;
        assert_int_equal(sscanf(line, "%d %d %d", &o, &e, &to), 3);
        overlaps += o;
        errors += e;
        timeouts += to;
        assert_int_equal(th_wait_exit(pid[i], 5000), 0);
        close(out[i]);
    }
    redisContext *r = th_connect(th_url());
    redisReply *x = redisCommand(r, "GET %s:counter", name);
    long long v = x->type == REDIS_REPLY_STRING ? atoll(x->str) : -1;
    freeReplyObject(x);
    redisFree(r);
    printf("    kind %d lease %lld: %d critical sections in %lld ms, overlaps %d, errors %d, "
           "waits past 20 s %d\n", (int)kind, (long long)lease, PROCS * THREADS * iters,
           (long long)(th_now_ms() - t0), overlaps, errors, timeouts);
    *errors_out = errors;
    *value = v;
    return overlaps;
}

static void run_kind(rlock_kind_t kind, int iters)
{
    int errors;
    long long v;
    assert_int_equal(run(kind, iters, 5000, 0, &errors, &v), 0);
    assert_int_equal(errors, 0);
    assert_int_equal(v, PROCS * THREADS * iters);
}

/* Negative control: a 2 ms lease is shorter than the 5 ms critical section, so
 * holders overlap -- the detector must see it, and is_valid() must have
 * said so (counted as errors). */
static void test_detector_sees_overlaps(void **state)
{
    (void)state;
    int errors;
    long long v;
    int overlaps = run(RLOCK_REENTRANT, 5, 2, 5000, &errors, &v);
    assert_true(overlaps > 0);
    assert_true(errors > 0);
}

static void test_mutex_reentrant(void **state) { (void)state; run_kind(RLOCK_REENTRANT, 100); }
static void test_mutex_simple(void **state) { (void)state; run_kind(RLOCK_SIMPLE, 40); }
static void test_mutex_fair(void **state) { (void)state; run_kind(RLOCK_FAIR, 40); }
static void test_mutex_write(void **state) { (void)state; run_kind(RLOCK_WRITE, 40); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0) return child_main(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutex_reentrant),
        cmocka_unit_test(test_mutex_simple),
        cmocka_unit_test(test_mutex_fair),
        cmocka_unit_test(test_mutex_write),
        cmocka_unit_test(test_detector_sees_overlaps),
    };
    return cmocka_run_group_tests_name("rlock_mutex", tests, NULL, NULL);
}
