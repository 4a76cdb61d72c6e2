/* rcl_sync.h -- a blocking Redis Cluster client, for threads that are not event loops:
 * the order writer's cluster supervisor, start-up checks, `seckill audit` and `bench`.
 *
 * One hiredis redisContext per node (socket timeouts as deadlines), opened on first use,
 * and a slot map (rcluster.h) from CLUSTER SLOTS. rcl_sync_command routes by key and follows
 * MOVED (map updated), ASK (ASKING first) and TRYAGAIN/CLUSTERDOWN (short naps) until the
 * command's deadline. For pipelines, rcl_sync_ctx() hands out a node's context: everything in
 * one pipeline must then belong to that node (keys of one hash tag do).
 *
 * Not thread-safe: one rcl_sync_t per thread. Ownership: the caller owns the rcl_sync_t and every
 * reply it returns (freeReplyObject); contexts from rcl_sync_ctx stay owned by the rcl_sync_t. */
#ifndef SECKILL_RCL_SYNC_H
#define SECKILL_RCL_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "redis/rcluster.h"
#include "core/url.h"

struct redisContext;
struct redisReply;

typedef struct rcl_sync rcl_sync_t;

/* a must be a cluster address (url_parse_redis of redis+cluster://). Reads the slot map
 * from the first seed that answers; NULL with a reason in err if none does. */
rcl_sync_t *rcl_sync_open(const url_redis_t *a, int timeout_ms, char *err, size_t errlen);
void rcl_sync_close(rcl_sync_t *s);                                     /* NULL is fine */

/* Re-reads the slot map from any node that answers. 0 or -1 (err says why). */
int rcl_sync_refresh(rcl_sync_t *s, char *err, size_t errlen);
const rcluster_map_t *rcl_sync_map(const rcl_sync_t *s);
/* The node owning key's slot (index into rcl_sync_map()->nodes) or -1. */
int rcl_sync_owner(const rcl_sync_t *s, const char *key, size_t len);

/* The node's connection, connected and authenticated on first use; NULL with err. */
struct redisContext *rcl_sync_ctx(rcl_sync_t *s, int node, char *err, size_t errlen);
/* Forgets a node's connection after a transport error on it (the next rcl_sync_ctx
 * reconnects). */
void rcl_sync_drop(rcl_sync_t *s, int node);

/* One command routed by key (NULL: the command's own key per rcluster_key_index, or the first
 * master for keyless commands). Returns the reply -- error replies included, except
 * redirects, which are followed -- or NULL with a reason in err on a transport failure
 * or when the deadline passes. */
struct redisReply *rcl_sync_command(rcl_sync_t *s, const char *key, size_t keylen, int argc,
                               const char **argv, const size_t *argvlen, char *err,
                               size_t errlen);

/* A connection per key, for the tools that read one voucher at a time (audit, bench):
 * on one Redis it is the one context (rconn.h); on a cluster, the context of the node
 * that owns the key's slot. All keys of one voucher share a hash tag, so a voucher's
 * reads -- a MULTI/EXEC included -- go to one node. */
typedef struct rcl_sync_route {
    struct redisContext *one;    /* one Redis */
    rcl_sync_t *cl;                   /* a cluster */
    int timeout_ms;              /* the deadline of one call: rcl_sync_route_key, a retried read */
} rcl_sync_route_t;
int rcl_sync_route_open(const char *url, int timeout_ms, rcl_sync_route_t *out, char *err,
                   size_t errlen);
/* The context for key (owned by r; do not free). NULL with err. On a cluster, a slot
 * without an owner or an owner that cannot be reached (a master that died: until its
 * replica is promoted, every node's map still names it) makes it reread the map from any
 * known node, seeds included, and try again until timeout_ms has passed. */
struct redisContext *rcl_sync_route_key(rcl_sync_route_t *r, const char *key, char *err, size_t errlen);
void rcl_sync_route_close(rcl_sync_route_t *r);   /* NULL members are fine */

/* Retrying a failed read on a cluster. A tool's read of one voucher (or one pipeline)
 * that failed because the cluster changed under it -- a connection broke, or Redis
 * answered MOVED, ASK, TRYAGAIN or CLUSTERDOWN -- can be redone from the start on the new
 * map: rcl_sync_route_retry returns 1 when err (what the read failed with) or a broken
 * connection says so and the deadline (from rcl_sync_route_deadline, taken before the first
 * attempt) has not passed; it has then dropped every connection (a pipeline cut short may
 * have left replies unread on the others), napped 20 ms and reread the map. 0: give up
 * (one Redis, another error, or out of time). Only for reads and idempotent writes: a
 * command whose connection broke may have run. */
uint64_t rcl_sync_route_deadline(const rcl_sync_route_t *r);
int rcl_sync_route_retry(rcl_sync_route_t *r, uint64_t deadline, const char *err);
/* Pipelines through routed contexts: append each command to rcl_sync_route_key(key)'s context
 * and remember that context in ctx[i]; then this reads the n replies in append order
 * (each context keeps its own order, so every reply meets its command), hands each to fn
 * (may be NULL) and frees it. An error reply or fn's -1 makes the result -1 (the rest is
 * still read); a broken connection stops at once. 0, or -1 with err ("what: ..."). */
typedef int (*rcl_sync_reply_fn)(size_t i, const struct redisReply *r, void *arg, char *err,
                            size_t errlen);
int rcl_sync_route_replies(struct redisContext **ctx, size_t n, rcl_sync_reply_fn fn, void *arg,
                      const char *what, char *err, size_t errlen);

#endif
