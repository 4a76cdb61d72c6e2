/* sale_totals.h -- per-sale totals of flash-sale answers by outcome, kept in Redis so a
 * sale can be reviewed after it ends, from any instance.
 *
 * The hot path only counts in memory: sale_totals_count() adds one to this worker's own
 * table (voucher id -> a counter per outcome; one writer per table, relaxed stores, no
 * lock, no Redis command, no allocation after the worker's first count). Worker 0 sums
 * every worker's table on the board's one-second tick and writes this process's counts
 * of each sale that moved with one HSET to seckill:{board}:totals:<voucherId>, one field
 * per outcome and process: "<outcome>@<instance>.<start ms>" = count
 * (metrics_outcome_name's names). The values are absolute, so a write sent again after a
 * failure or a lost answer counts nothing twice, and a restarted instance adds fields of
 * its own instead of overwriting its earlier counts; the board sums the fields by outcome
 * (sale_totals_add), which is the cluster's total. The same tick tells the event log
 * (events.h), once per sale across the instances, the first sold order (opened), sold-out
 * answer and ended answer.
 *
 * A worker's table holds SALE_TOTALS_SLOTS sales for the process's life; answers for
 * sales beyond that are counted nowhere (logged once). */
#ifndef SECKILL_SALE_TOTALS_H
#define SECKILL_SALE_TOTALS_H

#include <stddef.h>
#include <stdint.h>

#include "server/metrics.h"

struct worker;

#define KEY_BOARD_TOTALS "seckill:{board}:totals:"   /* + voucherId: in the board's slot */

#define SALE_TOTALS_SLOTS 256u        /* sales per worker table (a power of two) */
#define SALE_TOTALS_WORKERS_MAX 256   /* workers with a table; the rest count nowhere */

/* Counts one answer for the sale (voucher_id <= 0: nothing). The worker's thread only. */
void sale_totals_count(struct worker *w, int64_t voucher_id, outcome_t o);

/* Worker 0, each board tick: writes the counts that moved to Redis and tells the sale
 * events. */
void sale_totals_tick(struct worker *w);

/* One field of a totals hash (name, len) and its value into sums[OUT__COUNT] (indexed by
 * outcome), seen[o] set: 0, or -1 for a field of another shape (skipped). */
int sale_totals_add(const char *field, size_t len, int64_t value, int64_t *sums, int *seen);

#endif
