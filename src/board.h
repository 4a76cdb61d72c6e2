/* board.h -- the sale board's data: this instance's snapshot, announced in Redis.
 *
 * Worker 0 of every instance announces a snapshot of its counters (metrics_sum) once a
 * second through scripts/board.lua, with a TTL, so any instance can show every live
 * instance of the cluster. GET /admin/api/board (api_board.c) announces too and reads
 * the whole board back in the same round trip.
 *
 * Ownership: board_init() hangs the timer off w->board; board_free() releases it after
 * the worker's loop has exited (server.c). */
#ifndef SECKILL_BOARD_H
#define SECKILL_BOARD_H

struct worker;
struct sb;
struct app;

#define BOARD_TTL_MS 5000          /* an instance silent this long drops off the board */
#define BOARD_ANNOUNCE_MS 1000

/* 0 when Redis is a Redis Cluster: board.lua needs every key on one node. */
int board_is_supported(const struct app *app);

int board_init(struct worker *w);  /* starts the announcement timer; -1 on failure */
void board_free(struct worker *w); /* NULL board is fine */

/* Appends this instance's snapshot as one JSON object (what board.lua stores). */
void board_snapshot(struct worker *w, struct sb *out);

#endif
