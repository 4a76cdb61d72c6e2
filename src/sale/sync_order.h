/* sync_order.h -- the `sync` order mode: the course's flash sale before Redis admission.
 *
 * Every request is one SQL transaction (store_order_sync: window, stock, one-per-user
 * check, guarded `stock = stock - 1 WHERE stock > 0`, insert), run on the job pool under a
 * per-user distributed lock (rlock, key rlock:{order:<userId>}; on a Redis Cluster on the
 * master owning that slot, lockmap.h) so that several instances sharing one database stay
 * correct. It is correct and slow: every request waits for the
 * database. It exists so the course's steps can be run and measured beside `stream`. */
#ifndef SECKILL_SYNC_ORDER_H
#define SECKILL_SYNC_ORDER_H

#include <stddef.h>
#include <stdint.h>
#include "sale/admission.h"
#include "store/store.h"

struct http_req;
struct app;

/* One order decided by SQL on the job pool: sync mode here, the lab's modes (lab_sql.c)
 * with their own run. The order (id, time, user, voucher, status 1) is filled in before
 * run is called; run returns an ADMIT_* code. */
typedef struct sync_order_job {
    struct app *app;
    store_order_t o;
    /* private */
    struct http_req *r;
    admission_cb cb;
    int (*run)(store_t *s, struct sync_order_job *j);
    int code;
} sync_order_job_t;

typedef int (*sync_order_run)(store_t *s, sync_order_job_t *j);

/* Submits one order to the job pool: run(s, j) on a pool thread (not called when no
 * database connection is to be had: ADMIT_UNAVAILABLE), then cb on the worker's thread,
 * with the order id when the code is ADMIT_OK. cb may run before this returns. */
void sync_order_submit(struct http_req *r, int64_t voucher_id, int64_t user_id,
                       admission_cb cb, sync_order_run run);

/* Same contract as admission_try (cb runs exactly once, on the worker's thread; it may
 * run before this returns). Codes are the ADMIT_* codes. */
void sync_order_try(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb);

/* The process-wide locks (app->lockmap, lockmap.h: one Redis or a Redis Cluster), from
 * app->redis_url. 0 or -1 with err. */
int sync_order_init(struct app *app, char *err, size_t errlen);
void sync_order_free(struct app *app);

#endif
