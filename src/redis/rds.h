/* rds.h -- a worker's asynchronous Redis client: deadlines, reconnects, scripts.
 *
 * The one API the worker's code uses, on one Redis or on a Redis Cluster. Two layers
 * under it: rds_node.h, one hiredis async connection (0.14, which has no timeouts of its
 * own) on the worker's libevent loop, and rds_cluster.h, the router that owns one node
 * connection per cluster node. What every command gets:
 *   - a deadline: replies arrive in order, so only the oldest command's deadline
 *     matters; a timer checks it and, when it passes, drops the connection, which makes
 *     hiredis call every pending callback with a NULL reply;
 *   - reconnect with back-off (100 ms doubling to 2 s) after any loss, then AUTH/SELECT
 *     (rconn_hello) and SCRIPT LOAD of the built-in scripts before the connection counts
 *     as up;
 *   - while down, commands fail at once (the callback runs with NULL before rds_command
 *     returns), so requests get a fast 503 instead of waiting for a deadline;
 *   - EVALSHA of a built-in script, sent again behind a reload of the scripts when Redis
 *     answers NOSCRIPT (the caller sees the second answer).
 *
 * With a redis+cluster:// address commands are routed by their key's hash slot,
 * MOVED/ASK/TRYAGAIN/CLUSTERDOWN handled inside; the contract below is the same.
 *
 * Callback contract: every accepted command calls its callback exactly once, on the
 * worker's thread; reply is NULL on timeout, disconnect or when Redis is down, else the
 * hiredis reply, valid only during the callback (do not free it). Redis error replies
 * (REDIS_REPLY_ERROR) are passed through. */
#ifndef SECKILL_RDS_H
#define SECKILL_RDS_H

#include <stddef.h>

#include "core/url.h"
#include "redis/rds_node.h"
#include "redis/rds_script.h"

struct worker;
struct redisReply;

typedef struct rds rds_t;

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

/* EVALSHA script with numkeys keys followed by the args (argv holds keys then args);
 * argv need not outlive the call. On NOSCRIPT the call is sent again once, after the
 * scripts' reload (rds_node.h); a second NOSCRIPT reaches cb. */
void rds_evalsha(rds_t *c, script_id_t s, rds_cb cb, void *priv, int numkeys, int argc,
                 const char **argv, const size_t *argvlen);

#endif
