/* lab_mq.c -- the course's first two Redis message queues as order transports (lab.h):
 * `list` (lab_mq.lua LPUSHes the order, a consumer thread BRPOPs it) and `pubsub`
 * (lab_mq.lua PUBLISHes it, the consumer thread is the subscriber). The admission runs on
 * the worker's loop, one EVAL per request (the lab is not the hot path: no verdict cache,
 * no batching); the consumer writes each order with the stream writer's idempotent
 * store_orders_write, one order per call.
 *
 * What the course says goes wrong, and what this code therefore does not hide:
 *   list    BRPOP removes the message before it is written: a consumer that dies in
 *           between (kill -9 during --lab-pause pop-write) loses it. No ack, no pending list.
 *   pubsub  a message published while nobody subscribes is dropped by Redis (PUBLISH
 *           returns 0); --lab-pause subscribe:MS starts the subscriber MS after the
 *           first order was published, to show it.
 *
 * Ownership: the consumer thread owns its Redis connection and its store connection; the
 * main thread only sets `stop` and joins (lab_mq_stop). The state is app->mode_state. */
#include "lab/lab.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "embedded.h"
#include "core/app.h"
#include "http/http.h"
#include "redis/rconn.h"
#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "sale/order_mode.h"
#include "sale/orderid.h"
#include "redis/rds.h"
#include "store/store.h"
#include "server/worker.h"
#include "core/xmem.h"

#define POLL_MS 200
#define BRPOP_S "1"
#define RETRY_MS 200

struct lab_mq {
    app_t *app;
    pthread_t thread;
    atomic_int stop;
    redisContext *c;
    store_t *st;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* "orderId userId voucherId ts", as admit.lua writes it. */
static int parse_order(const char *z, size_t len, store_order_t *o)
{
    char buf[128];
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, z, len);
    buf[len] = '\0';
    long long id, uid, vid, ts;
    if (sscanf(buf, "%lld %lld %lld %lld", &id, &uid, &vid, &ts) != 4 || id <= 0 || uid <= 0 ||
        vid <= 0)
        return -1;
    o->id = id;
    o->user_id = uid;
    o->voucher_id = vid;
    o->status = 1;
    o->create_time = ts;
    o->epoch = STORE_EPOCH_ANY;   /* these transports carry no Redis generation */
    return 0;
}

/* Writes one order until it commits; gives up only when stopping (the order is then
 * lost, which is what these transports do). */
static void write_order(struct lab_mq *mq, const store_order_t *o)
{
    app_t *app = mq->app;
    lab_pause(app, LAB_P_POP_WRITE);
    while (1) {
        char err[512] = "";
        if (!mq->st)
            mq->st = store_open(app->db_url, app->cfg.sql_timeout_ms, err, sizeof err);
        size_t ins = 0, conf = 0;
        if (mq->st && store_orders_write(mq->st, o, 1, &ins, &conf, NULL) == STORE_OK)
            return;
        if (mq->st) {
            snprintf(err, sizeof err, "%s", store_errmsg(mq->st));
            store_close(mq->st);
            mq->st = NULL;
        }
        if (atomic_load(&mq->stop)) {
            log_error("%s: stopping with order %lld unwritten: it is LOST (%s)",
                      order_mode_name(app->cfg.mode), (long long)o->id, err);
            return;
        }
        log_warn("%s: order %lld not written (%s); retrying", order_mode_name(app->cfg.mode),
                 (long long)o->id, err);
        sleep_ms(RETRY_MS);
    }
}

static void handle_payload(struct lab_mq *mq, const redisReply *p)
{
    store_order_t o;
    if (!p || p->type != REDIS_REPLY_STRING || parse_order(p->str, p->len, &o) < 0) {
        log_error("%s: a message that is not an order was dropped",
                  order_mode_name(mq->app->cfg.mode));
        return;
    }
    write_order(mq, &o);
}

static void drop_conn(struct lab_mq *mq)
{
    rconn_close(mq->c);
    mq->c = NULL;
}

/* list: BRPOP with a short block, so `stop` is seen within a second. */
static void list_step(struct lab_mq *mq)
{
    char err[256];
    const char *argv[] = {"BRPOP", KEY_LAB_LIST, BRPOP_S};
    redisReply *r = rconn_cmd(mq->c, err, sizeof err, 3, argv, NULL);
    if (!r) {
        log_warn("list: BRPOP: %s", err);
        drop_conn(mq);
        sleep_ms(RETRY_MS);
        return;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        handle_payload(mq, r->element[1]);
    freeReplyObject(r);
}

/* pubsub: read what has arrived; wait on the socket at most POLL_MS. */
static void pubsub_step(struct lab_mq *mq)
{
    void *v = NULL;
    if (redisGetReplyFromReader(mq->c, &v) != REDIS_OK) {
        drop_conn(mq);
        return;
    }
    if (v) {
        redisReply *r = v;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0)
            handle_payload(mq, r->element[2]);
        freeReplyObject(r);
        return;
    }
    struct pollfd pfd = {mq->c->fd, POLLIN, 0};
    int n = poll(&pfd, 1, POLL_MS);
    if (n > 0 && redisBufferRead(mq->c) != REDIS_OK) {
        log_warn("pubsub: subscriber connection lost: %s (messages published meanwhile are "
                 "gone)", mq->c->errstr);
        drop_conn(mq);
    }
}

/* PUBLISH calls this Redis has run (INFO commandstats counts those of scripts too);
 * -1 if it cannot tell. */
static long long publishes(redisContext *c)
{
    static const char field[] = "cmdstat_publish:calls=";
    char err[256];
    const char *argv[] = {"INFO", "commandstats"};
    redisReply *r = rconn_cmd(c, err, sizeof err, 2, argv, NULL);
    long long n = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, field);
        n = p ? atoll(p + sizeof field - 1) : 0;
    }
    if (r)
        freeReplyObject(r);
    return n;
}

/* --lab-pause subscribe:MS counts from the first order published, not from the start: on
 * a busy host the lab's buyers can arrive later than MS after the start, and a subscriber
 * already up hears every order (seen: the pubsub step losing nothing at load 15). Waits
 * for this Redis's PUBLISH count to go up; returns at once if it cannot tell. */
static void wait_first_publish(struct lab_mq *mq)
{
    app_t *app = mq->app;
    char err[256];
    redisContext *c = rconn_open_url(app->redis_url, app->cfg.redis_timeout_ms, err, sizeof err);
    if (!c) {
        log_warn("pubsub: redis: %s (the subscriber's delay counts from now)", err);
        return;
    }
    long long base = publishes(c);
    while (base >= 0 && !atomic_load(&mq->stop)) {
        long long n = publishes(c);
        if (n < 0 || n > base)
            break;
        sleep_ms(20);
    }
    redisFree(c);
}

static int connect_mq(struct lab_mq *mq)
{
    app_t *app = mq->app;
    char err[256];
    /* BRPOP blocks for a second: the socket deadline is the command's plus that. */
    mq->c = rconn_open_url(app->redis_url, app->cfg.redis_timeout_ms + 1000, err, sizeof err);
    if (!mq->c) {
        log_warn("%s: redis: %s", order_mode_name(app->cfg.mode), err);
        return -1;
    }
    if (lab_step(app->cfg.mode) == LAB_PUBSUB) {
        const char *argv[] = {"SUBSCRIBE", KEY_LAB_CHANNEL};
        redisReply *r = rconn_cmd(mq->c, err, sizeof err, 2, argv, NULL);
        if (!r) {
            log_warn("pubsub: SUBSCRIBE: %s", err);
            drop_conn(mq);
            return -1;
        }
        freeReplyObject(r);
        log_info("pubsub: subscribed to %s", KEY_LAB_CHANNEL);
    }
    return 0;
}

static void *mq_main(void *arg)
{
    struct lab_mq *mq = arg;
    app_t *app = mq->app;
    int step = lab_step(app->cfg.mode);
    log_set_thread_name(step == LAB_LIST ? "list" : "pubsub");
    if (step == LAB_PUBSUB && app->cfg.lab_pause_ms[LAB_P_SUBSCRIBE] > 0) {
        /* The course's "no subscriber": everything published until then is dropped. */
        wait_first_publish(mq);
        uint64_t until = clock_mono_ms() + (uint64_t)app->cfg.lab_pause_ms[LAB_P_SUBSCRIBE];
        while (!atomic_load(&mq->stop) && clock_mono_ms() < until)
            sleep_ms(20);
    }
    while (!atomic_load(&mq->stop)) {
        if (!mq->c && connect_mq(mq) < 0) {
            sleep_ms(RETRY_MS);
            continue;
        }
        if (step == LAB_LIST)
            list_step(mq);
        else
            pubsub_step(mq);
    }
    drop_conn(mq);
    store_close(mq->st);
    mq->st = NULL;
    return NULL;
}

int lab_mq_start(struct app *app, char *err, size_t errlen)
{
    struct lab_mq *mq = xcalloc(1, sizeof *mq);
    mq->app = app;
    if (pthread_create(&mq->thread, NULL, mq_main, mq) != 0) {
        snprintf(err, errlen, "%s: cannot start the consumer thread",
                 order_mode_name(app->cfg.mode));
        free(mq);
        return -1;
    }
    app->mode_state = mq;
    log_warn("%s mode: the course's message queue without acks, run to show how it loses "
             "orders (docs/lab.md)", order_mode_name(app->cfg.mode));
    return 0;
}

void lab_mq_stop(struct app *app)
{
    struct lab_mq *mq = app->mode_state;
    if (!mq)
        return;
    atomic_store(&mq->stop, 1);
    pthread_join(mq->thread, NULL);
    free(mq);
    app->mode_state = NULL;
}

/* ------------------------------------------------------------ admission */

/* One request waiting for lab_mq.lua. */
typedef struct mq_req {
    http_req_t *r;
    admission_cb cb;
    admission_order_t order;
} mq_req_t;

static void on_admit(struct redisReply *rep, void *priv)
{
    mq_req_t *q = priv;
    int code = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer >= ADMIT_OK &&
                       rep->integer <= ADMIT_NO_VOUCHER
                   ? (int)rep->integer
                   : ADMIT_UNAVAILABLE;
    if (rep && rep->type == REDIS_REPLY_ERROR)
        log_error("lab: lab_mq.lua: %.*s", (int)(rep->len > 200 ? 200 : rep->len), rep->str);
    mq_req_t done = *q;
    free(q);
    done.cb(done.r, code, code == ADMIT_OK ? &done.order : NULL);
}

void lab_mq_order(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb)
{
    worker_t *w = r->w;
    int list = lab_step(w->app->cfg.mode) == LAB_LIST;
    char kv[64], kb[64], vid[SB_DEC_MAX], uid[SB_DEC_MAX];
    int lv = key_voucher(kv, sizeof kv, voucher_id);
    int lb = key_buyers(kb, sizeof kb, voucher_id);
    if (lv < 0 || lb < 0) {
        cb(r, ADMIT_UNAVAILABLE, NULL);
        return;
    }
    mq_req_t *q = xmalloc(sizeof *q);
    q->r = r;
    q->cb = cb;
    admission_order_set(&q->order, orderid_next((int64_t)(clock_now_wall_ms() / 1000u)));
    const char *tr = list ? "list" : "pubsub";
    const char *k3 = list ? KEY_LAB_LIST : KEY_LAB_CHANNEL;
    const char *argv[] = {"EVAL", script_lab_mq_lua, "3", kv, kb, k3, vid, tr, uid,
                          q->order.dec};
    size_t lens[] = {4, strlen(script_lab_mq_lua), 1, (size_t)lv, (size_t)lb, strlen(k3),
                     (size_t)sb_dec(vid, voucher_id), strlen(tr), (size_t)sb_dec(uid, user_id),
                     (size_t)q->order.len};
    /* EVAL, not EVALSHA: Redis caches the script by its hash; the worker's client keeps
     * the service's scripts only. On Redis down on_admit runs before this returns. */
    rds_command_at(w->rds, kv, (size_t)lv, on_admit, q, 10, argv, lens);
}
