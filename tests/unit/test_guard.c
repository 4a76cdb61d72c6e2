/* test_guard.c -- guessing budgets (auth/guard.h): looking costs nothing, failures do,
 * spent buckets refill, and a table full of spent buckets refuses new keys. The HTTP side
 * (401/429, metrics, logs) is tested in tests/it/test_sec_tokens.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "auth/guard.h"

static void test_looking_is_free_failures_are_not(void **state)
{
    (void)state;
    guard_t *g = guard_new(1.0, 3.0, 64);   /* 1/s, burst 3 */
    assert_non_null(g);
    uint64_t now = 10000;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(guard_ok(g, 7, now), 1);   /* right guesses: never charged */
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(guard_ok(g, 7, now), 1);
        guard_charge(g, 7, now);
    }
    assert_int_equal(guard_ok(g, 7, now), 0);
    guard_charge(g, 7, now);                          /* in flight when it ran out */
    assert_int_equal(guard_ok(g, 7, now + 999), 0);   /* not below zero: one second... */
    assert_int_equal(guard_ok(g, 7, now + 1000), 1);  /* ...gives one token */
    assert_int_equal(guard_ok(g, 8, now), 1);          /* another key, its own bucket */
    assert_int_equal(guard_retry_s(g), 1);
    guard_free(g);
}

static void test_off_and_retry(void **state)
{
    (void)state;
    assert_null(guard_new(0, 5, 64));
    assert_int_equal(guard_ok(NULL, 1, 0), 1);
    guard_charge(NULL, 1, 0);
    guard_t *g = guard_new(5.0 / 60, 5, 64);   /* 5/m: a token every 12 s */
    assert_int_equal(guard_retry_s(g), 12);
    guard_free(g);
    guard_free(NULL);
}

static void test_full_of_spent_buckets_refuses(void **state)
{
    (void)state;
    guard_t *g = guard_new(0.001, 1, 1);   /* one set of 8 ways */
    uint64_t now = 1;
    for (uint64_t k = 1; k <= 8; k++) {
        assert_int_equal(guard_ok(g, k, now), 1);
        guard_charge(g, k, now);
    }
    /* every way holds a spent bucket: a ninth key cannot start from a full one */
    assert_int_equal(guard_ok(g, 9, now), 0);
    guard_charge(g, 9, now);
    for (uint64_t k = 1; k <= 8; k++) {
        assert_int_equal(guard_ok(g, k, now), 0);   /* nobody was evicted */
    }
    /* refilled buckets are forgotten: room again */
    assert_int_equal(guard_ok(g, 9, now + 1000000), 1);
    guard_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_looking_is_free_failures_are_not),
        cmocka_unit_test(test_off_and_retry),
        cmocka_unit_test(test_full_of_spent_buckets_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
