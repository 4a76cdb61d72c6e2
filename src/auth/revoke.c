/* revoke.c -- the per-worker revocation set and its pub/sub subscription (see revoke.h).
 *
 * The set is an open-addressing hash table of 16-byte tokens with an expiry, grown at
 * half load; expired entries are dropped when it is rebuilt. Logouts are rare next to
 * requests, so it stays small (one entry per logout within a token TTL).
 *
 * The subscriber is a second hiredis async connection on the worker's loop, in subscribe
 * mode for its whole life:
 *
 *   DOWN --tick--> CONNECTING (connect, rconn_hello's AUTH/SELECT, SUBSCRIBE pipelined)
 *        --"subscribe" confirmation--> RELOADING (ZRANGEBYSCORE on the worker's rds)
 *        --reply--> LIVE
 *   any loss, error or a setup older than SETUP_MS --> DOWN (retry after RETRY_MS)
 *
 * A 50 ms tick drives retries and the setup deadline (a reload that failed because the
 * worker's own connection was not up yet is retried on the next tick). Only LIVE lets auth.c accept a
 * token without Redis. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "redis/rds.h"
#include "auth/revoke.h"
#include "auth/token.h"
#include "core/url.h"
#include "server/worker.h"
#include "core/xmem.h"
#include "redis/rconn.h"

#define TICK_MS 50
#define SETUP_MS 2000
#define RETRY_MS 250
#define KEEPALIVE_S 1

enum { S_DOWN, S_CONNECTING, S_RELOADING, S_LIVE };

typedef struct rslot {
    uint8_t tok[16];            /* a token, or a user's key (user_key) */
    uint64_t until_ms;          /* 0 = empty */
    int64_t nbf_s;              /* a user's key: its tokens issued before this are dead */
} rslot_t;

struct revoke {
    worker_t *w;
    url_redis_t addr;
    uint64_t ttl_ms;            /* a heard revocation is kept this long */
    revoke_heard_fn heard;      /* may be NULL */
    redisAsyncContext *ac;
    struct event *tick;
    int state;
    int closing;
    unsigned gen;               /* bumped per connection: stale reload replies are ignored */
    uint64_t since_ms;          /* mono: when the current state began */
    int reload_pending;         /* a ZRANGEBYSCORE is out */
    int was_live;
    rslot_t *slots;
    size_t cap, used;           /* cap a power of two */
    size_t nusers;              /* user entries among them (0: revoke_user_nbf_s is free) */
    int64_t epoch_s;            /* the newest epoch of seckill:revoked seen (revoke.h) */
};

uint64_t revoke_now_ms(void)
{
    return clock_wall_ms();
}

/* ----------------------------------------------------------------- the set */

static size_t slot_of(const uint8_t tok[16], size_t cap)
{
    uint64_t a;
    memcpy(&a, tok + 8, 8);   /* the MAC bytes of a signed token: already uniform */
    a ^= a >> 31;
    a *= UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(a >> 17) & (cap - 1);
}

/* Returns 1 if tok was new to the table. */
static int set_insert(rslot_t *slots, size_t cap, size_t *used, const uint8_t tok[16],
                      uint64_t until, int64_t nbf_s)
{
    for (size_t i = slot_of(tok, cap);; i = (i + 1) & (cap - 1)) {
        if (slots[i].until_ms == 0) {
            memcpy(slots[i].tok, tok, 16);
            slots[i].until_ms = until;
            slots[i].nbf_s = nbf_s;
            (*used)++;
            return 1;
        }
        if (memcmp(slots[i].tok, tok, 16) == 0) {
            if (until > slots[i].until_ms) {
                slots[i].until_ms = until;
            }
            if (nbf_s > slots[i].nbf_s) {
                slots[i].nbf_s = nbf_s;
            }
            return 0;
        }
    }
}

/* A user's entry in the set: a 16-byte key no token has (a signed token's would need
 * its 7 MAC bytes to be these, a random one 16 given bytes). */
static void user_key(int64_t uid, uint8_t key[16])
{
    static const uint8_t tag[8] = { 0xff, 'u', 's', 'e', 'r', 0x00, 0xff, 0x00 };
    memcpy(key, tag, 8);
    for (int i = 0; i < 8; i++) {
        key[8 + i] = (uint8_t)((uint64_t)uid >> (56 - 8 * i));
    }
}

static int is_user_key(const uint8_t key[16])
{
    uint8_t probe[16];
    user_key(0, probe);
    return memcmp(key, probe, 8) == 0;
}

/* Rebuilds the table without expired entries, doubling it if it is still half full. */
static void set_rebuild(struct revoke *rv)
{
    uint64_t now = revoke_now_ms();
    size_t live = 0;
    for (size_t i = 0; i < rv->cap; i++) {
        live += rv->slots[i].until_ms > now;
    }
    size_t cap = 64;
    while (cap < 4 * (live + 1)) {
        cap *= 2;
    }
    rslot_t *fresh = xcalloc(cap, sizeof(*fresh));
    size_t used = 0, nusers = 0;
    for (size_t i = 0; i < rv->cap; i++) {
        if (rv->slots[i].until_ms > now) {
            set_insert(fresh, cap, &used, rv->slots[i].tok, rv->slots[i].until_ms,
                       rv->slots[i].nbf_s);
            nusers += is_user_key(rv->slots[i].tok);
        }
    }
    free(rv->slots);
    rv->slots = fresh;
    rv->cap = cap;
    rv->used = used;
    rv->nusers = nusers;
}

static void set_add(struct revoke *rv, const uint8_t key[16], uint64_t until_ms, int64_t nbf_s)
{
    if (2 * (rv->used + 1) > rv->cap) {
        set_rebuild(rv);
    }
    if (set_insert(rv->slots, rv->cap, &rv->used, key, until_ms, nbf_s) && nbf_s != 0) {
        rv->nusers++;
    }
}

static const rslot_t *set_find(const struct revoke *rv, const uint8_t tok[16])
{
    for (size_t i = slot_of(tok, rv->cap);; i = (i + 1) & (rv->cap - 1)) {
        if (rv->slots[i].until_ms == 0) {
            return NULL;
        }
        if (memcmp(rv->slots[i].tok, tok, 16) == 0) {
            return rv->slots[i].until_ms > revoke_now_ms() ? &rv->slots[i] : NULL;
        }
    }
}

void revoke_add(struct worker *w, const uint8_t tok[16], uint64_t until_ms)
{
    struct revoke *rv = w->revoke;
    if (rv == NULL || until_ms == 0) {
        return;
    }
    set_add(rv, tok, until_ms, 0);
}

int revoke_has(const struct worker *w, const uint8_t tok[16])
{
    const struct revoke *rv = w->revoke;
    if (rv == NULL || rv->used == 0) {
        return 0;
    }
    return set_find(rv, tok) != NULL;
}

void revoke_user_add(struct worker *w, int64_t uid, int64_t nbf_s, uint64_t until_ms)
{
    struct revoke *rv = w->revoke;
    if (rv == NULL || until_ms == 0 || uid <= 0 || nbf_s <= 0) {
        return;
    }
    uint8_t key[16];
    user_key(uid, key);
    set_add(rv, key, until_ms, nbf_s);
}

int64_t revoke_user_nbf_s(const struct worker *w, int64_t uid)
{
    const struct revoke *rv = w->revoke;
    if (rv == NULL || rv->nusers == 0) {
        return 0;   /* the common case: nobody logged out everywhere lately */
    }
    uint8_t key[16];
    user_key(uid, key);
    const rslot_t *e = set_find(rv, key);
    return e != NULL ? e->nbf_s : 0;
}

int revoke_state(const struct worker *w, const uint8_t tok[16], int64_t uid, int64_t issued_s)
{
    const struct revoke *rv = w->revoke;
    if (rv == NULL) {
        return REVOKE_ASK;
    }
    if (rv->used != 0) {
        if (set_find(rv, tok) != NULL) {
            return REVOKE_DEAD;
        }
        if (rv->nusers != 0 && issued_s < revoke_user_nbf_s(w, uid)) {
            return REVOKE_DEAD;
        }
    }
    return rv->state == S_LIVE && issued_s >= rv->epoch_s ? REVOKE_OK : REVOKE_ASK;
}

int64_t revoke_epoch_s(const struct worker *w)
{
    return w->revoke != NULL ? w->revoke->epoch_s : 0;
}

int revoke_member(const uint8_t tok[16], int64_t uid, int64_t nbf_s, char out[REVOKE_MEMBER_MAX])
{
    static const char hex[] = "0123456789abcdef";
    if (tok != NULL) {
        for (int k = 0; k < 16; k++) {
            out[2 * k] = hex[tok[k] >> 4];
            out[2 * k + 1] = hex[tok[k] & 15];
        }
        out[32] = '\0';
        return 32;
    }
    return snprintf(out, REVOKE_MEMBER_MAX, "u:%lld:%lld", (long long)uid, (long long)nbf_s);
}

int revoke_live(const struct worker *w)
{
    return w->revoke != NULL && w->revoke->state == S_LIVE;
}

/* Parses "<prefix><digits>[:<digits>]" (a user entry "u:ID:NBF", an epoch "epoch:S"):
 * 1 and the numbers (b = 0 without the second), or 0. */
static int parse_nums(const char *z, size_t n, const char *prefix, int64_t *a, int64_t *b)
{
    size_t pl = strlen(prefix);
    char buf[64];
    if (n <= pl || n >= sizeof buf || memcmp(z, prefix, pl) != 0) {
        return 0;
    }
    memcpy(buf, z + pl, n - pl);
    buf[n - pl] = '\0';
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10), y = 0;
    if (end == buf || x <= 0 || errno != 0) {
        return 0;
    }
    if (*end == ':') {
        char *p = end + 1;
        y = strtoll(p, &end, 10);
        if (end == p || y <= 0 || errno != 0) {
            return 0;
        }
    }
    if (*end != '\0') {
        return 0;
    }
    *a = x;
    *b = y;
    return 1;
}

/* One entry of seckill:revoked or message of seckill:revoke: a token's 32 hex digits, a
 * user's "u:ID:NBF", or an epoch "epoch:S" (until does not apply to it). Anything else is
 * ignored. Returns 1 if it was an epoch. */
static int take_entry(struct revoke *rv, const char *z, size_t n, uint64_t until)
{
    int64_t a, b;
    if (n == 32) {
        char tok[33];
        memcpy(tok, z, 32);
        tok[32] = '\0';
        uint8_t bytes[16];
        if (!token_parse(tok, bytes)) {
            return 0;
        }
        revoke_add(rv->w, bytes, until);
        if (rv->heard != NULL) {
            rv->heard(rv->w, bytes);
        }
    } else if (parse_nums(z, n, "u:", &a, &b) && b > 0) {
        revoke_user_add(rv->w, a, b, until);
    } else if (parse_nums(z, n, "epoch:", &a, &b) && b == 0) {
        if (a > rv->epoch_s) {
            rv->epoch_s = a;
        }
        return 1;
    }
    return 0;
}

static void on_ignored(struct redisReply *rep, void *priv)
{
    (void)rep;
    (void)priv;
}

/* seckill:revoked has no epoch: Redis lost it (or is new). Every login hash is gone
 * with it, so from now on a signed token issued before this second is not trusted by its
 * signature: auth.c asks Redis, which no longer knows it. The epoch is kept (score +inf,
 * never pruned) and announced; a worker that adds one at the same time adds its own, and
 * every worker takes the newest it sees. */
static void epoch_start(struct revoke *rv)
{
    /* The next second: a token issued in this one may be from before the loss (tokens
     * carry whole seconds). auth_new_token mints as of the epoch in that case. */
    int64_t next_s = (int64_t)(revoke_now_ms() / 1000u) + 1;
    if (next_s > rv->epoch_s) {
        rv->epoch_s = next_s;
    }
    char member[32];
    int n = snprintf(member, sizeof member, "epoch:%lld", (long long)rv->epoch_s);
    const char *zadd[4] = { "ZADD", KEY_REVOKED, "+inf", member };
    size_t zaddl[4] = { 4, strlen(KEY_REVOKED), 4, (size_t)n };
    const char *pub[3] = { "PUBLISH", CHANNEL_REVOKE, member };
    size_t publ[3] = { 7, strlen(CHANNEL_REVOKE), (size_t)n };
    rds_command(rv->w->rds, on_ignored, NULL, 4, zadd, zaddl);
    rds_command(rv->w->rds, on_ignored, NULL, 3, pub, publ);
    log_info("revoke: %s has no epoch (Redis lost its data, or is new): signed tokens issued "
             "before now are checked in Redis", KEY_REVOKED);
}

/* ----------------------------------------------------------------- subscriber */

static void set_state(struct revoke *rv, int st)
{
    if (rv->state == S_LIVE && st != S_LIVE) {
        log_warn("revoke: subscription to %s lost; tokens are looked up in Redis until it is back",
                 CHANNEL_REVOKE);
    }
    rv->state = st;
    rv->since_ms = clock_mono_ms();
}

/* Drops the connection. Inside a hiredis callback the free is deferred by hiredis. */
static void sub_drop(struct revoke *rv)
{
    redisAsyncContext *ac = rv->ac;
    rv->ac = NULL;
    set_state(rv, S_DOWN);
    if (ac != NULL) {
        ac->data = NULL;
        redisAsyncFree(ac);
    }
}

static void on_reload(struct redisReply *rep, void *priv)
{
    struct revoke *rv = priv;
    rv->reload_pending = 0;
    if (rv->closing || rv->state != S_RELOADING) {
        return;
    }
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        return;   /* the tick asks again */
    }
    int epochs = 0;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *m = rep->element[i], *s = rep->element[i + 1];
        if (m->type != REDIS_REPLY_STRING || s->type != REDIS_REPLY_STRING) {
            continue;
        }
        char num[32];
        size_t n = s->len < sizeof num - 1 ? s->len : sizeof num - 1;
        memcpy(num, s->str, n);
        num[n] = '\0';
        double until = strtod(num, NULL);
        if (until > 0) {
            /* an epoch's +inf, or any score past 2^62 ms, stands for "kept" */
            uint64_t u = until < 4.6e18 ? (uint64_t)until : UINT64_C(4600000000000000000);
            epochs += take_entry(rv, m->str, m->len, u);
        }
    }
    if (epochs == 0) {
        epoch_start(rv);
    }
    set_state(rv, S_LIVE);
    if (rv->was_live) {
        log_info("revoke: subscription back; %zu revoked tokens known", rv->used);
    }
    rv->was_live = 1;
}

static void reload_start(struct revoke *rv)
{
    if (rv->reload_pending) {
        return;
    }
    char min[24];
    int n = snprintf(min, sizeof min, "%llu", (unsigned long long)revoke_now_ms());
    const char *argv[5] = { "ZRANGEBYSCORE", KEY_REVOKED, min, "+inf", "WITHSCORES" };
    size_t lens[5] = { 13, strlen(KEY_REVOKED), (size_t)n, 4, 10 };
    rv->reload_pending = 1;
    rds_command(rv->w->rds, on_reload, rv, 5, argv, lens);
}

/* Every reply of the subscribe connection: the confirmation, then messages; NULL when the
 * connection goes. */
static void on_sub(redisAsyncContext *ac, void *reply, void *priv)
{
    struct revoke *rv = priv;
    redisReply *rep = reply;
    if (rv == NULL || ac->data == NULL || rv->closing) {
        return;
    }
    if (rep == NULL) {
        return;   /* the disconnect callback follows */
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
        rep->element[0]->type != REDIS_REPLY_STRING) {
        log_warn("revoke: unexpected reply on the subscription; reconnecting");
        sub_drop(rv);
        return;
    }
    const redisReply *kind = rep->element[0], *payload = rep->element[2];
    if (kind->len == 9 && memcmp(kind->str, "subscribe", 9) == 0) {
        set_state(rv, S_RELOADING);
        reload_start(rv);
    } else if (kind->len == 7 && memcmp(kind->str, "message", 7) == 0 &&
               payload->type == REDIS_REPLY_STRING) {
        take_entry(rv, payload->str, payload->len, revoke_now_ms() + rv->ttl_ms);
    }
}

static void on_hello_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    struct revoke *rv = priv;
    redisReply *rep = reply;
    if (rv == NULL || ac->data == NULL || rv->closing || rep == NULL) {
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        log_warn("revoke: handshake (AUTH/SELECT) refused: %s", rep->str);
        sub_drop(rv);
    }
}

static void on_sub_connect(const redisAsyncContext *ac, int status)
{
    struct revoke *rv = ac->data;
    if (rv == NULL) {
        return;
    }
    if (status != REDIS_OK) {
        rv->ac = NULL;   /* hiredis frees it after this returns */
        set_state(rv, S_DOWN);
        return;
    }
    if (rv->addr.unix_path[0] == '\0') {
        /* A dead network shows as silence, not a reset: keepalive notices it. */
        int fd = ac->c.fd, on = 1, idle = KEEPALIVE_S, cnt = 2;
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle);
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    }
}

static void on_sub_disconnect(const redisAsyncContext *ac, int status)
{
    struct revoke *rv = ac->data;
    (void)status;
    if (rv == NULL) {
        return;
    }
    rv->ac = NULL;
    set_state(rv, S_DOWN);
}

static void sub_start(struct revoke *rv)
{
    redisAsyncContext *ac = rv->addr.unix_path[0] ? redisAsyncConnectUnix(rv->addr.unix_path)
                                                  : redisAsyncConnect(rv->addr.host, rv->addr.port);
    rv->gen++;
    set_state(rv, S_CONNECTING);
    if (ac == NULL) {
        set_state(rv, S_DOWN);
        return;
    }
    if (ac->err) {
        redisAsyncFree(ac);
        set_state(rv, S_DOWN);
        return;
    }
    ac->data = rv;
    if (redisLibeventAttach(ac, rv->w->base) != REDIS_OK) {
        redisAsyncFree(ac);
        set_state(rv, S_DOWN);
        return;
    }
    rv->ac = ac;
    redisAsyncSetConnectCallback(ac, on_sub_connect);
    redisAsyncSetDisconnectCallback(ac, on_sub_disconnect);
    rconn_hello_t h;
    rconn_hello(&rv->addr, &h);
    for (int i = 0; i < h.n; i++)
        redisAsyncCommandArgv(ac, on_hello_reply, rv, h.cmd[i].argc, h.cmd[i].argv,
                              h.cmd[i].argvlen);
    const char *argv[2] = { "SUBSCRIBE", CHANNEL_REVOKE };
    size_t lens[2] = { 9, strlen(CHANNEL_REVOKE) };
    redisAsyncCommandArgv(ac, on_sub, rv, 2, argv, lens);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct revoke *rv = arg;
    (void)fd;
    (void)what;
    if (rv->closing) {
        return;
    }
    uint64_t age = clock_mono_ms() - rv->since_ms;
    switch (rv->state) {
    case S_DOWN:
        if (age >= RETRY_MS) {
            sub_start(rv);
        }
        break;
    case S_CONNECTING:
        if (age >= SETUP_MS) {
            sub_drop(rv);
        }
        break;
    case S_RELOADING:
        reload_start(rv);   /* no-op while one is out; retries after a failed one */
        break;
    default:
        break;
    }
}

/* ----------------------------------------------------------------- lifetime */

int revoke_init(struct worker *w, const struct url_redis *addr, uint64_t ttl_ms,
                revoke_heard_fn heard)
{
    struct revoke *rv = xcalloc(1, sizeof(*rv));
    rv->w = w;
    rv->addr = *addr;
    rv->ttl_ms = ttl_ms;
    rv->heard = heard;
    rv->cap = 64;
    rv->slots = xcalloc(rv->cap, sizeof(rslot_t));
    rv->tick = event_new(w->base, -1, EV_PERSIST, on_tick, rv);
    struct timeval tv = { 0, TICK_MS * 1000 };
    if (rv->tick == NULL || event_add(rv->tick, &tv) != 0) {
        if (rv->tick != NULL) {
            event_free(rv->tick);
        }
        free(rv->slots);
        free(rv);
        return -1;
    }
    w->revoke = rv;
    sub_start(rv);   /* connects while the loop is not yet running: hiredis does not block */
    return 0;
}

/* After the worker's loop has stopped and its rds is freed (no reload reply can come). */
void revoke_free(struct worker *w)
{
    struct revoke *rv = w->revoke;
    if (rv == NULL) {
        return;
    }
    rv->closing = 1;
    if (rv->ac != NULL) {
        redisAsyncContext *ac = rv->ac;
        rv->ac = NULL;
        ac->data = NULL;
        redisAsyncFree(ac);
    }
    event_free(rv->tick);
    w->revoke = NULL;
    free(rv->slots);
    free(rv);
}
