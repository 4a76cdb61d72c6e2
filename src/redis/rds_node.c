/* rds_node.c -- one asynchronous connection to one Redis: deadlines, reconnects, scripts.
 *
 * One rds_node_t per Redis a worker talks to (rds.c's single Redis, or one per cluster
 * node for rds_cluster.c), living on the worker's libevent loop through rds_ev.c (a
 * libevent adapter without hiredis's epoll_ctl per command). hiredis 0.14 has no
 * timeouts, so this file adds them (see rds.h for the contract callers rely on).
 *
 * States:
 *
 *     DOWN --start_connect--> CONNECTING --on_connect(OK)--> HANDSHAKE --last reply--> UP
 *       ^                         |                             |                      |
 *       +------ retry timer ------+------- failure, timeout ----+--- loss, timeout ----+
 *
 *   DOWN        no context; the retry timer (100 ms doubling to 2 s) calls start_connect.
 *   CONNECTING  connect(2) in flight; bounded by the connect deadline.
 *   HANDSHAKE   rconn_hello's AUTH / SELECT, then SCRIPT LOAD, pipelined; still bounded
 *               by the same deadline.
 *   UP          user commands accepted. Anything but UP refuses commands at once.
 *
 * Every command handed to hiredis carries an rcmd_t (our wrapper), linked into a FIFO
 * in send order with its deadline. Redis answers in order, so only the FIFO's head can be
 * the first to run late; a 25 ms timer, armed only while something is in flight or a
 * connect is pending, compares the head's deadline with the loop's clock (clock.h).
 * When a deadline passes the context is freed: hiredis then calls every pending wrapper
 * with a NULL reply, and each wrapper calls its user callback exactly once.
 *
 * NOSCRIPT: an EVALSHA's wrapper keeps the command as sent (its RESP is built once, into
 * the wrapper's own allocation rather than a stack buffer, so keeping it copies nothing).
 * On NOSCRIPT (Redis lost its script cache: SCRIPT FLUSH, a promoted replica) the
 * scripts' SCRIPT LOADs are queued and the same bytes sent again behind them on the same
 * connection, so they reach Redis after the reload, in order; the caller sees only the
 * second answer.
 *
 * Re-entrancy rules (hiredis 0.14):
 *   - inside a reply callback (REDIS_IN_CALLBACK), redisAsyncFree only marks the context;
 *     hiredis frees it when the callback returns, calls the remaining callbacks with NULL
 *     and then on_disconnect. drop() relies on that.
 *   - outside callbacks, redisAsyncFree frees at once (callbacks run inside the call);
 *     on_disconnect is then ignored (self_drop) and drop() finishes the bookkeeping.
 *   - on_connect must never free the context (hiredis keeps using it afterwards).
 *   - rds_node_free may be called from a user callback: the connection becomes a zombie
 *     and is destroyed by whichever frame is outermost once the context is gone
 *     (maybe_destroy).
 *
 * Replies are built in an arena (rarena.h) that is reset when the outermost on_reply
 * returns: hiredis parses the next reply only after the callback of the current one, and
 * a reply is valid only during its callback (rds.h), so nothing built in it is live then.
 * hiredis's own functions made a calloc and a free per array element (an admission
 * batch's reply is an array of one integer per buyer).
 */
#include "redis/rds_node.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "redis/rarena.h"
#include "redis/rconn.h"
#include "redis/rds_ev.h"
#include "redis/resp.h"
#include "server/metrics.h"
#include "server/worker.h"

#define TICK_MS 25
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000

enum { ST_DOWN = 0, ST_CONNECTING, ST_HANDSHAKE, ST_UP };

/* What a wrapper is for: a user command, a user EVALSHA (sent again once after
 * NOSCRIPT), one of the handshake commands, or a background SCRIPT LOAD after NOSCRIPT. */
enum { K_USER = 0, K_EVALSHA, K_SETUP, K_RELOAD };

static const char SETUP_LOAD[] = "SCRIPT LOAD";   /* setup_name of a script's load */

typedef struct rcmd {
    struct rcmd *prev, *next;   /* the connection's in-flight FIFO, oldest first */
    struct rds_node *c;
    uint64_t deadline;          /* monotonic ms */
    rds_cb cb;
    void *priv;
    unsigned char kind;
    unsigned char retried;      /* K_EVALSHA: already sent again after NOSCRIPT */
    const char *setup_name;     /* K_SETUP/K_RELOAD: "AUTH", "SELECT", "SCRIPT LOAD" */
    script_id_t script;         /* K_SETUP/K_RELOAD: the script a SCRIPT LOAD loads */
    size_t len;                 /* K_EVALSHA: the command as sent, in cmd[] */
    char cmd[];
} rcmd_t;

struct rds_node {
    worker_t *w;
    struct event_base *base;
    url_redis_t addr;
    char where[600];            /* for logs: host:port/db or unix:path, never the password */
    int timeout_ms;

    redisAsyncContext *ac;      /* NULL while DOWN */
    rarena_t *replies;          /* where ac's reader builds replies; owned, outlives ac */
    int in_reply;               /* on_reply frames on the stack */
    int state;
    int setup_left;             /* HANDSHAKE replies still expected */
    uint64_t connect_deadline;  /* CONNECTING/HANDSHAKE */

    rcmd_t *head, *tail;        /* in-flight FIFO */
    int inflight;

    struct event *tick;         /* deadline checks, EV_PERSIST every TICK_MS */
    int tick_on;
    struct event *retry;        /* reconnect back-off */
    int backoff_ms;
    int failures;               /* failed attempts since last UP (quiets the log) */
    int was_up;                 /* for redis_reconnects */
    int reloading;              /* a background SCRIPT LOAD is in flight */

    int self_drop;              /* drop() is freeing the context synchronously */
    int busy;                   /* frames of ours on the stack that use c after hiredis calls */
    int closing;                /* rds_node_free called: no more reconnects */
    int zombie;                 /* destroy once busy == 0 and ac == NULL */
};

static void start_connect(rds_node_t *c);
static void on_reply(redisAsyncContext *ac, void *reply, void *priv);

static void count_error(rds_node_t *c)
{
    if (c->w && c->w->m)
        metric_inc(&c->w->m->redis_errors);
}

static void count_reconnect(rds_node_t *c)
{
    if (c->w && c->w->m)
        metric_inc(&c->w->m->redis_reconnects);
}

static void fifo_push(rds_node_t *c, rcmd_t *r)
{
    r->next = NULL;
    r->prev = c->tail;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    c->inflight++;
}

static void fifo_unlink(rds_node_t *c, rcmd_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        c->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        c->tail = r->prev;
    r->prev = r->next = NULL;
    c->inflight--;
}

static void arm_tick(rds_node_t *c)
{
    if (c->tick_on || c->closing)
        return;
    struct timeval tv = { 0, TICK_MS * 1000 };
    if (event_add(c->tick, &tv) == 0)
        c->tick_on = 1;
}

static void destroy(rds_node_t *c)
{
    if (c->tick)
        event_free(c->tick);
    if (c->retry)
        event_free(c->retry);
    rarena_free(c->replies);
    free(c);
}

/* Frees a zombie once nothing of ours is on the stack and the context is gone.
 * Returns 1 if c was freed (the caller must return without touching it). */
static int maybe_destroy(rds_node_t *c)
{
    if (c->zombie && c->busy == 0 && c->ac == NULL) {
        destroy(c);
        return 1;
    }
    return 0;
}

/* After the context is gone: schedule the next attempt with back-off. */
static void after_lost(rds_node_t *c)
{
    c->state = ST_DOWN;
    c->setup_left = 0;
    c->reloading = 0;
    if (c->closing)
        return;
    struct timeval tv = { c->backoff_ms / 1000, (c->backoff_ms % 1000) * 1000 };
    evtimer_add(c->retry, &tv);
    c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
}

/* Drops the connection: every pending callback gets NULL. Inside a hiredis reply
 * callback the free is deferred by hiredis and on_disconnect finishes the job; otherwise
 * it happens now. Returns 1 if c itself was destroyed (zombie). */
static int drop(rds_node_t *c)
{
    redisAsyncContext *ac = c->ac;
    if (ac == NULL)
        return 0;
    c->state = ST_DOWN;   /* commands issued from the NULL callbacks fail at once */
    if (ac->c.flags & REDIS_IN_CALLBACK) {
        redisAsyncFree(ac);   /* only marks it; on_disconnect follows */
        return 0;
    }
    c->self_drop = 1;
    c->busy++;
    redisAsyncFree(ac);
    c->busy--;
    c->self_drop = 0;
    c->ac = NULL;
    after_lost(c);
    return maybe_destroy(c);
}

/* A failed connect or handshake attempt: the first after being up is a warning, the
 * rest (one every 2 s while Redis stays away) go to the debug log. */
static void attempt_failed(rds_node_t *c, const char *what, const char *detail)
{
    count_error(c);
    if (c->failures++ == 0)
        log_warn("redis: %s %s failed: %s (retrying with back-off)", what, c->where, detail);
    else
        log_debug("redis: %s %s failed: %s (attempt %d)", what, c->where, detail, c->failures);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    rds_node_t *c = ac->data;
    if (c == NULL || c->self_drop)
        return;
    c->ac = NULL;
    if (c->state == ST_UP && !c->closing) {
        count_error(c);
        log_warn("redis: lost connection to %s: %s", c->where,
                 ac->errstr[0] ? ac->errstr : (status == REDIS_OK ? "closed" : "error"));
        c->failures = 1;
    } else if (c->state != ST_DOWN && !c->closing) {
        attempt_failed(c, "handshake with", ac->errstr[0] ? ac->errstr : "connection closed");
    }
    after_lost(c);
    maybe_destroy(c);
}

/* Sends one command already in RESP (buf[len] must be a NUL: see send_argv) for wrapper
 * r. Returns 0, or -1 if hiredis refused it (r untouched and not linked). */
static int send_formatted(rds_node_t *c, rcmd_t *r, const char *buf, size_t len)
{
    if (redisAsyncFormattedCommand(c->ac, on_reply, r, buf, len) != REDIS_OK)
        return -1;
    r->c = c;
    r->deadline = clock_now_ms() + (uint64_t)c->timeout_ms;
    fifo_push(c, r);
    arm_tick(c);
    return 0;
}

#define STACK_LENS 24

/* The arguments' lengths: argvlen, or (NULL: C strings) their strlen in stack[] when
 * argc fits, else in an allocation the caller frees with lens_done. */
static const size_t *lens_of(int argc, const char **argv, const size_t *argvlen,
                             size_t stack[STACK_LENS])
{
    if (argvlen != NULL)
        return argvlen;
    size_t *own = argc > STACK_LENS ? xmalloc(sizeof(*own) * (size_t)argc) : stack;
    for (int i = 0; i < argc; i++)
        own[i] = strlen(argv[i]);
    return own;
}

static void lens_done(const size_t *lens, const size_t *argvlen, const size_t *stack)
{
    if (lens != argvlen && lens != stack)
        free((void *)lens);
}

/* Sends one command for wrapper r, put in RESP by resp.h rather than by hiredis. Returns
 * 0, or -1 if hiredis refused it (r untouched and not linked). */
static int send_argv(rds_node_t *c, rcmd_t *r, int argc, const char **argv, const size_t *argvlen)
{
    if (c->ac == NULL || argc <= 0)
        return -1;
    size_t stack_lens[STACK_LENS];
    const size_t *lens = lens_of(argc, argv, argvlen, stack_lens);
    char stack_buf[2048];
    /* +1: a NUL after the command. hiredis 0.14 scans a formatted command with strchr
     * and looks at the byte after the command name (is another argument next?), which
     * for a one-word command such as PING is the byte after the buffer; its own
     * formatter leaves an sds NUL there, so we do too. */
    size_t cap = resp_size(argc, lens) + 1;
    char *buf = cap <= sizeof(stack_buf) ? stack_buf : xmalloc(cap);
    size_t len = resp_put(buf, argc, argv, lens);
    buf[len] = '\0';
    int rc = send_formatted(c, r, buf, len);
    if (buf != stack_buf)
        free(buf);
    lens_done(lens, argvlen, stack_lens);
    return rc;
}

static int send_internal(rds_node_t *c, int kind, const char *name, script_id_t s, int argc,
                         const char **argv, const size_t *argvlen)
{
    rcmd_t *r = xcalloc(1, sizeof(*r));
    r->kind = (unsigned char)kind;
    r->setup_name = name;
    r->script = s;
    if (send_argv(c, r, argc, argv, argvlen) < 0) {
        free(r);
        return -1;
    }
    return 0;
}

static int send_script_load(rds_node_t *c, int kind, script_id_t s)
{
    const char *text = rds_script_text(s);
    const char *argv[3] = { "SCRIPT", "LOAD", text };
    size_t lens[3] = { 6, 4, strlen(text) };
    return send_internal(c, kind, SETUP_LOAD, s, 3, argv, lens);
}

/* Re-LOADs the scripts in the background after a NOSCRIPT (one batch at a time). */
static void start_reload(rds_node_t *c)
{
    if (c->reloading)
        return;
    log_info("redis: %s lost its script cache; loading the scripts again", c->where);
    for (int s = 0; s < SCRIPT_COUNT; s++)
        if (send_script_load(c, K_RELOAD, (script_id_t)s) == 0)
            c->reloading++;
}

static void on_connect(const redisAsyncContext *cac, int status)
{
    rds_node_t *c = cac->data;
    if (c == NULL)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees the context right after this returns. */
        c->ac = NULL;
        if (!c->closing)
            attempt_failed(c, "connect to", cac->errstr[0] ? cac->errstr : "error");
        after_lost(c);
        return;
    }
    /* Never free the context here; a failed send is caught by the connect deadline. */
    c->state = ST_HANDSHAKE;
    c->setup_left = 0;
    rconn_hello_t h;
    rconn_hello(&c->addr, &h);
    for (int i = 0; i < h.n; i++)
        if (send_internal(c, K_SETUP, h.cmd[i].name, 0, h.cmd[i].argc, h.cmd[i].argv,
                          h.cmd[i].argvlen) == 0)
            c->setup_left++;
    for (int s = 0; s < SCRIPT_COUNT; s++)
        if (send_script_load(c, K_SETUP, (script_id_t)s) == 0)
            c->setup_left++;
}

static void handshake_step(rds_node_t *c, rcmd_t *r, redisReply *reply)
{
    if (reply == NULL || c->state != ST_HANDSHAKE)
        return;   /* the loss is handled by whoever dropped the connection */
    int ok;
    if (r->setup_name == SETUP_LOAD)
        ok = reply->type == REDIS_REPLY_STRING &&
             rds_script_store(r->script, reply->str, (size_t)reply->len) == 0;
    else
        ok = reply->type == REDIS_REPLY_STATUS;
    if (!ok) {
        char detail[300];
        snprintf(detail, sizeof(detail), "%s: %s", r->setup_name,
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        attempt_failed(c, "handshake with", detail);
        drop(c);   /* in a callback: deferred; on_disconnect sees DOWN and stays quiet */
        return;
    }
    if (--c->setup_left > 0)
        return;
    c->state = ST_UP;
    c->backoff_ms = BACKOFF_MIN_MS;
    if (c->was_up) {
        count_reconnect(c);
        log_info("redis: reconnected to %s", c->where);
    } else if (c->failures > 0) {
        log_info("redis: connected to %s after %d failed attempt%s", c->where, c->failures,
                 c->failures == 1 ? "" : "s");
    } else {
        log_debug("redis: connected to %s", c->where);   /* the usual start: quiet */
    }
    c->was_up = 1;
    c->failures = 0;
    if (c->w && c->w->on_redis_up)
        c->w->on_redis_up(c->w);
}

/* The one hiredis callback of every command we send. */
static void on_reply(redisAsyncContext *ac, void *vreply, void *priv)
{
    rcmd_t *r = priv;
    rds_node_t *c = r->c;
    redisReply *reply = vreply;
    (void)ac;

    fifo_unlink(c, r);
    c->busy++;
    c->in_reply++;

    switch (r->kind) {
    case K_SETUP:
        handshake_step(c, r, reply);
        free(r);
        break;
    case K_RELOAD:
        if (c->reloading > 0)
            c->reloading--;
        if (reply && reply->type == REDIS_REPLY_STRING)
            rds_script_store(r->script, reply->str, (size_t)reply->len);
        else if (reply)
            log_warn("redis: SCRIPT LOAD %s failed: %s", rds_script_name(r->script),
                     reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        free(r);
        break;
    case K_EVALSHA:
        if (rds_script_noscript(reply) && !r->retried) {
            /* The same EVALSHA again, behind the SCRIPT LOADs just queued. */
            r->retried = 1;
            start_reload(c);
            if (c->state == ST_UP && send_formatted(c, r, r->cmd, r->len) == 0)
                break;   /* r lives on; its callback runs on the second reply */
            reply = NULL;
        }
        /* fall through */
    default: {
        rds_cb cb = r->cb;
        void *cbpriv = r->priv;
        free(r);
        if (reply && reply->type == REDIS_REPLY_ERROR)
            count_error(c);
        if (cb)
            cb(reply, cbpriv);
        break;
    }
    }
    if (--c->in_reply == 0)
        rarena_reset(c->replies);
    c->busy--;
    maybe_destroy(c);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    rds_node_t *c = arg;
    (void)fd;
    (void)what;
    uint64_t now = clock_now_ms();

    if ((c->state == ST_CONNECTING || c->state == ST_HANDSHAKE) && now >= c->connect_deadline) {
        attempt_failed(c, c->state == ST_CONNECTING ? "connect to" : "handshake with",
                       "timed out");
        if (drop(c))
            return;
    } else if (c->head && now >= c->head->deadline) {
        count_error(c);
        log_warn("redis: command to %s timed out after %d ms (%d in flight); reconnecting",
                 c->where, c->timeout_ms, c->inflight);
        c->failures = 1;
        if (drop(c))
            return;
    }
    if (c->head == NULL && c->state != ST_CONNECTING && c->state != ST_HANDSHAKE && c->tick_on) {
        event_del(c->tick);
        c->tick_on = 0;
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    start_connect(arg);
}

static void start_connect(rds_node_t *c)
{
    if (c->closing || c->ac != NULL)
        return;
    redisAsyncContext *ac;
    if (c->addr.unix_path[0])
        ac = redisAsyncConnectUnix(c->addr.unix_path);
    else
        ac = redisAsyncConnect(c->addr.host, c->addr.port);
    if (ac == NULL || ac->err) {
        attempt_failed(c, "connect to", ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        after_lost(c);
        return;
    }
    ac->data = c;
    rarena_attach(c->replies, ac->c.reader);
    if (rds_ev_attach(ac, c->base) != REDIS_OK) {
        attempt_failed(c, "connect to", "cannot attach to the event loop");
        redisAsyncFree(ac);
        after_lost(c);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    c->state = ST_CONNECTING;
    c->connect_deadline = clock_now_ms() + (uint64_t)c->timeout_ms;
    arm_tick(c);
}

rds_node_t *rds_node_new(struct worker *w, const url_redis_t *addr, int timeout_ms)
{
    if (w == NULL || w->base == NULL || addr == NULL || addr->cluster)
        return NULL;
    rds_node_t *c = xcalloc(1, sizeof(*c));
    c->w = w;
    c->base = w->base;
    c->addr = *addr;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
    c->backoff_ms = BACKOFF_MIN_MS;
    if (addr->unix_path[0])
        snprintf(c->where, sizeof(c->where), "unix:%s (db %d)", addr->unix_path, addr->db);
    else
        snprintf(c->where, sizeof(c->where), "%s:%d (db %d)", addr->host, addr->port, addr->db);
    c->tick = event_new(c->base, -1, EV_PERSIST, on_tick, c);
    c->retry = evtimer_new(c->base, on_retry, c);
    c->replies = rarena_new();
    if (c->tick == NULL || c->retry == NULL) {
        destroy(c);
        return NULL;
    }
    start_connect(c);
    return c;
}

void rds_node_free(rds_node_t *c)
{
    if (c == NULL || c->closing)
        return;
    c->closing = 1;
    c->zombie = 1;
    event_del(c->retry);
    if (c->tick_on) {
        event_del(c->tick);
        c->tick_on = 0;
    }
    if (c->ac == NULL || !drop(c))
        maybe_destroy(c);
}

int rds_node_is_up(const rds_node_t *c)
{
    return c != NULL && c->state == ST_UP;
}

void rds_node_command(rds_node_t *c, rds_cb cb, void *priv, int argc, const char **argv,
                      const size_t *argvlen)
{
    if (c == NULL || c->state != ST_UP || argc <= 0) {
        if (cb)
            cb(NULL, priv);
        return;
    }
    rcmd_t *r = xcalloc(1, sizeof(*r));
    r->kind = K_USER;
    r->cb = cb;
    r->priv = priv;
    if (send_argv(c, r, argc, argv, argvlen) < 0) {
        free(r);
        if (cb)
            cb(NULL, priv);
    }
}

/* EVALSHA <sha> <numkeys> argv..., put in RESP straight into the wrapper's allocation
 * (no argument arrays built for it), where it stays for a resend after NOSCRIPT. */
void rds_node_evalsha(rds_node_t *c, script_id_t s, rds_cb cb, void *priv, int numkeys,
                      int argc, const char **argv, const size_t *argvlen)
{
    const char *sha = rds_script_sha(s);
    if (c == NULL || c->state != ST_UP || c->ac == NULL || sha == NULL || numkeys < 0 ||
        argc < numkeys || argc > INT_MAX - 3) {
        if (cb)
            cb(NULL, priv);
        return;
    }
    size_t stack_lens[STACK_LENS];
    const size_t *lens = lens_of(argc, argv, argvlen, stack_lens);
    char nk[SB_DEC_MAX];
    const char *head[3] = { "EVALSHA", sha, nk };
    size_t hlens[3] = { 7, RDS_SCRIPT_SHA_LEN, (size_t)sb_dec(nk, numkeys) };
    /* +1: the NUL send_argv explains */
    size_t cap = resp_size(3, hlens) + resp_size(argc, lens) + 1;
    rcmd_t *r = xmalloc(sizeof(*r) + cap);
    memset(r, 0, sizeof(*r));
    r->kind = K_EVALSHA;
    r->cb = cb;
    r->priv = priv;
    r->script = s;
    size_t len = resp_put_head(r->cmd, 3 + argc);
    len += resp_put_args(r->cmd + len, 3, head, hlens);
    len += resp_put_args(r->cmd + len, argc, argv, lens);
    r->cmd[len] = '\0';
    r->len = len;
    lens_done(lens, argvlen, stack_lens);
    if (send_formatted(c, r, r->cmd, len) < 0) {
        free(r);
        if (cb)
            cb(NULL, priv);
    }
}
