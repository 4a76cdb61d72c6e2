/* sentry.h -- the order stream's entry format: what src/sale/admit.lua writes into
 * seckill:stream:{<voucherId>}, and the one reader of it that the order writer, a rebuild
 * from SQL and the audit share.
 *
 * An entry admit.lua writes carries every order one script call admitted (up to the 64
 * admissions admission.c sends together), in one field:
 *
 *     os  "<ts> <ep> <orderId> <userId> [<orderId> <userId> ...]"   (decimal, one space
 *                                                                     between)
 *
 * orderId and userId are positive; ts is the admission's second by Redis's clock (TIME,
 * one per call); ep is the voucher's Redis generation at admission (0 until a rebuild from
 * SQL; the writer fences orders of a replaced generation, store.h). The voucher is the
 * stream's own: its key names it. One entry per call instead of one per order makes the
 * script's XADDs, their AOF records, the writer's XREADGROUP reply, the consumer group's
 * pending list and its XACKs a fraction of what they were (docs/bench.md, "Fewer writes
 * per grab"). An entry is one unit: the writer acks it once ALL its orders are in SQL,
 * and an entry with one bad order is moved to the dead letters whole.
 *
 * The forms earlier versions wrote are still read, so orders queued by them are written
 * after an upgrade:
 *
 *     o   "<orderId> <userId> <ts> <ep>"                        (one order per entry)
 *     id <orderId> userId <userId> voucherId <voucherId> [ts <ts>] [ep <ep>]   (named)
 *
 * Pure functions on a hiredis reply; any thread. */
#ifndef SECKILL_SENTRY_H
#define SECKILL_SENTRY_H

#include <stddef.h>
#include <stdint.h>

struct redisReply;

/* One order of an entry. */
typedef struct sentry {
    int64_t order_id;
    int64_t user_id;
    int64_t ts;   /* 0 when absent or not a number: the caller falls back on the entry id */
    int64_t ep;   /* 0 when absent */
} sentry_t;

/* An entry's orders, one after the other (sentry_next). Borrows the reply. */
typedef struct sentry_it {
    size_t left;          /* orders not yet returned (lazy: the bound) */
    size_t taken;         /* lazy: orders sentry_take returned */
    int lazy;             /* opened by sentry_open_lazy (an os entry) */
    const char *p, *end;  /* os: the next "<orderId> <userId>" pair, the value's end */
    sentry_t cur;         /* o, named: the one order; os: ts and ep shared by all */
} sentry_it_t;

/* Checks an entry's field/value array (the second element of an XRANGE / XREADGROUP
 * entry) of the stream of voucher_id, all of it: 0 with it at the first of *norders (>= 1)
 * orders, or -1 with *reason set to a short static text (e.g. "missing or bad userId",
 * "voucherId is not the stream's voucher") when any part of it is bad. */
int sentry_open(const struct redisReply *fields, int64_t voucher_id, sentry_it_t *it,
                size_t *norders, const char **reason);

/* The next order of an opened entry into *out: 1, or 0 when there is none left. */
int sentry_next(sentry_it_t *it, sentry_t *out);

/* sentry_open in one pass over the numbers, for a reader that can drop the orders it took
 * of an entry that turns out bad (the order writer): checks the fields, ts and ep, and sets
 * *bound to at most how many orders the entry may hold (<= what sentry_open allows);
 * sentry_take then checks each order as it returns it. An entry is still one unit: once
 * sentry_take says -1, drop every order taken from it. Each number of the orders is read
 * once instead of twice (checked, then read): ~1 % of the writer's instructions. */
int sentry_open_lazy(const struct redisReply *fields, int64_t voucher_id, sentry_it_t *it,
                     size_t *bound, const char **reason);
/* The next order of an entry opened by sentry_open_lazy (or sentry_open): 1 with *out, 0
 * when there is none left, -1 with *reason (sentry_open's reasons) when the entry is bad. */
int sentry_take(sentry_it_t *it, sentry_t *out, const char **reason);

#endif
