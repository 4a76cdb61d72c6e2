/* store.h -- SQL behind one interface: SQLite and MySQL/MariaDB backends.
 *
 * A store_t is one connection, used by one thread at a time (the order writer has its
 * own; each job-pool thread has its own). The backend is chosen by URL scheme
 * (sqlite:PATH, mysql://...). No engine type leaks out of store_*.c.
 *
 * Every call has a deadline (config sql_timeout_ms): it returns STORE_ERR rather than
 * wait longer (SQLite: busy timeout + progress handler; MariaDB: read/write timeouts).
 * Calls return STORE_OK, STORE_NOTFOUND or STORE_ERR; on STORE_ERR store_errmsg() says why.
 *
 * Schema (sql/schema.sqlite.sql, sql/schema.mysql.sql, built in): the course's tb_user, tb_voucher,
 * tb_seckill_voucher, tb_voucher_order, plus UNIQUE(user_id, voucher_id) on orders, and
 * tb_voucher_order_cancelled (--cancel-frees-buyer's cancelled orders, same columns),
 * tb_voucher_payment (one row per provider payment) and tb_refund_lease (sync mode's
 * refund sends).
 * store_open() creates/migrates it. Times are epoch seconds here; the backends store them
 * as the engine's own datetime type in server local time. */
#ifndef SECKILL_STORE_H
#define SECKILL_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct store store_t;

enum { STORE_OK = 0, STORE_NOTFOUND = 1, STORE_ERR = -1 };

typedef struct store_user {
    int64_t id;
    char phone[16];
    char nick_name[64];
    char icon[256];
} store_user_t;

/* A flash-sale voucher's waiting room (src/room/room.h): admit_per_s 0 = none. */
typedef struct store_room {
    int64_t admit_per_s;
    int pass_ttl_s;
    int bot_gate;
} store_room_t;

typedef struct store_voucher {
    int64_t id;                 /* out on create */
    int64_t shop_id;
    char *title, *sub_title, *rules;   /* owned by the caller on create; by the list on list */
    int64_t pay_value, actual_value;
    int type;                   /* 0 normal, 1 flash sale */
    int status;                 /* 1 on shelf */
    int is_seckill;             /* has a tb_seckill_voucher row */
    int64_t stock;              /* flash sale only */
    int64_t begin_time, end_time; /* flash sale only, epoch seconds */
    int buckets;                /* flash sale only, on create: stock buckets K (0 or 1: none);
                                   K > 1 is kept in tb_seckill_buckets (store_voucher_buckets) */
    store_room_t room;          /* flash sale only, on create: its waiting room (admit_per_s 0:
                                   none), kept in tb_seckill_room (store_voucher_room) */
} store_voucher_t;

typedef struct store_order {
    int64_t id;
    int64_t user_id;
    int64_t voucher_id;
    int status;                 /* 1 unpaid ... 6 refunded */
    int64_t create_time;        /* epoch seconds */
    int64_t epoch;              /* store_orders_write: the voucher's Redis generation the
                                   order was admitted under (0 until a rebuild); or
                                   STORE_EPOCH_ANY: write it whatever the generation */
} store_order_t;

#define STORE_EPOCH_ANY (-1)

/* Opens (creating the file and schema if needed). On failure returns NULL and writes a
 * one-line reason into err. */
store_t *store_open(const char *url, int timeout_ms, char *err, size_t errlen);
void store_close(store_t *s);                 /* NULL is fine */
const char *store_errmsg(store_t *s);        /* last error, valid until the next call */
int store_ping(store_t *s);

/* Users. */
int store_user_by_phone(store_t *s, const char *phone, store_user_t *out);
/* Inserts a user with this phone and nick name (icon ""), filling out. If the phone
 * exists already (a concurrent login), returns that user instead. */
int store_user_create(store_t *s, const char *phone, const char *nick, store_user_t *out);

/* Vouchers. Creates tb_voucher (+ tb_seckill_voucher when v->is_seckill) in one
 * transaction and sets v->id. */
int store_voucher_create(store_t *s, store_voucher_t *v);
/* One voucher by id (status any). Strings in out are malloc'ed: free with
 * store_voucher_clear(). */
int store_voucher_get(store_t *s, int64_t id, store_voucher_t *out);
/* All status-1 vouchers of a shop, in id order. *out is a malloc'ed array of *n entries:
 * free with store_voucher_list_free(). */
int store_voucher_list(store_t *s, int64_t shop_id, store_voucher_t **out, size_t *n);
/* Ids of all flash-sale vouchers (for the order writer and for order lookups). */
int store_seckill_ids(store_t *s, int64_t **ids, size_t *n);   /* free(*ids) */
void store_voucher_clear(store_voucher_t *v);
void store_voucher_list_free(store_voucher_t *v, size_t n);

/* Shops and shop types (the course's tb_shop, tb_shop_type; read by src/api/api_shop.c).
 * Strings are inline and sized for the course's VARCHAR lengths in UTF-8 bytes; a longer
 * value in SQL is cut. x, y: longitude, latitude; score: 1-5 times 10; times epoch s. */
typedef struct store_shop {
    int64_t id;                 /* out on create */
    char name[520];             /* VARCHAR(128) */
    int64_t type_id;
    char images[4100];          /* VARCHAR(1024), comma-separated URLs */
    char area[520];             /* VARCHAR(128), "" when NULL */
    char address[1024];         /* VARCHAR(255) */
    double x, y;
    int64_t avg_price;          /* -1 when NULL */
    int64_t sold, comments, score;
    char open_hours[132];       /* VARCHAR(32), "" when NULL */
    int64_t create_time, update_time;
} store_shop_t;

typedef struct store_shop_type {
    int64_t id;
    char name[132];             /* VARCHAR(32) */
    char icon[1024];            /* VARCHAR(255) */
    int64_t sort;
    int64_t create_time, update_time;
} store_shop_type_t;

/* A page of shops, in id order: those of type_id (0: any type) whose name contains name
 * (NULL or "": any; SQL LIKE, so '%' and '_' in it are wildcards), rows offset ..
 * offset+limit-1. *out malloc'ed (free()), *n rows. */
typedef struct store_shop_query {
    int64_t type_id;
    const char *name;
    int64_t offset, limit;
} store_shop_query_t;

int store_shop_get(store_t *s, int64_t id, store_shop_t *out);
int store_shop_list(store_t *s, const store_shop_query_t *q, store_shop_t **out, size_t *n);
/* Inserts a shop (its id and times are set here) and sets shop->id. */
int store_shop_create(store_t *s, store_shop_t *shop);
/* Overwrites every member of shop->id's row (update_time now); STORE_NOTFOUND if none. */
int store_shop_update(store_t *s, const store_shop_t *shop);
/* All shop types ordered by sort, then id. *out malloc'ed (free()). */
int store_shop_types(store_t *s, store_shop_type_t **out, size_t *n);

/* Orders. Writes a batch in ONE transaction: each order inserted unless its id or its
 * (user, voucher) pair exists already (a replay is a no-op), and each voucher's
 * tb_seckill_voucher.stock decremented by the number of its orders actually inserted.
 * *inserted receives that number. Either all of it commits or none (STORE_ERR). An id
 * that exists with a different user/voucher is a collision: counted in *conflicts and
 * logged, never overwritten.
 *
 * Fencing: an order whose epoch is not its voucher's current Redis generation (see
 * store_redis_epoch) was admitted by a Redis state that a rebuild has since replaced
 * (the rebuild counted SQL without it): it is not written, but logged and counted in
 * *fenced (may be NULL). The check and the inserts share the transaction, under the
 * voucher's lock, so a rebuild's bump and a batch are strictly ordered. */
int store_orders_write(store_t *s, const store_order_t *orders, size_t n, size_t *inserted,
                       size_t *conflicts, size_t *fenced);
int store_order_get(store_t *s, int64_t id, store_order_t *out);
/* A user's orders, newest first, at most max. *out malloc'ed (free()). */
int store_orders_of_user(store_t *s, int64_t user_id, size_t max, store_order_t **out, size_t *n);

/* The order lifecycle (docs/lifecycle.md): an unpaid order (status 1) becomes cancelled
 * (4) and its voucher's SQL stock gets the unit back, in one transaction -- a CAS on the
 * status, so applying the same cancel twice returns one unit. *was receives the status
 * the order had (1: cancelled by this call; anything else: nothing changed). now (epoch
 * seconds) is the row's update_time. STORE_NOTFOUND: no such order. */
int store_order_cancel(store_t *s, int64_t order_id, int64_t now, int *was);
/* The same cancel for --cancel-frees-buyer: the cancelled row then leaves tb_voucher_order
 * for tb_voucher_order_cancelled (same columns, no UNIQUE(user_id, voucher_id)), in the same
 * transaction, so its buyer may order the voucher again. Reads of one order or of a user's
 * orders, the refund below and store_voucher_orders see both tables; store_orders_write
 * never writes an order again that was moved there (a replay after a crash). */
int store_order_cancel_free(store_t *s, int64_t order_id, int64_t now, int *was);
/* The same CAS for a payment taken: 1 -> 2 with pay_time = now. */
int store_order_pay(store_t *s, int64_t order_id, int64_t now, int *was);
/* ... and for a payment to refund because the order was cancelled first: 4 -> 5 (退款中;
 * the unit went back with the cancel), in whichever table holds the order. */
int store_order_refund(store_t *s, int64_t order_id, int64_t now, int *was);

/* A payment (tb_voucher_payment, one row per provider payment id): the provider's id,
 * what it paid, and its status: 2 taken (the order paid), 5 to refund (退款中), 6 refunded
 * (refund_time: when the refund was sent). */
#define STORE_PAYMENT_ID_MAX 64
typedef struct store_payment {
    int64_t order_id;
    int64_t amount;
    int status;
    int64_t create_time, refund_time;   /* epoch seconds; refund_time 0 until sent */
} store_payment_t;
int store_payment_get(store_t *s, const char *payment_id, store_payment_t *out);

/* A payment as sync mode's refund sender (src/writer/writer_refund.c) and the rebuild of
 * Redis (src/rebuild/rebuild_life.h) read it. */
typedef struct store_refund {
    char payment_id[STORE_PAYMENT_ID_MAX + 1];
    int64_t order_id;
    int64_t amount;
    int status;     /* 2 taken, 5 to refund, 6 refunded */
    int tries;      /* store_refunds_due: the sends claimed so far (store_refund_lease) */
} store_refund_t;
/* The payments at 5 whose send is due at now (epoch seconds): never tried, or their lease
 * (tb_refund_lease.next_at: a send's lease, or a failed send's back-off) ended; the
 * longest due first, at most max. *out malloc'ed (free()), *n rows. */
int store_refunds_due(store_t *s, int64_t now, size_t max, store_refund_t **out, size_t *n);
/* One refund's lease (tb_refund_lease), so one sender at a time sends it. claim: the row
 * at 5 whose tries are still `tries` and whose lease ended by now is taken as tries + 1
 * until `until` -- STORE_OK taken, STORE_NOTFOUND not (another sender took it, or it is 6).
 * !claim: the holder (at `tries`) sets its end to `until` (a failed send's back-off; now
 * unused). */
int store_refund_lease(store_t *s, const char *payment_id, int tries, int64_t now,
                       int64_t until, int claim);
/* The payments of a voucher's orders (either order table), by (order_id, payment_id) after
 * (after_order, after_payment) -- (0, "") from the start -- at most max; tries 0. *out
 * malloc'ed (free()), *n rows; *n < max at the end. */
int store_voucher_payments(store_t *s, int64_t voucher_id, int64_t after_order,
                           const char *after_payment, size_t max, store_refund_t **out,
                           size_t *n);

/* The same CAS moves of a batch, in one transaction (the order writer's events): kind
 * 'c' a cancel (store_order_cancel), 'f' a cancel that frees the buyer
 * (store_order_cancel_free), 'p' a payment (1 -> 2), 'r' a refund due (4 -> 5);
 * and two with a payment only: 'y' sync mode's payment (1 -> 2, else 4 -> 5; the payment
 * row 2 when the order took it, else 5), 's' a refund sent (the payment row 5 -> 6 with
 * refund_time, and its order 5 -> 6 with refund_time once no payment of it is left to
 * refund). Applied in array order. r and s find an order moved to tb_voucher_order_cancelled
 * there.
 *
 * With payment_id set (kinds p, r, y, s), the payment's row moves with the order: p, r, y
 * write it (status pay_status: 2 or 5; y decides) unless it exists -- then nothing at all
 * is done and pay_status / pay_order say what it holds (a replay, or the same notice
 * again) -- and not when the event must wait (no such order; an r whose order is still
 * at 1). s needs the row (STORE_NOTFOUND without it).
 * STORE_OK: committed, each move's rc (STORE_OK or STORE_NOTFOUND) and was set;
 * STORE_ERR: nothing applied (every move's rc STORE_ERR). */
typedef struct store_move {
    int64_t order_id;
    int64_t now;
    char kind;
    int rc;     /* out */
    int was;    /* out */
    char payment_id[STORE_PAYMENT_ID_MAX + 1];   /* "" = no payment */
    int64_t amount;
    int pay_status;       /* in (p, r): the row's status; out: the row's status after */
    int64_t pay_order;    /* out: the row's order (not order_id: a payment id reused) */
    int pay_new;          /* out: the row was written by this call */
} store_move_t;
int store_orders_move(store_t *s, store_move_t *moves, size_t n);

/* For audit and tests: count of live orders (status 1, 2 or 3: a cancelled or refunded
 * order gave its unit back) of a voucher and its SQL stock, from one moment.
 * STORE_NOTFOUND (the count still set) if the voucher is not a flash-sale voucher. */
int store_voucher_counts(store_t *s, int64_t voucher_id, int64_t *orders, int64_t *stock);

/* The `sync` order mode (the course's database-only flash sale): in ONE transaction,
 * check the sale window and stock, check that the user has no order for the voucher,
 * take one stock with a guarded `stock = stock - 1 WHERE stock > 0`, and insert the order.
 * *result is one of STORE_SYNC_*. Callers serialise a user's attempts with a per-user
 * lock (the unique (user, voucher) key stops a second order regardless). */
enum {
    STORE_SYNC_OK = 0, STORE_SYNC_SOLD_OUT = 1, STORE_SYNC_DUPLICATE = 2,
    STORE_SYNC_NOT_STARTED = 3, STORE_SYNC_ENDED = 4, STORE_SYNC_NO_VOUCHER = 5
};
int store_order_sync(store_t *s, const store_order_t *o, int *result);

/* The Redis generation ("epoch") of a flash-sale voucher, for rebuilding Redis from SQL
 * (rebuild.h). 0 until the first rebuild. With bump, raises it by one first, in one
 * transaction that holds the voucher's lock: every order batch committed before it is
 * visible to any later read, and every batch after it is fenced by the new value.
 * STORE_NOTFOUND if the voucher is not a flash-sale voucher. */
int store_redis_epoch(store_t *s, int64_t voucher_id, int bump, int64_t *epoch);

/* A flash-sale voucher's stock bucket count K as created (tb_seckill_buckets, a side
 * table: the course's tables keep their columns); 1 when it has none, whether or not the
 * voucher exists. For the rebuild of Redis from SQL (rebuild.h). */
int store_voucher_buckets(store_t *s, int64_t voucher_id, int *buckets);

/* A flash-sale voucher's waiting room as created (tb_seckill_room, a side table);
 * admit_per_s 0 when it has none, whether or not the voucher exists. For the rebuild. */
int store_voucher_room(store_t *s, int64_t voucher_id, store_room_t *room);

/* Read-only queries for the invariant checker and the rebuild. A backend that does not
 * implement one leaves its ops member NULL: the call then fails with "not supported by this
 * backend". Both backends implement them (store_sqlite.c, store_mysql.c). */

/* Orders of one voucher with id > after_id, in ascending id order, at most max; page
 * through a large voucher by passing the last id seen. *out is malloc'ed (free()), *n
 * rows; *n < max means the end was reached. Fields: id, user_id, voucher_id, status,
 * create_time (epoch seconds). */
int store_voucher_orders(store_t *s, int64_t voucher_id, int64_t after_id, size_t max,
                         store_order_t **out, size_t *n);

/* ==== one statement of a caller's own SQL (the lab's: src/lab/lab_store.c) ====
 * Runs sql -- one statement, "?" placeholders -- on its own, autocommit (no transaction
 * around it), binding args in order: an integer as it is, a time (epoch seconds) the way
 * this backend writes its own times. Prepared per call. *out (may be NULL) receives the
 * first column of the first row of a statement that returns rows (0 when none), else
 * the number of rows it changed. retry = 1 for a statement that may run twice (a read):
 * a connection lost before the answer is reconnected and the statement sent again. The
 * SQL is the backend's dialect: store_scheme says which. */
typedef struct store_arg {
    int64_t v;
    int is_time;                /* v is epoch seconds for a datetime column */
} store_arg_t;
int store_exec(store_t *s, const char *sql, const store_arg_t *args, int nargs, int retry,
               int64_t *out);
/* A read of the caller's own whose rows are orders: sql selects five columns, an order's
 * id, user_id, voucher_id, status and create_time (a datetime column: epoch seconds in
 * out), the fields store_voucher_orders fills. Run as store_exec runs a read (autocommit,
 * args bound the same way, sent again after a lost connection); any limit is the
 * statement's own. *out is malloc'ed (free()), *n rows in the statement's order. */
int store_exec_orders(store_t *s, const char *sql, const store_arg_t *args, int nargs,
                      store_order_t **out, size_t *n);
/* The backend's URL scheme ("sqlite", "mysql", "mariadb"). */
const char *store_scheme(const store_t *s);

#endif
