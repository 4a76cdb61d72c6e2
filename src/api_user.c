/* api_user.c -- POST /user/code, POST /user/login, GET /user/me, POST /user/logout.
 *
 * The course's login (hmdp-spec 2.1): a 6-digit code kept 2 minutes at login:code:<phone>
 * and written to the log (there is no SMS gateway); login checks it (it is not deleted
 * after use, as in the course), finds or creates the user in SQL (a job), and stores a
 * fresh 32-hex token through auth. Randomness comes from getrandom(2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "api.h"
#include "app.h"
#include "auth.h"
#include "jobs.h"
#include "keys.h"
#include "log.h"
#include "ratelimit.h"
#include "rds.h"
#include "sb.h"
#include "store.h"
#include "worker.h"

#define CODE_TTL "120"
#define MSG_BAD_PHONE "手机号格式错误！"
#define MSG_BAD_CODE "验证码错误"
#define MAX_CODE_LEN 64   /* longer submitted codes cannot match a 6-digit one */

/* Fills out[0..n-1] with characters drawn uniformly from alphabet (k <= 256 symbols) by
 * rejection sampling. Returns 0, or -1 if the kernel RNG failed. */
static int random_chars(char *out, size_t n, const char *alphabet, unsigned k)
{
    unsigned limit = 256u - 256u % k;
    size_t done = 0;
    while (done < n) {
        unsigned char buf[64];
        ssize_t got = getrandom(buf, sizeof(buf), 0);
        if (got <= 0) {
            return -1;
        }
        for (ssize_t i = 0; i < got && done < n; i++) {
            if (buf[i] < limit) {
                out[done++] = alphabet[buf[i] % k];
            }
        }
    }
    return 0;
}

/* --------------------------------------------------------------- /user/code */

typedef struct code_ctx {
    char phone[16];
    char code[8];
} code_ctx_t;

static void on_code_set(struct redisReply *rep, void *priv)
{
    http_req_t *r = priv;
    code_ctx_t *c = r->ctx;
    r->ctx = NULL;
    int ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;
    if (ok) {
        log_info("verification code for %s: %s", c->phone, c->code);
    }
    free(c);
    if (ok) {
        api_ok(r, NULL, 0);
    } else {
        api_unavailable(r, "redis unavailable");
    }
}

void api_user_code(http_req_t *r)
{
    char phone[32];
    if (!ratelimit_allow_peer(r, RL_IP_CODE)) {   /* abuse limits: ratelimit.h */
        ratelimit_reply(r);
        return;
    }
    int n = http_query_get(r->query, "phone", phone, sizeof(phone));
    if (n != 11 || !api_phone_valid(phone)) {
        api_fail(r, MSG_BAD_PHONE, "INVALID_PHONE");
        return;
    }
    if (!ratelimit_allow(r, RL_PHONE_CODE, rl_key_digits(phone))) {
        ratelimit_reply(r);
        return;
    }
    code_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL || random_chars(c->code, 6, "0123456789", 10) != 0) {
        free(c);
        api_unavailable(r, "random number generator unavailable");
        return;
    }
    memcpy(c->phone, phone, 12);
    char key[64];
    int kl = key_login_code(key, sizeof(key), phone);
    if (kl < 0) {
        free(c);
        api_unavailable(r, "internal error");
        return;
    }
    r->ctx = c;
    const char *argv[5] = { "SET", key, c->code, "EX", CODE_TTL };
    size_t lens[5] = { 3, (size_t)kl, 6, 2, strlen(CODE_TTL) };
    rds_command(r->w->rds, on_code_set, r, 5, argv, lens);
}

/* --------------------------------------------------------------- /user/login */

typedef struct login_ctx {
    http_req_t *r;
    char phone[16];
    char code[MAX_CODE_LEN + 1];
    size_t code_len;
    char nick[16];              /* for a new user: "user_" + 10 of [a-z0-9] */
    int rc;                     /* STORE_* */
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
        return;
    }
    L->rc = store_user_by_phone(st, L->phone, &L->user);
    if (L->rc == STORE_NOTFOUND) {
        L->rc = store_user_create(st, L->phone, L->nick, &L->user);
        if (L->rc == STORE_OK) {
            log_info("new user %lld for phone %s", (long long)L->user.id, L->phone);
        }
    }
}

static void done_login(worker_t *w, void *arg)
{
    login_ctx_t *L = arg;
    http_req_t *r = L->r;
    if (L->rc != STORE_OK || L->user.id <= 0) {
        free(L);
        api_unavailable(r, "database unavailable");
        return;
    }
    unsigned char raw[16];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        free(L);
        api_unavailable(r, "random number generator unavailable");
        return;
    }
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        L->token[2 * i] = hex[raw[i] >> 4];
        L->token[2 * i + 1] = hex[raw[i] & 15];
    }
    L->token[32] = '\0';
    auth_user_t u;
    memset(&u, 0, sizeof(u));
    u.id = L->user.id;
    snprintf(u.nick_name, sizeof(u.nick_name), "%s", L->user.nick_name);
    snprintf(u.icon, sizeof(u.icon), "%s", L->user.icon);
    r->ctx = L;
    auth_store_login(r, L->token, &u, on_login_stored);
}

static void on_code_get(struct redisReply *rep, void *priv)
{
    login_ctx_t *L = priv;
    http_req_t *r = L->r;
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
        free(L);
        api_unavailable(r, "redis unavailable");
        return;
    }
    if (rep->type != REDIS_REPLY_STRING || rep->len != L->code_len ||
        memcmp(rep->str, L->code, L->code_len) != 0) {
        free(L);
        api_fail(r, MSG_BAD_CODE, "INVALID_CODE");
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
    /* Attempts per phone are limited: a 6-digit code must not be guessable (ratelimit.h). */
    if (!ratelimit_allow(r, RL_PHONE_LOGIN, rl_key_digits(phone))) {
        json_decref(root);
        ratelimit_reply(r);
        return;
    }
    login_ctx_t *L = calloc(1, sizeof(*L));
    if (L == NULL) {
        json_decref(root);
        api_unavailable(r, "out of memory");
        return;
    }
    L->r = r;
    memcpy(L->phone, phone, 12);
    L->code_len = json_string_length(jcode);
    memcpy(L->code, json_string_value(jcode), L->code_len);
    json_decref(root);
    memcpy(L->nick, "user_", 5);
    char key[64];
    int kl = key_login_code(key, sizeof(key), L->phone);
    if (random_chars(L->nick + 5, 10, "abcdefghijklmnopqrstuvwxyz0123456789", 36) != 0 || kl < 0) {
        free(L);
        api_unavailable(r, "random number generator unavailable");
        return;
    }
    const char *argv[2] = { "GET", key };
    size_t lens[2] = { 3, (size_t)kl };
    rds_command(r->w->rds, on_code_get, L, 2, argv, lens);
}

/* ------------------------------------------------------------ me, logout */

void api_user_me(http_req_t *r)
{
    const auth_user_t *u = api_user(r);
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
