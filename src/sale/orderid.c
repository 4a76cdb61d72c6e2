/* orderid.c -- 64-bit order ids: time, instance slot and a per-second sequence.
 *
 * The generator's whole state is one atomic 64-bit word holding the last id handed out as
 * (seconds since ORDERID_EPOCH << ORDERID_SEQ_BITS | sequence). orderid_next() advances it
 * with a compare-and-swap loop:
 *   - wall clock ahead of the state: move to (now, 0);
 *   - same second (or the clock went back): (second, seq + 1);
 *   - sequence used up: borrow the next second, (second + 1, 0).
 * So ids from one process are strictly increasing even if the wall clock steps back, and
 * a burst of more than 4,194,304 orders in a second runs slightly ahead of the clock,
 * which catches up as soon as the burst ends. */
#include "sale/orderid.h"

#include <stdatomic.h>

#define SEQ_MASK ((UINT64_C(1) << ORDERID_SEQ_BITS) - 1)
#define SLOT_MASK ((UINT32_C(1) << ORDERID_SLOT_BITS) - 1)
#define TIME_MASK INT64_C(0x7fffffff)   /* 31 bits: until 2090 */

static _Atomic uint32_t g_slot;
/* (second << SEQ_BITS) | seq of the last id issued; 0 = none yet. */
static _Atomic uint64_t g_state;

void orderid_init(uint32_t slot)
{
    atomic_store_explicit(&g_slot, slot & SLOT_MASK, memory_order_relaxed);
}

static int64_t rel_seconds(int64_t now_s)
{
    int64_t t = now_s - ORDERID_EPOCH;
    if (t < 0)
        t = 0;
    return t & TIME_MASK;
}

int64_t orderid_make(int64_t now_s, uint32_t slot, uint32_t seq)
{
    uint64_t id = (uint64_t)rel_seconds(now_s) << (ORDERID_SLOT_BITS + ORDERID_SEQ_BITS);
    id |= (uint64_t)(slot & SLOT_MASK) << ORDERID_SEQ_BITS;
    id |= (uint64_t)seq & SEQ_MASK;
    return (int64_t)id;
}

int64_t orderid_time(int64_t id)
{
    return (int64_t)(((uint64_t)id >> (ORDERID_SLOT_BITS + ORDERID_SEQ_BITS)) & (uint64_t)TIME_MASK)
           + ORDERID_EPOCH;
}

uint32_t orderid_slot(int64_t id)
{
    return (uint32_t)(((uint64_t)id >> ORDERID_SEQ_BITS) & SLOT_MASK);
}

uint32_t orderid_seq(int64_t id)
{
    return (uint32_t)((uint64_t)id & SEQ_MASK);
}

int64_t orderid_next(int64_t now_s)
{
    uint64_t t = (uint64_t)rel_seconds(now_s);
    uint64_t old = atomic_load_explicit(&g_state, memory_order_relaxed);
    uint64_t next;
    do {
        uint64_t sec = old >> ORDERID_SEQ_BITS;
        uint64_t seq = old & SEQ_MASK;
        if (t > sec)
            next = t << ORDERID_SEQ_BITS;
        else if (seq < SEQ_MASK)
            next = old + 1;
        else
            next = (sec + 1) << ORDERID_SEQ_BITS;   /* borrow the next second */
    } while (!atomic_compare_exchange_weak_explicit(&g_state, &old, next,
                                                    memory_order_relaxed, memory_order_relaxed));
    uint32_t slot = atomic_load_explicit(&g_slot, memory_order_relaxed);
    return orderid_make((int64_t)(next >> ORDERID_SEQ_BITS) + ORDERID_EPOCH, slot,
                        (uint32_t)(next & SEQ_MASK));
}
