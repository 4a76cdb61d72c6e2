/* bench_room.h -- `seckill bench --waiting-room`: a sale through the waiting room (#28).
 *
 * Every buyer joins the voucher's queue (solving the bot gate's challenge first when the
 * voucher has one), polls as the answers say (pollAfterMs) until an answer carries a pass,
 * and buys with it at its start (passFrom: a pass handed out before the place is due starts
 * then) without polling again. Buyers are planned by bench_room_plan: a share joins before beginTime, the
 * rest after it; a share is "slow" (every request of theirs leaves --room-slow-ms late).
 * Polls are not sockets per buyer: each thread keeps a schedule (a heap of due times) and
 * serves it over its share of --conns keep-alive connections, so a million buyers need
 * memory (~64 bytes each), not a million sockets.
 *
 * The pure parts (the plan, Spearman's rank correlation, the JSON field readers) are
 * here for the unit tests; bench_room_run is called by bench.c. */
#ifndef SECKILL_BENCH_ROOM_H
#define SECKILL_BENCH_ROOM_H

#include <stddef.h>
#include <stdint.h>

/* A buyer's plan. join_ms is relative to the run's start; begin_ms is when the sale
 * opens, relative to the same start (<= 0: already open, so nobody is early). */
typedef struct bench_room_plan {
    uint32_t join_ms;
    int early;                /* joins before beginTime */
    int slow;                 /* the slow class */
} bench_room_plan_t;

void bench_room_plan(uint64_t seed, uint32_t buyer, double early_share, double slow_share,
                     int64_t begin_ms, uint32_t late_span_ms, bench_room_plan_t *out);

/* Spearman's rank correlation of x and y (n pairs; ties get their average rank): in
 * [-1, 1], or 0 when n < 2 or either side is constant. */
double bench_room_spearman(const double *x, const double *y, size_t n);

/* JSON members of an answer body, found by name anywhere in it (the answers are flat
 * enough: data's members have names of their own). 1 found, 0 not. */
int bench_room_jnum(const char *body, const char *name, double *out);
int bench_room_jstr(const char *body, const char *name, char *out, size_t n);

/* A join's or poll's answer that carries a pass (admitted, or waiting with a pass valid
 * from its place's due moment): 1, with *from_ms the moment the pass becomes valid
 * (passFrom; passExpiresAt less pass_ttl_s for an answer without it) -- the buyer's
 * admission, and when it orders; 0 when the answer has no pass. */
int bench_room_pass_from(const char *body, int pass_ttl_s, int64_t *from_ms);

/* How long a buyer holding a pass valid from from_ms waits at wall_now_ms before ordering
 * (never before the start; 0 once it has come). */
uint32_t bench_room_buy_delay(int64_t from_ms, int64_t wall_now_ms);

#endif
