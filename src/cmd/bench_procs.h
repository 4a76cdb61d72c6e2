/* bench_procs.h -- which threads ran when, for `seckill bench`'s timeline.
 *
 * While the load runs, the bench samples /proc/PID/task/TID/schedstat of the processes it
 * knows (the server, its redis-server, itself) about every 100 ms: per thread the time it
 * ran on a CPU and the time it waited on a run queue, runnable but not running (Linux's
 * schedstats, nanoseconds). Threads are grouped by process label and thread name
 * ("server/w0", "server/writer", "redis/redis-server", "redis/bio_aof", "bench/bench0"),
 * so the figures per 100 ms say e.g. that both cores were taken by two workers, Redis and
 * the order writer while the bench's own thread waited 40 ms to run.
 *
 * Two more groups come from /proc/stat: BP_HOST_BUSY, the CPU time every process on the
 * host ran (so "others" = busy - the watched threads: the other tenants of a shared
 * machine), and BP_HOST_STEAL, time the hypervisor gave to other machines. Their
 * resolution is the kernel's tick (10 ms).
 *
 * Samples are taken by one thread (the bench's main thread); the result is read after the
 * load. A process whose /proc cannot be read is skipped silently (not local). */
#ifndef SECKILL_BENCH_PROCS_H
#define SECKILL_BENCH_PROCS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BP_MAX_PROCS 4
#define BP_NAME 48
#define BP_HOST_BUSY "host/busy"
#define BP_HOST_STEAL "host/steal"

typedef struct bench_procs_group {
    char name[BP_NAME];          /* "label/comm" */
    uint64_t *run_ns, *wait_ns;  /* cumulative, per sample (0 before the group appeared) */
} bench_procs_group_t;

typedef struct bench_procs {
    int pid[BP_MAX_PROCS];
    char label[BP_MAX_PROCS][16];
    int nproc;
    uint32_t *t_us;              /* sample times, us since the load's origin */
    size_t n, cap;
    bench_procs_group_t *g;
    size_t ng;
} bench_procs_t;

/* Adds a process to watch (pid <= 0 is ignored). */
void bench_procs_watch(bench_procs_t *p, int pid, const char *label);

/* Takes one sample at t_us. */
void bench_procs_sample(bench_procs_t *p, uint32_t t_us);

/* CPU and run-queue wait of group gi between the last samples at or before from_us and
 * to_us, in ns (0 when there are no such samples). */
void bench_procs_between(const bench_procs_t *p, size_t gi, uint32_t from_us, uint32_t to_us,
                         uint64_t *run_ns, uint64_t *wait_ns);

void bench_procs_free(bench_procs_t *p);

#endif
