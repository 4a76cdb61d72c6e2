/* api_order.c -- POST /voucher-order/seckill/{id} (the hot path), GET /voucher-order/{id},
 * GET /voucher-order/of/me.
 *
 * The flash sale is: logged-in user (router) -> the waiting room's gate (room.h: a voucher
 * with a room needs a valid pass, checked in memory) -> the order mode's order
 * (order_mode.h; stream mode: admission_try) -> reply from a stack buffer. No SQL, no JSON
 * library, no allocation here.
 *
 * Order lookups are orders.h's (SQL merged with the admitted orders still in the vouchers'
 * buyer hashes in Redis); this file checks the login and the per-user lookup limit and
 * writes the JSON. Admitted orders not yet in SQL come with "persisted":false. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "sale/admission.h"
#include "api/api.h"
#include "core/app.h"
#include "auth/auth.h"
#include "server/metrics.h"
#include "api/orders.h"
#include "sale/order_mode.h"
#include "sale/ratelimit.h"
#include "server/sale_totals.h"
#include "room/room.h"
#include "core/sb.h"
#include "server/worker.h"

/* ------------------------------------------------------------ the flash sale */

static const char unavailable_body[] =
    "{\"success\":false,\"errorMsg\":\"服务器异常\",\"code\":\"UNAVAILABLE\"}";
static const char retry_body[] =
    "{\"success\":false,\"errorMsg\":\"系统繁忙，请重试\",\"code\":\"RETRY\"}";

/* The refusals (sold out, duplicate, not started, ended, no such voucher, paused, no
 * pass) as bodies made once: the sold-out answer is nearly every answer of a sale. */
#define REFUSAL_MAX ADMIT_QUEUE_REQUIRED
static struct refusal {
    char body[160];
    size_t len;                 /* 0: not made (no message for the code, or too long) */
} refusals[REFUSAL_MAX + 1];
static pthread_once_t refusals_once = PTHREAD_ONCE_INIT;

static void refusals_make(void)
{
    for (int code = 1; code <= REFUSAL_MAX; code++) {
        const char *msg = admission_msg(code);
        if (msg == NULL) {
            continue;
        }
        sb_t s = SB_INIT;
        api_fail_body(&s, msg, admission_code(code));
        if (s.len < sizeof refusals[code].body) {
            memcpy(refusals[code].body, s.buf, s.len);
            refusals[code].len = s.len;
        }
        sb_free(&s);
    }
}

static void on_admitted(http_req_t *r, int code, const admission_order_t *order)
{
    outcome_t o = admission_outcome(code);
    metrics_seckill_done(r->w->m, o, clock_now_ns() - r->start_ns);
    sale_totals_count(r->w, (int64_t)(intptr_t)r->ctx, o);   /* the sale: api_order_seckill */
    if (code > 0 && code <= REFUSAL_MAX) {
        pthread_once(&refusals_once, refusals_make);
        if (refusals[code].len > 0) {
            http_reply(r, 200, NULL, refusals[code].body, refusals[code].len);
            return;
        }
    }
    if (code == ADMIT_OK) {
        static const char head[] = "{\"success\":true,\"data\":";
        char buf[sizeof(head) + SB_DEC_MAX + 1];
        memcpy(buf, head, sizeof(head) - 1);
        memcpy(buf + sizeof(head) - 1, order->dec, SB_DEC_MAX);   /* fixed size: moves */
        size_t n = sizeof(head) - 1 + (size_t)order->len;
        buf[n++] = '}';
        http_reply(r, 200, NULL, buf, n);
    } else if (code == ADMIT_RETRY) {
        http_reply(r, 503, NULL, retry_body, sizeof(retry_body) - 1);
    } else if (code == ADMIT_UNAVAILABLE || admission_msg(code) == NULL) {
        http_reply(r, 503, NULL, unavailable_body, sizeof(unavailable_body) - 1);
    } else {
        api_fail(r, admission_msg(code), admission_code(code));
    }
}

void api_order_seckill(http_req_t *r, int64_t voucher_id, const auth_user_t *u)
{
    if (u == NULL) {   /* only if routed without login: a wiring bug, not client input */
        metrics_seckill_done(r->w->m, OUT_UNAUTHORIZED, clock_now_ns() - r->start_ns);
        api_unauthorized(r);
        return;
    }
    /* Abuse limits (ratelimit.h), before Redis is asked anything. */
    int ip_ok = ratelimit_allow_peer(r, RL_IP_SECKILL);
    if (!ip_ok || !ratelimit_allow(r, RL_USER_SECKILL, (uint64_t)u->id)) {
        metrics_seckill_done(r->w->m, OUT_RATE_LIMITED, clock_now_ns() - r->start_ns);
        sale_totals_count(r->w, voucher_id, OUT_RATE_LIMITED);
        api_rate_limited(r, ip_ok ? RL_USER_SECKILL : RL_IP_SECKILL);
        return;
    }
    r->ctx = (void *)(intptr_t)voucher_id;   /* for on_admitted's per-sale totals */
    /* A voucher with a waiting room needs a valid pass, checked in memory (room.h). */
    room_order(r, voucher_id, u->id, on_admitted, order_mode_row(r->w->app->cfg.mode)->order);
}

/* ------------------------------------------------------------ order lookups */

/* The order as the course's VoucherOrder would show it (times as createTime, nulls left
 * out): payTime once paid, refundTime once refunded (6); an unpaid order's payDeadline,
 * createTime + --pay-timeout-s, when the order mode times orders out (stream and sync;
 * docs/lifecycle.md). */
static void order_json(sb_t *s, const orders_rec_t *o, const config_t *cfg)
{
    sb_printf(s, "{\"id\":%lld,\"userId\":%lld,\"voucherId\":%lld,\"status\":%d,\"createTime\":",
              (long long)o->id, (long long)o->user_id, (long long)o->voucher_id, o->status);
    sb_json_datetime(s, o->create_time);
    if (o->pay_time > 0) {
        sb_puts(s, ",\"payTime\":");
        sb_json_datetime(s, o->pay_time);
    }
    if (o->refund_time > 0) {
        sb_puts(s, ",\"refundTime\":");
        sb_json_datetime(s, o->refund_time);
    }
    if (o->status == 1 && cfg->pay_timeout_s > 0 &&
        (cfg->mode == MODE_STREAM || cfg->mode == MODE_SYNC)) {
        sb_puts(s, ",\"payDeadline\":");
        sb_json_datetime(s, o->create_time + cfg->pay_timeout_s);
    }
    sb_puts(s, o->persisted ? ",\"persisted\":true}" : ",\"persisted\":false}");
}

/* Answers a lookup (orders.h); by_id says whether one order or a list was asked for. */
static void lookup_reply(http_req_t *r, int by_id, orders_rc_t rc, const orders_rec_t *recs,
                         size_t n)
{
    switch (rc) {
    case ORDERS_OK:
        break;
    case ORDERS_NOTFOUND:
        api_fail(r, "订单不存在", "NOT_FOUND");
        return;
    case ORDERS_REDIS_DOWN:
        api_unavailable(r, "redis unavailable");
        return;
    case ORDERS_BUSY:
        api_unavailable(r, "server busy");
        return;
    default:
        api_unavailable(r, "database unavailable");
        return;
    }
    sb_t s = SB_INIT;
    if (by_id) {
        order_json(&s, &recs[0], &r->w->app->cfg);
    } else {
        sb_puts(&s, "[");
        for (size_t i = 0; i < n; i++) {
            if (i > 0)
                sb_puts(&s, ",");
            order_json(&s, &recs[i], &r->w->app->cfg);
        }
        sb_puts(&s, "]");
    }
    api_ok(r, s.buf, s.len);
    sb_free(&s);
}

static void on_order(void *ctx, orders_rc_t rc, const orders_rec_t *recs, size_t n)
{
    lookup_reply(ctx, 1, rc, recs, n);
}

static void on_orders(void *ctx, orders_rc_t rc, const orders_rec_t *recs, size_t n)
{
    lookup_reply(ctx, 0, rc, recs, n);
}

/* 1 if u may look up now; else the request is answered. */
static int lookup_allowed(http_req_t *r, const auth_user_t *u)
{
    if (u == NULL) {   /* only if routed without login: a wiring bug */
        api_unauthorized(r);
        return 0;
    }
    if (!ratelimit_allow(r, RL_USER_LOOKUP, (uint64_t)u->id)) {
        api_rate_limited(r, RL_USER_LOOKUP);
        return 0;
    }
    return 1;
}

void api_order_get(http_req_t *r, int64_t order_id, const auth_user_t *u)
{
    if (lookup_allowed(r, u))
        orders_view(r->w, u->id, order_id, on_order, r);
}

void api_order_of_me(http_req_t *r, const auth_user_t *u)
{
    if (lookup_allowed(r, u))
        orders_of_user(r->w, u->id, on_orders, r);
}
