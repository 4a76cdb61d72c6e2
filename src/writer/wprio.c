/* wprio.c -- the order writer's share of the CPU (wprio.h).
 *
 * Linux keeps the scheduling class and the nice value per thread: both are set on the
 * writer's thread id, so the workers keep theirs. */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/log.h"
#include "writer/wprio.h"

static int set_nice(int nice)
{
    return setpriority(PRIO_PROCESS, (id_t)gettid(), nice);
}

static int set_class(int policy)
{
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    return sched_setscheduler(gettid(), policy, &sp);
}

void wprio_start(wprio_t *p, int nice, int lag_ms, int pace_ms)
{
    memset(p, 0, sizeof *p);
    p->lag_ms = lag_ms > 0 ? lag_ms : 0;
    p->pace_ms = pace_ms > 0 ? pace_ms : 0;
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (cur == -1 && errno != 0)
        cur = 0;
    int want = cur + (nice > 0 ? nice : 0);
    if (want > 19)
        want = 19;
    p->nice = want;
    if (p->lag_ms > 0 && want < 19) {
        /* Coming back from the idle class needs the right to hold nice `want` (the
         * kernel treats idle as nice 20): the same check as raising the priority from
         * want + 1 to want, which is tried here, before the thread is idle. */
        if (set_nice(want + 1) == 0 && set_nice(want) == 0 && set_class(SCHED_IDLE) == 0) {
            p->idle_ok = 1;
            p->idle = 1;
            return;
        }
        log_info("writer: stays at nice %d, not in the idle class: it could not come back "
                 "from it when behind (%s; needs CAP_SYS_NICE or RLIMIT_NICE >= %d)",
                 want + 1, strerror(errno), 20 - want);
        return;
    }
    if (want != cur && set_nice(want) != 0)
        log_warn("writer: cannot lower its priority to nice %d: %s", want, strerror(errno));
}

void wprio_read_begins(wprio_t *p, uint64_t now_ms)
{
    p->read_at = now_ms;
}

void wprio_hold(wprio_t *p)
{
    if (p->idle && set_class(SCHED_OTHER) == 0) {
        p->idle = 0;
        p->held = 1;
    }
}

void wprio_release(wprio_t *p)
{
    if (p->held && set_class(SCHED_IDLE) == 0)
        p->idle = 1;
    p->held = 0;
}

int wprio_after_batch(wprio_t *p, int got, int batch, uint64_t now_ms)
{
    if (got >= batch && got > 0) {
        if (p->behind_since == 0)
            p->behind_since = now_ms;
        if (p->idle && now_ms - p->behind_since >= (uint64_t)p->lag_ms) {
            if (set_class(SCHED_OTHER) == 0) {
                p->idle = 0;
                p->switches++;
                log_debug("writer: behind for %llu ms: back to nice %d until it catches up",
                          (unsigned long long)(now_ms - p->behind_since), p->nice);
            }
        }
        return 0;   /* more is waiting: read it at once */
    }
    p->behind_since = 0;
    if (!p->idle && p->idle_ok && set_class(SCHED_IDLE) == 0) {
        p->idle = 1;
        p->switches++;
        log_debug("writer: caught up: idle class again");
    }
    if (got <= 0 || p->pace_ms == 0 || now_ms >= p->read_at + (uint64_t)p->pace_ms)
        return 0;
    return (int)(p->read_at + (uint64_t)p->pace_ms - now_ms);
}
