/* sale_totals.c -- per-sale answer totals: counted in memory, added to Redis each second
 * (sale_totals.h). */
#include "server/sale_totals.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

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

/* Worker 0's view of a sale: the counts already added to Redis, the ones on their way. */
typedef struct agg {
    int64_t voucher_id;
    uint64_t sum[OUT__COUNT];         /* this tick's sum over the tables */
    uint64_t flushed[OUT__COUNT];
    uint64_t sending[OUT__COUNT];     /* > 0: an HINCRBY of that much is out */
    unsigned told;                    /* events told: bit per outcome */
} agg_t;

static agg_t aggs[SALE_TOTALS_SLOTS];

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

typedef struct sent {
    agg_t *a;
    int o;
} sent_t;

static void on_hincr(redisReply *rep, void *priv)
{
    sent_t *s = priv;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
        s->a->flushed[s->o] += s->a->sending[s->o];
    s->a->sending[s->o] = 0;
    free(s);
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

void sale_totals_tick(worker_t *w)
{
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
        char key[64], num[24];
        int kl = snprintf(key, sizeof key, "%s%lld", KEY_BOARD_TOTALS, (long long)a->voucher_id);
        for (int o = 0; o < OUT__COUNT; o++) {
            if (a->sending[o] > 0 || a->sum[o] <= a->flushed[o])
                continue;
            a->sending[o] = a->sum[o] - a->flushed[o];
            const char *name = metrics_outcome_name((outcome_t)o);
            int nl = snprintf(num, sizeof num, "%llu", (unsigned long long)a->sending[o]);
            const char *argv[4] = { "HINCRBY", key, name, num };
            size_t lens[4] = { 7, (size_t)kl, strlen(name), (size_t)nl };
            sent_t *s = xmalloc(sizeof *s);
            *s = (sent_t){ .a = a, .o = o };
            rds_command(w->rds, on_hincr, s, 4, argv, lens);
        }
    }
}
