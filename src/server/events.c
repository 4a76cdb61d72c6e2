/* events.c -- the sale board's event log: an in-memory queue written to a Redis list on
 * the board's tick (events.h). */
#include "server/events.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "core/app.h"
#include "core/clock.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "redis/rds.h"
#include "server/metrics.h"
#include "server/worker.h"

#define FLUSH_MAX 64          /* events per EVAL */

typedef struct ev {
    uint64_t ts;
    int64_t voucher_id;
    int once;
    char kind[24];
    char text[200];
} ev_t;

/* The queue, a ring: any thread appends, worker 0 takes. */
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static ev_t q_ring[EVENTS_QUEUE_MAX];
static int q_head, q_len;
static uint64_t q_dropped;    /* events lost to a full queue, told in the next one written */

/* Worker 0's own: what the last tick saw, and whether a write is out. Redis starts as
 * up with no reconnection (the server started only once it answered), so a restart
 * before the first tick is seen too; SQL's view is taken at the first tick. */
static struct {
    int seen;                 /* a tick has run: sql_up holds its view */
    int redis_up, sql_up;
    uint64_t reconnects;
    int inflight;
} tick_st = { .redis_up = 1 };

/* The script: per event (once-key or "", JSON) LPUSH it, unless its once-key exists.
 * Every key shares the list's hash tag {board}, so on a Redis Cluster they live on one
 * node (the once-keys are named in ARGV as board.lua names the instance keys). */
static const char flush_lua[] =
    "local n = 0 "
    "for i = 3, #ARGV, 2 do "
    "  if ARGV[i] == '' or redis.call('SET', ARGV[i], '1', 'NX', 'PX', ARGV[2]) then "
    "    redis.call('LPUSH', KEYS[1], ARGV[i + 1]) n = n + 1 "
    "  end "
    "end "
    "redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[1]) - 1) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[2]) "
    "return n";

static void queue_put(const ev_t *e)
{
    pthread_mutex_lock(&q_mu);
    if (q_len == EVENTS_QUEUE_MAX) {       /* full: the oldest goes */
        q_head = (q_head + 1) % EVENTS_QUEUE_MAX;
        q_len--;
        q_dropped++;
    }
    q_ring[(q_head + q_len) % EVENTS_QUEUE_MAX] = *e;
    q_len++;
    pthread_mutex_unlock(&q_mu);
}

static void vadd(int once, const char *kind, int64_t voucher_id, const char *fmt, va_list ap)
{
    ev_t e;
    memset(&e, 0, sizeof e);
    e.ts = clock_wall_ms();
    e.voucher_id = voucher_id;
    e.once = once;
    snprintf(e.kind, sizeof e.kind, "%s", kind);
    vsnprintf(e.text, sizeof e.text, fmt, ap);
    queue_put(&e);
}

void events_add(const char *kind, int64_t voucher_id, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vadd(0, kind, voucher_id, fmt, ap);
    va_end(ap);
}

void events_once(const char *kind, int64_t voucher_id, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vadd(1, kind, voucher_id, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ writing */

typedef struct flush {
    int n;
    ev_t ev[FLUSH_MAX];
} flush_t;

static void on_flushed(redisReply *rep, void *priv)
{
    flush_t *f = priv;
    tick_st.inflight = 0;
    if (rep == NULL || rep->type != REDIS_REPLY_INTEGER) {
        /* not written: back to the front of the queue, in order, for the next tick (an
         * answer lost after Redis ran the script writes them twice: rare and harmless) */
        pthread_mutex_lock(&q_mu);
        for (int i = f->n - 1; i >= 0; i--) {
            if (q_len == EVENTS_QUEUE_MAX) {
                q_dropped++;
                continue;
            }
            q_head = (q_head + EVENTS_QUEUE_MAX - 1) % EVENTS_QUEUE_MAX;
            q_ring[q_head] = f->ev[i];
            q_len++;
        }
        pthread_mutex_unlock(&q_mu);
    }
    free(f);
}

static void ev_json(sb_t *s, const ev_t *e, const char *instance)
{
    sb_printf(s, "{\"ts\":%llu,\"kind\":", (unsigned long long)e->ts);
    sb_json_str(s, e->kind, strlen(e->kind));
    sb_puts(s, ",\"instance\":");
    sb_json_str(s, instance, strlen(instance));
    if (e->voucher_id != 0)
        sb_printf(s, ",\"voucher\":%lld", (long long)e->voucher_id);
    sb_puts(s, ",\"text\":");
    sb_json_str(s, e->text, strlen(e->text));
    sb_puts(s, "}");
}

static void flush(worker_t *w)
{
    if (tick_st.inflight)
        return;
    flush_t *f = xmalloc(sizeof *f);
    uint64_t dropped;
    pthread_mutex_lock(&q_mu);
    f->n = q_len < FLUSH_MAX ? q_len : FLUSH_MAX;
    for (int i = 0; i < f->n; i++)
        f->ev[i] = q_ring[(q_head + i) % EVENTS_QUEUE_MAX];
    q_head = (q_head + f->n) % EVENTS_QUEUE_MAX;
    q_len -= f->n;
    dropped = q_dropped;
    q_dropped = 0;
    pthread_mutex_unlock(&q_mu);
    if (dropped > 0 && f->n > 0) {
        ev_t *e = &f->ev[f->n - 1];
        size_t l = strlen(e->text);
        snprintf(e->text + l, sizeof e->text - l, " (%llu earlier events lost: queue full)",
                 (unsigned long long)dropped);
    }
    if (f->n == 0) {
        free(f);
        return;
    }
    /* EVAL script 1 key, then ARGV: keep, ttl, and per event its once-key and JSON */
    int argc = 6 + 2 * f->n;
    const char **argv = xcalloc((size_t)argc, sizeof *argv);
    size_t *lens = xcalloc((size_t)argc, sizeof *lens);
    sb_t *js = xcalloc((size_t)f->n * 2, sizeof *js);
    char keep[16], ttl[24];
    argv[0] = "EVAL";
    argv[1] = flush_lua;
    argv[2] = "1";
    argv[3] = KEY_BOARD_EVENTS;
    argv[4] = keep;
    lens[4] = (size_t)snprintf(keep, sizeof keep, "%d", EVENTS_KEEP);
    argv[5] = ttl;
    lens[5] = (size_t)snprintf(ttl, sizeof ttl, "%lld", (long long)EVENTS_TTL_MS);
    for (int i = 0; i < f->n; i++) {
        sb_t *once = &js[2 * i], *obj = &js[2 * i + 1];
        *once = (sb_t)SB_INIT;
        *obj = (sb_t)SB_INIT;
        if (f->ev[i].once)
            sb_printf(once, "%s%s:%lld", KEY_BOARD_EVENT_ONCE, f->ev[i].kind,
                      (long long)f->ev[i].voucher_id);
        ev_json(obj, &f->ev[i], w->app->name);
        argv[6 + 2 * i] = once->buf != NULL ? once->buf : "";
        lens[6 + 2 * i] = once->len;
        argv[7 + 2 * i] = obj->buf;
        lens[7 + 2 * i] = obj->len;
    }
    for (int i = 0; i < 4; i++)
        lens[i] = strlen(argv[i]);
    tick_st.inflight = 1;
    rds_command(w->rds, on_flushed, f, argc, argv, lens);
    for (int i = 0; i < 2 * f->n; i++)
        sb_free(&js[i]);
    free(js);
    free(argv);
    free(lens);
}

/* ------------------------------------------------------------ watching */

void events_tick(worker_t *w, const metrics_totals_t *t)
{
    int redis_up = t->redis_up > 0, sql_up = t->sql_up != 0;
    {
        if (tick_st.redis_up && !redis_up) {
            events_add(EV_REDIS_DOWN, 0, "Redis unreachable from %s", w->app->name);
        } else if (!tick_st.redis_up && redis_up) {
            events_add(EV_REDIS_UP, 0, "Redis reachable again from %s", w->app->name);
        } else if (redis_up && t->redis_reconnects > tick_st.reconnects) {
            /* down and back between two ticks: a restart within a second */
            events_add(EV_REDIS_DOWN, 0, "Redis connection lost from %s", w->app->name);
            events_add(EV_REDIS_UP, 0, "Redis reconnected from %s within a second",
                       w->app->name);
        }
        if (tick_st.seen && tick_st.sql_up && !sql_up)
            events_add(EV_SQL_DOWN, 0, "SQL unreachable from %s", w->app->name);
        else if (tick_st.seen && !tick_st.sql_up && sql_up)
            events_add(EV_SQL_UP, 0, "SQL reachable again from %s", w->app->name);
    }
    tick_st.seen = 1;
    tick_st.redis_up = redis_up;
    tick_st.sql_up = sql_up;
    tick_st.reconnects = t->redis_reconnects;
    if (redis_up)
        flush(w);
}

void events_json(sb_t *out, const redisReply *rep)
{
    sb_puts(out, "[");
    int n = 0;
    for (size_t i = 0; rep != NULL && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e == NULL || e->type != REDIS_REPLY_STRING)
            continue;
        json_t *j = json_loadb(e->str, e->len, 0, NULL);
        int ok = j != NULL && json_is_object(j);
        json_decref(j);
        if (ok) {
            sb_puts(out, n++ ? "," : "");
            sb_append(out, e->str, e->len);
        }
    }
    sb_puts(out, "]");
}
