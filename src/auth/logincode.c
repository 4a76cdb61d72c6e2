/* logincode.c -- login codes in Redis: issue, deliver, check (logincode.h).
 *
 * Both operations are one EVALSHA of src/auth/login_code.lua on the worker's connection,
 * so a check's compare, count and delete happen atomically: two right guesses at once
 * cannot both log in, and no guess slips between a count and the delete it triggers.
 *
 * Delivery comes before the store: with --code-command the code is handed to the
 * command (runcmd.h: phone and code in its environment, time-limited) and stored only if
 * it exits 0, so a code nobody received never becomes guessable. The log gets the code
 * only when app->log_login_codes (the embedded default, or --log-login-codes). */
#include "auth/logincode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "core/key.h"
#include "core/log.h"
#include "redis/rds.h"
#include "core/rnd.h"
#include "core/runcmd.h"
#include "server/worker.h"
#include "core/xmem.h"

#define PHONE_BYTES 16      /* room for any phone number we accept, and its NUL */
#define MAX_CODE_BYTES 64   /* a longer submission cannot match a 6-digit code */

typedef struct lc_op {
    logincode_cb cb;
    void *priv;
    worker_t *w;
    char phone[PHONE_BYTES];
    char code[LOGINCODE_LEN + 1];   /* issue */
} lc_op_t;

/* EVALSHA login_code.lua with both keys of phone and args; cb(reply, op). */
static void run_script(worker_t *w, lc_op_t *op, rds_cb cb, const char *const *args,
                       const size_t *arglens, int nargs)
{
    char kcode[64], kfails[64];
    int lc = key_login_code(kcode, sizeof(kcode), op->phone);
    int lf = key_login_fails(kfails, sizeof(kfails), op->phone);
    if (lc < 0 || lf < 0 || nargs > 3) {
        cb(NULL, op);
        return;
    }
    const char *argv[5] = { kcode, kfails };
    size_t lens[5] = { (size_t)lc, (size_t)lf };
    for (int i = 0; i < nargs; i++) {
        argv[2 + i] = args[i];
        lens[2 + i] = arglens[i];
    }
    rds_evalsha(w->rds, SCRIPT_LOGIN_CODE, cb, op, 2, 2 + nargs, argv, lens);
}

/* A new operation for phone, or NULL when phone is not a phone's length. */
static lc_op_t *op_new(worker_t *w, const char *phone, logincode_cb cb, void *priv)
{
    if (phone == NULL || strlen(phone) >= PHONE_BYTES) {
        return NULL;
    }
    lc_op_t *op = xcalloc(1, sizeof(*op));
    op->cb = cb;
    op->priv = priv;
    op->w = w;
    memcpy(op->phone, phone, strlen(phone) + 1);
    return op;
}

static void finish(lc_op_t *op, int status)
{
    logincode_cb cb = op->cb;
    void *priv = op->priv;
    free(op);
    cb(priv, status);
}

/* ------------------------------------------------------------------- issue */

static void on_issued(redisReply *rep, void *priv)
{
    lc_op_t *op = priv;
    int ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    if (ok && op->w->app->log_login_codes)
        log_info("verification code for %s: %s", op->phone, op->code);
    finish(op, ok ? LC_OK : LC_UNAVAILABLE);
}

static void store(lc_op_t *op)
{
    char ttl[16];
    int tl = snprintf(ttl, sizeof(ttl), "%d", LOGINCODE_TTL_S);
    const char *args[3] = { "issue", op->code, ttl };
    size_t lens[3] = { 5, LOGINCODE_LEN, (size_t)tl };
    run_script(op->w, op, on_issued, args, lens, 3);
}

static void on_delivered(void *priv, int ok, const char *why)
{
    lc_op_t *op = priv;
    if (!ok) {
        log_error("--code-command failed for %s (%s): no code stored", op->phone, why);
        finish(op, LC_UNDELIVERED);
        return;
    }
    store(op);
}

void logincode_issue(worker_t *w, const char *phone, logincode_cb cb, void *priv)
{
    lc_op_t *op = op_new(w, phone, cb, priv);
    if (op == NULL) {
        cb(priv, LC_UNAVAILABLE);
        return;
    }
    if (rnd_chars(op->code, LOGINCODE_LEN, "0123456789", 10) != 0) {
        finish(op, LC_NO_RANDOM);
        return;
    }
    op->code[LOGINCODE_LEN] = '\0';
    const config_t *cfg = &w->app->cfg;
    if (cfg->code_command[0] == '\0') {
        store(op);
        return;
    }
    char env_phone[40], env_code[40];
    snprintf(env_phone, sizeof env_phone, "SECKILL_PHONE=%s", op->phone);
    snprintf(env_code, sizeof env_code, "SECKILL_CODE=%s", op->code);
    const char *env[] = { env_phone, env_code, NULL };
    if (runcmd_start(w, cfg->code_command, env, cfg->code_command_timeout_ms, on_delivered,
                  op) != 0)
        finish(op, LC_UNDELIVERED);
}

/* ------------------------------------------------------------------- check */

static void on_checked(redisReply *rep, void *priv)
{
    lc_op_t *op = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_INTEGER) {
        finish(op, LC_UNAVAILABLE);
        return;
    }
    if (rep->integer == 2) {
        log_warn("login code for %s invalidated after %d wrong guesses", op->phone,
                 LOGINCODE_MAX_FAILS);
    }
    finish(op, rep->integer == 1 ? LC_OK : LC_WRONG);
}

void logincode_check(worker_t *w, const char *phone, const char *code, size_t len,
                     logincode_cb cb, void *priv)
{
    if (code == NULL || len == 0 || len > MAX_CODE_BYTES) {
        cb(priv, LC_WRONG);   /* cannot be a code: not even counted */
        return;
    }
    lc_op_t *op = op_new(w, phone, cb, priv);
    if (op == NULL) {
        cb(priv, LC_UNAVAILABLE);
        return;
    }
    char max[16];
    int ml = snprintf(max, sizeof(max), "%d", LOGINCODE_MAX_FAILS);
    const char *args[3] = { "check", code, max };
    size_t lens[3] = { 5, len, (size_t)ml };
    run_script(w, op, on_checked, args, lens, 3);
}
