/* test_sale_totals.c -- the board's per-sale totals: summing a totals hash's fields (one
 * per outcome and process, "<outcome>@<instance>.<start ms>") by outcome. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "server/sale_totals.h"

static int add(const char *field, int64_t v, int64_t *sums, int *seen)
{
    return sale_totals_add(field, strlen(field), v, sums, seen);
}

static void test_fields_summed_by_outcome(void **state)
{
    (void)state;
    int64_t sums[OUT__COUNT] = { 0 };
    int seen[OUT__COUNT] = { 0 };
    assert_int_equal(add("ok@ops-1.1765000000000", 3, sums, seen), 0);
    assert_int_equal(add("ok@ops-2.1765000000001", 4, sums, seen), 0);
    assert_int_equal(add("ok@ops-1.1765000999999", 1, sums, seen), 0);   /* a restart */
    assert_int_equal(add("paused@ops-1.1765000000000", 2, sums, seen), 0);
    assert_int_equal(add("sold_out", 5, sums, seen), 0);                  /* no suffix */
    assert_int_equal(sums[OUT_OK], 8);
    assert_int_equal(sums[OUT_PAUSED], 2);
    assert_int_equal(sums[OUT_SOLD_OUT], 5);
    assert_true(seen[OUT_OK] && seen[OUT_PAUSED] && seen[OUT_SOLD_OUT]);
    assert_false(seen[OUT_DUPLICATE]);
    /* not an outcome: skipped, nothing counted */
    assert_int_equal(add("okay@ops-1.1", 9, sums, seen), -1);
    assert_int_equal(add("@ops-1.1", 9, sums, seen), -1);
    assert_int_equal(add("", 9, sums, seen), -1);
    assert_int_equal(sums[OUT_OK], 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields_summed_by_outcome),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
