/* bench_procs.c -- per-thread CPU and run-queue wait of the watched processes, sampled
 * from /proc (bench_procs.h). */
#include "cmd/bench_procs.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/xmem.h"

void bench_procs_watch(bench_procs_t *p, int pid, const char *label)
{
    if (pid <= 0 || p->nproc >= BP_MAX_PROCS)
        return;
    p->pid[p->nproc] = pid;
    snprintf(p->label[p->nproc], sizeof p->label[0], "%s", label);
    p->nproc++;
}

/* Reads a small /proc file into buf; 0 or -1. */
static int read_small(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n ? 0 : -1;
}

static bench_procs_group_t *group(bench_procs_t *p, const char *name)
{
    for (size_t i = 0; i < p->ng; i++)
        if (strcmp(p->g[i].name, name) == 0)
            return &p->g[i];
    p->g = xrealloc(p->g, (p->ng + 1) * sizeof *p->g);
    bench_procs_group_t *g = &p->g[p->ng++];
    snprintf(g->name, sizeof g->name, "%s", name);
    g->run_ns = xcalloc(p->cap, sizeof *g->run_ns);
    g->wait_ns = xcalloc(p->cap, sizeof *g->wait_ns);
    return g;
}

void bench_procs_sample(bench_procs_t *p, uint32_t t_us)
{
    if (!p || p->nproc == 0)
        return;
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 1024;
        p->t_us = xrealloc(p->t_us, ncap * sizeof *p->t_us);
        for (size_t i = 0; i < p->ng; i++) {
            p->g[i].run_ns = xrealloc(p->g[i].run_ns, ncap * sizeof(uint64_t));
            p->g[i].wait_ns = xrealloc(p->g[i].wait_ns, ncap * sizeof(uint64_t));
            memset(p->g[i].run_ns + p->cap, 0, (ncap - p->cap) * sizeof(uint64_t));
            memset(p->g[i].wait_ns + p->cap, 0, (ncap - p->cap) * sizeof(uint64_t));
        }
        p->cap = ncap;
    }
    size_t s = p->n++;
    p->t_us[s] = t_us;
    for (size_t i = 0; i < p->ng; i++)
        p->g[i].run_ns[s] = p->g[i].wait_ns[s] = 0;
    /* The whole host: what every process ran (and what the hypervisor took away). */
    char st[1024];
    unsigned long long u, ni, sy, id, io, irq, sirq, steal;
    if (read_small("/proc/stat", st, sizeof st) == 0 &&
        sscanf(st, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &u, &ni, &sy, &id, &io, &irq,
               &sirq, &steal) == 8) {
        long hz = sysconf(_SC_CLK_TCK);
        uint64_t ns = 1000000000ull / (uint64_t)(hz > 0 ? hz : 100);
        group(p, BP_HOST_BUSY)->run_ns[s] = (u + ni + sy + irq + sirq) * ns;
        group(p, BP_HOST_STEAL)->run_ns[s] = steal * ns;
    }
    for (int k = 0; k < p->nproc; k++) {
        char dir[64];
        snprintf(dir, sizeof dir, "/proc/%d/task", p->pid[k]);
        DIR *d = opendir(dir);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9')
                continue;
            char path[384], comm[32], name[BP_NAME];
            snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
            if (read_small(path, comm, sizeof comm) < 0)
                continue;
            comm[strcspn(comm, "\n")] = '\0';
            snprintf(path, sizeof path, "%s/%s/schedstat", dir, e->d_name);
            unsigned long long run = 0, wait = 0;
            if (read_small(path, st, sizeof st) < 0 || sscanf(st, "%llu %llu", &run, &wait) != 2)
                continue;
            for (char *c = comm; *c; c++)   /* names go into JSON and TSV unquoted */
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                      (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' || *c == '.'))
                    *c = '_';
            snprintf(name, sizeof name, "%s/%s", p->label[k], comm);
            bench_procs_group_t *g = group(p, name);
            g->run_ns[s] += run;
            g->wait_ns[s] += wait;
        }
        closedir(d);
    }
}

/* The last sample at or before t_us, or -1. */
static long at(const bench_procs_t *p, uint32_t t_us)
{
    long lo = -1, hi = (long)p->n;   /* t_us[lo] <= t_us < t_us[hi] */
    while (hi - lo > 1) {
        long mid = (lo + hi) / 2;
        if (p->t_us[mid] <= t_us)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void bench_procs_between(const bench_procs_t *p, size_t gi, uint32_t from_us, uint32_t to_us,
                         uint64_t *run_ns, uint64_t *wait_ns)
{
    *run_ns = *wait_ns = 0;
    long a = at(p, from_us), b = at(p, to_us);
    if (gi >= p->ng || b < 0 || b <= a)
        return;
    const bench_procs_group_t *g = &p->g[gi];
    /* A group that appeared after sample a counts from 0; a thread that left makes the
     * sum drop: no negative times. */
    uint64_t r0 = a >= 0 ? g->run_ns[a] : 0, w0 = a >= 0 ? g->wait_ns[a] : 0;
    *run_ns = g->run_ns[b] > r0 ? g->run_ns[b] - r0 : 0;
    *wait_ns = g->wait_ns[b] > w0 ? g->wait_ns[b] - w0 : 0;
}

void bench_procs_free(bench_procs_t *p)
{
    for (size_t i = 0; i < p->ng; i++) {
        free(p->g[i].run_ns);
        free(p->g[i].wait_ns);
    }
    free(p->g);
    free(p->t_us);
    memset(p, 0, sizeof *p);
}
