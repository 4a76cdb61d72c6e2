/* rebuild.h -- rebuild a flash-sale voucher's Redis keys from SQL after Redis lost them.
 *
 * SQL is the record of what a sale is; Redis holds its live state. When a voucher's hash
 * has no stock field (a FLUSHALL, an empty Redis put in place of a dead one, a failover
 * that lost the keys), admission answers "no such voucher" and the sale stops. A rebuild
 * republishes it, once, under a lock:
 *
 *   1. SET seckill:rebuild:{id} <token> NX PX: one rebuilder per voucher at a time;
 *   2. the voucher row from SQL (window); XLEN of the order stream of every stock bucket.
 *      A stream with entries survived the loss: its entries are real admissions, kept.
 *      If every one is empty or gone, any order a writer still holds in memory belongs to
 *      the lost state, so the voucher's Redis generation ("epoch", store_redis_epoch) is
 *      raised in SQL: from that commit on, the writers refuse orders of the old generation
 *      (fenced), and every order committed before it is in SQL for step 3 to read. While
 *      one bucket's stream survived it is not raised (that would fence its entries);
 *   3. SQL's (stock, orders) at one moment gives the initial stock S = stock + orders;
 *      the orders are SQL's (both tables), plus (surviving streams, each bucket's) every
 *      entry of the current generation not yet in SQL; each order's state from its SQL
 *      status, the surviving streams' events and a surviving state hash (rebuild_life.h); the buyers
 *      are the orders whose cancel did not free their buyer, one per user; Redis stock =
 *      S - (buyers - returned + freed);
 *   4. the buyers go to seckill:rebuild:buyers:{id}, the states to
 *      seckill:rebuild:ostate:{id}, in chunks; SADD seckill:streams; then
 *      src/rebuild/rebuild.lua, atomically: if the lock is still ours and the voucher
 *      still has no stock, rename both into place, create the stream's group (MKSTREAM),
 *      write the hash (stock, begin, end, ep, seeded, returned, paid, timedout, freed) -- the
 *      sale resumes. Then a new random token in KEY_REBUILT: the payment-timeout SQL scans
 *      read SQL's unpaid orders from the first again (src/writer/writer_life.c).
 *
 * A voucher in K > 1 stock buckets (K from SQL) comes back in K buckets: the stock split
 * as at creation (buckets_share of the stock computed in 3, so the sum is exact), each buyer
 * in the bucket of their home (buckets_home), buckets 1..K-1 first (each through steps 4 on its
 * own tag and node, with its own lock key) and bucket 0 last, as a create publishes them.
 * Only when every bucket is gone: bucket_sweep_rebuild_allowed refuses while one still holds stock.
 * When some buckets are gone and others kept, the lost ones alone come back (from SQL and
 * their own surviving streams, if only their hashes were lost), with the units the kept
 * ones do not account for; the generation is not raised.
 *
 * Idempotent: a voucher with stock in Redis is left alone. `seeded` is the number of
 * orders (buyers' and freed ones) that are not entries of the current stream, so `stream
 * entries = buyers + freed - seeded` still holds for the audit. Every key is under the voucher's hash tag, so the
 * script runs on Redis Cluster too (seckill:streams is the one process-wide key: it goes
 * through its own connection).
 *
 * Orders answered but not persisted when Redis lost them are gone: they are in neither
 * SQL nor Redis; their stock is sold again and their buyers may buy again. The audit
 * lists them when given the answers (`seckill audit --orders`), README "When Redis loses
 * its data".
 *
 * Blocking calls with the caller's deadlines (bredis_* socket timeouts, the store's);
 * one thread at a time per (Redis connection, store). */
#ifndef SECKILL_REBUILD_H
#define SECKILL_REBUILD_H

#include <stdint.h>
#include <stdio.h>

struct redisContext;
struct store;

enum {
    REBUILD_DONE = 0,       /* republished (or, dry run: would be) */
    REBUILD_PRESENT = 1,    /* the voucher has stock in Redis: nothing to do */
    REBUILD_BUSY = 2,       /* another rebuilder holds the lock */
    REBUILD_NOT_SALE = 3,   /* SQL has no flash-sale voucher with this id */
    REBUILD_REFUSED = 4,    /* buckets in Redis that SQL does not know of (K not in SQL):
                               rebuilding bucket 0 would sell their stock twice (err) */
    REBUILD_ERR = -1
};

typedef struct rebuild_opts {
    int dry_run;            /* read and report, write nothing (no lock, no epoch bump) */
    const char *owner;      /* written into the lock's token, for whoever looks */
    int lock_ttl_ms;        /* 0 = 30000 */
    FILE *plan;             /* if set: a line per write, as it is (or would be) done */
    struct rcl_sync_route *rt;   /* reaches a stock bucket's node (NULL: c reaches them all) */
    int pay_timeout_s;      /* --pay-timeout-s: SQL's status 4 rebuilt as timed out when its
                               update came this long after the order (0: as cancelled) */
} rebuild_opts_t;

typedef struct rebuild_result {
    int64_t voucher_id;
    int stream_survived;    /* a stream (of a bucket rebuilt) had entries: kept, no epoch bump */
    int64_t epoch;          /* the generation published */
    int64_t stock;          /* Redis stock written */
    int64_t initial;        /* SQL stock + SQL orders */
    int64_t buyers;         /* buyers written */
    int64_t from_sql;       /* of which: users with an SQL order */
    int64_t from_stream;    /* of which: stream entries not yet in SQL */
    int64_t seeded;         /* buyers that are not entries of the stream */
    int64_t returned;       /* of the buyers: cancelled, timed out or refunded orders' (no
                               unit; each bucket's `returned`, docs/lifecycle.md) */
    int64_t paid, timedout; /* of the buyers: paid, timed out (the board's counters) */
    int64_t freed;          /* orders whose cancel or timeout freed their buyer
                               (--cancel-frees-buyer): counted in `returned`, not buyers */
    int64_t events;         /* decisions taken from stream events SQL did not have yet */
    int64_t begin, end;     /* the window, epoch seconds */
    int buckets;            /* stock buckets K from SQL (store_voucher_buckets): each is
                               rebuilt with its share of the stock and its home buyers */
    int64_t room_r;         /* its waiting room from SQL (store_voucher_room), 0: none; */
    int room_ttl, room_gate;   /* written to the hash as room_r, room_ttl, room_gate */
    int sql_failed;         /* REBUILD_ERR: SQL failed (else Redis did) */
} rebuild_result_t;

/* Rebuilds one voucher if its keys are missing (with K > 1 in SQL and o->rt: any of its
 * buckets' keys; the lost buckets alone when others are kept). c reaches the voucher's keys (on a cluster:
 * the node of its hash tag), g the process-wide seckill:streams (NULL: c). Returns a
 * REBUILD_* code; on REBUILD_ERR err says why (and the lock, if taken, is released). */
int rebuild_voucher(struct redisContext *c, struct redisContext *g, struct store *st,
                    int64_t voucher_id,
                    const rebuild_opts_t *o, rebuild_result_t *res, char *err, size_t errlen);

/* 1 if the voucher hash has a stock field, 0 if not, -1 on a Redis error (err). */
int rebuild_present(struct redisContext *c, int64_t voucher_id, char *err, size_t errlen);

#endif
