/* orderid.h -- 64-bit order ids, unique across instances without a Redis round trip.
 *
 *   bit 63      0
 *   bits 62-32  seconds since 2022-01-01T00:00:00 UTC (the course's epoch, 1640995200)
 *   bits 31-22  instance slot (0..1023), leased per process from Redis at start
 *   bits 21-0   sequence within that second in this process (4,194,304 per second)
 *
 * The course's RedisIdWorker spends an INCR per order; here the slot is leased once, and
 * the per-second sequence is an atomic in memory. If a second's sequence is used up the
 * generator borrows the next second, and it never goes back in time if the wall clock
 * does, so ids from one process are strictly increasing. Thread-safe. */
#ifndef SECKILL_ORDERID_H
#define SECKILL_ORDERID_H

#include <stdint.h>

#define ORDERID_EPOCH 1640995200LL
#define ORDERID_SLOT_BITS 10
#define ORDERID_SEQ_BITS 22

void orderid_init(uint32_t slot);
/* Next id at wall time now_s (pass clock_wall_s()). */
int64_t orderid_next(int64_t now_s);

/* Pure helpers (unit-tested). */
int64_t orderid_make(int64_t now_s, uint32_t slot, uint32_t seq);
int64_t orderid_time(int64_t id);        /* epoch seconds encoded in the id */
uint32_t orderid_slot(int64_t id);
uint32_t orderid_seq(int64_t id);

#endif
