/* api_ops.c -- GET /health and GET /metrics.
 *
 * /health asks both dependencies at once, each within its own deadline: Redis with a
 * PING on this worker's connection (redis_timeout_ms; an instant failure while the
 * connection is down) and SQL with store_ping() on a job thread (sql_timeout_ms). 200
 * when both answer, else 503 naming what failed; data always says which is up. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "api/api.h"
#include "core/app.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "redis/rds.h"
#include "core/sb.h"
#include "store/store.h"
#include "server/worker.h"
#include "core/xmem.h"

typedef struct health {
    http_req_t *r;
    int left;                   /* answers still expected: 2 */
    int redis_up;
    int sql_up;
} health_t;

static void health_step(health_t *h)
{
    if (--h->left > 0) {
        return;
    }
    http_req_t *r = h->r;
    const char *data;
    const char *msg = NULL;
    if (h->redis_up && h->sql_up) {
        data = "{\"redis\":\"up\",\"sql\":\"up\"}";
    } else if (h->sql_up) {
        data = "{\"redis\":\"down\",\"sql\":\"up\"}";
        msg = "redis down";
    } else if (h->redis_up) {
        data = "{\"redis\":\"up\",\"sql\":\"down\"}";
        msg = "sql down";
    } else {
        data = "{\"redis\":\"down\",\"sql\":\"down\"}";
        msg = "redis and sql down";
    }
    free(h);
    if (msg == NULL) {
        api_ok(r, data, strlen(data));
        return;
    }
    sb_t s = SB_INIT;
    sb_puts(&s, "{\"success\":false,\"errorMsg\":");
    sb_json_str(&s, msg, strlen(msg));
    sb_printf(&s, ",\"data\":%s,\"code\":\"UNAVAILABLE\"}", data);
    http_reply(r, 503, NULL, s.buf, s.len);
    sb_free(&s);
}

static void on_ping(struct redisReply *rep, void *priv)
{
    health_t *h = priv;
    h->redis_up = rep != NULL && rep->type == REDIS_REPLY_STATUS && rep->len == 4 &&
                  memcmp(rep->str, "PONG", 4) == 0;
    health_step(h);
}

/* The SQL half: run() on a pool thread writes only here, never into h, which belongs to
 * the worker thread. */
typedef struct sqlping {
    health_t *h;
    int ok;
} sqlping_t;

static void run_sqlping(store_t *st, void *arg)
{
    sqlping_t *p = arg;
    p->ok = st != NULL && store_ping(st) == STORE_OK;
}

static void done_sqlping(worker_t *w, void *arg)
{
    sqlping_t *p = arg;
    health_t *h = p->h;
    h->sql_up = p->ok;
    free(p);
    health_step(h);
}

void api_ops_health(http_req_t *r)
{
    health_t *h = xcalloc(1, sizeof(*h));
    sqlping_t *p = xcalloc(1, sizeof(*p));
    h->r = r;
    h->left = 2;
    p->h = h;
    if (jobs_submit(r->w->app->jobs, r->w, run_sqlping, done_sqlping, p) != 0) {
        free(p);
        h->sql_up = 0;
        h->left--;   /* cannot reach zero here: the PING is still to come */
    }
    const char *argv[1] = { "PING" };
    size_t lens[1] = { 4 };
    rds_command(r->w->rds, on_ping, h, 1, argv, lens);
}

void api_ops_metrics(http_req_t *r)
{
    if (!api_metrics_ok(r)) {   /* --metrics-token */
        api_unauthorized(r);
        return;
    }
    sb_t s = SB_INIT;
    metrics_render(r->w->app, &s);
    http_reply(r, 200, "text/plain; version=0.0.4", s.buf ? s.buf : "", s.len);
    sb_free(&s);
}
