/* test_steer.c -- steer.h's rule: a steered worker gives connections to the least loaded
 * open worker only beyond its margin, half the difference; one client thread's burst
 * ends split nearly evenly; connections from every CPU stay where they are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "http/steer.h"

static void test_margin_and_pick(void **state)
{
    (void)state;
    unsigned char open[3] = {1, 1, 1};
    int load[3] = {2, 0, 0};
    assert_int_equal(steer_margin(2, 0), 2);
    assert_int_equal(steer_pick(load, open, 3, 0), 0);      /* 2 over: within the margin */
    load[0] = 3;
    assert_int_equal(steer_pick(load, open, 3, 0), 1);      /* 3 over: to the first least */
    load[1] = 1;
    assert_int_equal(steer_pick(load, open, 3, 0), 2);      /* the least loaded one */
    assert_int_equal(steer_pick(load, open, 3, 2), 2);      /* the least never gives */
    open[2] = 0;
    assert_int_equal(steer_pick(load, open, 3, 0), 0);      /* w1 is 2 under: within it */
    open[1] = 0;
    assert_int_equal(steer_pick(load, open, 3, 0), 0);      /* nobody open */
    int big[2] = {40, 20};                                   /* margin 2 + 60/16 = 5 */
    unsigned char o2[2] = {1, 1};
    assert_int_equal(steer_margin(40, 20), 5);
    assert_int_equal(steer_pick(big, o2, 2, 0), 1);
    assert_int_equal(steer_moves(40, 20), 10);
    assert_int_equal(steer_moves(20, 40), 0);
    int near[2] = {24, 20};
    assert_int_equal(steer_pick(near, o2, 2, 0), 0);        /* 4 over at 44: margin 4 */
    assert_true(steer_may_follow(10, 7));                   /* 8 against 9 after */
    assert_true(steer_may_follow(10, 8));                   /* 9 against 9 */
    assert_false(steer_may_follow(10, 9));                  /* 10 against 9: no */
    assert_false(steer_may_follow(8, 8));
    assert_false(steer_may_follow(1, 0));                   /* 0 against 1 */
    int one_worker[1] = {100};
    assert_int_equal(steer_pick(one_worker, o2, 1, 0), 0);
}

/* n connections arrive at worker 0 (all from its CPU); after each, worker 0 applies the
 * rule as http.c does: returns worker 0's final share. */
static int burst(int n, int *w0, int *w1)
{
    int load[2] = {0, 0};
    unsigned char open[2] = {1, 1};
    for (int i = 0; i < n; i++) {
        load[0]++;
        if (steer_pick(load, open, 2, 0) == 1) {
            int k = steer_moves(load[0], load[1]);
            load[0] -= k;
            load[1] += k;
        }
    }
    *w0 = load[0];
    *w1 = load[1];
    return load[0] - load[1];
}

static void test_one_cpu_burst_ends_even(void **state)
{
    (void)state;
    for (int n = 1; n <= 1000; n++) {
        int w0, w1;
        int d = burst(n, &w0, &w1);
        assert_int_equal(w0 + w1, n);
        assert_true(d >= 0);
        assert_true(d <= steer_margin(w0, w1));              /* never more than the margin */
    }
}

/* steer_take: exactly k of m, spread: with k <= m / 2 no two neighbours (in accept order,
 * a round-robin client's consecutive requests) go together, and each half of the list
 * gives about half. Taking the first k (the old rule) fails the last two. */
static void test_take_spreads(void **state)
{
    (void)state;
    const int ms[] = {1, 2, 7, 16, 64, 247, 256};
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++) {
        int m = ms[a];
        for (int k = -1; k <= m + 1; k++) {
            int taken = 0, first_half = 0, prev = 0, adjacent = 0;
            for (int i = 0; i < m; i++) {
                int t = steer_take(i, m, k);
                assert_true(t == 0 || t == 1);
                taken += t;
                first_half += t && i < m / 2;
                adjacent += t && prev;
                prev = t;
            }
            assert_int_equal(taken, k < 0 ? 0 : k > m ? m : k);
            if (k > 0 && k <= m / 2)
                assert_int_equal(adjacent, 0);
            if (k > 0 && k < m) {
                int want = k * (m / 2) / m;
                assert_true(first_half >= want - 1 && first_half <= want + 1);
            }
        }
    }
    assert_int_equal(steer_take(5, 5, 3), 0);     /* out of range */
    assert_int_equal(steer_take(-1, 5, 3), 0);
}

static void test_even_spread_stays(void **state)
{
    (void)state;
    /* Connections from both CPUs, alternating: never anything to move. */
    int load[2] = {0, 0};
    unsigned char open[2] = {1, 1};
    for (int i = 0; i < 1000; i++) {
        int w = i % 2;
        load[w]++;
        assert_int_equal(steer_pick(load, open, 2, w), w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_margin_and_pick),
        cmocka_unit_test(test_one_cpu_burst_ends_even),
        cmocka_unit_test(test_even_spread_stays),
        cmocka_unit_test(test_take_spreads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
