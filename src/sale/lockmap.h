/* lockmap.h -- distributed locks (rlock) on one Redis or on a Redis Cluster.
 *
 * rlock (rlock/) talks to one Redis server. This module is what sync mode (and
 * `seckill redis lock-check`) take locks through:
 *   - one Redis: one rlock client, nothing else;
 *   - a Redis Cluster: one rlock client per master (made on first use, sharded pub/sub),
 *     and every lock sent to the master owning its key's slot. All of a lock's keys and
 *     its release channel share the hash tag {name} (rlock.h), so the slot is the one of
 *     the name. The slot map is rcl_sync's (CLUSTER SLOTS).
 *
 * Redirects and failover: rlock reports a MOVED, ASK, CLUSTERDOWN or TRYAGAIN answer, and
 * a dead master, as RLOCK_REDIS_ERROR (an acquire that failed holds nothing: rlock
 * compensates). The map is then read again and the acquire retried -- on the new owner
 * when the slot moved, after a short nap otherwise -- until the call's deadline.
 *
 * A lock must never have two holders across a failover. Replication is asynchronous: a
 * master may die after granting a lock and before its replica has it, and the promoted
 * replica would grant it again. Two guards:
 *   - replica_acks > 0 (--redis-wait-replicas): every acquire WAITs for that many replicas
 *     and is released and refused when they do not acknowledge (rlock's replica sync), so
 *     a promoted replica holds every lock its master granted;
 *   - otherwise, quarantine: when a map read shows a slot's owner replaced by another node
 *     while the old owner owns no slot any more (a failover, not a reshard, where the old
 *     owner keeps other slots and MIGRATE carries the lock keys), no lock of that slot is
 *     granted here for quarantine_ms (the locks' lease) from that moment: whatever the dead
 *     master granted has expired by then. A process that starts after a failover cannot
 *     see it; docs/redis-cluster.md says what that leaves.
 *
 * Thread-safe: any thread may call; blocking (never on an event loop). Ownership: the
 * caller owns the lkm_t and every handle lockmap_try_lock returns (give it back to
 * lockmap_unlock, which closes it). */
#ifndef SECKILL_LOCKMAP_H
#define SECKILL_LOCKMAP_H

#include <stddef.h>
#include <stdint.h>

#include "rlock.h"

typedef struct lkm lkm_t;

typedef struct lkm_opts {
    int timeout_ms;         /* deadline of one Redis call and of a whole acquire's retries */
    int replica_acks;       /* > 0: rlock replica sync (WAIT for this many replicas) */
    int64_t quarantine_ms;  /* cluster, replica_acks == 0: see the file comment */
} lkm_opts_t;

/* redis_url: redis://, unix: or redis+cluster://. NULL with a reason in err. Reads the
 * slot map of a cluster (so a cluster that does not answer is an error here). */
lkm_t *lockmap_new(const char *redis_url, const lkm_opts_t *o, char *err, size_t errlen);
void lockmap_free(lkm_t *m);                   /* all handles unlocked first; NULL is fine */

/* The rlock client of a single Redis (what the lab's steps use); NULL on a cluster. */
rlock_client_t *lockmap_single(lkm_t *m);

/* A reentrant lock (RLOCK_REENTRANT, owner: the calling thread) on name, routed to its
 * master: rlock_try_lock's contract (wait_ms 0 is one attempt), retried across redirects
 * and failovers until wait_ms + timeout_ms have passed. RLOCK_OK: *out is the held
 * handle. A slot in quarantine answers RLOCK_REDIS_ERROR at once. */
rlock_status_t lockmap_try_lock(lkm_t *m, const char *name, int64_t wait_ms, int64_t lease_ms,
                                rlock_t **out);

/* Releases and closes a handle from lockmap_try_lock (rlock_unlock's statuses). */
rlock_status_t lockmap_unlock(lkm_t *m, rlock_t *l);

/* Counters for logs and tests. */
typedef struct lkm_stats {
    uint64_t retries;       /* acquires sent again after a Redis error or redirect */
    uint64_t refreshes;     /* slot map reads */
    uint64_t quarantined;   /* acquires refused because their slot was in quarantine */
    uint64_t failovers;     /* map reads that found a master replaced (slots quarantined) */
} lkm_stats_t;
void lockmap_get_stats(lkm_t *m, lkm_stats_t *out);

#endif
