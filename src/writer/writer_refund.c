/* writer_refund.c -- the refund outbox's sender (writer_int.h): every refund life.lua
 * decides is written, in the same script call as the decision, to its bucket's outbox,
 * the stream seckill:refunds:{tag} (same hash tag as the order stream, so a sub-writer of
 * a Redis Cluster reaches it on its own node). This file sends each one through
 * --refund-command, and acks it only once the command exited 0 and SQL says so: a refund
 * lost between the decision and the command (a crash) is sent after all.
 *
 * The outbox is read through its own consumer group (KEY_GROUP, as the order streams):
 * new entries with XREADGROUP ... >; entries pending (a failed command, or a consumer that
 * died) from XPENDING, retried once idle past a back-off of 1 s doubling with each
 * delivery up to REFUND_BACKOFF_MAX_MS (the first retry after 250 ms), and another consumer's only after
 * --claim-idle-ms (XCLAIM with that min-idle-time, so two writers never both take
 * one). While its command runs, an entry's idle time is reset every pass (XCLAIM JUSTID),
 * so no other writer takes a refund that is being sent.
 *
 * An entry's refund is sent only while SQL's payment row says 5 (退款中): the row is
 * written by the writer from the order stream's event (writer_life.c), so no refund goes
 * out before SQL knows it; a row already 6 (sent, then a crash before the ack) is acked
 * without sending. After the command exited 0, SQL marks it sent (store.h move 's': the
 * row and the order 5 -> 6 with refund_time), then the entry is acked and deleted. Without
 * --refund-command the refund is logged (to send by hand) and marked the same way.
 *
 * Commands run as runcmd_spawn starts them (own process group, no fd of ours, the
 * SECKILL_* environment dropped), at most --refund-command-max at once per writer, each
 * killed after --refund-command-timeout-ms; the writer's loop reaps them every pass
 * (waitpid WNOHANG; every REFUND_POLL_MS while one runs): the loop never waits for one.
 *
 * Sync mode keeps no outbox: its refunds are SQL's payment rows at 5 (the payment's own
 * transaction wrote them, store.h move 'y'), and this file sends them the same way, from a
 * pass over SQL every REFUND_SQL_EVERY_MS (store_refunds_due: a page of at most the free
 * command slots). Each send first takes the row's lease in tb_refund_lease
 * (store_refund_lease: a CAS on its tries), until the command's time limit plus
 * REFUND_LEASE_SLACK_S, so of several instances one sends it at a time; a failed send sets
 * the lease's end to its back-off (as the outbox's, in seconds), a sender that died leaves
 * it to run out. Exit 0: the same mark, the row and the order 5 -> 6 with refund_time.
 *
 * Cost: nothing per order or per grab. Per pass (every 500 ms) one XPENDING and one
 * XREADGROUP per stream whose outbox is not known empty; an outbox found empty is looked
 * at again once a refund event of its stream is applied, or every REFUND_RECHECK_MS
 * (another instance's refunds, left pending by a crash). Sync mode: one indexed read of
 * the payments at 5 per second, by one writer per instance; per refund sent, one lease
 * statement, the command and the mark (and one more statement per failed send). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "core/runcmd.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "order/life.h"
#include "writer/writer_int.h"

#define REFUND_PAGE 16              /* outbox entries read per stream and pass */
#define REFUND_BACKOFF_MAX_MS 60000
#define REFUND_RECHECK_MS 60000     /* quiet outboxes looked at again */
#define REFUND_POLL_MS 50           /* a running command's exit looked for */
#define REFUND_SQL_EVERY_MS 1000    /* sync mode: SQL's refunds due looked for */
#define REFUND_LEASE_SLACK_S 10     /* sync mode: a send's lease beyond its time limit */

/* A refund in this writer's hands: its command running, or sent and not yet marked in
 * SQL (then no command: only the mark and the ack are retried). */
typedef struct rjob {
    int used;
    int sent;                       /* the command exited 0 (or there is none) */
    int sql;                        /* sync mode's: no outbox entry, a lease held at tries */
    int tries;
    pid_t pid;                      /* running: its process (group) */
    uint64_t deadline;
    char key[96];                   /* the outbox */
    char id[ENTRY_ID_MAX];
    int64_t order_id, amount;
    char pay_id[STORE_PAYMENT_ID_MAX + 1];
} rjob_t;

struct wrefund {
    rjob_t *jobs;
    int max;
    uint64_t recheck_at;
    int64_t published;              /* the refunds_pending gauge: this writer's share */
    int running;                    /* jobs in hand at the last pass */
    uint64_t sql_at;                /* sync mode: the next pass over SQL */
};

int writer_refund_block_ms(const writer_t *wr, int block_ms)
{
    return wr->refund && wr->refund->running && block_ms > REFUND_POLL_MS ? REFUND_POLL_MS
                                                                           : block_ms;
}

void writer_refund_free(writer_t *wr)
{
    if (!wr->refund)
        return;
    free(wr->refund->jobs);
    free(wr->refund);
    wr->refund = NULL;
}

static struct wrefund *state(writer_t *wr)
{
    if (!wr->refund) {
        struct wrefund *r = xcalloc(1, sizeof *r);
        r->max = wr->app->cfg.refund_command_max > 0 ? wr->app->cfg.refund_command_max : 4;
        r->jobs = xcalloc((size_t)r->max, sizeof *r->jobs);
        wr->refund = r;
    }
    return wr->refund;
}

static int busy(struct wrefund *r, const char *key, const char *id)
{
    for (int i = 0; i < r->max; i++)
        if (r->jobs[i].used && strcmp(r->jobs[i].key, key) == 0 && strcmp(r->jobs[i].id, id) == 0)
            return 1;
    return 0;
}

static rjob_t *free_job(struct wrefund *r)
{
    for (int i = 0; i < r->max; i++)
        if (!r->jobs[i].used)
            return &r->jobs[i];
    return NULL;
}

/* XACK and XDEL of an entry: 0, or -1 when the connection was lost. */
static int ack(writer_t *wr, const char *key, const char *id)
{
    size_t n = 0;
    writer_args(wr, &n, "XACK");
    writer_args(wr, &n, key);
    writer_args(wr, &n, KEY_GROUP);
    writer_args(wr, &n, id);
    writer_append(wr, n);
    n = 0;
    writer_args(wr, &n, "XDEL");
    writer_args(wr, &n, key);
    writer_args(wr, &n, id);
    redisReply *r = writer_cmd(wr, n);
    void *r1 = NULL;
    if (r == NULL || redisGetReply(wr->rc, &r1) != REDIS_OK)
        return writer_redis_fail(wr, "XACK refund", NULL);
    return 0;
}

/* A job whose refund went out: marked sent in SQL (then acked and freed), or kept for the
 * next pass when SQL failed. 0, or -1 when the connection was lost. */
static int mark_sent(writer_t *wr, rjob_t *j)
{
    char err[256] = "";
    if (!wr->st)
        wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
    store_move_t m = {.order_id = j->order_id, .now = clock_wall_s(), .kind = 's'};
    memcpy(m.payment_id, j->pay_id, sizeof j->pay_id);
    if (!wr->st || store_orders_move(wr->st, &m, 1) != STORE_OK) {
        log_warn("writer: refund of order %lld payment %s sent, not yet marked in SQL (%s): "
                 "again next pass", (long long)j->order_id, j->pay_id,
                 wr->st ? store_errmsg(wr->st) : err);
        metric_inc(&wr->m->sql_errors);
        return 0;
    }
    metric_inc(&wr->m->refunds_sent);
    j->used = 0;
    return j->sql ? 0 : ack(wr, j->key, j->id);
}

/* The back-off of an entry delivered n times: 250 ms after the first (mostly an entry
 * whose event was not yet in SQL), then 1 s, doubling, at most the maximum. */
static int64_t backoff_ms(int64_t deliveries)
{
    if (deliveries <= 1)
        return 250;
    int64_t ms = 1000;
    for (int64_t i = 2; i < deliveries && ms < REFUND_BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < REFUND_BACKOFF_MAX_MS ? ms : REFUND_BACKOFF_MAX_MS;
}

/* A send that failed: the job is freed; an outbox entry stays pending (sent again after
 * its back-off), a sync mode refund's lease ends at its back-off (when SQL fails here, at
 * the lease's own end). */
static void failed(writer_t *wr, rjob_t *j)
{
    metric_inc(&wr->m->refunds_failed);
    j->used = 0;
    if (!j->sql || !wr->st)
        return;
    int64_t now = clock_wall_s();
    if (store_refund_lease(wr->st, j->pay_id, j->tries, now,
                           now + (backoff_ms(j->tries) + 999) / 1000, 0) == STORE_ERR)
        metric_inc(&wr->m->sql_errors);
}

/* Reaps the commands that ended (or kills those past their deadline). 0, or -1. */
static int reap(writer_t *wr, struct wrefund *r)
{
    uint64_t now = clock_mono_ms();
    for (int i = 0; i < r->max; i++) {
        rjob_t *j = &r->jobs[i];
        if (!j->used)
            continue;
        if (!j->sent) {
            int st = 0;
            pid_t got;
            while ((got = waitpid(j->pid, &st, WNOHANG)) < 0 && errno == EINTR) {
            }
            char why[64] = "";
            if (got == 0 && now < j->deadline)
                continue;   /* still running */
            if (got == 0) {
                kill(-j->pid, SIGKILL);   /* the shell and whatever it started */
                while (waitpid(j->pid, &st, 0) < 0 && errno == EINTR) {
                }
                snprintf(why, sizeof why, "timed out");
            } else if (got < 0) {
                snprintf(why, sizeof why, "waitpid: %s", strerror(errno));
            } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                if (WIFEXITED(st))
                    snprintf(why, sizeof why, "exit status %d", WEXITSTATUS(st));
                else
                    snprintf(why, sizeof why, "killed by signal %d",
                             WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            }
            if (why[0]) {
                /* left pending: tried again after its back-off */
                log_error("writer: refund of order %lld payment %s amount %lld NOT sent (%s): "
                          "tried again later", (long long)j->order_id, j->pay_id,
                          (long long)j->amount, why);
                failed(wr, j);
                continue;
            }
            log_info("writer: refund sent: order %lld payment %s amount %lld",
                     (long long)j->order_id, j->pay_id, (long long)j->amount);
            j->sent = 1;
        }
        if (mark_sent(wr, j) != 0)
            return -1;
    }
    return 0;
}

/* Keeps the idle time of the entries this writer holds at 0 (XCLAIM JUSTID): no other
 * writer takes a refund being sent. 0, or -1. */
static int hold(writer_t *wr, struct wrefund *r)
{
    size_t sent = 0;
    for (int i = 0; i < r->max; i++) {
        if (!r->jobs[i].used || r->jobs[i].sql)
            continue;
        size_t n = 0;
        writer_args(wr, &n, "XCLAIM");
        writer_args(wr, &n, r->jobs[i].key);
        writer_args(wr, &n, KEY_GROUP);
        writer_args(wr, &n, wr->name);
        writer_args(wr, &n, "0");
        writer_args(wr, &n, r->jobs[i].id);
        writer_args(wr, &n, "JUSTID");
        writer_append(wr, n);
        sent++;
    }
    for (size_t i = 0; i < sent; i++) {
        void *x = NULL;
        if (redisGetReply(wr->rc, &x) != REDIS_OK)
            return writer_redis_fail(wr, "XCLAIM refund", NULL);
    }
    return 0;
}

static const char *field(const redisReply *f, const char *name)
{
    for (size_t i = 0; f && f->type == REDIS_REPLY_ARRAY && i + 1 < f->elements; i += 2)
        if (str_eq(f->element[i], name) && is_str(f->element[i + 1]))
            return f->element[i + 1]->str;
    return NULL;
}

/* Job j (its refund, SQL's row at 5) sent: its command started, or without
 * --refund-command logged and marked. 0, or -1 when the connection was lost. */
static int start(writer_t *wr, rjob_t *j)
{
    const config_t *cfg = &wr->app->cfg;
    if (!cfg->refund_command[0]) {
        log_warn("writer: refund due (no --refund-command: send it by hand): order %lld "
                 "payment %s amount %lld", (long long)j->order_id, j->pay_id,
                 (long long)j->amount);
        j->sent = 1;
        return mark_sent(wr, j);
    }
    life_refund_env_t e;
    life_refund_env(&e, j->order_id, j->pay_id, j->amount);
    if (runcmd_spawn(cfg->refund_command, e.env, &j->pid) != 0) {
        failed(wr, j);   /* after its back-off */
        return 0;
    }
    j->deadline = clock_mono_ms() + (uint64_t)cfg->refund_command_timeout_ms;
    return 0;
}

/* One outbox entry (id, its fields) taken by this writer: sent, acked or left for later.
 * 0, or -1 when the connection was lost. */
static int take(writer_t *wr, struct wrefund *r, const char *key, const char *id,
                const redisReply *f)
{
    const char *o = field(f, "order"), *p = field(f, "payment"), *a = field(f, "amount");
    char *end = NULL;
    int64_t order_id = 0, amount = a ? strtoll(a, &end, 10) : -1;
    if (!o || !p || !a || !end || *end || amount < 0 ||
        sb_parse_pos(o, strlen(o), &order_id) != 0 || strlen(p) == 0 ||
        strlen(p) > STORE_PAYMENT_ID_MAX) {
        log_error("writer: %s entry %s is no refund; dropped", key, id);
        return ack(wr, key, id);
    }
    char err[256] = "";
    if (!wr->st)
        wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
    store_payment_t pay;
    int rc = wr->st ? store_payment_get(wr->st, p, &pay) : STORE_ERR;
    if (rc == STORE_ERR) {
        metric_inc(&wr->m->sql_errors);
        return 0;   /* SQL down: after its back-off */
    }
    if (rc == STORE_NOTFOUND)
        return 0;   /* its event is not in SQL yet: after its back-off */
    if (pay.order_id != order_id || pay.status == 2) {
        log_error("writer: %s entry %s: payment %s is order %lld's, status %d in SQL: not "
                  "refunded here -- look at it by hand", key, id, p, (long long)pay.order_id,
                  pay.status);
        return ack(wr, key, id);
    }
    rjob_t *j = free_job(r);
    if (!j)
        return 0;
    *j = (rjob_t){.used = 1, .order_id = order_id, .amount = amount};
    snprintf(j->key, sizeof j->key, "%s", key);
    snprintf(j->id, sizeof j->id, "%s", id);
    snprintf(j->pay_id, sizeof j->pay_id, "%s", p);
    if (pay.status == 6) {   /* sent before; the ack was lost */
        j->used = 0;
        return ack(wr, key, id);
    }
    return start(wr, j);
}

/* The outbox's consumer group, once per stream: 1 made or there, 0 no outbox (nothing to
 * send), -1 connection lost. */
static int group(writer_t *wr, wstream_t *s, const char *key)
{
    if (s->refund_group)
        return 1;
    size_t n = 0;
    writer_args(wr, &n, "XGROUP");
    writer_args(wr, &n, "CREATE");
    writer_args(wr, &n, key);
    writer_args(wr, &n, KEY_GROUP);
    writer_args(wr, &n, "0");
    redisReply *x = writer_cmd(wr, n);
    if (x == NULL)
        return writer_redis_fail(wr, "XGROUP CREATE refunds", NULL);
    if (x->type == REDIS_REPLY_ERROR && strncmp(x->str, "BUSYGROUP", 9) != 0)
        return 0;   /* no such stream: no refund was ever decided there */
    s->refund_group = 1;
    return 1;
}

/* The pending entries of key due again (ours after their back-off, another's after
 * --claim-idle-ms), claimed and taken; then the new ones. *seen: entries there.
 * 0, or -1. */
static int outbox(writer_t *wr, struct wrefund *r, wstream_t *s, const char *key, int64_t *seen)
{
    rarena_reset(wr->arena);
    size_t n = 0;
    char count[8];
    snprintf(count, sizeof count, "%d", REFUND_PAGE);
    writer_args(wr, &n, "XPENDING");
    writer_args(wr, &n, key);
    writer_args(wr, &n, KEY_GROUP);
    writer_args(wr, &n, "-");
    writer_args(wr, &n, "+");
    writer_args(wr, &n, count);
    redisReply *x = writer_cmd(wr, n);
    if (x == NULL)
        return writer_redis_fail(wr, "XPENDING refunds", NULL);
    if (x->type == REDIS_REPLY_ERROR) {   /* NOGROUP: the outbox went (a flush) */
        s->refund_group = 0;
        return 0;
    }
    for (size_t i = 0; x->type == REDIS_REPLY_ARRAY && i < x->elements; i++) {
        const redisReply *e = x->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4 || !is_str(e->element[0]) ||
            !is_str(e->element[1]) || e->element[2]->type != REDIS_REPLY_INTEGER ||
            e->element[3]->type != REDIS_REPLY_INTEGER)
            continue;
        (*seen)++;
        const char *id = e->element[0]->str;
        int mine = str_eq(e->element[1], wr->name);
        int64_t need = backoff_ms(e->element[3]->integer);
        if (!mine && need < wr->claim_idle_ms)
            need = wr->claim_idle_ms;
        if (busy(r, key, id) || e->element[2]->integer < need || !free_job(r))
            continue;
        char idle[24];
        snprintf(idle, sizeof idle, "%lld", (long long)need);
        size_t k = 0;
        writer_args(wr, &k, "XCLAIM");
        writer_args(wr, &k, key);
        writer_args(wr, &k, KEY_GROUP);
        writer_args(wr, &k, wr->name);
        writer_args(wr, &k, idle);
        writer_args(wr, &k, id);
        redisReply *c = writer_cmd(wr, k);
        if (c == NULL)
            return writer_redis_fail(wr, "XCLAIM refunds", NULL);
        /* claimed (another writer may have been first: then nothing) */
        for (size_t m = 0; c->type == REDIS_REPLY_ARRAY && m < c->elements; m++) {
            const redisReply *ce = c->element[m];
            if (ce->type == REDIS_REPLY_ARRAY && ce->elements == 2 && is_str(ce->element[0]) &&
                take(wr, r, key, ce->element[0]->str, ce->element[1]) != 0)
                return -1;
        }
    }
    if (!free_job(r))
        return 0;
    n = 0;
    writer_args(wr, &n, "XREADGROUP");
    writer_args(wr, &n, "GROUP");
    writer_args(wr, &n, KEY_GROUP);
    writer_args(wr, &n, wr->name);
    writer_args(wr, &n, "COUNT");
    writer_args(wr, &n, count);
    writer_args(wr, &n, "STREAMS");
    writer_args(wr, &n, key);
    writer_args(wr, &n, ">");
    x = writer_cmd(wr, n);
    if (x == NULL)
        return writer_redis_fail(wr, "XREADGROUP refunds", NULL);
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 1 ||
        x->element[0]->type != REDIS_REPLY_ARRAY || x->element[0]->elements != 2)
        return 0;   /* nothing new (nil), or NOGROUP */
    const redisReply *ents = x->element[0]->element[1];
    for (size_t i = 0; ents->type == REDIS_REPLY_ARRAY && i < ents->elements; i++) {
        const redisReply *e = ents->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || !is_str(e->element[0]))
            continue;
        (*seen)++;
        /* delivered to us now: with no free slot it waits for its back-off */
        if (free_job(r) && take(wr, r, key, e->element[0]->str, e->element[1]) != 0)
            return -1;
    }
    return 0;
}

/* Sync mode: the payments SQL has at 5 and due, each sent under its lease (the header).
 * Run by one writer per instance (on a Redis Cluster the sub-writer the SQL scan runs in,
 * writer_life.c), only with a command slot free. */
static void sync_pass(writer_t *wr, struct wrefund *r)
{
    size_t slots = 0;
    for (int i = 0; i < r->max; i++)
        slots += !r->jobs[i].used;
    if (slots == 0 || (wr->node_mode && !(wr->rcs && writer_cluster_mine(wr, KEY_STREAMS))))
        return;
    char err[256] = "";
    if (!wr->st)
        wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
    store_refund_t *due = NULL;
    size_t n = 0;
    int64_t now = clock_wall_s();
    if (!wr->st || store_refunds_due(wr->st, now, slots, &due, &n) != STORE_OK) {
        log_warn("writer: sync mode's refunds due: %s", wr->st ? store_errmsg(wr->st) : err);
        metric_inc(&wr->m->sql_errors);
        return;
    }
    int64_t lease = (wr->app->cfg.refund_command_timeout_ms + 999) / 1000 + REFUND_LEASE_SLACK_S;
    for (size_t i = 0; i < n; i++) {
        const store_refund_t *d = &due[i];
        int mine = 0;
        for (int k = 0; k < r->max; k++)
            mine |= r->jobs[k].used && r->jobs[k].sql &&
                    strcmp(r->jobs[k].pay_id, d->payment_id) == 0;
        rjob_t *j = free_job(r);
        if (mine || !j)
            continue;
        int rc = store_refund_lease(wr->st, d->payment_id, d->tries, now, now + lease, 1);
        if (rc == STORE_ERR) {
            log_warn("writer: sync mode's refund lease: %s", store_errmsg(wr->st));
            metric_inc(&wr->m->sql_errors);
            break;
        }
        if (rc != STORE_OK)
            continue;   /* another instance sends it */
        *j = (rjob_t){.used = 1, .sql = 1, .tries = d->tries + 1, .order_id = d->order_id,
                      .amount = d->amount};
        snprintf(j->pay_id, sizeof j->pay_id, "%s", d->payment_id);
        start(wr, j);   /* (no Redis: never -1) */
    }
    free(due);
}

int writer_refund_run(writer_t *wr)
{
    if (!wr->rc)
        return 0;
    struct wrefund *r = state(wr);
    if (reap(wr, r) != 0 || hold(wr, r) != 0)
        return -1;
    uint64_t now = clock_mono_ms();
    if (wr->app->cfg.mode == MODE_SYNC && now >= r->sql_at) {
        r->sql_at = now + REFUND_SQL_EVERY_MS;
        sync_pass(wr, r);
    }
    if (now >= r->recheck_at) {
        r->recheck_at = now + REFUND_RECHECK_MS;
        for (size_t si = 0; si < wr->nstreams; si++)
            wr->streams[si].refund_quiet = 0;
    }
    int64_t seen = 0;
    r->running = 0;
    for (size_t si = 0; si < wr->nstreams && !stopping(wr); si++) {
        wstream_t *s = &wr->streams[si];
        if (s->refund_quiet)
            continue;
        char key[96];
        if (key_refunds_t(key, sizeof key, s->tag) < 0)
            continue;
        int g = group(wr, s, key);
        if (g < 0)
            return -1;
        int64_t here = 0;
        if (g > 0 && outbox(wr, r, s, key, &here) != 0)
            return -1;
        s->refund_quiet = here == 0;
        seen += here;
    }
    for (int i = 0; i < r->max; i++)
        r->running += r->jobs[i].used && !r->jobs[i].sent;
    /* a command running: reaped within REFUND_POLL_MS, not at the next pass */
    if (r->running)
        wr->due_at = now + REFUND_POLL_MS < wr->due_at ? now + REFUND_POLL_MS : wr->due_at;
    /* this writer's share of the gauge: added as a difference, so sub-writers sum */
    atomic_fetch_add(&wr->m->refunds_pending, seen - r->published);
    r->published = seen;
    return 0;
}
