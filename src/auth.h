/* auth.h -- login tokens to users, with a short per-worker cache.
 *
 * A token is the course's Redis hash login:token:<token> {id, nickName, icon}. Looking it
 * up costs a round trip, so each worker keeps what it saw for token_cache_ms (default 1 s)
 * and refreshes the sliding TTL (EXPIRE) at most once a minute per token rather than on
 * every request. Consequence, documented in docs/design.md: a logout takes effect on other
 * workers and instances within token_cache_ms. */
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

/* Stores a fresh login in Redis (HSET + EXPIRE) and calls done(r, ok). */
void auth_store_login(struct http_req *r, const char *token, const auth_user_t *u,
                      void (*done)(struct http_req *r, int ok));
/* Deletes the token in Redis and in this worker's cache; done(r, ok). */
void auth_logout(struct http_req *r, const char *token, void (*done)(struct http_req *r, int ok));

/* (added) Sliding-TTL refresh for a token sent to a public path, without waiting: a
 * fire-and-forget EXPIRE at most once a minute per token per worker (when the token is
 * not cached, a background lookup fills the cache). Never calls back. */
void auth_touch(struct worker *w, const char *token);

int auth_cache_init(struct worker *w);
void auth_cache_free(struct worker *w);

/* 1 if z is 32 lowercase hex characters (the only token shape we ever issue). */
int auth_token_valid(const char *z);

#endif
