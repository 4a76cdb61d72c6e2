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
 * Pay (POST /pay/notify, signature checked by api_pay.c with paykey.h): the order as SQL
 * has it, the amount against its voucher's payValue, then life.lua: an unpaid order is
 * taken (state p, event p: status 2 with pay_time); a cancelled or timed-out one is not
 * (state r, event r: status 5, 6 once refunded) and the payment is refunded through the
 * bucket's refund outbox; the same payment again answers as before and changes nothing.
 * Each payment's event carries it, for its row in tb_voucher_payment; until that row is in
 * SQL a claim in Redis (seckill:payid:<id>) keeps the id to its first order. Sync mode: one SQL
 * transaction (store.h move 'y') decides and writes the row; the writer sends its refund.
 *
 * Runs on the worker's thread; the grab path costs nothing (nothing here is on it). */
#ifndef SECKILL_LIFE_H
#define SECKILL_LIFE_H

#include <stdint.h>

struct worker;

typedef enum {
    LIFE_DONE = 0,      /* cancelled now: the unit is back on sale; pay: taken now */
    LIFE_ALREADY,       /* cancelled or timed out before: success, nothing returned twice;
                           pay: this payment was taken before */
    LIFE_PAID,          /* paid or used: refused */
    LIFE_REFUNDED,      /* pay: this payment is refunded (the order was cancelled or timed
                           out, or paid by another payment) */
    LIFE_BAD_AMOUNT,    /* pay: not the voucher's payValue */
    LIFE_NOT_YET,       /* pay: the order is not in SQL (yet): the provider sends it again */
    LIFE_NOTFOUND,      /* no such order of this user */
    LIFE_UNSUPPORTED,   /* the order mode keeps no lifecycle (queue mode) */
    LIFE_REDIS_DOWN,
    LIFE_RETRY,         /* --redis-wait-replicas: decided, but not yet on N replicas: ask
                           again (the retry answers from the decision once they have it) */
    LIFE_DB_DOWN,
    LIFE_BUSY,          /* the SQL job queue is full */
} life_rc_t;

typedef void (*life_done_fn)(void *ctx, life_rc_t rc);

/* Cancels order_id of user_id; done runs once, on w's thread. */
void life_cancel(struct worker *w, int64_t user_id, int64_t order_id, life_done_fn done,
                 void *ctx);

/* A payment notice whose signature was checked: payment_id (1..LIFE_PAYMENT_ID_MAX
 * characters of [A-Za-z0-9_.-]) paid amount (fen) for order_id. The order is read from
 * SQL (its user, and its voucher's payValue, which amount must equal), then decided by
 * life.lua on its bucket; a refund decided there waits in the bucket's outbox for the
 * order writer (src/writer/writer_refund.c: --refund-command, env SECKILL_ORDER_ID,
 * SECKILL_PAYMENT_ID, SECKILL_AMOUNT). Sync mode: SQL decides (a payment id of another
 * order: LIFE_NOTFOUND), and its refunds (the payment rows at 5) are sent by the order
 * writer from SQL, under a lease per row (writer_refund.c). Stream and sync mode (else
 * LIFE_UNSUPPORTED). done runs once, on w's thread. */
#define LIFE_PAYMENT_ID_MAX 64
void life_pay(struct worker *w, int64_t order_id, const char *payment_id, int64_t amount,
              life_done_fn done, void *ctx);

/* --refund-command's environment for one refund (docs/configuration.md): SECKILL_ORDER_ID,
 * SECKILL_PAYMENT_ID, SECKILL_AMOUNT (fen); env is the NULL-ended list runcmd takes, pointing
 * into this struct (writer_refund.c's sender, of the outbox and of sync mode's rows). */
typedef struct life_refund_env {
    char order[40], payment[LIFE_PAYMENT_ID_MAX + 32], amount[40];
    const char *env[4];
} life_refund_env_t;
void life_refund_env(life_refund_env_t *e, int64_t order_id, const char *payment_id,
                     int64_t amount);

#endif
