/* titles.h -- the flash sales' titles for the sale board, read from SQL once per process.
 *
 * The board lists sales by what Redis holds (ids, stock, window); their titles are in SQL
 * only. A board request asks titles_get for each sale; the ids it does not know yet are
 * read in one job (titles_load, on a job thread) and kept: a voucher's title never
 * changes. Process-wide, behind a mutex (every worker serves the board); TITLES_MAX
 * sales are kept, the oldest given up beyond that. */
#ifndef SECKILL_TITLES_H
#define SECKILL_TITLES_H

#include <stddef.h>
#include <stdint.h>

struct store;
struct sb;

#define TITLES_MAX 512

/* Appends the sale's title as a JSON string to out: 1, or 0 when it is not known (nothing
 * appended). */
int titles_get(int64_t voucher_id, struct sb *out);

/* On a job thread: reads the titles of ids[0..n) from SQL and keeps them (an id SQL does
 * not know is kept as ""). */
void titles_load(struct store *st, const int64_t *ids, size_t n);

#endif
