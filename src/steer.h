/* steer.h -- when a worker gives connections to another, the workers being pinned to CPUs.
 *
 * With --cpu-affinity (the default when every worker can have a CPU of its own) the
 * kernel hands a new connection to the worker on the CPU that processed its handshake
 * (SO_INCOMING_CPU, http.c): the connection's segments, the wake-ups between client and
 * worker and the socket's cache lines then stay on one CPU. That locality is what the
 * steering is for; its risk is a client or proxy that connects from one CPU, which would
 * put every connection on one worker. So a worker that has more than a margin more
 * connections than the least loaded worker open to hand-offs gives it about half the
 * difference, choosing connections that are idle between requests (http.c passes each
 * socket through that worker's inbox). It waits a moment before doing so (a burst from
 * one client thread is often followed by another thread's from another CPU) and checks
 * again every second. Connections from many CPUs stay where the kernel put them;
 * connections from one CPU end up split nearly evenly, as the kernel's hash would.
 *
 * Pure: no threads, no I/O (tests/unit/test_steer.c). */
#ifndef SECKILL_STEER_H
#define SECKILL_STEER_H

#define STEER_MAX_WORKERS 256        /* --threads' limit (config.c) */

/* load[i]: worker i's connections (open and handed to it, not yet taken); open[i]: it
 * takes hand-offs (accepting, not stopping). Returns the worker self should give
 * connections to: the least loaded open one when self has more than steer_margin()
 * more connections than it, else self (nothing to do). 0 <= self < n. */
int steer_pick(const int *load, const unsigned char *open, int n, int self);

/* The imbalance a worker keeps for the sake of locality: 2 connections, plus 1 per 16
 * that the two workers hold together. */
int steer_margin(int mine, int least);

/* How many connections a worker with `mine` gives one with `least` (steer_pick chose
 * it): half the difference, so that both end with about the same. */
int steer_moves(int mine, int least);

#endif
