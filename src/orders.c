/* orders.c -- order lookups: SQL's orders merged with the buyer's order index (orders.h).
 *
 * One lookup: a SQL job (the order by id, or the user's newest orders), then on the
 * worker's thread one HGETALL of the user's index, then the merge. */
#include "orders.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "app.h"
#include "jobs.h"
#include "keys.h"
#include "orderid.h"
#include "rds.h"
#include "sb.h"
#include "store.h"
#include "worker.h"
#include "xmem.h"

typedef struct lookup {
    worker_t *w;
    orders_done_fn done;
    void *ctx;
    int64_t user_id;
    int64_t order_id; /* by id; 0 for the user's list */
    /* filled by the SQL job */
    int rc;                /* STORE_* */
    store_order_t order;   /* by id */
    store_order_t *orders; /* the list, newest first */
    size_t norders;
} lookup_t;

static void lookup_end(lookup_t *L, orders_rc_t rc, const orders_rec_t *recs, size_t n)
{
    orders_done_fn done = L->done;
    void *ctx = L->ctx;
    free(L->orders);
    free(L);
    done(ctx, rc, recs, n);
}

static orders_rec_t from_sql(const store_order_t *o)
{
    orders_rec_t x = {o->id, o->user_id, o->voucher_id, o->status, o->create_time, 1};
    return x;
}

/* A positive decimal from a Redis string, else 0. */
static int64_t str_i64(const redisReply *rep)
{
    if (rep == NULL || rep->type != REDIS_REPLY_STRING || rep->len == 0 || rep->len > 19)
        return 0;
    int64_t v = 0;
    for (size_t i = 0; i < rep->len; i++) {
        if (rep->str[i] < '0' || rep->str[i] > '9')
            return 0;
        v = v * 10 + (rep->str[i] - '0');
    }
    return v;
}

static int in_sql(const lookup_t *L, int64_t id)
{
    for (size_t i = 0; i < L->norders; i++)
        if (L->orders[i].id == id)
            return 1;
    return 0;
}

static int newest_first(const void *a, const void *b)
{
    const orders_rec_t *x = a, *y = b;
    return x->id < y->id ? 1 : x->id > y->id ? -1 : 0;
}

/* The index's reply: pairs voucherId, orderId. */
static void on_index(struct redisReply *rep, void *priv)
{
    lookup_t *L = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        lookup_end(L, ORDERS_REDIS_DOWN, NULL, 0);
        return;
    }
    size_t npairs = rep->elements / 2;
    orders_rec_t *recs = xrealloc(NULL, (npairs + L->norders) * sizeof *recs);
    size_t n = 0;
    /* With a full page, an index entry older than its oldest order is past the page
     * (order ids grow with time), persisted or not. */
    int64_t floor = L->norders >= ORDERS_OF_USER_MAX ? L->orders[L->norders - 1].id : 0;
    for (size_t i = 0; i < npairs; i++) {
        int64_t vid = str_i64(rep->element[2 * i]);
        int64_t oid = str_i64(rep->element[2 * i + 1]);
        if (vid <= 0 || oid <= 0)
            continue;
        if (L->order_id != 0 ? oid != L->order_id : (in_sql(L, oid) || oid < floor))
            continue;
        orders_rec_t x = {oid, L->user_id, vid, 1, orderid_time(oid), 0};
        recs[n++] = x;
    }
    if (L->order_id != 0) {
        if (n == 0)
            lookup_end(L, ORDERS_NOTFOUND, NULL, 0);
        else
            lookup_end(L, ORDERS_OK, recs, 1);
        free(recs);
        return;
    }
    /* Not yet persisted orders are the newest: they come first. */
    qsort(recs, n, sizeof *recs, newest_first);
    for (size_t i = 0; i < L->norders && n < ORDERS_OF_USER_MAX; i++)
        recs[n++] = from_sql(&L->orders[i]);
    if (n > ORDERS_OF_USER_MAX)
        n = ORDERS_OF_USER_MAX;
    lookup_end(L, ORDERS_OK, recs, n);
    free(recs);
}

static void ask_index(lookup_t *L)
{
    char key[64];
    int kl = key_orders_of(key, sizeof key, L->user_id);
    const char *argv[2] = {"HGETALL", key};
    size_t lens[2] = {7, kl > 0 ? (size_t)kl : 0};
    rds_command(L->w->rds, on_index, L, 2, argv, lens); /* last: L may be gone after */
}

static void run_get(store_t *st, void *arg)
{
    lookup_t *L = arg;
    L->rc = st ? store_order_get(st, L->order_id, &L->order) : STORE_ERR;
}

static void done_get(worker_t *w, void *arg)
{
    lookup_t *L = arg;
    if (L->rc == STORE_OK) {
        if (L->order.user_id != L->user_id) { /* someone else's: not yours to see */
            lookup_end(L, ORDERS_NOTFOUND, NULL, 0);
            return;
        }
        orders_rec_t x = from_sql(&L->order);
        lookup_end(L, ORDERS_OK, &x, 1);
        return;
    }
    if (L->rc != STORE_NOTFOUND) {
        lookup_end(L, ORDERS_DB_DOWN, NULL, 0);
        return;
    }
    ask_index(L);
}

static void run_list(store_t *st, void *arg)
{
    lookup_t *L = arg;
    L->rc = st ? store_orders_of_user(st, L->user_id, ORDERS_OF_USER_MAX, &L->orders, &L->norders)
               : STORE_ERR;
    if (L->rc == STORE_NOTFOUND) {
        L->rc = STORE_OK;
        L->norders = 0;
    }
}

static void done_list(worker_t *w, void *arg)
{
    lookup_t *L = arg;
    if (L->rc != STORE_OK) {
        lookup_end(L, ORDERS_DB_DOWN, NULL, 0);
        return;
    }
    ask_index(L);
}

static void submit(worker_t *w, int64_t user_id, int64_t order_id, jobs_run_fn run,
                   jobs_done_fn done_fn, orders_done_fn done, void *ctx)
{
    lookup_t *L = xrealloc(NULL, sizeof *L);
    memset(L, 0, sizeof *L);
    L->w = w;
    L->done = done;
    L->ctx = ctx;
    L->user_id = user_id;
    L->order_id = order_id;
    L->rc = STORE_ERR;
    if (jobs_submit(w->app->jobs, w, run, done_fn, L) != 0)
        lookup_end(L, ORDERS_BUSY, NULL, 0);
}

void orders_get(worker_t *w, int64_t user_id, int64_t order_id, orders_done_fn done, void *ctx)
{
    submit(w, user_id, order_id, run_get, done_get, done, ctx);
}

void orders_of_user(worker_t *w, int64_t user_id, orders_done_fn done, void *ctx)
{
    submit(w, user_id, 0, run_list, done_list, done, ctx);
}

void orders_note_admitted(worker_t *w, int64_t user_id, int64_t voucher_id, int64_t order_id)
{
    char key[64], vid[SB_DEC_MAX], oid[SB_DEC_MAX];
    int kl = key_orders_of(key, sizeof key, user_id);
    int vl = sb_dec(vid, voucher_id);
    int ol = sb_dec(oid, order_id);
    if (kl < 0)
        return;
    const char *argv[4] = {"HSET", key, vid, oid};
    size_t lens[4] = {4, (size_t)kl, (size_t)vl, (size_t)ol};
    rds_command(w->rds, NULL, NULL, 4, argv, lens);
}
