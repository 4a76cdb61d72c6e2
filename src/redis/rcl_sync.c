/* rcl_sync.c -- a blocking Redis Cluster client (rcl_sync.h).
 *
 * Redirects are followed only for replies that prove the command did not run (MOVED,
 * ASK, TRYAGAIN, CLUSTERDOWN); a transport failure is returned to the caller, who knows
 * whether its command may be repeated. */
#include "redis/rcl_sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "core/clock.h"
#include "redis/rconn.h"
#include "core/xmem.h"

#define NAP_MS 20
#define MAX_REDIRECTS 16

struct rcl_sync {
    url_redis_t addr;                         /* seeds and password */
    int timeout_ms;
    rcluster_map_t map;
    redisContext *ctx[RCL_MAX_NODES];
    unsigned refreshes;                       /* rotates the master asked for the map */
};

static void nap_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

const rcluster_map_t *rcl_sync_map(const rcl_sync_t *s)
{
    return &s->map;
}

int rcl_sync_owner(const rcl_sync_t *s, const char *key, size_t len)
{
    return rcluster_map_owner(&s->map, rcluster_slot(key, len));
}

void rcl_sync_drop(rcl_sync_t *s, int node)
{
    if (node < 0 || node >= RCL_MAX_NODES || s->ctx[node] == NULL)
        return;
    redisFree(s->ctx[node]);
    s->ctx[node] = NULL;
}

redisContext *rcl_sync_ctx(rcl_sync_t *s, int node, char *err, size_t errlen)
{
    if (node < 0 || node >= s->map.nnodes) {
        snprintf(err, errlen, "no such cluster node");
        return NULL;
    }
    if (s->ctx[node])
        return s->ctx[node];
    const rcluster_node_t *n = &s->map.nodes[node];
    url_redis_t a = s->addr;
    a.cluster = 0;
    a.nseeds = 0;
    a.db = 0;
    snprintf(a.host, sizeof a.host, "%s", n->host);
    a.port = n->port;
    redisContext *c = rconn_open(&a, s->timeout_ms, err, errlen);
    if (c == NULL)
        return NULL;
    s->ctx[node] = c;
    return c;
}

/* CLUSTER SLOTS from node i into the map. 0 or -1. */
static int refresh_from(rcl_sync_t *s, int i, char *err, size_t errlen)
{
    redisContext *c = rcl_sync_ctx(s, i, err, errlen);
    if (c == NULL)
        return -1;
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    if (r == NULL) {
        snprintf(err, errlen, "%s:%d: %s", s->map.nodes[i].host, s->map.nodes[i].port,
                 c->errstr);
        rcl_sync_drop(s, i);
        return -1;
    }
    char host[RCL_HOST_MAX];
    snprintf(host, sizeof host, "%s", s->map.nodes[i].host);
    int got = rcluster_map_load(&s->map, r, host);
    if (got < 0)
        snprintf(err, errlen, "%s:%d: CLUSTER SLOTS: %s", host, s->map.nodes[i].port,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return got < 0 ? -1 : 0;
}

int rcl_sync_refresh(rcl_sync_t *s, char *err, size_t errlen)
{
    /* Masters first (they are what the map is about), then every other known node. The
     * master asked first rotates: the writers re-read the map every second, and always
     * asking the first master would put every instance's CLUSTER SLOTS on one node. */
    int ms[RCL_MAX_NODES];
    int n = rcluster_map_masters(&s->map, ms);
    unsigned first = n > 0 ? s->refreshes++ % (unsigned)n : 0;
    for (int i = 0; i < n; i++)
        if (refresh_from(s, ms[(first + (unsigned)i) % (unsigned)n], err, errlen) == 0)
            return 0;
    for (int i = 0; i < s->map.nnodes; i++)
        if (refresh_from(s, i, err, errlen) == 0)
            return 0;
    return -1;
}

rcl_sync_t *rcl_sync_open(const url_redis_t *a, int timeout_ms, char *err, size_t errlen)
{
    if (a == NULL || !a->cluster || a->nseeds <= 0) {
        snprintf(err, errlen, "not a cluster address");
        return NULL;
    }
    rcl_sync_t *s = xcalloc(1, sizeof *s);
    s->addr = *a;
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : 2000;
    rcluster_map_init(&s->map);
    for (int i = 0; i < a->nseeds; i++)
        rcluster_map_node(&s->map, a->seeds[i].host, strlen(a->seeds[i].host), a->seeds[i].port);
    if (rcl_sync_refresh(s, err, errlen) != 0) {
        rcl_sync_close(s);
        return NULL;
    }
    return s;
}

void rcl_sync_close(rcl_sync_t *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < RCL_MAX_NODES; i++)
        rcl_sync_drop(s, i);
    free(s);
}

redisReply *rcl_sync_command(rcl_sync_t *s, const char *key, size_t keylen, int argc, const char **argv,
                        const size_t *argvlen, char *err, size_t errlen)
{
    int has_slot = 0;
    unsigned slot = 0;
    if (key) {
        has_slot = 1;
        slot = rcluster_slot(key, keylen);
    } else {
        int k = rcluster_key_index(argc, argv, argvlen);
        if (k >= 0 && k < argc) {
            has_slot = 1;
            slot = rcluster_slot(argv[k], argvlen ? argvlen[k] : strlen(argv[k]));
        }
    }
    uint64_t deadline = clock_mono_ms() + (uint64_t)s->timeout_ms;
    int ask = -1;
    for (int round = 0; round <= MAX_REDIRECTS; round++) {
        int node = ask;
        if (node < 0 && has_slot)
            node = rcluster_map_owner(&s->map, slot);
        if (node < 0 && !has_slot) {
            int ms[RCL_MAX_NODES];
            node = rcluster_map_masters(&s->map, ms) > 0 ? ms[0] : -1;
        }
        if (node < 0) {
            if (clock_mono_ms() >= deadline) {
                snprintf(err, errlen, "slot %u has no owner (cluster down?)", slot);
                return NULL;
            }
            rcl_sync_refresh(s, err, errlen);
            nap_ms(NAP_MS);
            continue;
        }
        redisContext *c = rcl_sync_ctx(s, node, err, errlen);
        if (c == NULL) {
            if (clock_mono_ms() >= deadline)
                return NULL;
            rcl_sync_refresh(s, err, errlen);
            nap_ms(NAP_MS);
            continue;
        }
        if (ask >= 0)
            redisAppendCommand(c, "ASKING");
        redisAppendCommandArgv(c, argc, argv, argvlen);
        redisReply *r = NULL;
        void *rv = NULL;
        if (ask >= 0) {
            if (redisGetReply(c, &rv) != REDIS_OK) {
                snprintf(err, errlen, "%s", c->errstr);
                rcl_sync_drop(s, node);
                return NULL;
            }
            freeReplyObject(rv);
        }
        if (redisGetReply(c, &rv) != REDIS_OK) {
            snprintf(err, errlen, "%s:%d: %s", s->map.nodes[node].host,
                     s->map.nodes[node].port, c->errstr);
            rcl_sync_drop(s, node);
            return NULL;
        }
        r = rv;
        if (r->type != REDIS_REPLY_ERROR)
            return r;
        char host[RCL_HOST_MAX];
        unsigned rslot = 0;
        int port = 0;
        int kind = rcluster_parse_error(r->str, (size_t)r->len, &rslot, host, sizeof host, &port);
        if (kind == RCL_ERR_OTHER || clock_mono_ms() >= deadline)
            return r;
        ask = -1;
        if (kind == RCL_ERR_MOVED || kind == RCL_ERR_ASK) {
            if (host[0] == '\0')
                snprintf(host, sizeof host, "%s", s->map.nodes[node].host);
            int to = rcluster_map_node(&s->map, host, strlen(host), port);
            if (to < 0)
                return r;
            if (kind == RCL_ERR_MOVED) {
                if (s->map.slot_node[rslot] == RCL_NO_NODE)
                    s->map.nslots++;
                s->map.slot_node[rslot] = (uint16_t)to;
            } else {
                ask = to;
            }
        } else {
            nap_ms(NAP_MS);
            if (kind == RCL_ERR_CLUSTERDOWN)
                rcl_sync_refresh(s, err, errlen);
        }
        freeReplyObject(r);
    }
    snprintf(err, errlen, "too many redirects");
    return NULL;
}

/* ---------------------------------------------------------------- per-key routing */

int rcl_sync_route_open(const char *url, int timeout_ms, rcl_sync_route_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    url_redis_t a;
    if (url_parse_redis(url, &a) == 0 && a.cluster) {
        char why[300];
        out->cl = rcl_sync_open(&a, out->timeout_ms, why, sizeof why);
        if (!out->cl) {
            char shown[600];
            snprintf(err, errlen, "Redis Cluster %s: %s", url_redact(url, shown, sizeof shown),
                     why);
            return -1;
        }
        return 0;
    }
    out->one = rconn_open_url(url, timeout_ms, err, errlen);
    return out->one ? 0 : -1;
}

uint64_t rcl_sync_route_deadline(const rcl_sync_route_t *r)
{
    return clock_mono_ms() + (uint64_t)(r->timeout_ms > 0 ? r->timeout_ms : 5000);
}

redisContext *rcl_sync_route_key(rcl_sync_route_t *r, const char *key, char *err, size_t errlen)
{
    if (r->one)
        return r->one;
    if (!r->cl) {
        snprintf(err, errlen, "no Redis connection");
        return NULL;
    }
    uint64_t deadline = rcl_sync_route_deadline(r);
    for (;;) {
        int node = rcl_sync_owner(r->cl, key, strlen(key));
        if (node < 0) {
            snprintf(err, errlen, "no cluster node serves %s", key);
        } else {
            redisContext *c = rcl_sync_ctx(r->cl, node, err, errlen);
            if (c && c->err) {
                /* broken by an earlier call: once more, fresh */
                rcl_sync_drop(r->cl, node);
                c = rcl_sync_ctx(r->cl, node, err, errlen);
            }
            if (c)
                return c;
        }
        if (clock_mono_ms() >= deadline)
            return NULL;
        /* A failover in progress, or a map older than the cluster: ask again. */
        char why[256];
        nap_ms(NAP_MS);
        rcl_sync_refresh(r->cl, why, sizeof why);
    }
}

int rcl_sync_route_retry(rcl_sync_route_t *r, uint64_t deadline, const char *err)
{
    if (!r->cl || clock_mono_ms() >= deadline)
        return 0;
    int broken = 0;
    for (int i = 0; i < RCL_MAX_NODES; i++)
        if (r->cl->ctx[i] && r->cl->ctx[i]->err)
            broken = 1;
    int moved = err && (strstr(err, "MOVED ") || strstr(err, "ASK ") ||
                        strstr(err, "TRYAGAIN") || strstr(err, "CLUSTERDOWN") ||
                        strstr(err, "no cluster node serves"));
    if (!broken && !moved)
        return 0;
    for (int i = 0; i < RCL_MAX_NODES; i++)
        rcl_sync_drop(r->cl, i);
    char why[256];
    nap_ms(NAP_MS);
    rcl_sync_refresh(r->cl, why, sizeof why);
    return 1;
}

void rcl_sync_route_close(rcl_sync_route_t *r)
{
    rconn_close(r->one);
    rcl_sync_close(r->cl);
    memset(r, 0, sizeof *r);
}

int rcl_sync_route_replies(redisContext **ctx, size_t n, rcl_sync_reply_fn fn, void *arg, const char *what,
                      char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(ctx[i], (void **)&r) != REDIS_OK) {
            snprintf(err, errlen, "%s: %s", what, ctx[i]->errstr);
            return -1;
        }
        if (rc == 0 && r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "%s: %s", what, r->str);
            rc = -1;
        } else if (rc == 0 && fn) {
            rc = fn(i, r, arg, err, errlen);
        }
        freeReplyObject(r);
    }
    return rc;
}
