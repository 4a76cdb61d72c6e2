/* life.h -- an order's lifecycle after admission: the decisions (src/order/life.lua, atomic
 * in Redis on the buyer's stock bucket) and the checks in front of them (docs/lifecycle.md).
 *
 * Cancel (POST /voucher-order/{id}/cancel): the order is looked up as GET /voucher-order/{id}
 * does (orders.h: SQL, or the buyer hashes for an order not yet written), so only its
 * buyer can cancel it. An unpaid one is then decided by life.lua on the bucket that
 * admitted it: state c, the unit back in the bucket's stock, and an event entry behind the
 * order's own in the bucket's stream, which the order writer turns into status 4 and SQL
 * stock + 1 (store_order_cancel). In sync mode (orders only in SQL) it is that SQL call
 * alone. Queue mode keeps its orders in a process's memory, and the lab's steps are the
 * course's wrong ones: not offered there.
 *
 * Runs on the worker's thread; the grab path costs nothing (nothing here is on it). */
#ifndef SECKILL_LIFE_H
#define SECKILL_LIFE_H

#include <stdint.h>

struct worker;

typedef enum {
    LIFE_DONE = 0,      /* cancelled now: the unit is back on sale */
    LIFE_ALREADY,       /* cancelled or timed out before: success, nothing returned twice */
    LIFE_PAID,          /* paid or used: refused */
    LIFE_REFUNDED,      /* refunding or refunded: refused */
    LIFE_NOTFOUND,      /* no such order of this user */
    LIFE_UNSUPPORTED,   /* the order mode keeps no lifecycle (queue mode) */
    LIFE_REDIS_DOWN,
    LIFE_DB_DOWN,
    LIFE_BUSY,          /* the SQL job queue is full */
} life_rc_t;

typedef void (*life_done_fn)(void *ctx, life_rc_t rc);

/* Cancels order_id of user_id; done runs once, on w's thread. */
void life_cancel(struct worker *w, int64_t user_id, int64_t order_id, life_done_fn done,
                 void *ctx);

#endif
