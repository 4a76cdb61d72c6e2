/* rds.h -- a worker's asynchronous Redis connection: deadlines, reconnects, scripts.
 *
 * Wraps hiredis's async API (0.14, which has no timeouts of its own) on the worker's
 * libevent loop. What it adds:
 *   - a deadline on every command: replies arrive in order, so only the oldest command's
 *     deadline matters; a timer checks it and, when it passes, drops the connection, which
 *     makes hiredis call every pending callback with a NULL reply;
 *   - reconnect with back-off (100 ms doubling to 2 s) after any loss, then AUTH/SELECT
 *     and SCRIPT LOAD of the built-in scripts before the connection counts as up;
 *   - while down, commands fail at once (the callback runs with NULL before rds_command
 *     returns), so requests get a fast 503 instead of waiting for a deadline;
 *   - EVALSHA of a built-in script with a transparent EVAL fallback on NOSCRIPT.
 *
 * With a redis+cluster:// address the client is a Redis Cluster client (rds_cluster.c):
 * one connection like the above per node, commands routed by their key's hash slot,
 * MOVED/ASK/TRYAGAIN/CLUSTERDOWN handled inside; the contract below is the same.
 *
 * Callback contract: every accepted command calls its callback exactly once, on the
 * worker's thread; reply is NULL on timeout, disconnect or when Redis is down, else the
 * hiredis reply, valid only during the callback (do not free it). Redis error replies
 * (REDIS_REPLY_ERROR) are passed through, except NOSCRIPT, which rds handles itself
 * (rds_evalsha_nocopy: with the caller's help). */
#ifndef SECKILL_RDS_H
#define SECKILL_RDS_H

#include <stddef.h>

#include "core/url.h"

struct worker;
struct redisReply;

typedef void (*rds_cb)(struct redisReply *reply, void *priv);

typedef struct rds rds_t;

/* Built-in scripts, loaded on every (re)connect. Index into rds_evalsha(). */
typedef enum {
    SCRIPT_ADMIT = 0,   /* src/sale/admit.lua: flash-sale admissions of one voucher */
    SCRIPT_LOGIN_CODE,  /* src/auth/login_code.lua: login codes and their wrong guesses */
    SCRIPT_BOARD,       /* src/server/board.lua: instance announcement, the sale board's data */
    SCRIPT_COUNT
} script_id_t;


/* Creates the client on w's loop and starts connecting (it does not wait). */
rds_t *rds_new(struct worker *w, const url_redis_t *addr, int timeout_ms);
void rds_free(rds_t *c);   /* pending callbacks get NULL first; NULL is fine */

/* 1 when connected and scripts are loaded. */
int rds_is_up(const rds_t *c);

/* Sends a command (argv form, binary safe). cb may be NULL (fire and forget; the
 * deadline still applies). If the client is down, cb(NULL, priv) runs before this
 * returns: callers send the command as their last step and touch nothing afterwards. */
void rds_command(rds_t *c, rds_cb cb, void *priv, int argc, const char **argv, const size_t *argvlen);

/* The same, routed by key on a cluster (for commands without a key of their own that
 * must reach the node holding key, e.g. WAIT after a write); on one Redis, rds_command. */
void rds_command_at(rds_t *c, const char *key, size_t keylen, rds_cb cb, void *priv, int argc,
                    const char **argv, const size_t *argvlen);

/* EVALSHA script with numkeys keys followed by the args (argv holds keys then args). */
void rds_evalsha(rds_t *c, script_id_t s, rds_cb cb, void *priv, int numkeys, int argc,
                 const char **argv, const size_t *argvlen);

/* rds_evalsha for a hot path, without the copy of every argument that the EVAL fallback
 * needs: on NOSCRIPT the scripts' reload is queued on the connection and cb gets the
 * NOSCRIPT error reply; the same call sent again from cb (once: it may fail the same way)
 * reaches Redis after the reload, on the same connection, in order. On a cluster it is
 * rds_evalsha (the cluster client keeps the arguments for its redirects anyway). */
void rds_evalsha_nocopy(rds_t *c, script_id_t s, rds_cb cb, void *priv, int numkeys, int argc,
                        const char **argv, const size_t *argvlen);

/* 1 if reply is Redis's NOSCRIPT error (what rds_evalsha_nocopy's callback may get). */
int rds_is_noscript(const struct redisReply *reply);

/* The SHA1 (40 hex + NUL) of a built-in script, NULL before it is known. */
const char *rds_script_sha(script_id_t s);

#endif
