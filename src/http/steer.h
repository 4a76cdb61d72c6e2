/* steer.h -- when a worker gives connections to another, the workers being steered by CPU.
 *
 * With --steer-connections (on by default; when every worker can have a CPU of its own)
 * the kernel hands a new connection to the worker on the CPU that processed its handshake
 * (SO_INCOMING_CPU, http.c), so each client thread's connections share one worker. The
 * workers are not pinned: the scheduler's wake-ups then tend to
 * run a client thread and its worker on one CPU, where the connection's segments, their
 * wake-ups and the socket's cache lines stay. That locality is what the steering is for;
 * its risk is a client or proxy that connects from one CPU, which would put every
 * connection on one worker. So the workers move connections that are idle
 * between requests (http.c passes each socket through the receiver's inbox):
 *   - balance: a worker with more than a margin more connections than the least loaded
 *     worker open to hand-offs gives it half the difference (checked a moment after an
 *     accept, and every second);
 *   - follow: a moment after an accept, a connection whose packets now arrive on another
 *     worker's CPU goes to that worker while it has fewer connections. A client thread's
 *     burst that balancing split is put back together once another thread's burst from
 *     another CPU arrives. With the workers not pinned this is a hint, not a rule: a
 *     connection's incoming CPU is where its last segment was processed, and a delayed
 *     ACK from the client goes out from the CPU that processed the answer, i.e. where the
 *     worker ran (tests/it/test_affinity.py tests following with the test pinning the workers).
 * Connections from many CPUs stay where the kernel put them; connections from one CPU
 * end up split nearly evenly, as the kernel's hash would.
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

/* Whether the i-th (0-based, in the worker's list: newest accepted first) of its m
 * movable connections goes when steer_moves() says k should: every (m/k)-th, spread over
 * the list rather than its first k. A client that sends round robin over its connections
 * in the order it opened them (seckill bench; a proxy's pool) would otherwise, after one
 * CPU's burst was balanced, send to one worker for half of each cycle and to the other for
 * the rest: each worker would get bursts at twice the rate, and the sold-out phase of
 * perf/sale_ab.py had a higher p99 steered than hashed (docs/http.md). Exactly min(k, m) of the m are chosen; none when k <= 0. */
int steer_take(int i, int m, int k);

/* Whether a connection whose packets arrive on another steered worker's CPU may go to
 * it: only while that worker, with it, still has fewer connections than this one has
 * left (so following the client's CPU never makes a worker the busier one). */
int steer_may_follow(int mine, int theirs);

#endif
