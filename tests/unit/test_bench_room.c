/* test_bench_room.c -- the offline parts of `seckill bench --waiting-room` (bench_room.h):
 * Spearman's rank correlation (exact values, ties, degenerate input), the buyers' plan
 * (early joiners before beginTime, late ones after it, the class shares, determinism),
 * the JSON member readers, when a buyer holding a pass orders (at the pass's start: the
 * admission the fairness figures rank) and the options. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cmd/bench.h"
#include "cmd/bench_room.h"

static void test_spearman(void **state)
{
    (void)state;
    double x[] = {1, 2, 3, 4, 5}, up[] = {10, 20, 30, 40, 50}, down[] = {5, 4, 3, 2, 1};
    assert_true(fabs(bench_room_spearman(x, up, 5) - 1) < 1e-12);
    assert_true(fabs(bench_room_spearman(x, down, 5) + 1) < 1e-12);
    /* a monotone but not linear relation is still 1 */
    double sq[] = {1, 4, 9, 16, 1000};
    assert_true(fabs(bench_room_spearman(x, sq, 5) - 1) < 1e-12);
    /* textbook: ranks d = (0, -1, 1, 0, 0) -> 1 - 6 * 2 / (5 * 24) = 0.9 */
    double y[] = {1, 3, 2, 4, 5};
    assert_true(fabs(bench_room_spearman(x, y, 5) - 0.9) < 1e-12);
    /* ties get the average rank: y's ranks (1.5, 1.5, 3, 4) */
    double a[] = {1, 2, 3, 4}, t[] = {7, 7, 8, 9};
    double want = 0.9486832980505138;   /* Pearson of (1,2,3,4) and (1.5,1.5,3,4) */
    assert_true(fabs(bench_room_spearman(a, t, 4) - want) < 1e-12);
    /* degenerate: too few, constant */
    assert_true(bench_room_spearman(x, up, 1) == 0);
    double c[] = {3, 3, 3, 3, 3};
    assert_true(bench_room_spearman(x, c, 5) == 0);
    /* independent shuffles: near 0 */
    size_t n = 20000;
    double *p = malloc(n * sizeof *p), *q = malloc(n * sizeof *q);
    srand(7);
    for (size_t i = 0; i < n; i++) {
        p[i] = (double)i;
        q[i] = (double)rand();
    }
    assert_true(fabs(bench_room_spearman(p, q, n)) < 0.03);
    free(p);
    free(q);
}

static void test_plan(void **state)
{
    (void)state;
    const uint32_t n = 100000;
    const int64_t begin = 30000;
    size_t early = 0, slow = 0, early_slow = 0;
    for (uint32_t i = 0; i < n; i++) {
        bench_room_plan_t p, again;
        bench_room_plan(42, i, 0.3, 0.5, begin, 10000, &p);
        bench_room_plan(42, i, 0.3, 0.5, begin, 10000, &again);
        assert_memory_equal(&p, &again, sizeof p);   /* from (seed, buyer) alone */
        if (p.early) {
            early++;
            early_slow += (size_t)p.slow;
            assert_true(p.join_ms < begin);
        } else {
            assert_true(p.join_ms >= begin && p.join_ms <= begin + 10000);
        }
        slow += (size_t)p.slow;
    }
    assert_true(fabs((double)early / n - 0.3) < 0.01);
    assert_true(fabs((double)slow / n - 0.5) < 0.01);
    /* class and timing are independent: half of the early ones are slow */
    assert_true(fabs((double)early_slow / (double)early - 0.5) < 0.02);
    /* a sale already open: nobody is early, all join within the late span */
    bench_room_plan_t p;
    for (uint32_t i = 0; i < 1000; i++) {
        bench_room_plan(1, i, 1.0, 0, 0, 5000, &p);
        assert_false(p.early);
        assert_false(p.slow);
        assert_true(p.join_ms <= 5000);
    }
    /* another seed, another plan */
    bench_room_plan_t a, b;
    int differ = 0;
    for (uint32_t i = 0; i < 100; i++) {
        bench_room_plan(1, i, 0.5, 0.5, begin, 10000, &a);
        bench_room_plan(2, i, 0.5, 0.5, begin, 10000, &b);
        differ += a.join_ms != b.join_ms;
    }
    assert_true(differ > 90);
}

static void test_json_members(void **state)
{
    (void)state;
    const char *body = "{\"success\":true,\"data\":{\"state\":\"admitted\",\"position\":12,"
                       "\"waitS\":0.5,\"pollAfterMs\":1500,\"pass\":\"p1.abc\","
                       "\"passExpiresAt\":1765000000123}}";
    double v;
    char s[64];
    assert_true(bench_room_jnum(body, "position", &v) && v == 12);
    assert_true(bench_room_jnum(body, "waitS", &v) && v == 0.5);
    assert_true(bench_room_jnum(body, "passExpiresAt", &v) && v == 1765000000123.0);
    assert_true(bench_room_jstr(body, "state", s, sizeof s));
    assert_string_equal(s, "admitted");
    assert_true(bench_room_jstr(body, "pass", s, sizeof s));
    assert_string_equal(s, "p1.abc");
    assert_false(bench_room_jstr(body, "pass", s, 4));          /* too small: not cut short */
    assert_false(bench_room_jnum(body, "missing", &v));
    assert_false(bench_room_jstr(body, "position", s, sizeof s)); /* not a string */
    assert_false(bench_room_jnum(body, "state", &v));           /* not a number */
}

static void test_pass_start_and_buy_time(void **state)
{
    (void)state;
    int64_t from = 0;
    /* waiting with a pass valid from its place's due moment: admitted then, orders then */
    const char *future = "{\"success\":true,\"data\":{\"state\":\"waiting\",\"position\":3,"
                         "\"waitS\":2,\"pollAfterMs\":1550,\"pass\":\"1.2.3.4.ab\","
                         "\"passFrom\":1765000001500,\"passExpiresAt\":1765000061500}}";
    assert_int_equal(bench_room_pass_from(future, 60, &from), 1);
    assert_true(from == 1765000001500);
    assert_int_equal(bench_room_buy_delay(from, 1765000000000), 1500);
    assert_int_equal(bench_room_buy_delay(from, 1765000001499), 1);
    assert_int_equal(bench_room_buy_delay(from, 1765000001500), 0);
    assert_int_equal(bench_room_buy_delay(from, 1765000009000), 0);
    /* admitted: passFrom is the issue; an answer without it counts back from the expiry */
    const char *now = "{\"data\":{\"state\":\"admitted\",\"pass\":\"x\","
                      "\"passFrom\":1765000000100,\"passExpiresAt\":1765000060100}}";
    assert_int_equal(bench_room_pass_from(now, 60, &from), 1);
    assert_true(from == 1765000000100);
    const char *old = "{\"data\":{\"state\":\"admitted\",\"pass\":\"x\","
                      "\"passExpiresAt\":1765000030000}}";
    assert_int_equal(bench_room_pass_from(old, 30, &from), 1);
    assert_true(from == 1765000000000);
    /* no pass: waiting without one, sold out, not queued */
    assert_int_equal(bench_room_pass_from("{\"data\":{\"state\":\"waiting\",\"position\":9,"
                                          "\"pollAfterMs\":5000}}", 60, &from), 0);
    assert_int_equal(bench_room_pass_from("{\"data\":{\"state\":\"soldOut\"}}", 60, &from), 0);
    assert_int_equal(bench_room_pass_from("{\"data\":{\"state\":\"notQueued\",\"pass\":\"x\","
                                          "\"passFrom\":5}}", 60, &from), 0);
}

static void test_options(void **state)
{
    (void)state;
    bench_opts_t o;
    char err[256];
    char *def[] = {"bench"};
    assert_int_equal(bench_parse_args(1, def, &o, err, sizeof err), 0);
    assert_int_equal(o.room, 0);
    assert_int_equal(o.room_rate, 1000);
    assert_int_equal(o.room_pass_ttl_s, 60);
    assert_int_equal(o.room_slow_ms, 200);
    char *argv[] = {"bench", "--waiting-room", "--room-rate", "250", "--room-pass-ttl", "30",
                    "--room-bot-gate", "--room-early", "0.7", "--room-slow", "0.25",
                    "--room-slow-ms", "80", "--room-late", "20"};
    assert_int_equal(bench_parse_args((int)(sizeof argv / sizeof argv[0]), argv, &o, err, sizeof err), 0);
    assert_int_equal(o.room, 1);
    assert_int_equal(o.room_rate, 250);
    assert_int_equal(o.room_pass_ttl_s, 30);
    assert_int_equal(o.room_bot_gate, 1);
    assert_true(o.room_early == 0.7 && o.room_slow == 0.25);
    assert_int_equal(o.room_slow_ms, 80);
    assert_int_equal(o.room_late_s, 20);
    char *bad1[] = {"bench", "--room-rate", "0"};
    assert_int_equal(bench_parse_args(3, bad1, &o, err, sizeof err), -1);
    char *bad2[] = {"bench", "--room-early", "1.5"};
    assert_int_equal(bench_parse_args(3, bad2, &o, err, sizeof err), -1);
    char *bad3[] = {"bench", "--room-pass-ttl", "4"};
    assert_int_equal(bench_parse_args(3, bad3, &o, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spearman),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_json_members),
        cmocka_unit_test(test_pass_start_and_buy_time),
        cmocka_unit_test(test_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
