/*
 * test_multi.c -- behaviours that need several redis-servers or need to
 * stop / kill / restart one (so this binary always starts its own):
 *  - multi-lock over three independent servers (locks.md items 37-40);
 *  - one of three servers down: ALL fails and holds nothing; MAJORITY
 *    acquires on the two live ones and reports exactly those;
 *  - a hung (SIGSTOPped) server: acquisition time is checked against the
 *    lease -- a majority that is no longer valid is not reported;
 *  - Redis restarted without persistence while a watchdog lock is held
 *    (item 20, S4): LOST within a renewal period, then new locks work and
 *    are renewed again; waiters recover.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <cmocka.h>

#include "harness.h"

#define N 3
static th_server_t S[N];
static rlock_client_t *CL[N];

static rlock_client_t *client_for(const char *url, int64_t cmd_timeout_ms)
{
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = url;
    cfg.watchdog_lease_ms = 300;
    cfg.command_timeout_ms = cmd_timeout_ms;
    cfg.connect_timeout_ms = 200;
    cfg.unsubscribe_delay_ms = 200;
    rlock_client_t *c = NULL;
    return rlock_client_new(&cfg, &c) == RLOCK_OK ? c : NULL;
}

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) {
        if (!th_server_start(&S[i])) return -1;
        CL[i] = client_for(S[i].url, 400);
        if (!CL[i]) return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) {
        rlock_client_free(CL[i]);
        th_server_stop(&S[i]);
    }
    return 0;
}

static void open_group(const char *name, const char *owner, rlock_t *out[N])
{
    for (int i = 0; i < N; i++)
        assert_int_equal(rlock_open(CL[i], name, RLOCK_REENTRANT, owner, 0, &out[i]), RLOCK_OK);
}

static void close_group(rlock_t *l[N])
{
    for (int i = 0; i < N; i++) rlock_close(l[i]);
}

static long long exists_on(int i, const char *name)
{
    redisContext *r = th_connect(S[i].url);
    if (!r) return -1;
    redisReply *x = redisCommand(r, "EXISTS rlock:{%s}", name);
    long long v = x ? x->integer : -1;
    if (x) freeReplyObject(x);
    redisFree(r);
    return v;
}

/* 37, 39, 40 */
static void test_multi_all(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "multi");
    rlock_t *a[N], *b[N];
    open_group(name, "a", a);
    open_group(name, "b", b);
    rlock_multi_t *ma = NULL, *mb = NULL;
    assert_int_equal(rlock_multi_new(a, N, RLOCK_MULTI_ALL, &ma), RLOCK_OK);
    assert_int_equal(rlock_multi_new(b, N, RLOCK_MULTI_ALL, &mb), RLOCK_OK);
    assert_int_equal(rlock_multi_try_lock(ma, 100, 100), RLOCK_EINVAL);  /* lease <= wait */
    assert_int_equal(rlock_multi_try_lock(ma, 1000, 5000), RLOCK_OK);
    assert_int_equal(rlock_multi_held_count(ma), N);
    assert_true(rlock_multi_is_valid(ma));
    for (int i = 0; i < N; i++) {
        assert_true(rlock_multi_member_held(ma, (size_t)i));
        assert_int_equal(exists_on(i, name), 1);
    }
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rlock_multi_try_lock(mb, 150, 5000), RLOCK_TIMEOUT);
        assert_int_equal(rlock_multi_held_count(mb), 0);
    }
    assert_int_equal(rlock_multi_unlock(ma), RLOCK_OK);
    assert_false(rlock_multi_is_valid(ma));
    assert_int_equal(rlock_multi_unlock(ma), RLOCK_NOT_OWNER);
    for (int i = 0; i < N; i++) assert_int_equal(exists_on(i, name), 0);
    assert_int_equal(rlock_multi_try_lock(mb, 0, 5000), RLOCK_OK);
    assert_int_equal(rlock_multi_unlock(mb), RLOCK_OK);
    /* watchdog mode across servers */
    assert_int_equal(rlock_multi_try_lock(ma, 500, RLOCK_WATCHDOG), RLOCK_OK);
    th_sleep_ms(700);
    assert_true(rlock_multi_is_valid(ma));
    assert_int_equal(rlock_multi_unlock(ma), RLOCK_OK);
    rlock_multi_free(ma);
    rlock_multi_free(mb);
    close_group(a);
    close_group(b);
}

/* 38: 10 threads try the same 3-server group at once: exactly one wins */
struct race_arg {
    const char *name;
    int idx;
    rlock_status_t st;
};

static pthread_barrier_t barrier;

static void *race_thread(void *p)
{
    struct race_arg *r = p;
    char owner[16];
    snprintf(owner, sizeof owner, "t%d", r->idx);
    rlock_t *l[N];
    for (int i = 0; i < N; i++) rlock_open(CL[i], r->name, RLOCK_REENTRANT, owner, 0, &l[i]);
    rlock_multi_t *m = NULL;
    rlock_multi_new(l, N, RLOCK_MULTI_ALL, &m);
    pthread_barrier_wait(&barrier);
    r->st = rlock_multi_try_lock(m, 0, 10000);
    pthread_barrier_wait(&barrier);   /* everyone tried before anyone releases */
    if (r->st == RLOCK_OK) rlock_multi_unlock(m);
    rlock_multi_free(m);
    for (int i = 0; i < N; i++) rlock_close(l[i]);
    return NULL;
}

static void test_multi_exactly_one(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "race");
    pthread_barrier_init(&barrier, NULL, 10);
    pthread_t t[10];
    struct race_arg a[10];
    for (int i = 0; i < 10; i++) {
        a[i] = (struct race_arg){ .name = name, .idx = i };
        pthread_create(&t[i], NULL, race_thread, &a[i]);
    }
    int ok = 0;
    for (int i = 0; i < 10; i++) {
        pthread_join(t[i], NULL);
        ok += a[i].st == RLOCK_OK;
        assert_true(a[i].st == RLOCK_OK || a[i].st == RLOCK_TIMEOUT);
    }
    pthread_barrier_destroy(&barrier);
    assert_int_equal(ok, 1);
    for (int i = 0; i < N; i++) assert_int_equal(exists_on(i, name), 0);
}

/* One of three servers down. */
static void test_multi_one_server_down(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "down");
    rlock_t *a[N];
    open_group(name, "a", a);
    th_server_kill(&S[2], SIGKILL);

    rlock_multi_t *all = NULL, *maj = NULL;
    assert_int_equal(rlock_multi_new(a, N, RLOCK_MULTI_ALL, &all), RLOCK_OK);
    assert_int_equal(rlock_multi_new(a, N, RLOCK_MULTI_MAJORITY, &maj), RLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_multi_try_lock(all, 300, 2000), RLOCK_REDIS_ERROR);
    assert_true(th_now_ms() - t0 < 1000);
    assert_int_equal(rlock_multi_held_count(all), 0);
    assert_false(rlock_multi_is_valid(all));
    assert_int_equal(exists_on(0, name), 0);   /* nothing left behind */
    assert_int_equal(exists_on(1, name), 0);

    assert_int_equal(rlock_multi_try_lock(maj, 300, 2000), RLOCK_OK);
    assert_int_equal(rlock_multi_held_count(maj), 2);
    assert_true(rlock_multi_member_held(maj, 0));
    assert_true(rlock_multi_member_held(maj, 1));
    assert_false(rlock_multi_member_held(maj, 2));   /* never claims the dead one */
    assert_true(rlock_multi_is_valid(maj));
    assert_int_equal(exists_on(0, name), 1);
    assert_int_equal(exists_on(1, name), 1);
    assert_int_equal(rlock_multi_unlock(maj), RLOCK_OK);
    assert_int_equal(exists_on(0, name), 0);

    /* two of three down: no majority */
    th_server_kill(&S[1], SIGKILL);
    assert_int_equal(rlock_multi_try_lock(maj, 200, 2000), RLOCK_REDIS_ERROR);
    assert_int_equal(rlock_multi_held_count(maj), 0);
    assert_int_equal(exists_on(0, name), 0);

    assert_true(th_server_restart(&S[1]));
    assert_true(th_server_restart(&S[2]));
    assert_int_equal(rlock_multi_try_lock(all, 1000, 2000), RLOCK_OK);   /* recovered */
    assert_int_equal(rlock_multi_held_count(all), 3);
    assert_int_equal(rlock_multi_unlock(all), RLOCK_OK);
    rlock_multi_free(all);
    rlock_multi_free(maj);
    close_group(a);
}

/* A hung server: members taken before it are no longer valid when its
 * timeout (400 ms) ends if the lease is 300 ms -> not reported as held. */
static void test_multi_budget_vs_lease(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "hung");
    /* the highest port is acquired last (order = address, name) */
    int last = 0;
    for (int i = 1; i < N; i++)
        if (S[i].port > S[last].port) last = i;
    rlock_t *a[N];
    open_group(name, "a", a);
    rlock_multi_t *maj = NULL;
    assert_int_equal(rlock_multi_new(a, N, RLOCK_MULTI_MAJORITY, &maj), RLOCK_OK);
    th_server_kill(&S[last], SIGSTOP);
    rlock_status_t st = rlock_multi_try_lock(maj, 100, 300);
    assert_true(st != RLOCK_OK);
    assert_int_equal(rlock_multi_held_count(maj), 0);
    /* with a lease that covers the hung member's timeout: majority holds */
    st = rlock_multi_try_lock(maj, 100, 5000);
    assert_int_equal(st, RLOCK_OK);
    assert_int_equal(rlock_multi_held_count(maj), 2);
    assert_false(rlock_multi_member_held(maj, (size_t)last));
    th_server_kill(&S[last], SIGCONT);
    assert_int_equal(rlock_multi_unlock(maj), RLOCK_OK);
    rlock_multi_free(maj);
    close_group(a);
    th_sleep_ms(100);
}

/* Redis restarted (state lost) under a watchdog hold. */
static volatile int lost_fired;
static void on_lost(rlock_t *l, rlock_lost_reason_t why, void *arg)
{
    (void)l;
    (void)why;
    (void)arg;
    lost_fired = 1;
}

struct wait_arg {
    const char *name;
    rlock_status_t st;
};

static void *restart_waiter(void *p)
{
    struct wait_arg *w = p;
    rlock_t *l = NULL;
    rlock_open(CL[0], w->name, RLOCK_REENTRANT, "waiter", 0, &l);
    w->st = rlock_try_lock(l, 4000, 2000);
    if (w->st == RLOCK_OK) rlock_unlock(l);
    rlock_close(l);
    return NULL;
}

static void test_redis_restart(void **state)
{
    (void)state;
    char name[64], other[64];
    th_name(name, sizeof name, "restart");
    th_name(other, sizeof other, "restart-w");
    rlock_t *l = NULL, *h = NULL;
    assert_int_equal(rlock_open(CL[0], name, RLOCK_REENTRANT, "a", 0, &l), RLOCK_OK);
    assert_int_equal(rlock_open(CL[0], other, RLOCK_REENTRANT, "h", 0, &h), RLOCK_OK);
    rlock_set_lost_cb(l, on_lost, NULL);
    lost_fired = 0;
    assert_int_equal(rlock_lock(l, RLOCK_WATCHDOG), RLOCK_OK);
    /* a waiter on another lock, across the restart */
    assert_int_equal(rlock_lock(h, 1500), RLOCK_OK);
    struct wait_arg w = { .name = other };
    pthread_t t;
    pthread_create(&t, NULL, restart_waiter, &w);
    th_sleep_ms(100);

    th_server_kill(&S[0], SIGKILL);
    int64_t t0 = th_now_ms();
    assert_true(th_server_restart(&S[0]));
    while (!lost_fired && th_now_ms() - t0 < 3000) th_sleep_ms(5);
    int64_t took = th_now_ms() - t0;
    printf("    lost callback %lld ms after the restart began\n", (long long)took);
    assert_true(lost_fired);
    assert_true(took < 1000);
    assert_false(rlock_is_valid(l));
    assert_int_equal(rlock_unlock(l), RLOCK_LOST);

    /* the waiter (its holder's key vanished with the restart) gets in */
    pthread_join(t, NULL);
    assert_int_equal(w.st, RLOCK_OK);
    rlock_unlock(h);

    /* renewal resumed: a new watchdog lock stays held for several leases */
    assert_int_equal(rlock_lock(l, RLOCK_WATCHDOG), RLOCK_OK);
    th_sleep_ms(700);
    bool held = false;
    assert_int_equal(rlock_is_held(l, &held), RLOCK_OK);
    assert_true(held);
    assert_true(rlock_is_valid(l));
    assert_int_equal(rlock_unlock(l), RLOCK_OK);
    rlock_close(l);
    rlock_close(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_all),
        cmocka_unit_test(test_multi_exactly_one),
        cmocka_unit_test(test_multi_one_server_down),
        cmocka_unit_test(test_multi_budget_vs_lease),
        cmocka_unit_test(test_redis_restart),
    };
    return cmocka_run_group_tests_name("rlock_multi", tests, setup, teardown);
}
