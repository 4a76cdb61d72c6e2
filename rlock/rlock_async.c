/*
 * rlock_async.c -- libevent flavour: run try_lock/unlock off the loop thread
 * and deliver the result on it.
 *
 * Each operation runs the blocking call on a short-lived worker thread (the
 * blocking engine already waits by notification, so a worker costs one
 * sleeping thread per pending acquire, not polling).  Completions are queued
 * and an eventfd registered on the loop's event_base wakes the loop, which
 * calls the callbacks -- so libevent needs no evthread setup and callbacks
 * always run on the loop thread, exactly once.
 *
 * Cancellation: rlock_async_cancel sets the handle's cancel flag and wakes
 * its waiter; the engine stops waiting at the next check.  If the acquire
 * succeeded anyway (the reply raced the cancel) the worker releases the lock
 * before completing with RLOCK_TIMEOUT, so a cancelled acquire never leaves
 * a held or renewed lock.
 */
#include "rlock_int.h"

#include <event2/event.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum { OP_LOCK, OP_UNLOCK };

struct rlock_async_op {
    rlock_async_t *a;
    rlock_t *l;
    int type;
    int64_t wait_ms, lease_ms;
    rlock_async_cb cb;
    void *arg;
    rlock_status_t st;
    atomic_bool cancelled;
    struct rlock_async_op *next;
};

struct rlock_async {
    struct event_base *base;
    struct event *ev;
    int fd;
    pthread_mutex_t mu;
    rlock_async_op_t *done_head, *done_tail;
    size_t pending;
};

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    rlock_async_t *a = arg;
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
    (void)what;
    pthread_mutex_lock(&a->mu);
    rlock_async_op_t *list = a->done_head;
    a->done_head = a->done_tail = NULL;
    pthread_mutex_unlock(&a->mu);
    while (list) {
        rlock_async_op_t *op = list;
        list = op->next;
        pthread_mutex_lock(&a->mu);
        a->pending--;
        pthread_mutex_unlock(&a->mu);
        op->cb(op->l, op->st, op->arg);
        free(op);
    }
}

rlock_status_t rlock_async_new(struct event_base *base, rlock_async_t **out)
{
    if (!base || !out) return RLOCK_EINVAL;
    rlock_async_t *a = rlock__xcalloc(1, sizeof *a);
    a->base = base;
    a->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (a->fd < 0) {
        free(a);
        return RLOCK_EINVAL;
    }
    pthread_mutex_init(&a->mu, NULL);
    a->ev = event_new(base, a->fd, EV_READ | EV_PERSIST, on_done, a);
    if (!a->ev || event_add(a->ev, NULL) != 0) {
        if (a->ev) event_free(a->ev);
        close(a->fd);
        pthread_mutex_destroy(&a->mu);
        free(a);
        return RLOCK_EINVAL;
    }
    *out = a;
    return RLOCK_OK;
}

void rlock_async_free(rlock_async_t *a)
{
    if (!a) return;
    event_free(a->ev);
    close(a->fd);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static void *worker(void *arg)
{
    rlock_async_op_t *op = arg;
    rlock_t *l = op->l;
    if (op->type == OP_LOCK) {
        op->st = rlock__acquire(l, op->wait_ms, op->lease_ms);
        if (atomic_load(&op->cancelled)) {
            if (op->st == RLOCK_OK) rlock_unlock(l);
            if (op->st == RLOCK_OK || op->st == RLOCK_TIMEOUT) op->st = RLOCK_TIMEOUT;
        }
        atomic_store(&l->cancel, 0);
    } else {
        op->st = rlock_unlock(l);
    }
    rlock_async_t *a = op->a;
    pthread_mutex_lock(&a->mu);
    op->next = NULL;
    if (a->done_tail) a->done_tail->next = op;
    else a->done_head = op;
    a->done_tail = op;
    pthread_mutex_unlock(&a->mu);
    uint64_t one = 1;
    ssize_t n = write(a->fd, &one, sizeof one);
    (void)n;
    return NULL;
}

static rlock_status_t start(rlock_async_t *a, rlock_t *l, int type, int64_t wait_ms,
                            int64_t lease_ms, rlock_async_cb cb, void *arg,
                            rlock_async_op_t **opp)
{
    if (!a || !l || !cb) return RLOCK_EINVAL;
    rlock_async_op_t *op = rlock__xcalloc(1, sizeof *op);
    op->a = a;
    op->l = l;
    op->type = type;
    op->wait_ms = wait_ms;
    op->lease_ms = lease_ms;
    op->cb = cb;
    op->arg = arg;
    atomic_init(&op->cancelled, false);
    atomic_store(&l->cancel, 0);
    pthread_mutex_lock(&a->mu);
    a->pending++;
    pthread_mutex_unlock(&a->mu);
    if (opp) *opp = op;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &at, worker, op);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        pthread_mutex_lock(&a->mu);
        a->pending--;
        pthread_mutex_unlock(&a->mu);
        if (opp) *opp = NULL;
        free(op);
        return RLOCK_EINVAL;
    }
    return RLOCK_OK;
}

rlock_status_t rlock_async_try_lock(rlock_async_t *a, rlock_t *l, int64_t wait_ms,
                                    int64_t lease_ms, rlock_async_cb cb, void *arg,
                                    rlock_async_op_t **op)
{
    return start(a, l, OP_LOCK, wait_ms, lease_ms, cb, arg, op);
}

rlock_status_t rlock_async_unlock(rlock_async_t *a, rlock_t *l, rlock_async_cb cb, void *arg)
{
    return start(a, l, OP_UNLOCK, 0, 0, cb, arg, NULL);
}

void rlock_async_cancel(rlock_async_op_t *op)
{
    if (!op || op->type != OP_LOCK) return;
    atomic_store(&op->cancelled, true);
    atomic_store(&op->l->cancel, 1);
    rlock__wake(op->l);
}
