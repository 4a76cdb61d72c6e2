/* bench_cpuprobe.h -- was the machine's CPU itself slow? A probe thread for `seckill bench`.
 *
 * On a virtual machine the hypervisor may run a vCPU only part of the time without the
 * guest seeing it: no steal is reported, no thread of the guest waits on a run queue,
 * and every program simply gets less done per millisecond. Such a slowdown (seen on the
 * 2-core VM this project is measured on: about every 1.5 s, for ~100 ms, both vCPUs at
 * 5-20 % of their speed, with no process of ours running) makes every request in flight
 * late, whatever the service does, and decides the p99 of a sale at 20,000 req/s.
 *
 * The probe tells it apart from everything inside the machine: a thread that every
 * CPR_PERIOD_US does a fixed piece of arithmetic (no memory traffic, no syscall) and
 * measures it in its own thread CPU time (CLOCK_THREAD_CPUTIME_ID). Preemption by other
 * processes of the guest does not count there (the thread is not running); only a CPU
 * that executes the same instructions more slowly while the guest believes the thread
 * runs does. The work is calibrated at start to ~CPR_WORK_US (its 10th percentile over
 * a few hundred runs); a run that takes CPR_SLOW_X times that is slow. Slow runs closer
 * than CPR_MERGE_US join into one span; a span needs CPR_MIN_RUNS slow runs (a single
 * interrupt is not a slow machine).
 *
 * Cost: ~CPR_WORK_US of CPU per CPR_PERIOD_US (about 0.5 % of one core); its thread
 * ("cpuprobe") shows in the bench's thread list and its CPU time is returned so the
 * bench's CPU per request can leave it out. It runs only when asked (`--cpu-probe`; `make perf`
 * asks in its sales): it answers a question about the machine, not about the service.
 *
 * Ownership: bench_cpuprobe_start returns the probe; after bench_cpuprobe_stop (joins the
 * thread) its spans and figures are read by the caller, which frees them with
 * bench_cpuprobe_free. */
#ifndef SECKILL_BENCH_CPUPROBE_H
#define SECKILL_BENCH_CPUPROBE_H

#include <stddef.h>
#include <stdint.h>

#define CPR_PERIOD_US 2000
#define CPR_WORK_US 10
#define CPR_SLOW_X 3.0
#define CPR_MERGE_US 30000
#define CPR_MIN_RUNS 3

typedef struct bench_cpuprobe_span {
    uint64_t from_ns, to_ns;    /* CLOCK_MONOTONIC: the first slow run's start, the last's end */
    uint32_t runs;              /* slow runs in it */
    double factor;              /* their median slowdown (run CPU time / calibrated) */
} bench_cpuprobe_span_t;

typedef struct bench_cpuprobe bench_cpuprobe_t;

/* Calibrates (a few ms) and starts the thread; NULL if no thread could be started. */
bench_cpuprobe_t *bench_cpuprobe_start(void);

/* Stops and joins the thread, then cuts its runs into spans. */
void bench_cpuprobe_stop(bench_cpuprobe_t *p);

/* After bench_cpuprobe_stop: the spans in time order (*n of them), the runs measured (also
 * readable while it runs), the calibrated work (ns of thread CPU time) and the probe
 * thread's own CPU time (ns). */
const bench_cpuprobe_span_t *bench_cpuprobe_spans(const bench_cpuprobe_t *p, size_t *n);
uint64_t bench_cpuprobe_runs(const bench_cpuprobe_t *p);
uint64_t bench_cpuprobe_work_ns(const bench_cpuprobe_t *p);
uint64_t bench_cpuprobe_cpu_ns(const bench_cpuprobe_t *p);

void bench_cpuprobe_free(bench_cpuprobe_t *p); /* NULL is fine; stops it first if still running */

/* Cuts runs into spans, by the rules above (exposed for the unit test): run i started at
 * start_ns[i] (ascending) and took cpu_ns[i]; work_ns is the calibrated time. Returns the
 * number of spans written to out (at most cap). */
size_t bench_cpuprobe_cut(const uint64_t *start_ns, const uint32_t *cpu_ns, size_t n,
                          uint64_t work_ns, bench_cpuprobe_span_t *out, size_t cap);

#endif
