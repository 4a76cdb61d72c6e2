/* admission.h -- the flash-sale decision for one request (stream and queue modes).
 *
 * Runs src/sale/admit.lua (EVALSHA) with a fresh order id, alone or together with other
 * admissions of the same voucher waiting on this worker (admission.c). Before asking Redis it
 * consults a per-worker verdict cache: a voucher Redis called sold out, ended, not started
 * or unknown is answered from memory for soldout_cache_ms (default 500 ms). The cache entry
 * simply expires -- the way back if stock returns: at most one request per worker per
 * interval goes to Redis and learns the new state. Never touches SQL. */
#ifndef SECKILL_ADMISSION_H
#define SECKILL_ADMISSION_H

#include <stdint.h>
#include "server/metrics.h"
#include "core/sb.h"

struct worker;
struct http_req;

/* Result codes of admit.lua (kept equal to its return values). */
enum {
    ADMIT_OK = 0, ADMIT_SOLD_OUT = 1, ADMIT_DUPLICATE = 2, ADMIT_NOT_STARTED = 3,
    ADMIT_ENDED = 4, ADMIT_NO_VOUCHER = 5,
    ADMIT_PAUSED = 6,        /* the sale is paused (the hash's `paused` field: api_sale.c) */
    ADMIT_QUEUE_REQUIRED = 7, /* not admit.lua's: a voucher with a waiting room and no valid
                              * pass (src/room/room.h), refused before Redis */
    ADMIT_UNAVAILABLE = -1,  /* Redis down, late or answered an error */
    ADMIT_RETRY = -2         /* admitted, but not confirmed on --redis-wait-replicas replicas
                              * in time: the order may be lost in a failover, so the buyer
                              * is told to retry, never success */
};

/* An admitted order's id and its decimal digits, formatted once: admission.c sends them
 * as the script's argument, and the answer copies them. */
typedef struct admission_order {
    int64_t id;
    int len;                    /* digits in dec (NUL-terminated) */
    char dec[SB_DEC_MAX];
} admission_order_t;

void admission_order_set(admission_order_t *o, int64_t id);

/* cb runs exactly once on the worker's thread; order is the admitted order when code ==
 * ADMIT_OK (valid during the call only), else NULL. May run before admission_try returns
 * (cache hit, Redis down): call it last. */
typedef void (*admission_cb)(struct http_req *r, int code, const admission_order_t *order);

void admission_try(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb);

/* Drops this worker's cached verdict for the voucher (publish.h: it was just published). */
void admission_forget(struct worker *w, int64_t voucher_id);

int admission_cache_init(struct worker *w);
void admission_cache_free(struct worker *w);

/* The message and machine code for a result (e.g. "库存不足", "SOLD_OUT"); NULL for OK. */
const char *admission_msg(int code);
const char *admission_code(int code);
outcome_t admission_outcome(int code);

#endif
