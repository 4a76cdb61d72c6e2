/* bucket_sweep.h -- stock buckets off the hot path (blocking calls): the sweep that
 * finishes transfers a crash cut short, the registry of bucketed vouchers, and what a
 * rebuild from SQL may do with a bucketed voucher (buckets.h has the design).
 *
 *   registry  seckill:streams lists bucket b >= 1 of a K-bucket voucher as "<id>.<b>.<K>"
 *             (the writers read those streams); bucket_sweep_registry reads it;
 *   sweep     a transfer whose donor log entry is older than BKS_STALE_MS was cut short
 *             (the worker that took the units died, or lost Redis, before it applied them
 *             and deleted the entry): apply it at the receiver (a no-op if it was
 *             applied: the receiver's applied set), then delete the entry; a receiver
 *             without its voucher hash (its data lost) never applied it: the units go back
 *             to the donor. Run every second by the rebuild watch (rebuild_watch.c);
 *   rebuild   K is in SQL (store_voucher_buckets), and rebuild.c brings back every lost
 *             bucket: all of them from SQL, or -- some kept (a cluster node lost its
 *             data) -- the lost ones with what SQL's initial stock leaves beside the
 *             units the kept ones account for (bucket_sweep_present, bucket_sweep_live_units,
 *             bucket_sweep_in_transit). A voucher whose K is not in SQL (created before it was
 *             kept there) with bucket 0 gone and other buckets kept: a rebuild from SQL
 *             would put the whole remaining stock into bucket 0 beside theirs -- an
 *             oversell -- so bucket_sweep_rebuild_allowed says no.
 *
 * Blocking, with the contexts' deadlines; one thread at a time per rcl_sync_route_t. */
#ifndef SECKILL_BUCKET_SWEEP_H
#define SECKILL_BUCKET_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include "redis/rcl_sync.h"

#define BKS_STALE_MS 2000

typedef struct bks_voucher {
    int64_t voucher_id;
    int k;
} bks_voucher_t;

/* The bucketed vouchers seckill:streams lists (malloc'ed, *n of them; K > 1 each). 0, or
 * -1 with err. */
int bucket_sweep_registry(rcl_sync_route_t *rt, bks_voucher_t **out, size_t *n, char *err,
                          size_t errlen);

/* --redis-wait-replicas: a step of a transfer counts once that many replicas have it. */
typedef struct bks_wait {
    int replicas;            /* 0: no WAIT */
    int timeout_ms;
} bks_wait_t;

/* Finishes the voucher's transfers logged longer than stale_ms ago (wt may be NULL).
 * Returns how many were finished, or -1 with err. */
int bucket_sweep_voucher(rcl_sync_route_t *rt, int64_t voucher_id, int k, int stale_ms,
                         const bks_wait_t *wt, char *err, size_t errlen);

/* One sweep over every bucketed voucher (errors logged). Returns the transfers finished. */
int bucket_sweep_all(rcl_sync_route_t *rt, const bks_wait_t *wt);

/* 1 if a rebuild of the voucher from SQL may go ahead (bucket 0 is there -- the rebuild
 * will find it present --, or no bucket b >= 1 of any K is), 0 if not (err says why), -1
 * on a Redis failure (err). */
int bucket_sweep_rebuild_allowed(rcl_sync_route_t *rt, int64_t voucher_id, char *err, size_t errlen);

/* Which of the voucher's k buckets have their voucher hash (stock field): bit b of *mask.
 * 0, or -1 on a Redis failure (err). */
int bucket_sweep_present(rcl_sync_route_t *rt, int64_t voucher_id, int k, unsigned *mask, char *err,
                         size_t errlen);
/* The units the buckets in mask account for: stock + buyers - returned + freed of each (a
 * cancelled or timed-out order holds none; a freed buyer left the buyers; each bucket read at one moment of its own). For a rebuild of the other buckets. 0, or -1 with err. */
int bucket_sweep_live_units(rcl_sync_route_t *rt, int64_t voucher_id, int k, unsigned mask,
                            int64_t *units, char *err, size_t errlen);

/* Units of the voucher in transfers not yet applied (for the audit): the sum over its
 * buckets' logs of entries the receiver has not applied. 0, or -1 with err. */
int bucket_sweep_in_transit(rcl_sync_route_t *rt, int64_t voucher_id, int k, int64_t *units, char *err,
                            size_t errlen);

#endif
