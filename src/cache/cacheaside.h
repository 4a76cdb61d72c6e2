/* cacheaside.h -- a Redis cache in front of a SQL read, as the course's cache chapter
 * teaches it (hmdp-spec section 2.4, docs/cache.md).
 *
 * cacheaside_get reads one key: a non-empty string is the answer (a hit), an empty string
 * means "not in SQL" (cached briefly against penetration: unknown ids do not reach SQL
 * again and again), no key is a miss. A miss takes the mutex lock_key (SET NX PX, the
 * course's lock:shop:<id>), looks at the key once more (another holder may have filled
 * it meanwhile), runs the loader on a jobs thread (jobs.h: SQL never blocks the event
 * loop), writes the result with a jittered TTL (so keys filled together do not expire
 * together) and releases the mutex with a compare-and-delete of its own token. Whoever
 * finds the mutex taken polls the key every CACHEASIDE_POLL_MS until it is filled (or
 * the mutex is free again), for at most CACHEASIDE_WAIT_MS, then answers "unavailable":
 * so concurrent misses of one key, across workers and instances, cost one SQL read.
 *
 * Redis down or late: the loader's answer is given without caching (SQL still has a
 * deadline and the jobs queue is bounded), so a read path does not die with the cache.
 *
 * Everything runs on the calling worker's thread; cb runs exactly once, on that thread,
 * possibly before cacheaside_get returns. Not for the flash-sale path. */
#ifndef SECKILL_CACHEASIDE_H
#define SECKILL_CACHEASIDE_H

#include <stddef.h>

struct worker;
struct store;

#define CACHEASIDE_POLL_MS 20
#define CACHEASIDE_WAIT_MS 1500      /* under the course page's 2000 ms axios timeout */
#define CACHEASIDE_LOCK_MS 10000     /* the course's LOCK_SHOP_TTL (10 s), at least */
#define CACHEASIDE_JITTER_PCT 10     /* a TTL t is set to t + [0, t * 10%] */

enum {
    CACHEASIDE_FOUND = 0,            /* json, len: the value */
    CACHEASIDE_EMPTY = 1,            /* SQL has no such row */
    CACHEASIDE_UNAVAILABLE = -1      /* SQL failed, or the mutex stayed taken too long */
};

/* Runs on a jobs thread with that thread's store (NULL when it has no connection):
 * returns CACHEASIDE_FOUND with *json malloc'ed (*len bytes, not empty),
 * CACHEASIDE_EMPTY, or CACHEASIDE_UNAVAILABLE. arg is the caller's, alive until cb. */
typedef int (*cacheaside_load_fn)(struct store *st, void *arg, char **json, size_t *len);
/* json is valid during the call only. */
typedef void (*cacheaside_cb)(void *priv, int status, const char *json, size_t len);

typedef struct cacheaside_spec {
    const char *name;                /* for logs, e.g. "shop" */
    int ttl_s;                       /* a value's TTL before jitter */
    int empty_ttl_s;                 /* an empty answer's TTL before jitter */
} cacheaside_spec_t;

/* key and lock_key are copied (at most 127 bytes each). */
void cacheaside_get(struct worker *w, const cacheaside_spec_t *spec, const char *key,
                    const char *lock_key, cacheaside_load_fn load, void *load_arg,
                    cacheaside_cb cb, void *priv);

/* Deletes key after a write to SQL, so the next read loads it; cb(priv, ok) runs once
 * Redis has answered (ok 0: Redis down or failed; the entry then lives out its TTL), so
 * a reply sent from cb is not overtaken by a read on another connection. */
void cacheaside_forget(struct worker *w, const char *key, void (*cb)(void *priv, int ok),
                       void *priv);

/* The TTL to set for base_s: base_s plus a random 0 .. base_s * CACHEASIDE_JITTER_PCT %. */
int cacheaside_jitter(int base_s);

#endif
