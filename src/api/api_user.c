/* api_user.c -- POST /user/code, GET /user/code/challenge, POST /user/login, GET /user/me,
 * POST /user/logout(/all).
 *
 * The course's login (hmdp-spec 2.1): a 6-digit code for the phone (logincode.h: kept 2
 * minutes, delivered by the log or --code-command, its sending and guessing limited in
 * Redis beside it, dead after its one use); login checks it, finds or creates the user
 * in SQL (a job), and stores a fresh 32-hex token from auth (signed, auth.h). This file
 * only validates input, applies the per-client limits and shapes replies. With --code-gate
 * (docs/bot-gate.md) /user/code first wants a solved proof-of-work challenge of the login
 * scope (room/pow.h) in its query: challenge=...&solution=... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/api.h"
#include "core/app.h"
#include "auth/auth.h"
#include "server/jobs.h"
#include "core/log.h"
#include "auth/logincode.h"
#include "sale/ratelimit.h"
#include "core/clock.h"
#include "core/rnd.h"
#include "room/pow.h"
#include "core/sb.h"
#include "store/store.h"
#include "server/worker.h"
#include "core/xmem.h"

#define MSG_BAD_PHONE "手机号格式错误！"
#define MSG_BAD_CODE "验证码错误"
#define MSG_BUSY "系统繁忙，请重试"
#define MSG_CHALLENGE "请先完成验证"
#define MAX_CODE_LEN 64   /* longer submitted codes cannot match a 6-digit one */

/* --------------------------------------------------------------- /user/code */

static void on_code_issued(void *priv, int status)
{
    http_req_t *r = priv;
    switch (status) {
    case LC_OK: api_ok(r, NULL, 0); break;
    case LC_NO_RANDOM: api_unavailable(r, "random number generator unavailable"); break;
    case LC_UNDELIVERED: api_unavailable(r, "login code could not be delivered"); break;
    case LC_LIMITED:
    case LC_DAY_CAP:   /* the phone's allowance, kept in Redis (logincode.h) */
        ratelimit_count(r, RL_PHONE_CODE);
        api_rate_limited(r, RL_PHONE_CODE);
        break;
    case LC_BUSY: api_unavailable(r, MSG_BUSY); break;
    default: api_unavailable(r, "redis unavailable"); break;
    }
}

/* The code itself, once the gate (if any) is passed; phone in r->ctx (freed here). */
static void issue_code(http_req_t *r)
{
    char *phone = r->ctx;
    r->ctx = NULL;
    /* the instance's budget of codes, all phones together: a circuit breaker for cost */
    if (!ratelimit_allow(r, RL_CODE_BUDGET, 1))
        api_unavailable(r, MSG_BUSY);
    else
        logincode_issue(r->w, phone, ratelimit_peer_key(r), on_code_issued, r);
    free(phone);
}

static void on_code_pow(int rc, void *priv)
{
    http_req_t *r = priv;
    if (rc == 0) {
        issue_code(r);
        return;
    }
    free(r->ctx);
    r->ctx = NULL;
    if (rc == -2)
        api_fail(r, MSG_CHALLENGE, "CHALLENGE_REQUIRED");   /* replayed */
    else
        api_unavailable(r, "redis unavailable");
}

void api_user_code(http_req_t *r)
{
    char phone[32];
    if (!ratelimit_allow_peer(r, RL_IP_CODE)) {   /* abuse limits: ratelimit.h */
        api_rate_limited(r, RL_IP_CODE);
        return;
    }
    int n = http_query_get(r->query, "phone", phone, sizeof(phone));
    if (n != 11 || !api_phone_valid(phone)) {
        api_fail(r, MSG_BAD_PHONE, "INVALID_PHONE");
        return;
    }
    r->ctx = xstrdup(phone);
    app_t *app = r->w->app;
    if (!pow_code_gate_on(app, (int64_t)(clock_now_wall_ms() / 1000))) {
        issue_code(r);
        return;
    }
    /* the bot gate: a wrong or missing solution costs no Redis, a right one one SET NX */
    char ch[POW_CHALLENGE_MAX], sol[POW_SOLUTION_MAX + 2], key[POW_REPLAY_KEY_MAX];
    int64_t ttl_ms = 0;
    if (http_query_get(r->query, "challenge", ch, sizeof ch) <= 0 ||
        http_query_get(r->query, "solution", sol, sizeof sol) <= 0 ||
        pow_check(app, 0, POW_LOGIN_SCOPE, ch, sol, clock_now_wall_ms(), key, &ttl_ms) < 0) {
        free(r->ctx);
        r->ctx = NULL;
        api_fail(r, MSG_CHALLENGE, "CHALLENGE_REQUIRED");
        return;
    }
    pow_use_async(app, r->w->rds, POW_LOGIN_SCOPE, key, ttl_ms, on_code_pow, r);
}

void api_user_code_challenge(http_req_t *r)
{
    char ch[POW_CHALLENGE_MAX], data[POW_CHALLENGE_MAX + 64];
    int d = 0;
    if (pow_challenge(r->w->app, 0, POW_LOGIN_SCOPE, ch, sizeof ch, &d) < 0) {
        api_unavailable(r, MSG_BUSY);
        return;
    }
    /* the challenge is [v0-9a-f.] only: no JSON escaping needed */
    int n = snprintf(data, sizeof data, "{\"challenge\":\"%s\",\"difficulty\":%d}", ch, d);
    api_ok(r, data, (size_t)n);
}

/* --------------------------------------------------------------- /user/login */

typedef struct login_ctx {
    http_req_t *r;
    char phone[16];
    char code[MAX_CODE_LEN + 1];
    size_t code_len;
    char nick[16];              /* for a new user: "user_" + 10 of [a-z0-9] */
    uint64_t client;            /* ratelimit_peer_key: whose guess this is */
    int rc;                     /* STORE_* */
    char err[256];              /* why the store call failed, for the log */
    store_user_t user;
    char token[33];
} login_ctx_t;

/* Parses the body as a JSON object. On failure replies 400 and returns NULL. */
static json_t *body_object_or_reply(http_req_t *r)
{
    json_error_t err;
    json_t *root = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL) {
        char msg[256];
        if (r->body_len == 0) {
            snprintf(msg, sizeof(msg), "request body must be a JSON object");
        } else {
            snprintf(msg, sizeof(msg), "invalid JSON body: %s (line %d, column %d)", err.text,
                     err.line, err.column);
        }
        api_error(r, 400, msg, "BAD_REQUEST");
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_error(r, 400, "request body must be a JSON object", "BAD_REQUEST");
        return NULL;
    }
    return root;
}

/* A member that must be a string when present; NULL (JSON null) counts as absent.
 * Returns 0 with *out NULL or the string, or -1 after replying 400. */
static int opt_string_or_reply(http_req_t *r, json_t *obj, const char *name, json_t **out)
{
    json_t *v = json_object_get(obj, name);
    *out = NULL;
    if (v == NULL || json_is_null(v)) {
        return 0;
    }
    if (!json_is_string(v)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "%s must be a string", name);
        api_error(r, 400, msg, "BAD_REQUEST");
        return -1;
    }
    *out = v;
    return 0;
}

static void on_login_stored(http_req_t *r, int ok)
{
    login_ctx_t *L = r->ctx;
    r->ctx = NULL;
    char data[40];
    int n = snprintf(data, sizeof(data), "\"%s\"", L->token);
    free(L);
    if (ok) {
        api_ok(r, data, (size_t)n);
    } else {
        api_unavailable(r, "redis unavailable");
    }
}

static void run_login(store_t *st, void *arg)
{
    login_ctx_t *L = arg;
    if (st == NULL) {
        L->rc = STORE_ERR;
        snprintf(L->err, sizeof(L->err), "no database connection");
        return;
    }
    L->rc = store_user_by_phone(st, L->phone, &L->user);
    if (L->rc == STORE_NOTFOUND) {
        L->rc = store_user_create(st, L->phone, L->nick, &L->user);
        if (L->rc == STORE_OK) {
            char m[LOGINCODE_MASK_BYTES];
            log_info("new user %lld for phone %s", (long long)L->user.id,
                     logincode_mask(L->phone, m));
        }
    }
    if (L->rc != STORE_OK) {
        snprintf(L->err, sizeof(L->err), "%s", store_errmsg(st));
    }
}

static void done_login(worker_t *w, void *arg)
{
    login_ctx_t *L = arg;
    http_req_t *r = L->r;
    if (L->rc != STORE_OK || L->user.id <= 0) {
        /* the operator's only trace of a refused login: the buyer sees a bare 503 */
        char m[LOGINCODE_MASK_BYTES];
        log_warn("login of %s: %s", logincode_mask(L->phone, m),
                 L->rc != STORE_OK ? L->err : "no user id");
        free(L);
        api_unavailable(r, "database unavailable");
        return;
    }
    if (auth_new_token(w, L->user.id, L->token) != 0) {
        free(L);
        api_unavailable(r, "random number generator unavailable");
        return;
    }
    auth_user_t u;
    memset(&u, 0, sizeof(u));
    u.id = L->user.id;
    snprintf(u.nick_name, sizeof(u.nick_name), "%s", L->user.nick_name);
    snprintf(u.icon, sizeof(u.icon), "%s", L->user.icon);
    r->ctx = L;
    auth_store_login(r, L->token, &u, on_login_stored);
}

static void on_code_checked(void *priv, int status)
{
    login_ctx_t *L = priv;
    http_req_t *r = L->r;
    if (status != LC_OK) {
        free(L);
        if (status == LC_WRONG) {
            api_fail(r, MSG_BAD_CODE, "INVALID_CODE");
        } else {
            api_unavailable(r, "redis unavailable");
        }
        return;
    }
    if (jobs_submit(r->w->app->jobs, r->w, run_login, done_login, L) != 0) {
        free(L);
        api_unavailable(r, "server busy");
    }
}

void api_user_login(http_req_t *r)
{
    json_t *root = body_object_or_reply(r);
    if (root == NULL) {
        return;
    }
    json_t *jphone, *jcode;
    if (opt_string_or_reply(r, root, "phone", &jphone) != 0 ||
        opt_string_or_reply(r, root, "code", &jcode) != 0) {
        json_decref(root);
        return;
    }
    const char *phone = jphone ? json_string_value(jphone) : NULL;
    if (phone == NULL || json_string_length(jphone) != 11 || !api_phone_valid(phone)) {
        json_decref(root);
        api_fail(r, MSG_BAD_PHONE, "INVALID_PHONE");
        return;
    }
    /* No code (e.g. the course's password-only form) or one that cannot be a stored
     * code fails like a wrong code, without asking Redis. */
    if (jcode == NULL || json_string_length(jcode) == 0 ||
        json_string_length(jcode) > MAX_CODE_LEN) {
        json_decref(root);
        api_fail(r, MSG_BAD_CODE, "INVALID_CODE");
        return;
    }
    /* Attempts per client and per phone from that client are limited (ratelimit.h): one
     * client spending its attempts on a phone leaves the phone's owner its own. On top of
     * that the guesses against each code are counted in Redis (logincode.h). */
    uint64_t client = ratelimit_peer_key(r);
    int ip_ok = ratelimit_allow(r, RL_IP_LOGIN, client);
    if (!ip_ok || !ratelimit_allow(r, RL_PHONE_LOGIN,
                                   ratelimit_key_pair(r, ratelimit_key_digits(phone), client))) {
        json_decref(root);
        api_rate_limited(r, ip_ok ? RL_PHONE_LOGIN : RL_IP_LOGIN);
        return;
    }
    login_ctx_t *L = xcalloc(1, sizeof(*L));
    L->r = r;
    L->client = client;
    memcpy(L->phone, phone, 12);
    L->code_len = json_string_length(jcode);
    memcpy(L->code, json_string_value(jcode), L->code_len);
    json_decref(root);
    memcpy(L->nick, "user_", 5);
    if (rnd_chars(L->nick + 5, 10, "abcdefghijklmnopqrstuvwxyz0123456789", 36) != 0) {
        free(L);
        api_unavailable(r, "random number generator unavailable");
        return;
    }
    logincode_check(r->w, L->phone, L->client, L->code, L->code_len, on_code_checked, L);
}

/* ------------------------------------------------------------ me, logout */

void api_user_me(http_req_t *r, const auth_user_t *u)
{
    if (u == NULL) {
        api_unauthorized(r);
        return;
    }
    sb_t s = SB_INIT;
    sb_printf(&s, "{\"id\":%lld,\"nickName\":", (long long)u->id);
    sb_json_str(&s, u->nick_name, strlen(u->nick_name));
    sb_puts(&s, ",\"icon\":");
    sb_json_str(&s, u->icon, strlen(u->icon));
    sb_puts(&s, "}");
    api_ok(r, s.buf, s.len);
    sb_free(&s);
}

static void on_logout(http_req_t *r, int ok)
{
    if (ok) {
        api_ok(r, NULL, 0);
    } else {
        api_unavailable(r, "redis unavailable");
    }
}

void api_user_logout(http_req_t *r)
{
    auth_logout(r, r->authorization, on_logout);
}

void api_user_logout_all(http_req_t *r, const auth_user_t *u)
{
    auth_logout_all(r, r->authorization, u->id, on_logout);
}
