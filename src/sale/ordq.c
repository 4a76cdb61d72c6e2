/* ordq.c -- the in-process order queue of `queue` mode (ordq.h) and its writer thread.
 *
 * A ring buffer under one mutex: workers push (a handful of instructions under the lock),
 * the writer takes up to writer_batch orders at a time and writes them with
 * store_orders_write -- the same idempotent batch write the stream writer uses. A batch
 * that fails stays in the writer's hands and is retried with back-off (50 ms doubling to
 * 5 s); it is lost only if the process dies, which is this mode's documented limit. */
#include "sale/ordq.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/app.h"
#include "core/clock.h"
#include "core/log.h"
#include "server/metrics.h"
#include "store/store.h"
#include "core/xmem.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 5000
#define STOP_GRACE_MS 10000

struct ordq {
    app_t *app;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* signalled on push and on stop */
    store_order_t *ring;
    size_t cap, head, len;      /* orders in ring[head .. head+len) mod cap */
    size_t reserved;            /* places promised by ordq_reserve, not yet pushed */
    int stop;
    pthread_t thread;
    store_t *st;
    store_order_t *batch;
    size_t batch_max;
};

int ordq_reserve(ordq_t *q)
{
    int ok;
    pthread_mutex_lock(&q->mu);
    ok = q->len + q->reserved < q->cap;
    if (ok)
        q->reserved++;
    pthread_mutex_unlock(&q->mu);
    return ok ? 0 : -1;
}

void ordq_release(ordq_t *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->reserved > 0)
        q->reserved--;
    pthread_mutex_unlock(&q->mu);
}

void ordq_push(ordq_t *q, const store_order_t *o)
{
    pthread_mutex_lock(&q->mu);
    if (q->reserved > 0)
        q->reserved--;
    if (q->len < q->cap) {   /* always true for a reserved place */
        q->ring[(q->head + q->len) % q->cap] = *o;
        q->len++;
    } else {
        log_error("queue: order %lld of user %lld has no place (push without reserve)",
                  (long long)o->id, (long long)o->user_id);
    }
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

size_t ordq_len(ordq_t *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

/* Moves up to batch_max orders into q->batch; waits while empty and not stopping.
 * Returns the count (0 only when stopping and empty). */
static size_t take(ordq_t *q)
{
    pthread_mutex_lock(&q->mu);
    while (q->len == 0 && !q->stop)
        pthread_cond_wait(&q->cv, &q->mu);
    size_t n = q->len < q->batch_max ? q->len : q->batch_max;
    for (size_t i = 0; i < n; i++)
        q->batch[i] = q->ring[(q->head + i) % q->cap];
    q->head = (q->head + n) % q->cap;
    q->len -= n;
    pthread_mutex_unlock(&q->mu);
    return n;
}

static int stopping(ordq_t *q)
{
    pthread_mutex_lock(&q->mu);
    int s = q->stop;
    pthread_mutex_unlock(&q->mu);
    return s;
}

/* Writes q->batch[0..n) until it commits; gives up only when stopping for too long. */
static int write_batch(ordq_t *q, size_t n)
{
    metrics_t *m = q->app->metrics;
    int backoff = BACKOFF_MIN_MS;
    uint64_t stop_seen = 0;
    for (;;) {
        char err[512] = "";
        if (!q->st)
            q->st = store_open(q->app->db_url, q->app->cfg.sql_timeout_ms, err, sizeof err);
        size_t ins = 0, conf = 0;
        if (q->st && store_orders_write(q->st, q->batch, n, &ins, &conf, NULL) == STORE_OK) {
            atomic_store(&q->app->sql_up, 1);
            metric_add(&m->orders_persisted, ins);
            metric_add(&m->order_id_conflicts, conf);
            metric_add(&m->orders_replayed, n - ins - conf);
            metric_inc(&m->writer_batches);
            metric_add(&m->writer_batch_orders, n);
            return 0;
        }
        if (q->st) {
            snprintf(err, sizeof err, "%s", store_errmsg(q->st));
            store_close(q->st);   /* a fresh connection on the next try */
            q->st = NULL;
        }
        atomic_store(&q->app->sql_up, 0);
        metric_inc(&m->writer_failures);
        metric_inc(&m->sql_errors);
        uint64_t now = clock_mono_ms();
        if (stopping(q)) {
            if (!stop_seen)
                stop_seen = now;
            if (now - stop_seen >= STOP_GRACE_MS)
                return -1;
        }
        log_warn("queue: batch of %zu orders not written (%s); retry in %d ms", n, err, backoff);
        struct timespec ts = {backoff / 1000, (long)(backoff % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
}

static void *ordq_main(void *arg)
{
    ordq_t *q = arg;
    log_set_thread_name("queue");
    size_t n;
    while ((n = take(q)) > 0) {
        if (write_batch(q, n) != 0) {
            size_t left = n + ordq_len(q);
            log_error("queue: stopping with %zu admitted orders unwritten: they are LOST "
                      "(queue mode keeps orders only in memory; use --mode stream)", left);
            break;
        }
    }
    store_close(q->st);
    q->st = NULL;
    return NULL;
}

ordq_t *ordq_start(struct app *app, size_t capacity, char *err, size_t errlen)
{
    if (capacity == 0) {
        snprintf(err, errlen, "queue: capacity must be positive");
        return NULL;
    }
    ordq_t *q = xcalloc(1, sizeof *q);
    q->app = app;
    q->cap = capacity;
    q->batch_max = (size_t)(app->cfg.writer_batch > 0 ? app->cfg.writer_batch : 512);
    q->ring = xcalloc(capacity, sizeof *q->ring);
    q->batch = xcalloc(q->batch_max, sizeof *q->batch);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->thread, NULL, ordq_main, q) != 0) {
        snprintf(err, errlen, "queue: cannot start the writer thread");
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        free(q->ring);
        free(q->batch);
        free(q);
        return NULL;
    }
    return q;
}

void ordq_stop(ordq_t *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->ring);
    free(q->batch);
    free(q);
}
