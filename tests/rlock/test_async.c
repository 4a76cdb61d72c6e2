/*
 * test_async.c -- the libevent flavour: try_lock/unlock complete on the
 * loop thread without blocking it; cancelling a pending acquire releases
 * whatever it got and reports TIMEOUT.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <event2/event.h>
#include <cmocka.h>

#include "harness.h"

static rlock_client_t *C;

static int setup(void **state)
{
    (void)state;
    C = th_client(th_url(), TH_WD_LEASE_MS);
    return C ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlock_client_free(C);
    return 0;
}

struct ctx {
    struct event_base *base;
    rlock_async_t *a;
    rlock_t *l, *holder;
    pthread_t loop_thread;
    atomic_int ticks;         /* timer ticks while waiting: loop not blocked */
    int step;
    rlock_status_t st[4];
    bool cb_on_loop_thread;
    rlock_async_op_t *op;
};

static void on_tick(evutil_socket_t fd, short w, void *arg)
{
    (void)fd;
    (void)w;
    struct ctx *x = arg;
    atomic_fetch_add(&x->ticks, 1);
}

static void on_unlocked(rlock_t *l, rlock_status_t st, void *arg)
{
    (void)l;
    struct ctx *x = arg;
    x->st[1] = st;
    event_base_loopbreak(x->base);
}

static void on_locked(rlock_t *l, rlock_status_t st, void *arg)
{
    struct ctx *x = arg;
    x->st[0] = st;
    x->cb_on_loop_thread = pthread_equal(pthread_self(), x->loop_thread);
    assert_true(rlock_is_valid(l));
    assert_int_equal(rlock_async_unlock(x->a, l, on_unlocked, x), RLOCK_OK);
}

/* Releases the holder's lock once the loop has ticked 10 times while the acquire waited
 * (a condition, not a fixed sleep: a starved host may tick slower), or after 2.5 s
 * (within the acquire's 3 s), when the test's ticks assertion then reports a blocked
 * loop. */
static void *release_later(void *p)
{
    struct ctx *x = p;
    for (int waited = 0; atomic_load(&x->ticks) < 10 && waited < 2500; waited += 5)
        th_sleep_ms(5);
    rlock_unlock(x->holder);
    return NULL;
}

static void test_async_lock_unlock(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "async");
    struct ctx x = { 0 };
    x.base = event_base_new();
    x.loop_thread = pthread_self();
    assert_int_equal(rlock_async_new(x.base, &x.a), RLOCK_OK);
    assert_int_equal(rlock_open(C, name, RLOCK_REENTRANT, "loop-task-1", 0, &x.l), RLOCK_OK);
    assert_int_equal(rlock_open(C, name, RLOCK_REENTRANT, "holder", 0, &x.holder), RLOCK_OK);
    assert_int_equal(rlock_lock(x.holder, 5000), RLOCK_OK);
    struct event *tick = event_new(x.base, -1, EV_PERSIST, on_tick, &x);
    struct timeval tv = { 0, 10000 };
    event_add(tick, &tv);
    pthread_t t;
    pthread_create(&t, NULL, release_later, &x);
    assert_int_equal(rlock_async_try_lock(x.a, x.l, 3000, RLOCK_WATCHDOG, on_locked, &x, NULL),
                     RLOCK_OK);
    event_base_dispatch(x.base);
    pthread_join(t, NULL);
    assert_int_equal(x.st[0], RLOCK_OK);
    assert_int_equal(x.st[1], RLOCK_OK);
    assert_true(x.cb_on_loop_thread);
    assert_true(atomic_load(&x.ticks) >= 10);   /* the loop kept running while we waited */
    bool v = true;
    assert_int_equal(rlock_is_locked(x.l, &v), RLOCK_OK);
    assert_false(v);
    event_free(tick);
    rlock_async_free(x.a);
    event_base_free(x.base);
    rlock_close(x.l);
    rlock_close(x.holder);
}

static void on_cancelled(rlock_t *l, rlock_status_t st, void *arg)
{
    (void)l;
    struct ctx *x = arg;
    x->st[0] = st;
    event_base_loopbreak(x->base);
}

static void do_cancel(evutil_socket_t fd, short w, void *arg)
{
    (void)fd;
    (void)w;
    struct ctx *x = arg;
    rlock_async_cancel(x->op);
}

static void test_async_cancel(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "asynccancel");
    struct ctx x = { 0 };
    x.base = event_base_new();
    assert_int_equal(rlock_async_new(x.base, &x.a), RLOCK_OK);
    assert_int_equal(rlock_open(C, name, RLOCK_REENTRANT, "loop-task-2", 0, &x.l), RLOCK_OK);
    assert_int_equal(rlock_open(C, name, RLOCK_REENTRANT, "holder", 0, &x.holder), RLOCK_OK);
    assert_int_equal(rlock_lock(x.holder, 5000), RLOCK_OK);
    assert_int_equal(rlock_async_try_lock(x.a, x.l, 10000, RLOCK_WATCHDOG, on_cancelled, &x, &x.op),
                     RLOCK_OK);
    struct timeval tv = { 0, 150000 };
    event_base_once(x.base, -1, EV_TIMEOUT, do_cancel, &x, &tv);
    int64_t t0 = th_now_ms();
    event_base_dispatch(x.base);
    assert_int_equal(x.st[0], RLOCK_TIMEOUT);
    assert_true(th_now_ms() - t0 < 150 + TH_LATE_MS);   /* at the cancel, not its 10 s wait */
    assert_int_equal(rlock_local_holds(x.l), 0);
    rlock_stats_t s;
    rlock_client_stats(C, &s);
    assert_int_equal(s.watched_now, 0);
    assert_int_equal(rlock_unlock(x.holder), RLOCK_OK);
    rlock_async_free(x.a);
    event_base_free(x.base);
    rlock_close(x.l);
    rlock_close(x.holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_lock_unlock),
        cmocka_unit_test(test_async_cancel),
    };
    return cmocka_run_group_tests_name("rlock_async", tests, setup, teardown);
}
