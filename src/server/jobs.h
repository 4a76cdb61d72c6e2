/* jobs.h -- a small thread pool that runs blocking SQL calls off the event loops.
 *
 * Event loops never wait for SQL. A handler that needs the database submits a job: run()
 * executes on a pool thread with that thread's own store connection, then done() runs
 * back on the submitting worker's loop (via worker_post). Used by the non-hot endpoints
 * (login, voucher create/list, order lookups, /health); the flash-sale path never uses it.
 *
 * The queue is bounded: when full, jobs_submit returns -1 and nothing runs (the caller
 * answers 503). run() must not touch the worker; done() must not block. */
#ifndef SECKILL_JOBS_H
#define SECKILL_JOBS_H

struct worker;
struct store;

typedef struct jobs jobs_t;

/* run returns nothing: put results in arg. store is NULL if the pool thread could not
 * open its connection (the job should then report a database error). */
typedef void (*jobs_run_fn)(struct store *s, void *arg);
typedef void (*jobs_done_fn)(struct worker *w, void *arg);

jobs_t *jobs_new(int nthreads, const char *db_url, int sql_timeout_ms, int queue_max,
                 char *err, size_t errlen);
/* 0 = accepted (done will run exactly once on w's loop), -1 = queue full or stopping. */
int jobs_submit(jobs_t *j, struct worker *w, jobs_run_fn run, jobs_done_fn done, void *arg);
/* Runs what is queued, then joins the threads. Call after the workers have stopped. */
void jobs_free(jobs_t *j);

#endif
