/* api_order.c -- POST /voucher-order/seckill/{id} (the hot path), GET /voucher-order/{id},
 * GET /voucher-order/of/me.
 *
 * The flash sale is: logged-in user (router) -> admission_try -> reply from a stack
 * buffer. No SQL, no JSON library, no allocation here.
 *
 * Order lookups: SQL has the orders the writer has persisted; an admitted order not yet
 * written lives only in Redis, as seckill:order:{voucher} userId -> orderId. So a lookup
 * asks SQL first (one job: the order or the user's orders, plus the ids of all flash-sale
 * vouchers), then asks Redis for this user's entry in every flash-sale voucher's buyer
 * hash (one pipelined HGET per voucher) and reports those not yet in SQL with
 * "persisted":false and status 1 (unpaid), their createTime taken from the order id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "admission.h"
#include "api.h"
#include "app.h"
#include "auth.h"
#include "clock.h"
#include "jobs.h"
#include "keys.h"
#include "lab.h"
#include "log.h"
#include "metrics.h"
#include "orderid.h"
#include "ratelimit.h"
#include "rds.h"
#include "sb.h"
#include "store.h"
#include "sync_order.h"
#include "worker.h"

#define ORDERS_OF_ME_MAX 100

/* ------------------------------------------------------------ the flash sale */

static const char unavailable_body[] =
    "{\"success\":false,\"errorMsg\":\"服务器异常\",\"code\":\"UNAVAILABLE\"}";

static void on_admitted(http_req_t *r, int code, int64_t order_id)
{
    metrics_seckill_done(r->w->m, admission_outcome(code), clock_mono_ns() - r->start_ns);
    if (code == ADMIT_OK) {
        char buf[64];
        int n = snprintf(buf, sizeof(buf), "{\"success\":true,\"data\":%lld}",
                         (long long)order_id);
        http_reply(r, 200, NULL, buf, (size_t)n);
    } else if (code == ADMIT_UNAVAILABLE || admission_msg(code) == NULL) {
        http_reply(r, 503, NULL, unavailable_body, sizeof(unavailable_body) - 1);
    } else {
        api_fail(r, admission_msg(code), admission_code(code));
    }
}

void api_order_seckill(http_req_t *r, int64_t voucher_id)
{
    const auth_user_t *u = api_user(r);
    if (u == NULL) {   /* only if routed without login: a wiring bug, not client input */
        metrics_seckill_done(r->w->m, OUT_UNAUTHORIZED, clock_mono_ns() - r->start_ns);
        api_unauthorized(r);
        return;
    }
    /* Abuse limits (ratelimit.h), before Redis is asked anything. */
    int ip_ok = ratelimit_allow_peer(r, RL_IP_SECKILL);
    if (!ip_ok || !ratelimit_allow(r, RL_USER_SECKILL, (uint64_t)u->id)) {
        metrics_seckill_done(r->w->m, OUT_RATE_LIMITED, clock_mono_ns() - r->start_ns);
        api_rate_limited(r, ip_ok ? RL_USER_SECKILL : RL_IP_SECKILL);
        return;
    }
    if (r->w->app->cfg.mode == MODE_SYNC)
        sync_order_try(r, voucher_id, u->id, on_admitted);
    else if (lab_mode_is_sql(r->w->app->cfg.mode))
        lab_sql_try(r, voucher_id, u->id, on_admitted);
    else
        admission_try(r, voucher_id, u->id, on_admitted);
}

/* ------------------------------------------------------------ order lookups */

/* One user's not-yet-persisted orders found in Redis: (voucher, order) pairs. */
typedef struct pending_order {
    int64_t voucher_id;
    int64_t order_id;
} pending_order_t;

typedef struct lookup {
    http_req_t *r;
    worker_t *w;
    int64_t user_id;
    int64_t order_id;           /* GET /{id}; 0 for of/me */
    /* filled by the job */
    int rc;                     /* STORE_* of the main query */
    int ids_rc;                 /* STORE_* of store_seckill_ids */
    store_order_t order;        /* GET /{id} */
    store_order_t *orders;      /* of/me */
    size_t norders;
    int64_t *vids;
    size_t nvids;
    /* Redis phase */
    size_t left;                /* HGET replies still expected */
    int redis_failed;
    pending_order_t *found;     /* at most nvids */
    size_t nfound;
} lookup_t;

static void lookup_free(lookup_t *L)
{
    free(L->orders);
    free(L->vids);
    free(L->found);
    free(L);
}

static void order_json(sb_t *s, int64_t id, int64_t user_id, int64_t voucher_id, int status,
                       int64_t create_time, int persisted)
{
    sb_printf(s, "{\"id\":%lld,\"userId\":%lld,\"voucherId\":%lld,\"status\":%d,\"createTime\":",
              (long long)id, (long long)user_id, (long long)voucher_id, status);
    sb_json_datetime(s, create_time);
    sb_puts(s, persisted ? ",\"persisted\":true}" : ",\"persisted\":false}");
}

/* Parses a Redis integer-as-string; 0 when it is not one. */
static int64_t reply_i64(const redisReply *rep)
{
    if (rep == NULL || rep->type != REDIS_REPLY_STRING || rep->len == 0 || rep->len > 19) {
        return 0;
    }
    int64_t v;
    return api_parse_id(rep->str, rep->len, &v) == 0 ? v : 0;
}

static void lookup_finish(lookup_t *L);

typedef struct hget_priv {
    lookup_t *L;
    int64_t voucher_id;
} hget_priv_t;

static void on_hget(struct redisReply *rep, void *priv)
{
    hget_priv_t *hp = priv;
    lookup_t *L = hp->L;
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
        L->redis_failed = 1;
    } else {
        int64_t oid = reply_i64(rep);
        if (oid > 0) {
            L->found[L->nfound].voucher_id = hp->voucher_id;
            L->found[L->nfound].order_id = oid;
            L->nfound++;
        }
    }
    free(hp);
    if (--L->left == 0) {
        lookup_finish(L);
    }
}

/* Sends HGET seckill:order:{v} <userId> for every flash-sale voucher, pipelined;
 * lookup_finish(L) runs after the last reply (or right away if there is none). */
static void redis_phase(lookup_t *L)
{
    size_t n = L->nvids;
    if (n == 0) {
        lookup_finish(L);
        return;
    }
    L->found = calloc(n, sizeof(*L->found));
    hget_priv_t **hps = calloc(n, sizeof(*hps));
    int oom = L->found == NULL || hps == NULL;
    for (size_t i = 0; !oom && i < n; i++) {
        hps[i] = malloc(sizeof(**hps));
        oom = hps[i] == NULL;
    }
    if (oom) {
        for (size_t i = 0; hps != NULL && i < n; i++) {
            free(hps[i]);
        }
        free(hps);
        L->redis_failed = 1;
        lookup_finish(L);
        return;
    }
    char uid[24];
    int ul = snprintf(uid, sizeof(uid), "%lld", (long long)L->user_id);
    rds_t *c = L->w->rds;
    int64_t *vids = L->vids;
    L->left = n;
    /* L stays alive until the n-th reply, which cannot come before the n-th send; after
     * that send nothing here touches L (vids and n are locals). */
    for (size_t i = 0; i < n; i++) {
        char key[64];
        int kl = key_buyers(key, sizeof(key), vids[i]);
        hps[i]->L = L;
        hps[i]->voucher_id = vids[i];
        if (kl < 0) {
            key[0] = '\0';
            kl = 0;
        }
        const char *argv[3] = { "HGET", key, uid };
        size_t lens[3] = { 4, (size_t)kl, (size_t)ul };
        hget_priv_t *hp = hps[i];
        if (i == n - 1) {
            free(hps);
        }
        rds_command(c, on_hget, hp, 3, argv, lens);
    }
}

static int in_sql(const lookup_t *L, int64_t order_id)
{
    for (size_t i = 0; i < L->norders; i++) {
        if (L->orders[i].id == order_id) {
            return 1;
        }
    }
    return 0;
}

static void lookup_finish(lookup_t *L)
{
    http_req_t *r = L->r;
    if (L->redis_failed) {
        lookup_free(L);
        api_unavailable(r, "redis unavailable");
        return;
    }
    sb_t s = SB_INIT;
    if (L->order_id != 0) {
        for (size_t i = 0; i < L->nfound; i++) {
            if (L->found[i].order_id == L->order_id) {
                order_json(&s, L->order_id, L->user_id, L->found[i].voucher_id, 1,
                           orderid_time(L->order_id), 0);
                break;
            }
        }
        lookup_free(L);
        if (s.len == 0) {
            api_fail(r, "订单不存在", "NOT_FOUND");
        } else {
            api_ok(r, s.buf, s.len);
        }
        sb_free(&s);
        return;
    }
    /* of/me: not-yet-persisted orders are the newest, so they come first. */
    sb_puts(&s, "[");
    int first = 1;
    for (size_t i = 0; i < L->nfound; i++) {
        if (in_sql(L, L->found[i].order_id)) {
            continue;
        }
        if (!first) {
            sb_puts(&s, ",");
        }
        first = 0;
        order_json(&s, L->found[i].order_id, L->user_id, L->found[i].voucher_id, 1,
                   orderid_time(L->found[i].order_id), 0);
    }
    for (size_t i = 0; i < L->norders; i++) {
        const store_order_t *o = &L->orders[i];
        if (!first) {
            sb_puts(&s, ",");
        }
        first = 0;
        order_json(&s, o->id, o->user_id, o->voucher_id, o->status, o->create_time, 1);
    }
    sb_puts(&s, "]");
    lookup_free(L);
    api_ok(r, s.buf, s.len);
    sb_free(&s);
}

static void run_order_get(store_t *st, void *arg)
{
    lookup_t *L = arg;
    if (st == NULL) {
        L->rc = STORE_ERR;
        return;
    }
    L->rc = store_order_get(st, L->order_id, &L->order);
    if (L->rc == STORE_NOTFOUND) {
        L->ids_rc = store_seckill_ids(st, &L->vids, &L->nvids);
    }
}

static void done_order_get(worker_t *w, void *arg)
{
    lookup_t *L = arg;
    http_req_t *r = L->r;
    if (L->rc == STORE_OK) {
        if (L->order.user_id != L->user_id) {
            lookup_free(L);
            api_fail(r, "订单不存在", "NOT_FOUND");   /* someone else's: not yours to see */
            return;
        }
        sb_t s = SB_INIT;
        order_json(&s, L->order.id, L->order.user_id, L->order.voucher_id, L->order.status,
                   L->order.create_time, 1);
        lookup_free(L);
        api_ok(r, s.buf, s.len);
        sb_free(&s);
        return;
    }
    if (L->rc != STORE_NOTFOUND || L->ids_rc != STORE_OK) {
        lookup_free(L);
        api_unavailable(r, "database unavailable");
        return;
    }
    redis_phase(L);
}

static void run_of_me(store_t *st, void *arg)
{
    lookup_t *L = arg;
    if (st == NULL) {
        L->rc = STORE_ERR;
        return;
    }
    L->rc = store_orders_of_user(st, L->user_id, ORDERS_OF_ME_MAX, &L->orders, &L->norders);
    if (L->rc == STORE_NOTFOUND) {
        L->rc = STORE_OK;
        L->norders = 0;
    }
    if (L->rc == STORE_OK) {
        L->ids_rc = store_seckill_ids(st, &L->vids, &L->nvids);
    }
}

static void done_of_me(worker_t *w, void *arg)
{
    lookup_t *L = arg;
    http_req_t *r = L->r;
    if (L->rc != STORE_OK || L->ids_rc != STORE_OK) {
        lookup_free(L);
        api_unavailable(r, "database unavailable");
        return;
    }
    redis_phase(L);
}

static void lookup_submit(http_req_t *r, int64_t order_id, jobs_run_fn run, jobs_done_fn done)
{
    const auth_user_t *u = api_user(r);
    if (u == NULL) {
        api_unauthorized(r);
        return;
    }
    lookup_t *L = calloc(1, sizeof(*L));
    if (L == NULL) {
        api_unavailable(r, "out of memory");
        return;
    }
    L->r = r;
    L->w = r->w;
    L->user_id = u->id;
    L->order_id = order_id;
    L->rc = STORE_ERR;
    L->ids_rc = STORE_ERR;
    if (jobs_submit(r->w->app->jobs, r->w, run, done, L) != 0) {
        lookup_free(L);
        api_unavailable(r, "server busy");
    }
}

void api_order_get(http_req_t *r, int64_t order_id)
{
    lookup_submit(r, order_id, run_order_get, done_order_get);
}

void api_order_of_me(http_req_t *r)
{
    lookup_submit(r, 0, run_of_me, done_of_me);
}
