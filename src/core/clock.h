/* clock.h -- the two clocks the service uses, and an event loop's cached reading of them.
 *
 * Monotonic time for deadlines, timeouts and cache ages (never jumps); wall time only
 * for what a person or the database reads (order ids, create_time, sale windows).
 *
 * clock_mono_* and clock_wall_* read the clock. clock_now_* is what code running on a
 * worker's loop reads instead: the loop (worker.c) calls clock_loop_wake() before each
 * wait for events, the first clock_now_*() after the wake-up reads the clock, and every
 * later one until the next wake-up returns that reading -- one thread-local load, however
 * many requests, Redis replies and timers the wake-up serves (as Redis's cached time,
 * updateCachedTimeWithUs, and nginx's ngx_time_update). So "now" is when the loop woke,
 * microseconds old; deadlines set from it end at most that much early. On a thread that
 * is not inside clock_loop_enter/leave (tools, the writer, tests) clock_now_* reads the
 * clock every time. */
#ifndef SECKILL_CLOCK_H
#define SECKILL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline uint64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The monotonic time ms milliseconds from now, for pthread_cond_timedwait on a condition
 * variable whose clock is CLOCK_MONOTONIC. */
static inline struct timespec clock_mono_after(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Seconds since the Unix epoch. */
static inline int64_t clock_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}

/* Milliseconds since the Unix epoch (comparable across hosts, unlike the monotonic clock). */
static inline uint64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ==== The loop's cached clock ==== */

typedef struct clock_cache {
    uint64_t mono_ns;       /* the reading of this wake-up; 0: none yet (or not a loop) */
    uint64_t mono_ms;       /* the same in ms */
    int64_t wall_off_ms;    /* wall minus monotonic ms, re-read once a second: a step of
                               the wall clock shows within a second */
    uint64_t wall_read_ms;  /* monotonic ms when wall_off_ms was read */
    int in_loop;            /* between clock_loop_enter and clock_loop_leave */
} clock_cache_t;

extern _Thread_local clock_cache_t clock_cache;

/* The calling thread runs an event loop from now on (enter) or no longer (leave). */
void clock_loop_enter(void);
void clock_loop_leave(void);

/* The loop is about to wait: the next clock_now_*() reads the clock again. */
static inline void clock_loop_wake(void)
{
    clock_cache.mono_ns = 0;
}

/* The slow paths of clock_now_ns and clock_now_wall_ms: read, and keep inside a loop. */
uint64_t clock_read_ns(void);
uint64_t clock_read_wall_ms(void);

/* clock_mono_ns(), as of this wake-up of the thread's loop. */
static inline uint64_t clock_now_ns(void)
{
    uint64_t ns = clock_cache.mono_ns;
    return ns != 0 ? ns : clock_read_ns();
}

/* clock_mono_ms(), as of this wake-up. */
static inline uint64_t clock_now_ms(void)
{
    return clock_cache.mono_ns != 0 ? clock_cache.mono_ms : clock_read_ns() / 1000000u;
}

/* clock_wall_ms(), as of this wake-up (the monotonic reading plus the wall offset). */
static inline uint64_t clock_now_wall_ms(void)
{
    if (clock_cache.mono_ns == 0)
        return clock_read_wall_ms();
    return (uint64_t)((int64_t)clock_cache.mono_ms + clock_cache.wall_off_ms);
}

#endif
