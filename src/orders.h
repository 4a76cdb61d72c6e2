/* orders.h -- a user's flash-sale orders as the API shows them: the persisted ones from
 * SQL merged with admitted orders the writer has not written yet.
 *
 * Where the not-yet-persisted orders come from: every admitted order is also recorded in
 * its buyer's order index, seckill:orders-of:{u<userId>} (hash voucherId -> orderId;
 * keys.h), so a lookup costs ONE Redis command (HGETALL of that hash) and one SQL job,
 * whatever the number of vouchers. On a single Redis admit.lua writes the index with the
 * admission (admission.c passes the buyers' index keys). The index lives in the user's
 * slot, not the voucher's, so on a Redis Cluster the script cannot write it: there the
 * server writes it itself, right after the script admits the order and before the client
 * hears of it (orders_note_admitted), on the same connection -- a later lookup through
 * this instance finds it. If the instance dies between the two commands, the order is
 * still in the voucher's stream and shows up here once the writer has put it into SQL.
 * Entries are never removed (one field per order, like the voucher's buyer hash); a
 * lookup ignores those already in SQL. docs/design.md, "Order lookups".
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
    int persisted;       /* 0: admitted, not yet in SQL */
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

/* Order order_id if it belongs to user_id (n = 1), else ORDERS_NOTFOUND. */
void orders_get(struct worker *w, int64_t user_id, int64_t order_id, orders_done_fn done,
                void *ctx);
/* The user's orders, newest first, at most ORDERS_OF_USER_MAX. */
void orders_of_user(struct worker *w, int64_t user_id, orders_done_fn done, void *ctx);

/* Records an admitted order in its buyer's index (fire and forget: a failure only
 * delays its visibility until the writer persists it). Only on a Redis Cluster: on a
 * single Redis admit.lua has already written it. */
void orders_note_admitted(struct worker *w, int64_t user_id, int64_t voucher_id, int64_t order_id);

#endif
