/* test_bench_timeline.c -- the bench's timeline (bench_timeline.c): slots, backlog and
 * in-flight counts, exact percentiles, the selling / sold-out cut, the worst slots, the
 * percentiles outside the CPU's slow spells; and how the CPU probe (bench_cpuprobe.c)
 * cuts its slow runs into spells. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/bench.h"
#include "cmd/bench_cpuprobe.h"
#include "cmd/bench_timeline.h"

static bench_rec_t rec(uint32_t due, uint32_t send, uint32_t done, int o)
{
    bench_rec_t r = {due, send, done, (uint8_t)o};
    return r;
}

/* Three slots of 100 ms: counts by due, send and answer time; the backlog and in-flight
 * figures at each slot's end; latency percentiles of the requests due in a slot. */
static void test_slots(void **state)
{
    (void)state;
    bench_rec_t r[] = {
        rec(250000, 250000, 251000, BO_SOLD_OUT),   /* out of order: bench_timeline_build sorts */
        rec(10000, 10000, 11000, BO_SUCCESS),
        rec(20000, 20000, 60000, BO_SUCCESS),
        rec(30000, 150000, 160000, BO_SUCCESS),     /* sent 120 ms late, answered in slot 1 */
        rec(40000, 40000, 290000, BO_SOLD_OUT),     /* in flight until slot 2 */
    };
    bench_slot_t *s = NULL;
    size_t n = bench_timeline_build(r, 5, 100000, &s);
    assert_int_equal(n, 3);
    assert_int_equal(r[0].due_us, 10000);
    assert_int_equal(s[0].due, 4);
    assert_int_equal(s[0].sent, 3);
    assert_int_equal(s[0].answered, 2);
    assert_int_equal(s[0].success, 2);
    assert_int_equal(s[0].backlog, 1);               /* due at 30 ms, sent at 150 ms */
    assert_int_equal(s[0].inflight, 1);              /* sent at 40 ms, answered at 290 ms */
    assert_int_equal(s[1].due, 0);
    assert_int_equal(s[1].sent, 1);
    assert_int_equal(s[1].answered, 1);
    assert_int_equal(s[1].backlog, 0);
    assert_int_equal(s[1].inflight, 1);
    assert_int_equal(s[2].answered, 2);
    assert_int_equal(s[2].sold_out, 2);
    assert_int_equal(s[2].inflight, 0);
    /* slot 0: latencies 1, 40, 130, 250 ms -> p50 is the 2nd, p99 and max the 4th */
    assert_int_equal(s[0].p50_us, 40000);
    assert_int_equal(s[0].p99_us, 250000);
    assert_int_equal(s[0].max_us, 250000);
    assert_int_equal(s[0].late_p99_us, 120000);
    assert_int_equal(s[0].send_p99_us, 250000);
    assert_int_equal(s[2].p99_us, 1000);
    free(s);
    assert_int_equal(bench_timeline_build(r, 0, 100000, &s), 0);
    assert_null(s);
}

/* Selling = due before the last success answer arrived; percentiles per phase. */
static void test_phases(void **state)
{
    (void)state;
    enum { N = 1000 };
    bench_rec_t *r = calloc(N, sizeof *r);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t due = i * 1000;                      /* one a millisecond */
        int sell = i < 100;
        uint32_t l = sell ? 5000 + i * 10 : 100;      /* grabs slow, verdicts fast */
        r[i] = rec(due, due, due + l, sell ? BO_SUCCESS : BO_SOLD_OUT);
    }
    bench_slot_t *s = NULL;
    bench_timeline_build(r, N, 100000, &s);
    bench_phase_t a, b;
    bench_timeline_phases(r, N, &a, &b);
    /* the last success (i = 99) answered at 99 ms + 5.99 ms: due times up to 104 ms sell */
    assert_int_equal(a.to_us, 99000 + 5990);
    assert_int_equal(a.n, 105);
    assert_int_equal(b.n, N - 105);
    assert_int_equal(a.from_us, 0);
    assert_int_equal(b.from_us, 105000);
    assert_int_equal(a.max_us, 5990);
    assert_int_equal(a.p99_us, 5980);                 /* rank ceil(0.99 * 105) = 104 of 105 */
    assert_int_equal(b.p99_us, 100);
    assert_int_equal(b.late_p99_us, 0);
    /* no success at all: everything is sold out */
    for (int i = 0; i < N; i++)
        r[i].outcome = BO_SOLD_OUT;
    bench_timeline_phases(r, N, &a, &b);
    assert_int_equal(a.n, 0);
    assert_int_equal(b.n, N);
    free(s);
    free(r);
}

static void test_worst(void **state)
{
    (void)state;
    bench_slot_t s[6];
    memset(s, 0, sizeof s);
    uint32_t p99[6] = {5, 50, 7, 50, 90, 1};
    for (int i = 0; i < 6; i++) {
        s[i].due = 1;
        s[i].p99_us = p99[i];
    }
    s[5].due = 0;   /* nothing due: never among the worst */
    s[5].p99_us = 1000;
    size_t idx[3];
    assert_int_equal(bench_timeline_worst(s, 6, 3, idx), 3);
    assert_int_equal(idx[0], 4);
    assert_int_equal(idx[1], 1);                      /* equal p99s: the earlier first */
    assert_int_equal(idx[2], 3);
    assert_int_equal(bench_timeline_worst(s, 2, 3, idx), 2);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 0);
}

/* Requests whose life meets a spell (or starts within pad after it) are left out; the
 * phase cut stays where it was given. */
static void test_outside(void **state)
{
    (void)state;
    enum { N = 1000 };
    bench_rec_t *r = calloc(N, sizeof *r);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t due = i * 1000;                      /* one a millisecond, 1 ms each */
        r[i] = rec(due, due, due + 1000, i < 100 ? BO_SUCCESS : BO_SOLD_OUT);
    }
    /* a stall: the requests due at 500..519 ms answered 30 ms late */
    for (uint32_t i = 500; i < 520; i++)
        r[i].done_us += 30000;
    /* one slow spell at 505-510 ms, 10 ms of pad: due 504 (answered 535) meets it, so
     * does every request up to due 520 (pad end); 521 on is outside */
    bench_span_t sp[] = {{100000000, 100000001}};
    bench_span_t spells[] = {{505000, 510000}, {900000000, 900000001}};
    bench_phase_t all, a, b;
    bench_timeline_phases_outside(r, N, spells, 2, 10000, 100000, &all, &a, &b);
    assert_int_equal(all.n, N - 21);                  /* due 500 .. 520 */
    assert_int_equal(a.n, 100);                       /* due 0 .. 99 ms: selling */
    assert_int_equal(b.n, N - 100 - 21);
    assert_int_equal(all.max_us, 1000);               /* every stalled request left out */
    assert_int_equal(b.p99_us, 1000);
    /* nothing to leave out: the same as over every request */
    bench_timeline_phases_outside(r, N, sp, 0, 10000, 100000, &all, &a, &b);
    assert_int_equal(all.n, N);
    assert_int_equal(all.max_us, 31000);
    assert_int_equal(b.n, N - 100);
    /* a spell before every request's due time but whose pad reaches into the first ones */
    bench_span_t early[] = {{0, 1500}};
    bench_timeline_phases_outside(r, N, early, 1, 1000, 100000, &all, &a, &b);
    assert_int_equal(all.n, N - 3);                   /* due 0, 1, 2 ms: 2 ms <= 1.5 + 1 */
    assert_int_equal(a.n, 97);
    free(r);
}

/* Slow runs (>= CPR_SLOW_X the calibrated work) within CPR_MERGE_US of each other join
 * into a spell; fewer than CPR_MIN_RUNS are noise; the spell's factor is their median. */
static void test_probe_cut(void **state)
{
    (void)state;
    const uint64_t ms = 1000000, work = 20000;        /* 20 us of work */
    uint64_t t[] = {0, 1 * ms, 2 * ms, 3 * ms, 4 * ms,       /* fast, then 3 slow runs */
                    100 * ms, 101 * ms,                      /* two slow: noise */
                    200 * ms, 220 * ms, 249 * ms, 400 * ms}; /* 3 slow within 30 ms; then fast */
    uint32_t c[] = {20000, 70000, 200000, 100000, 21000,
                    90000, 90000,
                    60000, 60000, 100000, 25000};
    size_t n = sizeof t / sizeof t[0];
    bench_cpuprobe_span_t sp[8];
    size_t k = bench_cpuprobe_cut(t, c, n, work, sp, 8);
    assert_int_equal(k, 2);
    assert_int_equal(sp[0].from_ns, 1 * ms);
    assert_int_equal(sp[0].to_ns, 3 * ms + 100000);
    assert_int_equal(sp[0].runs, 3);
    assert_true(sp[0].factor > 4.99 && sp[0].factor < 5.01);     /* 3.5, 10, 5 -> 5 */
    assert_int_equal(sp[1].from_ns, 200 * ms);
    assert_int_equal(sp[1].to_ns, 249 * ms + 100000);
    assert_int_equal(sp[1].runs, 3);
    assert_true(sp[1].factor > 2.99 && sp[1].factor < 3.01);
    /* the cap is honoured, and nothing slow gives nothing */
    assert_int_equal(bench_cpuprobe_cut(t, c, n, work, sp, 1), 1);
    assert_int_equal(bench_cpuprobe_cut(t, c, 1, work, sp, 8), 0);
}

/* The probe itself: it starts, measures, stops, and its own CPU is accounted. */
static void test_probe_runs(void **state)
{
    (void)state;
    bench_cpuprobe_t *p = bench_cpuprobe_start();
    assert_non_null(p);
    assert_true(bench_cpuprobe_work_ns(p) > 0);
    struct timespec ms = {0, 1000000};
    while (bench_cpuprobe_runs(p) < 5)
        nanosleep(&ms, NULL);
    bench_cpuprobe_stop(p);
    assert_true(bench_cpuprobe_runs(p) >= 5);
    assert_true(bench_cpuprobe_cpu_ns(p) > 0);
    size_t n;
    (void)bench_cpuprobe_spans(p, &n);
    bench_cpuprobe_free(p);
    bench_cpuprobe_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_phases),
        cmocka_unit_test(test_worst),
        cmocka_unit_test(test_outside),
        cmocka_unit_test(test_probe_cut),
        cmocka_unit_test(test_probe_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
