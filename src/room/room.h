/* room.h -- a voucher's waiting room (issue #28; docs/waiting-room.md): join, poll, and the
 * order gate that asks a room voucher's buyers for a pass.
 *
 * Join and poll are one room.lua call each (EVALSHA: one Redis command). The gate is on the
 * hot path and costs no Redis once a worker knows the voucher: each worker keeps, per
 * voucher, whether it has a room (and its bot gate), learned once from the voucher hash
 * (HMGET begin room_r room_gate) and kept -- a voucher's room is fixed at creation. A
 * voucher Redis does not know is asked again after soldout_cache_ms. On a room voucher an
 * order needs x-seckill-pass verifying in memory (pass.h) for that user and voucher, else
 * it is refused with ADMIT_QUEUE_REQUIRED; a voucher without a room pays one cache lookup.
 *
 * Polls are limited per user and worker to one per ROOM_POLL_MIN_MS / 2, in memory; joins
 * and challenges (a join answers what a poll does) each to ROOM_JOIN_BURST at once and
 * ROOM_JOIN_PER_S a second, in memory too.
 * Ownership: server.c makes and frees the per-worker state (room_worker_init/free). */
#ifndef SECKILL_ROOM_H
#define SECKILL_ROOM_H

#include <stddef.h>
#include <stdint.h>

#include "sale/admission.h"

struct http_req;
struct worker;

#define ROOM_POLL_MIN_MS 1000   /* the least pollAfterMs; polls closer than half are 429 */
#define ROOM_POLL_NEAR_MS 8000  /* a wait up to this polls when the place is due */
#define ROOM_POLL_WAIT_MAX_MS 300000   /* the most pollAfterMs while waiting */
#define ROOM_POLL_DUE_SLACK_MS 50      /* after begin a place polls this long after it is due */
#define ROOM_JOIN_PER_S 2       /* joins (and, apart, challenges) a user may make per second */
#define ROOM_JOIN_BURST 5       /* ... and at once: a page's join, a retry, another sale's */

/* A join's or poll's answer (room.lua's): states, then refusals. */
enum {
    ROOM_WAITING = 0, ROOM_ADMITTED = 1, ROOM_SOLD_OUT = 2, ROOM_NOT_QUEUED = 3,
    ROOM_NO_VOUCHER = 10, ROOM_NO_QUEUE = 11, ROOM_ENDED = 12, ROOM_JOIN_SOLD_OUT = 13,
    ROOM_UNAVAILABLE = -1
};

typedef struct room_state {
    int state;                  /* ROOM_* */
    int64_t user_id, voucher_id;   /* whose answer it is (the call's) */
    int64_t rank;               /* 0-based place in the room */
    int64_t released;           /* passes released so far: floor((now - begin) * rate) */
    int64_t rate;               /* admitPerSecond */
    int64_t begin_s;            /* the sale's begin, epoch s */
    int64_t now_ms;             /* Redis's clock */
    int64_t expires_ms;         /* with a pass: its expiry (from_ms + the pass lifetime) */
    int64_t from_ms;            /* with a pass: its start; 0 none. ROOM_WAITING with a pass:
                                 * later than now_ms (the place's due moment, room.lua) */
    int64_t ttl_ms;             /* the pass lifetime */
} room_state_t;

/* What a worker knows of a voucher's room. */
typedef struct room_info {
    int known;                  /* 0: Redis could not say (down) */
    int exists;                 /* Redis has the voucher */
    int has_room;
    int bot_gate;
} room_info_t;

typedef void (*room_cb)(struct http_req *r, const room_state_t *st);
typedef void (*room_info_cb)(struct http_req *r, int64_t voucher_id, const room_info_t *ri);
typedef void (*room_order_fn)(struct http_req *r, int64_t voucher_id, int64_t user_id,
                              admission_cb cb);

/* cb runs once, on the worker's thread, maybe before these return. */
void room_join(struct http_req *r, int64_t voucher_id, int64_t user_id, room_cb cb);
void room_poll(struct http_req *r, int64_t voucher_id, int64_t user_id, room_cb cb);
/* The voucher's room as this worker knows it (from memory, or one HMGET). */
void room_info(struct http_req *r, int64_t voucher_id, room_info_cb cb);

/* 1 if the user may poll now (the per-worker poll limit), 0 if not. */
int room_poll_allowed(struct http_req *r, int64_t user_id);
/* The same for a join, and for a challenge: their own per-worker limits. */
int room_join_allowed(struct http_req *r, int64_t user_id);
int room_challenge_allowed(struct http_req *r, int64_t user_id);

/* The answer's figures: the place (0 unless waiting, at least 1 while waiting), the
 * estimated wait in seconds (rounded up: until the pass's start, or until the rate releases
 * the place) and when to poll next: waiting with a pass, at its start (+
 * ROOM_POLL_DUE_SLACK_MS; a client holding the pass need not poll at all); waiting after
 * begin without one (the place is due beyond a pass lifetime), when it is due within one
 * (+ the slack); before begin, the wait less ROOM_POLL_MIN_MS up to ROOM_POLL_NEAR_MS, else
 * 7/8 of it; always between ROOM_POLL_MIN_MS and ROOM_POLL_WAIT_MAX_MS; admitted
 * ROOM_POLL_MIN_MS; sold out or not queued 30 s. */
int64_t room_position(const room_state_t *st);
int64_t room_wait_s(const room_state_t *st);
int64_t room_poll_after_ms(const room_state_t *st);

/* The pass of (user, voucher, [from, expiry)) (pass.h) into out (PASS_MAX bytes): length
 * or -1. */
int room_pass(struct worker *w, int64_t user_id, int64_t voucher_id, int64_t from_ms,
              int64_t expires_ms, char *out, size_t n);

/* The order gate: on a voucher with a room, refuses (cb with ADMIT_QUEUE_REQUIRED) unless
 * r carries a valid pass; else calls next(r, voucher_id, user_id, cb). */
void room_order(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb,
                room_order_fn next);

/* Drops what this worker knows of the voucher (publish.h: it was just published). */
void room_forget(struct worker *w, int64_t voucher_id);

int room_worker_init(struct worker *w);
void room_worker_free(struct worker *w);

#endif
