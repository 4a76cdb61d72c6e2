/* writer_cluster.c -- the order writer on Redis Cluster (writer_int.h).
 *
 * On a redis+cluster:// URL writer_start starts a supervisor instead of a writer, which
 * runs one writer per master ("sub-writer": its connection goes to that node only, and it
 * keeps only the streams whose slot that node owns, so its reads name only keys of one
 * node). Every second the supervisor re-reads the slot map and starts a sub-writer for a
 * new master (a promoted replica) and stops the one of a node that owns no slot any more.
 * All sub-writers use the instance's consumer name: a stream that moves to another node
 * (reshard, failover) is picked up there with its pending entries, which the new owner's
 * sub-writer replays (idempotently) as for any stream it starts reading. seckill:streams
 * is read through the cluster client (rcl_sync.h), wherever its slot lives. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/key.h"
#include "core/log.h"
#include "core/xmem.h"
#include "server/events.h"
#include "writer/writer_int.h"

#define CLUSTER_CHECK_MS 1000

/* Sub-writer: 1 if stream key lives on this sub-writer's node (per the last map). */
int writer_cluster_mine(writer_t *wr, const char *key)
{
    int o = rcl_sync_owner(wr->rcs, key, strlen(key));
    if (o < 0)
        return 0;
    const rcluster_node_t *n = &rcl_sync_map(wr->rcs)->nodes[o];
    return n->port == wr->addr.port && strcmp(n->host, wr->addr.host) == 0;
}

/* Sub-writer: the slot map and SMEMBERS seckill:streams through the cluster client. */
redisReply *writer_cluster_streams(writer_t *wr)
{
    char why[300];
    if (wr->rcs == NULL)
        wr->rcs = rcl_sync_open(&wr->cluster_addr, wr->redis_timeout_ms, why, sizeof why);
    else
        (void)rcl_sync_refresh(wr->rcs, why, sizeof why);   /* on failure the old map stays;
                                                        * SMEMBERS below tells */
    if (wr->rcs == NULL) {
        writer_redis_down(wr, "cannot read the cluster's slot map", why);
        return NULL;
    }
    const char *argv[2] = { "SMEMBERS", KEY_STREAMS };
    redisReply *r = rcl_sync_command(wr->rcs, NULL, 0, 2, argv, NULL, why, sizeof why);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        writer_redis_down(wr, "SMEMBERS " KEY_STREAMS,
                          r && r->type == REDIS_REPLY_ERROR ? r->str : why);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int sub_index(const writer_t *sup, const rcluster_node_t *n)
{
    for (size_t i = 0; i < sup->nsubs; i++)
        if (sup->subs[i]->addr.port == n->port && strcmp(sup->subs[i]->addr.host, n->host) == 0)
            return (int)i;
    return -1;
}

static void sub_start(writer_t *sup, const rcluster_node_t *n)
{
    url_redis_t a = sup->addr;
    a.cluster = 0;
    a.nseeds = 0;
    a.db = 0;
    a.unix_path[0] = '\0';
    snprintf(a.host, sizeof a.host, "%s", n->host);
    a.port = n->port;
    writer_t *sub = writer_new(sup->app, &a);
    if (sub == NULL)
        return;
    sub->node_mode = 1;
    sub->cluster_addr = sup->addr;
    if (pthread_create(&sub->tid, NULL, writer_main, sub) != 0) {
        log_error("writer: cannot start the writer of node %s:%d", n->host, n->port);
        writer_free(sub);
        return;
    }
    sup->subs = xrealloc(sup->subs, (sup->nsubs + 1) * sizeof *sup->subs);
    sup->subs[sup->nsubs++] = sub;
    log_info("writer: reading the order streams of master %s:%d", n->host, n->port);
}

/* One pass: a sub-writer for every master, none for a node that owns no slot. */
static void supervise(writer_t *sup)
{
    char why[300];
    if (sup->rcs == NULL) {
        sup->rcs = rcl_sync_open(&sup->addr, sup->redis_timeout_ms, why, sizeof why);
        if (sup->rcs == NULL) {
            writer_redis_down(sup, "cannot read the cluster's slot map", why);
            return;
        }
    } else if (rcl_sync_refresh(sup->rcs, why, sizeof why) != 0) {
        writer_redis_down(sup, "cannot read the cluster's slot map", why);
        return;
    }
    writer_redis_up(sup);
    const rcluster_map_t *m = rcl_sync_map(sup->rcs);
    int ms[RCL_MAX_NODES];
    int n = rcluster_map_masters(m, ms);
    int first = sup->nsubs == 0;   /* the start, not a change of masters */
    for (int i = 0; i < n; i++)
        if (sub_index(sup, &m->nodes[ms[i]]) < 0) {
            sub_start(sup, &m->nodes[ms[i]]);
            if (!first)   /* a replica promoted (a failover), or a master added */
                events_add(EV_FAILOVER, 0, "%s:%d is a master now (a failover or a new "
                           "master): its order streams are read", m->nodes[ms[i]].host,
                           m->nodes[ms[i]].port);
        }
    for (size_t i = 0; i < sup->nsubs;) {
        int still = 0;
        for (int k = 0; k < n && !still; k++)
            still = sup->subs[i]->addr.port == m->nodes[ms[k]].port &&
                    strcmp(sup->subs[i]->addr.host, m->nodes[ms[k]].host) == 0;
        if (still) {
            i++;
            continue;
        }
        /* What it read and did not ack stays pending under our consumer name; the node's
         * slots' new owner replays it. */
        writer_t *sub = sup->subs[i];
        log_info("writer: %s:%d owns no slot any more; its writer stops", sub->addr.host,
                 sub->addr.port);
        sup->subs[i] = sup->subs[--sup->nsubs];
        writer_stop(sub);
    }
}

void *writer_cluster_main(void *arg)
{
    writer_t *sup = arg;
    log_set_thread_name("writer");
    log_info("writer: Redis Cluster: one writer per master, consumer %s of group %s", sup->name,
             KEY_GROUP);
    while (!stopping(sup)) {
        supervise(sup);
        int64_t pending = 0, lag = 0, nshort = 0;
        for (size_t i = 0; i < sup->nsubs; i++) {
            pending += atomic_load(&sup->subs[i]->node_pending);
            lag += atomic_load(&sup->subs[i]->node_lag);
            nshort += atomic_load(&sup->subs[i]->node_short);
        }
        writer_publish_backlog(sup, pending, lag);
        atomic_store(&sup->m->masters_short, nshort);
        writer_nap(sup, CLUSTER_CHECK_MS);
    }
    /* writer_stop joins the sub-writers (each finishes its batch and drains). */
    return NULL;
}
