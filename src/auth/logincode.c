/* logincode.c -- login codes in Redis: issue, deliver, check (logincode.h).
 *
 * Every step is one EVALSHA of src/auth/login_code.lua on the worker's connection, so a
 * check's compare, count and delete happen atomically: two right guesses at once cannot
 * both log in, and no guess slips between a count and the delete it triggers; and two
 * instances asking for the same phone's allowance at once cannot both get its last code.
 *
 * Delivery comes after the allowance and before the store: with --code-command the
 * phone's allowance is taken first (one script call), the code is handed to the command
 * (runcmd.h: phone and code in its environment, time-limited, at most
 * --code-command-max at once) and stored only if it exits 0, so a code nobody received
 * never becomes guessable. Without a command, allowance and store are one call. The log
 * gets the code only when app->log_login_codes (the embedded default, or
 * --log-login-codes), and phones only masked (logincode_mask). */
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

#define NKEYS 4             /* login_code.lua's KEYS */
#define MAX_ARGS 7          /* and its ARGV at most */
#define NUM_BYTES 32        /* a number as text */

typedef struct lc_op {
    logincode_cb cb;
    int slot;                       /* issue: holds a --code-command slot (runcmd.h) */
    void *priv;
    worker_t *w;
    char phone[PHONE_BYTES];
    char client[NUM_BYTES];         /* the client's key, as login_code.lua's text */
    char code[LOGINCODE_LEN + 1];   /* issue */
} lc_op_t;

/* EVALSHA login_code.lua with the keys of phone and args (arglens bytes each; NULL:
 * strings); cb(reply, op). */
static void run_script(worker_t *w, lc_op_t *op, rds_cb cb, const char *const *args,
                       const size_t *arglens, int nargs)
{
    char keys[NKEYS][64];
    int kl[NKEYS] = {
        key_login_code(keys[0], sizeof keys[0], op->phone),
        key_login_fails(keys[1], sizeof keys[1], op->phone),
        key_login_guess(keys[2], sizeof keys[2], op->phone),
        key_login_sent(keys[3], sizeof keys[3], op->phone),
    };
    const char *argv[NKEYS + MAX_ARGS];
    size_t lens[NKEYS + MAX_ARGS];
    for (int i = 0; i < NKEYS; i++) {
        if (kl[i] < 0 || nargs > MAX_ARGS) {
            cb(NULL, op);
            return;
        }
        argv[i] = keys[i];
        lens[i] = (size_t)kl[i];
    }
    for (int i = 0; i < nargs; i++) {
        argv[NKEYS + i] = args[i];
        lens[NKEYS + i] = arglens != NULL ? arglens[i] : strlen(args[i]);
    }
    rds_evalsha(w->rds, SCRIPT_LOGIN_CODE, cb, op, NKEYS, NKEYS + nargs, argv, lens);
}

const char *logincode_mask(const char *phone, char out[LOGINCODE_MASK_BYTES])
{
    size_t n = phone != NULL ? strlen(phone) : 0;
    if (n < 8 || n >= PHONE_BYTES)
        snprintf(out, LOGINCODE_MASK_BYTES, "****");
    else
        snprintf(out, LOGINCODE_MASK_BYTES, "%.3s****%s", phone, phone + n - 4);
    return out;
}

/* A new operation for phone, or NULL when phone is not a phone's length. */
static lc_op_t *op_new(worker_t *w, const char *phone, uint64_t client, logincode_cb cb,
                       void *priv)
{
    if (phone == NULL || strlen(phone) >= PHONE_BYTES) {
        return NULL;
    }
    lc_op_t *op = xcalloc(1, sizeof(*op));
    op->cb = cb;
    op->priv = priv;
    op->w = w;
    memcpy(op->phone, phone, strlen(phone) + 1);
    snprintf(op->client, sizeof op->client, "%llu", (unsigned long long)client);
    return op;
}

static void finish(lc_op_t *op, int status)
{
    if (op->slot)
        runcmd_release();   /* taken and not used */
    logincode_cb cb = op->cb;
    void *priv = op->priv;
    free(op);
    cb(priv, status);
}

/* ------------------------------------------------------------------- issue */

/* The script's status for an issue: LC_OK, LC_LIMITED, LC_DAY_CAP or LC_UNAVAILABLE. */
static int issue_status(const redisReply *rep)
{
    if (rep == NULL || rep->type != REDIS_REPLY_INTEGER)
        return LC_UNAVAILABLE;
    switch (rep->integer) {
    case 1: return LC_OK;
    case -2: return LC_LIMITED;
    case -3: return LC_DAY_CAP;
    default: return LC_UNAVAILABLE;
    }
}

static void on_stored(redisReply *rep, void *priv)
{
    lc_op_t *op = priv;
    int st = issue_status(rep);
    if (st == LC_OK && op->w->app->log_login_codes) {
        char m[LOGINCODE_MASK_BYTES];
        log_info("verification code for %s: %s", logincode_mask(op->phone, m), op->code);
    }
    finish(op, st);
}

/* 'issue' with the phone's allowance (code "": the allowance only) or 'store'. */
static void call_issue(lc_op_t *op, const char *what, const char *code, rds_cb cb)
{
    const config_t *cfg = &op->w->app->cfg;
    char ttl[NUM_BYTES], per_s[NUM_BYTES], burst[NUM_BYTES], cap[NUM_BYTES];
    snprintf(ttl, sizeof ttl, "%d", LOGINCODE_TTL_S);
    snprintf(per_s, sizeof per_s, "%.17g", cfg->rate_phone_code.per_s);
    snprintf(burst, sizeof burst, "%.17g", cfg->rate_phone_code.burst >= 1
             ? cfg->rate_phone_code.burst : 1);
    snprintf(cap, sizeof cap, "%d", cfg->code_day_cap);
    const char *args[MAX_ARGS] = { what, code, ttl, op->client, per_s, burst, cap };
    run_script(op->w, op, cb, args, NULL, MAX_ARGS);
}

static void on_delivered(void *priv, int ok, const char *why)
{
    lc_op_t *op = priv;
    if (!ok) {
        char m[LOGINCODE_MASK_BYTES];
        log_error("--code-command failed for %s (%s): no code stored",
                  logincode_mask(op->phone, m), why);
        finish(op, LC_UNDELIVERED);
        return;
    }
    call_issue(op, "store", op->code, on_stored);
}

/* The phone may have a code: deliver it. */
static void on_allowed(redisReply *rep, void *priv)
{
    lc_op_t *op = priv;
    int st = issue_status(rep);
    if (st != LC_OK) {
        finish(op, st);
        return;
    }
    const config_t *cfg = &op->w->app->cfg;
    char env_phone[40], env_code[40];
    snprintf(env_phone, sizeof env_phone, "SECKILL_PHONE=%s", op->phone);
    snprintf(env_code, sizeof env_code, "SECKILL_CODE=%s", op->code);
    const char *env[] = { env_phone, env_code, NULL };
    op->slot = 0;   /* runcmd_start uses it, or gives it back */
    if (runcmd_start(op->w, cfg->code_command, env, cfg->code_command_timeout_ms,
                     on_delivered, op) != 0)
        finish(op, LC_UNDELIVERED);
}

void logincode_issue(worker_t *w, const char *phone, uint64_t client, logincode_cb cb,
                     void *priv)
{
    const config_t *cfg = &w->app->cfg;
    int command = cfg->code_command[0] != '\0';
    /* the command's slot first: a refusal then spends nothing, not even the allowance */
    if (command && !runcmd_reserve(cfg->code_command_max)) {
        cb(priv, LC_BUSY);
        return;
    }
    lc_op_t *op = op_new(w, phone, client, cb, priv);
    if (op == NULL) {
        if (command)
            runcmd_release();
        cb(priv, LC_UNAVAILABLE);
        return;
    }
    op->slot = command;
    if (rnd_chars(op->code, LOGINCODE_LEN, "0123456789", 10) != 0) {
        finish(op, LC_NO_RANDOM);
        return;
    }
    op->code[LOGINCODE_LEN] = '\0';
    if (command)
        call_issue(op, "issue", "", on_allowed);        /* allowance, deliver, store */
    else
        call_issue(op, "issue", op->code, on_stored);   /* allowance and store at once */
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
        char m[LOGINCODE_MASK_BYTES];
        log_warn("login code for %s invalidated after %d wrong guesses by its owner",
                 logincode_mask(op->phone, m), LOGINCODE_MAX_FAILS);
    }
    finish(op, rep->integer == 1 ? LC_OK : LC_WRONG);
}

void logincode_check(worker_t *w, const char *phone, uint64_t client, const char *code,
                     size_t len, logincode_cb cb, void *priv)
{
    if (code == NULL || len == 0 || len > MAX_CODE_BYTES) {
        cb(priv, LC_WRONG);   /* cannot be a code: not even counted */
        return;
    }
    lc_op_t *op = op_new(w, phone, client, cb, priv);
    if (op == NULL) {
        cb(priv, LC_UNAVAILABLE);
        return;
    }
    char max[NUM_BYTES], others[NUM_BYTES];
    snprintf(max, sizeof max, "%d", LOGINCODE_MAX_FAILS);
    snprintf(others, sizeof others, "%d", LOGINCODE_MAX_OTHER_FAILS);
    const char *args[6] = { "check", code, op->client, max, max, others };
    size_t lens[6] = { 5, len, strlen(op->client), strlen(max), strlen(max), strlen(others) };
    run_script(w, op, on_checked, args, lens, 6);
}
