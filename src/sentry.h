/* sentry.h -- the order stream's entry format: what scripts/admit.lua writes into
 * seckill:stream:{<voucherId>}, and the one reader of it that the order writer, a rebuild
 * from SQL and the audit share.
 *
 * An entry admit.lua writes has one field:
 *
 *     o   "<orderId> <userId> <ts> <ep>"     (decimal numbers, one space between)
 *
 * orderId and userId are positive; ts is the admission's second by Redis's clock (TIME);
 * ep is the voucher's Redis generation at admission (0 until a rebuild from SQL; the writer
 * fences orders of a replaced generation, store.h). The voucher is the stream's own: its
 * key names it. One field instead of five (id, userId, voucherId, ts, ep) makes the XADD
 * inside the script, the AOF record, and every XREADGROUP reply the writer reads a fraction
 * of their former size (docs/bench.md, "Redis per grab").
 *
 * Entries in the earlier named form are still read, so orders queued by an earlier version
 * are written after an upgrade:
 *
 *     id <orderId> userId <userId> voucherId <voucherId> [ts <ts>] [ep <ep>]
 *
 * Pure functions on a hiredis reply; any thread. */
#ifndef SECKILL_SENTRY_H
#define SECKILL_SENTRY_H

#include <stdint.h>

struct redisReply;

typedef struct sentry {
    int64_t order_id;
    int64_t user_id;
    int64_t ts;   /* 0 when absent or not a number: the caller falls back on the entry id */
    int64_t ep;   /* 0 when absent */
} sentry_t;

/* Parses an entry's field/value array (the second element of an XRANGE / XREADGROUP
 * entry) of the stream of voucher_id. 0, or -1 with *reason set to a short static text
 * (e.g. "missing or bad userId", "voucherId is not the stream's voucher"). */
int sentry_parse(const struct redisReply *fields, int64_t voucher_id, sentry_t *out,
                 const char **reason);

#endif
