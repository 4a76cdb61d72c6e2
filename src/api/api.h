/* api.h -- the HTTP API: routing, and one handler file per resource.
 *
 *   api.c          routing table (method + path -> handler), /api prefix, reply helpers
 *   api_user.c     /user/code, /user/login, /user/me, /user/logout
 *   api_voucher.c  POST /voucher, POST /voucher/seckill, GET /voucher/list/{shopId}
 *   api_order.c    POST /voucher-order/seckill/{id}, GET /voucher-order/{id}, /of/me
 *   api_ops.c      /health, /metrics
 *   api_shop.c     GET /shop/{id}, /shop/of/type, /shop/of/name, /shop-type/list; POST, PUT /shop
 *   api_blog.c     the blog and follow calls of the course's pages, answered empty
 *   api_pay.c      POST /voucher-order/{id}/cancel, POST /pay/notify (the order lifecycle,
 *                  src/order/)
 *
 * Handlers validate input, call core modules (auth, admission, jobs+store) and shape the
 * course's Result envelope: {"success":bool,"errorMsg":..,"data":..,"total":..}, absent
 * members omitted. Business failures are HTTP 200 + success:false; missing login is 401
 * with an empty body; malformed input is 400 with success:false and a clear errorMsg; a
 * dependency down is 503 with success:false. Handlers never talk to Redis or SQL directly.
 * Every handler ends in exactly one http_reply(). */
#ifndef SECKILL_API_H
#define SECKILL_API_H

#include <stddef.h>
#include <stdint.h>
#include "http/http.h"

struct auth_user;
struct sb;

/* The http_handler_fn given to http_worker_init. */
void api_dispatch(http_req_t *r);

/* Reply helpers (api.c). data_json is a raw JSON value (e.g. "42", "\"abc\"", "[...]"). */
void api_ok(http_req_t *r, const char *data_json, size_t len);   /* data_json NULL: no data */
void api_fail(http_req_t *r, const char *msg, const char *code); /* 200, success:false */
/* The body api_fail() sends, written into s (for answers made once and kept). */
void api_fail_body(struct sb *s, const char *msg, const char *code);
void api_error(http_req_t *r, int status, const char *msg, const char *code);
void api_unauthorized(http_req_t *r);                            /* 401, empty body */
void api_unavailable(http_req_t *r, const char *what);           /* 503, success:false */

/* Parses a decimal id: 1..2^63-1, digits only, no sign, no leading '+', no spaces.
 * Returns 0 or -1. */
int api_parse_id(const char *z, size_t n, int64_t *out);

/* Handlers; path parameters already parsed by the router. */
void api_user_code(http_req_t *r);
/* GET /user/code/challenge: a proof-of-work challenge for --code-gate (room/pow.h). */
void api_user_code_challenge(http_req_t *r);
void api_user_login(http_req_t *r);
void api_user_me(http_req_t *r, const struct auth_user *u);
void api_user_logout(http_req_t *r);
/* POST /user/logout/all: every token of the user (auth_logout_all). */
void api_user_logout_all(http_req_t *r, const struct auth_user *u);
void api_voucher_create(http_req_t *r, int seckill);
void api_voucher_list(http_req_t *r, int64_t shop_id);
void api_order_seckill(http_req_t *r, int64_t voucher_id, const struct auth_user *u);
void api_order_get(http_req_t *r, int64_t order_id, const struct auth_user *u);
void api_order_of_me(http_req_t *r, const struct auth_user *u);
void api_room_join(http_req_t *r, int64_t voucher_id, const struct auth_user *u);
void api_room_poll(http_req_t *r, int64_t voucher_id, const struct auth_user *u);
void api_room_challenge(http_req_t *r, int64_t voucher_id, const struct auth_user *u);
void api_shop_get(http_req_t *r, int64_t id);
void api_shop_types(http_req_t *r);
void api_shop_of_type(http_req_t *r);
void api_shop_of_name(http_req_t *r);
void api_shop_create(http_req_t *r);
void api_shop_update(http_req_t *r);
void api_blog_empty_list(http_req_t *r);   /* [] */
void api_blog_feed(http_req_t *r);         /* an empty ScrollResult */
void api_blog_get(http_req_t *r);          /* 笔记不存在！ */
void api_blog_follows(http_req_t *r);      /* false */
void api_blog_unsupported(http_req_t *r);  /* 功能未完成 */
/* The order lifecycle (api_pay.c): POST /voucher-order/{id}/cancel, POST /pay/notify. */
void api_pay_cancel(http_req_t *r, int64_t order_id, const struct auth_user *u);
void api_pay_notify(http_req_t *r);
void api_ops_health(http_req_t *r);
void api_ops_metrics(http_req_t *r);

/* The 429 reply of a rate limit (ratelimit.h): {"success":false,"errorMsg":
 * "请求过于频繁，请稍后再试","code":"RATE_LIMITED"}; kind is the limit that refused. */
void api_rate_limited(http_req_t *r, int kind);

/* The sale board (api_board.c): its page, and its data (admin token required). */
typedef enum { BOARD_HTML, BOARD_JS, BOARD_CSS } board_asset_t;
void api_board_asset(http_req_t *r, board_asset_t a);
void api_board_data(http_req_t *r);

/* The admin's sale controls (api_sale.c): POST /admin/api/sale/{id}/<action>. */
typedef enum { SALE_PAUSE, SALE_RESUME, SALE_END, SALE_EXTEND } sale_action_t;
void api_sale_control(http_req_t *r, int64_t voucher_id, sale_action_t act);

/* 1 if the request's x-admin-token equals the configured admin token (never when none
 * is configured); compared in constant time, and only while the client has not guessed
 * wrong too often (auth/admin.h: then 0 with r->retry_after_s set). */
int api_admin_ok(http_req_t *r);
/* api_admin_ok, or replies itself and returns 0: 429 with Retry-After to a client that has
 * guessed wrong too often, else 403. */
int api_admin_required(http_req_t *r);
/* 1 if r may read /metrics: no --metrics-token is configured, or r carries
 * "authorization: Bearer <token>" (compared in constant time). */
int api_metrics_ok(const http_req_t *r);

/* The course's phone rule, RegexUtils.isPhoneInvalid inverted. */
int api_phone_valid(const char *z);


#endif
