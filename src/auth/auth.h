/* auth.h -- login tokens to users: verified locally when signed, else looked up in Redis.
 *
 * Every login writes the course's Redis hash login:token:<token> {id, nickName, icon} with
 * the sliding TTL, so a backend that shares Redis (the Java course project) keeps working.
 * With --token-format signed (the default) the token also proves itself (token.h): a
 * worker accepts it without Redis while it is younger than the TTL (or known alive from
 * its own EXPIRE), not revoked (revoke.h: the token, its user's "log out everywhere", the
 * set's epoch after a Redis data loss), younger than --token-max-age-s, and the worker's
 * revocation subscription is live. A verified token past its signed age, issued before
 * the epoch, or met by a worker without a live subscription is looked up (HGETALL, cached
 * token_cache_ms). A token that does not verify is no token (401, no Redis) unless
 * --token-accept-opaque (or --token-format opaque) accepts course-style random tokens:
 * then it is looked up, and lookups that find nothing are budgeted per client and per
 * worker (guard.h; --rate-ip-token-lookup, --token-lookup-budget): over budget such a
 * token is refused without Redis, except one this worker has found before.
 * The sliding TTL is refreshed by at most one EXPIRE per token per worker per
 * token_refresh_s, queued and sent pipelined after the answer, never waited for. */
#ifndef SECKILL_AUTH_H
#define SECKILL_AUTH_H

#include <stdint.h>

struct worker;
struct http_req;

typedef struct auth_user {
    int64_t id;
    char nick_name[64];
    char icon[256];
} auth_user_t;

/* cb runs exactly once on the worker's thread:
 *   status 0: user found (u valid during the callback)
 *   status 1: no/blank/unknown token (caller answers 401 if the path needs login)
 *   status -1: Redis unavailable (caller answers 503) */
typedef void (*auth_cb)(struct http_req *r, int status, const auth_user_t *u);

/* Resolves r->authorization. May call cb before returning (cache hit, no token, Redis
 * down), so call it as the handler's last step. */
void auth_resolve(struct http_req *r, auth_cb cb);
/* The same, but the user's nickName and icon are needed (GET /user/me): always from the
 * Redis hash (cached), never from the signature alone, which carries only the id. */
void auth_resolve_profile(struct http_req *r, auth_cb cb);

/* A fresh token for user_id into out (33 bytes): signed when the format is signed and the
 * id fits, else 16 random bytes. 0, or -1 when no randomness is to be had. */
int auth_new_token(struct worker *w, int64_t user_id, char out[33]);

/* Stores a fresh login in Redis (HSET + EXPIRE) and calls done(r, ok). */
void auth_store_login(struct http_req *r, const char *token, const auth_user_t *u,
                      void (*done)(struct http_req *r, int ok));
/* Revokes the token everywhere (revoke.h: local set, seckill:revoked, PUBLISH) and
 * deletes its hash; done(r, ok) after Redis has taken all of it. */
void auth_logout(struct http_req *r, const char *token, void (*done)(struct http_req *r, int ok));
/* auth_logout, and every signed token of user uid issued up to now is refused from now
 * on, everywhere (revoke.h: a not-before second per user, checked in memory; nothing is
 * looked up per request). Course-style opaque tokens carry no issue time: only the one
 * presented is revoked. */
void auth_logout_all(struct http_req *r, const char *token, int64_t uid,
                     void (*done)(struct http_req *r, int ok));

/* Sliding-TTL refresh for a token sent to a public path, without waiting: the same
 * coalesced EXPIRE as a login path (an unsigned token not cached is looked up in the
 * background first). Never calls back. */
void auth_touch(struct http_req *r, const char *token);

/* Drops a token (16 bytes) from this worker's cache (a revocation arrived). */
void auth_forget(struct worker *w, const uint8_t tok[16]);

/* The sliding TTL in seconds. */
int auth_ttl_s(const struct worker *w);

int auth_cache_init(struct worker *w);
void auth_cache_free(struct worker *w);

/* 1 if z is 32 lowercase hex characters (the only token shape we ever issue). */
int auth_token_valid(const char *z);

#endif
