/* worker.h -- one worker thread: an event loop and everything that lives on it.
 *
 * The service runs N identical workers. Each owns its event loop, its listening socket
 * (SO_REUSEPORT, so the kernel spreads connections), its Redis connection, its token and
 * sold-out caches and its metric shard. Nothing in a worker is shared with another
 * worker, so the hot path takes no locks. Anything a worker needs from another thread
 * (SQL results from the job pool, a stop request) arrives through worker_post().
 *
 * Threading rule: w->base and every event on it belong to w's thread alone; another
 * thread never calls libevent on them (no event_add/del/active, no loopexit): it posts a
 * function that does so on w's thread. The base is created without libevent's locks
 * (worker.c), so breaking this rule is a data race, not a slowdown.
 *
 * Ownership: server.c creates and frees workers; every other module only borrows them. */
#ifndef SECKILL_WORKER_H
#define SECKILL_WORKER_H

#include <pthread.h>
#include <stdint.h>

struct event_base;
struct event;
struct app;
struct rds;
struct http_worker;
struct auth_cache;
struct adm_cache;
struct revoke;
struct metrics_shard;
struct rl_worker;
struct board;
struct room_worker;

typedef struct worker {
    int id;                          /* 0..N-1, read-only */
    struct app *app;                 /* read-only: process-wide state */
    struct event_base *base;         /* this thread's loop */
    struct rds *rds;                 /* this thread's Redis client */
    struct http_worker *http;        /* private to http.c */
    struct auth_cache *auth;         /* private to auth.c */
    struct adm_cache *adm;           /* private to admission.c */
    struct rl_worker *rl;            /* private to ratelimit.c: this worker's buckets */
    struct revoke *revoke;           /* private to revoke.c: logged-out tokens */
    struct metrics_shard *m;         /* this thread's counters (metrics.h) */
    struct room_worker *room;        /* private to room.c: room flags, poll limits, pass key */
    struct board *board;             /* worker 0 only: announcement timer (board.h) */
    /* Set by server.c; rds_node.c calls it on this thread whenever a Redis connection of this
     * worker (one per node on a cluster) finishes its handshake. */
    void (*on_redis_up)(struct worker *w);

    /* The CPU this worker's connections are steered to (its listener's SO_INCOMING_CPU,
     * steer.h; -1 = not steered): set by worker_new, read by http.c. The thread is not
     * pinned to it. */
    int cpu;

    /* cross-thread inbox (worker_post); private to worker.c */
    pthread_mutex_t inbox_mu;
    struct worker_msg *inbox_head, *inbox_tail;
    int inbox_fd;                    /* eventfd: written by a post to an empty list */
    struct event *inbox_ev;          /* EV_READ|EV_PERSIST on inbox_fd */
    pthread_t thread;
    char name[16];
} worker_t;

typedef void (*worker_fn)(worker_t *w, void *arg);

/* Runs fn(w, arg) on w's loop thread, soon. Callable from any thread, also w's own and
 * also before w's thread starts or after its loop has ended (the message then waits, or
 * is dropped at worker_free). fn runs exactly once if the loop runs after the post;
 * messages still queued at worker_free are dropped (fn never runs, the envelope is freed,
 * whatever arg owns is the poster's to lose: do not post after stop). Never call it on a
 * freed worker. */
void worker_post(worker_t *w, worker_fn fn, void *arg);

/* The worker thread's body: runs the loop until
 * event_base_loopexit/loopbreak. Returns NULL (a pthread body's result). */
void *worker_loop(worker_t *w);

/* Creates the loop and inbox (not the thread). Returns NULL on failure. */
worker_t *worker_new(struct app *app, int id);
int worker_start(worker_t *w, void *(*run)(void *));
void worker_free(worker_t *w);     /* after the thread has been joined; NULL is fine */

#endif
