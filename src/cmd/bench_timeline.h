/* bench_timeline.h -- where in a sale the latency goes, for `seckill bench`.
 *
 * The load generator logs every answered request (due, send and answer time, outcome);
 * this module cuts that log into time slots (100 ms by default) and the sale into its two
 * phases, so a p99 can be placed: in the first second, while the stock is being sold and
 * every request is a grab, or later, when every answer is a sold-out verdict from memory.
 *
 * Per slot, for the requests *due* in it (open loop; in closed loop due = send): count,
 * p50/p99/max latency from the due time, p99 from the send (the server and the network),
 * p99 of send - due (how late the client itself sent: a backlog waiting for a free
 * connection, or a load generator that did not get the CPU in time); and, counted by
 * their own times, requests sent and answered in the slot, successes and sold-out answers,
 * and at the slot's end the backlog (due, not yet sent) and requests in flight.
 *
 * Phases: "selling" holds the requests due before the last success answer arrived, "sold
 * out" the rest. Percentiles here are exact (sorted copies), with the bench histogram's
 * rule: the smallest value whose rank reaches ceil(p/100 * count).
 *
 * Pure except tl_write_* (a file). The caller owns what bench_timeline_build returns (free()). */
#ifndef SECKILL_BENCH_TIMELINE_H
#define SECKILL_BENCH_TIMELINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cmd/bench_outcome.h"

typedef struct bench_rec {
    uint32_t due_us;    /* us since the load's origin: when it was due (= sent, closed loop) */
    uint32_t send_us;   /* when it was sent */
    uint32_t done_us;   /* when its answer was complete */
    uint8_t outcome;    /* bench_outcome_t */
} bench_rec_t;

typedef struct bench_slot {
    uint32_t t_us;                          /* the slot's start */
    uint32_t due;                           /* requests due in the slot ... */
    uint32_t p50_us, p99_us, max_us;        /* ... their latency from the due time */
    uint32_t send_p99_us;                   /* ... from their send */
    uint32_t late_p99_us;                   /* ... send - due */
    uint32_t sent, answered, success, sold_out;   /* by their own time, in the slot */
    uint32_t backlog, inflight;             /* at the slot's end */
} bench_slot_t;

typedef struct bench_phase {
    uint32_t from_us, to_us;                /* due times [from, to) */
    uint64_t n;
    uint32_t p50_us, p99_us, max_us, send_p99_us, late_p99_us;
} bench_phase_t;

/* Sorts recs by due time (in place) and returns the number of slots of slot_us each,
 * from slot 0 (the origin) to the last answer; *out gets them (NULL when n == 0). */
size_t bench_timeline_build(bench_rec_t *recs, size_t n, uint32_t slot_us, bench_slot_t **out);

/* The two phases of recs sorted by due time (bench_timeline_build sorts). With no success answer at
 * all, everything is "sold out". */
void bench_timeline_phases(const bench_rec_t *sorted, size_t n, bench_phase_t *selling,
                           bench_phase_t *sold_out);

/* A stretch of the run, us since the load's origin: [from_us, to_us). */
typedef struct bench_span {
    uint32_t from_us, to_us;
} bench_span_t;

/* The same percentiles as bench_timeline_phases, of only the requests whose life (due .. answer)
 * misses every span of sp[0..nsp) (ascending, not overlapping) stretched by pad_us at its
 * end (the backlog a stall leaves behind takes a while to clear): *all over the run, and
 * per phase cut at cut_us (the selling phase's end as bench_timeline_phases found it over every
 * request, so both views split the run at the same moment). sorted: by due time. */
void bench_timeline_phases_outside(const bench_rec_t *sorted, size_t n, const bench_span_t *sp,
                                   size_t nsp, uint32_t pad_us, uint32_t cut_us, bench_phase_t *all,
                                   bench_phase_t *selling, bench_phase_t *sold_out);

/* The k slots with the highest p99 (ties: the earlier), indexes into s, worst first. */
size_t bench_timeline_worst(const bench_slot_t *s, size_t n, size_t k, size_t *idx);

/* The timeline as a tab-separated table: the header's columns and one slot's, without the
 * line end (the caller may add columns of its own). */
void bench_timeline_write_header(FILE *f);
void bench_timeline_write_slot(FILE *f, const bench_slot_t *s);

#endif
