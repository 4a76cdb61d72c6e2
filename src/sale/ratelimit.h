/* ratelimit.h -- abuse limits: token buckets keyed by user id, client IP or phone.
 *
 * Eight limits (config.h, `--rate-*`, `--code-budget`), each a token bucket of RATE
 * tokens per second and BURST tokens at most; a request takes one token, and a request
 * finding less than one is refused (the caller answers HTTP 429 with api_rate_limited(),
 * or 503 for the code budget) and counted in /metrics.
 *
 *   limit              key             where             table              default   full
 *   rate-user-seckill  user id         flash-sale order  per worker thread  20/s:40   evicts
 *   rate-ip-seckill    client IP       flash-sale order  per worker thread  0 (off)   evicts
 *   rate-ip-code       client IP       /user/code        per instance       10/m:20   evicts
 *   rate-phone-code    phone           /user/code        in Redis (*)       1/m:3     -
 *   rate-phone-login   phone + client  /user/login       per instance       10/m:10   refuses
 *   rate-ip-login      client IP       /user/login       per instance       10/s:100  refuses
 *   rate-user-lookup   user id         order lookups     per instance       10/s:20   refuses
 *   code-budget        (one bucket)    /user/code        per instance       1200/m    -
 *
 * (*) The per-phone code bucket lives in Redis beside the code (login_code.lua, run by
 * logincode.c), exact across instances and impossible to fill or evict; this module
 * only counts its refusals (ratelimit_count). The code budget is one bucket for the
 * whole instance: when it starts refusing, one warning is logged, and one line when it
 * allows again.
 *
 * Flash-sale limits are on the hot path, so they take no lock: each worker has its own
 * table (hung off the worker) and refills at RATE / threads with BURST / threads (at
 * least 1) tokens. A client whose connections all land on one worker gets 1/threads of
 * the configured rate; one spread over every worker gets at most the configured rate: the
 * instance as a whole never lets a key through faster than configured. With M instances
 * behind a balancer a key can get up to M times the rate (each instance counts alone).
 * The login limits are not on the hot path (those endpoints wait for Redis anyway): one
 * table per instance (hung off the app) behind a mutex, exact per instance.
 *
 * Keys are exact 64-bit values, no hashing of text: a user id, a phone's 11 digits as a
 * number, an IPv4 address, or the /64 prefix of an IPv6 address (one host usually owns a
 * whole /64). The client IP is the TCP peer, or the X-Forwarded-For client when the peer
 * is a trusted proxy (http.h).
 *
 * Memory is bounded: a fixed number of buckets per table (24 bytes each), 8-way
 * set-associative with a per-table random seed choosing the set. A new key takes a free
 * way, else a way whose bucket has refilled to BURST (forgetting it changes nothing).
 * When the set holds only buckets still in use, the table's policy decides:
 *   - evicts (flash-sale limits, the per-client code limit): the least recently used one
 *     is evicted, and its owner starts again from a full bucket. A busy abuser keeps its
 *     own bucket fresh; a flood of keys cannot lock out new ones.
 *   - refuses (limits that guard a secret: logins, and lookups): nothing is evicted and
 *     the new key is refused. A flood of keys can then never hand a spent bucket a fresh
 *     burst; the price is that during such a flood new keys may be refused until buckets
 *     refill. (Codes need no such table: what guards them is counted in Redis.)
 *
 * Ownership: server.c creates and frees the tables (ratelimit_app_init/free before and
 * after the workers, ratelimit_worker_init/free with each worker's other caches). */
#ifndef SECKILL_RATELIMIT_H
#define SECKILL_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

struct http_req;

typedef enum {
    RL_USER_SECKILL = 0,
    RL_IP_SECKILL,
    RL_IP_CODE,
    RL_PHONE_CODE,
    RL_PHONE_LOGIN,
    RL_IP_LOGIN,
    RL_USER_LOOKUP,
    RL_CODE_BUDGET,
    RL__COUNT
} rl_kind_t;

#define RL_ENTRIES 8192   /* buckets per table */

struct app;
struct worker;

/* ---- the bucket table (no locking; the caller owns it) */

typedef struct rl_table rl_table_t;

enum { RL_FULL_EVICTS = 0, RL_FULL_REFUSES = 1 };

/* per_s > 0 tokens per second, burst >= 1 tokens at most; entries is rounded up to a
 * multiple of the 8 ways; full: RL_FULL_EVICTS or RL_FULL_REFUSES (see above). Returns
 * NULL when per_s or burst is out of range. */
rl_table_t *ratelimit_table_new(double per_s, double burst, size_t entries, uint64_t seed,
                                int full);
void ratelimit_table_free(rl_table_t *t);   /* NULL is fine */

/* Takes one token from key's bucket (key != 0) at now_ms (monotonic; a time earlier than
 * the bucket's last use counts as no time passed). Returns 1 if allowed, 0 if limited. */
int ratelimit_table_take(rl_table_t *t, uint64_t key, uint64_t now_ms);

/* ---- keys */

/* The key of a client address as text ("127.0.0.1", "::1", "::ffff:10.0.0.1"): IPv4
 * exactly, IPv6 by its /64 prefix; anything else (e.g. "unknown") is key 1. Never 0. */
uint64_t ratelimit_key_ip(const char *peer);
/* The key of a phone number: its digits as a number (1..10^19-1); 0 if not all digits
 * or empty or longer than 19. */
uint64_t ratelimit_key_digits(const char *z);

/* The key of a pair (a phone and a client's key): a keyed mix, so that nobody who does
 * not know this process's secret can pick a pair that shares another pair's bucket.
 * Never 0. */
uint64_t ratelimit_key_pair(const struct http_req *r, uint64_t a, uint64_t b);

/* ---- the service's limits */

/* The per-instance tables (app->rl) and a worker's own (w->rl), for the limits that are
 * on. Return 0, or -1 when a configured limit is out of range. Free functions accept NULL tables. */
int ratelimit_app_init(struct app *app);
void ratelimit_app_free(struct app *app);
int ratelimit_worker_init(struct worker *w);
void ratelimit_worker_free(struct worker *w);

/* Applies limit kind to key for request r (on a worker thread). Returns 1 if allowed
 * (always when the limit is off), 0 if limited: then the refusal is counted in the
 * worker's metrics and the caller answers with api_rate_limited(). */
int ratelimit_allow(struct http_req *r, rl_kind_t kind, uint64_t key);

/* The same with the key of the client's address (r->peer), parsed only when the limit
 * is on. */
int ratelimit_allow_peer(struct http_req *r, rl_kind_t kind);

/* The key of the client's address: the TCP peer, or the X-Forwarded-For client when
 * the peer is a --trusted-proxy (clientip.h). */
uint64_t ratelimit_peer_key(const struct http_req *r);

/* Counts a refusal under limit kind that was decided elsewhere (the per-phone code bucket
 * in Redis), in the worker's metrics like ratelimit_allow's own. */
void ratelimit_count(struct http_req *r, rl_kind_t kind);

/* Seconds until key could next be allowed under limit kind (for Retry-After): from
 * the limit's rate, at least 1. */
int ratelimit_retry_after_s(const struct http_req *r, rl_kind_t kind);

/* The per-worker rate and burst of a limit from its configuration (exposed for tests):
 * divides by threads, burst at least 1. */
void ratelimit_per_worker(double per_s, double burst, int threads, double *w_per_s,
                          double *w_burst);

#endif
