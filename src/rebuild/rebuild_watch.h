/* rebuild_watch.h -- the service's watch for vouchers whose Redis keys are gone.
 *
 * One thread per process, with its own blocking Redis connection and store connection.
 * It republishes (rebuild.h) every live flash-sale voucher that SQL has and Redis lacks:
 *   - at start, and right after every reconnect to Redis (an emptied or replaced Redis
 *     drops the connections);
 *   - every second: one pipelined HEXISTS per live voucher (a FLUSHALL keeps the
 *     connections; a voucher created while Redis was down appears in SQL) -- the live
 *     list is re-read from SQL every two seconds;
 *   - at once when a worker pokes it: admission answered "no such voucher" for an id
 *     (rebuilt only if SQL knows it as a flash-sale voucher, ended or not).
 * Rebuilds from several instances race for the per-voucher lock; one writes. Each pass
 * also puts the order-id slot counter (seckill:instance) back to at least this instance's
 * slot, so an instance started after a loss does not lease a live one's slot, and lists
 * again in seckill:streams every stream of a sale SQL knows (on sale, or ended within the
 * hour) that still exists but is no longer listed: on a cluster the registry's master may
 * lose its data alone, and no writer would read those streams (one SMISMEMBER per 256
 * members a pass; docs/redis-cluster.md "When a master loses its data"). */
#ifndef SECKILL_REBUILD_WATCH_H
#define SECKILL_REBUILD_WATCH_H

#include <stddef.h>
#include <stdint.h>

struct app;

typedef struct rebuild_watch rebuild_watch_t;

/* Starts the thread. NULL with a reason in err if it cannot. */
rebuild_watch_t *rebuild_watch_start(struct app *app, char *err, size_t errlen);
/* From any thread, cheap: look at this voucher soon. Ids beyond a small queue are dropped
 * (the periodic pass still finds live ones). NULL is fine. */
void rebuild_watch_poke(rebuild_watch_t *w, int64_t voucher_id);
/* Stops and joins the thread. NULL is fine. */
void rebuild_watch_stop(rebuild_watch_t *w);

#endif
