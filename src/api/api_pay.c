/* api_pay.c -- the order lifecycle's endpoints: POST /voucher-order/{id}/cancel (the
 * buyer's) and POST /pay/notify (the payment provider's). The decisions are src/order/'s
 * (life.h); this file checks the login or the notice's signature, the input and the
 * per-user limit, and answers in the course's envelope. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "api/api.h"
#include "auth/auth.h"
#include "order/life.h"
#include "order/paykey.h"
#include "sale/ratelimit.h"
#include "server/worker.h"

/* The answers cancel and pay share. */
static void common_reply(http_req_t *r, life_rc_t rc, const char *unsupported)
{
    switch (rc) {
    case LIFE_NOTFOUND:
    case LIFE_NOT_YET:
        api_fail(r, "订单不存在", "NOT_FOUND");
        return;
    case LIFE_UNSUPPORTED:
        api_fail(r, unsupported, "UNSUPPORTED");
        return;
    case LIFE_REDIS_DOWN:
        api_unavailable(r, "redis unavailable");
        return;
    case LIFE_BUSY:
        api_unavailable(r, "server busy");
        return;
    case LIFE_RETRY:   /* as an admission the replicas do not have yet answers */
        api_error(r, 503, "系统繁忙，请重试", "RETRY");
        return;
    default:
        api_unavailable(r, "database unavailable");
        return;
    }
}

static void on_cancel(void *ctx, life_rc_t rc)
{
    http_req_t *r = ctx;
    switch (rc) {
    case LIFE_DONE:
    case LIFE_ALREADY:   /* a second cancel answers the same: nothing is returned twice (also
                          * once a late payment of the cancelled order was refunded) */
        api_ok(r, NULL, 0);
        return;
    case LIFE_PAID:
        api_fail(r, "订单已支付，无法取消", "PAID");
        return;
    default:
        common_reply(r, rc, "当前下单模式不支持取消订单");
        return;
    }
}

void api_pay_cancel(http_req_t *r, int64_t order_id, const auth_user_t *u)
{
    if (u == NULL) {   /* only if routed without login: a wiring bug */
        api_unauthorized(r);
        return;
    }
    /* a cancel is a lookup and a write: it counts against the user's lookup limit */
    if (!ratelimit_allow(r, RL_USER_LOOKUP, (uint64_t)u->id)) {
        api_rate_limited(r, RL_USER_LOOKUP);
        return;
    }
    life_cancel(r->w, u->id, order_id, on_cancel, r);
}

/* ---------------------------------------------------------------- POST /pay/notify */

static void on_pay(void *ctx, life_rc_t rc)
{
    http_req_t *r = ctx;
    static const char taken[] = "\"PAID\"", refunded[] = "\"REFUNDED\"";
    switch (rc) {
    case LIFE_DONE:
    case LIFE_ALREADY:   /* the same notice again: the same answer */
        api_ok(r, taken, sizeof taken - 1);
        return;
    case LIFE_REFUNDED:  /* handled: the payment goes back (the order was cancelled) */
        api_ok(r, refunded, sizeof refunded - 1);
        return;
    case LIFE_BAD_AMOUNT:
        api_fail(r, "支付金额不符", "BAD_AMOUNT");
        return;
    default:
        common_reply(r, rc, "当前下单模式不支持支付通知");
        return;
    }
}

/* A payment id as the provider's: 1..LIFE_PAYMENT_ID_MAX of [A-Za-z0-9_.-] (it goes into
 * a Redis field and the refund command's environment). */
static int payment_id_ok(const char *z)
{
    size_t n = strlen(z);
    if (n == 0 || n > LIFE_PAYMENT_ID_MAX)
        return 0;
    return strspn(z, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

void api_pay_notify(http_req_t *r)
{
    const char *sig = r->pay_signature;
    const char *body = r->body ? r->body : "";
    int ok = sig ? paykey_verify(body, r->body_len, sig, strlen(sig)) : 0;
    if (ok < 0) {
        api_error(r, 503, "支付通知未启用 (no pay key: --pay-key-file)", "PAY_DISABLED");
        return;
    }
    if (ok == 0) {   /* nothing is read from an unsigned body */
        api_error(r, 401, "签名错误", "BAD_SIGNATURE");
        return;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, r->body_len, JSON_REJECT_DUPLICATES, &jerr);
    json_t *oid = json_object_get(root, "orderId"), *pid = json_object_get(root, "paymentId"),
           *amt = json_object_get(root, "amount");
    const char *why = NULL;
    if (root == NULL)   /* jansson's own text may quote the body: not echoed */
        why = "request body is not valid JSON (UTF-8, no duplicate keys, integers within "
              "64 bits, nothing after the object)";
    else if (!json_is_object(root))
        why = "request body must be a JSON object";
    else if (!json_is_integer(oid) || json_integer_value(oid) <= 0)
        why = "orderId must be a positive integer";
    else if (!json_is_string(pid) || !payment_id_ok(json_string_value(pid)))
        why = "paymentId must be 1 to 64 characters of A-Z a-z 0-9 _ . -";
    else if (!json_is_integer(amt) || json_integer_value(amt) < 0)
        why = "amount must be a non-negative integer (fen)";
    if (why) {
        json_decref(root);
        api_error(r, 400, why, "BAD_REQUEST");
        return;
    }
    int64_t order_id = json_integer_value(oid), amount = json_integer_value(amt);
    char payment_id[LIFE_PAYMENT_ID_MAX + 1];
    snprintf(payment_id, sizeof payment_id, "%s", json_string_value(pid));
    json_decref(root);
    life_pay(r->w, order_id, payment_id, amount, on_pay, r);
}
