/* clock.h -- the two clocks the service uses.
 *
 * Monotonic time for deadlines, timeouts and cache ages (never jumps); wall time only
 * for what a person or the database reads (order ids, create_time, sale windows). */
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

#endif
