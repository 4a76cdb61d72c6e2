/*
 * test_basic.c -- Redisson's RLock behaviours (locks.md section 3, items
 * 1-12, 16, 41) as black-box tests of rlock's reentrant and simple locks
 * against a real redis-server, plus rlock's own outcomes (LOST vs
 * NOT_OWNER, validity, lost callback, fencing).
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
#include "rlock_int.h"   /* white-box: the release scripts' modes */

static rlock_client_t *C;   /* default watchdog (30 s) */
static rlock_client_t *W;   /* watchdog lease TH_WD_LEASE_MS */

static int setup(void **state)
{
    (void)state;
    C = th_client(th_url(), 0);
    W = th_client(th_url(), TH_WD_LEASE_MS);
    return C && W ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlock_client_free(C);
    rlock_client_free(W);
    return 0;
}

static rlock_t *open_lock(rlock_client_t *c, const char *name, rlock_kind_t kind, const char *owner)
{
    rlock_t *l = NULL;
    assert_int_equal(rlock_open(c, name, kind, owner, 0, &l), RLOCK_OK);
    return l;
}

static int64_t pttl(rlock_t *l)
{
    int64_t t = 0;
    assert_int_equal(rlock_remaining_ttl(l, &t), RLOCK_OK);
    return t;
}

/* 1. lock then unlock, twice */
static void test_lock_unlock_twice(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "twice");
    rlock_t *l = open_lock(C, name, RLOCK_REENTRANT, "a");
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rlock_lock(l, RLOCK_WATCHDOG), RLOCK_OK);
        assert_true(rlock_is_valid(l));
        assert_int_equal(rlock_unlock(l), RLOCK_OK);
        assert_false(rlock_is_valid(l));
    }
    bool locked = true;
    assert_int_equal(rlock_is_locked(l, &locked), RLOCK_OK);
    assert_false(locked);
    rlock_close(l);
}

/* 2 + 3. reentrancy counts; is_locked by anyone, is_held only by owner */
static void test_reentrancy(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "reent");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    rlock_t *b = open_lock(C, name, RLOCK_REENTRANT, "b");
    int64_t n = -1;
    bool v;
    assert_int_equal(rlock_hold_count(a, &n), RLOCK_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rlock_lock(a, 10000), RLOCK_OK);
    assert_int_equal(rlock_hold_count(a, &n), RLOCK_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rlock_lock(a, 10000), RLOCK_OK);
    assert_int_equal(rlock_hold_count(a, &n), RLOCK_OK);
    assert_int_equal(n, 2);
    assert_int_equal(rlock_local_holds(a), 2);

    assert_int_equal(rlock_is_locked(b, &v), RLOCK_OK);
    assert_true(v);
    assert_int_equal(rlock_is_held(a, &v), RLOCK_OK);
    assert_true(v);
    assert_int_equal(rlock_is_held(b, &v), RLOCK_OK);
    assert_false(v);

    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    assert_int_equal(rlock_hold_count(a, &n), RLOCK_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rlock_try_lock(b, 0, 10000), RLOCK_TIMEOUT);  /* still held */
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    assert_int_equal(rlock_hold_count(a, &n), RLOCK_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rlock_is_locked(b, &v), RLOCK_OK);
    assert_false(v);
    assert_int_equal(rlock_try_lock(b, 0, 10000), RLOCK_OK);
    assert_int_equal(rlock_unlock(b), RLOCK_OK);
    rlock_close(a);
    rlock_close(b);
}

/* 4. non-owner unlock is refused and does not release */
static void test_non_owner_unlock(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "nonowner");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    rlock_t *b = open_lock(C, name, RLOCK_REENTRANT, "b");
    assert_int_equal(rlock_lock(a, RLOCK_WATCHDOG), RLOCK_OK);
    assert_int_equal(rlock_unlock(b), RLOCK_NOT_OWNER);
    bool v;
    assert_int_equal(rlock_is_held(a, &v), RLOCK_OK);
    assert_true(v);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    assert_int_equal(rlock_unlock(a), RLOCK_NOT_OWNER);  /* already released */
    rlock_close(a);
    rlock_close(b);
}

/* 5. lease expiry: another owner's blocking lock succeeds right after the
 * lease; the first owner's unlock then reports LOST and does not touch the
 * new holder's lock */
static void test_lease_expiry_lost(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "lease");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    rlock_t *b = open_lock(C, name, RLOCK_REENTRANT, "b");
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_lock(a, 500), RLOCK_OK);
    assert_int_equal(rlock_lock(b, 5000), RLOCK_OK);
    int64_t took = th_now_ms() - t0;
    assert_true(took >= 480);
    /* no release message comes on expiry: b got in by its own retry at a's TTL, not by
     * chance later (a blocking lock without that retry never returns) */
    assert_true(took < 500 + TH_LATE_MS);
    assert_false(rlock_is_valid(a));
    assert_int_equal(rlock_unlock(a), RLOCK_LOST);
    bool v;
    assert_int_equal(rlock_is_held(b, &v), RLOCK_OK);
    assert_true(v);
    assert_int_equal(rlock_unlock(b), RLOCK_OK);
    rlock_close(a);
    rlock_close(b);
}

/* 6. TTL bookkeeping */
static void test_ttl_bookkeeping(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "ttl");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    /* A TTL read back is the lease less at most the time since the lock was asked for
     * (and 2 ms: Redis and th_now_ms both count whole milliseconds). */
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_lock(a, 3600000), RLOCK_OK);
    int64_t t = pttl(a);
    assert_true(t >= 3600000 - (th_now_ms() - t0) - 2 && t <= 3600000);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    assert_int_equal(pttl(a), -2);

    t0 = th_now_ms();
    assert_int_equal(rlock_lock(a, RLOCK_WATCHDOG), RLOCK_OK);
    t = pttl(a);
    assert_true(t >= 30000 - (th_now_ms() - t0) - 2 && t <= 30000);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);

    for (int i = 0; i < 3; i++) assert_int_equal(rlock_lock(a, 10000), RLOCK_OK);
    th_sleep_ms(TH_LATE_MS);
    t0 = th_now_ms();
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    t = pttl(a);   /* a partial unlock refreshes the lease */
    assert_true(t >= 10000 - (th_now_ms() - t0) - 2 && t <= 10000);
    assert_true(t > 10000 - TH_LATE_MS);   /* not refreshed, it would be below that */
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    rlock_close(a);
}

/* 7. timed try_lock on a held lock returns TIMEOUT after its wait, not the holder's
 * lease; try_lock(0) is one command and no subscription */
static void test_try_lock_budget(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "budget");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    rlock_t *b = open_lock(C, name, RLOCK_REENTRANT, "b");
    assert_int_equal(rlock_lock(a, 20000), RLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_try_lock(b, 300, 1000), RLOCK_TIMEOUT);
    int64_t took = th_now_ms() - t0;
    assert_true(took >= 300);
    assert_true(took < 300 + TH_LATE_MS);   /* the holder's lease is 20 s */
    rlock_stats_t s0, s1;
    rlock_client_stats(C, &s0);
    assert_int_equal(rlock_try_lock(b, 0, 1000), RLOCK_TIMEOUT);
    rlock_client_stats(C, &s1);
    assert_int_equal(s1.commands - s0.commands, 1);
    assert_int_equal(s1.subscribes - s0.subscribes, 0);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    rlock_close(a);
    rlock_close(b);
}

/* 9. force_unlock frees a lock held by someone else */
static void test_force_unlock(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "force");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    rlock_t *b = open_lock(C, name, RLOCK_REENTRANT, "b");
    assert_int_equal(rlock_lock(a, 20000), RLOCK_OK);
    bool was = false, v = true;
    assert_int_equal(rlock_force_unlock(b, &was), RLOCK_OK);
    assert_true(was);
    rlock_t *fresh = open_lock(C, name, RLOCK_REENTRANT, "c");
    assert_int_equal(rlock_is_locked(fresh, &v), RLOCK_OK);
    assert_false(v);
    assert_int_equal(rlock_unlock(a), RLOCK_LOST);
    assert_int_equal(rlock_force_unlock(b, &was), RLOCK_OK);
    assert_false(was);
    rlock_close(a);
    rlock_close(b);
    rlock_close(fresh);
}

/* Release wakes a waiter at once, not at lease expiry. */
struct waiter_arg {
    rlock_client_t *c;
    const char *name;
    int64_t got_ms;
    rlock_status_t st;
};

static void *waiter_thread(void *p)
{
    struct waiter_arg *w = p;
    rlock_t *l = NULL;
    rlock_open(w->c, w->name, RLOCK_REENTRANT, "waiter", 0, &l);
    w->st = rlock_try_lock(l, 5000, 10000);
    w->got_ms = th_now_ms();
    if (w->st == RLOCK_OK) rlock_unlock(l);
    rlock_close(l);
    return NULL;
}

/* Has a waiter of client c on reentrant lock `name` subscribed to its channel (server
 * side) and sent at least `attempts` acquire attempts? */
static bool waiting_on(rlock_client_t *c, const char *name, uint64_t attempts)
{
    rlock_stats_t s;
    rlock_client_stats(c, &s);
    return th_subscribers(th_url(), name, "") >= 1 && s.commands >= attempts;
}

static void test_release_wakes_waiter(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "wake");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    assert_int_equal(rlock_lock(a, 10000), RLOCK_OK);
    rlock_client_t *other = th_client(th_url(), 0);   /* waiter in another client */
    struct waiter_arg w = { .c = other, .name = name };
    pthread_t t;
    pthread_create(&t, NULL, waiter_thread, &w);
    /* the waiter is waiting: its channel subscribed and its attempt after that sent */
    for (int i = 0; i < 1000 && !waiting_on(other, name, 2); i++) th_sleep_ms(5);
    assert_true(waiting_on(other, name, 2));
    int64_t t_unlock = th_now_ms();
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.st, RLOCK_OK);
    /* woken by the release message (counted), long before the 10 s lease would end */
    assert_true(w.got_ms - t_unlock < TH_LATE_MS);
    rlock_stats_t s;
    rlock_client_stats(other, &s);
    assert_true(s.wakeups >= 1);
    rlock_close(a);
    rlock_client_free(other);
}

/* Watchdog keeps a lock past several leases (W's lease, held three of them). */
static void test_watchdog_renews(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "wd");
    rlock_t *a = open_lock(W, name, RLOCK_REENTRANT, "a");
    rlock_t *b = open_lock(C, name, RLOCK_REENTRANT, "b");
    assert_int_equal(rlock_lock(a, RLOCK_WATCHDOG), RLOCK_OK);
    for (int i = 0; i < 6; i++) {
        th_sleep_ms(TH_WD_LEASE_MS / 2);
        assert_int_equal(rlock_try_lock(b, 0, 1000), RLOCK_TIMEOUT);
        assert_true(rlock_is_valid(a));
        int64_t t = pttl(a);
        assert_true(t > 0 && t <= TH_WD_LEASE_MS);
    }
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    assert_int_equal(rlock_try_lock(b, 0, 1000), RLOCK_OK);
    assert_int_equal(rlock_unlock(b), RLOCK_OK);
    /* 22: reentrant lock/unlock then hold: still renewed */
    assert_int_equal(rlock_lock(a, RLOCK_WATCHDOG), RLOCK_OK);
    assert_int_equal(rlock_lock(a, RLOCK_WATCHDOG), RLOCK_OK);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    th_sleep_ms(2 * TH_WD_LEASE_MS);
    bool v;
    assert_int_equal(rlock_is_held(a, &v), RLOCK_OK);
    assert_true(v);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    rlock_close(a);
    rlock_close(b);
}

/* With a lease nothing renews: the lock is gone after the lease. */
static void test_lease_not_renewed(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "norenew");
    rlock_t *a = open_lock(W, name, RLOCK_REENTRANT, "a");
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_lock(a, 400), RLOCK_OK);
    rlock_stats_t s;
    rlock_client_stats(W, &s);
    int64_t v0 = rlock_valid_for_ms(a);
    /* lease x (1 - drift 0.01) - 2 ms from the acquiring request, which started after t0 */
    assert_true(v0 >= 400 - 4 - 2 - 2 - (th_now_ms() - t0) && v0 <= 400);
    th_sleep_ms(500);
    bool v;
    assert_int_equal(rlock_is_locked(a, &v), RLOCK_OK);
    assert_false(v);
    assert_false(rlock_is_valid(a));
    assert_int_equal(rlock_unlock(a), RLOCK_LOST);
    rlock_close(a);
}

/* Lost callback + is_valid when the lock disappears under a watchdog hold */
static int lost_calls;   /* written by the watchdog thread: atomics only */
static int lost_why;
static void on_lost(rlock_t *l, rlock_lost_reason_t why, void *arg)
{
    (void)l;
    (void)arg;
    __atomic_store_n(&lost_why, (int)why, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static void test_lost_callback(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "lostcb");
    rlock_t *a = open_lock(W, name, RLOCK_REENTRANT, "a");
    rlock_t *b = open_lock(C, name, RLOCK_REENTRANT, "b");
    __atomic_store_n(&lost_calls, 0, __ATOMIC_SEQ_CST);
    rlock_set_lost_cb(a, on_lost, NULL);
    assert_int_equal(rlock_lock(a, RLOCK_WATCHDOG), RLOCK_OK);
    assert_int_equal(rlock_force_unlock(b, NULL), RLOCK_OK);
    assert_int_equal(rlock_lock(b, 5000), RLOCK_OK);
    int64_t t0 = th_now_ms();
    while (__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) == 0 &&
           th_now_ms() - t0 < TH_WD_LEASE_MS / 3 + TH_LATE_MS)
        th_sleep_ms(5);
    /* within one renewal period (lease/3), late by at most TH_LATE_MS; the watchdog is the
     * only one who calls it, and without it only the unlock below would tell */
    assert_int_equal(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    assert_int_equal(__atomic_load_n(&lost_why, __ATOMIC_SEQ_CST), RLOCK_LOST_NOT_OWNER);
    assert_false(rlock_is_valid(a));
    assert_int_equal(rlock_unlock(a), RLOCK_LOST);
    bool v;
    assert_int_equal(rlock_is_held(b, &v), RLOCK_OK);
    assert_true(v);
    assert_int_equal(rlock_unlock(b), RLOCK_OK);
    rlock_stats_t s;
    rlock_client_stats(W, &s);
    assert_int_equal(s.watched_now, 0);
    rlock_close(a);
    rlock_close(b);
}

/* 11: an abandoned/timed-out try_lock leaves nothing held or renewed */
static void test_abandoned_try_lock(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "abandon");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    rlock_t *b = open_lock(W, name, RLOCK_REENTRANT, "b");
    assert_int_equal(rlock_lock(a, 600), RLOCK_OK);
    assert_int_equal(rlock_try_lock(b, 200, RLOCK_WATCHDOG), RLOCK_TIMEOUT);
    rlock_stats_t s;
    rlock_client_stats(W, &s);
    assert_int_equal(s.watched_now, 0);
    assert_int_equal(rlock_local_holds(b), 0);
    th_sleep_ms(700);
    bool v = true;
    assert_int_equal(rlock_is_locked(a, &v), RLOCK_OK);
    assert_false(v);
    rlock_close(a);
    rlock_close(b);
}

/* 12 + S6: Redis down -> timed try_lock errors by its deadline, no hang */
static void test_redis_down(void **state)
{
    (void)state;
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 1;   /* nothing listens there */
    cfg.connect_timeout_ms = 200;
    rlock_client_t *c = NULL;
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_OK);
    rlock_t *l = open_lock(c, "down", RLOCK_REENTRANT, NULL);
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_try_lock(l, 500, 1000), RLOCK_REDIS_ERROR);
    assert_true(th_now_ms() - t0 < 500 + TH_LATE_MS);
    assert_int_equal(rlock_unlock(l), RLOCK_NOT_OWNER);
    rlock_close(l);
    rlock_client_free(c);
}

/* 16: N threads x M iterations, increment inside the lock: exact count */
struct count_arg {
    rlock_client_t *c;   /* NULL: the suite's client C */
    const char *name;
    int iters;
    int64_t *counter;
    int errors;
};

static void *count_thread(void *p)
{
    struct count_arg *a = p;
    rlock_t *l = NULL;
    if (rlock_open(a->c != NULL ? a->c : C, a->name, RLOCK_REENTRANT, NULL, 0, &l) != RLOCK_OK) {
        a->errors++;
        return NULL;
    }
    for (int i = 0; i < a->iters; i++) {
        if (rlock_lock(l, 5000) != RLOCK_OK) {
            a->errors++;
            continue;
        }
        int64_t v = *a->counter;
        th_sleep_ms(0);
        *a->counter = v + 1;
        if (rlock_unlock(l) != RLOCK_OK) a->errors++;
    }
    rlock_close(l);
    return NULL;
}

static void test_threads_count(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "count");
    int64_t counter = 0;
    pthread_t t[8];
    struct count_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (struct count_arg){ .name = name, .iters = 100, .counter = &counter };
        pthread_create(&t[i], NULL, count_thread, &a[i]);
    }
    int errors = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        errors += a[i].errors;
    }
    assert_int_equal(errors, 0);
    assert_int_equal(counter, 800);
}

/* sharded_pubsub: the same exclusion and wake-ups with SSUBSCRIBE/SPUBLISH (what a Redis
 * Cluster needs to keep notifications on the lock's shard). Two sharded clients, 4
 * threads each, a shared counter read and written inside the lock; then a waiter of one
 * client is woken by the other's release, its channel seen by the server as a shard
 * channel (PUBSUB SHARDNUMSUB) while it waits. */
static rlock_client_t *sharded_client(void)
{
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = th_url();
    cfg.sharded_pubsub = true;
    cfg.unsubscribe_delay_ms = 200;
    cfg.command_timeout_ms = 1000;
    rlock_client_t *c = NULL;
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_OK);
    return c;
}

static void test_sharded_pubsub(void **state)
{
    (void)state;
    rlock_client_t *sc[2] = { sharded_client(), sharded_client() };
    char name[64];
    th_name(name, sizeof name, "shard");
    int64_t counter = 0;
    pthread_t t[8];
    struct count_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (struct count_arg){ .c = sc[i % 2], .name = name, .iters = 50,
                                   .counter = &counter };
        pthread_create(&t[i], NULL, count_thread, &a[i]);
    }
    int errors = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        errors += a[i].errors;
    }
    assert_int_equal(errors, 0);
    assert_int_equal(counter, 400);

    th_name(name, sizeof name, "shardwake");
    rlock_t *h = NULL;
    assert_int_equal(rlock_open(sc[0], name, RLOCK_REENTRANT, "holder", 0, &h), RLOCK_OK);
    assert_int_equal(rlock_lock(h, 10000), RLOCK_OK);
    struct waiter_arg w = { .c = sc[1], .name = name };
    pthread_t wt;
    pthread_create(&wt, NULL, waiter_thread, &w);
    redisContext *r = th_connect(th_url());
    assert_non_null(r);
    char ch[128];
    snprintf(ch, sizeof ch, "rlock:{%s}:ch", name);
    long long subs = 0;
    for (int tries = 0; tries < 200 && subs == 0; tries++) {
        redisReply *rep = redisCommand(r, "PUBSUB SHARDNUMSUB %s", ch);
        if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
            rep->element[1]->type == REDIS_REPLY_INTEGER)
            subs = rep->element[1]->integer;
        if (rep) freeReplyObject(rep);
        if (subs == 0) th_sleep_ms(10);
    }
    redisFree(r);
    assert_int_equal(subs, 1);   /* the waiter listens on the shard channel */
    assert_int_equal(rlock_unlock(h), RLOCK_OK);
    pthread_join(wt, NULL);
    assert_int_equal(w.st, RLOCK_OK);
    rlock_stats_t st;
    rlock_client_stats(sc[1], &st);
    assert_true(st.wakeups >= 1);   /* woken by the SPUBLISH of the release */
    rlock_close(h);
    rlock_client_free(sc[0]);
    rlock_client_free(sc[1]);
}

/* Simple lock: SET NX PX, not reentrant, compare-and-delete. */
static void test_simple_lock(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "simple");
    rlock_t *a = open_lock(C, name, RLOCK_SIMPLE, "a");
    rlock_t *b = open_lock(C, name, RLOCK_SIMPLE, "b");
    assert_int_equal(rlock_try_lock(a, 0, 5000), RLOCK_OK);
    assert_int_equal(rlock_fence(a), 0);     /* not fenced */
    assert_int_equal(rlock_try_lock(a, 0, 5000), RLOCK_EINVAL);
    assert_int_equal(rlock_try_lock(b, 0, 5000), RLOCK_TIMEOUT);
    assert_int_equal(rlock_unlock(b), RLOCK_NOT_OWNER);
    redisContext *r = th_connect(th_url());
    redisReply *rep = redisCommand(r, "GET rlock:{%s}:s", name);
    assert_string_equal(rep->str, rlock_owner(a));
    assert_int_equal(strlen(rep->str), 32 + 1 + 1);
    freeReplyObject(rep);
    /* holder's lease runs out, b takes it, a's unlock must not delete b's */
    rep = redisCommand(r, "PEXPIRE rlock:{%s}:s 1", name);
    freeReplyObject(rep);
    th_sleep_ms(5);
    assert_int_equal(rlock_try_lock(b, 1000, 5000), RLOCK_OK);
    assert_int_equal(rlock_unlock(a), RLOCK_LOST);
    rep = redisCommand(r, "GET rlock:{%s}:s", name);
    assert_string_equal(rep->str, rlock_owner(b));
    freeReplyObject(rep);
    /* waiting for a simple lock is woken by the release */
    struct waiter_arg w = { .c = C, .name = name };
    (void)w;
    assert_int_equal(rlock_unlock(b), RLOCK_OK);
    redisFree(r);
    rlock_close(a);
    rlock_close(b);
}

/* 41: fencing tokens increase on every fresh acquisition, across kinds */
static void test_fencing_tokens(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "fence");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    rlock_t *f = open_lock(C, name, RLOCK_FAIR, "a");
    rlock_t *s = NULL;
    assert_int_equal(rlock_open(C, name, RLOCK_SIMPLE, "a", RLOCK_F_FENCED, &s), RLOCK_OK);
    uint64_t last = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rlock_lock(a, RLOCK_WATCHDOG), RLOCK_OK);
        assert_int_equal(rlock_fence(a), last + 1);
        last = rlock_fence(a);
        assert_int_equal(rlock_lock(a, 1000), RLOCK_OK);     /* reentrant: same token */
        assert_int_equal(rlock_fence(a), last);
        assert_int_equal(rlock_unlock(a), RLOCK_OK);
        assert_int_equal(rlock_unlock(a), RLOCK_OK);
        assert_int_equal(rlock_fence(a), 0);
        assert_int_equal(rlock_try_lock(f, 100, 1000), RLOCK_OK);
        assert_int_equal(rlock_fence(f), last + 1);
        last++;
        assert_int_equal(rlock_unlock(f), RLOCK_OK);
        assert_int_equal(rlock_try_lock(s, 100, 1000), RLOCK_OK);
        assert_int_equal(rlock_fence(s), last + 1);
        last++;
        assert_int_equal(rlock_unlock(s), RLOCK_OK);
    }
    assert_int_equal(last, 6);

    /* storage-side checks */
    char key[96], fk[96];
    snprintf(key, sizeof key, "%s:data", name);
    snprintf(fk, sizeof fk, "%s:data:fence", name);
    bool acc = false;
    assert_int_equal(rlock_fenced_set(C, key, fk, 34, "x", &acc), RLOCK_OK);
    assert_true(acc);
    assert_int_equal(rlock_fenced_set(C, key, fk, 34, "y", &acc), RLOCK_OK);
    assert_true(acc);   /* equal token allowed */
    assert_int_equal(rlock_fenced_set(C, key, fk, 33, "z", &acc), RLOCK_OK);
    assert_false(acc);
    char buf[64];
    assert_int_equal(rlock_fence_sql_predicate(buf, sizeof buf, "fence", 42), 11);
    assert_string_equal(buf, "fence <= 42");
    assert_int_equal(rlock_fence_sql_predicate(buf, sizeof buf, "f; drop", 1), -1);
    assert_int_equal(rlock_fence_sql_predicate(buf, 5, "fence", 42), -1);
    rlock_close(a);
    rlock_close(f);
    rlock_close(s);
}

/* 13: pub/sub hygiene: contention on 5 names from 16 threads, then no
 * channel stays subscribed after the unsubscribe delay */
struct hyg_arg {
    char names[5][64];
    int errors;
    int idx;
};

static void *hyg_thread(void *p)
{
    struct hyg_arg *h = p;
    rlock_t *l[5];
    for (int i = 0; i < 5; i++) rlock_open(C, h->names[i], RLOCK_REENTRANT, NULL, 0, &l[i]);
    for (int i = 0; i < 60; i++) {
        rlock_t *x = l[(i + h->idx) % 5];
        rlock_status_t st = rlock_try_lock(x, 2000, 1000);
        if (st == RLOCK_OK) {
            if (rlock_unlock(x) != RLOCK_OK) h->errors++;
        } else if (st != RLOCK_TIMEOUT) {
            h->errors++;
        }
    }
    for (int i = 0; i < 5; i++) rlock_close(l[i]);
    return NULL;
}

static void test_pubsub_hygiene(void **state)
{
    (void)state;
    struct hyg_arg h[16];
    char base[5][64];
    for (int i = 0; i < 5; i++) th_name(base[i], sizeof base[i], "hyg");
    pthread_t t[16];
    for (int i = 0; i < 16; i++) {
        memcpy(h[i].names, base, sizeof base);
        h[i].errors = 0;
        h[i].idx = i;
        pthread_create(&t[i], NULL, hyg_thread, &h[i]);
    }
    int errors = 0;
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        errors += h[i].errors;
    }
    assert_int_equal(errors, 0);
    th_sleep_ms(600);   /* unsubscribe delay is 200 ms in tests */
    redisContext *r = th_connect(th_url());
    redisReply *rep = redisCommand(r, "PUBSUB CHANNELS rlock:{hyg-*");
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->elements, 0);
    freeReplyObject(rep);
    redisFree(r);
    rlock_stats_t s;
    rlock_client_stats(C, &s);
    assert_int_equal(s.subscribed_now, 0);
}

/* Scripts are loaded lazily and their SHA1s cached per client; after a
 * SCRIPT FLUSH (or a restart) NOSCRIPT makes the client reload and retry. */
static void test_script_flush(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "flush");
    rlock_t *a = open_lock(C, name, RLOCK_REENTRANT, "a");
    assert_int_equal(rlock_lock(a, 5000), RLOCK_OK);
    redisContext *r = th_connect(th_url());
    redisReply *x = redisCommand(r, "SCRIPT FLUSH");
    freeReplyObject(x);
    assert_int_equal(rlock_lock(a, 5000), RLOCK_OK);    /* NOSCRIPT -> reload */
    x = redisCommand(r, "SCRIPT FLUSH");
    freeReplyObject(x);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    assert_int_equal(rlock_unlock(a), RLOCK_OK);
    bool v = true;
    assert_int_equal(rlock_is_locked(a, &v), RLOCK_OK);
    assert_false(v);
    redisFree(r);
    rlock_close(a);
}

/* The release script's modes, driven directly: 'n' drops one hold, 'r'
 * (retry) detects a replay by the expected count, 'u' (undo) drops a hold
 * only if the count is exactly the expected one. */
static long long rel(redisContext *r, const char *key, const char *owner, const char *mode,
                     int expected)
{
    redisReply *x = redisCommand(r, "EVAL %s 2 %s %s:ch %s %s %d 10000",
                                 rlock__scripts[RLOCK__S_REL], key, key, owner, mode, expected);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_INTEGER);
    long long v = x->integer;
    freeReplyObject(x);
    return v;
}

static void test_release_modes(void **state)
{
    (void)state;
    char name[64], key[96];
    th_name(name, sizeof name, "modes");
    snprintf(key, sizeof key, "rlock:{%s}", name);
    redisContext *r = th_connect(th_url());
    redisReply *x = redisCommand(r, "HSET %s o 3", key);
    freeReplyObject(x);
    assert_int_equal(rel(r, key, "o", "n", 3), 2);       /* normal: 3 -> 2 */
    assert_int_equal(rel(r, key, "o", "r", 3), -10 - 2); /* replay of it: no-op */
    x = redisCommand(r, "HGET %s o", key);
    assert_string_equal(x->str, "2");
    freeReplyObject(x);
    assert_int_equal(rel(r, key, "o", "r", 2), 1);       /* a retry that had not applied */
    assert_int_equal(rel(r, key, "o", "u", 2), -3);      /* undo: count 1 != 2, no-op */
    assert_int_equal(rel(r, key, "o", "u", 1), 0);       /* undo: matches, released */
    assert_int_equal(rel(r, key, "o", "r", 1), -1);      /* gone */
    assert_int_equal(rel(r, key, "x", "n", 1), -1);      /* never held */
    x = redisCommand(r, "EXISTS %s", key);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    redisFree(r);
}

static void test_bad_args(void **state)
{
    (void)state;
    rlock_t *l = NULL;
    assert_int_equal(rlock_open(C, "a{b}", RLOCK_REENTRANT, NULL, 0, &l), RLOCK_EINVAL);
    assert_int_equal(rlock_open(C, "", RLOCK_REENTRANT, NULL, 0, &l), RLOCK_EINVAL);
    assert_int_equal(rlock_open(C, "ok", RLOCK_REENTRANT, NULL, 0, &l), RLOCK_OK);
    assert_int_equal(rlock_try_lock(l, 0, 0), RLOCK_EINVAL);
    assert_int_equal(rlock_try_lock(l, -5, 100), RLOCK_EINVAL);
    rlock_close(l);
    rlock_close(NULL);
    rlock_client_free(NULL);
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = "http://x";
    rlock_client_t *c = NULL;
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_EINVAL);
    cfg.url = "redis://:secret@localhost:7000/3";
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_OK);
    assert_int_equal(strlen(rlock_client_id(c)), 32);
    rlock_client_free(c);
    assert_string_equal(rlock_status_str(RLOCK_LOST), "LOST");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_lock_unlock_twice),
        cmocka_unit_test(test_reentrancy),
        cmocka_unit_test(test_non_owner_unlock),
        cmocka_unit_test(test_lease_expiry_lost),
        cmocka_unit_test(test_ttl_bookkeeping),
        cmocka_unit_test(test_try_lock_budget),
        cmocka_unit_test(test_force_unlock),
        cmocka_unit_test(test_release_wakes_waiter),
        cmocka_unit_test(test_watchdog_renews),
        cmocka_unit_test(test_lease_not_renewed),
        cmocka_unit_test(test_lost_callback),
        cmocka_unit_test(test_abandoned_try_lock),
        cmocka_unit_test(test_redis_down),
        cmocka_unit_test(test_threads_count),
        cmocka_unit_test(test_simple_lock),
        cmocka_unit_test(test_fencing_tokens),
        cmocka_unit_test(test_pubsub_hygiene),
        cmocka_unit_test(test_script_flush),
        cmocka_unit_test(test_release_modes),
        cmocka_unit_test(test_sharded_pubsub),
    };
    return cmocka_run_group_tests_name("rlock_basic", tests, setup, teardown);
}
