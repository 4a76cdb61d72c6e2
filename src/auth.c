/* auth.c -- login tokens to users: the course's login:token:<t> hash, cached per worker.
 *
 * The cache is set-associative: 65536 slots in sets of 8, indexed by a seeded hash of
 * the token. A token lives in one set only, so lookups cost at most 8 compares, and the
 * cache can never grow past its slots: a new token in a full set replaces the entry
 * fetched longest ago. Entries are allocated when first used, so a worker that has seen
 * few tokens holds little memory.
 *
 * An entry says "this token is user U" or "this token is unknown" (negative caching, so
 * a stream of requests with a dead token costs Redis one lookup per token_cache_ms), as
 * fetched at fetched_at. It is trusted for token_cache_ms; after that the next request
 * looks the token up again. The sliding TTL (EXPIRE) is refreshed at most once a minute
 * per token per worker, fire-and-forget. A logout drops the token from every worker of
 * this process at once (worker_post); on other instances it takes effect within
 * token_cache_ms (docs/api-notes.md).
 *
 * Tokens are never logged. Everything here runs on the worker's own thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <hiredis/hiredis.h>

#include "app.h"
#include "auth.h"
#include "clock.h"
#include "http.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "rds.h"
#include "worker.h"

#define AUTH_SLOTS 65536u
#define AUTH_WAYS 8u
#define AUTH_REFRESH_MS 60000u

enum { E_FREE = 0, E_USER = 1, E_UNKNOWN = 2 };

typedef struct aent {
    uint8_t tok[16];            /* the token's 32 hex digits as bytes */
    int state;                  /* E_* */
    uint64_t fetched_at;        /* clock_mono_ms() of the Redis answer */
    uint64_t refreshed_at;      /* last EXPIRE sent from this worker */
    auth_user_t user;           /* valid when state == E_USER */
} aent_t;

struct auth_cache {
    aent_t **slots;             /* AUTH_SLOTS pointers, NULL until first used */
    uint64_t seed;
    uint64_t cache_ms;          /* cfg.token_cache_ms */
    uint64_t refresh_ms;        /* min(60 s, TTL / 2) */
    int ttl_s;                  /* cfg.token_ttl_s */
};

/* One lookup in flight (HGETALL). r and cb are NULL for a background lookup. */
typedef struct lookup {
    worker_t *w;
    http_req_t *r;
    auth_cb cb;
    char token[33];
} lookup_t;

/* One auth_store_login or auth_logout in flight. */
typedef struct op {
    worker_t *w;
    http_req_t *r;
    void (*done)(http_req_t *r, int ok);
    int left;                   /* replies still expected */
    int ok;
    char token[33];
    auth_user_t user;
} op_t;

/* ----------------------------------------------------------------- helpers */

int auth_token_valid(const char *z)
{
    if (z == NULL) {
        return 0;
    }
    for (int i = 0; i < 32; i++) {
        char c = z[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return 0;
        }
    }
    return z[32] == '\0';
}

static int hexval(char c)
{
    return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* token must be valid (auth_token_valid). */
static void tok_bytes(const char *token, uint8_t out[16])
{
    for (int i = 0; i < 16; i++) {
        out[i] = (uint8_t)(hexval(token[2 * i]) << 4 | hexval(token[2 * i + 1]));
    }
}

static uint64_t tok_hash(const struct auth_cache *ac, const uint8_t tok[16])
{
    uint64_t a, b;
    memcpy(&a, tok, 8);
    memcpy(&b, tok + 8, 8);
    uint64_t h = (a ^ ac->seed) * UINT64_C(0x9e3779b97f4a7c15);
    h ^= b + (h >> 29);
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    return h ^ (h >> 32);
}

static aent_t **tok_set(struct auth_cache *ac, const uint8_t tok[16])
{
    uint64_t h = tok_hash(ac, tok);
    return &ac->slots[(h & (AUTH_SLOTS - 1)) & ~(uint64_t)(AUTH_WAYS - 1)];
}

static aent_t *cache_find(struct auth_cache *ac, const uint8_t tok[16])
{
    aent_t **set = tok_set(ac, tok);
    for (unsigned i = 0; i < AUTH_WAYS; i++) {
        aent_t *e = set[i];
        if (e != NULL && e->state != E_FREE && memcmp(e->tok, tok, 16) == 0) {
            return e;
        }
    }
    return NULL;
}

/* Returns the entry to (re)fill for tok: its own, a free one, or the stalest of the set.
 * NULL only when out of memory (then the answer is simply not cached). */
static aent_t *cache_slot(struct auth_cache *ac, const uint8_t tok[16])
{
    aent_t **set = tok_set(ac, tok);
    aent_t **unused = NULL, **freed = NULL, **oldest = NULL;
    for (unsigned i = 0; i < AUTH_WAYS; i++) {
        aent_t *e = set[i];
        if (e == NULL) {
            if (unused == NULL) {
                unused = &set[i];
            }
        } else if (e->state == E_FREE) {
            if (freed == NULL) {
                freed = &set[i];
            }
        } else if (memcmp(e->tok, tok, 16) == 0) {
            return e;   /* its own entry: keep refreshed_at */
        } else if (oldest == NULL || e->fetched_at < (*oldest)->fetched_at) {
            oldest = &set[i];
        }
    }
    aent_t **pick = freed != NULL ? freed : unused != NULL ? unused : oldest;
    if (*pick == NULL) {
        *pick = malloc(sizeof(aent_t));
        if (*pick == NULL) {
            return NULL;
        }
    }
    memset(*pick, 0, sizeof(aent_t));
    memcpy((*pick)->tok, tok, 16);
    return *pick;
}

static void cache_put(worker_t *w, const char *token, int state, const auth_user_t *u,
                      uint64_t now, int refreshed)
{
    struct auth_cache *ac = w->auth;
    if (ac == NULL) {
        return;
    }
    uint8_t tok[16];
    tok_bytes(token, tok);
    aent_t *e = cache_slot(ac, tok);
    if (e == NULL) {
        return;
    }
    uint64_t prev_refresh = e->state == E_USER ? e->refreshed_at : 0;
    e->state = state;
    e->fetched_at = now;
    e->refreshed_at = refreshed ? now : prev_refresh;
    if (u != NULL) {
        e->user = *u;
    }
}

static void send_expire(worker_t *w, const char *token)
{
    char key[128];
    char ttl[24];
    int klen = key_login_token(key, sizeof(key), token);
    if (klen < 0) {
        return;
    }
    int tlen = snprintf(ttl, sizeof(ttl), "%d", w->auth ? w->auth->ttl_s : 1800);
    const char *argv[3] = { "EXPIRE", key, ttl };
    size_t lens[3] = { 6, (size_t)klen, (size_t)tlen };
    rds_command(w->rds, NULL, NULL, 3, argv, lens);
}

/* Copies a Redis string into dst (cap bytes with the NUL), cutting at a UTF-8
 * character boundary if it is too long. */
static void copy_utf8(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) {
            n--;   /* src[n] would be a continuation byte: back up to a lead byte */
        }
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int parse_pos_i64(const char *z, size_t n, int64_t *out)
{
    if (n == 0 || n > 19) {
        return -1;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (z[i] < '0' || z[i] > '9') {
            return -1;
        }
        v = v * 10 + (uint64_t)(z[i] - '0');
    }
    if (v == 0 || v > INT64_MAX) {
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* Reads an HGETALL reply into u: 1 found, 0 empty/malformed (unknown token). */
static int parse_user(const redisReply *rep, auth_user_t *u)
{
    int have_id = 0;
    memset(u, 0, sizeof(*u));
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
            continue;
        }
        if (f->len == 2 && memcmp(f->str, "id", 2) == 0) {
            have_id = parse_pos_i64(v->str, v->len, &u->id) == 0;
        } else if (f->len == 8 && memcmp(f->str, "nickName", 8) == 0) {
            copy_utf8(u->nick_name, sizeof(u->nick_name), v->str, v->len);
        } else if (f->len == 4 && memcmp(f->str, "icon", 4) == 0) {
            copy_utf8(u->icon, sizeof(u->icon), v->str, v->len);
        }
    }
    return have_id;
}

/* ----------------------------------------------------------------- resolving */

static void on_hgetall(struct redisReply *rep, void *priv)
{
    lookup_t *L = priv;
    worker_t *w = L->w;
    http_req_t *r = L->r;
    auth_cb cb = L->cb;
    auth_user_t u;
    int status;
    uint64_t now = clock_mono_ms();

    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        status = -1;
        if (rep != NULL) {
            log_warn("auth: unexpected reply type %d to HGETALL", rep->type);
        }
    } else if (rep->elements == 0) {
        status = 1;
        cache_put(w, L->token, E_UNKNOWN, NULL, now, 0);
    } else if (!parse_user(rep, &u)) {
        status = 1;
        log_warn("auth: a login hash has no valid id field; treating it as logged out");
        cache_put(w, L->token, E_UNKNOWN, NULL, now, 0);
    } else {
        status = 0;
        send_expire(w, L->token);   /* this request uses the token: slide its TTL */
        cache_put(w, L->token, E_USER, &u, now, 1);
    }
    free(L);
    if (cb != NULL) {
        cb(r, status, status == 0 ? &u : NULL);
    }
}

static void lookup_start(worker_t *w, http_req_t *r, auth_cb cb, const char *token)
{
    char key[128];
    int klen = key_login_token(key, sizeof(key), token);
    lookup_t *L = malloc(sizeof(*L));
    if (L == NULL || klen < 0) {
        free(L);
        if (cb != NULL) {
            cb(r, -1, NULL);
        }
        return;
    }
    L->w = w;
    L->r = r;
    L->cb = cb;
    memcpy(L->token, token, 33);
    const char *argv[2] = { "HGETALL", key };
    size_t lens[2] = { 7, (size_t)klen };
    rds_command(w->rds, on_hgetall, L, 2, argv, lens);
}

void auth_resolve(struct http_req *r, auth_cb cb)
{
    const char *token = r->authorization;
    if (!auth_token_valid(token)) {
        cb(r, 1, NULL);
        return;
    }
    worker_t *w = r->w;
    struct auth_cache *ac = w->auth;
    if (ac != NULL) {
        uint8_t tok[16];
        tok_bytes(token, tok);
        aent_t *e = cache_find(ac, tok);
        uint64_t now = clock_mono_ms();
        if (e != NULL && now - e->fetched_at < ac->cache_ms) {
            metric_inc(&w->m->token_cache_hits);
            if (e->state != E_USER) {
                cb(r, 1, NULL);
                return;
            }
            if (now - e->refreshed_at >= ac->refresh_ms) {
                e->refreshed_at = now;
                send_expire(w, token);
            }
            /* A copy: cb may end this request, and the next pipelined one may reuse e. */
            auth_user_t u = e->user;
            cb(r, 0, &u);
            return;
        }
    }
    lookup_start(w, r, cb, token);
}

void auth_touch(struct worker *w, const char *token)
{
    if (!auth_token_valid(token) || w->auth == NULL) {
        return;
    }
    struct auth_cache *ac = w->auth;
    uint8_t tok[16];
    tok_bytes(token, tok);
    aent_t *e = cache_find(ac, tok);
    uint64_t now = clock_mono_ms();
    if (e != NULL && e->state == E_USER) {
        /* Even a stale entry proves the token was real; EXPIRE on a key deleted since
         * then is a harmless no-op. */
        if (now - e->refreshed_at >= ac->refresh_ms) {
            e->refreshed_at = now;
            send_expire(w, token);
        }
        return;
    }
    if (e != NULL && now - e->fetched_at < ac->cache_ms) {
        return;   /* known to be unknown */
    }
    lookup_start(w, NULL, NULL, token);
}

/* ------------------------------------------------------------ login, logout */

static void on_op_reply(struct redisReply *rep, void *priv)
{
    op_t *op = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_INTEGER) {
        op->ok = 0;
    }
    if (--op->left > 0) {
        return;
    }
    http_req_t *r = op->r;
    void (*done)(http_req_t *, int) = op->done;
    int ok = op->ok;
    if (ok && op->user.id > 0) {
        cache_put(op->w, op->token, E_USER, &op->user, clock_mono_ms(), 1);
    }
    free(op);
    done(r, ok);
}

void auth_store_login(struct http_req *r, const char *token, const auth_user_t *u,
                      void (*done)(struct http_req *r, int ok))
{
    worker_t *w = r->w;
    char key[128], id[24], ttl[24];
    int klen = key_login_token(key, sizeof(key), token);
    op_t *op = calloc(1, sizeof(*op));
    if (op == NULL || klen < 0 || !auth_token_valid(token) || u->id <= 0) {
        free(op);
        done(r, 0);
        return;
    }
    op->w = w;
    op->r = r;
    op->done = done;
    op->left = 2;
    op->ok = 1;
    memcpy(op->token, token, 33);
    op->user = *u;
    int idlen = snprintf(id, sizeof(id), "%lld", (long long)u->id);
    int tlen = snprintf(ttl, sizeof(ttl), "%d", w->auth ? w->auth->ttl_s : w->app->cfg.token_ttl_s);
    const char *hset[8] = { "HSET", key, "id", id, "nickName", u->nick_name, "icon", u->icon };
    size_t hlen[8] = { 4, (size_t)klen, 2, (size_t)idlen, 8, strlen(u->nick_name), 4,
                       strlen(u->icon) };
    const char *exp[3] = { "EXPIRE", key, ttl };
    size_t elen[3] = { 6, (size_t)klen, (size_t)tlen };
    rds_command(w->rds, on_op_reply, op, 8, hset, hlen);
    /* op is still alive: it is freed by the second reply, which needs the second send. */
    rds_command(w->rds, on_op_reply, op, 3, exp, elen);
}

/* Runs on another worker: forget a token logged out elsewhere in this process. */
static void on_forget(worker_t *w, void *arg)
{
    if (w->auth != NULL) {
        aent_t *e = cache_find(w->auth, arg);
        if (e != NULL) {
            e->state = E_FREE;
        }
    }
    free(arg);
}

/* Tells the other workers of this process to drop the token, so a logout is seen at once
 * by the whole process and only other instances wait out token_cache_ms. Skipped while
 * stopping: a worker that has left its loop would never run (and free) the message. */
static void forget_everywhere(worker_t *self, const uint8_t tok[16])
{
    struct app *app = self->app;
    if (app == NULL || app->workers == NULL || atomic_load(&app->stopping)) {
        return;
    }
    for (int i = 0; i < app->nworkers; i++) {
        worker_t *other = app->workers[i];
        if (other == NULL || other == self) {
            continue;
        }
        uint8_t *copy = malloc(16);
        if (copy == NULL) {
            continue;
        }
        memcpy(copy, tok, 16);
        worker_post(other, on_forget, copy);
    }
}

void auth_logout(struct http_req *r, const char *token, void (*done)(struct http_req *r, int ok))
{
    worker_t *w = r->w;
    char key[128];
    int klen = auth_token_valid(token) ? key_login_token(key, sizeof(key), token) : -1;
    op_t *op = klen < 0 ? NULL : calloc(1, sizeof(*op));
    if (op == NULL) {
        done(r, 0);
        return;
    }
    uint8_t tok[16];
    tok_bytes(token, tok);
    if (w->auth != NULL) {
        aent_t *e = cache_find(w->auth, tok);
        if (e != NULL) {
            e->state = E_FREE;
        }
    }
    forget_everywhere(w, tok);
    op->w = w;
    op->r = r;
    op->done = done;
    op->left = 1;
    op->ok = 1;
    const char *argv[2] = { "DEL", key };
    size_t lens[2] = { 3, (size_t)klen };
    rds_command(w->rds, on_op_reply, op, 2, argv, lens);
}

/* ------------------------------------------------------------------ lifetime */

int auth_cache_init(struct worker *w)
{
    struct auth_cache *ac = calloc(1, sizeof(*ac));
    if (ac == NULL) {
        return -1;
    }
    ac->slots = calloc(AUTH_SLOTS, sizeof(aent_t *));
    if (ac->slots == NULL) {
        free(ac);
        return -1;
    }
    if (getrandom(&ac->seed, sizeof(ac->seed), 0) != (ssize_t)sizeof(ac->seed)) {
        ac->seed = (uint64_t)clock_mono_ns() ^ (uint64_t)(uintptr_t)ac;
    }
    const config_t *cfg = &w->app->cfg;
    ac->cache_ms = cfg->token_cache_ms > 0 ? (uint64_t)cfg->token_cache_ms : 0;
    ac->ttl_s = cfg->token_ttl_s > 0 ? cfg->token_ttl_s : 1800;
    ac->refresh_ms = (uint64_t)ac->ttl_s * 1000u / 2u;
    if (ac->refresh_ms > AUTH_REFRESH_MS) {
        ac->refresh_ms = AUTH_REFRESH_MS;
    }
    w->auth = ac;
    return 0;
}

void auth_cache_free(struct worker *w)
{
    struct auth_cache *ac = w->auth;
    if (ac == NULL) {
        return;
    }
    w->auth = NULL;
    for (size_t i = 0; i < AUTH_SLOTS; i++) {
        free(ac->slots[i]);
    }
    free(ac->slots);
    free(ac);
}
