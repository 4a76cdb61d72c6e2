/* bench_timeline.c -- the per-request log of `seckill bench` cut into time slots and
 * phases (bench_timeline.h). */
#include "cmd/bench_timeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/xmem.h"

static int cmp_due(const void *a, const void *b)
{
    const bench_rec_t *x = a, *y = b;
    return x->due_us < y->due_us ? -1 : x->due_us > y->due_us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The value at percentile p of v[0..n) (sorted here): rank ceil(p/100 * n), at least 1. */
static uint32_t pct(uint32_t *v, size_t n, int sorted, double p)
{
    if (n == 0)
        return 0;
    if (!sorted)
        qsort(v, n, sizeof *v, cmp_u32);
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

static inline uint32_t lat(const bench_rec_t *r)
{
    return r->done_us > r->due_us ? r->done_us - r->due_us : 0;
}

static inline uint32_t from_send(const bench_rec_t *r)
{
    return r->done_us > r->send_us ? r->done_us - r->send_us : 0;
}

static inline uint32_t late(const bench_rec_t *r)
{
    return r->send_us > r->due_us ? r->send_us - r->due_us : 0;
}

/* Percentiles of recs[0..n) into the given fields; scratch holds n values. */
static void summarise(const bench_rec_t *r, size_t n, uint32_t *scratch, uint32_t *p50,
                      uint32_t *p99, uint32_t *max, uint32_t *send_p99, uint32_t *late_p99)
{
    for (size_t i = 0; i < n; i++)
        scratch[i] = lat(&r[i]);
    *p50 = pct(scratch, n, 0, 50);
    *p99 = pct(scratch, n, 1, 99);
    *max = n ? scratch[n - 1] : 0;
    for (size_t i = 0; i < n; i++)
        scratch[i] = from_send(&r[i]);
    *send_p99 = pct(scratch, n, 0, 99);
    for (size_t i = 0; i < n; i++)
        scratch[i] = late(&r[i]);
    *late_p99 = pct(scratch, n, 0, 99);
}

size_t bench_timeline_build(bench_rec_t *recs, size_t n, uint32_t slot_us, bench_slot_t **out)
{
    *out = NULL;
    if (n == 0 || slot_us == 0)
        return 0;
    qsort(recs, n, sizeof *recs, cmp_due);
    uint32_t last = 0;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].done_us > last)
            last = recs[i].done_us;
        if (recs[i].send_us > last)
            last = recs[i].send_us;
    }
    size_t ns = (size_t)(last / slot_us) + 1;
    bench_slot_t *s = xcalloc(ns, sizeof *s);
    for (size_t k = 0; k < ns; k++)
        s[k].t_us = (uint32_t)(k * slot_us);
    /* Counts by each request's own times; due counts double as the backlog's input. */
    for (size_t i = 0; i < n; i++) {
        const bench_rec_t *r = &recs[i];
        s[r->due_us / slot_us].due++;
        s[r->send_us / slot_us].sent++;
        bench_slot_t *d = &s[r->done_us / slot_us];
        d->answered++;
        if (r->outcome == BO_SUCCESS)
            d->success++;
        else if (r->outcome == BO_SOLD_OUT)
            d->sold_out++;
    }
    uint64_t cdue = 0, csent = 0, cdone = 0;
    for (size_t k = 0; k < ns; k++) {
        cdue += s[k].due;
        csent += s[k].sent;
        cdone += s[k].answered;
        s[k].backlog = cdue > csent ? (uint32_t)(cdue - csent) : 0;
        s[k].inflight = csent > cdone ? (uint32_t)(csent - cdone) : 0;
    }
    /* Latency of the requests due in each slot: a run of the sorted log. */
    uint32_t *scratch = xmalloc(n * sizeof *scratch);
    size_t i = 0;
    while (i < n) {
        size_t k = recs[i].due_us / slot_us, j = i;
        while (j < n && recs[j].due_us / slot_us == k)
            j++;
        summarise(recs + i, j - i, scratch, &s[k].p50_us, &s[k].p99_us, &s[k].max_us,
                  &s[k].send_p99_us, &s[k].late_p99_us);
        i = j;
    }
    free(scratch);
    *out = s;
    return ns;
}

/* x = the requests r[lo, hi) (sorted by due time): their count, due span (to_us, or just
 * after the last due time when 0) and percentiles; scratch holds hi - lo values. */
static void fill_phase(bench_phase_t *x, const bench_rec_t *r, size_t lo, size_t hi, uint32_t to_us,
                       uint32_t *scratch)
{
    x->n = hi - lo;
    if (x->n == 0)
        return;
    x->from_us = r[lo].due_us;
    x->to_us = to_us ? to_us : r[hi - 1].due_us + 1;
    summarise(r + lo, x->n, scratch, &x->p50_us, &x->p99_us, &x->max_us, &x->send_p99_us,
              &x->late_p99_us);
}

void bench_timeline_phases(const bench_rec_t *sorted, size_t n, bench_phase_t *selling,
                           bench_phase_t *sold_out)
{
    memset(selling, 0, sizeof *selling);
    memset(sold_out, 0, sizeof *sold_out);
    uint32_t last_sale = 0;
    int any = 0;
    for (size_t i = 0; i < n; i++)
        if (sorted[i].outcome == BO_SUCCESS && (!any || sorted[i].done_us > last_sale)) {
            last_sale = sorted[i].done_us;
            any = 1;
        }
    size_t cut = 0;
    if (any)
        while (cut < n && sorted[cut].due_us < last_sale)
            cut++;
    uint32_t *scratch = xmalloc((n ? n : 1) * sizeof *scratch);
    fill_phase(selling, sorted, 0, cut, last_sale, scratch);
    fill_phase(sold_out, sorted, cut, n, 0, scratch);
    free(scratch);
}

/* 1 if [due, done] of r meets a span of sp (ascending, disjoint) stretched by pad_us. */
static int in_span(const bench_rec_t *r, const bench_span_t *sp, size_t nsp, uint32_t pad_us)
{
    /* the first span that ends (with its pad) at or after the request's due time */
    size_t lo = 0, hi = nsp;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)sp[mid].to_us + pad_us < r->due_us)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nsp && sp[lo].from_us <= r->done_us;
}

void bench_timeline_phases_outside(const bench_rec_t *sorted, size_t n, const bench_span_t *sp,
                                   size_t nsp, uint32_t pad_us, uint32_t cut_us, bench_phase_t *all,
                                   bench_phase_t *selling, bench_phase_t *sold_out)
{
    memset(all, 0, sizeof *all);
    memset(selling, 0, sizeof *selling);
    memset(sold_out, 0, sizeof *sold_out);
    bench_rec_t *keep = xmalloc((n ? n : 1) * sizeof *keep);
    size_t m = 0, cut = 0;
    for (size_t i = 0; i < n; i++) {
        if (in_span(&sorted[i], sp, nsp, pad_us))
            continue;
        keep[m++] = sorted[i];
        if (sorted[i].due_us < cut_us)
            cut = m;
    }
    uint32_t *scratch = xmalloc((m ? m : 1) * sizeof *scratch);
    fill_phase(all, keep, 0, m, 0, scratch);
    fill_phase(selling, keep, 0, cut, 0, scratch);
    fill_phase(sold_out, keep, cut, m, 0, scratch);
    free(scratch);
    free(keep);
}

size_t bench_timeline_worst(const bench_slot_t *s, size_t n, size_t k, size_t *idx)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].due == 0)
            continue;
        /* insertion into the running top-k, worst first; equal p99s keep time order */
        size_t pos = m;
        while (pos > 0 && s[idx[pos - 1]].p99_us < s[i].p99_us)
            pos--;
        if (pos >= k)
            continue;
        size_t end = m < k ? m : k - 1;
        memmove(idx + pos + 1, idx + pos, (end - pos) * sizeof *idx);
        idx[pos] = i;
        if (m < k)
            m++;
    }
    return m;
}

void bench_timeline_write_header(FILE *f)
{
    fputs("t_s\tdue\tp50_ms\tp99_ms\tmax_ms\tsend_p99_ms\tlate_p99_ms\tsent\tanswered"
          "\tsuccess\tsold_out\tbacklog\tinflight", f);
}

void bench_timeline_write_slot(FILE *f, const bench_slot_t *s)
{
    fprintf(f, "%.1f\t%u\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%u\t%u\t%u\t%u\t%u\t%u", s->t_us / 1e6,
            s->due, s->p50_us / 1e3, s->p99_us / 1e3, s->max_us / 1e3, s->send_p99_us / 1e3,
            s->late_p99_us / 1e3, s->sent, s->answered, s->success, s->sold_out, s->backlog,
            s->inflight);
}
