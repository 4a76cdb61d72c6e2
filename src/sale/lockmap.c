/* lockmap.c -- rlock on one Redis or routed over a Redis Cluster's masters (lockmap.h).
 *
 * m->mu guards the slot map (the rcl_sync_t, which is not thread-safe), the per-node clients
 * and the quarantine table; it is never held across an rlock call, so a slow master
 * stalls only the threads that use it. */
#include "sale/lockmap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "redis/rcl_sync.h"
#include "redis/rcluster.h"
#include "core/url.h"
#include "core/xmem.h"

#define LKM_NAP_MS 20            /* between attempts while a slot has no usable owner */
#define LKM_REFRESH_GAP_MS 20    /* threads failing together read the map once */

struct lkm {
    lkm_opts_t o;
    url_redis_t addr;
    rlock_client_t *single;          /* one Redis */

    pthread_mutex_t mu;              /* everything below (see the file comment) */
    rcl_sync_t *rcs;                      /* cluster: the slot map and its connections */
    rlock_client_t *node[RCL_MAX_NODES];
    uint64_t refreshed_ms;           /* when the map was last read */
    uint64_t quarantine_ms[RCL_SLOTS];   /* monotonic ms until which a slot grants nothing */
    uint16_t before[RCL_SLOTS];      /* refresh_locked's copy of the previous owners */
    lkm_stats_t st;
};

static void nap_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void client_cfg(const lkm_t *m, rlock_config_t *cfg)
{
    rlock_config_init(cfg);
    cfg->password = m->addr.password[0] ? m->addr.password : NULL;
    cfg->command_timeout_ms = m->o.timeout_ms;
    cfg->connect_timeout_ms = m->o.timeout_ms < 1000 ? m->o.timeout_ms : 1000;
    if (m->o.replica_acks > 0) {
        cfg->replica_acks = m->o.replica_acks;
        cfg->replica_timeout_ms = m->o.timeout_ms / 2 > 0 ? m->o.timeout_ms / 2 : 1;
    }
}

lkm_t *lockmap_new(const char *redis_url, const lkm_opts_t *o, char *err, size_t errlen)
{
    lkm_t *m = xcalloc(1, sizeof *m);
    m->o = *o;
    if (m->o.timeout_ms <= 0)
        m->o.timeout_ms = 2000;
    pthread_mutex_init(&m->mu, NULL);
    if (url_parse_redis(redis_url, &m->addr) < 0) {
        /* Never print the URL: it may hold a password. */
        snprintf(err, errlen, "the Redis URL cannot be parsed");
        goto fail;
    }
    if (!m->addr.cluster) {
        rlock_config_t cfg;
        client_cfg(m, &cfg);
        cfg.host = m->addr.host;
        cfg.port = m->addr.port;
        cfg.unix_path = m->addr.unix_path[0] ? m->addr.unix_path : NULL;
        cfg.db = m->addr.db;
        if (rlock_client_new(&cfg, &m->single) != RLOCK_OK) {
            snprintf(err, errlen, "cannot create the lock client (rlock) for the configured Redis");
            goto fail;
        }
        return m;
    }
    char why[200];
    m->rcs = rcl_sync_open(&m->addr, m->o.timeout_ms, why, sizeof why);
    if (m->rcs == NULL) {
        snprintf(err, errlen, "cannot read the Redis Cluster's slot map for the locks: %s", why);
        goto fail;
    }
    m->refreshed_ms = clock_mono_ms();
    return m;
fail:
    lockmap_free(m);
    return NULL;
}

void lockmap_free(lkm_t *m)
{
    if (m == NULL)
        return;
    rlock_client_free(m->single);
    for (int i = 0; i < RCL_MAX_NODES; i++)
        rlock_client_free(m->node[i]);
    rcl_sync_close(m->rcs);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

rlock_client_t *lockmap_single(lkm_t *m)
{
    return m->single;
}

void lockmap_get_stats(lkm_t *m, lkm_stats_t *out)
{
    pthread_mutex_lock(&m->mu);
    *out = m->st;
    pthread_mutex_unlock(&m->mu);
}

/* The lock's slot: rlock names every key of lock N "rlock:{N}...", so it is N's slot
 * (N holds no braces: rlock_open refuses them). */
static unsigned lock_slot(const char *name)
{
    return rcluster_slot(name, strlen(name));
}

/* The client of the master owning slot, made on first use; NULL when the slot has no
 * owner now. Under m->mu. */
static rlock_client_t *owner_client(lkm_t *m, unsigned slot, int *node)
{
    const rcluster_map_t *map = rcl_sync_map(m->rcs);
    *node = rcluster_map_owner(map, slot);
    if (*node < 0)
        return NULL;
    if (m->node[*node] == NULL) {
        rlock_config_t cfg;
        client_cfg(m, &cfg);
        cfg.host = map->nodes[*node].host;
        cfg.port = map->nodes[*node].port;
        /* SPUBLISH/SSUBSCRIBE: a release wakes waiters on the lock's own shard only. */
        cfg.sharded_pubsub = true;
        if (rlock_client_new(&cfg, &m->node[*node]) != RLOCK_OK)
            return NULL;
    }
    return m->node[*node];
}

/* Reads the map again (at most once per LKM_REFRESH_GAP_MS) and quarantines the slots
 * whose master was replaced: their old owner owns nothing now (see lockmap.h). Under
 * m->mu. */
static void refresh_locked(lkm_t *m)
{
    uint64_t now = clock_mono_ms();
    if (now - m->refreshed_ms < LKM_REFRESH_GAP_MS)
        return;
    m->refreshed_ms = now;
    uint16_t *before = m->before;
    memcpy(before, rcl_sync_map(m->rcs)->slot_node, sizeof m->before);
    char why[200];
    m->st.refreshes++;
    if (rcl_sync_refresh(m->rcs, why, sizeof why) != 0) {
        log_warn("locks: cannot read the Redis Cluster's slot map: %s", why);
        return;
    }
    if (m->o.replica_acks > 0 || m->o.quarantine_ms <= 0)
        return;
    const rcluster_map_t *map = rcl_sync_map(m->rcs);
    int ms[RCL_MAX_NODES];
    int nm = rcluster_map_masters(map, ms);
    unsigned char master[RCL_MAX_NODES] = { 0 };
    for (int i = 0; i < nm; i++)
        master[ms[i]] = 1;
    int nq = 0;
    for (unsigned s = 0; s < RCL_SLOTS; s++) {
        uint16_t o = before[s], n = map->slot_node[s];
        if (o == RCL_NO_NODE || o == n || master[o])
            continue;
        m->quarantine_ms[s] = now + (uint64_t)m->o.quarantine_ms;
        nq++;
    }
    if (nq > 0) {
        m->st.failovers++;
        log_warn("locks: a Redis master was replaced (failover): no lock of its %d slots is "
                 "granted for %lld ms, until every lock it may have granted has expired", nq,
                 (long long)m->o.quarantine_ms);
    }
}

rlock_status_t lockmap_try_lock(lkm_t *m, const char *name, int64_t wait_ms, int64_t lease_ms,
                                rlock_t **out)
{
    if (m->single != NULL) {
        rlock_t *l = NULL;
        rlock_status_t st = rlock_open(m->single, name, RLOCK_REENTRANT, NULL, 0, &l);
        if (st == RLOCK_OK && (st = rlock_try_lock(l, wait_ms, lease_ms)) == RLOCK_OK) {
            *out = l;
            return st;
        }
        rlock_close(l);
        return st;
    }
    unsigned slot = lock_slot(name);
    uint64_t start = clock_mono_ms();
    uint64_t end = start + (uint64_t)(wait_ms > 0 ? wait_ms : 0) + (uint64_t)m->o.timeout_ms;
    for (int attempt = 0;; attempt++) {
        int node = -1;
        pthread_mutex_lock(&m->mu);
        if (m->quarantine_ms[slot] > clock_mono_ms()) {
            m->st.quarantined++;
            pthread_mutex_unlock(&m->mu);
            return RLOCK_REDIS_ERROR;
        }
        if (attempt > 0)
            m->st.retries++;
        rlock_client_t *c = owner_client(m, slot, &node);
        pthread_mutex_unlock(&m->mu);
        rlock_status_t st = RLOCK_REDIS_ERROR;
        if (c != NULL) {
            rlock_t *l = NULL;
            st = rlock_open(c, name, RLOCK_REENTRANT, NULL, 0, &l);
            if (st != RLOCK_OK)
                return st;                       /* a bad name: no retry helps */
            uint64_t now = clock_mono_ms();
            int64_t left = wait_ms > 0 && start + (uint64_t)wait_ms > now
                               ? (int64_t)(start + (uint64_t)wait_ms - now) : 0;
            st = rlock_try_lock(l, wait_ms == RLOCK_WAIT_FOREVER ? wait_ms : left, lease_ms);
            if (st == RLOCK_OK) {
                *out = l;
                return st;
            }
            rlock_close(l);
            if (st != RLOCK_REDIS_ERROR)
                return st;                       /* TIMEOUT: another holder; EINVAL */
        }
        if (clock_mono_ms() >= end)
            return RLOCK_REDIS_ERROR;
        /* A redirect, a dead or promoted master, or no owner yet: read the map again;
         * if the slot still points where it did, give the cluster a moment. */
        pthread_mutex_lock(&m->mu);
        refresh_locked(m);
        int now_node = rcluster_map_owner(rcl_sync_map(m->rcs), slot);
        pthread_mutex_unlock(&m->mu);
        if (now_node == node || now_node < 0)
            nap_ms(LKM_NAP_MS);
    }
}

rlock_status_t lockmap_unlock(lkm_t *m, rlock_t *l)
{
    rlock_status_t st = rlock_unlock(l);
    if (st == RLOCK_REDIS_ERROR && m->rcs != NULL) {
        /* Its master is gone or the slot moved. Not retried elsewhere: after a failover
         * the slot is in quarantine (or, with replica sync, the promoted replica keeps
         * the lock until its lease ends); after a reshard rlock already retried. Reading
         * the map makes this process notice a failover now. */
        pthread_mutex_lock(&m->mu);
        refresh_locked(m);
        pthread_mutex_unlock(&m->mu);
    }
    rlock_close(l);
    return st;
}
