/* test_orderid.c -- order id layout, monotonicity (also across threads and when the wall
 * clock steps back) and borrowing the next second when a second's sequence runs out.
 *
 * The generator's state is process-wide and never goes back, so each test works at a
 * wall time later than anything the tests before it can have reached. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>

#include <cmocka.h>

#include "sale/orderid.h"

#define SEQ_MAX ((1u << ORDERID_SEQ_BITS) - 1)
#define T0 (ORDERID_EPOCH + 100000000LL)   /* 2025-03-01 or so */

static void test_layout(void **state)
{
    (void)state;
    int64_t id = orderid_make(ORDERID_EPOCH + 100, 5, 7);
    assert_true(id > 0);
    assert_int_equal((uint64_t)id >> 32, 100);
    assert_int_equal(((uint64_t)id >> 22) & 1023, 5);
    assert_int_equal((uint64_t)id & 0x3fffff, 7);
    assert_int_equal(orderid_time(id), ORDERID_EPOCH + 100);
    assert_int_equal(orderid_slot(id), 5);
    assert_int_equal(orderid_seq(id), 7);

    /* extremes stay in their fields and keep bit 63 clear */
    id = orderid_make(ORDERID_EPOCH + 0x7fffffffLL, 1023, SEQ_MAX);
    assert_true(id > 0);
    assert_int_equal(orderid_time(id), ORDERID_EPOCH + 0x7fffffffLL);
    assert_int_equal(orderid_slot(id), 1023);
    assert_int_equal(orderid_seq(id), SEQ_MAX);
    id = orderid_make(ORDERID_EPOCH + 1, 1024 + 3, SEQ_MAX + 1 + 9);   /* masked */
    assert_int_equal(orderid_slot(id), 3);
    assert_int_equal(orderid_seq(id), 9);
    assert_int_equal(orderid_time(id), ORDERID_EPOCH + 1);

    /* a clock before the epoch counts as the epoch */
    assert_int_equal(orderid_time(orderid_make(0, 0, 0)), ORDERID_EPOCH);

    /* the API doc's example: a time in the high 32 bits */
    int64_t t = 1700000000;   /* 2023-11-14 */
    assert_int_equal((uint64_t)orderid_make(t, 0, 0) >> 32, (uint64_t)(t - ORDERID_EPOCH));
}

static void test_next_uses_slot_and_time(void **state)
{
    (void)state;
    orderid_init(77);
    int64_t a = orderid_next(T0);
    assert_int_equal(orderid_time(a), T0);
    assert_int_equal(orderid_slot(a), 77);
    assert_int_equal(orderid_seq(a), 0);
    int64_t b = orderid_next(T0);
    assert_true(b > a);
    assert_int_equal(orderid_seq(b), 1);
    int64_t c = orderid_next(T0 + 1);
    assert_int_equal(orderid_time(c), T0 + 1);
    assert_int_equal(orderid_seq(c), 0);
    assert_true(c > b);
}

static void test_clock_goes_back(void **state)
{
    (void)state;
    int64_t t = T0 + 10;
    int64_t a = orderid_next(t);
    int64_t b = orderid_next(t - 5);   /* NTP stepped the clock back */
    assert_true(b > a);
    assert_int_equal(orderid_time(b), t);
    assert_int_equal(orderid_seq(b), orderid_seq(a) + 1);
    int64_t c = orderid_next(0);
    assert_true(c > b);
}

static void test_overflow_borrows_next_second(void **state)
{
    (void)state;
    int64_t t = T0 + 100;
    int64_t prev = orderid_next(t);
    assert_int_equal(orderid_seq(prev), 0);
    for (uint32_t i = 1; i <= SEQ_MAX; i++) {
        int64_t id = orderid_next(t);
        assert_true(id > prev);
        prev = id;
    }
    assert_int_equal(orderid_time(prev), t);
    assert_int_equal(orderid_seq(prev), SEQ_MAX);

    /* the second is used up: the next id borrows t+1 although the clock still says t */
    int64_t b = orderid_next(t);
    assert_true(b > prev);
    assert_int_equal(orderid_time(b), t + 1);
    assert_int_equal(orderid_seq(b), 0);
    /* when the clock reaches t+1 it continues in the borrowed second, no duplicate */
    int64_t c = orderid_next(t + 1);
    assert_int_equal(orderid_time(c), t + 1);
    assert_int_equal(orderid_seq(c), 1);
    /* and the clock moving on resets the sequence */
    int64_t d = orderid_next(t + 2);
    assert_int_equal(orderid_time(d), t + 2);
    assert_int_equal(orderid_seq(d), 0);
}

#define NTHREADS 4
#define PER_THREAD 200000

static int64_t thread_ids[NTHREADS][PER_THREAD];
static int64_t thread_now;

static void *gen_thread(void *arg)
{
    int64_t *out = arg;
    for (int i = 0; i < PER_THREAD; i++)
        out[i] = orderid_next(thread_now + i / 50000);   /* a few seconds pass */
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_threads_unique_and_increasing(void **state)
{
    (void)state;
    thread_now = T0 + 1000;
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, gen_thread, thread_ids[t]), 0);
    for (int t = 0; t < NTHREADS; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);

    for (int t = 0; t < NTHREADS; t++)
        for (int i = 1; i < PER_THREAD; i++)
            if (thread_ids[t][i] <= thread_ids[t][i - 1])
                fail_msg("thread %d: id %d not above the one before", t, i);

    int64_t *all = malloc(sizeof(int64_t) * NTHREADS * PER_THREAD);
    assert_non_null(all);
    for (int t = 0; t < NTHREADS; t++)
        for (int i = 0; i < PER_THREAD; i++)
            all[t * PER_THREAD + i] = thread_ids[t][i];
    qsort(all, NTHREADS * PER_THREAD, sizeof(int64_t), cmp_i64);
    for (int i = 1; i < NTHREADS * PER_THREAD; i++)
        if (all[i] == all[i - 1])
            fail_msg("duplicate id %lld", (long long)all[i]);
    for (int i = 0; i < NTHREADS * PER_THREAD; i++)
        assert_int_equal(orderid_slot(all[i]), 77);
    free(all);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_next_uses_slot_and_time),
        cmocka_unit_test(test_clock_goes_back),
        cmocka_unit_test(test_overflow_borrows_next_second),
        cmocka_unit_test(test_threads_unique_and_increasing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
