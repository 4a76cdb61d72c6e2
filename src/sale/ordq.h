/* ordq.h -- the `queue` order mode: admitted orders wait in an in-process bounded queue.
 *
 * This is the course's step before the stream: Redis admits (src/sale/admit.lua without
 * the XADD), the order goes into a queue in this process's memory, and one thread writes
 * batches to SQL. It is fast, and it shows the course's point: orders admitted but not yet
 * written are LOST if the process dies (kill -9, OOM, power) -- Redis has taken the stock
 * and recorded the buyer, SQL never hears of the order. tests/it/test_modes.py shows it;
 * `stream` mode exists to close exactly this hole.
 *
 * Capacity is reserved before admission (ordq_reserve), so an order Redis admitted always
 * has a place: a full queue refuses the request up front instead of dropping an admitted
 * order. Thread-safe; the writer thread belongs to the queue. */
#ifndef SECKILL_ORDQ_H
#define SECKILL_ORDQ_H

#include <stddef.h>

struct app;
struct store_order;

typedef struct ordq ordq_t;

/* Starts the writer thread. NULL with a reason in err on failure. */
ordq_t *ordq_start(struct app *app, size_t capacity, char *err, size_t errlen);

/* Holds a place for one order: 0, or -1 when the queue is full (answer 503). */
int ordq_reserve(ordq_t *q);
/* Gives back a place that was not used (the order was not admitted). */
void ordq_release(ordq_t *q);
/* Queues an admitted order into a place held by ordq_reserve. Never blocks, never fails. */
void ordq_push(ordq_t *q, const struct store_order *o);

/* Orders queued and not yet written. */
size_t ordq_len(ordq_t *q);

/* Writes what is queued (retrying SQL for up to 10 s), then joins the thread. Orders still
 * unwritten after that are logged as lost. NULL is fine. */
void ordq_stop(ordq_t *q);

#endif
