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
 * "Log out everywhere" (auth_logout_all) is an entry of its own: the member
 * "u:<user id>:<nbf>" (and the same message) says every token of that user issued before
 * the unix second nbf is dead. It is kept like a token's entry: past a TTL after it, no
 * token issued before it can be alive anyway (this service refuses them, so nothing here
 * slides their TTL any more).
 *
 * Redis data loss: the set holds an epoch, the member "epoch:<unix s>" scored +inf (never
 * pruned). A worker whose reload finds none knows that Redis lost the set (or is new) --
 * and with it every login hash. It adds an epoch (the next second: tokens carry whole
 * seconds), announces it, and from then on a signed token issued before the newest
 * epoch it knows is not accepted by its signature alone: auth.c looks it up, and Redis
 * no longer has it. So a
 * token logged out before the loss is not accepted again by a restarted instance, though
 * its revocation went with Redis. Why not keep revocations outside Redis (SQL, a file):
 * the loss takes the login hashes too, so "every session from before the loss is gone"
 * is what the course's backend sees as well, and it needs no second store on the logout
 * and reload paths; a file would be per instance, while a cluster shares one Redis. What
 * it does not cover: a partial loss that keeps the set but drops its last writes (an AOF
 * fsynced every second losing that second: --appendfsync-always closes it).
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

/* What the revocation state says of a verified token of user uid issued at issued_s: */
enum {
    REVOKE_OK = 0,      /* may be accepted in memory */
    REVOKE_DEAD = 1,    /* revoked, or issued before its user logged out everywhere */
    REVOKE_ASK = 2      /* not decidable here: no live subscription, or issued before the
                           epoch -- ask Redis */
};
/* revoke_has, revoke_user_nbf_s, revoke_live and revoke_epoch_s in one call: the check
 * every request with a signed token makes. */
int revoke_state(const struct worker *w, const uint8_t tok[16], int64_t uid, int64_t issued_s);

/* "Log out everywhere" for a user: its tokens issued before nbf_s (unix seconds) are
 * dead; the entry is kept until until_ms (wall clock). */
void revoke_user_add(struct worker *w, int64_t uid, int64_t nbf_s, uint64_t until_ms);

/* The user's not-before second (0: none). Costs nothing while no such entry exists in
 * the worker, one probe of the set otherwise. */
int64_t revoke_user_nbf_s(const struct worker *w, int64_t uid);

/* The newest epoch of seckill:revoked this worker knows (unix seconds, 0 before the first
 * reload): signed tokens issued before it must be looked up in Redis. */
int64_t revoke_epoch_s(const struct worker *w);

/* The seckill:revoked member (and message) for a token (tok != NULL) or for a user's
 * not-before (tok NULL): its length. */
#define REVOKE_MEMBER_MAX 64
int revoke_member(const uint8_t tok[16], int64_t uid, int64_t nbf_s, char out[REVOKE_MEMBER_MAX]);

/* Wall-clock milliseconds (the set's and seckill:revoked's time base). */
uint64_t revoke_now_ms(void);

#endif
