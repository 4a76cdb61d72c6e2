/* rebuild_life.h -- the order lifecycle's Redis state, rebuilt from SQL with a voucher's keys
 * (rebuild.h; docs/lifecycle.md "Rebuild from SQL").
 *
 * life.lua decides every cancel, payment and timeout from seckill:ostate:{tag}
 * (orderId -> "<state> <ts> <userId>") and counts them in the voucher hash (`paid`,
 * `timedout`, `returned`). A rebuild that brought back the buyers and the stock but not
 * these would let the payment sweep time out an order a second time (the unit returned
 * twice), take a payment for a cancelled order, and show the board zeros. So the rebuild
 * gathers each buyer's order state, from three sources, later ones winning where they move
 * an order forward (unpaid -> c/t/p, c/t -> r; nothing goes back):
 *
 *   1. SQL's status: 2, 3 -> p; 4 -> t when its update time (the decision's second, the
 *      event's ts) is at least the payment timeout after the order's creation (its id's
 *      second), else c; 5, 6 -> r;
 *   2. the events of a surviving order stream (a decision SQL does not have yet: the
 *      writer had not applied it when Redis lost the hash);
 *   3. a surviving state hash (Redis's own decisions): its order states win, and its
 *      payment answers ("<orderId>/<paymentId>") are kept.
 *
 * The payment answers come back from SQL too (tb_voucher_payment, rebuild_life_payments),
 * and the refunds SQL still has at 5 go back to their bucket's refund outbox.
 *
 * The counters follow from the states: `returned` = c + t + r, `paid` = p, `timedout` = t
 * (an order refunded after its timeout, r, counts as a buyer's cancel: SQL does not say
 * which it was).
 *
 * A cancel or timeout that freed its buyer (--cancel-frees-buyer, docs/lifecycle.md "A
 * cancelled buyer") is told from the data, whatever the flag is now: its order is in
 * tb_voucher_order_cancelled (rebuild_life_aside), or its event entry carries `free 1`, or
 * its buyer has a later order. Such an order keeps its state (a cancel or payment of it
 * answers as before) and counts in `returned` and in `freed`, but its buyer is not a buyer
 * by it: the buyers are the orders not freed (rebuild_life_buyers), one per user. Pure bookkeeping plus blocking reads/writes on the caller's connection,
 * each with its socket timeout as the deadline. */
#ifndef SECKILL_REBUILD_LIFE_H
#define SECKILL_REBUILD_LIFE_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct redisContext;
struct pairs;

typedef struct rebuild_life_order {
    int64_t order_id;
    int64_t user_id;
    int64_t ts;             /* the state's second (0 while unpaid) */
    char st;                /* 0 unpaid, 'c', 't', 'p', 'r' (life.lua's states) */
    char freed;             /* its cancel or timeout freed the buyer */
    char sql;               /* SQL has it (either table): not an entry of a new stream */
} rebuild_life_order_t;

typedef struct rebuild_life_extra {
    int bucket;
    char *field, *value;    /* a surviving state hash's field that is not an order's state */
} rebuild_life_extra_t;

/* A payment SQL has of one of the orders (tb_voucher_payment). */
typedef struct rebuild_life_pay {
    char id[STORE_PAYMENT_ID_MAX + 1];
    int64_t order_id, user_id, amount;
    int status;             /* 2 taken, 5 to refund, 6 refunded */
} rebuild_life_pay_t;

typedef struct rebuild_life {
    rebuild_life_order_t *v;
    size_t n, cap;
    int sorted;
    rebuild_life_extra_t *x;
    size_t nx;
    rebuild_life_pay_t *pay;    /* rebuild_life_payments */
    size_t npay;
    int64_t events;         /* stream events that moved an order (rebuild_life_events) */
    int64_t kept;           /* surviving states that moved an order (rebuild_life_keep) */
} rebuild_life_t;

typedef struct rebuild_life_counts {
    int64_t paid, timedout, returned, freed, states;
} rebuild_life_counts_t;

/* A buyer's order with its SQL status (1..6; 0 for an order SQL does not have yet) and the
 * row's update time; pay_timeout_s (0: unknown) tells a timeout from a cancel. */
void rebuild_life_add(rebuild_life_t *l, int64_t order_id, int64_t user_id, int status,
                      int64_t update_s, int pay_timeout_s);
/* The orders of tb_voucher_order_cancelled (status 4, 5, 6): freed. An order already added
 * (the writer moved it aside between the two tables' reads) is marked, not added again. */
void rebuild_life_aside(rebuild_life_t *l, const rebuild_life_order_t *v, size_t n);
/* SQL's payments of the voucher's orders, after the orders (either table) are added: each
 * one of an order here gets its answer back in the state hash (rebuild_life_stage:
 * "<orderId>/<paymentId>" -> 0 for a row at 2, 2 for 5 and 6, as life.lua answers them),
 * so the same notice after the loss answers as before; one at 5 (退款中) goes back to its
 * bucket's refund outbox (rebuild_life_requeue). 0, or -1 (err) when SQL failed. */
int rebuild_life_payments(store_t *st, int64_t voucher_id, rebuild_life_t *l, char *err,
                          size_t errlen);
/* Bucket b of k's payments at 5 that its refund outbox (seckill:refunds:{tag}) lacks, added
 * there as life.lua adds a refund (order, payment, amount, user): the order writer sends
 * them (writer_refund.c: while SQL's row says 5). An entry that outlived the loss is not
 * added twice. Run before the voucher is published: a rebuild that dies after it leaves the
 * entries, which the next one finds. 0 or -1 (err). */
int rebuild_life_requeue(struct redisContext *c, const char *tag, const rebuild_life_t *l,
                         int b, int k, char *err, size_t errlen);
/* The orders of a surviving stream, (user, order) sorted, that SQL does not have: added
 * unpaid, each once. */
void rebuild_life_unknown(rebuild_life_t *l, const struct pairs *cur);
/* Source 2: every event entry of stream ks. 0, or -1 (err) when Redis failed. */
int rebuild_life_events(struct redisContext *c, const char *ks, rebuild_life_t *l, char *err,
                        size_t errlen);
/* Source 3: the surviving state hash ko of bucket b (absent: nothing). 0 or -1 (err). */
int rebuild_life_keep(struct redisContext *c, const char *ko, int b, rebuild_life_t *l,
                      char *err, size_t errlen);
/* After every source: the buyers, (user, order) sorted by user, one per user -- each
 * user's order not freed; of two such (a freeing event lost with the stream), the later
 * one, the earlier then counted freed. */
void rebuild_life_buyers(rebuild_life_t *l, struct pairs *out);
/* The counters of the orders whose buyer's home is bucket b of k. */
void rebuild_life_count(const rebuild_life_t *l, int b, int k, rebuild_life_counts_t *out);
/* Writes bucket b's states (and kept fields) into the staging hash kt, which the caller
 * emptied (left absent when there is nothing). 0 or -1 (err). */
int rebuild_life_stage(struct redisContext *c, const char *kt, const rebuild_life_t *l, int b,
                       int k, char *err, size_t errlen);
void rebuild_life_free(rebuild_life_t *l);

#endif
