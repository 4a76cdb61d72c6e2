/* api_pay.c -- the order lifecycle's endpoints: POST /voucher-order/{id}/cancel. The
 * decisions are src/order/'s (life.h); this file checks the login and the per-user limit
 * and answers in the course's envelope. */
#include "api/api.h"
#include "auth/auth.h"
#include "order/life.h"
#include "sale/ratelimit.h"
#include "server/worker.h"

static void on_cancel(void *ctx, life_rc_t rc)
{
    http_req_t *r = ctx;
    switch (rc) {
    case LIFE_DONE:
    case LIFE_ALREADY:   /* a second cancel answers the same: nothing is returned twice */
        api_ok(r, NULL, 0);
        return;
    case LIFE_PAID:
        api_fail(r, "订单已支付，无法取消", "PAID");
        return;
    case LIFE_REFUNDED:
        api_fail(r, "订单已退款，无法取消", "REFUNDED");
        return;
    case LIFE_NOTFOUND:
        api_fail(r, "订单不存在", "NOT_FOUND");
        return;
    case LIFE_UNSUPPORTED:
        api_fail(r, "当前下单模式不支持取消订单", "UNSUPPORTED");
        return;
    case LIFE_REDIS_DOWN:
        api_unavailable(r, "redis unavailable");
        return;
    case LIFE_BUSY:
        api_unavailable(r, "server busy");
        return;
    default:
        api_unavailable(r, "database unavailable");
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
