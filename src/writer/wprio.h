/* wprio.h -- the order writer's share of the CPU: how it yields to the answers.
 *
 * Owned by the writer thread (writer.c): one wprio_t per writer, touched only by it.
 *
 * The writer's work can wait (an admitted order is safe in the Redis stream until its
 * commit and XACK), the answers cannot. Two knobs keep it out of their way while a sale
 * sells, each with a bound on how late an order reaches SQL:
 *
 *   class   (only with lag_ms > 0, --writer-idle-lag-ms; off by default: a busy host
 *           starves an idle-class thread, docs/bench.md "The sale's tail")
 *           the writer thread runs in the idle scheduling class (SCHED_IDLE: any other
 *           thread that wakes up takes the core at once) while it keeps up; once its
 *           reads have come back full (more orders waiting than one batch) for longer
 *           than lag_ms it returns to the normal class at nice `nice` until a read comes
 *           back short. Only where it is allowed to return (checked at its start: root,
 *           CAP_SYS_NICE or RLIMIT_NICE >= 20 - nice); otherwise it stays at nice + 1.
 *           Its SQL transactions run in the normal class (wprio_hold).
 *   pace    (only with pace_ms > 0, --writer-pace-ms; off by default)
 *           after a short read (it has caught up) it reads again no sooner than pace_ms
 *           after the previous read began: at most 1000 / pace_ms commits (each one an
 *           fsync of SQLite's WAL, synchronous=FULL) per second besides the full
 *           batches, instead of one per handful of orders. Fewer fsyncs while the sale
 *           sells is less for the disk's journal to do, which Redis's AOF appends share.
 *
 * Lag bound: an order waits at most pace_ms before a read picks it up while the writer
 * keeps up; behind, the idle class lasts at most lag_ms before the writer competes at
 * nice `nice` again (docs/bench.md, "The sale's tail"). */
#ifndef SECKILL_WPRIO_H
#define SECKILL_WPRIO_H

#include <stdint.h>

typedef struct wprio {
    int nice;             /* the normal class's nice value (above the inherited one) */
    int lag_ms;           /* behind this long: leave the idle class; 0 = never idle */
    int pace_ms;          /* at most one short read per this many ms; 0 = no pacing */
    int idle_ok;          /* the thread may come back from the idle class */
    int idle;             /* currently in the idle class */
    int held;             /* wprio_hold took it out of the idle class */
    uint64_t behind_since;/* first full read of the current run of full reads, ms; 0 = none */
    uint64_t read_at;     /* when the last read began, ms */
    uint64_t switches;    /* class changes, for the log and tests */
} wprio_t;

/* In the writer thread, before its loop: lowers the thread's priority as configured. */
void wprio_start(wprio_t *p, int nice, int lag_ms, int pace_ms);

/* Before a read: notes its start (now_ms, the monotonic clock). */
void wprio_read_begins(wprio_t *p, uint64_t now_ms);

/* Around a transaction that holds SQL's write lock: the normal class at nice `nice`, so a
 * worker's own SQL write (a login's user insert) never waits behind an idle-class thread
 * that a busy host does not schedule (priority inversion). */
void wprio_hold(wprio_t *p);
void wprio_release(wprio_t *p);

/* After a read that returned got entries of at most batch, and their commit: switches
 * class if due; returns how long to wait before the next read (ms, 0 = at once). */
int wprio_after_batch(wprio_t *p, int got, int batch, uint64_t now_ms);

#endif
