/* store_int.h -- private to the store: what a SQL backend implements.
 *
 * store.c picks a backend by URL scheme and forwards every store.h call through the
 * backend's ops table. A backend's connection struct starts with `struct store` (its
 * first member), so a store_t * is both the generic handle and, cast back, the
 * backend's own. Adding MySQL means writing store_mysql.c with one more ops table and
 * one more line in store.c's scheme table; callers do not change.
 *
 * Only store*.c include this file. */
#ifndef SECKILL_STORE_INT_H
#define SECKILL_STORE_INT_H

#include <stdarg.h>
#include "store/store.h"

#define STORE_ERRLEN 512
#define STORE_EXEC_ARGS 8              /* store_exec: arguments at most */
#define STORE_ORDER_COLS 5             /* store_exec_orders: the columns of an order row */

struct store_ops;

struct store {
    const struct store_ops *ops;
    char err[STORE_ERRLEN];          /* last error, for store_errmsg() */
};

/* Every member is required. Arguments are checked by store.c before the call (s != NULL
 * and the out pointers the header says are required). */
typedef struct store_ops {
    const char *scheme;              /* e.g. "sqlite" */
    /* url is the whole database URL (the scheme matched this backend) */
    store_t *(*open)(const char *url, int timeout_ms, char *err, size_t errlen);
    void (*close)(store_t *s);
    int (*ping)(store_t *s);
    int (*user_by_phone)(store_t *s, const char *phone, store_user_t *out);
    int (*user_create)(store_t *s, const char *phone, const char *nick, store_user_t *out);
    int (*voucher_create)(store_t *s, store_voucher_t *v);
    int (*voucher_get)(store_t *s, int64_t id, store_voucher_t *out);
    int (*voucher_list)(store_t *s, int64_t shop_id, store_voucher_t **out, size_t *n);
    int (*seckill_ids)(store_t *s, int64_t **ids, size_t *n);
    int (*orders_write)(store_t *s, const store_order_t *orders, size_t n, size_t *inserted,
                        size_t *conflicts, size_t *fenced);
    int (*order_get)(store_t *s, int64_t id, store_order_t *out);
    int (*orders_of_user)(store_t *s, int64_t user_id, size_t max, store_order_t **out,
                          size_t *n);
    int (*voucher_counts)(store_t *s, int64_t voucher_id, int64_t *orders, int64_t *stock);
    /* optional (NULL: "not supported by this backend") */
    int (*order_sync)(store_t *s, const store_order_t *o, int *result);
    /* optional, NULL = "not supported by this backend" */
    int (*voucher_orders)(store_t *s, int64_t voucher_id, int64_t after_id, size_t max,
                          store_order_t **out, size_t *n);
    /* store_exec: nargs <= STORE_EXEC_ARGS, out != NULL */
    int (*exec)(store_t *s, const char *sql, const store_arg_t *args, int nargs, int retry,
                int64_t *out);
    /* store_exec_orders: as exec; out and n != NULL, set to no rows */
    int (*exec_orders)(store_t *s, const char *sql, const store_arg_t *args, int nargs,
                       store_order_t **out, size_t *n);
    int (*redis_epoch)(store_t *s, int64_t voucher_id, int bump, int64_t *epoch);
    int (*voucher_buckets)(store_t *s, int64_t voucher_id, int *buckets);
    int (*voucher_room)(store_t *s, int64_t voucher_id, store_room_t *room);
    int (*shop_get)(store_t *s, int64_t id, store_shop_t *out);
    /* q != NULL, q->limit >= 0, q->offset >= 0; out and n set to no rows */
    int (*shop_list)(store_t *s, const store_shop_query_t *q, store_shop_t **out, size_t *n);
    int (*shop_create)(store_t *s, store_shop_t *shop);
    int (*shop_update)(store_t *s, const store_shop_t *shop);
    int (*shop_types)(store_t *s, store_shop_type_t **out, size_t *n);
    /* the lifecycle's status CAS of each move (store__move_spec: from -> to with column
     * col = now, with give_unit the voucher's stock + 1), all in one transaction, in
     * order; each move's rc and was set on STORE_OK (was: the status found, from: moved
     * by this call); n >= 1, kinds checked by store.c */
    int (*orders_move)(store_t *s, store_move_t *moves, size_t n);
    /* store_payment_get: payment_id checked (1..STORE_PAYMENT_ID_MAX), out zeroed */
    int (*payment_get)(store_t *s, const char *payment_id, store_payment_t *out);
    /* store_refunds_due, store_voucher_payments: out and n set to no rows; max >= 1 */
    int (*refunds_due)(store_t *s, int64_t now, size_t max, store_refund_t **out, size_t *n);
    int (*voucher_payments)(store_t *s, int64_t voucher_id, int64_t after_order,
                            const char *after_payment, size_t max, store_refund_t **out,
                            size_t *n);
    /* store_refund_lease: payment_id checked, tries >= 0 */
    int (*refund_lease)(store_t *s, const char *payment_id, int tries, int64_t now,
                        int64_t until, int claim);
} store_ops_t;

extern const store_ops_t store_sqlite_ops;

/* A move's CAS (store_orders_move's kinds): 0, or -1 for an unknown kind. col is one of
 * the row's time columns, never client input. */
typedef struct store_move_spec {
    int from, to, give_unit;
    const char *col;
    int frees;      /* the moved row goes to tb_voucher_order_cancelled (kind 'f') */
} store_move_spec_t;
int store__move_spec(char kind, store_move_spec_t *spec);

/* The payment row a move writes (store_move_t): the status for a move whose own CAS
 * changed the order (changed) or not; 0 = write none (the event waits). */
int store__pay_row(const store_move_t *m, int changed, int was);

/* The SQL of a payment's rows, the same on both backends ("?" in order): */
#define STORE_PAY_GET_SQL                                                                  \
    "SELECT order_id, amount, status, create_time, refund_time FROM tb_voucher_payment "   \
    "WHERE payment_id = ?"
/* (payment_id, order_id, amount, status, create_time) */
#define STORE_PAY_INSERT_SQL                                                               \
    "INSERT INTO tb_voucher_payment (payment_id, order_id, amount, status, create_time) "  \
    "VALUES (?, ?, ?, ?, ?)"
/* (refund_time, payment_id) */
#define STORE_PAY_SENT_SQL                                                                 \
    "UPDATE tb_voucher_payment SET status = 6, refund_time = ? WHERE payment_id = ? AND "  \
    "status = 5"
/* (refund_time, update_time, order_id, order_id): the order refunded once none of its
 * payments is left to refund; table: "tb_voucher_order" or "tb_voucher_order_cancelled" */
#define STORE_PAY_ORDER_SENT_SQL(table)                                                     \
    "UPDATE " table " SET status = 6, refund_time = ?, update_time = ? WHERE id = ? AND "   \
    "status = 5 AND NOT EXISTS (SELECT 1 FROM tb_voucher_payment WHERE order_id = ? AND "   \
    "status = 5)"

/* Sync mode's refunds and the rebuild's payments (store_refund_t: payment_id, order_id,
 * amount, status, tries), the same on both backends. Due: (now, limit). */
#define STORE_REFUNDS_DUE_SQL                                                              \
    "SELECT p.payment_id, p.order_id, p.amount, p.status, COALESCE(l.tries, 0) FROM "     \
    "tb_voucher_payment p LEFT JOIN tb_refund_lease l ON l.payment_id = p.payment_id "    \
    "WHERE p.status = 5 AND COALESCE(l.next_at, 0) <= ? ORDER BY COALESCE(l.next_at, 0), " \
    "p.payment_id LIMIT ?"
/* (voucher, voucher, after_order, after_order, after_payment, limit) */
#define STORE_VOUCHER_PAYMENTS_SQL                                                         \
    "SELECT payment_id, order_id, amount, status, 0 FROM tb_voucher_payment WHERE "       \
    "order_id IN (SELECT id FROM tb_voucher_order WHERE voucher_id = ? UNION ALL SELECT "  \
    "id FROM tb_voucher_order_cancelled WHERE voucher_id = ?) AND (order_id > ? OR "       \
    "(order_id = ? AND payment_id > ?)) ORDER BY order_id, payment_id LIMIT ?"
/* The lease's claim of a refund never tried: (until, payment_id); ignore: the backend's
 * INSERT that skips an existing key ("OR IGNORE", "IGNORE"). */
#define STORE_LEASE_FIRST_SQL(ignore)                                                      \
    "INSERT " ignore " INTO tb_refund_lease (payment_id, tries, next_at) SELECT "          \
    "payment_id, 1, ? FROM tb_voucher_payment WHERE payment_id = ? AND status = 5"
/* ... of one tried before: (until, payment_id, tries, now, payment_id) */
#define STORE_LEASE_NEXT_SQL                                                               \
    "UPDATE tb_refund_lease SET tries = tries + 1, next_at = ? WHERE payment_id = ? AND "  \
    "tries = ? AND next_at <= ? AND EXISTS (SELECT 1 FROM tb_voucher_payment WHERE "       \
    "payment_id = ? AND status = 5)"
/* ... the holder's back-off: (until, payment_id, tries) */
#define STORE_LEASE_AGAIN_SQL                                                              \
    "UPDATE tb_refund_lease SET next_at = ? WHERE payment_id = ? AND tries = ?"

/* Sets s->err (printf-style) and returns STORE_ERR, for `return store__fail(s, ...)`. */
int store__fail(store_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
