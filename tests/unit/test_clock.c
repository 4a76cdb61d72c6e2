/* test_clock.c -- the loop's cached clock (clock.h): off a loop every clock_now_* reads the
 * clock; inside one, a wake-up's reads all return its first reading, the next wake-up
 * reads again, and the wall time derived from the reading agrees with the wall clock; and
 * the handshake every Redis connection sends (rconn_hello): AUTH and SELECT only when the
 * URL asks for them, in that order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/clock.h"
#include "redis/rconn.h"

static void pause_ms(int ms)
{
    struct timespec ts = { 0, (long)ms * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void test_off_a_loop_reads_every_time(void **state)
{
    (void)state;
    uint64_t a = clock_now_ns();
    pause_ms(3);
    uint64_t b = clock_now_ns();
    assert_true(b >= a + 3000000u);
    uint64_t wall = clock_now_wall_ms();
    int64_t skew = (int64_t)wall - (int64_t)clock_wall_ms();
    assert_true(skew <= 0 && skew > -50);
}

static void test_one_reading_per_wake_up(void **state)
{
    (void)state;
    clock_loop_enter();
    clock_loop_wake();
    uint64_t a = clock_now_ns();
    uint64_t wa = clock_now_wall_ms();
    pause_ms(3);
    assert_true(clock_now_ns() == a);            /* the same wake-up: the same reading */
    assert_true(clock_now_ms() == a / 1000000u);
    assert_true(clock_now_wall_ms() == wa);
    int64_t skew = (int64_t)wa - (int64_t)clock_wall_ms();
    assert_true(skew <= 0 && skew > -50);        /* the wall time as of the reading */

    clock_loop_wake();                           /* the next wake-up reads again */
    uint64_t b = clock_now_ns();
    assert_true(b >= a + 3000000u);
    assert_true(clock_now_wall_ms() >= wa + 3);

    clock_loop_leave();                          /* off the loop: live again */
    pause_ms(3);
    assert_true(clock_now_ns() >= b + 3000000u);
}

static void test_hello_from_the_url(void **state)
{
    (void)state;
    url_redis_t a;
    rconn_hello_t h;
    memset(&a, 0, sizeof a);
    rconn_hello(&a, &h);
    assert_int_equal(h.n, 0);                    /* no password, db 0: nothing to send */

    snprintf(a.password, sizeof a.password, "s3cr et@");
    rconn_hello(&a, &h);
    assert_int_equal(h.n, 1);
    assert_string_equal(h.cmd[0].name, "AUTH");
    assert_int_equal(h.cmd[0].argc, 2);
    assert_memory_equal(h.cmd[0].argv[1], "s3cr et@", 8);
    assert_int_equal(h.cmd[0].argvlen[1], 8);

    a.db = 12;
    rconn_hello(&a, &h);
    assert_int_equal(h.n, 2);                    /* AUTH first, then SELECT */
    assert_string_equal(h.cmd[0].name, "AUTH");
    assert_string_equal(h.cmd[1].name, "SELECT");
    assert_memory_equal(h.cmd[1].argv[0], "SELECT", 6);
    assert_int_equal(h.cmd[1].argvlen[1], 2);
    assert_memory_equal(h.cmd[1].argv[1], "12", 2);

    a.password[0] = '\0';
    rconn_hello(&a, &h);
    assert_int_equal(h.n, 1);
    assert_string_equal(h.cmd[0].name, "SELECT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_a_loop_reads_every_time),
        cmocka_unit_test(test_one_reading_per_wake_up),
        cmocka_unit_test(test_hello_from_the_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
