/* sync_order.c -- the `sync` order mode (sync_order.h).
 *
 * The course's createVoucherOrder, fixed where the course's versions break:
 *   - the lock is per user and distributed (rlock, Redisson's reentrant model), not a JVM
 *     `synchronized`, so two instances cannot both pass the count check for one user; on a
 *     Redis Cluster each lock lives on the master owning its slot (lockmap.h);
 *   - the lock is taken with no wait, as the course's tryLock(): a second concurrent
 *     attempt of the same user is refused with the duplicate message at once;
 *   - the lease is fixed (no watchdog) and longer than the SQL deadline, so a stalled
 *     holder's lock expires by itself; and the database's UNIQUE(user_id, voucher_id) is
 *     the last line of defence if a lock is ever lost;
 *   - the stock update is guarded (`WHERE stock > 0`), inside the same transaction as the
 *     count check and the insert.
 * Runs on the job pool (blocking calls), never on an event loop. */
#include "sale/sync_order.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/app.h"
#include "core/clock.h"
#include "http/http_req.h"
#include "server/jobs.h"
#include "sale/lockmap.h"
#include "core/log.h"
#include "server/metrics.h"
#include "sale/orderid.h"
#include "rlock.h"
#include "store/store.h"
#include "server/worker.h"
#include "core/xmem.h"

/* The lock's lease: fixed, longer than the SQL deadline (see the top of this file). */
static int64_t sync_lease_ms(const app_t *app)
{
    int64_t lease = app->cfg.sql_timeout_ms * 3LL;
    return lease < 10000 ? 10000 : lease;
}

/* The course's createVoucherOrder under the user's lock (see the top of this file). */
static int sync_run(store_t *s, sync_order_job_t *j)
{
    int code = ADMIT_UNAVAILABLE;
    char name[48];
    snprintf(name, sizeof name, "order:%lld", (long long)j->o.user_id);
    rlock_t *l = NULL;
    /* Owner: this pool thread. Two pool threads are two owners, so they exclude each
     * other like two instances do. On a Redis Cluster the lock goes to the master owning
     * its slot (lockmap.h). */
    rlock_status_t st = lockmap_try_lock(j->app->lockmap, name, 0, sync_lease_ms(j->app), &l);
    if (st == RLOCK_TIMEOUT) {
        code = ADMIT_DUPLICATE;   /* the same user's other attempt holds the lock */
    } else if (st == RLOCK_OK) {
        int res;
        if (store_order_sync(s, &j->o, &res) == STORE_OK)
            code = res;   /* STORE_SYNC_* == ADMIT_* */
        else
            log_warn("sync order: %s", store_errmsg(s));
        st = lockmap_unlock(j->app->lockmap, l);
        if (st == RLOCK_LOST)
            log_error("sync order: the lock of user %lld expired during its transaction",
                      (long long)j->o.user_id);
        else if (st == RLOCK_REDIS_ERROR)
            log_warn("sync order: the lock of user %lld could not be released (it expires "
                     "after its lease)", (long long)j->o.user_id);
    } else {
        log_warn("sync order: lock of user %lld: %s", (long long)j->o.user_id,
                 rlock_status_str(st));
    }
    return code;
}

/* ------------------------------------------------------------ one SQL order on the pool */

static void job_run(store_t *s, void *arg)
{
    sync_order_job_t *j = arg;
    j->code = s != NULL ? j->run(s, j) : ADMIT_UNAVAILABLE;
    if (j->code == ADMIT_OK)   /* the order is in SQL now: persisted, as the writer counts */
        metric_inc(&j->app->metrics->orders_persisted);
}

static void job_done(worker_t *w, void *arg)
{
    sync_order_job_t *j = arg;
    http_req_t *r = j->r;
    admission_cb cb = j->cb;
    int code = j->code;
    admission_order_t order;
    admission_order_set(&order, j->o.id);
    free(j);
    cb(r, code, code == ADMIT_OK ? &order : NULL);
}

void sync_order_submit(struct http_req *r, int64_t voucher_id, int64_t user_id,
                       admission_cb cb, sync_order_run run)
{
    app_t *app = r->w->app;
    sync_order_job_t *j = xcalloc(1, sizeof *j);
    j->r = r;
    j->cb = cb;
    j->run = run;
    j->app = app;
    j->o.create_time = clock_wall_s();
    j->o.id = orderid_next(j->o.create_time);
    j->o.user_id = user_id;
    j->o.voucher_id = voucher_id;
    j->o.status = 1;
    if (jobs_submit(app->jobs, r->w, job_run, job_done, j) != 0) {
        free(j);
        cb(r, ADMIT_UNAVAILABLE, NULL);
    }
}

void sync_order_try(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb)
{
    sync_order_submit(r, voucher_id, user_id, cb, sync_run);
}

int sync_order_init(struct app *app, char *err, size_t errlen)
{
    lkm_opts_t o = {
        .timeout_ms = app->cfg.redis_timeout_ms,
        .replica_acks = app->cfg.redis_wait_replicas,
        /* A lock a dead master granted has expired one lease (and the clock drift
         * rlock allows) after this process saw the failover. */
        .quarantine_ms = sync_lease_ms(app) + sync_lease_ms(app) / 50 + 100,
    };
    char why[300];
    app->lockmap = lockmap_new(app->redis_url, &o, why, sizeof why);
    if (app->lockmap == NULL) {
        snprintf(err, errlen, "sync mode: %s", why);
        return -1;
    }
    return 0;
}

void sync_order_free(struct app *app)
{
    lockmap_free(app->lockmap);
    app->lockmap = NULL;
}
