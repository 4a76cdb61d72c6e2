/* auth.c -- login tokens to users: signed tokens checked in memory, the course's
 * login:token:<t> hash looked up and cached per worker for what they cannot decide, and,
 * where accepted, for course-style tokens within the unknown-token budgets (auth.h).
 *
 * The cache is set-associative: 65536 slots in sets of 8, indexed by a seeded hash of
 * the token. A token lives in one set only, so lookups cost at most 8 compares, and the
 * cache can never grow past its slots: a new token in a full set replaces the entry
 * fetched longest ago. Entries are allocated when first used, so a worker that has seen
 * few tokens holds little memory.
 *
 * An entry says "this token is user U" or "this token is unknown" (negative caching, so
 * a stream of requests with a dead token costs Redis one lookup per token_cache_ms), as
 * fetched at fetched_at; it is trusted for token_cache_ms. A signed token needs no entry
 * at all until its TTL is due for a refresh; then an entry (E_SIGNED, or its lookup
 * entry) records when this worker last sent EXPIRE and until when that EXPIRE keeps it
 * alive (alive_until), so a token used for longer than the TTL stays local too.
 *
 * Sliding expiry: a used token whose last refresh known to this worker (its issue time
 * for a signed token, the worker's own EXPIRE otherwise) is token_refresh_s old is queued;
 * a 1 ms timer sends the queue as pipelined EXPIREs after the answers of that loop turn.
 * An EXPIRE answered 0 means the hash is gone (deleted outside a logout, or expired):
 * the token is then revoked in this worker.
 *
 * Tokens are never logged. Everything here runs on the worker's own thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "core/app.h"
#include "auth/auth.h"
#include "auth/guard.h"
#include "core/clock.h"
#include "http/clientip.h"
#include "http/http.h"
#include "core/key.h"
#include "core/log.h"
#include "server/metrics.h"
#include "redis/rds.h"
#include "auth/revoke.h"
#include "sale/ratelimit.h"
#include "core/rnd.h"
#include "core/sb.h"
#include "auth/token.h"
#include "server/worker.h"
#include "core/xmem.h"

#define AUTH_SLOTS 65536u
#define AUTH_WAYS 8u
#define REFRESH_QUEUE_MAX 4096u
#define REFRESH_FLUSH_US 1000
#define BUDGET_ENTRIES 4096u    /* clients tracked per worker by the lookup budget */

enum { E_FREE = 0, E_USER = 1, E_UNKNOWN = 2, E_SIGNED = 3 };

typedef struct aent {
    uint8_t tok[16];            /* the token's 32 hex digits as bytes */
    int state;                  /* E_* */
    uint64_t fetched_at;        /* clock_mono_ms() of the Redis answer (E_USER, E_UNKNOWN) */
    uint64_t refreshed_ms;      /* wall ms of the last EXPIRE sent from this worker */
    uint64_t alive_until;       /* wall ms: an answered EXPIRE keeps the hash until then */
    auth_user_t user;           /* valid when state == E_USER */
} aent_t;

struct auth_cache {
    aent_t **slots;             /* AUTH_SLOTS pointers, NULL until first used */
    uint64_t seed;
    uint64_t cache_ms;          /* cfg.token_cache_ms */
    uint64_t refresh_ms;        /* min(token_refresh_s, TTL / 2) */
    uint64_t ttl_ms;
    int ttl_s;                  /* cfg.token_ttl_s */
    const token_signer_t *signer; /* app->signer: NULL = opaque tokens only */
    int accept_opaque;          /* look up tokens that do not verify (opaque format: always) */
    uint64_t max_age_ms;        /* cfg.token_max_age_s; 0 = none */
    guard_t *budget_ip;         /* unknown-token lookups per client (NULL = off) */
    guard_t *budget_all;        /* ... and for the worker, key 0 (NULL = off) */
    struct event *flush_ev;     /* sends the refresh queue */
    uint8_t (*queue)[16];       /* tokens waiting for their EXPIRE */
    unsigned nqueue;
    uint8_t last_minted[16];    /* auth_new_token: never the same token twice in a row */
};

/* One EXPIRE in flight. */
typedef struct refresh {
    worker_t *w;
    uint8_t tok[16];
    uint64_t sent_ms;           /* wall */
} refresh_t;

/* One lookup in flight (HGETALL). r and cb are NULL for a background lookup. */
typedef struct lookup {
    worker_t *w;
    http_req_t *r;
    auth_cb cb;
    int budgeted;               /* a token that does not verify: an unknown answer is charged */
    uint64_t client;            /* its client's budget key */
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
    return token_shape_ok(z);
}

int auth_ttl_s(const struct worker *w)
{
    return w->auth != NULL ? w->auth->ttl_s : w->app->cfg.token_ttl_s;
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

/* Returns the entry to (re)fill for tok: its own, a free one, or the stalest of the set. */
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
            return e;   /* its own entry: keep its refresh bookkeeping */
        } else if (oldest == NULL || e->fetched_at < (*oldest)->fetched_at) {
            oldest = &set[i];
        }
    }
    aent_t **pick = freed != NULL ? freed : unused != NULL ? unused : oldest;
    if (*pick == NULL) {
        *pick = xmalloc(sizeof(aent_t));
    }
    memset(*pick, 0, sizeof(aent_t));
    memcpy((*pick)->tok, tok, 16);
    return *pick;
}

/* Fills tok's entry with a lookup result (E_USER or E_UNKNOWN) fetched at now (mono).
 * Returns the entry (NULL only before the cache exists). */
static aent_t *cache_put(worker_t *w, const uint8_t tok[16], int state, const auth_user_t *u,
                         uint64_t now)
{
    struct auth_cache *ac = w->auth;
    if (ac == NULL) {
        return NULL;
    }
    aent_t *e = cache_slot(ac, tok);
    e->state = state;
    e->fetched_at = now;
    if (u != NULL) {
        e->user = *u;
    }
    return e;
}

void auth_forget(struct worker *w, const uint8_t tok[16])
{
    if (w->auth != NULL) {
        aent_t *e = cache_find(w->auth, tok);
        if (e != NULL) {
            e->state = E_FREE;
        }
    }
}

/* ----------------------------------------------------------------- sliding expiry */

static void on_refresh(struct redisReply *rep, void *priv)
{
    refresh_t *f = priv;
    worker_t *w = f->w;
    struct auth_cache *ac = w->auth;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER && ac != NULL) {
        if (rep->integer == 1) {
            aent_t *e = cache_find(ac, f->tok);
            if (e != NULL && f->sent_ms + ac->ttl_ms > e->alive_until) {
                e->alive_until = f->sent_ms + ac->ttl_ms;   /* Redis set it after we sent */
            }
        } else {
            /* The hash is gone: logged out elsewhere, deleted or expired. */
            revoke_add(w, f->tok, revoke_now_ms() + ac->ttl_ms);
            auth_forget(w, f->tok);
        }
    }
    free(f);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    worker_t *w = arg;
    struct auth_cache *ac = w->auth;
    (void)fd;
    (void)what;
    char ttl[24];
    int tlen = snprintf(ttl, sizeof(ttl), "%d", ac->ttl_s);
    uint64_t now = revoke_now_ms();
    unsigned n = ac->nqueue;
    ac->nqueue = 0;
    for (unsigned i = 0; i < n; i++) {
        static const char hex[] = "0123456789abcdef";
        char token[33], key[128];
        for (int k = 0; k < 16; k++) {
            token[2 * k] = hex[ac->queue[i][k] >> 4];
            token[2 * k + 1] = hex[ac->queue[i][k] & 15];
        }
        token[32] = '\0';
        int klen = key_login_token(key, sizeof(key), token);
        if (klen < 0) {
            continue;
        }
        refresh_t *f = xmalloc(sizeof(*f));
        f->w = w;
        memcpy(f->tok, ac->queue[i], 16);
        f->sent_ms = now;
        const char *argv[3] = { "EXPIRE", key, ttl };
        size_t lens[3] = { 6, (size_t)klen, (size_t)tlen };
        /* Back to back on one connection: hiredis writes them out together. */
        rds_command(w->rds, on_refresh, f, 3, argv, lens);
    }
}

/* Queues an EXPIRE for tok if its last known refresh (last_ms, wall) is token_refresh_s
 * old; e is its entry or NULL, in which case one is made to remember the refresh.
 * Returns 1 if queued. */
static int maybe_refresh(worker_t *w, aent_t *e, const uint8_t tok[16], uint64_t last_ms,
                         uint64_t now_ms)
{
    struct auth_cache *ac = w->auth;
    if (e != NULL && e->refreshed_ms > last_ms) {
        last_ms = e->refreshed_ms;
    }
    if (now_ms < last_ms + ac->refresh_ms) {
        return 0;
    }
    if (e == NULL) {
        e = cache_slot(ac, tok);
        if (e->state == E_FREE) {
            e->state = E_SIGNED;
        }
    }
    if (ac->nqueue >= REFRESH_QUEUE_MAX) {
        return 0;   /* a burst of new tokens: the next request of each tries again */
    }
    if (e != NULL) {
        e->refreshed_ms = now_ms;
    }
    memcpy(ac->queue[ac->nqueue++], tok, 16);
    if (ac->nqueue == 1) {
        struct timeval tv = { 0, REFRESH_FLUSH_US };
        event_add(ac->flush_ev, &tv);
    }
    return 1;
}

/* 1 if a verified token is older than the absolute lifetime. now: wall ms. */
static int too_old(const struct auth_cache *ac, int64_t issued, uint64_t now)
{
    return ac->max_age_ms != 0 && now >= (uint64_t)issued * 1000u + ac->max_age_ms;
}

/* 1 if a verified token (issued at `issued`, user uid) is dead whatever Redis says:
 * revoked, issued before its user logged out everywhere, or too old. now: wall ms. */
static int signed_dead(worker_t *w, const uint8_t tok[16], int64_t uid, int64_t issued,
                       uint64_t now)
{
    return revoke_state(w, tok, uid, issued) == REVOKE_DEAD || too_old(w->auth, issued, now);
}

/* Local verdict on a verified token: 1 accepted, 0 refused (dead), -1 not decidable
 * here (past its known life, issued before the revocation set's epoch, or no live
 * subscription: ask Redis). Queues the TTL refresh when one is due. now: wall ms
 * (clock_now_wall_ms). */
static int signed_check(worker_t *w, const uint8_t tok[16], int64_t uid, int64_t issued,
                        uint64_t now)
{
    struct auth_cache *ac = w->auth;
    int st = revoke_state(w, tok, uid, issued);
    if (st == REVOKE_DEAD || too_old(ac, issued, now)) {
        return 0;
    }
    if (st == REVOKE_ASK) {
        return -1;
    }
    /* The login set the TTL just after born -- or up to a second before it, for a token
     * minted as of the next second (auth_new_token): alive counts from that second. */
    uint64_t born = (uint64_t)issued * 1000u;
    uint64_t alive = born - 1000u + ac->ttl_ms;
    if (now < born + ac->refresh_ms) {
        /* Younger than a refresh interval (refresh_ms <= ttl_ms): alive whatever its entry
         * says, and no refresh due, so the cache (a likely cache miss) is not consulted. */
        return 1;
    }
    aent_t *e = cache_find(ac, tok);
    if (e != NULL && e->alive_until > alive) {
        alive = e->alive_until;
    }
    if (now >= alive) {
        return -1;
    }
    maybe_refresh(w, e, tok, born, now);
    return 1;
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
            have_id = sb_parse_pos(v->str, v->len, &u->id) == 0;
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
    uint8_t tok[16];
    token_bytes(L->token, tok);

    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        status = -1;
        if (rep != NULL) {
            log_warn("auth: unexpected reply type %d to HGETALL", rep->type);
        }
    } else if (rep->elements == 0) {
        status = 1;
        cache_put(w, tok, E_UNKNOWN, NULL, now);
    } else if (!parse_user(rep, &u)) {
        status = 1;
        log_warn("auth: a login hash has no valid id field; treating it as logged out");
        cache_put(w, tok, E_UNKNOWN, NULL, now);
    } else if (revoke_has(w, tok)) {
        status = 1;   /* revoked while the lookup was out: the DEL is on its way */
    } else {
        L->budgeted = 0;   /* found: costs no budget */
        status = 0;
        aent_t *e = cache_put(w, tok, E_USER, &u, now);
        /* This request uses the token: slide its TTL (when this worker has not lately). */
        maybe_refresh(w, e, tok, 0, revoke_now_ms());
    }
    if (L->budgeted && status == 1 && w->auth != NULL) {
        uint64_t mono = clock_mono_ms();
        guard_charge(w->auth->budget_ip, L->client, mono);
        guard_charge(w->auth->budget_all, 0, mono);
    }
    free(L);
    if (cb != NULL) {
        cb(r, status, status == 0 ? &u : NULL);
    }
}

/* A token that does not verify may be looked up only within the unknown-token budgets
 * (auth.h): 1 if it may, with its client's key in *client; 0 (counted) if not. */
static int budget_allows(worker_t *w, const http_req_t *r, uint64_t *client)
{
    struct auth_cache *ac = w->auth;
    *client = 0;
    if (ac->budget_ip == NULL && ac->budget_all == NULL) {
        return 1;
    }
    if (ac->budget_ip != NULL) {
        char buf[64];
        *client = ratelimit_key_ip(clientip_of(w->app->trusted, r->peer, r->forwarded_for,
                                               buf, sizeof buf));
    }
    uint64_t mono = clock_mono_ms();
    if (guard_ok(ac->budget_ip, *client, mono) && guard_ok(ac->budget_all, 0, mono)) {
        return 1;
    }
    shard_inc(&w->m->token_lookups_refused);
    return 0;
}

static void lookup_start(worker_t *w, http_req_t *r, auth_cb cb, const char *token, int budgeted,
                         uint64_t client)
{
    char key[128];
    int klen = key_login_token(key, sizeof(key), token);
    if (klen < 0) {
        if (cb != NULL) {
            cb(r, -1, NULL);
        }
        return;
    }
    lookup_t *L = xmalloc(sizeof(*L));
    L->w = w;
    L->r = r;
    L->cb = cb;
    L->budgeted = budgeted;
    L->client = client;
    memcpy(L->token, token, 33);
    const char *argv[2] = { "HGETALL", key };
    size_t lens[2] = { 7, (size_t)klen };
    rds_command(w->rds, on_hgetall, L, 2, argv, lens);
}

static void resolve(struct http_req *r, auth_cb cb, int profile)
{
    const char *token = r->authorization;
    uint8_t tok[16];
    if (!token_parse(token, tok)) {
        cb(r, 1, NULL);
        return;
    }
    worker_t *w = r->w;
    struct auth_cache *ac = w->auth;
    int64_t uid, issued;
    int verified = ac != NULL && ac->signer != NULL &&
                   token_verify_bytes(ac->signer, tok, &uid, &issued);
    if (verified) {
        uint64_t now = clock_now_wall_ms();
        int v = profile ? (signed_dead(w, tok, uid, issued, now) ? 0 : -1)
                        : signed_check(w, tok, uid, issued, now);
        if (v >= 0) {
            shard_inc(&w->m->token_cache_hits);
            if (v == 0) {
                cb(r, 1, NULL);
                return;
            }
            auth_user_t u;
            u.id = uid;
            u.nick_name[0] = '\0';
            u.icon[0] = '\0';
            cb(r, 0, &u);
            return;
        }
    } else if (ac != NULL && !ac->accept_opaque) {
        cb(r, 1, NULL);   /* signed format: what does not verify is no token (no Redis) */
        return;
    }
    int known = 0;   /* found in Redis before: its lookup costs no budget */
    if (ac != NULL) {
        aent_t *e = cache_find(ac, tok);
        uint64_t now = clock_mono_ms();
        known = e != NULL && e->state == E_USER;
        if (e != NULL && (e->state == E_USER || e->state == E_UNKNOWN) &&
            now - e->fetched_at < ac->cache_ms) {
            shard_inc(&w->m->token_cache_hits);
            if (e->state != E_USER || revoke_has(w, tok)) {
                cb(r, 1, NULL);
                return;
            }
            maybe_refresh(w, e, tok, 0, revoke_now_ms());
            /* A copy: cb may end this request, and the next pipelined one may reuse e. */
            auth_user_t u = e->user;
            cb(r, 0, &u);
            return;
        }
    }
    uint64_t client = 0;
    int budgeted = !verified && !known;
    if (budgeted && ac != NULL && !budget_allows(w, r, &client)) {
        cb(r, 1, NULL);
        return;
    }
    lookup_start(w, r, cb, token, budgeted, client);
}

void auth_resolve(struct http_req *r, auth_cb cb)
{
    resolve(r, cb, 0);
}

void auth_resolve_profile(struct http_req *r, auth_cb cb)
{
    resolve(r, cb, 1);
}

void auth_touch(struct http_req *r, const char *token)
{
    worker_t *w = r->w;
    uint8_t tok[16];
    if (w->auth == NULL || !token_parse(token, tok)) {
        return;
    }
    struct auth_cache *ac = w->auth;
    if (revoke_has(w, tok)) {
        return;
    }
    int64_t uid, issued;
    aent_t *e = cache_find(ac, tok);
    if (ac->signer != NULL && token_verify_bytes(ac->signer, tok, &uid, &issued)) {
        /* Proven ours: refresh when due, unless it is dead (then its hash is left to
         * expire). An EXPIRE of a hash gone since is a no-op answered 0, which revokes the
         * token here. */
        uint64_t now = revoke_now_ms();
        if (!signed_dead(w, tok, uid, issued, now)) {
            maybe_refresh(w, e, tok, (uint64_t)issued * 1000u, now);
        }
        return;
    }
    if (ac->signer != NULL && !ac->accept_opaque) {
        return;   /* no token */
    }
    uint64_t now = clock_mono_ms();
    if (e != NULL && e->state == E_USER) {
        /* Even a stale entry proves the token was real. */
        maybe_refresh(w, e, tok, 0, revoke_now_ms());
        return;
    }
    if (e != NULL && e->state == E_UNKNOWN && now - e->fetched_at < ac->cache_ms) {
        return;   /* known to be unknown */
    }
    uint64_t client;
    if (budget_allows(w, r, &client)) {
        lookup_start(w, NULL, NULL, token, 1, client);
    }
}

/* ------------------------------------------------------------ login, logout */

int auth_new_token(struct worker *w, int64_t user_id, char out[33])
{
    struct auth_cache *ac = w->auth;
    uint8_t raw[16];
    if (ac != NULL && ac->signer != NULL && user_id > 0 && user_id <= (int64_t)UINT32_MAX) {
        if (getrandom(raw, 16, 0) != 16) {
            return -1;
        }
        /* A login in the second of a "log out everywhere" or of an epoch (revoke.h): its
         * token must not count as issued before it, so it is minted as of the next. */
        int64_t now = clock_wall_s(), nbf = revoke_user_nbf_s(w, user_id),
                epoch = revoke_epoch_s(w);
        if (nbf > now) {
            now = nbf;
        }
        if (epoch > now) {
            now = epoch;
        }
        /* Two logins of a user in one second, or a logout and a login, must not share a
         * token (1 in 1024 by chance): another nonce makes another token. */
        for (int i = 0; i < 8; i++) {
            uint16_t nonce = (uint16_t)(raw[2 * i] << 8 | raw[2 * i + 1]);
            if (token_mint(ac->signer, user_id, now, nonce, out) != 0) {
                break;
            }
            uint8_t tok[16];
            token_bytes(out, tok);
            if (!revoke_has(w, tok) && memcmp(tok, ac->last_minted, 16) != 0) {
                memcpy(ac->last_minted, tok, 16);
                return 0;
            }
        }
    } else if (ac != NULL && ac->signer != NULL && !ac->accept_opaque) {
        log_warn("login of user %lld: an id above 2^32-1 gets a random token, which this "
                 "signed-format server accepts only with --token-accept-opaque",
                 (long long)user_id);
    }
    return rnd_hex(out, 16);
}

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
        uint8_t tok[16];
        token_bytes(op->token, tok);
        aent_t *e = cache_put(op->w, tok, E_USER, &op->user, clock_mono_ms());
        if (e != NULL) {
            e->refreshed_ms = revoke_now_ms();   /* the login's own EXPIRE */
        }
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
    if (klen < 0 || !auth_token_valid(token) || u->id <= 0) {
        done(r, 0);
        return;
    }
    op_t *op = xcalloc(1, sizeof(*op));
    op->w = w;
    op->r = r;
    op->done = done;
    op->left = 2;
    op->ok = 1;
    memcpy(op->token, token, 33);
    op->user = *u;
    int idlen = snprintf(id, sizeof(id), "%lld", (long long)u->id);
    int tlen = snprintf(ttl, sizeof(ttl), "%d", auth_ttl_s(w));
    const char *hset[8] = { "HSET", key, "id", id, "nickName", u->nick_name, "icon", u->icon };
    size_t hlen[8] = { 4, (size_t)klen, 2, (size_t)idlen, 8, strlen(u->nick_name), 4,
                       strlen(u->icon) };
    const char *exp[3] = { "EXPIRE", key, ttl };
    size_t elen[3] = { 6, (size_t)klen, (size_t)tlen };
    rds_command(w->rds, on_op_reply, op, 8, hset, hlen);
    /* op is still alive: it is freed by the second reply, which needs the second send. */
    rds_command(w->rds, on_op_reply, op, 3, exp, elen);
}

/* A revocation told to the other workers of this process: a token, or a user's
 * not-before second (uid > 0). */
typedef struct forget_msg {
    uint8_t tok[16];
    int64_t uid, nbf_s;
    uint64_t until_ms;
} forget_msg_t;

static void revoke_here(worker_t *w, const forget_msg_t *m)
{
    if (m->uid > 0) {
        revoke_user_add(w, m->uid, m->nbf_s, m->until_ms);
    } else {
        revoke_add(w, m->tok, m->until_ms);
        auth_forget(w, m->tok);
    }
}

/* Runs on another worker of this process: the logout is known here before its PUBLISH
 * comes back, and even while that worker's subscription is down. */
static void on_forget(worker_t *w, void *arg)
{
    revoke_here(w, arg);
    free(arg);
}

/* In this worker at once, in the others of the process by a message. Skipped while
 * stopping: a worker that has left its loop would never run (and free) the message. */
static void revoke_everywhere(worker_t *self, const forget_msg_t *m)
{
    revoke_here(self, m);
    struct app *app = self->app;
    if (app == NULL || app->workers == NULL || atomic_load(&app->stopping)) {
        return;
    }
    for (int i = 0; i < app->nworkers; i++) {
        worker_t *other = app->workers[i];
        if (other == NULL || other == self) {
            continue;
        }
        forget_msg_t *copy = xmalloc(sizeof(*copy));
        *copy = *m;
        worker_post(other, on_forget, copy);
    }
}

/* Sends a revocation's durable record, then its news: ZADD, the prune, PUBLISH, counted
 * in op->left by the caller. */
static void revoke_send(worker_t *w, op_t *op, const char *member, size_t mlen, uint64_t until,
                        uint64_t now)
{
    char su[24], sn[24];
    int lu = snprintf(su, sizeof(su), "%llu", (unsigned long long)until);
    int ln = snprintf(sn, sizeof(sn), "%llu", (unsigned long long)now);
    const char *zadd[4] = { "ZADD", KEY_REVOKED, su, member };
    size_t zaddl[4] = { 4, strlen(KEY_REVOKED), (size_t)lu, mlen };
    const char *zrem[4] = { "ZREMRANGEBYSCORE", KEY_REVOKED, "-inf", sn };
    size_t zreml[4] = { 16, strlen(KEY_REVOKED), 4, (size_t)ln };
    const char *pub[3] = { "PUBLISH", CHANNEL_REVOKE, member };
    size_t publ[3] = { 7, strlen(CHANNEL_REVOKE), mlen };
    rds_command(w->rds, on_op_reply, op, 4, zadd, zaddl);
    rds_command(w->rds, on_op_reply, op, 4, zrem, zreml);
    rds_command(w->rds, on_op_reply, op, 3, pub, publ);
}

/* auth_logout, and with uid > 0 auth_logout_all too. */
static void logout(struct http_req *r, const char *token, int64_t uid,
                   void (*done)(struct http_req *r, int ok))
{
    worker_t *w = r->w;
    char key[128];
    int klen = auth_token_valid(token) ? key_login_token(key, sizeof(key), token) : -1;
    if (klen < 0) {
        done(r, 0);
        return;
    }
    op_t *op = xcalloc(1, sizeof(*op));
    /* Kept until a cache anywhere could still think the token alive: its last EXPIRE
     * (at most now) plus the TTL. */
    uint64_t now = revoke_now_ms();
    uint64_t until = now + (uint64_t)auth_ttl_s(w) * 1000u;
    forget_msg_t m;
    memset(&m, 0, sizeof m);
    token_bytes(token, m.tok);
    m.until_ms = until;
    revoke_everywhere(w, &m);
    char tmember[REVOKE_MEMBER_MAX], umember[REVOKE_MEMBER_MAX];
    int tlen = revoke_member(m.tok, 0, 0, tmember), ulen = 0;
    if (uid > 0) {
        /* Every token issued up to this second: a login later in this second is minted
         * as of the next (auth_new_token). */
        m.uid = uid;
        m.nbf_s = (int64_t)(now / 1000u) + 1;
        revoke_everywhere(w, &m);
        ulen = revoke_member(NULL, uid, m.nbf_s, umember);
    }
    op->w = w;
    op->r = r;
    op->done = done;
    op->left = uid > 0 ? 7 : 4;
    op->ok = 1;
    const char *del[2] = { "DEL", key };
    size_t dell[2] = { 3, (size_t)klen };
    /* The durable record first, then the news, then the hash: a worker that reloads the
     * set or hears the news never finds the hash deleted but the token not revoked. op
     * lives until the last reply, which cannot come before the last send. */
    revoke_send(w, op, tmember, (size_t)tlen, until, now);
    if (uid > 0) {
        revoke_send(w, op, umember, (size_t)ulen, until, now);
    }
    rds_command(w->rds, on_op_reply, op, 2, del, dell);
}

void auth_logout(struct http_req *r, const char *token, void (*done)(struct http_req *r, int ok))
{
    logout(r, token, 0, done);
}

void auth_logout_all(struct http_req *r, const char *token, int64_t uid,
                     void (*done)(struct http_req *r, int ok))
{
    if (uid <= 0) {
        done(r, 0);
        return;
    }
    logout(r, token, uid, done);
}

/* ------------------------------------------------------------------ lifetime */

int auth_cache_init(struct worker *w)
{
    struct auth_cache *ac = xcalloc(1, sizeof(*ac));
    ac->slots = xcalloc(AUTH_SLOTS, sizeof(aent_t *));
    ac->queue = xmalloc(REFRESH_QUEUE_MAX * sizeof(*ac->queue));
    ac->flush_ev = evtimer_new(w->base, on_flush, w);
    if (ac->flush_ev == NULL) {   /* libevent's own failure, not memory */
        free(ac->queue);
        free(ac->slots);
        free(ac);
        return -1;
    }
    if (getrandom(&ac->seed, sizeof(ac->seed), 0) != (ssize_t)sizeof(ac->seed)) {
        ac->seed = (uint64_t)clock_mono_ns() ^ (uint64_t)(uintptr_t)ac;
    }
    const config_t *cfg = &w->app->cfg;
    ac->cache_ms = cfg->token_cache_ms > 0 ? (uint64_t)cfg->token_cache_ms : 0;
    ac->ttl_s = cfg->token_ttl_s > 0 ? cfg->token_ttl_s : 1800;
    ac->ttl_ms = (uint64_t)ac->ttl_s * 1000u;
    ac->refresh_ms = (uint64_t)(cfg->token_refresh_s > 0 ? cfg->token_refresh_s : 60) * 1000u;
    if (ac->refresh_ms > ac->ttl_ms / 2) {
        ac->refresh_ms = ac->ttl_ms / 2;
    }
    ac->signer = w->app->signer;
    ac->accept_opaque = cfg->token_accept_opaque || ac->signer == NULL;
    ac->max_age_ms = cfg->token_max_age_s > 0 ? (uint64_t)cfg->token_max_age_s * 1000u : 0;
    /* The instance's budgets, split over the workers like ratelimit.h's per-worker ones. */
    double per_s, burst;
    int threads = cfg->threads > 0 ? cfg->threads : 1;
    ratelimit_per_worker(cfg->rate_ip_token_lookup.per_s, cfg->rate_ip_token_lookup.burst,
                         threads, &per_s, &burst);
    ac->budget_ip = guard_new(per_s, burst, BUDGET_ENTRIES);
    ratelimit_per_worker(cfg->token_lookup_budget.per_s, cfg->token_lookup_budget.burst,
                         threads, &per_s, &burst);
    ac->budget_all = guard_new(per_s, burst, 8);
    w->auth = ac;
    return 0;
}

/* After rds_free: no EXPIRE reply can come any more. */
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
    event_free(ac->flush_ev);
    guard_free(ac->budget_ip);
    guard_free(ac->budget_all);
    free(ac->queue);
    free(ac->slots);
    free(ac);
}
