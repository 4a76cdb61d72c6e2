/* test_bench_hist.c -- the bench's latency histogram (bench_hist.c): bucket arithmetic,
 * percentiles against exact answers, merge, and the edges (0, huge values, empty). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/bench_hist.h"

/* Every value lands in a bucket whose [low, high] contains it, buckets are contiguous and
 * ordered, and a bucket is at most 1/128 of its values wide. */
static void test_buckets(void **state)
{
    (void)state;
    for (size_t i = 0; i + 1 < HIST_BUCKETS; i++) {
        assert_true(bench_hist_bucket_low(i) <= bench_hist_bucket_high(i));
        assert_int_equal(bench_hist_bucket_high(i) + 1, bench_hist_bucket_low(i + 1));
        uint64_t lo = bench_hist_bucket_low(i), hi = bench_hist_bucket_high(i);
        if (lo >= 256)
            assert_true((hi - lo + 1) * 128 <= lo);
    }
    assert_int_equal(bench_hist_bucket_high(HIST_BUCKETS - 1), UINT64_MAX);
    uint64_t probes[] = {0, 1, 255, 256, 257, 511, 512, 1000, 1023, 1024, 123456789,
                         (1ull << 40) + 12345, UINT64_MAX - 1, UINT64_MAX};
    for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
        size_t i = bench_hist_index(probes[k]);
        assert_true(i < HIST_BUCKETS);
        assert_true(bench_hist_bucket_low(i) <= probes[k]);
        assert_true(probes[k] <= bench_hist_bucket_high(i));
    }
    /* exact below 256 */
    for (uint64_t v = 0; v < 256; v++)
        assert_int_equal(bench_hist_index(v), v);
}

static uint64_t exact_percentile(uint64_t *v, size_t n, double p)
{
    uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    return v[rank - 1];
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Against a sorted copy: the reported value is never below the truth and at most one
 * bucket (0.78 %) above it. */
static void test_percentiles(void **state)
{
    (void)state;
    enum { N = 100000 };
    uint64_t *v = malloc(N * sizeof *v);
    assert_non_null(v);
    bench_hist_t *h = bench_hist_new();
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < N; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* a long-tailed mix: mostly ~500 us, some ms, a few hundred ms */
        uint64_t r = x % 1000;
        v[i] = r < 900 ? 300 + x % 400 : r < 995 ? 2000 + x % 8000 : 100000 + x % 300000;
        bench_hist_record(h, v[i]);
    }
    qsort(v, N, sizeof *v, cmp_u64);
    double ps[] = {0.1, 1, 10, 50, 90, 99, 99.5, 99.9, 99.99};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        uint64_t want = exact_percentile(v, N, ps[k]);
        uint64_t got = bench_hist_percentile(h, ps[k]);
        assert_true(got >= want);
        assert_true((double)got <= (double)want * (1.0 + 1.0 / 128) + 1);
    }
    assert_int_equal(bench_hist_percentile(h, 100), v[N - 1]);
    assert_int_equal(bench_hist_percentile(h, 0), v[0]);
    assert_int_equal(h->count, N);
    assert_int_equal(h->min, v[0]);
    assert_int_equal(h->max, v[N - 1]);
    free(v);
    bench_hist_free(h);
}

static void test_small_and_empty(void **state)
{
    (void)state;
    bench_hist_t *h = bench_hist_new();
    assert_int_equal(bench_hist_percentile(h, 50), 0);
    assert_true(bench_hist_mean(h) == 0.0);
    for (uint64_t i = 1; i <= 100; i++)
        bench_hist_record(h, i);
    assert_int_equal(bench_hist_percentile(h, 50), 50);
    assert_int_equal(bench_hist_percentile(h, 99), 99);
    assert_int_equal(bench_hist_percentile(h, 99.9), 100);
    assert_int_equal(bench_hist_percentile(h, 1), 1);
    assert_true(fabs(bench_hist_mean(h) - 50.5) < 1e-9);
    /* one huge value: p100 is exactly it, p50 unaffected */
    bench_hist_record(h, 5000000000ull);
    assert_int_equal(bench_hist_percentile(h, 100), 5000000000ull);
    assert_int_equal(bench_hist_percentile(h, 50), 51);
    bench_hist_reset(h);
    assert_int_equal(h->count, 0);
    bench_hist_record(h, 0);
    assert_int_equal(bench_hist_percentile(h, 99), 0);
    bench_hist_free(h);
}

static void test_merge(void **state)
{
    (void)state;
    bench_hist_t *a = bench_hist_new(), *b = bench_hist_new(), *all = bench_hist_new();
    for (uint64_t i = 0; i < 5000; i++) {
        uint64_t v = (i * 7919) % 20000;
        bench_hist_record(i % 2 ? a : b, v);
        bench_hist_record(all, v);
    }
    bench_hist_t *m = bench_hist_new();
    bench_hist_merge(m, a);
    bench_hist_merge(m, b);
    bench_hist_t *empty = bench_hist_new();
    bench_hist_merge(m, empty); /* an empty histogram changes nothing */
    bench_hist_free(empty);
    assert_int_equal(m->count, all->count);
    assert_int_equal(m->min, all->min);
    assert_int_equal(m->max, all->max);
    assert_memory_equal(m->b, all->b, sizeof m->b);
    for (double p = 1; p < 100; p += 7)
        assert_int_equal(bench_hist_percentile(m, p), bench_hist_percentile(all, p));
    bench_hist_record_n(m, 42, 3);
    assert_int_equal(m->count, all->count + 3);
    bench_hist_free(a);
    bench_hist_free(b);
    bench_hist_free(all);
    bench_hist_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_percentiles),
        cmocka_unit_test(test_small_and_empty),
        cmocka_unit_test(test_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
