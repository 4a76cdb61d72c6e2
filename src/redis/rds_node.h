/* rds_node.h -- one asynchronous connection to one Redis, on a worker's loop.
 *
 * The layer under rds.h: a hiredis async connection (0.14, which has no timeouts of its
 * own) with what rds.h promises per command -- a deadline, reconnects with back-off,
 * AUTH/SELECT (rconn_hello) and SCRIPT LOAD of the built-in scripts before it counts as
 * up, a fast NULL while down, EVALSHA sent again after a NOSCRIPT. rds.c uses one for a
 * single Redis, rds_cluster.c one per cluster node; the callback contract is rds.h's.
 *
 * Ownership: whoever creates a node frees it (rds_node_free, also from inside one of its
 * callbacks); pending callbacks then get NULL. */
#ifndef SECKILL_RDS_NODE_H
#define SECKILL_RDS_NODE_H

#include <stddef.h>

#include "core/url.h"
#include "redis/rds_script.h"

struct worker;
struct redisReply;

/* A command's callback: reply NULL on timeout, disconnect or when Redis is down (rds.h). */
typedef void (*rds_cb)(struct redisReply *reply, void *priv);

typedef struct rds_node rds_node_t;

/* Creates the connection on w's loop and starts connecting (it does not wait). addr is
 * one Redis (not redis+cluster://). */
rds_node_t *rds_node_new(struct worker *w, const url_redis_t *addr, int timeout_ms);
void rds_node_free(rds_node_t *n);   /* NULL is fine */

/* 1 when connected and the scripts are loaded. */
int rds_node_is_up(const rds_node_t *n);

/* rds_command and rds_evalsha on this connection (rds.h). argv need not outlive the call. */
void rds_node_command(rds_node_t *n, rds_cb cb, void *priv, int argc, const char **argv,
                      const size_t *argvlen);
void rds_node_evalsha(rds_node_t *n, script_id_t s, rds_cb cb, void *priv, int numkeys,
                      int argc, const char **argv, const size_t *argvlen);

#endif
