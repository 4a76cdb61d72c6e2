/* room.c -- waiting rooms: join and poll through room.lua, the order gate, the per-worker
 * knowledge of which vouchers have a room (room.h). */
#include "room/room.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "core/clock.h"
#include "core/key.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "http/http_req.h"
#include "rebuild/rebuild_watch.h"
#include "redis/rds.h"
#include "room/pass.h"
#include "sale/ratelimit.h"
#include "sale/vcache.h"
#include "server/worker.h"

#define FLAG_SLOTS 1024u
#define POLL_LIMIT_ENTRIES 8192
#define POLL_IDLE_MS 30000         /* sold out or not queued: nothing to wait for */

enum { F_NONE = 1, F_ROOM = 2 };

typedef struct flag {
    int kind;                   /* F_NONE (no room, or unknown voucher until expiry), F_ROOM */
    int exists;                 /* 0: an unknown voucher (kept until expiry) */
    int bot_gate;
} flag_t;

struct room_worker {
    vcache_t *flags;            /* voucher -> flag_t */
    rl_table_t *polls;          /* user -> poll bucket */
    rl_table_t *joins;          /* 2 user -> join bucket, 2 user + 1 -> challenge bucket */
    pass_key_t *key;
    uint64_t unknown_ms;        /* how long an unknown voucher counts as roomless */
};

/* ------------------------------------------------------------ join and poll */

typedef struct call {
    http_req_t *r;
    room_cb cb;
    int64_t user_id, voucher_id;
} call_t;

static int64_t int_at(const redisReply *rep, size_t i)
{
    return i < rep->elements && rep->element[i]->type == REDIS_REPLY_INTEGER
           ? (int64_t)rep->element[i]->integer : 0;
}

static void on_script(struct redisReply *rep, void *priv)
{
    call_t *c = priv;
    room_state_t st = {.state = ROOM_UNAVAILABLE, .user_id = c->user_id,
                       .voucher_id = c->voucher_id};
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1) {
        st.state = (int)int_at(rep, 0);
        st.rank = int_at(rep, 1);
        st.released = int_at(rep, 2);
        st.rate = int_at(rep, 3);
        st.begin_s = int_at(rep, 4);
        st.now_ms = int_at(rep, 5);
        st.expires_ms = int_at(rep, 6);
        st.from_ms = int_at(rep, 7);
        st.ttl_ms = int_at(rep, 8);
    }
    http_req_t *r = c->r;
    room_cb cb = c->cb;
    free(c);
    if (st.state == ROOM_NO_VOUCHER) {
        /* Redis may have lost it (as admission.c does): if SQL knows it, it is rebuilt */
        rebuild_watch_poke(r->w->app->rebuild, st.voucher_id);
    }
    cb(r, &st);
}

/* A uniform double in [0, 1) as text: a join's place before the sale begins. */
static void random_score(char out[32])
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
        x = clock_read_ns() * UINT64_C(0x9e3779b97f4a7c15);   /* still spread, if not secret */
    snprintf(out, 32, "%.17g", (double)(x >> 11) / 9007199254740992.0);
}

static void script(http_req_t *r, int64_t voucher_id, int64_t user_id, int join, room_cb cb)
{
    char kv[64], kz[64], ki[64], uid[SB_DEC_MAX], score[32];
    int lv = key_voucher(kv, sizeof kv, voucher_id), lz = key_room(kz, sizeof kz, voucher_id),
        li = key_room_issued(ki, sizeof ki, voucher_id);
    if (lv < 0 || lz < 0 || li < 0) {
        room_state_t st = {.state = ROOM_UNAVAILABLE, .user_id = user_id, .voucher_id = voucher_id};
        cb(r, &st);
        return;
    }
    random_score(score);
    const char *op = join ? "join" : "poll";
    const char *argv[6] = {kv, kz, ki, op, uid, score};
    size_t lens[6] = {(size_t)lv, (size_t)lz, (size_t)li, 4, (size_t)sb_dec(uid, user_id),
                      strlen(score)};
    call_t *c = xmalloc(sizeof *c);
    c->r = r;
    c->cb = cb;
    c->user_id = user_id;
    c->voucher_id = voucher_id;
    rds_evalsha(r->w->rds, SCRIPT_ROOM, on_script, c, 3, join ? 6 : 5, argv, lens);
}

void room_join(http_req_t *r, int64_t voucher_id, int64_t user_id, room_cb cb)
{
    script(r, voucher_id, user_id, 1, cb);
}

void room_poll(http_req_t *r, int64_t voucher_id, int64_t user_id, room_cb cb)
{
    script(r, voucher_id, user_id, 0, cb);
}

int room_poll_allowed(http_req_t *r, int64_t user_id)
{
    struct room_worker *rw = r->w->room;
    return rw == NULL || rw->polls == NULL ||
           ratelimit_table_take(rw->polls, (uint64_t)user_id, clock_now_ms());
}

/* Joins answer what polls do and cost a room.lua call (a gated one a SET NX first), and a
 * challenge of a voucher this worker does not know an HMGET: without a limit of their own
 * they would be polls without the poll limit. */
static int join_take(http_req_t *r, uint64_t key)
{
    struct room_worker *rw = r->w->room;
    return rw == NULL || rw->joins == NULL ||
           ratelimit_table_take(rw->joins, key, clock_now_ms());
}

int room_join_allowed(http_req_t *r, int64_t user_id)
{
    return join_take(r, (uint64_t)user_id * 2);
}

int room_challenge_allowed(http_req_t *r, int64_t user_id)
{
    return join_take(r, (uint64_t)user_id * 2 + 1);
}

int64_t room_position(const room_state_t *st)
{
    if (st->state != ROOM_WAITING)
        return 0;
    /* a pass whose start is later than the place's due moment (the place moved up since)
     * still waits: at least 1 */
    int64_t p = st->rank - st->released + 1;
    return p > 1 ? p : 1;
}

/* ms until the pass starts, or without one until the rate releases the place:
 * released = floor((t - begin) * rate / 1000) passes rank once
 * t >= begin + ceil((rank + 1) * 1000 / rate) (room.lua's due moment). */
static int64_t wait_ms(const room_state_t *st)
{
    if (st->state != ROOM_WAITING)
        return 0;
    int64_t at = st->from_ms;
    if (at <= 0) {
        if (st->rate <= 0 || st->rank < 0)
            return 0;
        at = st->begin_s * 1000 + ((st->rank + 1) * 1000 + st->rate - 1) / st->rate;
    }
    return at > st->now_ms ? at - st->now_ms : 0;
}

int64_t room_wait_s(const room_state_t *st)
{
    return (wait_ms(st) + 999) / 1000;
}

int64_t room_poll_after_ms(const room_state_t *st)
{
    int64_t ms = ROOM_POLL_MIN_MS;
    if (st->state == ROOM_WAITING && st->from_ms > 0) {
        /* A pass valid from the place's due moment: the buyer orders then and need not
         * poll again. An old client that polls anyway is told the start (+ the slack, so
         * a poll a few ms early by its timer finds the pass valid): one more poll at most. */
        ms = wait_ms(st) + ROOM_POLL_DUE_SLACK_MS;
    } else if (st->state == ROOM_WAITING && st->now_ms >= st->begin_s * 1000) {
        /* After begin, without a pass: the place is due more than a pass lifetime from
         * now (room.lua hands out a pass, starting when due, to a place due within one).
         * Nobody new comes ahead and the clock alone releases places, so the moment it is
         * due within one lifetime is known: one poll then (+ the slack), which gets the
         * pass. A place that moves up (someone ahead rejoins after an expired pass) is
         * seen at that poll, its pass later than it could have been by the places it moved
         * over / R: the rate is the same for everyone. About one poll per buyer after
         * begin, the one that hands out the pass. */
        int64_t ttl = st->ttl_ms > 0 ? st->ttl_ms : 0;
        ms = wait_ms(st) - ttl + ROOM_POLL_DUE_SLACK_MS;
    } else if (st->state == ROOM_WAITING) {
        /* Before begin later joiners may still draw places ahead (the wait only grows).
         * A far place polls at 7/8 of its wait, a near one ROOM_POLL_MIN_MS before it is
         * due: the place may have grown by then, and the poll that corrects it must still
         * come before it is due -- else the early joiners (whose places grew the most)
         * would see their passes late, in their join order. The last poll before begin
         * says when the place is due after it, or near enough that one more poll does. */
        ms = wait_ms(st);
        if (ms > ROOM_POLL_NEAR_MS)
            ms -= ms / 8;
        else
            ms -= ROOM_POLL_MIN_MS;
    } else if (st->state == ROOM_SOLD_OUT || st->state == ROOM_NOT_QUEUED) {
        ms = POLL_IDLE_MS;
    }
    return ms < ROOM_POLL_MIN_MS ? ROOM_POLL_MIN_MS
           : ms > ROOM_POLL_WAIT_MAX_MS ? ROOM_POLL_WAIT_MAX_MS : ms;
}

int room_pass(worker_t *w, int64_t user_id, int64_t voucher_id, int64_t from_ms,
              int64_t expires_ms, char *out, size_t n)
{
    struct room_worker *rw = w->room;
    return rw == NULL || rw->key == NULL ? -1
           : pass_sign(rw->key, user_id, voucher_id, from_ms, expires_ms, out, n);
}

/* ------------------------------------------------------------ what a worker knows */

typedef struct info_call {
    http_req_t *r;
    int64_t voucher_id;
    room_info_cb cb;
} info_call_t;

/* Keeps what the voucher hash said: a room or none for good (fixed at creation), an
 * unknown voucher as roomless for unknown_ms. */
static const flag_t *flag_learn(struct room_worker *rw, int64_t voucher_id, const redisReply *rep)
{
    if (rw == NULL || rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3)
        return NULL;
    int exists = rep->element[0]->type == REDIS_REPLY_STRING;
    int room = rep->element[1]->type == REDIS_REPLY_STRING && atoll(rep->element[1]->str) > 0;
    int gate = rep->element[2]->type == REDIS_REPLY_STRING && atoi(rep->element[2]->str) > 0;
    uint64_t until = exists ? UINT64_MAX : clock_now_ms() + rw->unknown_ms;
    flag_t *f = vcache_put(rw->flags, voucher_id, until);
    f->kind = room ? F_ROOM : F_NONE;
    f->exists = exists;
    f->bot_gate = gate;
    return f;
}

/* What flag_learn reads: HMGET of the voucher hash (cb gets NULL if the key does not fit). */
static void flags_read(http_req_t *r, int64_t voucher_id, rds_cb cb, void *priv)
{
    char kv[64];
    int lv = key_voucher(kv, sizeof kv, voucher_id);
    if (lv < 0) {
        cb(NULL, priv);
        return;
    }
    const char *argv[5] = {"HMGET", kv, "begin", "room_r", "room_gate"};
    size_t lens[5] = {5, (size_t)lv, 5, 6, 9};
    rds_command(r->w->rds, cb, priv, 5, argv, lens);
}

static void on_hmget(struct redisReply *rep, void *priv)
{
    info_call_t *c = priv;
    const flag_t *f = flag_learn(c->r->w->room, c->voucher_id, rep);
    room_info_t ri = {.known = f != NULL, .exists = f != NULL && f->exists,
                      .has_room = f != NULL && f->kind == F_ROOM,
                      .bot_gate = f != NULL && f->bot_gate};
    http_req_t *r = c->r;
    int64_t vid = c->voucher_id;
    room_info_cb cb = c->cb;
    free(c);
    cb(r, vid, &ri);
}

void room_info(http_req_t *r, int64_t voucher_id, room_info_cb cb)
{
    struct room_worker *rw = r->w->room;
    const flag_t *f = rw != NULL ? vcache_get(rw->flags, voucher_id, clock_now_ms()) : NULL;
    if (f != NULL) {
        room_info_t ri = {.known = 1, .exists = f->exists, .has_room = f->kind == F_ROOM,
                          .bot_gate = f->bot_gate};
        cb(r, voucher_id, &ri);
        return;
    }
    info_call_t *c = xmalloc(sizeof *c);
    *c = (info_call_t){.r = r, .voucher_id = voucher_id, .cb = cb};
    flags_read(r, voucher_id, on_hmget, c);
}

/* ------------------------------------------------------------ the order gate */

typedef struct gate_call {
    http_req_t *r;
    int64_t voucher_id, user_id;
    admission_cb cb;
    room_order_fn next;
} gate_call_t;

/* 1 when an order on a voucher with a room may go on: r's pass is this user's for it. */
static int pass_ok(http_req_t *r, int64_t voucher_id, int64_t user_id)
{
    struct room_worker *rw = r->w->room;
    return r->pass != NULL && rw != NULL &&
           pass_verify(rw->key, r->pass, r->pass_len, user_id, voucher_id,
                       (int64_t)clock_now_wall_ms(), NULL);
}

static void gate_decide(http_req_t *r, int64_t voucher_id, int64_t user_id, int has_room,
                        admission_cb cb, room_order_fn next)
{
    if (has_room && !pass_ok(r, voucher_id, user_id)) {
        cb(r, ADMIT_QUEUE_REQUIRED, NULL);
        return;
    }
    next(r, voucher_id, user_id, cb);
}

static void on_gate_hmget(struct redisReply *rep, void *priv)
{
    gate_call_t *c = priv;
    gate_call_t g = *c;
    free(c);
    const flag_t *f = flag_learn(g.r->w->room, g.voucher_id, rep);
    if (f == NULL) {
        g.cb(g.r, ADMIT_UNAVAILABLE, NULL);
        return;
    }
    gate_decide(g.r, g.voucher_id, g.user_id, f->kind == F_ROOM, g.cb, g.next);
}

void room_order(http_req_t *r, int64_t voucher_id, int64_t user_id, admission_cb cb,
                room_order_fn next)
{
    struct room_worker *rw = r->w->room;
    if (rw == NULL) {
        next(r, voucher_id, user_id, cb);
        return;
    }
    const flag_t *f = vcache_get(rw->flags, voucher_id, clock_now_ms());
    if (f != NULL) {
        gate_decide(r, voucher_id, user_id, f->kind == F_ROOM, cb, next);
        return;
    }
    gate_call_t *c = xmalloc(sizeof *c);
    *c = (gate_call_t){.r = r, .voucher_id = voucher_id, .user_id = user_id, .cb = cb,
                       .next = next};
    flags_read(r, voucher_id, on_gate_hmget, c);
}

/* ------------------------------------------------------------ lifetime */

void room_forget(worker_t *w, int64_t voucher_id)
{
    if (w->room != NULL)
        vcache_drop(w->room->flags, voucher_id);
}

int room_worker_init(worker_t *w)
{
    struct room_worker *rw = xcalloc(1, sizeof *rw);
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = clock_read_ns();
    rw->flags = vcache_new(FLAG_SLOTS, sizeof(flag_t));
    rw->polls = ratelimit_table_new(2000.0 / ROOM_POLL_MIN_MS, 1, POLL_LIMIT_ENTRIES, seed,
                                    RL_FULL_EVICTS);
    rw->joins = ratelimit_table_new(ROOM_JOIN_PER_S, ROOM_JOIN_BURST, POLL_LIMIT_ENTRIES,
                                    seed ^ UINT64_C(0x9e3779b97f4a7c15), RL_FULL_EVICTS);
    rw->key = pass_key_new(w->app->signer);
    int ms = w->app->cfg.soldout_cache_ms;
    rw->unknown_ms = ms > 0 ? (uint64_t)ms : 0;
    w->room = rw;
    if (rw->polls == NULL || rw->joins == NULL || rw->key == NULL) {
        room_worker_free(w);
        return -1;
    }
    return 0;
}

void room_worker_free(worker_t *w)
{
    struct room_worker *rw = w->room;
    if (rw == NULL)
        return;
    w->room = NULL;
    vcache_free(rw->flags);
    ratelimit_table_free(rw->polls);
    ratelimit_table_free(rw->joins);
    pass_key_free(rw->key);
    free(rw);
}
