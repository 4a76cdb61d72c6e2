/* bench_cpuprobe.c -- the CPU slowdown probe of `seckill bench` (bench_cpuprobe.h). */
#include "cmd/bench_cpuprobe.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/xmem.h"

#define CALIB_RUNS 300
#define SLOW_MAX (1u << 20)         /* slow runs kept: far more than any sale has */

struct bench_cpuprobe {
    pthread_t tid;
    int running;
    atomic_int stop;
    uint64_t iters;                 /* of the work's loop: ~CPR_WORK_US of CPU */
    uint64_t work_ns;               /* the calibrated work */
    atomic_uint_fast64_t runs;      /* runs measured (written by the thread only) */
    uint64_t *slow_start;           /* the slow runs: start (mono ns) and CPU time */
    uint32_t *slow_cpu;
    size_t nslow, capslow;
    uint64_t cpu_ns;                /* the thread's CPU time, read at its end */
    bench_cpuprobe_span_t *spans;
    size_t nspans;
};

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Register arithmetic only: what it measures is the CPU, not caches or the kernel. The
 * empty asm keeps the compiler from folding the loop. */
static uint64_t work(uint64_t iters)
{
    uint64_t x = 1;
    for (uint64_t i = 0; i < iters; i++) {
        x = x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* CPU time of one run of the work, in ns. */
static uint64_t timed_work(uint64_t iters)
{
    uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    work(iters);
    return clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sizes the work to ~CPR_WORK_US and takes its 10th percentile over CALIB_RUNS runs (a
 * calibration that met a slow spell still finds the machine's usual speed). */
static void calibrate(bench_cpuprobe_t *p)
{
    uint64_t iters = 64, t = 0;
    while ((t = timed_work(iters)) < 5000 && iters < (UINT64_C(1) << 40))
        iters *= 2;
    iters = iters * (CPR_WORK_US * 1000u) / (t ? t : 1);
    if (iters == 0)
        iters = 1;
    uint64_t v[CALIB_RUNS];
    for (int i = 0; i < CALIB_RUNS; i++)
        v[i] = timed_work(iters);
    qsort(v, CALIB_RUNS, sizeof v[0], cmp_u64);
    p->iters = iters;
    p->work_ns = v[CALIB_RUNS / 10] ? v[CALIB_RUNS / 10] : 1;
}

static void *probe_main(void *arg)
{
    bench_cpuprobe_t *p = arg;
    pthread_setname_np(pthread_self(), "cpuprobe");
    uint64_t slow_ns = (uint64_t)((double)p->work_ns * CPR_SLOW_X);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!atomic_load_explicit(&p->stop, memory_order_relaxed)) {
        uint64_t m0 = clock_ns(CLOCK_MONOTONIC);
        uint64_t c = timed_work(p->iters);
        atomic_fetch_add_explicit(&p->runs, 1, memory_order_relaxed);
        if (c >= slow_ns && p->nslow < SLOW_MAX) {
            if (p->nslow == p->capslow) {
                p->capslow = p->capslow ? p->capslow * 2 : 1024;
                p->slow_start = xrealloc(p->slow_start, p->capslow * sizeof *p->slow_start);
                p->slow_cpu = xrealloc(p->slow_cpu, p->capslow * sizeof *p->slow_cpu);
            }
            p->slow_start[p->nslow] = m0;
            p->slow_cpu[p->nslow] = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
            p->nslow++;
        }
        /* A fixed cadence; after a late wake-up the next run follows at once, not a
         * burst of the missed ones. */
        next.tv_nsec += CPR_PERIOD_US * 1000L;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
            next = now;
        else
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    p->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    return NULL;
}

size_t bench_cpuprobe_cut(const uint64_t *start_ns, const uint32_t *cpu_ns, size_t n,
                          uint64_t work_ns, bench_cpuprobe_span_t *out, size_t cap)
{
    uint64_t slow_ns = (uint64_t)((double)work_ns * CPR_SLOW_X);
    double *f = xmalloc((n ? n : 1) * sizeof *f);
    size_t nout = 0, i = 0;
    while (i < n) {
        if (cpu_ns[i] < slow_ns) {
            i++;
            continue;
        }
        /* a group: slow runs each starting within CPR_MERGE_US of the previous one's end */
        size_t j = i, nf = 0;
        uint64_t end = start_ns[i] + cpu_ns[i];
        f[nf++] = (double)cpu_ns[i] / (double)work_ns;
        for (j = i + 1; j < n; j++) {
            if (cpu_ns[j] < slow_ns)
                continue;
            if (start_ns[j] > end + (uint64_t)CPR_MERGE_US * 1000u)
                break;
            end = start_ns[j] + cpu_ns[j];
            f[nf++] = (double)cpu_ns[j] / (double)work_ns;
        }
        if (nf >= CPR_MIN_RUNS && nout < cap) {
            qsort(f, nf, sizeof *f, cmp_dbl);
            out[nout].from_ns = start_ns[i];
            out[nout].to_ns = end;
            out[nout].runs = (uint32_t)nf;
            out[nout].factor = nf % 2 ? f[nf / 2] : (f[nf / 2 - 1] + f[nf / 2]) / 2;
            nout++;
        }
        i = j;
    }
    free(f);
    return nout;
}

bench_cpuprobe_t *bench_cpuprobe_start(void)
{
    bench_cpuprobe_t *p = xcalloc(1, sizeof *p);
    calibrate(p);
    atomic_init(&p->stop, 0);
    atomic_init(&p->runs, 0);
    if (pthread_create(&p->tid, NULL, probe_main, p) != 0) {
        free(p);
        return NULL;
    }
    p->running = 1;
    return p;
}

void bench_cpuprobe_stop(bench_cpuprobe_t *p)
{
    if (!p || !p->running)
        return;
    atomic_store(&p->stop, 1);
    pthread_join(p->tid, NULL);
    p->running = 0;
    free(p->spans);
    p->spans = xmalloc((p->nslow ? p->nslow : 1) * sizeof *p->spans);
    p->nspans = bench_cpuprobe_cut(p->slow_start, p->slow_cpu, p->nslow, p->work_ns, p->spans,
                                   p->nslow ? p->nslow : 1);
}

const bench_cpuprobe_span_t *bench_cpuprobe_spans(const bench_cpuprobe_t *p, size_t *n)
{
    *n = p ? p->nspans : 0;
    return p ? p->spans : NULL;
}

uint64_t bench_cpuprobe_runs(const bench_cpuprobe_t *p)
{
    return p ? atomic_load_explicit(&p->runs, memory_order_relaxed) : 0;
}

uint64_t bench_cpuprobe_work_ns(const bench_cpuprobe_t *p)
{
    return p ? p->work_ns : 0;
}

uint64_t bench_cpuprobe_cpu_ns(const bench_cpuprobe_t *p)
{
    return p ? p->cpu_ns : 0;
}

void bench_cpuprobe_free(bench_cpuprobe_t *p)
{
    if (!p)
        return;
    bench_cpuprobe_stop(p);
    free(p->slow_start);
    free(p->slow_cpu);
    free(p->spans);
    free(p);
}
