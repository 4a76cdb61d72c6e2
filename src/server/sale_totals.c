/* sale_totals.c -- per-sale answer totals: counted in memory, added to Redis each second
 * (sale_totals.h). */
#include "server/sale_totals.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/xmem.h"
#include "redis/rds.h"
#include "server/events.h"
#include "server/worker.h"

#define PROBES 8u

/* One worker's table: written by that worker, read by worker 0. A slot's voucher id is
 * set once (release, after its counters are zero) and never changes. */
typedef struct slot {
    _Atomic int64_t voucher_id;   /* 0 = free */
    _Atomic uint64_t n[OUT__COUNT];
} slot_t;

typedef struct table {
    slot_t slot[SALE_TOTALS_SLOTS];
    int full_logged;
} table_t;

static _Atomic(table_t *) tables[SALE_TOTALS_WORKERS_MAX];

/* Worker 0's view of a sale: this tick's sums, and what Redis holds of them. */
typedef struct agg {
    int64_t voucher_id;
    uint64_t sum[OUT__COUNT];         /* this tick's sum over the tables */
    uint64_t stored[OUT__COUNT];      /* the values Redis confirmed */
    uint64_t sending[OUT__COUNT];     /* the values of the HSET that is out */
    int inflight;
    unsigned told;                    /* events told: bit per outcome */
} agg_t;

static agg_t aggs[SALE_TOTALS_SLOTS];
static uint64_t boot_ms;              /* this process's start: its fields' suffix */

static unsigned home(int64_t voucher_id)
{
    uint64_t h = (uint64_t)voucher_id * UINT64_C(0x9e3779b97f4a7c15);
    return (unsigned)(h >> 40) & (SALE_TOTALS_SLOTS - 1);
}

void sale_totals_count(worker_t *w, int64_t voucher_id, outcome_t o)
{
    if (voucher_id <= 0 || (unsigned)o >= OUT__COUNT || w->id < 0 ||
        w->id >= SALE_TOTALS_WORKERS_MAX)
        return;
    table_t *t = atomic_load_explicit(&tables[w->id], memory_order_relaxed);
    if (t == NULL) {
        t = xcalloc(1, sizeof *t);     /* once per worker, the first answer */
        atomic_store_explicit(&tables[w->id], t, memory_order_release);
    }
    unsigned h = home(voucher_id);
    for (unsigned i = 0; i < PROBES; i++) {
        slot_t *s = &t->slot[(h + i) & (SALE_TOTALS_SLOTS - 1)];
        int64_t v = atomic_load_explicit(&s->voucher_id, memory_order_relaxed);
        if (v == 0) {
            atomic_store_explicit(&s->voucher_id, voucher_id, memory_order_release);
            v = voucher_id;
        }
        if (v == voucher_id) {
            shard_inc(&s->n[o]);
            return;
        }
    }
    if (!t->full_logged) {
        t->full_logged = 1;
        log_warn("sale totals: worker %d's table is full; voucher %lld's answers are not "
                 "counted per sale", w->id, (long long)voucher_id);
    }
}

static agg_t *agg_of(int64_t voucher_id)
{
    unsigned h = home(voucher_id);
    for (unsigned i = 0; i < SALE_TOTALS_SLOTS; i++) {
        agg_t *a = &aggs[(h + i) & (SALE_TOTALS_SLOTS - 1)];
        if (a->voucher_id == 0)
            a->voucher_id = voucher_id;
        if (a->voucher_id == voucher_id)
            return a;
    }
    return NULL;
}

static void on_hset(redisReply *rep, void *priv)
{
    agg_t *a = priv;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
        memcpy(a->stored, a->sending, sizeof a->stored);
    a->inflight = 0;       /* failed: the next tick sends the values again */
}

/* The first sold order, sold-out answer and ended answer of a sale seen here. */
static void tell(agg_t *a)
{
    static const struct { outcome_t o; const char *kind, *text; } firsts[] = {
        { OUT_OK, EV_SALE_OPENED, "sale %lld: first order admitted" },
        { OUT_SOLD_OUT, EV_SALE_SOLD_OUT, "sale %lld sold out" },
        { OUT_ENDED, EV_SALE_ENDED, "sale %lld ended" },
    };
    for (size_t i = 0; i < sizeof firsts / sizeof firsts[0]; i++) {
        unsigned bit = 1u << firsts[i].o;
        if (a->sum[firsts[i].o] > 0 && !(a->told & bit)) {
            a->told |= bit;
            events_once(firsts[i].kind, a->voucher_id, firsts[i].text, (long long)a->voucher_id);
        }
    }
}

/* One HSET of the sale's fields that moved: "<outcome>@<instance>.<boot ms>" = this
 * process's count. A value, not an increment: sending it twice is harmless. */
static void send(worker_t *w, agg_t *a)
{
    const char *argv[2 + 2 * OUT__COUNT];
    size_t lens[2 + 2 * OUT__COUNT];
    char key[64], field[OUT__COUNT][200], num[OUT__COUNT][24];
    int argc = 2;
    for (int o = 0; o < OUT__COUNT; o++) {
        if (a->sum[o] == a->stored[o])
            continue;
        int fl = snprintf(field[o], sizeof field[o], "%s@%s.%llu",
                          metrics_outcome_name((outcome_t)o), w->app->name,
                          (unsigned long long)boot_ms);
        if (fl < 0 || (size_t)fl >= sizeof field[o])
            continue;
        argv[argc] = field[o];
        lens[argc++] = (size_t)fl;
        argv[argc] = num[o];
        lens[argc++] = (size_t)snprintf(num[o], sizeof num[o], "%llu",
                                        (unsigned long long)a->sum[o]);
    }
    if (argc == 2)
        return;
    memcpy(a->sending, a->sum, sizeof a->sending);
    argv[0] = "HSET";
    lens[0] = 4;
    argv[1] = key;
    lens[1] = (size_t)snprintf(key, sizeof key, "%s%lld", KEY_BOARD_TOTALS, (long long)a->voucher_id);
    a->inflight = 1;
    rds_command(w->rds, on_hset, a, argc, argv, lens);
}

void sale_totals_tick(worker_t *w)
{
    if (boot_ms == 0)
        boot_ms = clock_wall_ms();
    for (unsigned i = 0; i < SALE_TOTALS_SLOTS; i++)
        memset(aggs[i].sum, 0, sizeof aggs[i].sum);
    for (int k = 0; k < SALE_TOTALS_WORKERS_MAX; k++) {
        table_t *t = atomic_load_explicit(&tables[k], memory_order_acquire);
        for (unsigned i = 0; t != NULL && i < SALE_TOTALS_SLOTS; i++) {
            slot_t *s = &t->slot[i];
            int64_t v = atomic_load_explicit(&s->voucher_id, memory_order_acquire);
            agg_t *a = v != 0 ? agg_of(v) : NULL;
            for (int o = 0; a != NULL && o < OUT__COUNT; o++)
                a->sum[o] += atomic_load_explicit(&s->n[o], memory_order_relaxed);
        }
    }
    for (unsigned i = 0; i < SALE_TOTALS_SLOTS; i++) {
        agg_t *a = &aggs[i];
        if (a->voucher_id == 0)
            continue;
        tell(a);
        if (!a->inflight)
            send(w, a);
    }
}

int sale_totals_add(const char *field, size_t len, int64_t value, int64_t *sums, int *seen)
{
    const char *at = memchr(field, '@', len);
    size_t n = at != NULL ? (size_t)(at - field) : len;
    for (int o = 0; o < OUT__COUNT; o++) {
        const char *name = metrics_outcome_name((outcome_t)o);
        if (strlen(name) == n && memcmp(name, field, n) == 0) {
            sums[o] += value;
            seen[o] = 1;
            return 0;
        }
    }
    return -1;
}
