/* rds_cluster.h -- a worker's Redis Cluster router, above the node connections.
 *
 * rds_new() with a redis+cluster:// address hands its commands here: one rds_node_t
 * (rds_node.h: deadlines, reconnects, scripts, NOSCRIPT) per cluster node, owned by the
 * router, a slot map from CLUSTER SLOTS, and the redirects -- so callers keep using
 * rds_command/rds_evalsha (rds.h) with the same contract on one Redis or on a cluster.
 *
 * Ownership: the caller (rds.c) owns the router; rds_cluster_free closes its nodes, and
 * pending callbacks get NULL. */
#ifndef SECKILL_RDS_CLUSTER_H
#define SECKILL_RDS_CLUSTER_H

#include <stddef.h>

#include "core/url.h"
#include "redis/rds_node.h"

struct worker;

typedef struct rds_cluster rds_cluster_t;

rds_cluster_t *rds_cluster_new(struct worker *w, const url_redis_t *addr, int timeout_ms);
void rds_cluster_free(rds_cluster_t *cl);
int rds_cluster_is_up(const rds_cluster_t *cl);
/* route_key: the key that picks the node (NULL: the command's own key, or any node). */
void rds_cluster_command(rds_cluster_t *cl, const char *route_key, size_t route_len, rds_cb cb,
                         void *priv, int argc, const char **argv, const size_t *argvlen);
void rds_cluster_evalsha(rds_cluster_t *cl, script_id_t s, rds_cb cb, void *priv, int numkeys,
                         int argc, const char **argv, const size_t *argvlen);

#endif
