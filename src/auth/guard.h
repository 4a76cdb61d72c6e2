/* guard.h -- budgets for guessing: per-key token buckets that can be looked at without
 * being charged.
 *
 * A guessing budget is spent by failures only (a wrong admin token, a token Redis does
 * not know), but must be checked before the attempt: a client whose budget is spent is
 * refused without the attempt being made, right or wrong, so the refusal tells a guesser
 * nothing. ratelimit.h's buckets charge every request, hence this small table: guard_ok
 * looks, guard_charge takes one token after a failure. Failures still in flight when a
 * budget runs out are charged when they end (a bucket never goes below zero).
 *
 * Memory is bounded: `entries` buckets, 8-way set-associative under a random seed. The
 * table fails closed: a new key whose set holds only buckets still in use (not refilled
 * to the burst) is refused, so a flood of addresses cannot hand a spent bucket a fresh
 * burst. A table is not locked: the caller owns it (one per worker, or under a mutex). */
#ifndef SECKILL_GUARD_H
#define SECKILL_GUARD_H

#include <stdint.h>

typedef struct guard guard_t;

/* per_s > 0 tokens per second, burst >= 1 at most; entries rounded up to a multiple of
 * 8. NULL when per_s <= 0 (the budget is off: every guard_* accepts NULL). */
guard_t *guard_new(double per_s, double burst, unsigned entries);
void guard_free(guard_t *g);

/* 1 if key (any value) has a whole token at now_ms (monotonic), or g is NULL. */
int guard_ok(guard_t *g, uint64_t key, uint64_t now_ms);
/* Takes one token from key's bucket (not below zero): a failure happened. */
void guard_charge(guard_t *g, uint64_t key, uint64_t now_ms);
/* Seconds until a spent bucket has a token again (Retry-After): at least 1. */
int guard_retry_s(const guard_t *g);

#endif
