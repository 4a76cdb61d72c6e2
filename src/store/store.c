/* store.c -- the store's front door: picks a SQL backend by URL scheme and forwards
 * every store.h call to it (store_int.h). Backend-neutral helpers live here too.
 *
 *   sqlite:PATH        store_sqlite.c (sqlite:///abs/path and sqlite::memory: also work)
 *   mysql://user:password@host:port/db[?socket=PATH]
 *                      store_mysql.c (MySQL/MariaDB through libmariadb); mariadb:// too */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

/* store_mysql.c (declared here: its two tables are the same backend under two names) */
extern const store_ops_t store_mysql_ops, store_mariadb_ops;

static const store_ops_t *const backends[] = {
    &store_sqlite_ops,
    &store_mysql_ops,
    &store_mariadb_ops,
};

int store__fail(store_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return STORE_ERR;
}

store_t *store_open(const char *url, int timeout_ms, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    if (!url || !*url) {
        snprintf(err, errlen, "no database URL (expected sqlite:PATH or mysql://...)");
        return NULL;
    }
    const char *colon = strchr(url, ':');
    if (!colon || colon == url) {
        /* the URL is not repeated: it may hold a password */
        snprintf(err, errlen,
                 "bad database URL (expected sqlite:PATH or mysql://user:password@host:port/db)");
        return NULL;
    }
    size_t slen = (size_t)(colon - url);
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
        const store_ops_t *ops = backends[i];
        if (strlen(ops->scheme) == slen && strncasecmp(url, ops->scheme, slen) == 0) {
            if (timeout_ms <= 0)
                timeout_ms = 2000;
            store_t *s = ops->open(url, timeout_ms, err, errlen);
            if (s)
                s->ops = ops;
            return s;
        }
    }
    snprintf(err, errlen, "unknown database URL scheme '%.*s' (expected sqlite: or mysql:)",
             (int)(slen > 32 ? 32 : slen), url);
    return NULL;
}

void store_close(store_t *s)
{
    if (s)
        s->ops->close(s);
}

const char *store_errmsg(store_t *s)
{
    if (!s)
        return "no database connection";
    return s->err[0] ? s->err : "no error";
}

/* Each forwarder clears the last error, so store_errmsg() describes this call. */
#define STORE_ENTER(s)                  \
    do {                                \
        if (!(s))                       \
            return STORE_ERR;           \
        (s)->err[0] = '\0';             \
    } while (0)

/* A list call's entry: no list until the backend makes one, and both out pointers are
 * required. Messages name the calling function (__func__). */
#define LIST_ENTER(s, out, n)                                                  \
    do {                                                                       \
        if (out)                                                               \
            *(out) = NULL;                                                     \
        if (n)                                                                 \
            *(n) = 0;                                                          \
        STORE_ENTER(s);                                                        \
        if (!(out) || !(n))                                                    \
            return store__fail((s), "%s: bad arguments", __func__);            \
    } while (0)

/* An optional member of the backend's ops table that this one lacks. */
#define NEED_OP(s, op)                                                         \
    do {                                                                       \
        if (!(s)->ops->op)                                                     \
            return store__fail((s), "%s: not supported by the %s backend",     \
                               __func__, (s)->ops->scheme);                    \
    } while (0)

int store_ping(store_t *s)
{
    STORE_ENTER(s);
    return s->ops->ping(s);
}

int store_user_by_phone(store_t *s, const char *phone, store_user_t *out)
{
    STORE_ENTER(s);
    if (!phone || !out)
        return store__fail(s, "store_user_by_phone: bad arguments");
    return s->ops->user_by_phone(s, phone, out);
}

int store_user_create(store_t *s, const char *phone, const char *nick, store_user_t *out)
{
    STORE_ENTER(s);
    if (!phone || !out)
        return store__fail(s, "store_user_create: bad arguments");
    return s->ops->user_create(s, phone, nick ? nick : "", out);
}

int store_voucher_create(store_t *s, store_voucher_t *v)
{
    STORE_ENTER(s);
    if (!v || !v->title)
        return store__fail(s, "store_voucher_create: a voucher needs a title");
    return s->ops->voucher_create(s, v);
}

int store_voucher_get(store_t *s, int64_t id, store_voucher_t *out)
{
    STORE_ENTER(s);
    if (!out)
        return store__fail(s, "store_voucher_get: bad arguments");
    memset(out, 0, sizeof *out);
    return s->ops->voucher_get(s, id, out);
}

int store_voucher_list(store_t *s, int64_t shop_id, store_voucher_t **out, size_t *n)
{
    LIST_ENTER(s, out, n);
    return s->ops->voucher_list(s, shop_id, out, n);
}

int store_seckill_ids(store_t *s, int64_t **ids, size_t *n)
{
    LIST_ENTER(s, ids, n);
    return s->ops->seckill_ids(s, ids, n);
}

void store_voucher_clear(store_voucher_t *v)
{
    if (!v)
        return;
    free(v->title);
    free(v->sub_title);
    free(v->rules);
    v->title = v->sub_title = v->rules = NULL;
}

void store_voucher_list_free(store_voucher_t *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        store_voucher_clear(&v[i]);
    free(v);
}

int store_orders_write(store_t *s, const store_order_t *orders, size_t n, size_t *inserted,
                       size_t *conflicts, size_t *fenced)
{
    size_t ins_dummy, conf_dummy, fen_dummy;
    if (!inserted)
        inserted = &ins_dummy;
    if (!conflicts)
        conflicts = &conf_dummy;
    if (!fenced)
        fenced = &fen_dummy;
    *inserted = 0;
    *conflicts = 0;
    *fenced = 0;
    STORE_ENTER(s);
    if (n == 0)
        return STORE_OK;
    if (!orders)
        return store__fail(s, "store_orders_write: bad arguments");
    return s->ops->orders_write(s, orders, n, inserted, conflicts, fenced);
}

int store_order_get(store_t *s, int64_t id, store_order_t *out)
{
    STORE_ENTER(s);
    if (!out)
        return store__fail(s, "store_order_get: bad arguments");
    return s->ops->order_get(s, id, out);
}

int store_orders_of_user(store_t *s, int64_t user_id, size_t max, store_order_t **out, size_t *n)
{
    LIST_ENTER(s, out, n);
    if (max == 0)
        return STORE_OK;
    return s->ops->orders_of_user(s, user_id, max, out, n);
}

int store_voucher_counts(store_t *s, int64_t voucher_id, int64_t *orders, int64_t *stock)
{
    int64_t o_dummy, s_dummy;
    STORE_ENTER(s);
    return s->ops->voucher_counts(s, voucher_id, orders ? orders : &o_dummy,
                                  stock ? stock : &s_dummy);
}

int store_order_sync(store_t *s, const store_order_t *o, int *result)
{
    if (!s || !o || !result)
        return STORE_ERR;
    if (!s->ops->order_sync)
        return store__fail(s, "%s: sync order mode is not supported by this backend",
                           s->ops->scheme);
    return s->ops->order_sync(s, o, result);
}

int store_voucher_orders(store_t *s, int64_t voucher_id, int64_t after_id, size_t max,
                         store_order_t **out, size_t *n)
{
    LIST_ENTER(s, out, n);
    NEED_OP(s, voucher_orders);
    if (max == 0)
        return STORE_OK;
    return s->ops->voucher_orders(s, voucher_id, after_id, max, out, n);
}

int store_exec(store_t *s, const char *sql, const store_arg_t *args, int nargs, int retry,
               int64_t *out)
{
    int64_t dummy;
    STORE_ENTER(s);
    if (!sql || nargs < 0 || (nargs > 0 && !args) || nargs > STORE_EXEC_ARGS)
        return store__fail(s, "store_exec: bad arguments");
    return s->ops->exec(s, sql, args, nargs, retry, out ? out : &dummy);
}

int store_exec_orders(store_t *s, const char *sql, const store_arg_t *args, int nargs,
                      store_order_t **out, size_t *n)
{
    LIST_ENTER(s, out, n);
    if (!sql || nargs < 0 || (nargs > 0 && !args) || nargs > STORE_EXEC_ARGS)
        return store__fail(s, "store_exec_orders: bad arguments");
    return s->ops->exec_orders(s, sql, args, nargs, out, n);
}

const char *store_scheme(const store_t *s)
{
    return s && s->ops ? s->ops->scheme : "";
}

int store_redis_epoch(store_t *s, int64_t voucher_id, int bump, int64_t *epoch)
{
    STORE_ENTER(s);
    if (!epoch)
        return store__fail(s, "store_redis_epoch: bad arguments");
    *epoch = 0;
    NEED_OP(s, redis_epoch);
    return s->ops->redis_epoch(s, voucher_id, bump, epoch);
}

int store__move_spec(char kind, store_move_spec_t *spec)
{
    switch (kind) {
    case 'c':
        *spec = (store_move_spec_t){1, 4, 1, "update_time"};
        return 0;
    case 'p':
    case 'y':   /* sync mode's payment: this, else 'r' (the backends) */
        *spec = (store_move_spec_t){1, 2, 0, "pay_time"};
        return 0;
    case 'r':
        *spec = (store_move_spec_t){4, 5, 0, "update_time"};
        return 0;
    case 's':   /* the refund sent: the order once none of its payments is left (the
                 * backends, with STORE_PAY_ORDER_SENT_SQL) */
        *spec = (store_move_spec_t){5, 6, 0, "refund_time"};
        return 0;
    case 'f':
        *spec = (store_move_spec_t){1, 4, 1, "update_time", 1};
        return 0;
    default:
        return -1;
    }
}

int store__pay_row(const store_move_t *m, int changed, int was)
{
    if (!m->payment_id[0])
        return 0;
    switch (m->kind) {
    case 'y':
        return was == 1 && changed ? 2 : 5;   /* taken by this payment, else refunded */
    case 'p':
        return m->pay_status;
    case 'r':
        return was == 1 ? 0 : m->pay_status;   /* its cancel is on its way: the event waits */
    default:
        return 0;
    }
}

/* A provider's payment id as the notice checks it (api_pay.c): 1..STORE_PAYMENT_ID_MAX. */
static int payment_id_ok(const char *z)
{
    size_t n = strnlen(z, STORE_PAYMENT_ID_MAX + 1);
    return n > 0 && n <= STORE_PAYMENT_ID_MAX;
}

int store_payment_get(store_t *s, const char *payment_id, store_payment_t *out)
{
    STORE_ENTER(s);
    if (!payment_id || !out || !payment_id_ok(payment_id))
        return store__fail(s, "store_payment_get: bad arguments");
    memset(out, 0, sizeof *out);
    NEED_OP(s, payment_get);
    return s->ops->payment_get(s, payment_id, out);
}

int store_refunds_due(store_t *s, int64_t now, size_t max, store_refund_t **out, size_t *n)
{
    LIST_ENTER(s, out, n);
    if (max == 0)
        return store__fail(s, "store_refunds_due: bad arguments");
    NEED_OP(s, refunds_due);
    return s->ops->refunds_due(s, now, max, out, n);
}

int store_refund_lease(store_t *s, const char *payment_id, int tries, int64_t now,
                       int64_t until, int claim)
{
    STORE_ENTER(s);
    if (!payment_id || !payment_id_ok(payment_id) || tries < 0)
        return store__fail(s, "store_refund_lease: bad arguments");
    NEED_OP(s, refund_lease);
    return s->ops->refund_lease(s, payment_id, tries, now, until, claim);
}

int store_voucher_payments(store_t *s, int64_t voucher_id, int64_t after_order,
                           const char *after_payment, size_t max, store_refund_t **out,
                           size_t *n)
{
    LIST_ENTER(s, out, n);
    if (!after_payment || strlen(after_payment) > STORE_PAYMENT_ID_MAX || max == 0)
        return store__fail(s, "store_voucher_payments: bad arguments");
    NEED_OP(s, voucher_payments);
    return s->ops->voucher_payments(s, voucher_id, after_order, after_payment, max, out, n);
}

int store_orders_move(store_t *s, store_move_t *moves, size_t n)
{
    STORE_ENTER(s);
    if (!moves || n == 0)
        return store__fail(s, "order status change: bad arguments");
    store_move_spec_t spec;
    for (size_t i = 0; i < n; i++) {
        moves[i].rc = STORE_ERR;
        moves[i].was = 0;
        moves[i].pay_order = 0;
        moves[i].pay_new = 0;
    }
    for (size_t i = 0; i < n; i++) {
        store_move_t *m = &moves[i];
        int pay = m->payment_id[0] != '\0';
        if (m->order_id <= 0 || store__move_spec(m->kind, &spec) != 0 ||
            (pay && (!payment_id_ok(m->payment_id) || m->amount < 0 || m->kind == 'c' ||
                     m->kind == 'f')) ||
            (!pay && (m->kind == 'y' || m->kind == 's')) ||
            (pay && (m->kind == 'p' || m->kind == 'r') && m->pay_status != 2 &&
             m->pay_status != 5))
            return store__fail(s, "order status change: bad arguments");
    }
    NEED_OP(s, orders_move);
    int rc = s->ops->orders_move(s, moves, n);
    if (rc != STORE_OK)
        for (size_t i = 0; i < n; i++)
            moves[i].rc = STORE_ERR;
    return rc;
}

static int order_move(store_t *s, int64_t order_id, char kind, int64_t now, int *was)
{
    store_move_t m = {.order_id = order_id, .now = now, .kind = kind};
    if (!was) {
        STORE_ENTER(s);
        return store__fail(s, "order status change: bad arguments");
    }
    *was = 0;
    int rc = store_orders_move(s, &m, 1);
    if (rc != STORE_OK)
        return rc;
    *was = m.was;
    return m.rc;
}

int store_order_cancel(store_t *s, int64_t order_id, int64_t now, int *was)
{
    return order_move(s, order_id, 'c', now, was);
}

int store_order_cancel_free(store_t *s, int64_t order_id, int64_t now, int *was)
{
    return order_move(s, order_id, 'f', now, was);
}

int store_order_pay(store_t *s, int64_t order_id, int64_t now, int *was)
{
    return order_move(s, order_id, 'p', now, was);
}

int store_order_refund(store_t *s, int64_t order_id, int64_t now, int *was)
{
    return order_move(s, order_id, 'r', now, was);
}

int store_voucher_buckets(store_t *s, int64_t voucher_id, int *buckets)
{
    STORE_ENTER(s);
    if (!buckets)
        return store__fail(s, "store_voucher_buckets: bad arguments");
    *buckets = 1;
    NEED_OP(s, voucher_buckets);
    return s->ops->voucher_buckets(s, voucher_id, buckets);
}

int store_voucher_room(store_t *s, int64_t voucher_id, store_room_t *room)
{
    STORE_ENTER(s);
    if (!room)
        return store__fail(s, "store_voucher_room: bad arguments");
    memset(room, 0, sizeof *room);
    NEED_OP(s, voucher_room);
    return s->ops->voucher_room(s, voucher_id, room);
}

int store_shop_get(store_t *s, int64_t id, store_shop_t *out)
{
    STORE_ENTER(s);
    if (!out)
        return store__fail(s, "store_shop_get: bad arguments");
    memset(out, 0, sizeof *out);
    NEED_OP(s, shop_get);
    return s->ops->shop_get(s, id, out);
}

int store_shop_list(store_t *s, const store_shop_query_t *q, store_shop_t **out, size_t *n)
{
    LIST_ENTER(s, out, n);
    if (!q || q->offset < 0 || q->limit < 0)
        return store__fail(s, "store_shop_list: bad arguments");
    NEED_OP(s, shop_list);
    return s->ops->shop_list(s, q, out, n);
}

int store_shop_create(store_t *s, store_shop_t *shop)
{
    STORE_ENTER(s);
    if (!shop)
        return store__fail(s, "store_shop_create: bad arguments");
    NEED_OP(s, shop_create);
    return s->ops->shop_create(s, shop);
}

int store_shop_update(store_t *s, const store_shop_t *shop)
{
    STORE_ENTER(s);
    if (!shop)
        return store__fail(s, "store_shop_update: bad arguments");
    NEED_OP(s, shop_update);
    return s->ops->shop_update(s, shop);
}

int store_shop_types(store_t *s, store_shop_type_t **out, size_t *n)
{
    LIST_ENTER(s, out, n);
    NEED_OP(s, shop_types);
    return s->ops->shop_types(s, out, n);
}
