/* sync_order.h -- the `sync` order mode: the course's flash sale before Redis admission.
 *
 * Every request is one SQL transaction (store_order_sync: window, stock, one-per-user
 * check, guarded `stock = stock - 1 WHERE stock > 0`, insert), run on the job pool under a
 * per-user distributed lock (rlock, key rlock:{order:<userId>}) so that several instances
 * sharing one database stay correct. It is correct and slow: every request waits for the
 * database. It exists so the course's steps can be run and measured beside `stream`. */
#ifndef SECKILL_SYNC_ORDER_H
#define SECKILL_SYNC_ORDER_H

#include <stddef.h>
#include <stdint.h>
#include "admission.h"

struct http_req;
struct app;

/* Same contract as admission_try (cb runs exactly once, on the worker's thread; it may
 * run before this returns). Codes are the ADMIT_* codes. */
void sync_order_try(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb);

/* The process-wide lock client (app->locks), from app->redis_url. 0 or -1 with err. */
int sync_order_init(struct app *app, char *err, size_t errlen);
void sync_order_free(struct app *app);

#endif
