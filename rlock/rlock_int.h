/*
 * rlock_int.h -- private to the rlock sources: the client and handle structures,
 * script table, connection helpers and the acquire engine shared by the
 * multi-lock and the async flavour.
 *
 * Locking: c->cmd_mu guards the command connection (held only for one
 * request/reply).  c->mu guards everything shared with the two background
 * threads: subscriptions and waiters, the watchdog list, each handle's
 * validity fields (deadline_us, lost, registered, refs, closed) and stats.
 * c->cb_mu is held by the watchdog thread while it runs lost callbacks; the
 * lock order is cb_mu -> mu, and cmd_mu is never taken while holding mu.
 */
#ifndef RLOCK_INT_H
#define RLOCK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <hiredis/hiredis.h>

#include "rlock.h"

enum {
    RLOCK__S_ACQ,
    RLOCK__S_REL,
    RLOCK__S_FORCE,
    RLOCK__S_SACQ_FENCED,
    RLOCK__S_SREL,
    RLOCK__S_CAD,
    RLOCK__S_FACQ,
    RLOCK__S_FREL,
    RLOCK__S_FCANCEL,
    RLOCK__S_RWACQ,
    RLOCK__S_RWREL,
    RLOCK__S_RWCANCEL,
    RLOCK__S_RWFORCE,
    RLOCK__S_RWINFO,
    RLOCK__S_RENEW,
    RLOCK__S_FENCE_SET,
    RLOCK__NSCRIPTS
};

extern const char *const rlock__scripts[RLOCK__NSCRIPTS];

/*
 * One blocking connection.  When a request on it fails (timeout, reset)
 * the request may still be queued at the server and run later -- after a
 * retry or an undo sent on a new connection.  So the connection is
 * remembered as "dead" and, before anything else is sent on the next
 * connection to the same server process (same run_id), it is fenced off
 * with CLIENT KILL ID: Redis is single-threaded, so the old request then
 * has either already run (the scripts' expected-count check detects that)
 * or never will.
 */
#define RLOCK__MAX_DEAD 4
typedef struct rlock__conn {
    redisContext *ctx;
    long long id;                          /* CLIENT ID of ctx */
    char run_id[41];                       /* server run_id when ctx connected */
    int ndead;
    long long dead_id[RLOCK__MAX_DEAD];    /* failed connections to fence off */
    char dead_run_id[RLOCK__MAX_DEAD][41];
} rlock__conn_t;

struct rlock__sub;
struct rlock__waiter;

#define RLOCK__SUB_BUCKETS 1024

struct rlock_client {
    rlock_config_t cfg;          /* copy; string fields point at ours below */
    char *host, *password, *unix_path;
    char id[33];

    pthread_mutex_t cmd_mu;      /* guards cmd */
    rlock__conn_t cmd;

    /* SHA1s of the scripts, learnt from SCRIPT LOAD on first use (or after
     * NOSCRIPT) and shared by all connections: a new connection costs no
     * extra round trips. */
    pthread_mutex_t sha_mu;
    char sha[RLOCK__NSCRIPTS][41];
    /* The scripts' text for this client: rlock__scripts, or (sharded_pubsub) copies
     * that release with SPUBLISH. */
    const char *script_text[RLOCK__NSCRIPTS];
    char *script_own[RLOCK__NSCRIPTS];     /* the copies, freed with the client */

    pthread_mutex_t mu;          /* see the file comment */
    bool stop;

    /* pub/sub thread */
    pthread_t sub_thr;
    int evfd;                    /* eventfd that wakes the pub/sub thread */
    struct rlock__sub *subs[RLOCK__SUB_BUCKETS];
    struct rlock__sub *want_head, *want_tail;   /* need SUBSCRIBE */
    struct rlock__sub *idle_head, *idle_tail;   /* no waiters, to unsubscribe */
    bool sub_up;                 /* pub/sub connection established */

    /* watchdog thread */
    pthread_t wd_thr;
    pthread_cond_t wd_cond;
    pthread_mutex_t cb_mu;
    rlock__conn_t renew;         /* only the watchdog thread uses it */
    struct rlock *wd_head;       /* registered (watchdog-mode) holds */
    size_t wd_count;
    int64_t wd_next_us;
    uint64_t wd_gen;

    rlock_stats_t stats;
    _Atomic uint64_t ncommands;  /* stats.commands, counted without c->mu */
};

struct rlock {
    rlock_client_t *c;
    rlock_kind_t kind;
    unsigned flags;
    char *name;
    char *owner;                 /* "<client id>:<owner>" */
    char *key, *key2, *key3;     /* lock key; fair queue/deadlines; rw R/W */
    char *fence_key;
    char *channel;

    /* used by the owning thread only */
    int64_t holds;
    int64_t lease_ms;            /* lease of the current hold (watchdog lease
                                    for watchdog holds) */
    bool watchdog;               /* current hold is renewed */

    _Atomic uint64_t fence;

    /* guarded by c->mu */
    int64_t deadline_us;         /* local validity deadline (monotonic) */
    bool held;                   /* holds > 0 as far as validity goes */
    bool lost;
    bool registered;
    uint64_t gen;                /* watchdog registration generation */
    struct rlock *wd_prev, *wd_next;
    int refs;                    /* 1 for the user + in-flight renewals */
    bool closed;
    rlock_lost_cb cb;
    void *cb_arg;
    struct rlock__waiter *waiter;/* current waiter, for cancellation */
    atomic_int cancel;           /* async cancellation request */
};

/* monotonic clock in microseconds */
int64_t rlock__now_us(void);

/* Run a script on a connection (connecting / loading scripts as needed).
 * *out is the reply (caller frees) when RLOCK_OK.  Error replies are
 * RLOCK_REDIS_ERROR. */
rlock_status_t rlock__conn_eval(rlock_client_t *c, rlock__conn_t *cn, int script,
                                int nkeys, const char **keys, int nargs,
                                const char **args, redisReply **out);
void rlock__conn_close(rlock__conn_t *cn);

/* Acquire engine with an optional cancel flag (l->cancel). */
rlock_status_t rlock__acquire(rlock_t *l, int64_t wait_ms, int64_t lease_ms);

/* Address of the client's server, "host:port/db", for ordering. */
void rlock__client_addr(const rlock_client_t *c, char *buf, size_t len);

/* Wake l's current waiter (if any) so it notices l->cancel. */
void rlock__wake(rlock_t *l);

void *rlock__xmalloc(size_t n);
void *rlock__xcalloc(size_t n, size_t sz);
char *rlock__xstrdup(const char *s);
char *rlock__xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* RLOCK_INT_H */
