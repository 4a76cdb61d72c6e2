/* lab_sql.c -- the course's SQL-doing flash-sale steps (lab.h), written the way the
 * hm-dianping chapter writes them, so that each one fails the way the chapter says.
 *
 * Every request is a job on the pool (jobs.h), like sync mode: the course's code is
 * blocking (one servlet thread per request), and so is this, on a pool thread with its
 * own SQLite connection and, for the Redis locks, a blocking Redis connection borrowed
 * from a small pool here. The pool has LAB_JOB_THREADS threads in these modes, standing
 * in for the servlet container's, so requests overlap the way the course's do.
 *
 * The SQL calls are one autocommit statement each (lab_store.c), and orders go to
 * lab_voucher_order, the course's order table without our UNIQUE key: what a step lets
 * through shows up in the audit as oversold stock or a second order.
 *
 * Ownership: the lab_sql state (app->mode_state) is made by lab_sql_start before the
 * workers start and freed by lab_sql_stop after the pool has stopped; its Redis
 * connections are taken and returned under its mutex. */
#include "lab/lab.h"
#include "lab/lab_store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "redis/rconn.h"
#include "core/log.h"
#include "rlock.h"
#include "sale/lockmap.h"
#include "sale/order_mode.h"
#include "sale/sync_order.h"
#include "server/worker.h"
#include "core/xmem.h"

#define LOCAL_STRIPES 4096      /* local-lock: mutexes, picked by user id */
#define REDIS_POOL_MAX 64

/* The course's unlock.lua. */
static const char unlock_lua[] =
    "if (redis.call('get', KEYS[1]) == ARGV[1]) then\n"
    "    return redis.call('del', KEYS[1])\n"
    "end\n"
    "return 0\n";

typedef struct lab_sql {
    pthread_mutex_t mu;
    redisContext *idle[REDIS_POOL_MAX];
    int nidle;
    char id_prefix[40];          /* the course's ID_PREFIX: a UUID per process, then "-" */
    pthread_mutex_t stripes[LOCAL_STRIPES];
} lab_sql_t;

/* One order of a lab mode: the sync mode's job (sync_order.h), with the lab's run. */
typedef sync_order_job_t lab_job_t;

/* ------------------------------------------------------------ Redis connections */

static redisContext *redis_take(app_t *app)
{
    lab_sql_t *L = app->mode_state;
    redisContext *c = NULL;
    pthread_mutex_lock(&L->mu);
    if (L->nidle > 0)
        c = L->idle[--L->nidle];
    pthread_mutex_unlock(&L->mu);
    if (c)
        return c;
    char err[256];
    c = rconn_open_url(app->redis_url, app->cfg.redis_timeout_ms, err, sizeof err);
    if (!c)
        log_warn("lab: redis: %s", err);
    return c;
}

/* A connection that failed is closed, not pooled: its state is unknown. */
static void redis_give(app_t *app, redisContext *c, int ok)
{
    lab_sql_t *L = app->mode_state;
    if (!c)
        return;
    if (ok) {
        pthread_mutex_lock(&L->mu);
        if (L->nidle < REDIS_POOL_MAX) {
            L->idle[L->nidle++] = c;
            c = NULL;
        }
        pthread_mutex_unlock(&L->mu);
    }
    rconn_close(c);
}

/* ------------------------------------------------------------ the course's steps */

/* 1. query the voucher  2. started?  3. ended?  4. stock >= 1?  Returns -2 to go on (the
 * stock read in *stock), else the answer. */
static int check_voucher(store_t *s, lab_job_t *j, int64_t *stock)
{
    store_voucher_t v;
    int rc = store_voucher_get(s, j->o.voucher_id, &v);
    if (rc == STORE_NOTFOUND)
        return ADMIT_NO_VOUCHER;
    if (rc != STORE_OK) {
        log_warn("lab: voucher: %s", store_errmsg(s));
        return ADMIT_UNAVAILABLE;
    }
    int seckill = v.is_seckill;
    int64_t begin = v.begin_time, end = v.end_time;
    *stock = v.stock;
    store_voucher_clear(&v);
    if (!seckill)
        return ADMIT_NO_VOUCHER;
    if (begin > j->o.create_time)
        return ADMIT_NOT_STARTED;
    if (end <= j->o.create_time)
        return ADMIT_ENDED;
    if (*stock < 1)
        return ADMIT_SOLD_OUT;
    return -2;
}

/* 5. take one stock with the given guard  6. save the order. */
static int take_and_save(store_t *s, lab_job_t *j, int guard, int64_t old)
{
    int taken = 0;
    if (lab_store_take_stock(s, j->o.voucher_id, guard, old, &taken) != STORE_OK) {
        log_warn("lab: take stock: %s", store_errmsg(s));
        return ADMIT_UNAVAILABLE;
    }
    if (!taken)
        return ADMIT_SOLD_OUT;
    if (lab_store_insert(s, &j->o) != STORE_OK) {
        /* The stock is gone and the order is not: the course's code has no transaction
         * across the two either. Logged so a run can tell. */
        log_error("lab: order %lld of user %lld not saved after taking stock: %s",
                  (long long)j->o.id, (long long)j->o.user_id, store_errmsg(s));
        return ADMIT_UNAVAILABLE;
    }
    return ADMIT_OK;
}

/* The course's createVoucherOrder (run under a lock): one order per user by count(). */
static int create_voucher_order(store_t *s, lab_job_t *j)
{
    int64_t n = 0;
    if (lab_store_user_orders(s, j->o.user_id, j->o.voucher_id, &n) != STORE_OK) {
        log_warn("lab: count: %s", store_errmsg(s));
        return ADMIT_UNAVAILABLE;
    }
    if (n > 0)
        return ADMIT_DUPLICATE;
    lab_pause(j->app, LAB_P_CHECK_WRITE);
    return take_and_save(s, j, LAB_TAKE_IF_POSITIVE, 0);
}

/* naive, cas-stock-eq, cas-stock-gt0: no lock, no one-per-user check. */
static int run_unlocked(store_t *s, lab_job_t *j, int guard)
{
    int64_t stock = 0;
    int code = check_voucher(s, j, &stock);
    if (code != -2)
        return code;
    lab_pause(j->app, LAB_P_CHECK_WRITE);
    return take_and_save(s, j, guard, stock);
}

/* local-lock: synchronized (userId.toString().intern()) { createVoucherOrder } -- an
 * in-process lock, so it holds on one instance and not across two. Striped: two users
 * may share a mutex, which only makes them wait for each other. */
static int run_local_lock(store_t *s, lab_job_t *j)
{
    lab_sql_t *L = j->app->mode_state;
    pthread_mutex_t *m = &L->stripes[(uint64_t)j->o.user_id % LOCAL_STRIPES];
    pthread_mutex_lock(m);
    int code = create_voucher_order(s, j);
    lab_pause(j->app, LAB_P_UNLOCK);
    pthread_mutex_unlock(m);
    return code;
}

/* SimpleRedisLock, versions one to three. */
static int run_simple_redis_lock(store_t *s, lab_job_t *j)
{
    app_t *app = j->app;
    lab_sql_t *L = app->mode_state;
    int step = lab_step(app->cfg.mode);
    char key[64], val[80], err[256];
    snprintf(key, sizeof key, "%s%lld", KEY_LAB_LOCK_PREFIX, (long long)j->o.user_id);
    /* Version one stores the thread id; two and three prefix it with the process UUID. */
    snprintf(val, sizeof val, "%s%ld", step == LAB_SETNX ? "" : L->id_prefix,
             (long)gettid());
    redisContext *c = redis_take(app);
    if (!c)
        return ADMIT_UNAVAILABLE;
    char lease[24];
    snprintf(lease, sizeof lease, "%d", app->cfg.lab_lease_ms);
    const char *set[] = {"SET", key, val, "NX", "PX", lease};
    redisReply *rep = rconn_cmd(c, err, sizeof err, 6, set, NULL);
    if (!rep) {
        log_warn("lab: SET NX: %s", err);
        redis_give(app, c, 0);
        return ADMIT_UNAVAILABLE;
    }
    int locked = rep->type == REDIS_REPLY_STATUS;
    freeReplyObject(rep);
    if (!locked) {
        redis_give(app, c, 1);
        return ADMIT_DUPLICATE;   /* the course: "不允许重复下单！" */
    }
    int code = create_voucher_order(s, j);
    lab_pause(app, LAB_P_UNLOCK);
    int ok = 1;
    err[0] = '\0';
    if (step == LAB_SETNX) {
        const char *del[] = {"DEL", key};
        rep = rconn_cmd(c, err, sizeof err, 2, del, NULL);
    } else if (step == LAB_SETNX_OWNER) {
        const char *get[] = {"GET", key};
        rep = rconn_cmd(c, err, sizeof err, 2, get, NULL);
        int mine = rep && rep->type == REDIS_REPLY_STRING && strcmp(rep->str, val) == 0;
        int got = rep != NULL;
        if (rep)
            freeReplyObject(rep);
        rep = NULL;
        if (mine) {
            lab_pause(app, LAB_P_GET_DEL);   /* the course's "Full GC" after the compare */
            const char *del[] = {"DEL", key};
            rep = rconn_cmd(c, err, sizeof err, 2, del, NULL);
        } else if (!got) {
            ok = 0;
        }
    } else {
        /* The same time is spent here as in setnx-owner, but the compare and the DEL are
         * one script: nothing can come between them. */
        lab_pause(app, LAB_P_GET_DEL);
        const char *ev[] = {"EVAL", unlock_lua, "1", key, val};
        rep = rconn_cmd(c, err, sizeof err, 5, ev, NULL);
    }
    if (rep) {
        freeReplyObject(rep);
    } else if (err[0]) {
        ok = 0;
        log_warn("lab: unlock of %s: %s (the lock expires after its lease)", key, err);
    }
    redis_give(app, c, ok);
    return code;
}

/* reentrant: Redisson's RLock as the course uses it -- tryLock() with no wait and the
 * watchdog lease, so a slow order keeps its lock. */
static int run_reentrant(store_t *s, lab_job_t *j)
{
    char name[48];
    snprintf(name, sizeof name, "order:%lld", (long long)j->o.user_id);
    rlock_t *l = NULL;
    if (rlock_open(lockmap_single(j->app->lockmap), name, RLOCK_REENTRANT, NULL, 0, &l) != RLOCK_OK)
        return ADMIT_UNAVAILABLE;
    int code;
    rlock_status_t st = rlock_try_lock(l, 0, RLOCK_WATCHDOG);
    if (st == RLOCK_TIMEOUT) {
        code = ADMIT_DUPLICATE;
    } else if (st == RLOCK_OK) {
        code = create_voucher_order(s, j);
        lab_pause(j->app, LAB_P_UNLOCK);
        st = rlock_unlock(l);
        if (st != RLOCK_OK)
            log_error("lab: reentrant unlock of user %lld: %s", (long long)j->o.user_id,
                      rlock_status_str(st));
    } else {
        log_warn("lab: lock of user %lld: %s", (long long)j->o.user_id, rlock_status_str(st));
        code = ADMIT_UNAVAILABLE;
    }
    rlock_close(l);
    return code;
}

static int run_locked(store_t *s, lab_job_t *j)
{
    int64_t stock = 0;
    int code = check_voucher(s, j, &stock);   /* outside the lock, as in the course */
    if (code != -2)
        return code;
    switch (lab_step(j->app->cfg.mode)) {
    case LAB_LOCAL_LOCK: return run_local_lock(s, j);
    case LAB_REENTRANT: return run_reentrant(s, j);
    default: return run_simple_redis_lock(s, j);
    }
}

/* ------------------------------------------------------------ jobs */

static int lab_run(store_t *s, lab_job_t *j)
{
    switch (lab_step(j->app->cfg.mode)) {
    case LAB_NAIVE: return run_unlocked(s, j, LAB_TAKE_ANY);
    case LAB_CAS_EQ: return run_unlocked(s, j, LAB_TAKE_IF_EQ);
    case LAB_CAS_GT0: return run_unlocked(s, j, LAB_TAKE_IF_POSITIVE);
    default: return run_locked(s, j);
    }
}

void lab_sql_order(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb)
{
    sync_order_submit(r, voucher_id, user_id, cb, lab_run);
}

/* ------------------------------------------------------------ lifetime */

int lab_sql_start(struct app *app, char *err, size_t errlen)
{
    /* The lab's order table, made here: production databases never have it. */
    store_t *s = store_open(app->db_url, app->cfg.sql_timeout_ms, err, errlen);
    if (!s)
        return -1;
    int rc = lab_store_ensure(s);
    if (rc != STORE_OK)
        snprintf(err, errlen, "%s mode: %s", order_mode_name(app->cfg.mode), store_errmsg(s));
    store_close(s);
    if (rc != STORE_OK)
        return -1;
    lab_sql_t *L = xcalloc(1, sizeof *L);
    pthread_mutex_init(&L->mu, NULL);
    for (int i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_init(&L->stripes[i], NULL);
    unsigned char u[16];
    if (getrandom(u, sizeof u, 0) != (ssize_t)sizeof u)
        memset(u, 0, sizeof u);   /* only the lab's lock values; a clash shows as a dup */
    for (int i = 0; i < 16; i++)
        snprintf(L->id_prefix + 2 * i, 3, "%02x", u[i]);
    L->id_prefix[32] = '-';
    L->id_prefix[33] = '\0';
    app->mode_state = L;
    /* reentrant uses sync mode's lock client; server.c frees it with sync_order_free. */
    if (lab_step(app->cfg.mode) == LAB_REENTRANT && sync_order_init(app, err, errlen) < 0)
        return -1;
    log_warn("%s mode: the course's step, run to show how it fails (docs/lab.md); "
             "orders go to lab_voucher_order", order_mode_name(app->cfg.mode));
    return 0;
}

void lab_sql_stop(struct app *app)
{
    lab_sql_t *L = app->mode_state;
    if (!L)
        return;
    for (int i = 0; i < L->nidle; i++)
        rconn_close(L->idle[i]);
    for (int i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_destroy(&L->stripes[i]);
    pthread_mutex_destroy(&L->mu);
    free(L);
    app->mode_state = NULL;
}
