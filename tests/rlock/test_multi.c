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
    cfg.watchdog_lease_ms = TH_WD_LEASE_MS;
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
    th_sleep_ms(2 * TH_WD_LEASE_MS);
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
    assert_true(th_now_ms() - t0 < 300 + TH_LATE_MS);
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
static int lost_fired;   /* written by the watchdog thread: atomics only */
static void on_lost(rlock_t *l, rlock_lost_reason_t why, void *arg)
{
    (void)l;
    (void)why;
    (void)arg;
    __atomic_store_n(&lost_fired, 1, __ATOMIC_SEQ_CST);
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
    __atomic_store_n(&lost_fired, 0, __ATOMIC_SEQ_CST);
    assert_int_equal(rlock_lock(l, RLOCK_WATCHDOG), RLOCK_OK);
    /* a waiter on another lock, across the restart */
    assert_int_equal(rlock_lock(h, 1500), RLOCK_OK);
    struct wait_arg w = { .name = other };
    pthread_t t;
    pthread_create(&t, NULL, restart_waiter, &w);
    /* the waiter is waiting before the kill: its first attempt failed and it subscribed
     * (an attempt that meets the dead server first returns REDIS_ERROR at once) */
    for (int i = 0; i < 1000 && th_subscribers(S[0].url, other, "") < 1; i++) th_sleep_ms(5);
    assert_true(th_subscribers(S[0].url, other, "") >= 1);

    th_server_kill(&S[0], SIGKILL);
    int64_t t0 = th_now_ms();
    assert_true(th_server_restart(&S[0]));
    while (!__atomic_load_n(&lost_fired, __ATOMIC_SEQ_CST) && th_now_ms() - t0 < 3 * TH_WD_LEASE_MS) th_sleep_ms(5);
    int64_t took = th_now_ms() - t0;
    printf("    lost callback %lld ms after the restart began\n", (long long)took);
    assert_true(__atomic_load_n(&lost_fired, __ATOMIC_SEQ_CST));
    /* at the first renewal after the restart: within a renewal period, late by at most
     * TH_LATE_MS, plus the restart itself */
    assert_true(took < TH_WD_LEASE_MS / 3 + TH_LATE_MS + 1000);
    assert_false(rlock_is_valid(l));
    assert_int_equal(rlock_unlock(l), RLOCK_LOST);

    /* the waiter (its holder's key vanished with the restart) gets in */
    pthread_join(t, NULL);
    assert_int_equal(w.st, RLOCK_OK);
    rlock_unlock(h);

    /* renewal resumed: a new watchdog lock stays held for several leases */
    assert_int_equal(rlock_lock(l, RLOCK_WATCHDOG), RLOCK_OK);
    th_sleep_ms(2 * TH_WD_LEASE_MS);
    bool held = false;
    assert_int_equal(rlock_is_held(l, &held), RLOCK_OK);
    assert_true(held);
    assert_true(rlock_is_valid(l));
    assert_int_equal(rlock_unlock(l), RLOCK_OK);
    rlock_close(l);
    rlock_close(h);
}

/*
 * S7: lost replies.  CLIENT PAUSE makes the server sit on our commands
 * longer than the client's 200 ms command timeout, so the reply is lost
 * and the library retries (unlock) or undoes (acquire) on a new
 * connection.  Whether the first send was executed or discarded, the
 * invariants must hold: a retried unlock drops exactly one hold, and a
 * failed acquire leaves nothing renewed and nothing held past its lease.
 */
static void pause_server(int i, int ms)
{
    redisContext *r = th_connect(S[i].url);
    redisReply *x = redisCommand(r, "CLIENT PAUSE %d ALL", ms);
    assert_non_null(x);
    freeReplyObject(x);
    redisFree(r);
}

static void test_lost_replies(void **state)
{
    (void)state;
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = S[0].url;
    cfg.command_timeout_ms = 200;
    cfg.watchdog_lease_ms = 600;
    rlock_client_t *c = NULL;
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_OK);
    char name[64];
    rlock_t *l = NULL, *o = NULL;

    for (int round = 0; round < 3; round++) {
        th_name(name, sizeof name, "lostreply");
        assert_int_equal(rlock_open(c, name, RLOCK_REENTRANT, "a", 0, &l), RLOCK_OK);
        assert_int_equal(rlock_open(CL[0], name, RLOCK_REENTRANT, "o", 0, &o), RLOCK_OK);
        assert_int_equal(rlock_lock(l, RLOCK_WATCHDOG), RLOCK_OK);
        assert_int_equal(rlock_lock(l, RLOCK_WATCHDOG), RLOCK_OK);
        pause_server(0, 150 + 100 * round);
        rlock_status_t st = rlock_unlock(l);   /* first reply lost, retried */
        int64_t n = -1;
        assert_int_equal(rlock_hold_count(l, &n), RLOCK_OK);
        if (st == RLOCK_OK) {
            assert_int_equal(n, 1);            /* exactly one hold dropped */
            assert_int_equal(rlock_local_holds(l), 1);
            assert_int_equal(rlock_try_lock(o, 0, 1000), RLOCK_TIMEOUT);
            assert_int_equal(rlock_unlock(l), RLOCK_OK);
        } else {
            /* both sends lost: renewal stopped, at most one hold dropped */
            assert_int_equal(st, RLOCK_REDIS_ERROR);
            assert_true(n >= 1 || n == 0);
        }
        assert_int_equal(rlock_local_holds(l), 0);

        /* acquire whose reply is lost: REDIS_ERROR, and nothing renewed */
        pause_server(0, 150 + 100 * round);
        st = rlock_try_lock(l, 0, RLOCK_WATCHDOG);
        if (st != RLOCK_OK) {
            assert_int_equal(st, RLOCK_REDIS_ERROR);
            assert_int_equal(rlock_local_holds(l), 0);
            rlock_stats_t s;
            rlock_client_stats(c, &s);
            assert_int_equal(s.watched_now, 0);
            /* held at most until its lease (600 ms), then free for others */
            assert_int_equal(rlock_try_lock(o, 1500, 1000), RLOCK_OK);
            assert_int_equal(rlock_unlock(o), RLOCK_OK);
        } else {
            assert_int_equal(rlock_unlock(l), RLOCK_OK);
        }
        rlock_close(l);
        rlock_close(o);
        th_sleep_ms(300);   /* let the pause end */
    }
    rlock_client_free(c);
}

/* Keep server i busy in a script for `ms` (from another thread): commands
 * sent meanwhile are executed afterwards, even if their client gave up. */
struct busy_arg {
    int i, ms;
};

static void *busy_thread(void *p)
{
    struct busy_arg *b = p;
    redisContext *r = th_connect(S[b->i].url);
    static const char busy_lua[] =
        "local function now() local t = redis.call('time') "
        "return t[1] * 1000000 + t[2] end "
        "local e = now() + tonumber(ARGV[1]) * 1000 "
        "while now() < e do end return 1";
    redisReply *x = redisCommand(r, "EVAL %s 0 %d", busy_lua, b->ms);
    if (!x || x->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "busy script failed: %s\n", x ? x->str : r->errstr);
    if (x) freeReplyObject(x);
    redisFree(r);
    return NULL;
}

/* Start the busy script on server i and return once the server is really
 * stuck in it (a PING with a 30 ms timeout does not come back). */
static void start_busy(pthread_t *t, struct busy_arg *b)
{
    pthread_create(t, NULL, busy_thread, b);
    for (int k = 0; k < 100; k++) {
        th_sleep_ms(5);
        struct timeval tv = { 0, 30000 };
        char host[64];
        int port;
        th_parse_url(S[b->i].url, host, sizeof host, &port);
        redisContext *r = redisConnectWithTimeout(host, port, tv);
        if (!r) continue;
        redisSetTimeout(r, tv);
        redisReply *x = r->err ? NULL : redisCommand(r, "PING");
        bool busy = !x;
        if (x) freeReplyObject(x);
        redisFree(r);
        if (busy) return;
    }
    fail_msg("server never became busy");
}

/* The unlock is executed (or still queued) when its reply is lost; the
 * retry must neither drop a second hold nor be overtaken by the original.
 * Then the same for an acquire and its undo. */
static void test_unlock_replay_detected(void **state)
{
    (void)state;
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = S[0].url;
    cfg.command_timeout_ms = 200;
    cfg.watchdog_lease_ms = 1500;
    rlock_client_t *c = NULL;
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_OK);
    char name[64];
    th_name(name, sizeof name, "replay");
    rlock_t *l = NULL, *o = NULL;
    assert_int_equal(rlock_open(c, name, RLOCK_REENTRANT, "a", 0, &l), RLOCK_OK);
    assert_int_equal(rlock_open(CL[0], name, RLOCK_REENTRANT, "o", 0, &o), RLOCK_OK);
    assert_int_equal(rlock_lock(l, 10000), RLOCK_OK);
    assert_int_equal(rlock_lock(l, 10000), RLOCK_OK);
    assert_int_equal(rlock_lock(l, 10000), RLOCK_OK);
    /* busy 400 ms vs a 200 ms timeout: the first request times out and the
     * retry / undo (sent at ~200 ms) gets through, for any detection delay
     * of start_busy() below 200 ms */
    struct busy_arg b = { .i = 0, .ms = 400 };
    pthread_t t;
    start_busy(&t, &b);
    rlock_status_t ust = rlock_unlock(l);           /* 3 -> 2, reply lost, retried */
    pthread_join(t, NULL);
    if (ust != RLOCK_OK) {
        /* both sends lost (overloaded machine): the old request is fenced off
         * or has run -- never both it and the retry */
        int64_t n = -1;
        assert_int_equal(ust, RLOCK_REDIS_ERROR);
        assert_int_equal(rlock_hold_count(l, &n), RLOCK_OK);
        assert_true(n == 2 || n == 3);
        printf("    lost unlock reply: retry lost too; holds left %lld (never 1)\n", (long long)n);
        bool was;
        rlock_force_unlock(l, &was);
        rlock_close(l);
        rlock_close(o);
        rlock_client_free(c);
        return;
    }
    rlock_stats_t s;
    rlock_client_stats(c, &s);
    /* Two orders are possible once the server is free again: the old
     * request runs first (the retry detects the replay), or the retry's
     * connection is served first and fences the old one off (CLIENT KILL)
     * so it never runs.  Either way exactly one hold is dropped. */
    printf("    lost unlock reply: %s\n", s.unlock_replays ? "replay detected by the retry"
                                                         : "old request fenced off");
    assert_true(s.unlock_replays <= 1);
    int64_t n = -1;
    assert_int_equal(rlock_hold_count(l, &n), RLOCK_OK);
    assert_int_equal(n, 2);                          /* not 1: no double decrement */
    assert_int_equal(rlock_local_holds(l), 2);
    assert_int_equal(rlock_unlock(l), RLOCK_OK);
    assert_int_equal(rlock_try_lock(o, 0, 1000), RLOCK_TIMEOUT);
    assert_int_equal(rlock_unlock(l), RLOCK_OK);
    assert_int_equal(rlock_try_lock(o, 0, 1000), RLOCK_OK);
    assert_int_equal(rlock_unlock(o), RLOCK_OK);

    /* The undo branch: an acquire that runs after its client gave up
     * (lease 1.5 s, and watchdog mode with a 1.5 s watchdog lease) is undone
     * or fenced off, so the key is normally gone at once; if even the undo
     * cannot get through (an overloaded machine) the guarantee is weaker but
     * still holds: never renewed, gone when its lease ends. */
    for (int k = 0; k < 2; k++) {
        start_busy(&t, &b);
        int64_t t0 = th_now_ms();
        rlock_status_t st = rlock_try_lock(l, 0, k == 0 ? 1500 : RLOCK_WATCHDOG);
        pthread_join(t, NULL);
        if (st == RLOCK_OK) {   /* busy window missed on a loaded machine */
            printf("    lost acquire reply: not provoked (busy window missed)\n");
            assert_int_equal(rlock_unlock(l), RLOCK_OK);
            continue;
        }
        assert_int_equal(st, RLOCK_REDIS_ERROR);
        assert_int_equal(rlock_local_holds(l), 0);
        rlock_client_stats(c, &s);
        assert_int_equal(s.watched_now, 0);
        bool locked = true;
        assert_int_equal(rlock_is_locked(o, &locked), RLOCK_OK);
        printf("    lost acquire reply (%s): %s\n", k == 0 ? "lease" : "watchdog",
               locked ? "undo did not get through; waiting for the lease" : "undone at once");
        if (locked) {
            int64_t left = 1500 - (th_now_ms() - t0) + 100;
            assert_int_equal(rlock_try_lock(o, left > 0 ? left : 0, 1000), RLOCK_OK);
        } else {
            assert_int_equal(rlock_try_lock(o, 0, 1000), RLOCK_OK);
        }
        assert_int_equal(rlock_unlock(o), RLOCK_OK);
    }
    rlock_close(l);
    rlock_close(o);
    rlock_client_free(c);
}

/*
 * Replica sync (locks.md 1.7 / 6.1): WAIT pipelined behind acquire and
 * unlock.  With the replica up the lock is on the replica when lock()
 * returns; with the replica stopped an acquire is released again and
 * reported REDIS_ERROR -- never a lock that would not survive a failover.
 */
static void test_replica_sync(void **state)
{
    (void)state;
    static th_server_t rep;
    assert_true(th_server_start_replica(&rep, &S[1]));
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = S[1].url;
    cfg.replica_acks = 1;
    cfg.replica_timeout_ms = 500;
    cfg.command_timeout_ms = 500;
    rlock_client_t *c = NULL;
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_EINVAL);  /* timeout <= WAIT's */
    cfg.command_timeout_ms = 1500;
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_OK);
    char name[64];
    th_name(name, sizeof name, "synced");
    rlock_t *l = NULL;
    assert_int_equal(rlock_open(c, name, RLOCK_REENTRANT, "a", 0, &l), RLOCK_OK);
    redisContext *rr = th_connect(rep.url);

    rlock_stats_t s0, s1;
    /* a budget: a slow replica (loaded machine) is retried within it */
    assert_int_equal(rlock_try_lock(l, 5000, 10000), RLOCK_OK);
    assert_int_equal(rlock_unlock(l), RLOCK_OK);
    int64_t best = INT64_MAX;
    for (int k = 0; k < 5 && best != 4; k++) {
        rlock_client_stats(c, &s0);
        assert_int_equal(rlock_try_lock(l, 5000, 10000), RLOCK_OK);
        redisReply *x = redisCommand(rr, "HGET rlock:{%s} %s", name, rlock_owner(l));
        assert_int_equal(x->type, REDIS_REPLY_STRING);   /* already on the replica */
        assert_string_equal(x->str, "1");
        freeReplyObject(x);
        assert_int_equal(rlock_unlock(l), RLOCK_OK);
        rlock_client_stats(c, &s1);
        int64_t n = (int64_t)(s1.commands - s0.commands);
        if (n < best) best = n;
    }
    assert_int_equal(best, 4);   /* 2 x (EVALSHA + WAIT) in 2 round trips */

    th_server_kill(&rep, SIGSTOP);
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_try_lock(l, 0, 10000), RLOCK_REDIS_ERROR);
    int64_t took = th_now_ms() - t0;
    assert_true(took >= 490 && took < 3000);
    assert_int_equal(rlock_local_holds(l), 0);
    assert_int_equal(exists_on(1, name), 0);          /* released again */
    rlock_client_stats(c, &s1);
    assert_true(s1.sync_failures >= 1);
    th_server_kill(&rep, SIGCONT);

    assert_int_equal(rlock_try_lock(l, 2000, 10000), RLOCK_OK);
    assert_int_equal(rlock_unlock(l), RLOCK_OK);
    redisFree(rr);
    rlock_close(l);
    rlock_client_free(c);
    th_server_stop(&rep);
}

/* Unix-socket connections (url "unix:///..." and the unix_path field). */
static void test_unix_socket(void **state)
{
    (void)state;
    static th_server_t us;
    assert_true(th_server_start_unix(&us));
    char url[160];
    snprintf(url, sizeof url, "unix://%s/redis.sock", us.dir);
    for (int k = 0; k < 2; k++) {
        rlock_config_t cfg;
        rlock_config_init(&cfg);
        char path[160];
        snprintf(path, sizeof path, "%s/redis.sock", us.dir);
        if (k == 0) cfg.url = url;
        else cfg.unix_path = path;
        rlock_client_t *c = NULL;
        assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_OK);
        rlock_t *a = NULL, *b = NULL;
        assert_int_equal(rlock_open(c, "unix", RLOCK_REENTRANT, "a", 0, &a), RLOCK_OK);
        assert_int_equal(rlock_open(c, "unix", RLOCK_REENTRANT, "b", 0, &b), RLOCK_OK);
        assert_int_equal(rlock_lock(a, 5000), RLOCK_OK);
        assert_int_equal(rlock_try_lock(b, 0, 5000), RLOCK_TIMEOUT);
        assert_int_equal(rlock_unlock(a), RLOCK_OK);
        assert_int_equal(rlock_try_lock(b, 1000, 5000), RLOCK_OK);
        assert_int_equal(rlock_unlock(b), RLOCK_OK);
        rlock_close(a);
        rlock_close(b);
        rlock_client_free(c);
    }
    th_server_stop(&us);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_all),
        cmocka_unit_test(test_multi_exactly_one),
        cmocka_unit_test(test_multi_one_server_down),
        cmocka_unit_test(test_multi_budget_vs_lease),
        cmocka_unit_test(test_redis_restart),
        cmocka_unit_test(test_lost_replies),
        cmocka_unit_test(test_unlock_replay_detected),
        cmocka_unit_test(test_replica_sync),
        cmocka_unit_test(test_unix_socket),
    };
    return cmocka_run_group_tests_name("rlock_multi", tests, setup, teardown);
}
