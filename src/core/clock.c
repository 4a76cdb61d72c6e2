/* clock.c -- the per-thread cached clock of an event loop (clock.h). */
#include "core/clock.h"

_Thread_local clock_cache_t clock_cache;

void clock_loop_enter(void)
{
    clock_cache.in_loop = 1;
    clock_cache.mono_ns = 0;
    clock_cache.wall_read_ms = 0;
}

void clock_loop_leave(void)
{
    clock_cache.in_loop = 0;
    clock_cache.mono_ns = 0;
}

uint64_t clock_read_ns(void)
{
    uint64_t ns = clock_mono_ns();
    if (!clock_cache.in_loop)
        return ns;
    uint64_t ms = ns / 1000000u;
    if (clock_cache.wall_read_ms == 0 || ms - clock_cache.wall_read_ms >= 1000) {
        clock_cache.wall_off_ms = (int64_t)clock_wall_ms() - (int64_t)ms;
        clock_cache.wall_read_ms = ms;
    }
    clock_cache.mono_ms = ms;
    clock_cache.mono_ns = ns;
    return ns;
}

uint64_t clock_read_wall_ms(void)
{
    if (!clock_cache.in_loop)
        return clock_wall_ms();
    uint64_t ns = clock_read_ns();
    return (uint64_t)((int64_t)(ns / 1000000u) + clock_cache.wall_off_ms);
}
