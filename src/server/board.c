/* board.c -- this instance's snapshot for the sale board, announced in Redis each second.
 *
 * The snapshot holds cumulative counters only (per outcome, the latency buckets, answers,
 * 5xx, orders persisted) plus gauges (stream backlog, Redis and SQL up): the page takes
 * rates and percentiles from the difference of two snapshots, so nothing here keeps
 * history. Times are wall-clock milliseconds, comparable across instances. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/app.h"
#include "server/board.h"
#include "server/events.h"
#include "server/sale_totals.h"
#include "core/clock.h"
#include "core/key.h"
#include "server/metrics.h"
#include "redis/rds.h"
#include "core/sb.h"
#include "server/worker.h"
#include "core/xmem.h"

struct board {
    struct event *tick;
};

void board_snapshot(worker_t *w, sb_t *out)
{
    app_t *app = w->app;
    metrics_totals_t t;
    metrics_sum(app, &t);
    sb_puts(out, "{\"name\":");
    sb_json_str(out, app->name, strlen(app->name));
    sb_printf(out, ",\"listen\":");
    char listen[300];
    int n = snprintf(listen, sizeof listen, strchr(app->cfg.listen_host, ':') ? "[%s]:%d" : "%s:%d",
                     app->cfg.listen_host, app->cfg.listen_port);
    sb_json_str(out, listen, n > 0 && (size_t)n < sizeof listen ? (size_t)n : 0);
    sb_printf(out, ",\"pid\":%d,\"mode\":\"%s\",\"ts\":%llu,\"seckill\":{",
              (int)getpid(), app->cfg.mode_name,
              (unsigned long long)clock_wall_ms());
    for (int o = 0; o < OUT__COUNT; o++) {
        sb_printf(out, "%s\"%s\":%llu", o ? "," : "", metrics_outcome_name((outcome_t)o),
                  (unsigned long long)t.seckill[o]);
    }
    sb_puts(out, "},\"lat\":[");
    for (int b = 0; b < METRICS_LAT_BUCKETS; b++) {
        sb_printf(out, "%s%llu", b ? "," : "", (unsigned long long)t.bucket[b]);
    }
    sb_printf(out,
              "],\"requests\":%llu,\"http5xx\":%llu,\"persisted\":%llu,\"pending\":%lld,"
              "\"lag\":%lld,\"workers\":%d,\"redis_up\":%d,\"sql_up\":%d}",
              (unsigned long long)t.requests, (unsigned long long)t.http_class[5],
              (unsigned long long)t.persisted, (long long)t.stream_pending,
              (long long)t.stream_lag, t.workers, t.redis_up, t.sql_up);
}

/* Sends board.lua: announce this instance; want_board "1" also returns every live
 * instance's snapshot. Shared by the timer and the data endpoint (api_board.c). */
void board_announce(worker_t *w, int want_board, rds_cb cb, void *priv)
{
    sb_t s = SB_INIT;
    board_snapshot(w, &s);
    char ttl[16];
    int tl = snprintf(ttl, sizeof ttl, "%d", BOARD_TTL_MS);
    const char *argv[5] = { KEY_BOARD_INSTANCES, w->app->name, s.buf != NULL ? s.buf : "{}",
                            ttl, want_board ? "1" : "0" };
    size_t lens[5] = { strlen(KEY_BOARD_INSTANCES), strlen(w->app->name),
                       s.buf != NULL ? s.len : 2, (size_t)tl, 1 };
    rds_evalsha(w->rds, SCRIPT_BOARD, cb, priv, 1, 5, argv, lens);
    sb_free(&s);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    worker_t *w = arg;
    /* Fire and forget: a lost announcement is renewed by the next one, well within the TTL. */
    board_announce(w, 0, NULL, NULL);
    metrics_totals_t t;
    metrics_sum(w->app, &t);
    events_tick(w, &t);
    sale_totals_tick(w);
}

int board_init(worker_t *w)
{
    struct board *b = xcalloc(1, sizeof(*b));
    b->tick = event_new(w->base, -1, EV_PERSIST, on_tick, w);
    struct timeval tv = { BOARD_ANNOUNCE_MS / 1000, (BOARD_ANNOUNCE_MS % 1000) * 1000 };
    if (b->tick == NULL || event_add(b->tick, &tv) != 0) {
        if (b->tick != NULL) {
            event_free(b->tick);
        }
        free(b);
        return -1;
    }
    w->board = b;
    return 0;
}

void board_free(worker_t *w)
{
    if (w == NULL || w->board == NULL) {
        return;
    }
    event_free(w->board->tick);
    free(w->board);
    w->board = NULL;
}
