/* rds_ev.h -- hiredis async contexts on a libevent loop, without an epoll_ctl per command.
 *
 * A replacement for hiredis 0.14's <hiredis/adapters/libevent.h>. That adapter makes its
 * read and write events one-shot: every reply costs an epoll_ctl to drop the read interest
 * and one to re-add it, and every command an epoll_ctl to add write interest, a loop turn
 * to learn the socket is writable (it almost always is) and an epoll_ctl to drop it again:
 * four epoll_ctl and one extra epoll_wait per round trip, on the grab's hot path. Here:
 *
 *   - the read event is persistent (added once, removed only when hiredis asks);
 *   - a command does not wait for EPOLLOUT: the write is deferred to the end of the
 *     current loop turn (an fd-less event made active), so every command queued in this
 *     turn leaves in one write(), and no epoll_ctl is made. Only when that write could not
 *     send everything (a full socket), or while a connect is still in progress, does it
 *     wait for the socket to become writable, like the stock adapter;
 *   - a write that sends everything clears hiredis's output buffer instead of letting
 *     hiredis free it and allocate a new one (which the next command grows again).
 *
 * Ownership: the adapter's state belongs to the context; hiredis frees it through its
 * cleanup hook (redisAsyncFree, or a disconnect), also from inside our own callbacks. */
#ifndef SECKILL_RDS_EV_H
#define SECKILL_RDS_EV_H

struct redisAsyncContext;
struct event_base;

/* Attaches ac to base. Returns 0 (REDIS_OK) or -1 (already attached, out of events). */
int rds_ev_attach(struct redisAsyncContext *ac, struct event_base *base);

#endif
