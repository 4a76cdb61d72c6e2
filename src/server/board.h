/* board.h -- the sale board's data: this instance's snapshot, announced in Redis.
 *
 * Worker 0 of every instance announces a snapshot of its counters (metrics_sum) once a
 * second through src/server/board.lua, with a TTL, so any instance can show every live
 * instance of the cluster. GET /admin/api/board (api_board.c) announces too and reads
 * the instances back in the same round trip, and each sale's stock beside it. The same
 * tick writes the event log (events.h) and adds the per-sale answer totals to Redis
 * (sale_totals.h).
 *
 * Ownership: board_init() hangs the timer off w->board; board_free() releases it after
 * the worker's loop has exited (server.c). */
#ifndef SECKILL_BOARD_H
#define SECKILL_BOARD_H

#include "redis/rds.h"

struct worker;
struct sb;

#define BOARD_TTL_MS 5000          /* an instance silent this long drops off the board */
#define BOARD_ANNOUNCE_MS 1000


int board_init(struct worker *w);  /* starts the announcement timer; -1 on failure */
void board_free(struct worker *w); /* NULL board is fine */

/* Appends this instance's snapshot as one JSON object (what board.lua stores). */
void board_snapshot(struct worker *w, struct sb *out);

/* Announces this instance (src/server/board.lua, routed by its set's key, so on a Redis
 * Cluster it runs on the node of the {board} slot). want_board: the reply is every live
 * instance's snapshot (an array of strings), else 1. cb may be NULL (rds.h contract). */
void board_announce(struct worker *w, int want_board, rds_cb cb, void *priv);

#endif
