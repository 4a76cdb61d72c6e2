/* test_rebuild_life.c -- the order states a rebuild from SQL gives (rebuild_life.h): each
 * SQL status's state, a status 4 told apart as timeout or cancel by its update time, and
 * the counters per home bucket. The Redis parts (stream events, a surviving state hash)
 * are tests/it/test_rebuild_life.py's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rebuild/rebuild_life.h"
#include "sale/buckets.h"
#include "sale/orderid.h"

#define T0 (ORDERID_EPOCH + 100000000LL)

static char state_of(const rebuild_life_t *l, int64_t oid)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].order_id == oid)
            return l->v[i].st;
    return '?';
}

static void test_states_from_status(void **state)
{
    (void)state;
    rebuild_life_t l = {0};
    int64_t id = orderid_make(T0, 1, 0);
    for (int s = 0; s <= 6; s++)
        rebuild_life_add(&l, id + s, 1000 + s, s, T0 + 1, 900);
    assert_int_equal(state_of(&l, id + 0), 0);    /* a stream order SQL lacks: unpaid */
    assert_int_equal(state_of(&l, id + 1), 0);
    assert_int_equal(state_of(&l, id + 2), 'p');
    assert_int_equal(state_of(&l, id + 3), 'p');
    assert_int_equal(state_of(&l, id + 4), 'c');   /* updated 1 s after: the buyer's */
    assert_int_equal(state_of(&l, id + 5), 'r');
    assert_int_equal(state_of(&l, id + 6), 'r');
    rebuild_life_free(&l);
}

static void test_timeout_or_cancel(void **state)
{
    (void)state;
    rebuild_life_t l = {0};
    int64_t a = orderid_make(T0, 1, 1), b = orderid_make(T0, 1, 2), c = orderid_make(T0, 1, 3);
    rebuild_life_add(&l, a, 1, 4, T0 + 899, 900);   /* before the deadline: cancelled */
    rebuild_life_add(&l, b, 2, 4, T0 + 900, 900);   /* at it: timed out */
    rebuild_life_add(&l, c, 3, 4, T0 + 5000, 0);    /* no timeout known: cancelled */
    assert_int_equal(state_of(&l, a), 'c');
    assert_int_equal(state_of(&l, b), 't');
    assert_int_equal(state_of(&l, c), 'c');
    /* an id that is not an order id's layout (seeded data): never a timeout */
    rebuild_life_add(&l, 7, 4, 4, T0, 900);
    assert_int_equal(state_of(&l, 7), 'c');
    rebuild_life_free(&l);
}

static void test_counts_per_home_bucket(void **state)
{
    (void)state;
    rebuild_life_t l = {0};
    int k = 3, st[] = {1, 2, 4, 6, 4, 3};
    int64_t id = orderid_make(T0, 2, 0), tot_ret = 0, tot_paid = 0, tot_to = 0;
    for (int i = 0; i < 6; i++)
        rebuild_life_add(&l, id + i, 5000 + i, st[i], i == 4 ? T0 + 1000 : T0, 900);
    for (int b = 0; b < k; b++) {
        rebuild_life_counts_t c;
        rebuild_life_count(&l, b, k, &c);
        int64_t want_ret = 0, want_paid = 0;
        for (int i = 0; i < 6; i++)
            if (buckets_home(5000 + i, k) == b) {
                want_ret += st[i] >= 4;
                want_paid += st[i] == 2 || st[i] == 3;
            }
        assert_int_equal(c.returned, want_ret);
        assert_int_equal(c.paid, want_paid);
        tot_ret += c.returned;
        tot_paid += c.paid;
        tot_to += c.timedout;
    }
    assert_int_equal(tot_ret, 3);    /* 4 (c), 6 (r), 4 (t) */
    assert_int_equal(tot_paid, 2);
    assert_int_equal(tot_to, 1);
    rebuild_life_free(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states_from_status),
        cmocka_unit_test(test_timeout_or_cancel),
        cmocka_unit_test(test_counts_per_home_bucket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
