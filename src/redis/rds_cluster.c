/* rds_cluster.c -- a worker's Redis Cluster router: routing and redirects (rds_cluster.h).
 *
 * Above the node layer, not beside it: each cluster node is reached through one
 * rds_node_t on the worker's loop, owned here, which already brings deadlines,
 * reconnects, SCRIPT LOAD on every (re)connect and the EVALSHA resent after NOSCRIPT --
 * so a promoted replica whose script cache is empty costs one reload, not an error. This
 * file adds:
 *
 *   map        slot -> node, from CLUSTER SLOTS (rcluster.c); asked of any connection
 *              that is up, at start, after a MOVED, after a lost connection, and again
 *              every REFRESH_MIN_MS while a slot has no reachable owner;
 *   routing    a command goes to the owner of its key's slot (rcluster_key_index), EVALSHA by
 *              its first key, keyless commands to any node that is up;
 *   MOVED      the slot's owner is updated at once, the command resent there, and a full
 *              refresh is scheduled;
 *   ASK        ASKING + the command on the named node (pipelined on one connection, so
 *              nothing can come between them); the map is left alone;
 *   TRYAGAIN, CLUSTERDOWN, no owner, owner not connected
 *              the command waits in a queue and is retried every TICK_MS until its
 *              deadline (redis_timeout_ms from the first send), then fails with NULL.
 *
 * A command is never resent after it may have run: a NULL reply (timeout, lost
 * connection) goes to the caller as NULL, because an admission must not be applied twice
 * behind the caller's back. Only replies that prove the command did not run (MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN) and refusals before sending lead to a resend.
 *
 * Lifetime: every command and every CLUSTER SLOTS request in flight holds a reference on
 * the rds_cluster_t; rds_cluster_free closes the node clients (their callbacks then run with NULL) and
 * the memory goes with the last reference. */
#include "redis/rds_cluster.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "core/clock.h"
#include "core/log.h"
#include "server/metrics.h"
#include "redis/rcluster.h"
#include "server/worker.h"
#include "core/xmem.h"

#define TICK_MS 20
#define REFRESH_MIN_MS 100
#define MAX_REDIRECTS 8

typedef struct ccmd {
    struct ccmd *next;          /* the wait queue */
    rds_cluster_t *cl;
    rds_cb cb;
    void *priv;
    uint64_t deadline;
    int has_slot;
    unsigned slot;
    int ask_node;               /* -1, or the node an ASK named */
    int redirects;
    int evalsha;                /* 1: script/numkeys apply */
    script_id_t script;
    int numkeys;
    int argc;
    const char **argv;          /* copies, in the same allocation */
    size_t *argvlen;
} ccmd_t;

struct rds_cluster {
    worker_t *w;
    url_redis_t node_addr;       /* template for node clients: password, no seeds */
    int timeout_ms;
    rcluster_map_t map;
    rds_node_t *conn[RCL_MAX_NODES]; /* by map node index; NULL until needed */
    int nseeds;                 /* node indexes 0..nseeds-1 are the seeds */

    ccmd_t *wait_head, *wait_tail;
    struct event *tick;
    int tick_on;
    int refresh_wanted;
    int refreshing;             /* a CLUSTER SLOTS is in flight */
    uint64_t refreshed_at;
    int map_logged;             /* the first complete map was logged */

    int refs;                   /* commands and refreshes in flight */
    int closing;
};

typedef struct refresh {
    rds_cluster_t *cl;
    int node;                   /* the node asked (its host fills an empty one) */
} refresh_t;

static void send_cmd(ccmd_t *cc);

static void unref(rds_cluster_t *cl)
{
    if (--cl->refs == 0 && cl->closing)
        free(cl);
}

static void arm(rds_cluster_t *cl)
{
    if (cl->tick_on || cl->closing)
        return;
    struct timeval tv = { 0, TICK_MS * 1000 };
    if (event_add(cl->tick, &tv) == 0)
        cl->tick_on = 1;
}

/* The node's client, created on first use. */
static rds_node_t *conn_for(rds_cluster_t *cl, int node)
{
    if (node < 0 || node >= cl->map.nnodes)
        return NULL;
    if (cl->conn[node] == NULL && !cl->closing) {
        url_redis_t a = cl->node_addr;
        snprintf(a.host, sizeof a.host, "%s", cl->map.nodes[node].host);
        a.port = cl->map.nodes[node].port;
        cl->conn[node] = rds_node_new(cl->w, &a, cl->timeout_ms);
    }
    return cl->conn[node];
}

static void finish(ccmd_t *cc, redisReply *reply)
{
    rds_cluster_t *cl = cc->cl;
    rds_cb cb = cc->cb;
    void *priv = cc->priv;
    free(cc);
    if (cb)
        cb(reply, priv);
    unref(cl);
}

static void enqueue(ccmd_t *cc)
{
    rds_cluster_t *cl = cc->cl;
    cc->next = NULL;
    if (cl->wait_tail)
        cl->wait_tail->next = cc;
    else
        cl->wait_head = cc;
    cl->wait_tail = cc;
    arm(cl);
}

/* ---------------------------------------------------------------- the map */

static void want_refresh(rds_cluster_t *cl)
{
    cl->refresh_wanted = 1;
    arm(cl);
}

/* 1 when every slot has an owner whose client is up. */
static int map_healthy(const rds_cluster_t *cl)
{
    if (cl->map.nslots != RCL_SLOTS)
        return 0;
    int ms[RCL_MAX_NODES];
    int n = rcluster_map_masters(&cl->map, ms);
    for (int i = 0; i < n; i++)
        if (!rds_node_is_up(cl->conn[ms[i]]))
            return 0;
    return 1;
}

static void on_slots(redisReply *reply, void *priv)
{
    refresh_t *rf = priv;
    rds_cluster_t *cl = rf->cl;
    int node = rf->node;
    free(rf);
    cl->refreshing = 0;
    if (!cl->closing) {
        int got = -1;
        if (reply && reply->type == REDIS_REPLY_ARRAY)
            got = rcluster_map_load(&cl->map, reply, cl->map.nodes[node].host);
        if (got < 0) {
            log_warn("redis cluster: CLUSTER SLOTS from %s:%d: %s", cl->map.nodes[node].host,
                     cl->map.nodes[node].port,
                     reply == NULL ? "no reply"
                     : reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            want_refresh(cl);
        } else {
            /* Connect to every master now, so the first command to it does not wait. */
            int ms[RCL_MAX_NODES];
            int n = rcluster_map_masters(&cl->map, ms);
            for (int i = 0; i < n; i++)
                conn_for(cl, ms[i]);
            if (got != RCL_SLOTS)
                want_refresh(cl);   /* CLUSTERDOWN or a reshard in progress: ask again */
            if (!cl->map_logged && got == RCL_SLOTS) {
                cl->map_logged = 1;
                log_debug("redis cluster: %d masters serve all %d slots", n, RCL_SLOTS);
            }
        }
    }
    unref(cl);
}

/* Sends CLUSTER SLOTS to some node whose client is up (seeds included). */
static void refresh(rds_cluster_t *cl, uint64_t now)
{
    if (cl->refreshing || now - cl->refreshed_at < REFRESH_MIN_MS)
        return;
    int pick = -1;
    for (int i = 0; i < cl->map.nnodes && pick < 0; i++)
        if (rds_node_is_up(cl->conn[i]))
            pick = i;
    if (pick < 0) {
        /* Nobody is up: make sure the seeds and known masters are trying. */
        for (int i = 0; i < cl->map.nnodes; i++)
            conn_for(cl, i);
        return;
    }
    refresh_t *rf = xmalloc(sizeof *rf);
    rf->cl = cl;
    rf->node = pick;
    cl->refreshing = 1;
    cl->refresh_wanted = 0;
    cl->refreshed_at = now;
    cl->refs++;
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    size_t lens[2] = { 7, 5 };
    rds_node_command(cl->conn[pick], on_slots, rf, 2, argv, lens);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rds_cluster_t *cl = arg;
    (void)fd;
    (void)what;
    cl->tick_on = 0;
    uint64_t now = clock_now_ms();
    if (!cl->refresh_wanted && cl->wait_head && !map_healthy(cl))
        cl->refresh_wanted = 1;
    if (cl->refresh_wanted)
        refresh(cl, now);
    /* Retry what waits; whatever has to wait again is queued anew (after this batch). */
    ccmd_t *list = cl->wait_head;
    cl->wait_head = cl->wait_tail = NULL;
    cl->refs++;   /* a callback below may free nothing under us */
    while (list) {
        ccmd_t *cc = list;
        list = cc->next;
        if (cl->closing || now >= cc->deadline)
            finish(cc, NULL);
        else
            send_cmd(cc);
    }
    if (cl->wait_head || cl->refresh_wanted)
        arm(cl);
    unref(cl);
}

/* ---------------------------------------------------------------- commands */

static int is_up_node(rds_cluster_t *cl, int node)
{
    return node >= 0 && rds_node_is_up(conn_for(cl, node));
}

static void on_node_reply(redisReply *reply, void *priv);

/* Sends cc to the node it belongs to, or queues it until that node can take it. */
static void send_cmd(ccmd_t *cc)
{
    rds_cluster_t *cl = cc->cl;
    if (cl->closing) {
        finish(cc, NULL);
        return;
    }
    int node = cc->ask_node;
    if (node < 0 && cc->has_slot)
        node = rcluster_map_owner(&cl->map, cc->slot);
    if (node < 0 && !cc->has_slot) {
        for (int i = 0; i < cl->map.nnodes && node < 0; i++)
            if (rds_node_is_up(cl->conn[i]))
                node = i;
    }
    if (!is_up_node(cl, node)) {
        if (node < 0 || cc->ask_node < 0)
            want_refresh(cl);
        enqueue(cc);
        return;
    }
    rds_node_t *c = cl->conn[node];
    if (cc->ask_node >= 0) {
        const char *asking[1] = { "ASKING" };
        size_t alen[1] = { 6 };
        rds_node_command(c, NULL, NULL, 1, asking, alen);
    }
    if (cc->evalsha)
        rds_node_evalsha(c, cc->script, on_node_reply, cc, cc->numkeys, cc->argc, cc->argv,
                    cc->argvlen);
    else
        rds_node_command(c, on_node_reply, cc, cc->argc, cc->argv, cc->argvlen);
}

static void on_node_reply(redisReply *reply, void *priv)
{
    ccmd_t *cc = priv;
    rds_cluster_t *cl = cc->cl;
    if (cl->closing || reply == NULL) {
        if (reply == NULL && !cl->closing)
            want_refresh(cl);   /* a lost node: its replica may be taking over */
        finish(cc, NULL);
        return;
    }
    if (reply->type != REDIS_REPLY_ERROR) {
        finish(cc, reply);
        return;
    }
    unsigned slot = 0;
    char host[RCL_HOST_MAX];
    int port = 0;
    int kind = rcluster_parse_error(reply->str, (size_t)reply->len, &slot, host, sizeof host, &port);
    if (kind == RCL_ERR_OTHER || cc->redirects >= MAX_REDIRECTS) {
        finish(cc, reply);
        return;
    }
    cc->redirects++;
    if (cl->w->m)
        metric_inc(&cl->w->m->redis_redirects);
    if (kind == RCL_ERR_TRYAGAIN || kind == RCL_ERR_CLUSTERDOWN) {
        /* A migration in progress (multi-key command) or a failover: wait a tick. */
        if (kind == RCL_ERR_CLUSTERDOWN)
            want_refresh(cl);
        cc->ask_node = -1;
        enqueue(cc);
        return;
    }
    int node = host[0] ? rcluster_map_node(&cl->map, host, strlen(host), port) : -1;
    if (node < 0) {
        log_warn("redis cluster: cannot follow \"%.*s\"", (int)(reply->len > 200 ? 200 : reply->len),
                 reply->str);
        finish(cc, reply);
        return;
    }
    if (kind == RCL_ERR_MOVED) {
        if (cl->map.slot_node[slot] == RCL_NO_NODE)
            cl->map.nslots++;
        cl->map.slot_node[slot] = (uint16_t)node;
        cc->ask_node = -1;
        want_refresh(cl);
    } else {
        cc->ask_node = node;   /* this command only; the slot still belongs to its owner */
    }
    send_cmd(cc);
}

/* One allocation holding a head of head_size bytes (zeroed), then copies of argv/argvlen
 * and the argument bytes: a command that may be sent again keeps its own arguments.
 * *out_argv / *out_lens point into it; free() the block. Never NULL. */
static void *argv_block(size_t head_size, int argc, const char **argv, const size_t *argvlen,
                        const char ***out_argv, size_t **out_lens)
{
    size_t bytes = 0;
    for (int i = 0; i < argc; i++)
        bytes += argvlen ? argvlen[i] : strlen(argv[i]);
    /* the head, rounded up so the arrays after it are aligned */
    size_t head = (head_size + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1);
    size_t arrays = (sizeof(char *) + sizeof(size_t)) * (size_t)argc;
    char *block = xmalloc(head + arrays + bytes + 1);
    memset(block, 0, head_size);
    size_t *lens = (size_t *)(void *)(block + head);
    const char **av = (const char **)(void *)(lens + argc);
    char *p = (char *)(av + argc);
    for (int i = 0; i < argc; i++) {
        size_t len = argvlen ? argvlen[i] : strlen(argv[i]);
        if (len)
            memcpy(p, argv[i], len);
        av[i] = p;
        lens[i] = len;
        p += len;
    }
    *out_argv = av;
    *out_lens = lens;
    return block;
}

/* A command's wrapper with its own copy of the arguments (it may be sent again), or NULL
 * after cb(NULL, priv) when the client is closing or memory is short. */
static ccmd_t *ccmd_new(rds_cluster_t *cl, rds_cb cb, void *priv, int argc, const char **argv,
                        const size_t *argvlen)
{
    ccmd_t *cc = NULL;
    const char **cargv = NULL;
    size_t *clens = NULL;
    if (cl != NULL && !cl->closing && argc > 0)
        cc = argv_block(sizeof *cc, argc, argv, argvlen, &cargv, &clens);
    if (cc == NULL) {
        if (cb)
            cb(NULL, priv);
        return NULL;
    }
    cc->cl = cl;
    cc->cb = cb;
    cc->priv = priv;
    cc->ask_node = -1;
    cc->argc = argc;
    cc->argv = cargv;
    cc->argvlen = clens;
    cc->deadline = clock_now_ms() + (uint64_t)cl->timeout_ms;
    cl->refs++;
    return cc;
}

void rds_cluster_command(rds_cluster_t *cl, const char *route_key, size_t route_len, rds_cb cb,
                         void *priv, int argc, const char **argv, const size_t *argvlen)
{
    ccmd_t *cc = ccmd_new(cl, cb, priv, argc, argv, argvlen);
    if (cc == NULL)
        return;
    if (route_key) {
        cc->has_slot = 1;
        cc->slot = rcluster_slot(route_key, route_len);
    } else {
        int k = rcluster_key_index(argc, cc->argv, cc->argvlen);
        if (k >= 0 && k < argc) {
            cc->has_slot = 1;
            cc->slot = rcluster_slot(cc->argv[k], cc->argvlen[k]);
        }
    }
    send_cmd(cc);
}

void rds_cluster_evalsha(rds_cluster_t *cl, script_id_t s, rds_cb cb, void *priv, int numkeys,
                         int argc, const char **argv, const size_t *argvlen)
{
    if (numkeys < 0 || argc < numkeys) {
        if (cb)
            cb(NULL, priv);
        return;
    }
    ccmd_t *cc = ccmd_new(cl, cb, priv, argc, argv, argvlen);
    if (cc == NULL)
        return;
    cc->evalsha = 1;
    cc->script = s;
    cc->numkeys = numkeys;
    if (numkeys > 0) {
        cc->has_slot = 1;
        cc->slot = rcluster_slot(cc->argv[0], cc->argvlen[0]);
    }
    send_cmd(cc);
}

/* ---------------------------------------------------------------- lifetime */

rds_cluster_t *rds_cluster_new(struct worker *w, const url_redis_t *addr, int timeout_ms)
{
    if (w == NULL || w->base == NULL || addr == NULL || !addr->cluster || addr->nseeds <= 0)
        return NULL;
    rds_cluster_t *cl = xcalloc(1, sizeof *cl);
    cl->w = w;
    cl->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
    cl->node_addr = *addr;
    cl->node_addr.cluster = 0;
    cl->node_addr.nseeds = 0;
    cl->node_addr.db = 0;
    cl->node_addr.unix_path[0] = '\0';
    rcluster_map_init(&cl->map);
    for (int i = 0; i < addr->nseeds; i++)
        rcluster_map_node(&cl->map, addr->seeds[i].host, strlen(addr->seeds[i].host),
                     addr->seeds[i].port);
    cl->nseeds = cl->map.nnodes;
    cl->tick = event_new(w->base, -1, 0, on_tick, cl);
    if (cl->tick == NULL) {
        free(cl);
        return NULL;
    }
    for (int i = 0; i < cl->nseeds; i++)
        conn_for(cl, i);
    want_refresh(cl);
    return cl;
}

int rds_cluster_is_up(const rds_cluster_t *cl)
{
    return cl != NULL && !cl->closing && map_healthy(cl);
}

void rds_cluster_free(rds_cluster_t *cl)
{
    if (cl == NULL || cl->closing)
        return;
    cl->closing = 1;
    cl->refs++;
    if (cl->tick) {
        event_free(cl->tick);
        cl->tick = NULL;
        cl->tick_on = 0;
    }
    ccmd_t *list = cl->wait_head;
    cl->wait_head = cl->wait_tail = NULL;
    while (list) {
        ccmd_t *cc = list;
        list = cc->next;
        finish(cc, NULL);
    }
    for (int i = 0; i < RCL_MAX_NODES; i++) {
        rds_node_t *c = cl->conn[i];
        cl->conn[i] = NULL;
        rds_node_free(c);
    }
    unref(cl);
}
