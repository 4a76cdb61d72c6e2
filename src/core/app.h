/* app.h -- process-wide state of `seckill serve`, shared read-mostly by all threads.
 *
 * Built once in server.c before any thread starts; freed after all have stopped. Fields
 * that change while running are atomics and say so. */
#ifndef SECKILL_APP_H
#define SECKILL_APP_H

#include <stdatomic.h>
#include <stdint.h>
#include "core/config.h"

struct worker;
struct jobs;
struct writer;
struct metrics;
struct redis_child;
struct ordq;
struct rlock_client;
struct rl_shared;
struct clientip_set;
struct token_signer;
struct connlimit;
struct rebuild_watch;
struct pow;

typedef struct app {
    config_t cfg;                   /* read-only after start */
    char redis_url[512];            /* effective Redis URL (the embedded child's socket, or cfg) */
    char db_url[1024];              /* effective SQL URL */
    char admin_token[128];          /* effective admin token ("" = admin endpoints refused) */
    char name[128];                 /* effective instance name (stream consumer name) */
    uint32_t instance_slot;         /* 0..1023, leased from Redis at start (orderid.h) */

    int nworkers;
    struct worker **workers;
    struct jobs *jobs;              /* blocking SQL calls off the loops (jobs.h) */
    struct writer *writer;          /* the order writer thread (writer.h) */
    struct ordq *ordq;              /* queue mode only: in-process order queue (ordq.h) */
    struct lkm *lockmap;            /* sync mode: locks on one Redis or a cluster (lockmap.h) */
    void *mode_state;               /* the order mode's own, made by its row's start and
                                       freed by its stop (sale/order_mode.h); else NULL */
    struct connlimit *connlimit;    /* connections per client address, or NULL (connlimit.h) */
    struct metrics *metrics;        /* process-wide counters (metrics.h) */
    struct redis_child *child;      /* embedded redis-server, or NULL */
    struct rl_shared *rl;           /* per-instance rate-limit tables (ratelimit.h) */
    int log_login_codes;            /* codes go to the log: --log-login-codes or embedded */
    struct clientip_set *trusted;   /* --trusted-proxy, parsed (clientip.h); NULL = none */
    struct token_signer *signer;      /* signed tokens' key (token.h); NULL = opaque tokens only */
    struct rebuild_watch *rebuild;  /* republishes vouchers Redis lost (rebuild_watch.h) */
    struct pow *pow;                /* the bot gate's key and join rates (room/pow.h) */

    atomic_int sql_up;              /* last SQL call (writer or jobs) succeeded: 1/0 */
    atomic_int stopping;            /* set once on SIGINT/SIGTERM */
} app_t;

#endif
