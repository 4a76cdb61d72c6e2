/* rds.c -- a worker's Redis client as its callers see it (rds.h): one node or a cluster.
 *
 * A thin dispatch: with a redis:// or unix: address every call goes to one node
 * connection (rds_node.c); with redis+cluster:// to the router (rds_cluster.c), which
 * owns one node connection per cluster node. */
#include "redis/rds.h"

#include <stdlib.h>

#include "core/xmem.h"
#include "redis/rds_cluster.h"

struct rds {
    rds_node_t *node;           /* one Redis; NULL on a cluster */
    rds_cluster_t *cluster;     /* a redis+cluster:// address; NULL on one Redis */
};

rds_t *rds_new(struct worker *w, const url_redis_t *addr, int timeout_ms)
{
    if (addr == NULL)
        return NULL;
    rds_t *c = xcalloc(1, sizeof(*c));
    if (addr->cluster)
        c->cluster = rds_cluster_new(w, addr, timeout_ms);
    else
        c->node = rds_node_new(w, addr, timeout_ms);
    if (c->node == NULL && c->cluster == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

void rds_free(rds_t *c)
{
    if (c == NULL)
        return;
    rds_cluster_free(c->cluster);
    rds_node_free(c->node);
    free(c);
}

int rds_is_up(const rds_t *c)
{
    if (c == NULL)
        return 0;
    return c->cluster ? rds_cluster_is_up(c->cluster) : rds_node_is_up(c->node);
}

void rds_command(rds_t *c, rds_cb cb, void *priv, int argc, const char **argv,
                 const size_t *argvlen)
{
    if (c != NULL && c->cluster)
        rds_cluster_command(c->cluster, NULL, 0, cb, priv, argc, argv, argvlen);
    else
        rds_node_command(c ? c->node : NULL, cb, priv, argc, argv, argvlen);
}

void rds_command_at(rds_t *c, const char *key, size_t keylen, rds_cb cb, void *priv, int argc,
                    const char **argv, const size_t *argvlen)
{
    if (c != NULL && c->cluster)
        rds_cluster_command(c->cluster, key, keylen, cb, priv, argc, argv, argvlen);
    else
        rds_node_command(c ? c->node : NULL, cb, priv, argc, argv, argvlen);
}

void rds_evalsha(rds_t *c, script_id_t s, rds_cb cb, void *priv, int numkeys, int argc,
                 const char **argv, const size_t *argvlen)
{
    if (c != NULL && c->cluster)
        rds_cluster_evalsha(c->cluster, s, cb, priv, numkeys, argc, argv, argvlen);
    else
        rds_node_evalsha(c ? c->node : NULL, s, cb, priv, numkeys, argc, argv, argvlen);
}
