/* metrics.h -- counters and histograms, rendered as Prometheus text for /metrics.
 *
 * Each worker counts into its own shard (no sharing on the hot path: relaxed atomics on
 * a cache line nobody else writes); the writer thread and others count into the global
 * part. /metrics sums the shards when asked. */
#ifndef SECKILL_METRICS_H
#define SECKILL_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

struct sb;
struct app;
struct worker;

/* Outcomes of a flash-sale request (and of the others, for request counts). */
typedef enum {
    OUT_OK = 0,          /* order admitted */
    OUT_SOLD_OUT,        /* 库存不足 */
    OUT_DUPLICATE,       /* 不能重复下单 */
    OUT_NOT_STARTED,     /* 秒杀尚未开始！ */
    OUT_ENDED,           /* 秒杀已经结束！ */
    OUT_NO_VOUCHER,      /* 优惠券不存在 */
    OUT_UNAUTHORIZED,    /* 401 */
    OUT_BAD_REQUEST,     /* 4xx for malformed input */
    OUT_UNAVAILABLE,     /* Redis/SQL down or late: 503 */
    OUT_OTHER,           /* any other request (non-seckill endpoints) */
    OUT_RATE_LIMITED,    /* 429: a rate limit refused it (ratelimit.h) */
    OUT_PAUSED,          /* 秒杀已暂停 (a paused sale: api_sale.c) */
    OUT_QUEUE_REQUIRED,  /* 请先排队: a waiting room's order without a valid pass (room.h) */
    OUT__COUNT
} outcome_t;

#define METRICS_RL_KINDS 8       /* the limits of ratelimit.h (RL__COUNT) */
#define METRICS_LAT_BUCKETS 16   /* upper bounds in metrics.c: 0.1 ms .. 5 s, +Inf */
#define METRICS_ROOM_STATES 4    /* a waiting room's answers: room.h's ROOM_WAITING ..
                                  * ROOM_NOT_QUEUED (0..3) */
#define METRICS_SWEEPERS 64      /* payment-deadline sweepers (order writers, a Redis
                                  * Cluster's sub-writers) whose lag /metrics shows */

typedef struct metrics_shard {
    _Atomic uint64_t seckill[OUT__COUNT];     /* flash-sale requests by outcome */
    _Atomic uint64_t requests;                /* all HTTP requests answered */
    _Atomic uint64_t http_class[6];           /* answers by status class: [5] = 5xx */
    _Atomic uint64_t lat_bucket[METRICS_LAT_BUCKETS]; /* flash-sale latency histogram */
    _Atomic uint64_t lat_sum_us;
    _Atomic uint64_t soldout_local;           /* answered from the local sold-out flag */
    _Atomic uint64_t token_cache_hits;
    _Atomic uint64_t token_lookups_refused;   /* unknown-token lookups over budget (auth.h) */
    _Atomic uint64_t admin_token_refused;     /* wrong x-admin-token (admin.h) */
    _Atomic uint64_t redis_errors;            /* timeouts, disconnects, error replies */
    _Atomic uint64_t redis_reconnects;
    _Atomic uint64_t redis_redirects;         /* Redis Cluster: MOVED/ASK/TRYAGAIN/CLUSTERDOWN followed */
    _Atomic uint64_t rate_limited;
    _Atomic uint64_t rate_limited_by[METRICS_RL_KINDS];  /* by limit: rl_kind_t order */
    /* the order's lifecycle, decided now (not an answer repeated): src/order/life.c */
    _Atomic uint64_t life_cancels;            /* orders cancelled by their buyer */
    _Atomic uint64_t pay_taken;               /* payments taken (order 1 -> 2) */
    _Atomic uint64_t pay_refunded;            /* payments decided to refund */
    /* the waiting room's join and poll answers by state, and the passes signed into them */
    _Atomic uint64_t room_answers[METRICS_ROOM_STATES];
    _Atomic uint64_t room_passes;
    char pad[64];
} metrics_shard_t;

typedef struct metrics {
    _Atomic uint64_t orders_persisted;        /* inserted by this process (its writer, or
                                               * the SQL transaction of sync mode) */
    _Atomic uint64_t orders_replayed;         /* already in SQL when written again */
    _Atomic uint64_t order_id_conflicts;
    _Atomic uint64_t writer_batches;
    _Atomic uint64_t writer_batch_orders;     /* sum of batch sizes */
    _Atomic uint64_t writer_failures;         /* failed batch attempts (retried) */
    _Atomic uint64_t writer_claimed;          /* entries adopted from other consumers */
    _Atomic int64_t stream_pending;           /* last seen pending entries, all streams */
    _Atomic int64_t stream_lag;               /* last seen undelivered entries (Redis >= 7) */
    _Atomic int64_t writer_streams_live;      /* streams the writer reads (not drained) */
    _Atomic int64_t writer_streams_drained;   /* streams it skips (in the drained set) */
    _Atomic uint64_t writer_undrained;        /* drained streams the sweep found with orders */
    _Atomic uint64_t sql_errors;
    _Atomic uint64_t orders_fenced;           /* admitted by a Redis state a rebuild replaced */
    _Atomic uint64_t redis_rebuilds;          /* vouchers this process republished from SQL */
    _Atomic uint64_t bucket_transfers;        /* stock moved between buckets (buckets.h) */
    _Atomic uint64_t bucket_swept;            /* of them cut short, finished by the sweep */
    /* --redis-wait-replicas: masters with fewer in-sync replicas than the promise, and
     * their slots (bit s of the 16384 slots; a single Redis: all), as the writer last saw
     * (src/writer/writer_guard.c): their vouchers are not sellable. */
    _Atomic int64_t masters_short;
    _Atomic uint64_t short_slots[16384 / 64];
    _Atomic uint64_t cache_hits;              /* cache-aside reads answered by Redis (cacheaside.h) */
    _Atomic uint64_t cache_loads;             /* cache-aside reads that went to SQL */
    /* the refund outbox (src/writer/writer_refund.c) */
    _Atomic int64_t refunds_pending;          /* entries the writers saw waiting, last pass */
    _Atomic uint64_t refunds_sent;            /* refunds sent (or logged) and marked 6 */
    _Atomic uint64_t refunds_failed;          /* --refund-command runs that failed (retried) */
    /* --pay-timeout-s (src/writer/writer_life.c) */
    _Atomic uint64_t orders_timed_out;        /* unpaid orders cancelled at their deadline */
    /* per sweeper (a slot taken by metrics_sweeper_claim): the wall-clock ms up to which
     * every deadline is decided -- the start of its last pass that left nothing due; 0 =
     * a free slot */
    _Atomic int64_t sweep_done_ms[METRICS_SWEEPERS];
} metrics_t;

static inline void metric_inc(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}
static inline void metric_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* A worker's own shard has one writer, its thread: a relaxed load and store (plain
 * moves on x86) count without the bus-locked add of metric_inc, which is paid several
 * times per request on the hot path. Readers on other threads still load whole values. */
static inline void shard_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}
static inline void shard_inc(_Atomic uint64_t *c)
{
    shard_add(c, 1);
}

/* Counts one finished flash-sale request with its outcome and latency. */
void metrics_seckill_done(metrics_shard_t *m, outcome_t o, uint64_t latency_ns);

/* Counts one HTTP answer with its status (any path; 5xx feeds the error-rate alert). */
void metrics_http_done(metrics_shard_t *m, int status);

/* The whole process's counters, summed over the worker shards (relaxed loads). */
typedef struct metrics_totals {
    uint64_t seckill[OUT__COUNT];
    uint64_t bucket[METRICS_LAT_BUCKETS];      /* per bucket, not cumulative */
    uint64_t requests, http_class[6], lat_sum_us, soldout_local, token_hits;
    uint64_t token_lookups_refused, admin_token_refused;
    uint64_t redis_errors, redis_reconnects, redis_redirects, rate_limited, rl_by[METRICS_RL_KINDS];
    uint64_t life_cancels, pay_taken, pay_refunded, room_answers[METRICS_ROOM_STATES];
    uint64_t room_passes;
    uint64_t persisted;                        /* orders_persisted */
    int64_t stream_pending, stream_lag;        /* cluster-wide, as the writer last saw */
    int workers, redis_up;                     /* workers, and how many have Redis up */
    int sql_up;
} metrics_totals_t;

void metrics_sum(struct app *app, metrics_totals_t *t);

/* Gauges other modules own, read when /metrics (or the board) asks. The owners hand them
 * in -- server.c installs these once, before the workers start -- so metrics knows
 * neither http nor rds. A NULL probe reads as 0. */
typedef struct metrics_probes {
    int (*http_conns)(const struct worker *w);   /* open HTTP connections of w */
    int (*redis_up)(const struct worker *w);     /* 1 if w's Redis connection is up */
} metrics_probes_t;
void metrics_set_probes(const metrics_probes_t *p);

/* A payment-deadline sweeper's slot, its deadlines decided up to now_ms (its start): the
 * slot, or -1 when all are taken (its lag is then not shown). Any thread. */
int metrics_sweeper_claim(metrics_t *g, int64_t now_ms);
/* Every deadline up to done_ms (wall clock) is decided: a pass that left nothing due. */
void metrics_sweeper_done(metrics_t *g, int slot, int64_t done_ms);
/* The sweeper is gone (its writer freed): its slot is free again. */
void metrics_sweeper_release(metrics_t *g, int slot);

/* "ok", "sold_out", ...: the outcome label of /metrics. */
const char *metrics_outcome_name(outcome_t o);

/* Appends the Prometheus text of the whole process to out. */
void metrics_render(struct app *app, struct sb *out);

#endif
