/* metrics.c -- counting into per-worker shards, and the Prometheus text of /metrics.
 *
 * Workers count with relaxed atomics into their own shard (metrics.h); the writer and
 * the job pool count into app->metrics. Rendering reads every shard with relaxed loads,
 * so a scrape is a consistent-enough snapshot, never a lock. Histogram buckets are kept
 * per bucket (not cumulative) and summed into Prometheus's cumulative form here. */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"

#include "core/app.h"
#include "server/metrics.h"
#include "core/sb.h"
#include "server/worker.h"

/* Upper bounds of the latency buckets in nanoseconds, and the same as "le" labels in
 * seconds; the last bucket is +Inf. */
static const uint64_t lat_bound_ns[METRICS_LAT_BUCKETS - 1] = {
    100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 25000000,
    50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000ull, 5000000000ull,
};
static const char *const lat_le[METRICS_LAT_BUCKETS] = {
    "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
    "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf",
};

static const char *const outcome_name[OUT__COUNT] = {
    [OUT_OK] = "ok",
    [OUT_SOLD_OUT] = "sold_out",
    [OUT_DUPLICATE] = "duplicate",
    [OUT_NOT_STARTED] = "not_started",
    [OUT_ENDED] = "ended",
    [OUT_NO_VOUCHER] = "no_voucher",
    [OUT_UNAUTHORIZED] = "unauthorized",
    [OUT_BAD_REQUEST] = "bad_request",
    [OUT_UNAVAILABLE] = "unavailable",
    [OUT_OTHER] = "other",
    [OUT_RATE_LIMITED] = "rate_limited",
    [OUT_PAUSED] = "paused",
    [OUT_QUEUE_REQUIRED] = "queue_required",
};

/* rl_kind_t order (ratelimit.h). */
static const char *const rl_name[METRICS_RL_KINDS] = {
    "user_seckill", "ip_seckill", "ip_code", "phone_code", "phone_login", "ip_login", "user_lookup",
    "code_budget",
};

void metrics_seckill_done(metrics_shard_t *m, outcome_t o, uint64_t latency_ns)
{
    if (m == NULL) {
        return;
    }
    if ((unsigned)o >= OUT__COUNT) {
        o = OUT_OTHER;
    }
    int b = 0;
    while (b < METRICS_LAT_BUCKETS - 1 && latency_ns > lat_bound_ns[b]) {
        b++;
    }
    shard_inc(&m->seckill[o]);
    shard_inc(&m->lat_bucket[b]);
    shard_add(&m->lat_sum_us, latency_ns / 1000u);
}

void metrics_http_done(metrics_shard_t *m, int status)
{
    if (m == NULL) {
        return;
    }
    int cls = status / 100;
    shard_inc(&m->requests);
    shard_inc(&m->http_class[cls >= 1 && cls <= 5 ? cls : 5]);
}

static uint64_t ld(_Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static int64_t lds(_Atomic int64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static void head(sb_t *out, const char *name, const char *type, const char *help)
{
    sb_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(sb_t *out, const char *name, const char *type, const char *help, uint64_t v)
{
    head(out, name, type, help);
    sb_printf(out, "%s %llu\n", name, (unsigned long long)v);
}

static metrics_probes_t probes;   /* set once before the workers start, then read-only */

void metrics_set_probes(const metrics_probes_t *p)
{
    probes = *p;
}

static int probe(int (*fn)(const worker_t *), const worker_t *w)
{
    return fn != NULL && w != NULL ? fn(w) : 0;
}

void metrics_sum(struct app *app, metrics_totals_t *t)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < app->nworkers; i++) {
        worker_t *w = app->workers != NULL ? app->workers[i] : NULL;
        metrics_shard_t *m = w != NULL ? w->m : NULL;
        if (w != NULL) {
            t->workers++;
            t->redis_up += probe(probes.redis_up, w) != 0;
        }
        if (m == NULL) {
            continue;
        }
        for (int o = 0; o < OUT__COUNT; o++) {
            t->seckill[o] += ld(&m->seckill[o]);
        }
        for (int b = 0; b < METRICS_LAT_BUCKETS; b++) {
            t->bucket[b] += ld(&m->lat_bucket[b]);
        }
        t->requests += ld(&m->requests);
        for (int c = 1; c <= 5; c++) {
            t->http_class[c] += ld(&m->http_class[c]);
        }
        t->lat_sum_us += ld(&m->lat_sum_us);
        t->soldout_local += ld(&m->soldout_local);
        t->token_hits += ld(&m->token_cache_hits);
        t->token_lookups_refused += ld(&m->token_lookups_refused);
        t->admin_token_refused += ld(&m->admin_token_refused);
        t->redis_errors += ld(&m->redis_errors);
        t->redis_reconnects += ld(&m->redis_reconnects);
        t->redis_redirects += ld(&m->redis_redirects);
        t->rate_limited += ld(&m->rate_limited);
        for (int k = 0; k < METRICS_RL_KINDS; k++) {
            t->rl_by[k] += ld(&m->rate_limited_by[k]);
        }
        t->life_cancels += ld(&m->life_cancels);
        t->pay_taken += ld(&m->pay_taken);
        t->pay_refunded += ld(&m->pay_refunded);
        for (int k = 0; k < METRICS_ROOM_STATES; k++) {
            t->room_answers[k] += ld(&m->room_answers[k]);
        }
        t->room_passes += ld(&m->room_passes);
    }
    metrics_t *g = app->metrics;
    if (g != NULL) {
        t->persisted = ld(&g->orders_persisted);
        t->stream_pending = lds(&g->stream_pending);
        t->stream_lag = lds(&g->stream_lag);
    }
    t->sql_up = atomic_load(&app->sql_up) != 0;
}

int metrics_sweeper_claim(metrics_t *g, int64_t now_ms)
{
    for (int i = 0; g != NULL && i < METRICS_SWEEPERS; i++) {
        int64_t free_slot = 0;
        if (atomic_compare_exchange_strong(&g->sweep_done_ms[i], &free_slot, now_ms > 0 ? now_ms : 1))
            return i;
    }
    return -1;
}

void metrics_sweeper_done(metrics_t *g, int slot, int64_t done_ms)
{
    if (g != NULL && slot >= 0 && slot < METRICS_SWEEPERS && done_ms > 0)
        atomic_store_explicit(&g->sweep_done_ms[slot], done_ms, memory_order_relaxed);
}

void metrics_sweeper_release(metrics_t *g, int slot)
{
    if (g != NULL && slot >= 0 && slot < METRICS_SWEEPERS)
        atomic_store(&g->sweep_done_ms[slot], 0);
}

/* The sweepers' lag in ms: how long ago the sweeper furthest behind had every deadline
 * decided (0 without a sweeper). */
static int64_t sweep_lag_ms(metrics_t *g)
{
    int64_t now = (int64_t)clock_wall_ms(), lag = 0;
    for (int i = 0; i < METRICS_SWEEPERS; i++) {
        int64_t d = lds(&g->sweep_done_ms[i]);
        if (d > 0 && now - d > lag)
            lag = now - d;
    }
    return lag;
}

static const char *const room_state_name[METRICS_ROOM_STATES] = {
    "waiting", "admitted", "soldOut", "notQueued",
};

const char *metrics_outcome_name(outcome_t o)
{
    return (unsigned)o < OUT__COUNT ? outcome_name[o] : "other";
}

void metrics_render(struct app *app, struct sb *out)
{
    metrics_totals_t t;
    metrics_sum(app, &t);
    uint64_t *seck = t.seckill, *bucket = t.bucket, *rl_by = t.rl_by, *http_class = t.http_class;
    uint64_t requests = t.requests, lat_sum_us = t.lat_sum_us, soldout_local = t.soldout_local;
    uint64_t token_hits = t.token_hits, redis_errors = t.redis_errors;
    uint64_t redis_reconnects = t.redis_reconnects, rate_limited = t.rate_limited;

    head(out, "seckill_seckill_requests_total", "counter",
         "Flash-sale requests by outcome.");
    for (int o = 0; o < OUT__COUNT; o++) {
        sb_printf(out, "seckill_seckill_requests_total{outcome=\"%s\"} %llu\n",
                  outcome_name[o], (unsigned long long)seck[o]);
    }

    head(out, "seckill_request_duration_seconds", "histogram",
         "Flash-sale request latency, from the complete request to the reply.");
    uint64_t cum = 0;
    for (int b = 0; b < METRICS_LAT_BUCKETS; b++) {
        cum += bucket[b];
        sb_printf(out, "seckill_request_duration_seconds_bucket{le=\"%s\"} %llu\n", lat_le[b],
                  (unsigned long long)cum);
    }
    sb_printf(out, "seckill_request_duration_seconds_sum %llu.%06llu\n",
              (unsigned long long)(lat_sum_us / 1000000u),
              (unsigned long long)(lat_sum_us % 1000000u));
    sb_printf(out, "seckill_request_duration_seconds_count %llu\n", (unsigned long long)cum);

    one(out, "seckill_http_requests_total", "counter", "HTTP requests answered.",
        requests);
    head(out, "seckill_http_responses_total", "counter",
         "HTTP answers by status class (2xx, 4xx, 5xx, ...).");
    for (int c = 1; c <= 5; c++) {
        sb_printf(out, "seckill_http_responses_total{code=\"%dxx\"} %llu\n", c,
                  (unsigned long long)http_class[c]);
    }
    one(out, "seckill_soldout_local_total", "counter",
        "Flash-sale requests answered from a worker's verdict cache.", soldout_local);
    one(out, "seckill_token_cache_hits_total", "counter",
        "Token lookups answered from a worker's cache.", token_hits);
    one(out, "seckill_token_lookups_refused_total", "counter",
        "Tokens refused without a Redis lookup: unknown-token budget spent.",
        t.token_lookups_refused);
    one(out, "seckill_admin_token_refused_total", "counter",
        "Requests with a wrong x-admin-token.", t.admin_token_refused);
    one(out, "seckill_redis_errors_total", "counter",
        "Redis timeouts, disconnects and error replies.", redis_errors);
    one(out, "seckill_redis_reconnects_total", "counter", "Redis reconnections.",
        redis_reconnects);
    one(out, "seckill_redis_redirects_total", "counter",
        "Redis Cluster redirects followed (MOVED, ASK, TRYAGAIN, CLUSTERDOWN).",
        t.redis_redirects);
    one(out, "seckill_rate_limited_total", "counter", "Requests refused by rate limiting.",
        rate_limited);
    head(out, "seckill_rate_limited_by_limit_total", "counter",
         "Requests refused by each rate limit (--rate-*).");
    for (int k = 0; k < METRICS_RL_KINDS; k++) {
        sb_printf(out, "seckill_rate_limited_by_limit_total{limit=\"%s\"} %llu\n", rl_name[k],
                  (unsigned long long)rl_by[k]);
    }
    one(out, "seckill_orders_cancelled_total", "counter",
        "Orders cancelled by their buyer (POST /voucher-order/{id}/cancel), the unit back on sale.",
        t.life_cancels);
    head(out, "seckill_payments_total", "counter",
         "Payment notices decided (a notice repeated is not counted again): taken (the order "
         "paid) or refunded (the order was cancelled or timed out, or paid already).");
    sb_printf(out, "seckill_payments_total{result=\"taken\"} %llu\n",
              (unsigned long long)t.pay_taken);
    sb_printf(out, "seckill_payments_total{result=\"refunded\"} %llu\n",
              (unsigned long long)t.pay_refunded);
    head(out, "seckill_room_answers_total", "counter",
         "Waiting-room joins and polls answered, by the buyer's state.");
    for (int k = 0; k < METRICS_ROOM_STATES; k++) {
        sb_printf(out, "seckill_room_answers_total{state=\"%s\"} %llu\n", room_state_name[k],
                  (unsigned long long)t.room_answers[k]);
    }
    one(out, "seckill_room_passes_total", "counter",
        "Waiting-room passes signed into answers (an admitted buyer's poll gets its pass again).",
        t.room_passes);

    metrics_t *g = app->metrics;
    if (g != NULL) {
        one(out, "seckill_orders_persisted_total", "counter",
            "Orders inserted into SQL by this process (its writer, or sync mode's transactions).",
            ld(&g->orders_persisted));
        one(out, "seckill_orders_replayed_total", "counter",
            "Orders already in SQL when written again (idempotent replays).",
            ld(&g->orders_replayed));
        one(out, "seckill_order_id_conflicts_total", "counter",
            "Order ids found in SQL with a different user or voucher.",
            ld(&g->order_id_conflicts));
        one(out, "seckill_orders_fenced_total", "counter",
            "Orders not written: admitted by a Redis state that a rebuild from SQL replaced "
            "(lost with Redis).", ld(&g->orders_fenced));
        one(out, "seckill_redis_rebuilds_total", "counter",
            "Vouchers whose Redis keys this process rebuilt from SQL.", ld(&g->redis_rebuilds));
        one(out, "seckill_bucket_transfers_total", "counter",
            "Stock-bucket transfers the refills of this process applied.",
            ld(&g->bucket_transfers));
        one(out, "seckill_bucket_transfers_swept_total", "counter",
            "Stock-bucket transfers cut short (a crash, a lost reply) that the sweep finished.",
            ld(&g->bucket_swept));
        one(out, "seckill_cache_hits_total", "counter",
            "Cache-aside reads (shops, shop types) answered from Redis, empty answers included.",
            ld(&g->cache_hits));
        one(out, "seckill_cache_loads_total", "counter",
            "Cache-aside reads that went to SQL: misses that took the mutex, and reads while "
            "Redis failed.", ld(&g->cache_loads));
        one(out, "seckill_writer_batches_total", "counter",
            "SQL transactions committed by the order writer.", ld(&g->writer_batches));
        one(out, "seckill_writer_batch_orders_total", "counter",
            "Orders in committed writer batches (divide by batches for the mean size).",
            ld(&g->writer_batch_orders));
        one(out, "seckill_writer_failures_total", "counter",
            "Failed writer batch attempts (retried).", ld(&g->writer_failures));
        one(out, "seckill_writer_claimed_total", "counter",
            "Stream entries adopted from other consumers.", ld(&g->writer_claimed));
        head(out, "seckill_stream_pending", "gauge",
             "Delivered but unacknowledged order stream entries, all streams.");
        sb_printf(out, "seckill_stream_pending %lld\n", (long long)lds(&g->stream_pending));
        head(out, "seckill_stream_lag", "gauge",
             "Order stream entries not yet delivered to the writers (Redis >= 7).");
        sb_printf(out, "seckill_stream_lag %lld\n", (long long)lds(&g->stream_lag));
        head(out, "seckill_redis_masters_short_of_replicas", "gauge",
             "Masters with fewer in-sync replicas than --redis-wait-replicas: their vouchers "
             "are not sellable (admissions refused before they take stock).");
        sb_printf(out, "seckill_redis_masters_short_of_replicas %lld\n",
                  (long long)lds(&g->masters_short));
        head(out, "seckill_writer_streams_live", "gauge",
             "Order streams the writer reads: every registered one not in the drained set.");
        sb_printf(out, "seckill_writer_streams_live %lld\n",
                  (long long)lds(&g->writer_streams_live));
        head(out, "seckill_writer_streams_drained", "gauge",
             "Order streams the writer no longer reads: sale ended, every order in SQL.");
        sb_printf(out, "seckill_writer_streams_drained %lld\n",
                  (long long)lds(&g->writer_streams_drained));
        one(out, "seckill_writer_undrained_total", "counter",
            "Drained streams the writer's sweep found with pending or undelivered entries "
            "(read again; should stay 0).", ld(&g->writer_undrained));
        one(out, "seckill_sql_errors_total", "counter", "Failed SQL calls.",
            ld(&g->sql_errors));
        head(out, "seckill_refunds_pending", "gauge",
             "Refunds decided and not yet sent: the refund outboxes' entries the writers saw "
             "at their last pass (up to 16 per outbox).");
        sb_printf(out, "seckill_refunds_pending %lld\n", (long long)lds(&g->refunds_pending));
        one(out, "seckill_refunds_sent_total", "counter",
            "Refunds sent through --refund-command (or logged without one) and marked 6 in SQL.",
            ld(&g->refunds_sent));
        one(out, "seckill_refunds_failed_total", "counter",
            "--refund-command runs that failed or timed out (each retried with back-off).",
            ld(&g->refunds_failed));
        one(out, "seckill_orders_timed_out_total", "counter",
            "Unpaid orders this process's writer cancelled at their --pay-timeout-s deadline.",
            ld(&g->orders_timed_out));
        int64_t lag = sweep_lag_ms(g);
        head(out, "seckill_pay_sweep_lag_seconds", "gauge",
             "How far the payment-deadline sweep is behind: every order due more than this "
             "long ago is decided (about 0 to 1.5 while it keeps up; 0 with --pay-timeout-s 0).");
        sb_printf(out, "seckill_pay_sweep_lag_seconds %lld.%03lld\n", (long long)(lag / 1000),
                  (long long)(lag % 1000));
    }

    one(out, "seckill_sql_up", "gauge", "1 if the last SQL call succeeded.",
        (uint64_t)(atomic_load(&app->sql_up) != 0));

    head(out, "seckill_http_connections", "gauge", "Open HTTP connections per worker.");
    for (int i = 0; i < app->nworkers; i++) {
        worker_t *w = app->workers != NULL ? app->workers[i] : NULL;
        if (w != NULL) {
            sb_printf(out, "seckill_http_connections{worker=\"%d\"} %d\n", i,
                      probe(probes.http_conns, w));
        }
    }
    head(out, "seckill_redis_up", "gauge", "1 if the worker's Redis connection is up.");
    for (int i = 0; i < app->nworkers; i++) {
        worker_t *w = app->workers != NULL ? app->workers[i] : NULL;
        if (w != NULL) {
            sb_printf(out, "seckill_redis_up{worker=\"%d\"} %d\n", i,
                      probe(probes.redis_up, w) != 0);
        }
    }
}
