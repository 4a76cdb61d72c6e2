/* api.c -- the router: method + path -> handler, login gate, and the Result envelope.
 *
 * Routes are one declarative table. A pattern is a literal path with at most one "{id}"
 * segment (a positive 64-bit decimal, see api_parse_id). Matching is exact: no trailing
 * slash, no percent-decoding (ids are digits, so an encoded id is simply invalid).
 *
 * For a login route the router resolves the token first (auth_resolve; a signed token is
 * checked in memory, see auth.h): no/unknown token
 * -> 401 with an empty body, Redis down -> 503; only then is the id parsed (the course's
 * interceptor also runs before path binding) and the handler called with the user as
 * an argument, valid during that call. On a public route
 * a valid-looking token only gets its TTL refreshed in the background (auth_touch), so
 * public endpoints never wait for the token lookup.
 *
 * Envelope: {"success":..,"errorMsg":..,"data":..,"total":..,"code":..} with absent
 * members omitted, written without allocation for small replies (the sold-out answer
 * is on the hot path). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/app.h"
#include "auth/admin.h"
#include "auth/auth.h"
#include "core/clock.h"
#include "server/metrics.h"
#include "sale/ratelimit.h"
#include "core/sb.h"
#include "server/worker.h"

/* u: the logged-in user on a login route (valid during the call), else NULL. */
typedef void (*route_fn)(http_req_t *r, int64_t id, const auth_user_t *u);

enum {
    RF_LOGIN = 1,     /* needs a valid token (hmdp-spec section 3) */
    RF_ID = 2,        /* pattern has an {id} segment */
    RF_SECKILL = 4,   /* counts in the flash-sale metrics even when refused here */
    RF_NO_TOUCH = 8,  /* public route that does not refresh token TTLs (ops) */
    RF_PROFILE = 16   /* needs the user's nickName and icon, not only the id */
};

typedef struct route {
    int method;
    const char *pattern;    /* literal, or prefix "{id}" suffix */
    int pre;                /* length of the literal, or of the prefix before "{id}" */
    int suf;                /* length of the suffix after "{id}"; -1: no {id} */
    int flags;
    route_fn fn;
} route_t;

/* A literal path, and a path with one {id} segment between prefix and suffix. */
#define LIT(m, path, fl, fn) { m, path, (int)sizeof(path) - 1, -1, fl, fn }
#define ID(m, pre, suf, fl, fn) { m, pre "{id}" suf, (int)sizeof(pre) - 1, (int)sizeof(suf) - 1, (fl) | RF_ID, fn }

/* Adapters to the uniform (r, id, user) signature. */
static void r_user_code(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_user_code(r); }
static void r_user_code_chal(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_user_code_challenge(r); }
static void r_user_login(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_user_login(r); }
static void r_user_me(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_user_me(r, u); }
static void r_user_logout(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_user_logout(r); }
static void r_user_logout_all(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_user_logout_all(r, u); }
static void r_voucher(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_voucher_create(r, 0); }
static void r_voucher_sk(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_voucher_create(r, 1); }
static void r_voucher_list(http_req_t *r, int64_t id, const auth_user_t *u) { api_voucher_list(r, id); }
static void r_order_seckill(http_req_t *r, int64_t id, const auth_user_t *u) { api_order_seckill(r, id, u); }
static void r_order_of_me(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_order_of_me(r, u); }
static void r_order_get(http_req_t *r, int64_t id, const auth_user_t *u) { api_order_get(r, id, u); }
static void r_order_cancel(http_req_t *r, int64_t id, const auth_user_t *u) { api_pay_cancel(r, id, u); }
static void r_pay_notify(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_pay_notify(r); }
static void r_health(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_ops_health(r); }
static void r_metrics(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_ops_metrics(r); }
static void r_board_html(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_board_asset(r, BOARD_HTML); }
static void r_board_js(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_board_asset(r, BOARD_JS); }
static void r_board_css(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_board_asset(r, BOARD_CSS); }
static void r_shop_get(http_req_t *r, int64_t id, const auth_user_t *u) { api_shop_get(r, id); }
static void r_shop_types(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_shop_types(r); }
static void r_shop_of_type(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_shop_of_type(r); }
static void r_shop_of_name(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_shop_of_name(r); }
static void r_shop_create(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_shop_create(r); }
static void r_shop_update(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_shop_update(r); }
static void r_blog_list(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_blog_empty_list(r); }
static void r_blog_feed(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_blog_feed(r); }
static void r_blog_get(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_blog_get(r); }
static void r_follows(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_blog_follows(r); }
static void r_blog_todo(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_blog_unsupported(r); }
static void r_room_join(http_req_t *r, int64_t id, const auth_user_t *u) { api_room_join(r, id, u); }
static void r_room_poll(http_req_t *r, int64_t id, const auth_user_t *u) { api_room_poll(r, id, u); }
static void r_room_challenge(http_req_t *r, int64_t id, const auth_user_t *u) { api_room_challenge(r, id, u); }
static void r_board_data(http_req_t *r, int64_t id, const auth_user_t *u) { (void)id; api_board_data(r); }
static void r_sale_pause(http_req_t *r, int64_t id, const auth_user_t *u) { api_sale_control(r, id, SALE_PAUSE); }
static void r_sale_resume(http_req_t *r, int64_t id, const auth_user_t *u) { api_sale_control(r, id, SALE_RESUME); }
static void r_sale_end(http_req_t *r, int64_t id, const auth_user_t *u) { api_sale_control(r, id, SALE_END); }
static void r_sale_extend(http_req_t *r, int64_t id, const auth_user_t *u) { api_sale_control(r, id, SALE_EXTEND); }

/* First match wins: literal routes come before the {id} route they would also match
 * ("/voucher-order/of/me" before "/voucher-order/{id}"). */
static const route_t routes[] = {
    ID(HM_POST, "/voucher-order/seckill/", "",    RF_LOGIN | RF_SECKILL,    r_order_seckill),
    LIT(HM_GET,  "/voucher-order/of/me",          RF_LOGIN,                 r_order_of_me),
    ID(HM_POST, "/voucher-order/", "/cancel",     RF_LOGIN,                 r_order_cancel),
    ID(HM_GET,  "/voucher-order/", "",            RF_LOGIN,                 r_order_get),
    /* the waiting room (api_room.c) */
    ID(HM_POST, "/seckill/queue/", "",            RF_LOGIN,                 r_room_join),
    ID(HM_GET,  "/seckill/queue/", "",            RF_LOGIN,                 r_room_poll),
    ID(HM_GET,  "/seckill/challenge/", "",        RF_LOGIN,                 r_room_challenge),
    LIT(HM_POST, "/pay/notify",                   RF_NO_TOUCH,              r_pay_notify),
    LIT(HM_POST, "/user/code",                    0,                        r_user_code),
    LIT(HM_GET,  "/user/code/challenge",          0,                        r_user_code_chal),
    LIT(HM_POST, "/user/login",                   0,                        r_user_login),
    LIT(HM_GET,  "/user/me",                      RF_LOGIN | RF_PROFILE,    r_user_me),
    LIT(HM_POST, "/user/logout",                  RF_LOGIN,                 r_user_logout),
    LIT(HM_POST, "/user/logout/all",              RF_LOGIN,                 r_user_logout_all),
    LIT(HM_POST, "/voucher",                      0,                        r_voucher),
    LIT(HM_POST, "/voucher/seckill",              0,                        r_voucher_sk),
    ID(HM_GET,  "/voucher/list/", "",             0,                        r_voucher_list),
    LIT(HM_GET,  "/shop-type/list",               0,                        r_shop_types),
    LIT(HM_GET,  "/shop/of/type",                 0,                        r_shop_of_type),
    LIT(HM_GET,  "/shop/of/name",                 0,                        r_shop_of_name),
    LIT(HM_POST, "/shop",                         0,                        r_shop_create),
    LIT(HM_PUT,  "/shop",                         0,                        r_shop_update),
    ID(HM_GET,  "/shop/", "",                     0,                        r_shop_get),
    /* the course's blog and follow calls, answered empty (api_blog.c) */
    LIT(HM_GET,  "/blog/hot",                     0,                        r_blog_list),
    LIT(HM_GET,  "/blog/of/me",                   RF_LOGIN,                 r_blog_list),
    LIT(HM_GET,  "/blog/of/user",                 RF_LOGIN,                 r_blog_list),
    LIT(HM_GET,  "/blog/of/follow",               RF_LOGIN,                 r_blog_feed),
    ID(HM_GET,  "/blog/likes/", "",               RF_LOGIN,                 r_blog_list),
    ID(HM_PUT,  "/blog/like/", "",                RF_LOGIN,                 r_blog_todo),
    ID(HM_GET,  "/blog/", "",                     RF_LOGIN,                 r_blog_get),
    ID(HM_GET,  "/follow/or/not/", "",            RF_LOGIN,                 r_follows),
    ID(HM_GET,  "/follow/common/", "",            RF_LOGIN,                 r_blog_list),
    ID(HM_PUT,  "/follow/", "/true",              RF_LOGIN,                 r_blog_todo),
    ID(HM_PUT,  "/follow/", "/false",             RF_LOGIN,                 r_blog_todo),
    LIT(HM_GET,  "/health",                       RF_NO_TOUCH,              r_health),
    LIT(HM_GET,  "/metrics",                      RF_NO_TOUCH,              r_metrics),
    LIT(HM_GET,  "/admin/",                       RF_NO_TOUCH,              r_board_html),
    LIT(HM_GET,  "/admin/board.js",               RF_NO_TOUCH,              r_board_js),
    LIT(HM_GET,  "/admin/board.css",              RF_NO_TOUCH,              r_board_css),
    LIT(HM_GET,  "/admin/api/board",              RF_NO_TOUCH,              r_board_data),
    ID(HM_POST, "/admin/api/sale/", "/pause",     RF_NO_TOUCH,              r_sale_pause),
    ID(HM_POST, "/admin/api/sale/", "/resume",    RF_NO_TOUCH,              r_sale_resume),
    ID(HM_POST, "/admin/api/sale/", "/end",       RF_NO_TOUCH,              r_sale_end),
    ID(HM_POST, "/admin/api/sale/", "/extend",    RF_NO_TOUCH,              r_sale_extend),
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))


/* ---------------------------------------------------------------- matching */

/* Matches path against route rt. On a match returns 1 and, for an {id} route, sets seg
 * and seglen to the id segment (unparsed, non-empty, without '/'). */
static int route_match(const route_t *rt, const char *path, size_t len, const char **seg,
                       size_t *seglen)
{
    size_t pre = (size_t)rt->pre;
    if (rt->suf < 0) {
        return len == pre && memcmp(rt->pattern, path, len) == 0;
    }
    size_t suf = (size_t)rt->suf;
    const char *suffix = rt->pattern + pre + 4;
    if (len < pre + 1 + suf || memcmp(rt->pattern, path, pre) != 0 ||
        memcmp(path + len - suf, suffix, suf) != 0) {
        return 0;
    }
    const char *s = path + pre;
    size_t n = len - pre - suf;
    if (memchr(s, '/', n) != NULL) {
        return 0;
    }
    *seg = s;
    *seglen = n;
    return 1;
}

/* Finds the route: *found is the matching route, or NULL; *path_known says whether some
 * route (of any method) has this path, which turns a miss into 405 rather than 404. */
static const route_t *route_find(const http_req_t *r, int *path_known)
{
    const char *seg;
    size_t seglen;
    *path_known = 0;
    for (size_t i = 0; i < NROUTES; i++) {
        if (!route_match(&routes[i], r->path, r->path_len, &seg, &seglen)) {
            continue;
        }
        /* HEAD is GET without the body (http.c drops it). */
        if (routes[i].method == r->method ||
            (r->method == HM_HEAD && routes[i].method == HM_GET)) {
            return &routes[i];
        }
        *path_known = 1;
    }
    return NULL;
}

/* -------------------------------------------------------------- admin token */

static void envelope(http_req_t *r, int status, int success, const char *msg, const char *data,
                     size_t dlen, const char *code);

/* given == want, in a time that does not depend on where they differ (only want's
 * length shows). */
static int secret_eq(const char *given, const char *want)
{
    size_t gl = strlen(given), wl = strlen(want);
    unsigned diff = gl != wl;
    for (size_t i = 0; i < wl; i++) {
        unsigned char g = i < gl ? (unsigned char)given[i] : 0;
        diff |= (unsigned)(g ^ (unsigned char)want[i]);
    }
    return diff == 0;
}

int api_admin_ok(http_req_t *r)
{
    const char *given = r->admin_token, *want = r->w->app->admin_token;
    if (given == NULL || want[0] == '\0') {
        return 0;   /* no header (or no admin token here): not a guess */
    }
    if (!admin_allowed(r)) {
        return 0;   /* guessed wrong too often: not even compared (admin.h) */
    }
    if (!secret_eq(given, want)) {
        admin_wrong(r);
        return 0;
    }
    return 1;
}

int api_admin_required(http_req_t *r)
{
    r->retry_after_s = 0;
    if (api_admin_ok(r)) {
        return 1;
    }
    if (r->retry_after_s > 0) {
        envelope(r, 429, 0, "请求过于频繁，请稍后再试", NULL, 0, "RATE_LIMITED");
    } else {
        api_error(r, 403, "admin token required", "FORBIDDEN");
    }
    return 0;
}

int api_metrics_ok(const http_req_t *r)
{
    const char *want = r->w->app->cfg.metrics_token;
    if (want[0] == '\0') {
        return 1;
    }
    const char *given = r->authorization;
    if (given == NULL || strncmp(given, "Bearer ", 7) != 0) {
        return 0;
    }
    return secret_eq(given + 7, want);
}

/* -------------------------------------------------------------- the envelope */

/* Writes the envelope into s. msg, data and code may be NULL (member omitted). Messages
 * may quote client input, which sb_json_str keeps valid JSON (bad UTF-8 becomes U+FFFD). */
static void envelope_write(sb_t *s, int success, const char *msg, const char *data, size_t dlen,
                           const char *code)
{
    sb_puts(s, success ? "{\"success\":true" : "{\"success\":false");
    if (msg != NULL) {
        sb_puts(s, ",\"errorMsg\":");
        sb_json_str(s, msg, strlen(msg));
    }
    if (data != NULL) {
        sb_puts(s, ",\"data\":");
        sb_append(s, data, dlen);
    }
    if (code != NULL) {
        sb_puts(s, ",\"code\":");
        sb_json_str(s, code, strlen(code));
    }
    sb_append(s, "}", 1);
}

/* Writes the envelope and replies. */
static void envelope(http_req_t *r, int status, int success, const char *msg,
                     const char *data, size_t dlen, const char *code)
{
    char stackbuf[1024];   /* most replies fit the stack */
    sb_t s;
    sb_init_on(&s, stackbuf, sizeof stackbuf);
    envelope_write(&s, success, msg, data, dlen, code);
    http_reply(r, status, NULL, s.buf, s.len);   /* http_reply copies the body */
    sb_free(&s);
}

void api_fail_body(sb_t *s, const char *msg, const char *code)
{
    envelope_write(s, 0, msg, NULL, 0, code);
}

void api_ok(http_req_t *r, const char *data_json, size_t len)
{
    envelope(r, 200, 1, NULL, data_json, len, NULL);
}

void api_fail(http_req_t *r, const char *msg, const char *code)
{
    envelope(r, 200, 0, msg, NULL, 0, code);
}

void api_error(http_req_t *r, int status, const char *msg, const char *code)
{
    envelope(r, status, 0, msg, NULL, 0, code);
}

void api_unauthorized(http_req_t *r)
{
    http_reply(r, 401, NULL, "", 0);
}

void api_rate_limited(http_req_t *r, int kind)
{
    r->retry_after_s = ratelimit_retry_after_s(r, (rl_kind_t)kind);
    envelope(r, 429, 0, "请求过于频繁，请稍后再试", NULL, 0, "RATE_LIMITED");
}

void api_unavailable(http_req_t *r, const char *what)
{
    envelope(r, 503, 0, what != NULL ? what : "服务器异常", NULL, 0, "UNAVAILABLE");
}

/* ------------------------------------------------------------------- parsing */

int api_parse_id(const char *z, size_t n, int64_t *out)
{
    if (z == NULL || n == 0) {
        return -1;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned char)z[i] - '0';
        if (d > 9) {
            return -1;
        }
        /* v * 10 + d > INT64_MAX, by two compares instead of a division per digit */
        if (v >= UINT64_C(922337203685477580) &&
            (v > UINT64_C(922337203685477580) || d > 7)) {
            return -1;
        }
        v = v * 10 + d;
    }
    if (v == 0) {
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* ^1([38][0-9]|4[579]|5[0-3,5-9]|6[6]|7[0135678]|9[89])\d{8}$, the comma in [0-3,5-9]
 * being a literal character as in Java's regex. */
int api_phone_valid(const char *z)
{
    if (z == NULL || strlen(z) != 11 || z[0] != '1') {
        return 0;
    }
    char a = z[1], b = z[2];
    int ok;
    switch (a) {
    case '3': case '8': ok = b >= '0' && b <= '9'; break;
    case '4': ok = b == '5' || b == '7' || b == '9'; break;
    case '5': ok = (b >= '0' && b <= '3') || b == ',' || (b >= '5' && b <= '9'); break;
    case '6': ok = b == '6'; break;
    case '7': ok = b != '\0' && strchr("0135678", b) != NULL; break;
    case '9': ok = b == '8' || b == '9'; break;
    default: ok = 0; break;
    }
    if (!ok) {
        return 0;
    }
    for (int i = 3; i < 11; i++) {
        if (z[i] < '0' || z[i] > '9') {
            return 0;
        }
    }
    return 1;
}

/* -------------------------------------------------------------------- routing */

/* Parses the route's id (if any) and runs the handler. u is the logged-in user or NULL. */
static void route_run(http_req_t *r, const route_t *rt, const auth_user_t *u)
{
    int64_t id = 0;
    if (rt->flags & RF_ID) {
        /* route_find matched rt against this path: the id segment is what lies between
         * the route's prefix and suffix (not matched a second time). */
        const char *seg = r->path + rt->pre;
        size_t seglen = r->path_len - (size_t)rt->pre - (size_t)rt->suf;
        if (api_parse_id(seg, seglen, &id) != 0) {
            /* Echo at most 32 bytes of the segment, printable ASCII only: it is raw
             * client input and the message must stay valid UTF-8 JSON. */
            char msg[64] = "invalid id: ";
            size_t m = strlen(msg);
            for (size_t i = 0; i < seglen && i < 32; i++) {
                char ch = seg[i];
                msg[m++] = ch >= 0x20 && ch < 0x7f ? ch : '?';
            }
            if (seglen > 32) {
                memcpy(msg + m, "...", 3);
                m += 3;
            }
            msg[m] = '\0';
            if (rt->flags & RF_SECKILL) {
                metrics_seckill_done(r->w->m, OUT_BAD_REQUEST, clock_mono_ns() - r->start_ns);
            }
            api_error(r, 400, msg, "BAD_REQUEST");
            return;
        }
    }
    rt->fn(r, id, u);   /* u lives as long as this call: handlers copy what they keep */
}

static void on_auth(http_req_t *r, int status, const auth_user_t *u)
{
    const route_t *rt = r->ctx;
    r->ctx = NULL;
    if (status != 0) {
        if (rt->flags & RF_SECKILL) {
            metrics_seckill_done(r->w->m, status > 0 ? OUT_UNAUTHORIZED : OUT_UNAVAILABLE,
                                 clock_mono_ns() - r->start_ns);
        }
        if (status > 0) {
            api_unauthorized(r);
        } else {
            api_unavailable(r, "服务器异常");
        }
        return;
    }
    route_run(r, rt, u);
}

void api_dispatch(http_req_t *r)
{
    /* --metrics-listen: /metrics is served there and only there, and nothing else is.
     * Without it, /metrics on --listen needs --metrics-token, or --metrics-public: private
     * by default. (Not "from loopback": nginx on the same host forwards the public.) */
    const config_t *cfg = r->w->app ? &r->w->app->cfg : NULL;
    if (cfg && (cfg->metrics_listen[0] || (!cfg->metrics_token[0] && !cfg->metrics_public))) {
        int is_metrics = r->path_len == 8 && memcmp(r->path, "/metrics", 8) == 0;
        if (is_metrics != (r->listener == HTTP_LISTENER_METRICS)) {
            api_error(r, 404, "Not Found", "NOT_FOUND");
            return;
        }
    }
    int path_known;
    const route_t *rt = route_find(r, &path_known);
    if (rt == NULL) {
        if (path_known) {
            api_error(r, 405, "Method Not Allowed", "METHOD_NOT_ALLOWED");
        } else {
            api_error(r, 404, "Not Found", "NOT_FOUND");
        }
        return;
    }
    if (rt->flags & RF_LOGIN) {
        r->ctx = (void *)rt;
        if (rt->flags & RF_PROFILE) {
            auth_resolve_profile(r, on_auth);
        } else {
            auth_resolve(r, on_auth);
        }
        return;
    }
    if (!(rt->flags & RF_NO_TOUCH) && r->authorization != NULL &&
        auth_token_valid(r->authorization)) {
        auth_touch(r, r->authorization);
    }
    route_run(r, rt, NULL);
}
