/*
 * test_process.c -- behaviours about processes (locks.md S2, S3):
 *
 *  - the course's mis-delete story: a holder is stopped (SIGSTOP) past its
 *    lease, another process takes the lock and writes with its fencing
 *    token; the first resumes: it learns it lost the lock (lost callback
 *    within one renewal period, is_valid() false), its unlock reports LOST
 *    and does not delete the other's lock, and its fenced write is rejected;
 *    in watchdog mode and in lease mode;
 *  - kill -9 of a holder in watchdog mode: another process gets the lock
 *    within one lease, with no cleanup;
 *  - kill -9 of a queued fair waiter: the queue recovers within the waiter
 *    TTL (no 5-minute stall).
 *
 * Worker processes are this binary re-executed with "holder" / "fairwaiter";
 * they talk to the parent over stdin/stdout lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"

#define LEASE_MS TH_WD_LEASE_MS   /* the holder's lease, and its watchdog's */

/* ---- worker: holder ---- */

static int lost_cb_fired;   /* written by the watchdog thread: atomics only */
static void on_lost(rlock_t *l, rlock_lost_reason_t why, void *arg)
{
    (void)l;
    (void)why;
    (void)arg;
    __atomic_store_n(&lost_cb_fired, 1, __ATOMIC_SEQ_CST);
}

/* argv: holder <url> <name> <"wd" (watchdog) or "lease" (LEASE_MS)> */
static int holder_main(char **argv)
{
    const char *url = argv[2], *name = argv[3];
    bool wd = strcmp(argv[4], "wd") == 0;
    rlock_client_t *c = th_client(url, LEASE_MS);
    rlock_t *l = NULL;
    if (!c || rlock_open(c, name, RLOCK_REENTRANT, "holder", 0, &l) != RLOCK_OK) return 3;
    rlock_set_lost_cb(l, on_lost, NULL);
    if (rlock_lock(l, wd ? RLOCK_WATCHDOG : LEASE_MS) != RLOCK_OK) return 4;
    char data[128], fk[128];
    snprintf(data, sizeof data, "%s:data", name);
    snprintf(fk, sizeof fk, "%s:data:fence", name);
    bool acc = false;
    rlock_fenced_set(c, data, fk, rlock_fence(l), "holder-1", &acc);
    printf("LOCKED %llu %d\n", (unsigned long long)rlock_fence(l), acc);
    fflush(stdout);

    char line[64];
    if (!th_read_line(0, line, sizeof line, 60000)) return 5;   /* "GO" after SIGCONT */
    int64_t t0 = th_now_ms();
    bool valid_at_resume = rlock_is_valid(l);
    while (wd && !__atomic_load_n(&lost_cb_fired, __ATOMIC_SEQ_CST) && th_now_ms() - t0 < LEASE_MS + TH_LATE_MS) th_sleep_ms(2);
    int64_t cb_ms = th_now_ms() - t0;
    bool valid = rlock_is_valid(l);
    /* the paused holder "finishes its work": a fenced write... */
    rlock_status_t wst = rlock_fenced_set(c, data, fk, rlock_fence(l), "holder-2", &acc);
    /* ...and its unlock */
    rlock_status_t ust = rlock_unlock(l);
    printf("RESUMED cb=%d cb_ms=%lld valid_at_resume=%d valid=%d write_st=%d accepted=%d unlock=%s\n",
           __atomic_load_n(&lost_cb_fired, __ATOMIC_SEQ_CST), (long long)cb_ms, valid_at_resume, valid, (int)wst, acc,
           rlock_status_str(ust));
    fflush(stdout);
    rlock_close(l);
    rlock_client_free(c);
    return 0;
}

/* ---- worker: fair waiter (queues, then waits to be killed) ---- */
/* argv: fairwaiter <url> <name> */
static int fairwaiter_main(char **argv)
{
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = argv[2];
    cfg.fair_waiter_ttl_ms = 600;
    rlock_client_t *c = NULL;
    rlock_t *l = NULL;
    if (rlock_client_new(&cfg, &c) != RLOCK_OK) return 3;
    if (rlock_open(c, argv[3], RLOCK_FAIR, "ghost", 0, &l) != RLOCK_OK) return 3;
    printf("WAITING\n");
    fflush(stdout);
    rlock_status_t st = rlock_try_lock(l, 60000, 5000);
    printf("DONE %s\n", rlock_status_str(st));
    return 0;
}

/* ---- parent side ---- */

static void mis_delete_story(const char *mode)
{
    char name[64];
    th_name(name, sizeof name, "pause");
    char *args[] = { "holder", (char *)th_url(), name, (char *)mode, NULL };
    int to, from;
    pid_t pid = th_spawn_self(args, &to, &from);
    assert_true(pid > 0);
    char line[256];
    assert_true(th_read_line(from, line, sizeof line, 10000));
    unsigned long long f1 = 0;
    int acc1 = 0;
    assert_int_equal(sscanf(line, "LOCKED %llu %d", &f1, &acc1), 2);
    assert_true(f1 > 0);
    assert_int_equal(acc1, 1);

    /* stop the holder past its lease */
    int64_t t_stop = th_now_ms();
    kill(pid, SIGSTOP);
    rlock_client_t *c = th_client(th_url(), 0);
    rlock_t *b = NULL;
    assert_int_equal(rlock_open(c, name, RLOCK_REENTRANT, "other", 0, &b), RLOCK_OK);
    assert_int_equal(rlock_try_lock(b, 5000, 10000), RLOCK_OK);
    int64_t took = th_now_ms() - t_stop;
    assert_true(took <= LEASE_MS + TH_LATE_MS);   /* at the lease's end, not our 5 s wait's */
    uint64_t f2 = rlock_fence(b);
    assert_true(f2 > f1);
    char data[128], fk[128];
    snprintf(data, sizeof data, "%s:data", name);
    snprintf(fk, sizeof fk, "%s:data:fence", name);
    bool acc = false;
    assert_int_equal(rlock_fenced_set(c, data, fk, f2, "other", &acc), RLOCK_OK);
    assert_true(acc);

    /* resume the first holder */
    th_sleep_ms(100);
    kill(pid, SIGCONT);
    assert_int_equal(write(to, "GO\n", 3), 3);
    assert_true(th_read_line(from, line, sizeof line, 10000));
    printf("    %s: %s\n", mode, line);
    int cb = -1, var = -1, valid = -1, wst = -1, accepted = -1;
    long long cb_ms = -1;
    char ust[32] = "";
    assert_int_equal(sscanf(line, "RESUMED cb=%d cb_ms=%lld valid_at_resume=%d valid=%d write_st=%d accepted=%d unlock=%31s",
                            &cb, &cb_ms, &var, &valid, &wst, &accepted, ust), 7);
    if (strcmp(mode, "wd") == 0) {
        assert_int_equal(cb, 1);                 /* told it lost the lock */
        assert_true(cb_ms <= LEASE_MS / 3 + TH_LATE_MS);  /* within one renewal period */
    }
    assert_int_equal(valid, 0);
    assert_int_equal(wst, RLOCK_OK);
    assert_int_equal(accepted, 0);               /* fenced write rejected */
    assert_string_equal(ust, "LOST");            /* its unlock: LOST... */
    bool held = false;
    assert_int_equal(rlock_is_held(b, &held), RLOCK_OK);
    assert_true(held);                           /* ...and ours is intact */
    redisContext *r = th_connect(th_url());
    redisReply *x = redisCommand(r, "GET %s", data);
    assert_string_equal(x->str, "other");
    freeReplyObject(x);
    redisFree(r);
    assert_int_equal(rlock_unlock(b), RLOCK_OK);
    assert_int_equal(th_wait_exit(pid, 5000), 0);
    close(to);
    close(from);
    rlock_close(b);
    rlock_client_free(c);
}

static void test_sigstop_watchdog(void **state) { (void)state; mis_delete_story("wd"); }
static void test_sigstop_lease(void **state) { (void)state; mis_delete_story("lease"); }

static void test_kill9_holder(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "kill9");
    char *args[] = { "holder", (char *)th_url(), name, "wd", NULL };
    int to, from;
    pid_t pid = th_spawn_self(args, &to, &from);
    assert_true(pid > 0);
    char line[256];
    assert_true(th_read_line(from, line, sizeof line, 10000));
    rlock_client_t *c = th_client(th_url(), 0);
    rlock_t *b = NULL;
    assert_int_equal(rlock_open(c, name, RLOCK_REENTRANT, "other", 0, &b), RLOCK_OK);
    /* the watchdog keeps it past three leases */
    th_sleep_ms(3 * LEASE_MS);
    assert_int_equal(rlock_try_lock(b, 0, 10000), RLOCK_TIMEOUT);
    kill(pid, SIGKILL);
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_try_lock(b, 5000, 10000), RLOCK_OK);
    int64_t took = th_now_ms() - t0;
    printf("    lock available %lld ms after kill -9 (lease %d ms)\n", (long long)took, LEASE_MS);
    assert_true(took <= LEASE_MS + TH_LATE_MS);   /* one lease, not our 5 s wait */
    assert_int_equal(rlock_unlock(b), RLOCK_OK);
    th_wait_exit(pid, 5000);
    close(to);
    close(from);
    rlock_close(b);
    rlock_client_free(c);
}

static void test_kill9_fair_waiter(void **state)
{
    (void)state;
    char name[64];
    th_name(name, sizeof name, "fairkill");
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = th_url();
    cfg.fair_waiter_ttl_ms = 600;
    rlock_client_t *c = NULL;
    assert_int_equal(rlock_client_new(&cfg, &c), RLOCK_OK);
    rlock_t *holder = NULL, *next = NULL;
    assert_int_equal(rlock_open(c, name, RLOCK_FAIR, "holder", 0, &holder), RLOCK_OK);
    assert_int_equal(rlock_open(c, name, RLOCK_FAIR, "next", 0, &next), RLOCK_OK);
    assert_int_equal(rlock_lock(holder, 10000), RLOCK_OK);

    char *args[] = { "fairwaiter", (char *)th_url(), name, NULL };
    int from;
    pid_t pid = th_spawn_self(args, NULL, &from);
    char line[64];
    assert_true(th_read_line(from, line, sizeof line, 10000));
    redisContext *r = th_connect(th_url());
    redisReply *x = NULL;
    for (int i = 0; i < 100; i++) {   /* wait until it is queued */
        x = redisCommand(r, "LLEN rlock:{%s}:f:q", name);
        long long n = x->integer;
        freeReplyObject(x);
        if (n == 1) break;
        th_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    th_wait_exit(pid, 5000);
    close(from);
    /* the dead waiter is at the head; the holder releases; the live
     * waiter behind it must get the lock once the dead entry's heartbeat
     * expires (600 ms), not after minutes */
    int64_t t0 = th_now_ms();
    assert_int_equal(rlock_unlock(holder), RLOCK_OK);
    assert_int_equal(rlock_try_lock(next, 5000, 5000), RLOCK_OK);
    int64_t took = th_now_ms() - t0;
    printf("    fair queue recovered %lld ms after the release (waiter ttl 600 ms)\n",
           (long long)took);
    assert_true(took <= 600 + TH_LATE_MS);   /* the dead waiter's TTL, not minutes */
    assert_int_equal(rlock_unlock(next), RLOCK_OK);
    x = redisCommand(r, "EXISTS rlock:{%s}:f:q rlock:{%s}:f:t", name, name);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    redisFree(r);
    rlock_close(holder);
    rlock_close(next);
    rlock_client_free(c);
}

int main(int argc, char **argv)
{
    if (argc > 4 && strcmp(argv[1], "holder") == 0) return holder_main(argv);
    if (argc > 3 && strcmp(argv[1], "fairwaiter") == 0) return fairwaiter_main(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigstop_watchdog),
        cmocka_unit_test(test_sigstop_lease),
        cmocka_unit_test(test_kill9_holder),
        cmocka_unit_test(test_kill9_fair_waiter),
    };
    return cmocka_run_group_tests_name("rlock_process", tests, NULL, NULL);
}
