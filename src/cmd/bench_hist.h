/* bench_hist.h -- a latency histogram with log-linear buckets (HdrHistogram's idea, our
 * own code), for `seckill bench`.
 *
 * Values are unsigned integers (the bench records microseconds). Values below 256 have a
 * bucket each; above, every power of two [2^k, 2^(k+1)) is cut into 128 equal buckets, so
 * a value is known to within 1/128 (0.78 %) of itself. Recording is one array increment,
 * with no allocation after bench_hist_new; the whole uint64 range fits (7,424 buckets, 59 KB).
 *
 * Percentiles report the highest value of the bucket holding the requested rank, capped
 * by the largest value recorded, so p100 is the exact maximum and no percentile is ever
 * reported below the truth by more than the bucket width.
 *
 * A histogram is used by one thread at a time; merge per-thread histograms at the end. */
#ifndef SECKILL_BENCH_HIST_H
#define SECKILL_BENCH_HIST_H

#include <stddef.h>
#include <stdint.h>

#define HIST_SUB_BITS 7                                 /* 128 buckets per power of two */
#define HIST_LINEAR (1u << (HIST_SUB_BITS + 1))          /* 0..255 exact */
#define HIST_BUCKETS (HIST_LINEAR + (64 - HIST_SUB_BITS - 1) * (1u << HIST_SUB_BITS))

typedef struct bench_hist {
    uint64_t count;
    uint64_t min, max;          /* min is UINT64_MAX while empty */
    long double sum;            /* for the mean; long double so 10^9 values stay exact-ish */
    uint64_t b[HIST_BUCKETS];
} bench_hist_t;

bench_hist_t *bench_hist_new(void);    /* zeroed; aborts on out of memory */
void bench_hist_free(bench_hist_t *h); /* NULL is fine */
void bench_hist_reset(bench_hist_t *h);
void bench_hist_record(bench_hist_t *h, uint64_t v);
void bench_hist_record_n(bench_hist_t *h, uint64_t v, uint64_t n);
void bench_hist_merge(bench_hist_t *into, const bench_hist_t *from);

/* Bucket arithmetic (exposed for the unit tests). */
size_t bench_hist_index(uint64_t v);
uint64_t bench_hist_bucket_low(size_t i);  /* smallest value of bucket i */
uint64_t bench_hist_bucket_high(size_t i); /* largest value of bucket i */

/* The value at percentile p (0..100): the smallest bucket whose cumulative count reaches
 * ceil(p/100 * count) (at least 1), reported as that bucket's highest value capped by
 * max. 0 for an empty histogram. */
uint64_t bench_hist_percentile(const bench_hist_t *h, double p);
double bench_hist_mean(const bench_hist_t *h);

#endif
