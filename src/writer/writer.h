/* writer.h -- the order writer: Redis Stream consumer group -> SQL, exactly once.
 *
 * One thread per process, with its own blocking Redis connection (socket timeouts as
 * deadlines) and its own store connection. Loop:
 *   1. at start, finish this consumer's own pending entries (XREADGROUP ... 0);
 *   2. XREADGROUP GROUP g1 <name> COUNT batch BLOCK block_ms over every registered order
 *      stream (seckill:streams), write the batch in ONE SQL transaction
 *      (store_orders_write: idempotent inserts + stock decrement), then XACK -- only
 *      after the commit;
 *   3. every few seconds, XAUTOCLAIM entries idle longer than claim_idle_ms from dead
 *      consumers and write them the same way;
 *   4. a batch that fails is kept and retried with back-off (50 ms doubling to 5 s),
 *      counted in metrics and logged; it is never dropped and never acked unwritten.
 * At-least-once delivery from the stream + idempotent inserts = exactly once in SQL. */
#ifndef SECKILL_WRITER_H
#define SECKILL_WRITER_H

struct app;

typedef struct writer writer_t;

/* Starts the thread. Returns NULL with a reason in err if it cannot start. */
writer_t *writer_start(struct app *app, char *err, size_t errlen);
/* Asks the thread to finish: it commits and acks what it has read, then writes what is
 * still queued in the streams (for up to 3 s, without blocking; call it after the workers
 * have stopped admitting), then returns. Joins it. NULL is fine. */
void writer_stop(writer_t *wr);

#endif
