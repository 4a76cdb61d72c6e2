/*
 * rlock.h -- distributed locks on Redis for C programs.
 *
 * A library of its own (no service code): simple, reentrant, fair (FIFO) and
 * read-write locks on one Redis server, a multi-lock over several independent
 * servers, a watchdog that renews locks taken without a lease, a lost-lock
 * signal, and fencing tokens with storage-side check helpers.  Semantics
 * follow Redisson's RLock family (see docs/rlock.md for the differences).
 *
 * ---------------------------------------------------------------------------
 * Model
 * ---------------------------------------------------------------------------
 * rlock_client_t   One per Redis server and process.  Owns three connections:
 *                  a command connection (guarded by an internal mutex, so one
 *                  client may be shared by any number of threads), a pub/sub
 *                  connection read by a background thread that wakes local
 *                  waiters, and a renewal connection used by the watchdog
 *                  thread.  Connections are made lazily and re-made after an
 *                  error; creating a client never talks to Redis.
 *                  Clients are not fork-safe: create them after fork().
 *
 * rlock_t          One owner's view of one named lock of one kind.  The owner
 *                  is "<client id>:<owner>" where the client id is 16 random
 *                  bytes in hex and <owner> is the string given to
 *                  rlock_open(), or "t<thread id>" of the opening thread when
 *                  NULL.  Two handles with the same client, owner and name are
 *                  the same owner to Redis (reentrancy is counted in Redis).
 *                  A handle is used by one thread at a time (it is the owner's
 *                  handle, not a shared object); rlock_is_valid(),
 *                  rlock_fence() and rlock_name() may be called from any
 *                  thread at any time.  Event-loop and coroutine code passes
 *                  an explicit owner so that ownership is not tied to a thread.
 *
 * Keys (all of one lock name N share the hash tag {N}, so they live in one
 * cluster slot; lock kinds use separate keys, a name used as a simple lock and
 * as a reentrant lock are two different locks):
 *     rlock:{N}:fence     fencing counter (INCR, no TTL) shared by all kinds
 *     rlock:{N}           reentrant lock (hash owner -> hold count)
 *     rlock:{N}:s         simple lock (string = owner token)
 *     rlock:{N}:f, :f:q, :f:t        fair lock hash, wait queue, waiter deadlines
 *     rlock:{N}:rw, :rw:r, :rw:w     read-write lock hash, reader deadlines,
 *                                    waiting writers (writer preference)
 *     <lock key>:ch       release notification channel
 * Names must be non-empty, at most 512 bytes and must not contain '{' or '}'.
 *
 * ---------------------------------------------------------------------------
 * Leases, the watchdog and validity
 * ---------------------------------------------------------------------------
 * lease_ms > 0      the lock expires lease_ms after the (last) acquisition;
 *                   nothing renews it.
 * RLOCK_WATCHDOG    the lock gets the client's watchdog lease (default 30 s)
 *                   and the client's watchdog thread renews every held
 *                   watchdog lock every lease/3 (one timer, one batched script
 *                   per 100 locks).  A failed renewal is retried quickly while
 *                   the lease lasts.
 * Each held lock has a local deadline on CLOCK_MONOTONIC: the start of the
 * acquiring (or renewing) request + lease - drift (drift = lease * drift_factor
 * + 2 ms).  rlock_is_valid() is true only while the lock is held, was not
 * reported lost and that deadline has not passed.  When the watchdog learns
 * the lock is gone (renewal says "not owner") or its deadline passes without
 * a successful renewal, the handle is marked lost and its lost callback runs.
 * All budgets, sleeps and deadlines use CLOCK_MONOTONIC; wall-clock jumps on
 * the client do not affect them.
 *
 * ---------------------------------------------------------------------------
 * Waiting
 * ---------------------------------------------------------------------------
 * wait_ms == 0 is a single attempt; wait_ms > 0 is a budget; RLOCK_WAIT_FOREVER
 * waits until acquired (Redis errors: see rlock_try_lock).  A waiter
 * subscribes (through the client's one pub/sub connection, channels
 * ref-counted, unsubscribed a while after the last local waiter leaves),
 * re-attempts after the subscription is
 * confirmed, then sleeps until a release message or min(holder's PTTL,
 * remaining budget) -- never busy-polls and cannot miss a release.  A release
 * wakes one local waiter per process (a read-write release wakes all; a fair
 * release wakes only the queue head).  After the budget ends the acquire is
 * attempted once more, so try_lock returns within wait_ms + one round trip.
 *
 * ---------------------------------------------------------------------------
 * Errors and ownership of memory
 * ---------------------------------------------------------------------------
 * Every call that talks to Redis returns rlock_status_t.  Out-parameters are
 * written only on RLOCK_OK.  Strings passed in are copied; strings returned
 * (rlock_name, rlock_client_id, rlock_status_str) belong to the library and
 * live as long as their object.  Destroy functions accept NULL.  Memory
 * exhaustion aborts the process (like zmalloc/h2o_mem_alloc).
 *
 * Cancellation safety: an acquire that fails, times out or loses its reply
 * never leaves a lock renewed, and the library sends a compensating release
 * ("undo": drop our hold only if it is exactly the one we tried to add); if
 * even that fails the key expires after its own lease.  A timed-out fair
 * waiter removes itself from the queue.
 *
 * Unlock is idempotent under the library's own retry: the script gets the
 * expected hold count, so a replayed unlock is a no-op (no extra key); and a
 * failed connection is fenced off (CLIENT KILL ID, same server run_id only)
 * before the retry, so the original cannot run after it.
 */
#ifndef RLOCK_H
#define RLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

typedef enum rlock_status {
    RLOCK_OK = 0,        /* done / acquired / released */
    RLOCK_NOT_OWNER,     /* unlock of a lock this owner does not hold (never held,
                            or already fully released); nothing was changed */
    RLOCK_LOST,          /* this owner held the lock but it expired or was taken:
                            the critical section may have overlapped another
                            holder; the other holder's lock was not touched */
    RLOCK_TIMEOUT,       /* the wait budget ended without acquiring */
    RLOCK_REDIS_ERROR,   /* connection, timeout or protocol error; for acquires
                            the lock is not held (compensated, see above) */
    RLOCK_EINVAL         /* bad argument or misuse (e.g. re-locking a simple lock
                            this owner already holds, unlocking the wrong kind) */
} rlock_status_t;

/* Static English name of a status ("OK", "NOT_OWNER", ...). */
const char *rlock_status_str(rlock_status_t st);

#define RLOCK_WATCHDOG      (-1)  /* lease_ms: renew until unlocked */
#define RLOCK_WAIT_FOREVER  (-1)  /* wait_ms: wait until acquired */

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct rlock_client rlock_client_t;

typedef struct rlock_config {
    const char *url;               /* "redis://[:password@]host[:port][/db]" or
                                      "unix:///path/to/redis.sock";
                                      when NULL, host/port/unix_path/password/db
                                      are used */
    const char *host;              /* default "127.0.0.1" */
    int port;                      /* default 6379 */
    const char *unix_path;         /* connect through this Unix socket instead
                                      of host/port; default NULL (TCP) */
    const char *password;          /* default NULL (no AUTH) */
    int db;                        /* default 0 */
    int64_t connect_timeout_ms;    /* default 1000 */
    int64_t command_timeout_ms;    /* per-call deadline on every connection;
                                      default 2000 */
    int64_t watchdog_lease_ms;     /* lease of RLOCK_WATCHDOG locks; renewed
                                      every lease/3; default 30000, min 30 */
    int64_t fair_waiter_ttl_ms;    /* a fair-queue waiter that does not refresh
                                      its entry for this long is dropped;
                                      waiters refresh every ttl/3; default 5000 */
    int64_t unsubscribe_delay_ms;  /* keep an unused channel subscribed this long
                                      (avoids churn on hot locks); default 2000 */
    double drift_factor;           /* validity = lease*(1-drift_factor) - 2 ms;
                                      default 0.01 */
    int replica_acks;              /* replica sync: > 0 pipelines "WAIT
                                      replica_acks replica_timeout_ms" behind
                                      every acquire and unlock (same round
                                      trip).  An acquire acknowledged by fewer
                                      replicas is released again and reported
                                      RLOCK_REDIS_ERROR (fail-and-release); an
                                      unlock is reported as it happened on the
                                      master.  Renewals do not wait.  Default 0
                                      (off).  Requires command_timeout_ms >
                                      replica_timeout_ms. */
    int64_t replica_timeout_ms;    /* WAIT timeout; default 1000 */
    bool sharded_pubsub;           /* release notifications with SPUBLISH and
                                      SSUBSCRIBE (Redis >= 7.0) instead of
                                      PUBLISH/SUBSCRIBE: on a Redis Cluster they
                                      stay on the lock's shard (channel and keys
                                      share the tag {N}) instead of going to
                                      every node.  Default false. */
} rlock_config_t;

/* Fill *cfg with the defaults above. */
void rlock_config_init(rlock_config_t *cfg);

/*
 * Create a client.  Copies everything from *cfg (NULL = defaults) and starts
 * the pub/sub and watchdog threads; connects lazily.  Returns RLOCK_EINVAL for
 * a malformed URL or out-of-range values, else RLOCK_OK and *out.
 */
rlock_status_t rlock_client_new(const rlock_config_t *cfg, rlock_client_t **out);

/*
 * Stop the threads and close the connections.  All handles of the client
 * must have been closed first (held locks are not released: they expire
 * after their lease).  Must not be called from a lost callback.  NULL is a
 * no-op.
 */
void rlock_client_free(rlock_client_t *c);

/* The client's 32-hex-digit random id (prefix of every owner it creates). */
const char *rlock_client_id(const rlock_client_t *c);

/* Counters, for metrics and tests (monotonic since client creation). */
typedef struct rlock_stats {
    uint64_t commands;        /* requests sent on the command connection
                                 (= round trips; excludes connection setup) */
    uint64_t acquired;        /* successful acquisitions (incl. reentrant) */
    uint64_t released;        /* successful unlocks */
    uint64_t unlock_replays;  /* retried unlocks whose first send had applied
                                 (detected, not applied twice) */
    uint64_t timeouts;        /* acquires that ended RLOCK_TIMEOUT */
    uint64_t lost;            /* locks reported lost (unlock or watchdog) */
    uint64_t renewals;        /* renewal scripts sent by the watchdog */
    uint64_t renew_failures;  /* renewal scripts that failed (Redis error) */
    uint64_t sync_failures;   /* acquires released because too few replicas
                                 acknowledged them (replica_acks) */
    uint64_t wakeups;         /* waiters woken by a release message */
    uint64_t subscribes;      /* SUBSCRIBE commands sent */
    uint64_t unsubscribes;    /* UNSUBSCRIBE commands sent */
    uint64_t subscribed_now;  /* channels currently subscribed or pending */
    uint64_t watched_now;     /* locks currently renewed by the watchdog */
} rlock_stats_t;

void rlock_client_stats(rlock_client_t *c, rlock_stats_t *out);

/* ------------------------------------------------------------------------ */
/* Locks                                                                     */
/* ------------------------------------------------------------------------ */

typedef enum rlock_kind {
    RLOCK_SIMPLE,     /* SET key token NX PX lease; compare-and-delete unlock;
                         not reentrant (re-lock by the holder = RLOCK_EINVAL) */
    RLOCK_REENTRANT,  /* Redisson RLock: hash owner -> hold count */
    RLOCK_FAIR,       /* FIFO: a server-side queue, server TIME, heartbeats */
    RLOCK_READ,       /* read side of a read-write lock (shared) */
    RLOCK_WRITE       /* write side of a read-write lock (exclusive) */
} rlock_kind_t;

/* Flags for rlock_open(). */
#define RLOCK_F_FENCED        0x1u  /* RLOCK_SIMPLE only: take a fencing token
                                       (acquire becomes a script); the other
                                       kinds always take one */
#define RLOCK_F_WRITER_PREF   0x2u  /* RLOCK_READ/RLOCK_WRITE: a waiting writer
                                       blocks new readers (no writer starvation).
                                       Must be set on both sides to be useful. */

typedef struct rlock rlock_t;

/*
 * Open a handle.  name and owner are copied; owner NULL = "t<gettid()>" of
 * the calling thread.  No Redis traffic.  RLOCK_EINVAL on a bad name.
 */
rlock_status_t rlock_open(rlock_client_t *c, const char *name, rlock_kind_t kind,
                          const char *owner, unsigned flags, rlock_t **out);

/*
 * Close a handle.  If it still holds the lock, renewal stops (the lock then
 * expires after its lease; call rlock_unlock first to release).  Waits for a
 * lost callback of this handle that is running on another thread.  NULL is
 * a no-op.
 */
void rlock_close(rlock_t *l);

/*
 * Acquire, waiting at most wait_ms (0 = one attempt, RLOCK_WAIT_FOREVER).
 * lease_ms > 0 or RLOCK_WATCHDOG.  Reentrant kinds count holds; a reentrant
 * acquire resets the TTL to the new lease (like Redisson).
 * Returns OK, TIMEOUT, REDIS_ERROR, or EINVAL.
 * Redis errors: if the first attempt fails the call returns REDIS_ERROR at
 * once (Redis down or misconfigured); an error while already waiting is
 * retried with back-off (20 ms .. 500 ms) within the budget, so waiters ride
 * out a restart, and REDIS_ERROR is returned only if the budget ends on an
 * error (with RLOCK_WAIT_FOREVER the call keeps trying).  A replica-sync
 * shortfall (replica_acks) is retried within the budget even on the first
 * attempt: Redis is up, a replica is slow.
 */
rlock_status_t rlock_try_lock(rlock_t *l, int64_t wait_ms, int64_t lease_ms);

/* rlock_try_lock(l, RLOCK_WAIT_FOREVER, lease_ms). */
rlock_status_t rlock_lock(rlock_t *l, int64_t lease_ms);

/*
 * Release one hold.  OK (released or hold count decremented), NOT_OWNER (this
 * handle holds nothing), LOST (it held the lock but Redis no longer has the
 * hold: expired or taken -- nothing of the other holder is touched), or
 * REDIS_ERROR (outcome unknown after one retry; renewal has stopped, so the
 * lock is released at the latest when its lease ends).
 */
rlock_status_t rlock_unlock(rlock_t *l);

/*
 * Delete the lock whoever holds it and wake waiters (RLOCK_READ/RLOCK_WRITE:
 * clears only that side).  *was_locked (may be NULL) tells whether anything
 * was deleted.
 */
rlock_status_t rlock_force_unlock(rlock_t *l, bool *was_locked);

/* Queries (one command each, answered by Redis, not by local state). */
rlock_status_t rlock_is_locked(rlock_t *l, bool *out);     /* by anyone */
rlock_status_t rlock_is_held(rlock_t *l, bool *out);       /* by this owner */
rlock_status_t rlock_hold_count(rlock_t *l, int64_t *out); /* this owner's */
/* PTTL in ms of the lock key; -2 when not locked, -1 when it has no TTL. */
rlock_status_t rlock_remaining_ttl(rlock_t *l, int64_t *out_ms);

/* Local, no Redis traffic; any thread. */
bool rlock_is_valid(const rlock_t *l);
/* ms left before the local validity deadline (0 when not valid). */
int64_t rlock_valid_for_ms(const rlock_t *l);
/* Fencing token of the current hold (0 when not held / simple lock without
 * RLOCK_F_FENCED).  Strictly increasing per lock name across all kinds and
 * owners for every fresh (non-reentrant) acquisition. */
uint64_t rlock_fence(const rlock_t *l);
/* Hold count as this handle last saw it (no Redis traffic). */
int64_t rlock_local_holds(const rlock_t *l);
const char *rlock_name(const rlock_t *l);
/* Full owner string "<client id>:<owner>" (also the Redis hash field). */
const char *rlock_owner(const rlock_t *l);

/*
 * Lost-lock callback.  Runs on the client's watchdog thread, once per lost
 * hold, when a watchdog renewal finds the lock gone or its validity deadline
 * passes without a successful renewal (only RLOCK_WATCHDOG holds are
 * watched; a lease-mode hold just becomes invalid at its deadline).  Keep it
 * short; it may call rlock_is_valid/rlock_fence/rlock_unlock on the handle,
 * but not rlock_close or rlock_client_free.
 */
typedef enum rlock_lost_reason {
    RLOCK_LOST_NOT_OWNER,  /* renewal found the lock gone or owned by another */
    RLOCK_LOST_EXPIRED     /* validity deadline passed without a renewal */
} rlock_lost_reason_t;

typedef void (*rlock_lost_cb)(rlock_t *l, rlock_lost_reason_t why, void *arg);
void rlock_set_lost_cb(rlock_t *l, rlock_lost_cb cb, void *arg);

/* ------------------------------------------------------------------------ */
/* Multi-lock over independent Redis servers                                 */
/* ------------------------------------------------------------------------ */

typedef enum rlock_multi_policy {
    RLOCK_MULTI_ALL,       /* every member (Redisson MultiLock) */
    RLOCK_MULTI_MAJORITY   /* n/2+1 members within the validity (Redlock) */
} rlock_multi_policy_t;

typedef struct rlock_multi rlock_multi_t;

/*
 * Group n >= 1 handles (usually one per client/server; RLOCK_REENTRANT or
 * RLOCK_SIMPLE).  The handles stay owned by the caller and must outlive the
 * multi-lock; the array is copied.  Members are acquired in a fixed global
 * order (by server address, then name), so two multi-locks over the same
 * members cannot deadlock.
 */
rlock_status_t rlock_multi_new(rlock_t *const *locks, size_t n,
                               rlock_multi_policy_t policy, rlock_multi_t **out);
void rlock_multi_free(rlock_multi_t *m);

/*
 * All-or-nothing acquisition within wait_ms.  Each round tries every member;
 * the round succeeds when the policy is met AND the time spent acquiring is
 * below the lease minus drift (lease mode; for RLOCK_WATCHDOG the client's
 * watchdog lease).  A failed round releases what it took and, while budget
 * remains, retries after a short random delay (ALL waits on the contended
 * member instead).  On OK the members in rlock_multi_member_held() are held;
 * on any other status none are.  lease_ms must be RLOCK_WATCHDOG or greater
 * than wait_ms (so the budget fits in the lease), else RLOCK_EINVAL.
 * Returns OK, TIMEOUT (contention), REDIS_ERROR (the policy could not be met
 * because of errors), EINVAL.
 */
rlock_status_t rlock_multi_try_lock(rlock_multi_t *m, int64_t wait_ms, int64_t lease_ms);

/* Release the held members.  OK, LOST (some member was lost), REDIS_ERROR,
 * NOT_OWNER (nothing held). */
rlock_status_t rlock_multi_unlock(rlock_multi_t *m);

/* Is member i (index in the array given to rlock_multi_new) held by this
 * multi-lock's current acquisition? */
bool rlock_multi_member_held(const rlock_multi_t *m, size_t i);
size_t rlock_multi_held_count(const rlock_multi_t *m);
/* Held and still valid: enough members valid for the policy. */
bool rlock_multi_is_valid(const rlock_multi_t *m);

/* ------------------------------------------------------------------------ */
/* Fencing: storage-side check helpers                                       */
/* ------------------------------------------------------------------------ */

/*
 * Lua compare script for a resource kept in Redis.
 *   KEYS[1] = data key, KEYS[2] = the resource's "highest token seen" key
 *   ARGV[1] = fencing token, ARGV[2] = value to SET at KEYS[1]
 * Returns 1 and writes both keys when token >= highest seen (equality allowed:
 * one holder may write several times), else 0 and writes nothing.
 */
extern const char rlock_fence_lua[];

/*
 * SQL predicate for a row that stores the highest token that wrote it in
 * column `col`: writes "<col> <= <token>" into buf (NUL-terminated).  Use as
 *   UPDATE t SET ..., <col> = <token> WHERE <key> AND <predicate>
 * and treat 0 rows updated as "stale holder, rejected".  Returns the length
 * written, or -1 when buf is too small or col is not an identifier.
 */
int rlock_fence_sql_predicate(char *buf, size_t len, const char *col, uint64_t token);

/*
 * Run rlock_fence_lua on the client's command connection (the resource lives
 * on the same server).  *accepted (may be NULL) = whether the write happened.
 */
rlock_status_t rlock_fenced_set(rlock_client_t *c, const char *data_key,
                                const char *fence_key, uint64_t token,
                                const char *value, bool *accepted);

/* ------------------------------------------------------------------------ */
/* Event loops (libevent)                                                    */
/* ------------------------------------------------------------------------ */

/*
 * The blocking calls above must not run on an event-loop thread.  The async
 * flavour below runs try_lock/unlock on a library worker thread and delivers
 * the result on the loop thread of `base` (via an event; libevent needs no
 * evthread setup).  The callback runs exactly once, on the loop thread,
 * unless the start call fails (then never).  The handle must have an
 * explicit owner (rlock_open owner != NULL) and must not be used by anything
 * else until the callback ran.  Cancelling a pending try_lock makes it stop
 * waiting: the callback still runs once, with RLOCK_TIMEOUT, and a lock the
 * worker acquired before it saw the cancel is released first, never left
 * held or renewed.  Only if the result was already queued for the loop does
 * the callback report it as it was (RLOCK_OK: you hold the lock).
 */
struct event_base;
typedef struct rlock_async rlock_async_t;   /* one per event_base */
typedef struct rlock_async_op rlock_async_op_t;
typedef void (*rlock_async_cb)(rlock_t *l, rlock_status_t st, void *arg);

rlock_status_t rlock_async_new(struct event_base *base, rlock_async_t **out);
/* All operations must have completed (callbacks ran).  NULL is a no-op. */
void rlock_async_free(rlock_async_t *a);

/* Start an acquire.  *op (may be NULL) can be passed to rlock_async_cancel
 * until the callback runs. */
rlock_status_t rlock_async_try_lock(rlock_async_t *a, rlock_t *l, int64_t wait_ms,
                                    int64_t lease_ms, rlock_async_cb cb, void *arg,
                                    rlock_async_op_t **op);
rlock_status_t rlock_async_unlock(rlock_async_t *a, rlock_t *l, rlock_async_cb cb,
                                  void *arg);
/* Ask a pending try_lock to stop; call on the loop thread before its
 * callback ran. */
void rlock_async_cancel(rlock_async_op_t *op);

#ifdef __cplusplus
}
#endif

#endif /* RLOCK_H */
