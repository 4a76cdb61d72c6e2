/* jobs.c -- the SQL job pool (jobs.h): N threads, one bounded FIFO, one store each.
 *
 * Each pool thread opens its own store_t the first time it has a job, and keeps it. If
 * the open fails, the job runs with store == NULL (it reports a database error) and the
 * thread tries again on a later job, at most once per OPEN_RETRY_MS, so a missing
 * database costs a failed open per second, not one per request.
 *
 * Completion goes back through worker_post(w, done, arg): jobs_done_fn and worker_fn have
 * the same shape, so done runs on the submitting worker's loop, exactly once.
 *
 * jobs_free: no new jobs are accepted; the threads run everything already queued, then
 * exit and are joined. It is called after the workers have stopped (jobs.h), and
 * worker.h forbids posting to a stopped worker, so a job that finishes once jobs_free has
 * begun does not post its done(): that would never run anyway. The caller must still call
 * jobs_free BEFORE freeing the workers, so that a job finishing just before it cannot post
 * into freed memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "server/jobs.h"
#include "core/log.h"
#include "store/store.h"
#include "server/worker.h"
#include "core/xmem.h"

#define OPEN_RETRY_MS 1000
#define JOBS_MAX_THREADS 256

typedef struct job {
    struct job *next;
    worker_t *w;
    jobs_run_fn run;
    jobs_done_fn done;
    void *arg;
} job_t;

typedef struct jobs_thread {
    struct jobs *pool;
    pthread_t tid;
    int started;
    char name[16];                   /* log thread name; lives as long as the pool */
} jobs_thread_t;

struct jobs {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *head, *tail;
    int queued;
    int queue_max;
    int stopping;
    int nthreads;
    jobs_thread_t *threads;
    int timeout_ms;
    char db_url[1024];
};

/* Takes the next job, waiting for one; NULL once stopping and the queue is empty. */
static job_t *take(jobs_t *j)
{
    pthread_mutex_lock(&j->mu);
    while (!j->head && !j->stopping)
        pthread_cond_wait(&j->cv, &j->mu);
    job_t *jb = j->head;
    if (jb) {
        j->head = jb->next;
        if (!j->head)
            j->tail = NULL;
        j->queued--;
    }
    pthread_mutex_unlock(&j->mu);
    return jb;
}

static void *pool_main(void *arg)
{
    jobs_thread_t *t = arg;
    jobs_t *j = t->pool;
    log_set_thread_name(t->name);
    store_t *s = NULL;
    uint64_t next_open = 0;
    int open_failed = 0;
    job_t *jb;
    while ((jb = take(j)) != NULL) {
        if (!s && clock_mono_ms() >= next_open) {
            char err[512];
            s = store_open(j->db_url, j->timeout_ms, err, sizeof err);
            if (!s) {
                /* Log the first failure and then once per retry, not per job. */
                log_error("job pool: cannot open the database: %s", err);
                open_failed = 1;
                next_open = clock_mono_ms() + OPEN_RETRY_MS;
            } else if (open_failed) {
                log_info("job pool: database connection open again");
                open_failed = 0;
            }
        }
        jb->run(s, jb->arg);
        pthread_mutex_lock(&j->mu);
        int post = !j->stopping;
        pthread_mutex_unlock(&j->mu);
        if (jb->done && post)
            worker_post(jb->w, jb->done, jb->arg);
        else if (jb->done)
            log_debug("job pool: stopping: completion of a finished job not delivered");
        free(jb);
    }
    store_close(s);
    return NULL;
}

jobs_t *jobs_new(int nthreads, const char *db_url, int sql_timeout_ms, int queue_max,
                 char *err, size_t errlen)
{
    if (nthreads <= 0)
        nthreads = 1;
    if (nthreads > JOBS_MAX_THREADS)
        nthreads = JOBS_MAX_THREADS;
    if (queue_max <= 0)
        queue_max = 1024;
    if (!db_url || strlen(db_url) >= sizeof ((jobs_t *)0)->db_url) {
        snprintf(err, errlen, "job pool: database URL missing or too long");
        return NULL;
    }
    jobs_t *j = xcalloc(1, sizeof *j);
    j->threads = xcalloc((size_t)nthreads, sizeof *j->threads);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->queue_max = queue_max;
    j->timeout_ms = sql_timeout_ms > 0 ? sql_timeout_ms : 2000;
    snprintf(j->db_url, sizeof j->db_url, "%s", db_url);
    j->nthreads = nthreads;
    for (int i = 0; i < nthreads; i++) {
        jobs_thread_t *t = &j->threads[i];
        t->pool = j;
        snprintf(t->name, sizeof t->name, "db%d", i);
        int rc = pthread_create(&t->tid, NULL, pool_main, t);
        if (rc != 0) {
            snprintf(err, errlen, "job pool: cannot start thread %d: %s", i, strerror(rc));
            jobs_free(j);
            return NULL;
        }
        t->started = 1;
    }
    return j;
}

int jobs_submit(jobs_t *j, struct worker *w, jobs_run_fn run, jobs_done_fn done, void *arg)
{
    if (!j || !run)
        return -1;
    job_t *jb = xmalloc(sizeof *jb);
    jb->next = NULL;
    jb->w = w;
    jb->run = run;
    jb->done = done;
    jb->arg = arg;
    pthread_mutex_lock(&j->mu);
    if (j->stopping || j->queued >= j->queue_max) {
        pthread_mutex_unlock(&j->mu);
        free(jb);
        return -1;
    }
    if (j->tail)
        j->tail->next = jb;
    else
        j->head = jb;
    j->tail = jb;
    j->queued++;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

void jobs_free(jobs_t *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    j->stopping = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    for (int i = 0; i < j->nthreads; i++)
        if (j->threads[i].started)
            pthread_join(j->threads[i].tid, NULL);
    /* Only reachable when a thread failed to start in jobs_new: nothing ran these. */
    while (j->head) {
        job_t *jb = j->head;
        j->head = jb->next;
        free(jb);
    }
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->threads);
    free(j);
}
