/* revoke.h -- logged-out tokens, known to every worker of every instance within milliseconds.
 *
 * A signed token (token.h) is accepted without asking Redis, so a logout has to reach
 * every worker by itself. A logout (auth_logout) does, pipelined on the worker's
 * connection:
 *     ZADD seckill:revoked <until-ms> <token>     the durable record
 *     PUBLISH seckill:revoke <token>              the news
 * and each worker keeps:
 *   - an in-memory set of revoked tokens, consulted before any local acceptance;
 *   - its own SUBSCRIBE connection to seckill:revoke, whose messages add to that set;
 *   - a "live" flag: set once the subscription is confirmed AND the whole seckill:revoked
 *     set has been read after that (so nothing published before the subscription is
 *     missed), cleared the moment the connection is lost. While not live a worker accepts
 *     no token locally: every token is looked up in Redis (auth.c).
 * Bound: a logout is refused by every live worker once the PUBLISH has been delivered
 * and the worker's loop has turned -- milliseconds; tests/it/test_tokens.py checks it
 * across two instances with a 1 s allowance. A connection lost without a reset (dead
 * network) is noticed through TCP keepalive within ~3 s, and until then nothing can be
 * published to Redis through that network either.
 *
 * Entries carry an expiry (logout time + token TTL): after it the token is dead anyway
 * (its Redis hash is gone and its signature too old to be accepted locally), so the set
 * and seckill:revoked are pruned by it. Each key is its own slot and PUBLISH is broadcast
 * on a Redis Cluster, so the scheme works there unchanged.
 *
 * Everything runs on the worker's own thread; the state hangs off worker_t.revoke.
 * revoke knows nothing of the token cache above it: whoever creates it (server.c) passes
 * the token TTL and a callback told of each revocation heard from Redis, so that auth.c
 * (which calls into revoke) is never called by name from here. */
#ifndef SECKILL_REVOKE_H
#define SECKILL_REVOKE_H

#include <stdint.h>

struct worker;
struct url_redis;


/* Told of each token revoked by another worker or instance (a PUBLISH heard), after it
 * has been added to the set; auth.c drops it from its cache (auth_forget). */
typedef void (*revoke_heard_fn)(struct worker *w, const uint8_t tok[16]);

/* ttl_ms: how long a heard revocation is kept (the token TTL: after it the token is dead
 * anyway). heard: may be NULL. */
int revoke_init(struct worker *w, const struct url_redis *addr, uint64_t ttl_ms,
                revoke_heard_fn heard);
void revoke_free(struct worker *w);

/* 1 if the worker's subscription is up and its set complete (see above). */
int revoke_live(const struct worker *w);

/* 1 if the token (16 bytes) is revoked in this worker's set. */
int revoke_has(const struct worker *w, const uint8_t tok[16]);

/* Adds a token to this worker's set until until_ms (wall clock). */
void revoke_add(struct worker *w, const uint8_t tok[16], uint64_t until_ms);

/* Wall-clock milliseconds (the set's and seckill:revoked's time base). */
uint64_t revoke_now_ms(void);

#endif
