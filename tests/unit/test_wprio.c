/* test_wprio.c -- the order writer's share of the CPU (wprio.h), on real threads of this
 * process: the idle class while it keeps up, nice N again once behind for lag_ms, idle
 * again after a short read; the normal class around a transaction (wprio_hold); the pacing of short reads; no idle class without the right
 * to come back from it (an unprivileged child with RLIMIT_NICE 0); lag 0 = nice only.
 * Each case runs in a forked child, so the test's own thread keeps its priority. */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "writer/wprio.h"

static int nice_now(void)
{
    errno = 0;
    return getpriority(PRIO_PROCESS, (id_t)gettid());
}

/* Runs fn in a child; its exit status is the number of the first check that failed. */
static int in_child(int (*fn)(void))
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn());
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int idle_cycle(void)
{
    int base = nice_now();
    wprio_t p;
    wprio_start(&p, 10, 1000, 50);
    if (!p.idle_ok)
        return 1;   /* root (the CI) may come back from the idle class */
    if (sched_getscheduler(0) != SCHED_IDLE || nice_now() != base + 10)
        return 2;
    wprio_hold(&p);                                       /* a transaction: normal class */
    if (sched_getscheduler(0) != SCHED_OTHER || nice_now() != base + 10)
        return 11;
    wprio_release(&p);
    if (sched_getscheduler(0) != SCHED_IDLE || !p.idle)
        return 12;
    wprio_read_begins(&p, 1000);
    if (wprio_after_batch(&p, 512, 512, 1000) != 0)      /* full: read again at once */
        return 3;
    if (wprio_after_batch(&p, 512, 512, 1999) != 0 || sched_getscheduler(0) != SCHED_IDLE)
        return 4;   /* behind for 999 ms: still idle */
    wprio_after_batch(&p, 512, 512, 2000);
    if (sched_getscheduler(0) != SCHED_OTHER || nice_now() != base + 10 || p.idle)
        return 5;   /* behind for lag_ms: nice 10 in the normal class */
    wprio_hold(&p);                                       /* behind: stays normal after */
    wprio_release(&p);
    if (sched_getscheduler(0) != SCHED_OTHER || p.idle)
        return 13;
    wprio_read_begins(&p, 2090);
    if (wprio_after_batch(&p, 10, 512, 2100) != 40)      /* short: next read at 2090 + 50 */
        return 6;
    if (sched_getscheduler(0) != SCHED_IDLE || !p.idle || p.switches != 2)
        return 7;   /* caught up: idle again */
    wprio_read_begins(&p, 3000);
    if (wprio_after_batch(&p, 10, 512, 3060) != 0)        /* the read itself took longer */
        return 8;
    if (wprio_after_batch(&p, 0, 512, 3070) != 0)         /* nothing read: BLOCK waited */
        return 9;
    wprio_after_batch(&p, 512, 512, 4000);                /* a new run of full reads ... */
    if (wprio_after_batch(&p, 512, 512, 4999) != 0 || sched_getscheduler(0) != SCHED_IDLE)
        return 10;  /* ... counts its lag from its own start */
    return 0;
}

static int unprivileged(void)
{
    struct rlimit rl = { 0, 0 };
    if (setrlimit(RLIMIT_NICE, &rl) != 0)
        return 20;
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        return 21;   /* nobody: no CAP_SYS_NICE */
    int base = nice_now();
    wprio_t p;
    wprio_start(&p, 10, 1000, 50);
    if (p.idle_ok || p.idle || sched_getscheduler(0) != SCHED_OTHER)
        return 22;   /* it could never come back: not idle */
    if (nice_now() != base + 11)
        return 23;   /* nice 11: where the check of the right to hold 10 left it */
    wprio_after_batch(&p, 512, 512, 1000);
    wprio_after_batch(&p, 512, 512, 5000);
    wprio_after_batch(&p, 1, 512, 5001);
    if (sched_getscheduler(0) != SCHED_OTHER || p.switches != 0)
        return 24;
    return 0;
}

static int nice_only(void)
{
    int base = nice_now();
    wprio_t p;
    wprio_start(&p, 10, 0, 0);
    if (p.idle || sched_getscheduler(0) != SCHED_OTHER || nice_now() != base + 10)
        return 30;
    wprio_read_begins(&p, 0);
    if (wprio_after_batch(&p, 1, 512, 1) != 0)             /* no pacing */
        return 31;
    wprio_after_batch(&p, 512, 512, 10);
    wprio_after_batch(&p, 1, 512, 100000);
    if (sched_getscheduler(0) != SCHED_OTHER || p.switches != 0)
        return 32;
    wprio_t q;
    wprio_start(&q, 50, 1000, 0);                          /* capped at 19: no idle */
    if (nice_now() != 19 || q.idle || sched_getscheduler(0) != SCHED_OTHER)
        return 33;
    return 0;
}

static void test_idle_while_keeping_up(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();   /* the right to come back from the idle class: root in CI */
    assert_int_equal(in_child(idle_cycle), 0);
}

static void test_unprivileged_stays_in_normal_class(void **state)
{
    (void)state;
    assert_int_equal(in_child(unprivileged), 0);
}

static void test_lag_zero_is_nice_only(void **state)
{
    (void)state;
    assert_int_equal(in_child(nice_only), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_while_keeping_up),
        cmocka_unit_test(test_unprivileged_stays_in_normal_class),
        cmocka_unit_test(test_lag_zero_is_nice_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
