/* worker.c -- a worker: its event loop, its thread and its cross-thread inbox (worker.h).
 *
 * The inbox is a mutex-protected FIFO of (fn, arg) messages plus one libevent event with
 * no fd. worker_post() appends and calls event_active(), which libevent (with pthreads
 * support on) makes safe from any thread: it wakes the loop through the base's notify
 * pipe. The inbox callback takes the whole list under the lock and runs it unlocked, so
 * a message may post again without deadlock. libevent removes an event from the active
 * queue before running its callback, so a post that races with a running callback
 * re-activates it and is never lost.
 *
 * Scheduling (docs/bench.md, "Workers' kernel and scheduling cost"): with --cpu-affinity
 * worker i's thread is pinned to the i-th CPU the process may run on, and http.c marks
 * its listener with that CPU (SO_INCOMING_CPU) so that the kernel hands a new connection
 * to the worker on the CPU that processed its handshake. */
#include "worker.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "log.h"
#include "xmem.h"

struct worker_msg {
    worker_fn fn;
    void *arg;
    struct worker_msg *next;
};

struct start_arg {
    worker_t *w;
    void *(*run)(void *);
};

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_ok;

static void evthread_init(void)
{
    /* Must run before the first event_base is created, once per process. */
    evthread_ok = evthread_use_pthreads() == 0;
}

static void on_inbox(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    worker_t *w = arg;
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
    pthread_once(&evthread_once, evthread_init);
    if (!evthread_ok) {
        log_error("worker: libevent thread support unavailable");
        return NULL;
    }
    worker_t *w = xcalloc(1, sizeof *w);
    w->id = id;
    w->app = app;
    snprintf(w->name, sizeof w->name, "w%d", id);
    w->cpu = -1;
    if (app && app->cfg.cpu_affinity) {
        w->cpu = nth_allowed_cpu(id);
        if (w->cpu < 0)
            log_warn("worker %d: --cpu-affinity: fewer CPUs than workers, this one runs unpinned", id);
    }
    pthread_mutex_init(&w->inbox_mu, NULL);
    w->base = event_base_new();
    if (!w->base) {
        pthread_mutex_destroy(&w->inbox_mu);
        free(w);
        return NULL;
    }
    w->inbox_ev = event_new(w->base, -1, 0, on_inbox, w);
    if (!w->inbox_ev) {
        event_base_free(w->base);
        pthread_mutex_destroy(&w->inbox_mu);
        free(w);
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
    if (w->inbox_tail)
        w->inbox_tail->next = m;
    else
        w->inbox_head = m;
    w->inbox_tail = m;
    pthread_mutex_unlock(&w->inbox_mu);
    event_active(w->inbox_ev, EV_READ, 0);
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
    if (w->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(w->cpu, &set);
        int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        if (rc != 0)
            log_warn("worker %d: cannot pin to CPU %d: %s", w->id, w->cpu, strerror(rc));
    }
    event_base_loop(w->base, 0);
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
    if (w->base)
        event_base_free(w->base);
    pthread_mutex_destroy(&w->inbox_mu);
    free(w);
}
