/* orders.h -- a user's flash-sale orders as the API shows them: the persisted ones from
 * SQL merged with admitted orders the writer has not written yet.
 *
 * Where the not-yet-persisted orders come from: the buyer hashes the admission already
 * keeps, seckill:order:{tag} (userId -> orderId, one per stock bucket; keys.h), so a
 * grab writes nothing for lookups. A lookup asks one HGET per bucket that may hold an
 * order not yet in SQL: the members of seckill:streams (every bucket that can sell is
 * registered there before it can sell: publish.c, rebuild.c) minus
 * those in {seckill:streams}:drained -- one SDIFF, both in one slot -- then the HGETs,
 * pipelined (on a Redis Cluster each goes to its bucket's node).
 *
 * The drained set, kept by the order writers (writer.c, "drained"): a bucket goes in once
 * its voucher's sale has ended by the clock of the Redis that holds its stream (the clock
 * admit.lua judges the window by) plus DRAIN_MARGIN_S, and its stream's group g1 has
 * nothing undelivered (lag 0) and nothing pending: every order it ever admitted has been
 * committed to SQL (the writer acks only after the commit), and no order can be admitted
 * there any more (a sale window never changes). So a lookup skips only buckets whose
 * orders SQL has, whatever the writer's outage was: with the writer down for an hour
 * nothing is marked and every registered bucket is asked. What a lookup costs: one SDIFF
 * plus one HGET per bucket of the vouchers on sale, upcoming, or ended and not yet fully
 * written (plus DRAIN_MARGIN_S) -- not per voucher ever sold once the writers keep up.
 * Only stream mode marks (queue mode's orders wait in a process's memory, invisible to
 * the stream); sync mode writes SQL before it answers and skips the Redis phase.
 *
 * No race between the two halves: a list reads Redis first and SQL second, so an order
 * the writer commits meanwhile is in a buyer hash of a bucket not yet drained, or in SQL;
 * by id reads SQL, then Redis, then SQL once more when Redis did not have it.
 *
 * A rebuild from SQL (rebuild.h) writes the buyer hash from SQL plus the orders still in
 * the stream, so lookups see the same orders before and after it.
 *
 * The former per-buyer index (seckill:orders-of:{u<id>}) is neither written nor read any
 * more: every order in it is also in its voucher's buyer hash, which lookups now ask
 * until the order is in SQL. Old keys can be deleted (docs/design.md, "Order lookups").
 *
 * The api layer (api_order.c) owns the HTTP side; this module owns the Redis and SQL
 * work and hands back plain records. Runs on the worker's thread. */
#ifndef SECKILL_ORDERS_H
#define SECKILL_ORDERS_H

#include <stddef.h>
#include <stdint.h>

struct worker;

#define ORDERS_OF_USER_MAX 100 /* of/me shows at most this many, newest first */

typedef struct orders_rec {
    int64_t id;
    int64_t user_id;
    int64_t voucher_id;
    int status;          /* 1 unpaid (the course's values) */
    int64_t create_time; /* epoch seconds */
    int64_t pay_time;    /* epoch seconds; 0: not paid (views only, below) */
    int persisted;       /* 0: admitted, not yet in SQL */
    int64_t refund_time; /* epoch seconds; 0: not refunded (views only: SQL's refund_time
                            of an order at 6) */
} orders_rec_t;

typedef enum {
    ORDERS_OK = 0,
    ORDERS_NOTFOUND, /* GET by id: no such order of this user */
    ORDERS_DB_DOWN,
    ORDERS_REDIS_DOWN,
    ORDERS_BUSY, /* the SQL job queue is full */
} orders_rc_t;

/* Called once on the worker's thread; recs (n of them, newest first) are valid only
 * during the call. ctx is the caller's. */
typedef void (*orders_done_fn)(void *ctx, orders_rc_t rc, const orders_rec_t *recs, size_t n);

/* Order order_id if it belongs to user_id (n = 1), else ORDERS_NOTFOUND: its status as
 * SQL has it (1 for one not written yet). For the lifecycle's decisions (life.c), which
 * read Redis's state themselves. */
void orders_get(struct worker *w, int64_t user_id, int64_t order_id, orders_done_fn done,
                void *ctx);

/* The views (GET /voucher-order/{id}, /of/me): the orders as the buyer should see them.
 * pay_time and refund_time from SQL (a second SQL read, for a paid or refunded order
 * only). In stream mode a decision
 * Redis made and the writer has not applied yet shows: an order SQL has at 1 (or 4) and
 * one not written yet get their state from the state hash beside their buyers hash
 * (seckill:ostate:{tag}, life.lua: c/t -> 4, p -> 2 with its time as pay_time, r -> 6) --
 * one HGET per such order, on its bucket's node (by id, the bucket from the voucher's
 * bucket count in SQL). An order of a drained bucket (orders.h above) is SQL's in a list. */
void orders_view(struct worker *w, int64_t user_id, int64_t order_id, orders_done_fn done,
                 void *ctx);
/* The user's orders, newest first, at most ORDERS_OF_USER_MAX, as orders_view shows them. */
void orders_of_user(struct worker *w, int64_t user_id, orders_done_fn done, void *ctx);

#endif
