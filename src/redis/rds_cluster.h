/* rds_cluster.h -- the Redis Cluster side of a worker's Redis client (private to rds.c).
 *
 * rds_new() with a redis+cluster:// address returns an rds_t whose commands are routed by
 * this module: one ordinary rds_t (rds.c: deadlines, reconnects, scripts, NOSCRIPT) per
 * cluster node, a slot map from CLUSTER SLOTS, and the redirects -- so callers keep using
 * rds_command/rds_evalsha with the same contract on one Redis or on a cluster.
 *
 * Ownership: the rds_t facade (rds.c) owns its rds_cluster_t; rds_cluster_free is called from
 * rds_free only. */
#ifndef SECKILL_RDS_CLUSTER_H
#define SECKILL_RDS_CLUSTER_H

#include <stddef.h>

#include "redis/rds.h"

typedef struct rds_cluster rds_cluster_t;

rds_cluster_t *rds_cluster_new(struct worker *w, const url_redis_t *addr, int timeout_ms);
void rds_cluster_free(rds_cluster_t *cl);
int rds_cluster_is_up(const rds_cluster_t *cl);
/* route_key: the key that picks the node (NULL: the command's own key, or any node). */
void rds_cluster_command(rds_cluster_t *cl, const char *route_key, size_t route_len, rds_cb cb, void *priv,
                  int argc, const char **argv, const size_t *argvlen);
void rds_cluster_evalsha(rds_cluster_t *cl, script_id_t s, rds_cb cb, void *priv, int numkeys, int argc,
                  const char **argv, const size_t *argvlen);

/* One allocation holding a head of head_size bytes, then copies of argv/argvlen and the
 * argument bytes (for commands that may be sent again). *out_argv / *out_lens point into
 * it; free() the block. Never NULL. (Shared by rds.c and rds_cluster.c.) */
void *rds__argv_block(size_t head_size, int argc, const char **argv, const size_t *argvlen,
                      const char ***out_argv, size_t **out_lens);

#endif
