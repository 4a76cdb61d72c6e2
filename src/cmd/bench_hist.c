/* bench_hist.c -- log-linear latency histogram (bench_hist.h).
 *
 * Layout of the bucket array:
 *   [0, 256)                     one bucket per value 0..255
 *   then for each msb m = 8..63  128 buckets of width 2^(m-7) covering [2^m, 2^(m+1))
 * so the index of v with msb m >= 8 is 256 + (m - 8) * 128 + ((v >> (m - 7)) - 128). */
#include "cmd/bench_hist.h"
#include "core/xmem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUB (1u << HIST_SUB_BITS)

bench_hist_t *bench_hist_new(void)
{
    bench_hist_t *h = xcalloc(1, sizeof *h);
    h->min = UINT64_MAX;
    return h;
}

void bench_hist_free(bench_hist_t *h)
{
    free(h);
}

void bench_hist_reset(bench_hist_t *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

size_t bench_hist_index(uint64_t v)
{
    if (v < HIST_LINEAR)
        return (size_t)v;
    unsigned m = 63u - (unsigned)__builtin_clzll(v);          /* >= HIST_SUB_BITS + 1 */
    unsigned shift = m - HIST_SUB_BITS;
    return HIST_LINEAR + (size_t)(m - HIST_SUB_BITS - 1) * SUB + (size_t)((v >> shift) - SUB);
}

uint64_t bench_hist_bucket_low(size_t i)
{
    if (i < HIST_LINEAR)
        return i;
    size_t g = (i - HIST_LINEAR) / SUB;                       /* m = g + SUB_BITS + 1 */
    size_t k = (i - HIST_LINEAR) % SUB;
    unsigned shift = (unsigned)g + 1;
    return ((uint64_t)SUB + k) << shift;
}

uint64_t bench_hist_bucket_high(size_t i)
{
    if (i < HIST_LINEAR)
        return i;
    if (i + 1 >= HIST_BUCKETS)
        return UINT64_MAX;
    return bench_hist_bucket_low(i + 1) - 1;
}

void bench_hist_record_n(bench_hist_t *h, uint64_t v, uint64_t n)
{
    if (n == 0)
        return;
    h->b[bench_hist_index(v)] += n;
    h->count += n;
    h->sum += (long double)v * (long double)n;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

void bench_hist_record(bench_hist_t *h, uint64_t v)
{
    h->b[bench_hist_index(v)]++;
    h->count++;
    h->sum += (long double)v;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

void bench_hist_merge(bench_hist_t *into, const bench_hist_t *from)
{
    if (from->count == 0)
        return;
    for (size_t i = 0; i < HIST_BUCKETS; i++)
        into->b[i] += from->b[i];
    into->count += from->count;
    into->sum += from->sum;
    if (from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t bench_hist_percentile(const bench_hist_t *h, double p)
{
    if (h->count == 0)
        return 0;
    if (p <= 0)
        return h->min;
    if (p >= 100)
        return h->max;
    uint64_t rank = (uint64_t)ceill((long double)p / 100.0L * (long double)h->count);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (size_t i = bench_hist_index(h->min); i < HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t v = bench_hist_bucket_high(i);
            return v > h->max ? h->max : v;
        }
    }
    return h->max;
}

double bench_hist_mean(const bench_hist_t *h)
{
    return h->count ? (double)(h->sum / (long double)h->count) : 0.0;
}
