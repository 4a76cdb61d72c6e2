/* fuzz_common.c -- the fuzz targets' worker and their Redis / job-pool stand-ins
 * (see fuzz_common.h). */
#include "fuzz_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "sale/admission.h"
#include "core/app.h"
#include "auth/auth.h"
#include "core/config.h"
#include "http/connlimit.h"
#include "server/jobs.h"
#include "core/log.h"
#include "server/metrics.h"
#include "redis/rds.h"
#include "sale/ratelimit.h"
#include "server/worker.h"

int fz_async;
int fz_jobs_run;
const struct redisReply *fz_reply;
const struct redisReply *fz_eval_reply;
unsigned long fz_redis_calls, fz_jobs_calls;

static fz_env_t env;
static worker_t *workers[1];
static long scheduled;   /* closures handed to the loop and not yet run */

fz_env_t *fz_env(const char *const *extra_argv)
{
    if (env.w != NULL) {
        return &env;
    }
    app_t *app = calloc(1, sizeof(*app));
    if (app == NULL) {
        abort();
    }
    /* As serve builds it (server.c): the counters exist before any worker runs, so the
     * handlers count into them without checking. */
    app->metrics = calloc(1, sizeof(*app->metrics));
    if (app->metrics == NULL) {
        abort();
    }
    char *argv[32] = { "serve", "--threads", "1" };
    int argc = 3;
    for (int i = 0; extra_argv != NULL && extra_argv[i] != NULL && argc < 31; i++) {
        argv[argc++] = (char *)extra_argv[i];
    }
    char err[512];
    if (config_load(&app->cfg, argc, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz: config: %s\n", err);
        abort();
    }
    if (app->cfg.max_conns_per_ip > 0) {
        app->connlimit = connlimit_new(app->cfg.max_conns_per_ip);   /* as serve: the default */
    }
    snprintf(app->admin_token, sizeof(app->admin_token), "%s", FZ_ADMIN_TOKEN);
    snprintf(app->name, sizeof(app->name), "fuzz");
    snprintf(app->redis_url, sizeof(app->redis_url), "redis://127.0.0.1:1");
    snprintf(app->db_url, sizeof(app->db_url), "sqlite::memory:");
    worker_t *w = worker_new(app, 0);
    if (w == NULL || posix_memalign((void **)&w->m, 64, sizeof(*w->m)) != 0) {
        abort();
    }
    memset(w->m, 0, sizeof(*w->m));
    app->nworkers = 1;
    if (auth_cache_init(w) != 0 || admission_cache_init(w) != 0 || ratelimit_app_init(app) != 0 ||
        ratelimit_worker_init(w) != 0) {
        abort();
    }
    workers[0] = w;
    app->workers = workers;
    app->nworkers = 1;
    atomic_store(&app->sql_up, 1);
    env.app = app;
    env.w = w;
    return &env;
}

/* ------------------------------------------------------------ the loop */

typedef struct closure {
    void (*fn)(struct closure *c);
    rds_cb cb;
    void *priv;
    jobs_run_fn run;
    jobs_done_fn done;
    worker_t *w;
    const redisReply *rep;
} closure_t;

static void on_closure(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    closure_t *c = arg;
    scheduled--;
    c->fn(c);
    free(c);
}

static void schedule(closure_t *c)
{
    struct timeval zero = { 0, 0 };
    scheduled++;
    if (event_base_once(env.w->base, -1, EV_TIMEOUT, on_closure, c, &zero) != 0) {
        abort();
    }
}

void fz_drain(void)
{
    for (long i = 0; scheduled > 0; i++) {
        if (i > 1000000) {
            fprintf(stderr, "fuzz: %ld callbacks never ran\n", scheduled);
            abort();
        }
        event_base_loop(env.w->base, EVLOOP_NONBLOCK);
    }
}

/* ------------------------------------------------------------ Redis stand-in */

static void redis_answer(closure_t *c)
{
    c->cb((struct redisReply *)c->rep, c->priv);
}

static void redis_call(rds_cb cb, void *priv, const redisReply *rep)
{
    fz_redis_calls++;
    if (cb == NULL) {
        return;    /* fire and forget */
    }
    if (!fz_async) {
        cb((struct redisReply *)rep, priv);
        return;
    }
    closure_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        abort();
    }
    c->fn = redis_answer;
    c->cb = cb;
    c->priv = priv;
    c->rep = rep;
    schedule(c);
}

/* The arguments must be readable: touch every byte (ASan checks the lengths). */
static void touch_args(int argc, const char **argv, const size_t *argvlen)
{
    volatile unsigned char sink = 0;
    for (int i = 0; i < argc; i++) {
        for (size_t k = 0; k < argvlen[i]; k++) {
            sink ^= (unsigned char)argv[i][k];
        }
    }
    (void)sink;
}

void __wrap_rds_command(rds_t *rc, rds_cb cb, void *priv, int argc, const char **argv,
                        const size_t *argvlen);
void __wrap_rds_command(rds_t *rc, rds_cb cb, void *priv, int argc, const char **argv,
                        const size_t *argvlen)
{
    (void)rc;
    touch_args(argc, argv, argvlen);
    redis_call(cb, priv, fz_reply);
}

void __wrap_rds_evalsha(rds_t *rc, script_id_t s, rds_cb cb, void *priv, int numkeys, int argc,
                        const char **argv, const size_t *argvlen);
void __wrap_rds_evalsha(rds_t *rc, script_id_t s, rds_cb cb, void *priv, int numkeys, int argc,
                        const char **argv, const size_t *argvlen)
{
    (void)rc;
    (void)s;
    if (numkeys < 0 || numkeys > argc) {
        abort();
    }
    touch_args(argc, argv, argvlen);
    redis_call(cb, priv, fz_eval_reply != NULL ? fz_eval_reply : fz_reply);
}

/* ------------------------------------------------------------ job-pool stand-in */

static void job_run(closure_t *c)
{
    c->run(NULL, c->priv);    /* "the pool thread could not open its connection" */
    c->done(c->w, c->priv);
}

int __wrap_jobs_submit(jobs_t *j, worker_t *w, jobs_run_fn run, jobs_done_fn done, void *arg);
int __wrap_jobs_submit(jobs_t *j, worker_t *w, jobs_run_fn run, jobs_done_fn done, void *arg)
{
    (void)j;
    fz_jobs_calls++;
    if (!fz_jobs_run) {
        return -1;
    }
    closure_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        abort();
    }
    c->fn = job_run;
    c->run = run;
    c->done = done;
    c->priv = arg;
    c->w = w;
    schedule(c);
    return 0;
}

/* ------------------------------------------------------------ logging */

/* Every log line passes here (--wrap=log_msg): quiet unless FUZZ_LOG is set, and a
 * handler replying twice -- which http.c only logs -- is a crash for the fuzzer. */
void __wrap_log_msg(int level, const char *fmt, ...);
void __wrap_log_msg(int level, const char *fmt, ...)
{
    if (strncmp(fmt, "http_reply: no request in flight", 32) == 0) {
        fprintf(stderr, "fuzz: a handler replied twice to one request\n");
        abort();
    }
    if (getenv("FUZZ_LOG") == NULL) {
        return;
    }
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "log[%d] %s\n", level, buf);
}

/* ------------------------------------------------------------ RESP */

/* hiredis 0.14 allocates an array reply's element vector as soon as it reads the
 * header "*<count>", before the elements arrive: a fuzzed "*854771614" would be an
 * out-of-memory in hiredis, not in the service (a real Redis never sends that). */
static int huge_array(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        /* Any '*', not only at a line start: hiredis 0.14 does not check the "\r\n"
         * after a bulk string, so a type byte can follow arbitrary content. */
        if (data[i] != '*') {
            continue;
        }
        unsigned long n = 0;
        for (size_t k = i + 1; k < size && data[k] >= '0' && data[k] <= '9'; k++) {
            n = n * 10 + (data[k] - '0');
            if (n > 65536) {
                return 1;
            }
        }
    }
    return 0;
}

struct redisReply *fz_parse_resp(const uint8_t *data, size_t size, size_t *used)
{
    *used = 0;
    if (huge_array(data, size)) {
        return NULL;
    }
    redisReader *rd = redisReaderCreate();
    if (rd == NULL) {
        abort();
    }
    void *reply = NULL;
    *used = 0;
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK &&
        redisReaderGetReply(rd, &reply) == REDIS_OK && reply != NULL) {
        /* what the reader has not consumed yet */
        *used = size - (sdslen(rd->buf) - rd->pos);
    } else if (reply != NULL) {
        freeReplyObject(reply);
        reply = NULL;
    }
    redisReaderFree(rd);
    return reply;
}
