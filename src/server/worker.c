/* worker.c -- a worker: its event loop, its thread and its cross-thread inbox (worker.h).
 *
 * Threading rule: a worker's event base and every event on it are touched only by the
 * worker's own thread (after worker_start; before it, by the thread that creates the
 * worker, and after the join by the one that frees it). So the base is created without
 * libevent's locks (EVENT_BASE_FLAG_NOLOCK: no mutex around every event operation, no
 * notify pipe), and the process does not turn libevent's thread support on at all (no
 * evthread_use_pthreads): no base is shared between threads (bench_load.c's are NOLOCK
 * too), and libevent's other globals serve signal events and debug mode, both unused.
 *
 * The one way in from other threads is worker_post(), which touches no libevent state:
 * the inbox is a mutex-protected FIFO of (fn, arg) messages plus an eventfd watched by a
 * persistent EV_READ event on the worker's base. worker_post() appends and writes the
 * eventfd only when the list was empty: a non-empty list already has a wake-up on its
 * way (the write that made it non-empty, not yet consumed). on_inbox() first reads the
 * eventfd (resetting it), then takes the whole list under the lock and runs it unlocked,
 * so a message may post again without deadlock. Reading before taking keeps that rule
 * true: a post that finds the list empty after the take writes again, and one that lands
 * between the read and the take is in the taken list (its write, if any, only wakes the
 * loop to an empty list).
 *
 * Scheduling (docs/http.md): with at least as many CPUs as workers, worker
 * i is given the i-th CPU the process may run on, and http.c marks its listener with that
 * CPU (SO_INCOMING_CPU) so that the kernel hands a new connection to the worker of the CPU
 * that processed its handshake; steer.h's rule then moves a connection to another worker
 * when one gets too many (--steer-connections, on by default). That groups each client
 * thread's connections on one worker, and the scheduler's wake-ups then tend to run the
 * two on one CPU. The threads are not pinned: a pinned worker could not leave a CPU that
 * the hypervisor stalls or that Redis or the order writer occupy, and pinning added
 * nothing to the steering's saving. With fewer CPUs than workers no worker is steered. */
#include "server/worker.h"

#include <event2/event.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/app.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/xmem.h"

struct worker_msg {
    worker_fn fn;
    void *arg;
    struct worker_msg *next;
};

struct start_arg {
    worker_t *w;
    void *(*run)(void *);
};

static void on_inbox(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    worker_t *w = arg;
    /* First reset the eventfd, then take the list: the other order could consume the
     * wake-up of a post that lands in between and leave its message unseen. */
    uint64_t n;
    while (read(fd, &n, sizeof n) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&w->inbox_mu);
    struct worker_msg *m = w->inbox_head;
    w->inbox_head = w->inbox_tail = NULL;
    pthread_mutex_unlock(&w->inbox_mu);
    while (m) {
        struct worker_msg *next = m->next;
        m->fn(w, m->arg);
        free(m);
        m = next;
    }
}

/* The worker's base (no locks: the threading rule above) and its inbox's eventfd and
 * event. 0, or -1 with whatever was made left for worker_free. */
static int inbox_open(worker_t *w)
{
    w->inbox_fd = -1;
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
        w->base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (!w->base)
        return -1;
    w->inbox_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->inbox_fd < 0) {
        log_error("worker %d: eventfd: %s", w->id, strerror(errno));
        return -1;
    }
    w->inbox_ev = event_new(w->base, w->inbox_fd, EV_READ | EV_PERSIST, on_inbox, w);
    if (!w->inbox_ev || event_add(w->inbox_ev, NULL) != 0)
        return -1;
    return 0;
}

/* How many CPUs the process may run on (its affinity mask), or 0 when unknown. */
static int allowed_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

/* The id-th CPU (0-based) of the process's affinity mask, or -1 when it has fewer. */
static int nth_allowed_cpu(int id)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &set) && seen++ == id)
            return c;
    }
    return -1;
}

worker_t *worker_new(struct app *app, int id)
{
    worker_t *w = xcalloc(1, sizeof *w);
    w->id = id;
    w->app = app;
    snprintf(w->name, sizeof w->name, "w%d", id);
    w->cpu = -1;
    if (app && app->cfg.steer_connections) {
        /* All or none: a worker without a CPU of its own would get no connection by CPU. */
        int ncpu = allowed_cpus();
        if (ncpu >= app->cfg.threads)
            w->cpu = nth_allowed_cpu(id);
        else if (id == 0)
            log_info("%d workers on %d CPUs: connections are not steered by CPU",
                     app->cfg.threads, ncpu);
    }
    pthread_mutex_init(&w->inbox_mu, NULL);
    if (inbox_open(w) != 0) {
        worker_free(w);
        return NULL;
    }
    return w;
}

void worker_post(worker_t *w, worker_fn fn, void *arg)
{
    struct worker_msg *m = xmalloc(sizeof *m);   /* a lost message would hang its sender */
    m->fn = fn;
    m->arg = arg;
    m->next = NULL;
    pthread_mutex_lock(&w->inbox_mu);
    int was_empty = w->inbox_head == NULL;
    if (w->inbox_tail)
        w->inbox_tail->next = m;
    else
        w->inbox_head = m;
    w->inbox_tail = m;
    pthread_mutex_unlock(&w->inbox_mu);
    /* Only the post that made the list non-empty wakes the loop (the threading rule
     * above). An eventfd write cannot block or fail short of EINTR: the counter would
     * have to reach 2^64 - 1. */
    if (was_empty) {
        uint64_t one = 1;
        while (write(w->inbox_fd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    }
}

static void *thread_main(void *p)
{
    struct start_arg sa = *(struct start_arg *)p;
    free(p);
    /* The kernel's thread name (top -H, gdb) and the log's [thread] column agree. */
    pthread_setname_np(pthread_self(), sa.w->name);
    log_set_thread_name(sa.w->name);
    return sa.run(sa.w);
}

void *worker_loop(worker_t *w)
{
    /* One wake-up per event_base_loop(EVLOOP_ONCE): wait, run what became active,
     * return. Before each wait the cached clock is marked stale, so everything the
     * wake-up runs shares one clock reading (clock.h). A loopexit or loopbreak from a
     * callback ends the loop as event_base_loop(base, 0) would; so do no events left. */
    clock_loop_enter();
    for (;;) {
        clock_loop_wake();
        if (event_base_loop(w->base, EVLOOP_ONCE) != 0 || event_base_got_exit(w->base) ||
            event_base_got_break(w->base))
            break;
    }
    clock_loop_leave();
    return NULL;
}

int worker_start(worker_t *w, void *(*run)(void *))
{
    struct start_arg *sa = xmalloc(sizeof *sa);
    sa->w = w;
    sa->run = run;
    int rc = pthread_create(&w->thread, NULL, thread_main, sa);
    if (rc != 0) {
        free(sa);
        log_error("worker %d: pthread_create: %s", w->id, strerror(rc));
        return -1;
    }
    return 0;
}

void worker_free(worker_t *w)
{
    if (!w)
        return;
    /* Messages still queued are dropped without running (worker.h: never post after
     * stop); free their envelopes so nothing leaks. */
    int dropped = 0;
    for (struct worker_msg *m = w->inbox_head, *next; m; m = next) {
        next = m->next;
        free(m);
        dropped++;
    }
    if (dropped)
        log_warn("worker %d: %d queued message(s) dropped at free", w->id, dropped);
    if (w->inbox_ev)
        event_free(w->inbox_ev);
    if (w->inbox_fd >= 0)
        close(w->inbox_fd);
    if (w->base)
        event_base_free(w->base);
    pthread_mutex_destroy(&w->inbox_mu);
    free(w);
}
