/* events.h -- the sale board's event log: what happened to the service and its sales,
 * kept in Redis for every instance to show (newest first).
 *
 * events_add() may be called from any thread (a worker, the writer, the rebuild watch,
 * the redis child's supervisor): it only appends to an in-memory queue under a mutex.
 * Worker 0 writes the queue to Redis on the board's one-second tick (events_flush), as
 * one EVAL on the {board} slot's node: LPUSH each event, LTRIM the list to EVENTS_KEEP
 * entries and renew its TTL (EVENTS_TTL_MS). While Redis does not answer, the events
 * stay queued (at most EVENTS_QUEUE_MAX; the oldest are dropped beyond that, counted in
 * the next event) and are written with their own times once it is back, so "Redis down"
 * is in the log even though it could not be written when it happened.
 *
 * An event is one JSON object: {"ts":wall ms,"kind":"redis_down",...,"instance":name,
 * "voucher":id (only for a sale's events),"text":"..."}. events_once() adds an event
 * that is written at most once per (kind, voucher) across all instances (a SET NX key
 * beside the list), for what every instance sees at about the same time (a sale sold
 * out, opened, ended). */
#ifndef SECKILL_EVENTS_H
#define SECKILL_EVENTS_H

#include <stdint.h>

struct worker;
struct metrics_totals;

/* Its keys, in the board's slot {board} (board.h): the list, and the once-keys. */
#define KEY_BOARD_EVENTS "seckill:{board}:events"
#define KEY_BOARD_EVENT_ONCE "seckill:{board}:event-once:"   /* + kind ":" voucherId */

#define EVENTS_KEEP 200                            /* entries kept in the Redis list */
#define EVENTS_TTL_MS (7LL * 24 * 3600 * 1000)     /* the list and the once-keys live a week */
#define EVENTS_QUEUE_MAX 256                       /* queued here while Redis is away */

/* Kinds used by the service (free text is fine for others, [a-z_] only). */
#define EV_REDIS_DOWN "redis_down"
#define EV_REDIS_UP "redis_up"
#define EV_SQL_DOWN "sql_down"
#define EV_SQL_UP "sql_up"
#define EV_REDIS_RESTART "redis_restart"           /* the private redis-server restarted */
#define EV_REBUILD "rebuild"
#define EV_FAILOVER "failover"
#define EV_REPLICAS_LOW "replicas_low"             /* replicas below the promise */
#define EV_SALE_OPENED "sale_opened"
#define EV_SALE_SOLD_OUT "sale_sold_out"
#define EV_SALE_ENDED "sale_ended"
#define EV_SALE_PAUSED "sale_paused"
#define EV_SALE_RESUMED "sale_resumed"
#define EV_SALE_EXTENDED "sale_extended"

/* Queues an event (voucher_id 0: not a sale's). Any thread; never blocks on I/O. */
void events_add(const char *kind, int64_t voucher_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same, written only if no instance wrote (kind, voucher_id) within EVENTS_TTL_MS. */
void events_once(const char *kind, int64_t voucher_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Worker 0, each board tick: notes Redis and SQL going down and coming back from this
 * instance's counters (t: metrics_sum), then writes the queue to Redis. */
void events_tick(struct worker *w, const struct metrics_totals *t);

/* Appends the newest `max` events as a JSON array (an LRANGE reply's elements, each
 * checked to be an object), for the board's data call. */
struct redisReply;
struct sb;
void events_json(struct sb *out, const struct redisReply *lrange);

#endif
