/* orders.c -- order lookups: SQL's orders merged with the admitted ones still on their way
 * there, read from the buyer hashes of the buckets that may hold such orders (orders.h).
 *
 * A user's list: the Redis phase first (SDIFF of the stream registry and the drained set,
 * then one HGET per bucket left), then a SQL job, then the merge -- in that order, so an
 * order the writer commits while the lookup runs is seen by one side or the other (a
 * bucket is marked drained only after its orders are in SQL). By id: SQL first (an order
 * in SQL costs Redis nothing); on a miss the Redis phase, and on a miss there SQL once
 * more, for the order the writer committed in between.
 *
 * The views (orders_view, orders_of_user) add what the buyer should see of the lifecycle:
 * a paid order's pay_time and a refunded one's refund_time (SQL), and in stream mode the
 * Redis decisions the writer has not
 * applied yet (the state hash beside each buyers hash, orders.h). */
#include "api/orders.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "sale/buckets.h"
#include "server/jobs.h"
#include "core/key.h"
#include "sale/orderid.h"
#include "redis/rds.h"
#include "core/sb.h"
#include "store/store.h"
#include "server/worker.h"
#include "core/xmem.h"

typedef struct lookup lookup_t;

/* One HGET of the Redis phase: the bucket's voucher, for the record it may yield. */
typedef struct ask {
    lookup_t *L;
    int64_t voucher_id;
    char key[80];  /* seckill:order:{tag} */
    char skey[80]; /* seckill:ostate:{tag}, its state hash */
    size_t fi;     /* the order it found: found[fi] */
} ask_t;

/* A decision life.lua made (seckill:ostate:{tag}): kind c, t, p or r (0: none) and its
 * second. */
typedef struct ostate {
    char kind;
    int64_t ts;
} ostate_t;

struct lookup {
    worker_t *w;
    orders_done_fn done;
    void *ctx;
    int64_t user_id;
    int64_t order_id; /* by id; 0 for the user's list */
    int second_sql;   /* by id: the SQL read after a Redis miss */
    int view;         /* a view (orders.h): pay_time and Redis's decisions too */
    /* filled by the SQL job */
    int rc;                /* STORE_* */
    store_order_t order;   /* by id */
    store_order_t *orders; /* the list, newest first */
    size_t norders;
    int64_t pay_time;      /* view by id: the order's pay_time or refund_time (its
                              status says which; 0: none) */
    int nbuckets;          /* view by id: its voucher's bucket count (0: not read) */
    int64_t *paid_at;      /* view list: the same time of orders[i] (0: none) */
    char skey[80];         /* view by id: its state hash */
    /* the Redis phase */
    ask_t *asks;
    int left;        /* HGETs without a reply yet */
    int redis_fail;  /* one of them failed: we cannot say what is missing */
    orders_rec_t *found; /* admitted orders in the buyer hashes, persisted or not */
    ostate_t *fstate;    /* ... and their states (views in stream mode) */
    size_t nfound;
};

static void lookup_end(lookup_t *L, orders_rc_t rc, const orders_rec_t *recs, size_t n)
{
    orders_done_fn done = L->done;
    void *ctx = L->ctx;
    free(L->orders);
    free(L->paid_at);
    free(L->asks);
    free(L->found);
    free(L->fstate);
    free(L);
    done(ctx, rc, recs, n);
}

static orders_rec_t from_sql(const store_order_t *o)
{
    orders_rec_t x = {o->id, o->user_id, o->voucher_id, o->status, o->create_time, 0, 1};
    return x;
}

/* Whether a view reads Redis's decisions: stream mode's (sync mode decides in SQL, queue
 * mode keeps no lifecycle). */
static int reads_state(const lookup_t *L)
{
    return L->view && L->w->app->cfg.mode == MODE_STREAM;
}

/* An HGET of the state hash: the order's state, if it is user_id's ("<kind> <ts> <userId>",
 * life.lua). */
static ostate_t state_parse(const redisReply *rep, int64_t user_id)
{
    ostate_t st = {0, 0};
    char buf[64];
    char kind;
    long long ts, uid;
    if (rep == NULL || rep->type != REDIS_REPLY_STRING || rep->len >= sizeof buf)
        return st;
    memcpy(buf, rep->str, rep->len);
    buf[rep->len] = '\0';
    if (sscanf(buf, "%c %lld %lld", &kind, &ts, &uid) == 3 && uid == user_id &&
        (kind == 'c' || kind == 't' || kind == 'p' || kind == 'r')) {
        st.kind = kind;
        st.ts = ts;
    }
    return st;
}

/* Redis's decision over the status SQL has (or 1 for an order not written yet): the
 * writer applies it later, as the same move (writer_life.c). */
static void state_apply(orders_rec_t *x, const ostate_t *st)
{
    if ((st->kind == 'c' || st->kind == 't') && x->status == 1) {
        x->status = 4;
    } else if (st->kind == 'p' && x->status == 1) {
        x->status = 2;
        x->pay_time = st->ts;
    } else if (st->kind == 'r' && (x->status == 1 || x->status == 4)) {
        x->status = 5;   /* 退款中: 6 once the refund outbox sent it */
    }
}

/* A positive decimal from a Redis string, else 0. */
static int64_t str_i64(const redisReply *rep)
{
    int64_t v = 0;
    if (rep == NULL || rep->type != REDIS_REPLY_STRING || sb_parse_pos(rep->str, rep->len, &v) != 0)
        return 0;
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

static void submit_sql(lookup_t *L, jobs_run_fn run, jobs_done_fn done);
static void run_get(store_t *st, void *arg);
static void done_get(worker_t *w, void *arg);
static void run_list(store_t *st, void *arg);
static void done_list(worker_t *w, void *arg);

/* ---------------------------------------------------------------- the Redis phase */

/* key_bsalt tries ~500 tags per bucket: each worker thread keeps the salts it found (a
 * pure function of the voucher, the bucket and the bucket count). */
#define SALT_SLOTS 64
static __thread struct {
    int64_t voucher_id; /* 0: empty */
    int bucket, nbuckets;
    unsigned salt;
} salts[SALT_SLOTS];

static unsigned salt_of(int64_t vid, int bucket, int nbuckets)
{
    unsigned h = (unsigned)(((uint64_t)vid * 31u + (uint64_t)bucket) * UINT64_C(0x9e3779b97f4a7c15) >> 58);
    if (salts[h].voucher_id != vid || salts[h].bucket != bucket || salts[h].nbuckets != nbuckets) {
        salts[h].voucher_id = vid;
        salts[h].bucket = bucket;
        salts[h].nbuckets = nbuckets;
        salts[h].salt = key_bsalt(vid, bucket, nbuckets);
    }
    return salts[h].salt;
}

/* The buyer hash of a member of seckill:streams ("<id>", or "<id>.<b>.<K>" for bucket b of
 * K), into a->key and a->voucher_id. 0, or -1 for a member that names no bucket. */
static int ask_key(ask_t *a, const redisReply *m)
{
    int64_t vid;
    int b = 0, k = 1;
    char tag[48];
    if (m->type != REDIS_REPLY_STRING ||
        (sb_parse_pos(m->str, m->len, &vid) != 0 &&
         key_bmember_parse(m->str, m->len, &vid, &b, &k) != 0) ||
        key_btag_salt(tag, sizeof tag, vid, b, b > 0 ? salt_of(vid, b, k) : 0) < 0 ||
        key_buyers_t(a->key, sizeof a->key, tag) < 0 ||
        key_ostate_t(a->skey, sizeof a->skey, tag) < 0)
        return -1;
    a->voucher_id = vid;
    return 0;
}

/* Every HGET has answered: on to SQL (the list; by id after a SQL miss, unless found). */
static void redis_done(lookup_t *L)
{
    if (L->redis_fail) {
        lookup_end(L, ORDERS_REDIS_DOWN, NULL, 0);
        return;
    }
    if (L->order_id == 0) {
        submit_sql(L, run_list, done_list);
        return;
    }
    for (size_t i = 0; i < L->nfound; i++)
        if (L->found[i].id == L->order_id) {
            orders_rec_t x = L->found[i];
            state_apply(&x, &L->fstate[i]);
            lookup_end(L, ORDERS_OK, &x, 1);
            return;
        }
    L->second_sql = 1;
    submit_sql(L, run_get, done_get);
}

/* The state of the order an ask found (a view in stream mode). */
static void on_fstate(struct redisReply *rep, void *priv)
{
    ask_t *a = priv;
    lookup_t *L = a->L;
    if (rep == NULL || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL))
        L->redis_fail = 1;
    else
        L->fstate[a->fi] = state_parse(rep, L->user_id);
    if (--L->left == 0)
        redis_done(L);
}

static void on_hget(struct redisReply *rep, void *priv)
{
    ask_t *a = priv;
    lookup_t *L = a->L;
    if (rep == NULL || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL)) {
        L->redis_fail = 1;
    } else {
        int64_t oid = str_i64(rep);
        if (oid > 0) {
            orders_rec_t x = {oid, L->user_id, a->voucher_id, 1, orderid_time(oid), 0, 0};
            a->fi = L->nfound;
            L->fstate[L->nfound] = (ostate_t){0, 0};
            L->found[L->nfound++] = x;
            if (reads_state(L)) {
                /* its state, on the same bucket's node: counted before it goes out (a
                 * client that is down answers inside rds_command) */
                char od[SB_DEC_MAX];
                size_t ol = (size_t)sb_dec(od, oid);
                const char *argv[3] = {"HGET", a->skey, od};
                size_t lens[3] = {4, strlen(a->skey), ol};
                L->left++;
                rds_command(L->w->rds, on_fstate, a, 3, argv, lens);
            }
        }
    }
    if (--L->left == 0)
        redis_done(L);
}

/* The buckets not known drained: one HGET each, pipelined (on a cluster each goes to its
 * bucket's node). */
static void on_members(struct redisReply *rep, void *priv)
{
    lookup_t *L = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        lookup_end(L, ORDERS_REDIS_DOWN, NULL, 0);
        return;
    }
    size_t n = rep->elements;
    L->asks = xrealloc(NULL, (n ? n : 1) * sizeof *L->asks);
    L->found = xrealloc(NULL, (n ? n : 1) * sizeof *L->found);
    L->fstate = xrealloc(NULL, (n ? n : 1) * sizeof *L->fstate);
    int na = 0;
    for (size_t i = 0; i < n; i++) {
        L->asks[na].L = L;
        if (ask_key(&L->asks[na], rep->element[i]) == 0)
            na++;
    }
    if (na == 0) {
        redis_done(L);
        return;
    }
    char uid[SB_DEC_MAX];
    size_t ul = (size_t)sb_dec(uid, L->user_id);
    /* left counts every HGET before the first goes out: a client that is down answers
     * each one inside rds_command, and only the last answer may finish L. */
    L->left = na;
    ask_t *asks = L->asks;
    for (int i = 0; i < na; i++) {
        const char *argv[3] = {"HGET", asks[i].key, uid};
        size_t lens[3] = {4, strlen(asks[i].key), ul};
        rds_command(L->w->rds, on_hget, &asks[i], 3, argv, lens); /* L may be gone after the last */
    }
}

static void redis_phase(lookup_t *L)
{
    const char *argv[3] = {"SDIFF", KEY_STREAMS, KEY_DRAINED};
    size_t lens[3] = {5, strlen(KEY_STREAMS), strlen(KEY_DRAINED)};
    rds_command(L->w->rds, on_members, L, 3, argv, lens); /* last: L may be gone after */
}

/* ---------------------------------------------------------------- SQL and the merge */

/* A view's time of its status: a paid order's pay_time (2, 3), a refunded one's
 * refund_time (6) -- an order read (store_exec_orders) whose fifth column, the datetime
 * one, is that time; the user's such orders by the list's order, or one by id. From either
 * table: a freed buyer's refunded order is in tb_voucher_order_cancelled. */
#define TIMED_COLS                                                                          \
    "SELECT id, user_id, voucher_id, status, CASE WHEN status = 6 THEN refund_time ELSE "   \
    "pay_time END FROM "
#define TIMED_WHERE                                                                         \
    " AND ((status IN (2, 3) AND pay_time IS NOT NULL) OR (status = 6 AND refund_time IS "  \
    "NOT NULL))"
static const char timed_by_id_sql[] =
    TIMED_COLS "tb_voucher_order WHERE id = ?" TIMED_WHERE " UNION ALL " TIMED_COLS
    "tb_voucher_order_cancelled WHERE id = ?" TIMED_WHERE;
static const char timed_of_user_sql[] =
    TIMED_COLS "tb_voucher_order WHERE user_id = ?" TIMED_WHERE " UNION ALL " TIMED_COLS
    "tb_voucher_order_cancelled WHERE user_id = ?" TIMED_WHERE " ORDER BY 1 DESC LIMIT ?";

/* A status with a time to show: paid (pay_time) or refunded (refund_time). */
static int timed(int status)
{
    return status == 2 || status == 3 || status == 6;
}

/* The time read for an order of status as the view's member. */
static void set_time(orders_rec_t *x, int64_t t)
{
    if (x->status == 6)
        x->refund_time = t;
    else if (x->status == 2 || x->status == 3)
        x->pay_time = t;
}

static void run_get(store_t *st, void *arg)
{
    lookup_t *L = arg;
    L->rc = st ? store_order_get(st, L->order_id, &L->order) : STORE_ERR;
    if (L->rc != STORE_OK || !L->view || L->order.user_id != L->user_id)
        return;
    if (timed(L->order.status)) {
        const store_arg_t args[2] = {{L->order_id, 0}, {L->order_id, 0}};
        store_order_t *p = NULL;
        size_t n = 0;
        L->rc = store_exec_orders(st, timed_by_id_sql, args, 2, &p, &n);
        if (L->rc == STORE_OK && n == 1)
            L->pay_time = p[0].create_time;
        free(p);
    } else if (reads_state(L) && (L->order.status == 1 || L->order.status == 4) &&
               store_voucher_buckets(st, L->order.voucher_id, &L->nbuckets) != STORE_OK) {
        L->nbuckets = 0;   /* SQL's status, then */
    }
}

/* The by-id view's state read answered: SQL's order with Redis's decision over it (SQL's
 * alone when Redis did not answer). */
static void on_state_get(struct redisReply *rep, void *priv)
{
    lookup_t *L = priv;
    orders_rec_t x = from_sql(&L->order);
    ostate_t st = state_parse(rep, L->user_id);
    state_apply(&x, &st);
    lookup_end(L, ORDERS_OK, &x, 1);
}

/* The by-id view of an order SQL has at 1 or 4: the state hash of its buyer's bucket. */
static void state_get(lookup_t *L)
{
    const store_order_t *o = &L->order;
    int b = buckets_home(o->user_id, L->nbuckets);
    char tag[48], od[SB_DEC_MAX];
    if (key_btag_salt(tag, sizeof tag, o->voucher_id, b,
                      b > 0 ? salt_of(o->voucher_id, b, L->nbuckets) : 0) < 0 ||
        key_ostate_t(L->skey, sizeof L->skey, tag) < 0) {
        on_state_get(NULL, L);
        return;
    }
    size_t ol = (size_t)sb_dec(od, o->id);
    const char *argv[3] = {"HGET", L->skey, od};
    size_t lens[3] = {4, strlen(L->skey), ol};
    rds_command(L->w->rds, on_state_get, L, 3, argv, lens); /* last: L may be gone after */
}

static void done_get(worker_t *w, void *arg)
{
    lookup_t *L = arg;
    if (L->rc == STORE_OK) {
        if (L->order.user_id != L->user_id) { /* someone else's: not yours to see */
            lookup_end(L, ORDERS_NOTFOUND, NULL, 0);
            return;
        }
        if (L->nbuckets > 0) {
            state_get(L);
            return;
        }
        orders_rec_t x = from_sql(&L->order);
        set_time(&x, L->pay_time);
        lookup_end(L, ORDERS_OK, &x, 1);
        return;
    }
    if (L->rc != STORE_NOTFOUND) {
        lookup_end(L, ORDERS_DB_DOWN, NULL, 0);
        return;
    }
    /* Sync mode writes SQL before it answers: nothing is on its way. */
    if (L->second_sql || w->app->cfg.mode == MODE_SYNC) {
        lookup_end(L, ORDERS_NOTFOUND, NULL, 0);
        return;
    }
    redis_phase(L);
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
    size_t ntimed = 0;
    for (size_t i = 0; L->rc == STORE_OK && i < L->norders; i++)
        ntimed += timed(L->orders[i].status);
    if (ntimed == 0)
        return;
    /* the page's paid and refunded orders are among the user's newest ORDERS_OF_USER_MAX
     * such ones */
    L->paid_at = xcalloc(L->norders, sizeof *L->paid_at);
    const store_arg_t args[3] = {{L->user_id, 0}, {L->user_id, 0}, {ORDERS_OF_USER_MAX, 0}};
    store_order_t *p = NULL;
    size_t n = 0;
    L->rc = store_exec_orders(st, timed_of_user_sql, args, 3, &p, &n);
    for (size_t j = 0; L->rc == STORE_OK && j < n; j++)
        for (size_t i = 0; i < L->norders; i++)
            if (L->orders[i].id == p[j].id)
                L->paid_at[i] = p[j].create_time;
    free(p);
}

/* The Redis phase's orders not in SQL (newest first), then SQL's. */
static void done_list(worker_t *w, void *arg)
{
    lookup_t *L = arg;
    (void)w;
    if (L->rc != STORE_OK) {
        lookup_end(L, ORDERS_DB_DOWN, NULL, 0);
        return;
    }
    orders_rec_t *recs = xrealloc(NULL, (L->nfound + L->norders + 1) * sizeof *recs);
    size_t n = 0;
    /* With a full page, a buyer-hash order older than its oldest order is past the page
     * (order ids grow with time), persisted or not. */
    int64_t floor = L->norders >= ORDERS_OF_USER_MAX ? L->orders[L->norders - 1].id : 0;
    if (L->nfound > 1)
        qsort(L->found, L->nfound, sizeof *L->found, newest_first);
    for (size_t i = 0; i < L->nfound; i++) {
        const orders_rec_t *x = &L->found[i];
        if (in_sql(L, x->id) || x->id < floor || (n > 0 && recs[n - 1].id == x->id))
            continue;
        recs[n] = *x;
        state_apply(&recs[n++], &L->fstate[i]);
    }
    for (size_t i = 0; i < L->norders && n < ORDERS_OF_USER_MAX; i++) {
        recs[n] = from_sql(&L->orders[i]);
        if (L->paid_at)
            set_time(&recs[n], L->paid_at[i]);
        /* a decision the writer has not applied yet: the found order's state */
        for (size_t j = 0; j < L->nfound; j++)
            if (L->found[j].id == recs[n].id)
                state_apply(&recs[n], &L->fstate[j]);
        n++;
    }
    if (n > ORDERS_OF_USER_MAX)
        n = ORDERS_OF_USER_MAX;
    lookup_end(L, ORDERS_OK, recs, n);
    free(recs);
}

static void submit_sql(lookup_t *L, jobs_run_fn run, jobs_done_fn done)
{
    L->rc = STORE_ERR;
    if (jobs_submit(L->w->app->jobs, L->w, run, done, L) != 0)
        lookup_end(L, ORDERS_BUSY, NULL, 0);
}

static lookup_t *lookup_new(worker_t *w, int64_t user_id, int64_t order_id, orders_done_fn done,
                            void *ctx)
{
    lookup_t *L = xcalloc(1, sizeof *L);
    L->w = w;
    L->done = done;
    L->ctx = ctx;
    L->user_id = user_id;
    L->order_id = order_id;
    return L;
}

void orders_get(worker_t *w, int64_t user_id, int64_t order_id, orders_done_fn done, void *ctx)
{
    submit_sql(lookup_new(w, user_id, order_id, done, ctx), run_get, done_get);
}

void orders_view(worker_t *w, int64_t user_id, int64_t order_id, orders_done_fn done,
                 void *ctx)
{
    lookup_t *L = lookup_new(w, user_id, order_id, done, ctx);
    L->view = 1;
    submit_sql(L, run_get, done_get);
}

void orders_of_user(worker_t *w, int64_t user_id, orders_done_fn done, void *ctx)
{
    lookup_t *L = lookup_new(w, user_id, 0, done, ctx);
    L->view = 1;
    if (w->app->cfg.mode == MODE_SYNC)
        submit_sql(L, run_list, done_list);
    else
        redis_phase(L);
}
