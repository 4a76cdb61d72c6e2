/*
 * test_fair.c -- fair (FIFO) lock behaviours (locks.md section 3, items
 * 23-28): strict arrival order, try_lock(0) never waits or queues, a
 * timed-out waiter leaves the queue, reentrancy, watchdog on a fair lock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>

#include "harness.h"

static rlock_client_t *C;

static int setup(void **state)
{
    (void)state;
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = th_url();
    cfg.watchdog_lease_ms = TH_WD_LEASE_MS;
    cfg.fair_waiter_ttl_ms = 1000;
    cfg.unsubscribe_delay_ms = 200;
    return rlock_client_new(&cfg, &C) == RLOCK_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlock_client_free(C);
    return 0;
}

static long long llen(const char *name)
{
    redisContext *r = th_connect(th_url());
    redisReply *x = redisCommand(r, "LLEN rlock:{%s}:f:q", name);
    long long n = x->integer;
    freeReplyObject(x);
    redisFree(r);
    return n;
}

/* 23/25: threads arriving 100 ms apart acquire strictly in arrival order */
#define NFIFO 8
static int order[NFIFO];
static int norder;
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;

struct fifo_arg {
    const char *name;
    int idx;
    rlock_status_t st;
};

static void *fifo_thread(void *p)
{
    struct fifo_arg *a = p;
    char owner[16];
    snprintf(owner, sizeof owner, "w%d", a->idx);
    rlock_t *l = NULL;
    rlock_open(C, a->name, RLOCK_FAIR, owner, 0, &l);
    a->st = rlock_try_lock(l, 10000, 1000);
    if (a->st == RLOCK_OK) {
        pthread_mutex_lock(&order_mu);
        order[norder++] = a->idx;
        pthread_mutex_unlock(&order_mu);
        th_sleep_ms(20);
        rlock_unlock(l);
    }
    rlock_close(l);
    return NULL;
}

static void test_fifo_order(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "fifo");
    rlock_t *h = NULL;
    assert_int_equal(rlock_open(C, name, RLOCK_FAIR, "holder", 0, &h), RLOCK_OK);
    assert_int_equal(rlock_lock(h, 10000), RLOCK_OK);
    pthread_t t[NFIFO];
    struct fifo_arg a[NFIFO];
    norder = 0;
    for (int i = 0; i < NFIFO; i++) {
        a[i] = (struct fifo_arg){ .name = name, .idx = i };
        pthread_create(&t[i], NULL, fifo_thread, &a[i]);
        /* arrival order = queue order: start the next one only after this
         * one is queued (a loaded machine may delay a thread's start) */
        for (int k = 0; k < 500 && llen(name) < i + 1; k++) th_sleep_ms(5);
        assert_int_equal(llen(name), i + 1);
        th_sleep_ms(100);
    }
    assert_int_equal(llen(name), NFIFO);
    assert_int_equal(rlock_unlock(h), RLOCK_OK);
    for (int i = 0; i < NFIFO; i++) pthread_join(t[i], NULL);
    assert_int_equal(norder, NFIFO);
    for (int i = 0; i < NFIFO; i++) {
        assert_int_equal(a[i].st, RLOCK_OK);
        assert_int_equal(order[i], i);
    }
    assert_int_equal(llen(name), 0);
    rlock_close(h);
}

/* 27: try_lock(0) never waits and does not queue; a 200 ms try fails and
 * leaves the queue; afterwards the lock is free */
static void test_try_zero_and_timeout(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "fairtry");
    rlock_t *h = NULL, *o = NULL;
    assert_int_equal(rlock_open(C, name, RLOCK_FAIR, "holder", 0, &h), RLOCK_OK);
    assert_int_equal(rlock_open(C, name, RLOCK_FAIR, "other", 0, &o), RLOCK_OK);
    assert_int_equal(rlock_lock(h, 5000), RLOCK_OK);
    rlock_stats_t s0, s1;
    rlock_client_stats(C, &s0);
    assert_int_equal(rlock_try_lock(o, 0, 1000), RLOCK_TIMEOUT);
    rlock_client_stats(C, &s1);
    assert_int_equal(s1.commands - s0.commands, 1);   /* one attempt, no waiting */
    assert_int_equal(s1.subscribes - s0.subscribes, 0);
    assert_int_equal(llen(name), 0);
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_try_lock(o, 200, 1000), RLOCK_TIMEOUT);
    int64_t took = th_now_ms() - t0;
    assert_true(took >= 200 && took < 200 + TH_LATE_MS);   /* the holder's lease is 5 s */
    assert_int_equal(llen(name), 0);   /* the timed-out waiter left the queue */
    assert_int_equal(rlock_unlock(h), RLOCK_OK);
    bool v = true;
    assert_int_equal(rlock_is_locked(o, &v), RLOCK_OK);
    assert_false(v);
    assert_int_equal(rlock_try_lock(o, 0, 1000), RLOCK_OK);
    assert_int_equal(rlock_unlock(o), RLOCK_OK);
    rlock_close(h);
    rlock_close(o);
}

/* reentrancy and watchdog on the fair lock */
static void test_fair_reentrant_watchdog(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "fairwd");
    rlock_t *h = NULL, *o = NULL;
    assert_int_equal(rlock_open(C, name, RLOCK_FAIR, "holder", 0, &h), RLOCK_OK);
    assert_int_equal(rlock_open(C, name, RLOCK_FAIR, "other", 0, &o), RLOCK_OK);
    assert_int_equal(rlock_lock(h, RLOCK_WATCHDOG), RLOCK_OK);
    assert_int_equal(rlock_lock(h, RLOCK_WATCHDOG), RLOCK_OK);
    int64_t n = 0;
    assert_int_equal(rlock_hold_count(h, &n), RLOCK_OK);
    assert_int_equal(n, 2);
    th_sleep_ms(2 * TH_WD_LEASE_MS);   /* past two leases */
    assert_true(rlock_is_valid(h));
    assert_int_equal(rlock_try_lock(o, 0, 1000), RLOCK_TIMEOUT);
    assert_int_equal(rlock_unlock(h), RLOCK_OK);
    assert_int_equal(rlock_unlock(h), RLOCK_OK);
    assert_int_equal(rlock_unlock(h), RLOCK_NOT_OWNER);
    assert_int_equal(rlock_try_lock(o, 0, 1000), RLOCK_OK);
    assert_int_equal(rlock_unlock(o), RLOCK_OK);
    rlock_close(h);
    rlock_close(o);
}

/* A release hands over to the head by its message, not at the next heartbeat poll: the
 * head's client counts the wake-up. (Time cannot tell them apart on a loaded host: the
 * heartbeat is 333 ms, less than TH_LATE_MS.) */
struct ho_arg {
    rlock_client_t *c;
    const char *name;
    int64_t got_ms;
    rlock_status_t st;
};

static void *handoff_thread(void *p)
{
    struct ho_arg *a = p;
    rlock_t *l = NULL;
    rlock_open(a->c, a->name, RLOCK_FAIR, "head", 0, &l);
    a->st = rlock_try_lock(l, 5000, 1000);
    a->got_ms = th_now_ms();
    if (a->st == RLOCK_OK) rlock_unlock(l);
    rlock_close(l);
    return NULL;
}

static bool head_waiting(rlock_client_t *c, const char *name)
{
    rlock_stats_t s;
    rlock_client_stats(c, &s);
    return llen(name) == 1 && th_subscribers(th_url(), name, ":f") >= 1 && s.commands >= 2;
}

static void test_fair_handoff_prompt(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "fairho");
    rlock_t *h = NULL;
    assert_int_equal(rlock_open(C, name, RLOCK_FAIR, "holder", 0, &h), RLOCK_OK);
    assert_int_equal(rlock_lock(h, 10000), RLOCK_OK);
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = th_url();
    cfg.fair_waiter_ttl_ms = 1000;
    struct ho_arg a = { .name = name };
    assert_int_equal(rlock_client_new(&cfg, &a.c), RLOCK_OK);
    pthread_t t;
    pthread_create(&t, NULL, handoff_thread, &a);
    /* the head is waiting: queued, its channel subscribed, its attempt after that sent */
    for (int i = 0; i < 1000 && !head_waiting(a.c, name); i++) th_sleep_ms(5);
    assert_true(head_waiting(a.c, name));
    assert_int_equal(rlock_unlock(h), RLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(a.st, RLOCK_OK);
    rlock_stats_t s;
    rlock_client_stats(a.c, &s);
    assert_true(s.wakeups >= 1);
    rlock_close(h);
    rlock_client_free(a.c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_try_zero_and_timeout),
        cmocka_unit_test(test_fair_reentrant_watchdog),
        cmocka_unit_test(test_fair_handoff_prompt),
    };
    return cmocka_run_group_tests_name("rlock_fair", tests, setup, teardown);
}
