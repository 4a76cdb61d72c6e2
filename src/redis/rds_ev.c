/* rds_ev.c -- hiredis async contexts on a libevent loop, without an epoll_ctl per command
 * (see rds_ev.h for why and what differs from hiredis's own adapter).
 *
 * hiredis drives an adapter through five hooks: add/del read, add/del write, cleanup.
 * It asks for write interest when a command is queued (and again from its write handler
 * when a write was partial), drops it when its output buffer is empty, and re-asks for
 * read interest after every read and write. The hooks below make these calls cheap:
 * read interest is a flag on a persistent event, and write interest outside hiredis's
 * write handler only activates an fd-less event, whose callback writes once the loop has
 * run the callbacks already due in this turn.
 *
 * hiredis may free the context (and call cleanup) from inside redisAsyncHandleWrite; the
 * write callbacks mark the state busy so cleanup then leaves the freeing to them. */
#include "redis/rds_ev.h"

#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "core/xmem.h"

typedef struct rds_ev {
    redisAsyncContext *ac;
    struct event *rev;         /* EV_READ | EV_PERSIST, pending while read_on */
    struct event *wev;         /* EV_WRITE | EV_PERSIST, pending while write_on */
    struct event *flush;       /* no fd: activated to write at the end of this loop turn */
    unsigned read_on : 1;
    unsigned write_on : 1;     /* waiting for the socket to become writable */
    unsigned flush_on : 1;     /* flush is active */
    unsigned in_write : 1;     /* inside redisAsyncHandleWrite, called by us */
    unsigned dead : 1;         /* cleanup ran while in_write: free after it returns */
} rds_ev_t;

static void free_events(rds_ev_t *e)
{
    if (e->rev)
        event_free(e->rev);
    if (e->wev)
        event_free(e->wev);
    if (e->flush)
        event_free(e->flush);
    e->rev = e->wev = e->flush = NULL;
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rds_ev_t *e = arg;
    redisAsyncHandleRead(e->ac);   /* may free e (cleanup): not touched afterwards */
}

static void del_write(void *p);

/* The usual case, written here rather than by redisAsyncHandleWrite: hiredis 0.14 frees
 * its output buffer after every complete write and allocates a new empty one, which the
 * next command then grows again (three allocator calls per round trip); clearing it keeps
 * the allocation. Returns 1 when everything queued was written, else 0 (nothing or part
 * written: hiredis's handler then goes on, waits for EPOLLOUT or reports the error). */
static int write_all(rds_ev_t *e)
{
    redisContext *rc = &e->ac->c;
    size_t len = sdslen(rc->obuf);
    if (rc->err || len == 0 || !(rc->flags & REDIS_CONNECTED) ||
        (rc->flags & (REDIS_DISCONNECTING | REDIS_FREEING)))
        return 0;
    ssize_t n = write(rc->fd, rc->obuf, len);
    if (n == (ssize_t)len) {
        sdsclear(rc->obuf);
        del_write(e);          /* what hiredis does once its buffer is empty */
        return 1;
    }
    if (n > 0)
        sdsrange(rc->obuf, (int)n, -1);
    return 0;
}

static void do_write(rds_ev_t *e)
{
    if (write_all(e))
        return;
    e->in_write = 1;
    redisAsyncHandleWrite(e->ac);
    if (e->dead) {
        free(e);               /* the context is gone; cleanup freed the events */
        return;
    }
    e->in_write = 0;
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    do_write(arg);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rds_ev_t *e = arg;
    e->flush_on = 0;
    if (!e->write_on)          /* else the socket was full: its event writes */
        do_write(e);
}

static void add_read(void *p)
{
    rds_ev_t *e = p;
    if (!e->read_on && event_add(e->rev, NULL) == 0)
        e->read_on = 1;
}

static void del_read(void *p)
{
    rds_ev_t *e = p;
    if (e->read_on) {
        event_del(e->rev);
        e->read_on = 0;
    }
}

static void add_write(void *p)
{
    rds_ev_t *e = p;
    if (e->write_on)
        return;
    /* From inside the write handler: a partial write (the socket is full) or commands
     * queued by the connect callback. Before the connect completes hiredis learns of it
     * from the first writable event. Both need the real event. */
    if (e->in_write || !(e->ac->c.flags & REDIS_CONNECTED)) {
        if (event_add(e->wev, NULL) == 0)
            e->write_on = 1;
        return;
    }
    if (!e->flush_on) {
        e->flush_on = 1;
        event_active(e->flush, EV_WRITE, 1);
    }
}

static void del_write(void *p)
{
    rds_ev_t *e = p;
    if (e->write_on) {
        event_del(e->wev);
        e->write_on = 0;
    }
}

static void cleanup(void *p)
{
    rds_ev_t *e = p;
    free_events(e);            /* also takes an active flush off the loop's queue */
    if (e->in_write)
        e->dead = 1;           /* do_write frees e when hiredis returns */
    else
        free(e);
}

int rds_ev_attach(redisAsyncContext *ac, struct event_base *base)
{
    if (ac->ev.data != NULL)
        return REDIS_ERR;
    rds_ev_t *e = xcalloc(1, sizeof(*e));
    e->ac = ac;
    int fd = ac->c.fd;
    e->rev = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, e);
    e->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, on_writable, e);
    e->flush = event_new(base, -1, 0, on_flush, e);
    if (e->rev == NULL || e->wev == NULL || e->flush == NULL) {
        free_events(e);
        free(e);
        return REDIS_ERR;
    }
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    ac->ev.data = e;
    /* As hiredis's own adapter: both at once; the connect completes on the first
     * writable event. */
    add_read(e);
    add_write(e);
    return REDIS_OK;
}
