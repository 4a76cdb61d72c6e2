/*
 * test_rw.c -- read-write lock behaviours (locks.md section 3, items 30-36)
 * plus writer preference.
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
    C = th_client(th_url(), TH_WD_LEASE_MS);
    return C ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlock_client_free(C);
    return 0;
}

static rlock_t *op(const char *name, rlock_kind_t k, const char *owner, unsigned flags)
{
    rlock_t *l = NULL;
    assert_int_equal(rlock_open(C, name, k, owner, flags, &l), RLOCK_OK);
    return l;
}

struct wr_arg {
    const char *name;
    unsigned flags;
    int wait_ms;
    int64_t got_ms;
    rlock_status_t st;
};

static void *writer_thread(void *p)
{
    struct wr_arg *a = p;
    rlock_t *w = NULL;
    rlock_open(C, a->name, RLOCK_WRITE, "writer", a->flags, &w);
    a->st = rlock_try_lock(w, a->wait_ms, 5000);
    a->got_ms = th_now_ms();
    if (a->st == RLOCK_OK) {
        th_sleep_ms(50);
        rlock_unlock(w);
    }
    rlock_close(w);
    return NULL;
}

/* 30: many readers at once; a writer waits until the last reader releases */
static void test_readers_then_writer(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "rw");
    rlock_t *r[5];
    for (int i = 0; i < 5; i++) {
        char o[16];
        snprintf(o, sizeof o, "r%d", i);
        r[i] = op(name, RLOCK_READ, o, 0);
        assert_int_equal(rlock_try_lock(r[i], 0, 5000), RLOCK_OK);
    }
    int64_t n;
    assert_int_equal(rlock_hold_count(r[3], &n), RLOCK_OK);
    assert_int_equal(n, 1);
    struct wr_arg a = { .name = name, .wait_ms = 5000 };
    pthread_t t;
    pthread_create(&t, NULL, writer_thread, &a);
    int64_t t_last = 0;
    for (int i = 0; i < 5; i++) {
        th_sleep_ms(60);
        if (i == 4) t_last = th_now_ms();
        assert_int_equal(rlock_unlock(r[i]), RLOCK_OK);
    }
    pthread_join(t, NULL);
    assert_int_equal(a.st, RLOCK_OK);
    assert_true(a.got_ms >= t_last);
    /* woken by the last release, not at the readers' 5 s leases */
    assert_true(a.got_ms - t_last < TH_LATE_MS);
    for (int i = 0; i < 5; i++) rlock_close(r[i]);
}

/* 31: the write holder may take the read lock (downgrade); others cannot
 * read while a write is held.  32: a reader cannot take the write lock. */
static void test_downgrade_no_upgrade(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "rwdown");
    rlock_t *w = op(name, RLOCK_WRITE, "me", 0);
    rlock_t *r = op(name, RLOCK_READ, "me", 0);
    rlock_t *r2 = op(name, RLOCK_READ, "other", 0);
    rlock_t *w2 = op(name, RLOCK_WRITE, "other", 0);
    assert_int_equal(rlock_try_lock(w, 0, 5000), RLOCK_OK);
    assert_int_equal(rlock_try_lock(r, 0, 5000), RLOCK_OK);     /* downgrade */
    assert_int_equal(rlock_try_lock(r2, 0, 5000), RLOCK_TIMEOUT);
    assert_int_equal(rlock_try_lock(w, 0, 5000), RLOCK_OK);     /* reentrant write */
    assert_int_equal(rlock_unlock(w), RLOCK_OK);
    assert_int_equal(rlock_unlock(w), RLOCK_OK);
    /* now only the read hold of "me" remains: others may read, nobody writes */
    assert_int_equal(rlock_try_lock(r2, 0, 5000), RLOCK_OK);
    assert_int_equal(rlock_try_lock(w, 0, 5000), RLOCK_TIMEOUT);  /* no upgrade */
    assert_int_equal(rlock_try_lock(w2, 0, 5000), RLOCK_TIMEOUT);
    assert_int_equal(rlock_unlock(r), RLOCK_OK);
    assert_int_equal(rlock_try_lock(w2, 0, 5000), RLOCK_TIMEOUT);
    assert_int_equal(rlock_unlock(r2), RLOCK_OK);
    assert_int_equal(rlock_try_lock(w2, 0, 5000), RLOCK_OK);
    assert_int_equal(rlock_unlock(w2), RLOCK_OK);
    assert_int_equal(rlock_unlock(w2), RLOCK_NOT_OWNER);
    bool v = true;
    assert_int_equal(rlock_is_locked(w, &v), RLOCK_OK);
    assert_false(v);
    redisContext *rc = th_connect(th_url());
    redisReply *x = redisCommand(rc, "EXISTS rlock:{%s}:rw rlock:{%s}:rw:r rlock:{%s}:rw:w", name,
                                 name, name);
    assert_int_equal(x->integer, 0);   /* nothing left behind */
    freeReplyObject(x);
    redisFree(rc);
    rlock_close(w);
    rlock_close(r);
    rlock_close(r2);
    rlock_close(w2);
}

/* 33: each reader keeps its own lease: A (400 ms) at t=0, B (3 s) taken and
 * released at ~100 ms; a writer gets in when A's own lease ends (~400 ms),
 * not when B's would have (3.1 s). */
static void test_per_reader_lease(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "rwlease");
    rlock_t *a = op(name, RLOCK_READ, "A", 0);
    rlock_t *b = op(name, RLOCK_READ, "B", 0);
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_try_lock(a, 0, 400), RLOCK_OK);
    th_sleep_ms(100);
    assert_int_equal(rlock_try_lock(b, 0, 3000), RLOCK_OK);
    assert_int_equal(rlock_unlock(b), RLOCK_OK);
    struct wr_arg w = { .name = name, .wait_ms = 2000 };
    writer_thread(&w);
    assert_int_equal(w.st, RLOCK_OK);
    int64_t at = w.got_ms - t0;
    /* at A's lease, not at B's 3 s one */
    assert_true(at >= 390 && at < 400 + TH_LATE_MS);
    assert_int_equal(rlock_unlock(a), RLOCK_LOST);
    rlock_close(a);
    rlock_close(b);
}

/* 34: readers with the watchdog hold past several leases */
static void test_readers_watchdog(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "rwwd");
    rlock_t *r[10];
    for (int i = 0; i < 10; i++) {
        char o[16];
        snprintf(o, sizeof o, "r%d", i);
        r[i] = op(name, RLOCK_READ, o, 0);
        assert_int_equal(rlock_lock(r[i], RLOCK_WATCHDOG), RLOCK_OK);
    }
    rlock_t *w = op(name, RLOCK_WRITE, "w", 0);
    th_sleep_ms(2 * TH_WD_LEASE_MS);
    assert_int_equal(rlock_try_lock(w, 0, 1000), RLOCK_TIMEOUT);
    int64_t ttl = 0;
    assert_int_equal(rlock_remaining_ttl(r[0], &ttl), RLOCK_OK);
    assert_true(ttl > 0 && ttl <= TH_WD_LEASE_MS);
    for (int i = 0; i < 10; i++) {
        assert_true(rlock_is_valid(r[i]));
        assert_int_equal(rlock_unlock(r[i]), RLOCK_OK);
        rlock_close(r[i]);
    }
    assert_int_equal(rlock_try_lock(w, 0, 1000), RLOCK_OK);
    assert_int_equal(rlock_unlock(w), RLOCK_OK);
    rlock_close(w);
}

/* 35: force_unlock of one side does not touch the other */
static void test_force_sides(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "rwforce");
    rlock_t *w = op(name, RLOCK_WRITE, "me", 0);
    rlock_t *r = op(name, RLOCK_READ, "me", 0);
    rlock_t *wo = op(name, RLOCK_WRITE, "x", 0);
    assert_int_equal(rlock_try_lock(w, 0, 5000), RLOCK_OK);
    assert_int_equal(rlock_try_lock(r, 0, 5000), RLOCK_OK);
    bool was = false, v = false;
    assert_int_equal(rlock_force_unlock(r, &was), RLOCK_OK);
    assert_true(was);
    assert_int_equal(rlock_is_held(w, &v), RLOCK_OK);
    assert_true(v);                         /* write side intact */
    assert_int_equal(rlock_force_unlock(wo, &was), RLOCK_OK);
    assert_true(was);
    assert_int_equal(rlock_is_locked(w, &v), RLOCK_OK);
    assert_false(v);
    assert_int_equal(rlock_unlock(w), RLOCK_LOST);
    rlock_close(w);
    rlock_close(r);
    rlock_close(wo);
}

/* Writers queued on the lock (their entries in its waiting-writers set). */
static long long waiting_writers(const char *name)
{
    redisContext *r = th_connect(th_url());
    redisReply *x = redisCommand(r, "ZCARD rlock:{%s}:rw:w", name);
    long long n = x && x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
    if (x) freeReplyObject(x);
    redisFree(r);
    return n;
}

/* Writer preference: a waiting writer blocks new readers (no starvation). */
static void test_writer_preference(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "rwpref");
    rlock_t *r1 = op(name, RLOCK_READ, "r1", RLOCK_F_WRITER_PREF);
    rlock_t *r2 = op(name, RLOCK_READ, "r2", RLOCK_F_WRITER_PREF);
    assert_int_equal(rlock_try_lock(r1, 0, 5000), RLOCK_OK);
    struct wr_arg a = { .name = name, .flags = RLOCK_F_WRITER_PREF, .wait_ms = 5000 };
    pthread_t t;
    pthread_create(&t, NULL, writer_thread, &a);
    for (int i = 0; i < 1000 && waiting_writers(name) < 1; i++) th_sleep_ms(5);
    assert_int_equal(waiting_writers(name), 1);
    assert_int_equal(rlock_try_lock(r2, 0, 5000), RLOCK_TIMEOUT);   /* writer waits */
    assert_int_equal(rlock_try_lock(r1, 0, 5000), RLOCK_OK);        /* reentrant reader ok */
    assert_int_equal(rlock_unlock(r1), RLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_unlock(r1), RLOCK_OK);
    /* r2 waits: it gets in after the writer's turn */
    assert_int_equal(rlock_try_lock(r2, 3000, 5000), RLOCK_OK);
    int64_t r2_at = th_now_ms();
    pthread_join(t, NULL);
    assert_int_equal(a.st, RLOCK_OK);
    assert_true(a.got_ms - t0 < TH_LATE_MS);   /* at r1's release, not its 5 s lease */
    assert_true(r2_at >= a.got_ms + 40);   /* after the writer's 50 ms section */
    assert_int_equal(rlock_unlock(r2), RLOCK_OK);
    rlock_close(r1);
    rlock_close(r2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_then_writer),
        cmocka_unit_test(test_downgrade_no_upgrade),
        cmocka_unit_test(test_per_reader_lease),
        cmocka_unit_test(test_readers_watchdog),
        cmocka_unit_test(test_force_sides),
        cmocka_unit_test(test_writer_preference),
    };
    return cmocka_run_group_tests_name("rlock_rw", tests, setup, teardown);
}
