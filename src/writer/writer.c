/* writer.c -- the order writer (writer.h): Redis Stream consumer group -> SQL.
 *
 * One thread, one blocking hiredis connection (socket timeouts are the deadlines), one
 * store connection. The loop, in the order it runs:
 *
 *   connect     Redis, with back-off 100 ms doubling to 2 s while it is down; after every
 *               (re)connect the stream list is re-read and our own pending entries are
 *               replayed, since XACKs in flight when the connection broke may be lost;
 *   streams     every ~1 s and whenever a read comes back empty, seckill:streams ->
 *               the streams to read and their groups (writer_streams.c);
 *   pending     XREADGROUP ... STREAMS k.. 0.. with a per-stream cursor until every stream
 *               reports nothing left: entries this consumer read and never acked;
 *   claim       every ~2 s, XAUTOCLAIM k g1 <name> <claim_idle_ms> 0-0 COUNT batch, cursor
 *               followed to the end: entries of consumers that died holding them;
 *   metrics     every ~1 s, XINFO GROUPS per live stream -> stream_pending, stream_lag; in
 *               stream mode also TIME first, and a stream whose sale has ended and whose
 *               group has nothing undelivered or pending goes into the drained set
 *               (writer_sweep.c: order lookups skip it, orders.h), and SCARD of the set;
 *   sweep       stream mode, every --writer-drain-sweep-ms (60 s): writer_sweep_run;
 *   read        XREADGROUP GROUP g1 <name> COUNT batch BLOCK block_ms STREAMS k.. >..
 *
 * Drained streams (writer_sweep.c) are named by none of the reads, claims and XINFO
 * passes: the per-poll work follows the live streams.
 *
 * Every batch, whatever its source, goes the same way (handle_batch): parse, write the
 * orders in ONE transaction (store_orders_write: idempotent inserts + stock decrement),
 * and only after the commit XACK them. A failed write keeps the batch and retries it
 * (50 ms doubling to 5 s; writer_failures; sql_up = 0) -- it is never dropped and never
 * acked unwritten. While it waits to retry, the streams' payment deadlines are still swept
 * (sql_wait): they are decided in Redis, so SQL being down does not hold them back.
 * Replays are harmless: the order id is the primary key and
 * (user, voucher) is unique.
 *
 * An entry carries every order of one admission call (sentry.h): its orders are all in
 * the batch's one transaction, so the entry is acked only once ALL of them are in SQL;
 * one order of it that cannot be written makes the whole entry a dead letter
 * (writer_dead.c). COUNT batch counts entries, so a batch holds up to 64 x batch orders.
 *
 * Redis Cluster: writer_start starts a supervisor instead (writer_cluster.c), which runs
 * one writer like this per master; such a sub-writer reads with one XREADGROUP per stream
 * (read_group_node) and polls.
 *
 * writer_stop: the flag is seen within one BLOCK (<= writer_block_ms); the batch in hand
 * is committed and acked first. If SQL is down at that moment the writer keeps retrying
 * for STOP_GRACE_MS, then leaves: the batch stays pending in the stream (never lost) and
 * is written at the next start, or adopted by another instance. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "redis/rarena.h"
#include "redis/rconn.h"
#include "redis/resp.h"
#include "sale/sentry.h"
#include "writer/writer_int.h"

#define CLAIM_EVERY_MS 2000
#define DUE_EVERY_MS 500        /* payment deadlines swept (writer_life_sweep) */
#define INFO_EVERY_MS 1000
#define REDIS_BACKOFF_MIN_MS 100
#define REDIS_BACKOFF_MAX_MS 2000
#define SQL_BACKOFF_MIN_MS 50
#define SQL_BACKOFF_MAX_MS 5000
#define FINAL_DRAIN_MS 3000    /* clean stop: write what is queued for at most this */
#define STOP_GRACE_MS 5000
#define DOWN_LOG_EVERY_MS 30000
#define IDLE_MIN_MS 5          /* sub-writer poll interval while quiet: 5 ms doubling ... */
#define IDLE_MAX_MS 100        /* ... to 100 ms */

/* ---------------------------------------------------------------- small helpers */

/* Sleeps ms, or less if writer_stop is called. */
void writer_nap(writer_t *wr, int ms)
{
    struct timespec ts = clock_mono_after(ms);
    pthread_mutex_lock(&wr->mu);
    while (!stopping(wr) && pthread_cond_timedwait(&wr->cv, &wr->mu, &ts) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&wr->mu);
}

/* Sleeps ms regardless of stop (SQL retries while finishing the last batch). */
static void nap_hard(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A batch waiting for SQL (its retries' back-off): ms, in which the streams' payment
 * deadlines are still swept when due (writer_life_deadlines) -- the decisions are Redis's
 * and their events wait in the stream, so a database outage does not hold back the
 * timeouts. The batch in hand borrows replies from wr->arena: the sweep's replies go to
 * the side arena meanwhile. A connection the sweep loses stays lost: the batch's acks
 * fail, and the loop reconnects and replays it (its orders already in SQL: no-ops). */
static void sql_wait(writer_t *wr, int ms)
{
    uint64_t until = clock_mono_ms() + (uint64_t)(ms > 0 ? ms : 0);
    for (;;) {
        uint64_t now = clock_mono_ms();
        if (wr->rc && !stopping(wr) && now >= wr->timeouts_at) {
            rarena_t *batch = wr->arena;
            wr->arena = wr->side_arena;
            rarena_attach(wr->arena, wr->rc->reader);
            writer_life_deadlines(wr);
            if (wr->rc)
                rarena_attach(batch, wr->rc->reader);
            wr->arena = batch;
            rarena_reset(wr->side_arena);
            now = clock_mono_ms();
        }
        if (now >= until)
            return;
        uint64_t next = wr->rc && wr->timeouts_at > now && wr->timeouts_at < until
                            ? wr->timeouts_at
                            : until;
        nap_hard((int)(next - now));
    }
}

static struct timeval tv_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Command builder: argv/argvlen grow as needed. */
static void args_need(writer_t *wr, size_t n)
{
    if (n <= wr->capargv)
        return;
    size_t cap = wr->capargv ? wr->capargv : 64;
    while (cap < n)
        cap *= 2;
    wr->argv = xrealloc(wr->argv, cap * sizeof *wr->argv);
    wr->argvlen = xrealloc(wr->argvlen, cap * sizeof *wr->argvlen);
    wr->capargv = cap;
}

void writer_arg(writer_t *wr, size_t *n, const char *z, size_t len)
{
    args_need(wr, *n + 1);
    wr->argv[*n] = z;
    wr->argvlen[*n] = len;
    (*n)++;
}

void writer_args(writer_t *wr, size_t *n, const char *z)
{
    writer_arg(wr, n, z, strlen(z));
}

/* ---------------------------------------------------------------- Redis connection */

/* Counts one failure towards the back-off (100 ms doubling to 2 s) and logs it: the first
 * one, then a reminder every DOWN_LOG_EVERY_MS while Redis stays unusable. */
void writer_redis_down(writer_t *wr, const char *what, const char *why)
{
    uint64_t now = clock_mono_ms();
    if (!wr->redis_down) {
        log_warn("writer: %s (%s); reconnecting", what, why);
        wr->redis_down = 1;
        wr->redis_down_logged_at = now;
        wr->redis_backoff_ms = REDIS_BACKOFF_MIN_MS;
    } else if (now - wr->redis_down_logged_at >= DOWN_LOG_EVERY_MS) {
        log_warn("writer: Redis still unusable (%s); retrying", why);
        wr->redis_down_logged_at = now;
    }
    wr->redis_retry_at = now + (uint64_t)wr->redis_backoff_ms;
    wr->redis_backoff_ms *= 2;
    if (wr->redis_backoff_ms > REDIS_BACKOFF_MAX_MS)
        wr->redis_backoff_ms = REDIS_BACKOFF_MAX_MS;
}

/* Redis answered a real command after a failure: it is usable again. */
void writer_redis_up(writer_t *wr)
{
    if (!wr->redis_down)
        return;
    log_info("writer: Redis usable again");
    wr->redis_down = 0;
    wr->redis_backoff_ms = REDIS_BACKOFF_MIN_MS;
}

static void redis_drop(writer_t *wr, const char *why)
{
    if (!wr->rc)
        return;
    redisFree(wr->rc);
    wr->rc = NULL;
    writer_redis_down(wr, "Redis connection lost", why);
}

/* For a command that got no reply or an error reply: drops the connection, so the next
 * loop reconnects and replays what was not acked. */
int writer_redis_fail(writer_t *wr, const char *cmd, redisReply *r)
{
    char why[256];
    if (r && r->type == REDIS_REPLY_ERROR)
        snprintf(why, sizeof why, "%s: %.*s", cmd, (int)(r->len > 200 ? 200 : r->len), r->str);
    else
        snprintf(why, sizeof why, "%s: %s", cmd, wr->rc && wr->rc->errstr[0] ? wr->rc->errstr : "no reply");
    redis_drop(wr, why);
    return -1;
}

/* Appends the command wr->argv[0..n) to the connection's output, in RESP made by resp.h
 * (a batch's XACK names every entry: hiredis's own formatting was a tenth of the
 * writer's CPU). It goes out with the next read of a reply. */
void writer_append(writer_t *wr, size_t n)
{
    size_t need = resp_size((int)n, wr->argvlen);
    if (need > wr->capcmd) {
        wr->cmdbuf = xrealloc(wr->cmdbuf, need);
        wr->capcmd = need;
    }
    size_t len = resp_put(wr->cmdbuf, (int)n, wr->argv, wr->argvlen);
    redisAppendFormattedCommand(wr->rc, wr->cmdbuf, len);
}

/* Sends wr->argv[0..n) and waits for its reply (NULL: the connection failed). */
redisReply *writer_cmd(writer_t *wr, size_t n)
{
    writer_append(wr, n);
    void *r = NULL;
    if (redisGetReply(wr->rc, &r) != REDIS_OK)
        return NULL;
    return r;
}

static int redis_ensure(writer_t *wr)
{
    if (wr->rc)
        return 0;
    uint64_t now = clock_mono_ms();
    if (now < wr->redis_retry_at)
        return -1;
    char why[256];
    redisContext *c = rconn_open(&wr->addr, wr->redis_timeout_ms, why, sizeof why);
    if (!c) {
        writer_redis_down(wr, "cannot reach Redis", why);
        return -1;
    }
    wr->rc = c;
    /* Keep the reply buffer between reads. By default hiredis frees it whenever it is empty
     * with more than 16 KB unused, so every batch-sized XREADGROUP reply (tens of KB) grew it
     * again from nothing: large mallocs and glibc's malloc_consolidate, ~10 % of the
     * writer's CPU. Its size is bounded by the largest reply (COUNT batch entries). */
    c->reader->maxbuf = 0;
    /* Replies in bulk (rarena.h): hiredis's own reply objects cost a calloc or malloc per
     * element and per string, and as many frees -- a dozen of each per order. */
    rarena_attach(wr->arena, c->reader);
    /* Acks may have been lost with the old connection: replay our own pending entries.
     * And the groups may be gone (a restarted Redis without persistence). */
    for (size_t i = 0; i < wr->nstreams; i++) {
        wr->streams[i].group_ok = 0;
        /* and the drained set may be gone with them: read it again, re-mark */
        wr->streams[i].drained = wr->streams[i].drained_known = 0;
        /* and the refund outboxes looked at again (a rebuild may have refilled them) */
        wr->streams[i].refund_group = wr->streams[i].refund_quiet = 0;
    }
    wr->streams_at = 0;
    wr->reg_card = -1;
    wr->need_pending = 1;
    writer_guard_reset(wr);
    return 0;
}

/* ---------------------------------------------------------------- parsing */

static wentry_t *ent_new(writer_t *wr)
{
    if (wr->nents == wr->capents) {
        wr->capents = wr->capents ? wr->capents * 2 : 256;
        wr->ents = xrealloc(wr->ents, wr->capents * sizeof *wr->ents);
    }
    if (wr->nents == 0)
        wr->norders = wr->nevs = 0;   /* a new batch (every reader empties ents first) */
    wentry_t *e = &wr->ents[wr->nents++];
    memset(e, 0, sizeof *e);
    return e;
}

/* A stream entry id as Redis writes them: <ms>-<seq>, both decimal. Anything else (a
 * NUL inside, say) could not be acked and would be retried for ever (fuzz_redis_reply
 * found one). */
static int entry_id_ok(const redisReply *r)
{
    if (!is_str(r) || r->len < 3 || r->len >= ENTRY_ID_MAX)
        return 0;
    size_t i = 0, dash = 0;
    for (; i < r->len; i++) {
        if (r->str[i] == '-' && dash == 0 && i > 0)
            dash = i;
        else if (r->str[i] < '0' || r->str[i] > '9')
            return 0;
    }
    return dash > 0 && dash + 1 < r->len;
}

/* One entry: [id, [field, value, ...] or nil]. Returns 0, or -1 if not even an id. */
static int parse_entry(writer_t *wr, size_t si, const redisReply *er)
{
    if (!er || er->type != REDIS_REPLY_ARRAY || er->elements < 1 ||
        !entry_id_ok(er->element[0])) {
        log_error("writer: %s: unreadable stream entry skipped", wr->streams[si].key);
        return -1;
    }
    wentry_t *e = ent_new(wr);
    e->si = si;
    memcpy(e->id, er->element[0]->str, er->element[0]->len);
    e->id[er->element[0]->len] = '\0';
    const redisReply *f = er->elements > 1 ? er->element[1] : NULL;
    if (!f || f->type == REDIS_REPLY_NIL) {
        e->kind = E_DELETED;
        return 0;
    }
    e->kind = E_DEAD;
    e->fields = f;
    if (f->type != REDIS_REPLY_ARRAY || f->elements % 2 != 0)
        e->fields = NULL;   /* nothing to copy into the dead letter */
    if (writer_life_parse(wr, e, f))
        return 0;
    /* The entry's format: sentry.h. An entry is one unit: all its orders are written, or
     * (one of them bad) it goes to the dead letters whole. */
    sentry_it_t it;
    size_t bound;
    if (sentry_open(f, &it, &bound, &e->reason) != 0)
        return 0;
    if (wr->norders + bound > wr->caporders) {
        while (wr->norders + bound > wr->caporders)
            wr->caporders = wr->caporders ? wr->caporders * 2 : 1024;
        wr->orders = xrealloc(wr->orders, wr->caporders * sizeof *wr->orders);
    }
    /* Taken into the batch's orders as they are checked (one pass); counted into it only
     * once the whole entry is good: an entry is one unit. */
    e->o0 = wr->norders;
    const int64_t latest = (int64_t)time(NULL) + WRITER_TIME_SLACK_S;
    const int64_t vid = wr->streams[si].vid;
    size_t no = 0;
    sentry_t se;
    int rc;
    while ((rc = sentry_next(&it, &se, &e->reason)) == 1) {
        store_order_t *o = &wr->orders[e->o0 + no++];
        o->id = se.order_id;
        o->user_id = se.user_id;
        o->voucher_id = vid;
        if (o->user_id > WRITER_MAX_USER_ID) {
            e->reason = "userId out of range";
            return 0;
        }
        /* ts is Redis's clock at admission; without it, the entry id's milliseconds. A
         * time SQL cannot store (MariaDB's DATETIME ends in 9999) would fail the whole
         * batch on every retry: out of range is dead, not retried. */
        o->create_time = se.ts > 0 ? se.ts : strtoll(e->id, NULL, 10) / 1000;
        if (o->create_time < WRITER_MIN_TIME || o->create_time > latest) {
            e->reason = "time out of range";
            return 0;
        }
        /* ep: the voucher's Redis generation at admission (admit.lua) */
        o->epoch = se.ep;
        o->status = 1;
    }
    if (rc < 0)
        return 0;   /* e->reason says why */
    wr->norders += no;
    e->no = no;
    e->kind = E_ORDER;
    e->reason = NULL;
    return 0;
}

/* XREADGROUP reply: [[key, [entry...]], ...] or nil. Parses into wr->ents. For the
 * pending pass, also advances each stream's cursor and marks streams with nothing left. */
static int parse_read(writer_t *wr, const redisReply *r, int pending)
{
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *sr = r->element[i];
        if (sr->type != REDIS_REPLY_ARRAY || sr->elements != 2 ||
            sr->element[1]->type != REDIS_REPLY_ARRAY)
            return -1;
        size_t si = writer_streams_index(wr, sr->element[0]);
        if (si == (size_t)-1)
            continue;   /* cannot happen: we named the streams */
        const redisReply *list = sr->element[1];
        if (pending) {
            if (list->elements == 0) {
                wr->streams[si].done = 1;
                continue;
            }
            const redisReply *last = list->element[list->elements - 1];
            if (last->type == REDIS_REPLY_ARRAY && last->elements >= 1 &&
                entry_id_ok(last->element[0])) {
                memcpy(wr->streams[si].cursor, last->element[0]->str, last->element[0]->len);
                wr->streams[si].cursor[last->element[0]->len] = '\0';
            } else {
                wr->streams[si].done = 1;   /* cannot advance: stop rather than loop */
            }
        }
        for (size_t j = 0; j < list->elements; j++)
            parse_entry(wr, si, list->element[j]);
    }
    return 0;
}

/* ---------------------------------------------------------------- SQL */

/* Writes orders[0..n) until it commits. Returns 0, or -1 if stopping gave up. */
static int sql_write(writer_t *wr, const store_order_t *orders, size_t n, size_t *inserted,
                     size_t *conflicts, size_t *fenced)
{
    int backoff = SQL_BACKOFF_MIN_MS, fails = 0;
    uint64_t stop_seen = 0;
    for (;;) {
        char err[512] = "";
        if (!wr->st) {
            wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
        }
        if (wr->st) {
            int wrc = store_orders_write(wr->st, orders, n, inserted, conflicts, fenced);
            if (wrc == STORE_OK) {
                if (wr->sql_down)
                    log_info("writer: SQL writes work again (%zu orders written)", *inserted);
                wr->sql_down = 0;
                atomic_store(&wr->app->sql_up, 1);
                return 0;
            }
            snprintf(err, sizeof err, "%s", store_errmsg(wr->st));
        }
        fails++;
        wr->sql_down = 1;
        atomic_store(&wr->app->sql_up, 0);
        metric_inc(&wr->m->writer_failures);
        metric_inc(&wr->m->sql_errors);
        /* A connection that keeps failing is replaced (matters for network databases). */
        if (fails % 3 == 0 && wr->st) {
            store_close(wr->st);
            wr->st = NULL;
        }
        uint64_t now = clock_mono_ms();
        if (stopping(wr)) {
            if (!stop_seen)
                stop_seen = now;
            if (now - stop_seen >= STOP_GRACE_MS) {
                log_error("writer: stopping with a batch of %zu orders unwritten (%s); it "
                          "stays pending in the stream and is written on the next start",
                          n, err);
                return -1;
            }
        }
        log_warn("writer: batch of %zu orders not written (%s); retry %d in %d ms", n, err,
                 fails, backoff);
        sql_wait(wr, stopping(wr) && backoff > 500 ? 500 : backoff);
        if (backoff < SQL_BACKOFF_MAX_MS) {
            backoff *= 2;
            if (backoff > SQL_BACKOFF_MAX_MS)
                backoff = SQL_BACKOFF_MAX_MS;
        }
    }
}

/* ---------------------------------------------------------------- one batch */

/* Appends one XACK key g1 ids... per run of entries of the same stream (a batch holds
 * each stream's entries together), leaving out E_DEAD ones (acked inside their MULTI)
 * and E_WAIT ones (left pending: they come back).
 * Returns how many commands were appended. */
static size_t append_acks(writer_t *wr)
{
    size_t cmds = 0;
    for (size_t i = 0; i < wr->nents;) {
        size_t si = wr->ents[i].si, n = 0, ids = 0;
        writer_args(wr, &n, "XACK");
        writer_args(wr, &n, wr->streams[si].key);
        writer_args(wr, &n, KEY_GROUP);
        for (; i < wr->nents && wr->ents[i].si == si; i++)
            if (wr->ents[i].kind != E_DEAD && wr->ents[i].kind != E_WAIT) {
                writer_args(wr, &n, wr->ents[i].id);
                ids++;
            }
        if (ids > 0) {
            writer_append(wr, n);
            cmds++;
        }
    }
    return cmds;
}

/* --redis-wait-replicas: are the batch's entries on enough replicas? An order this master
 * has not yet handed to a replica can vanish in a failover; if SQL had it, the promoted
 * replica would sell its unit again. So the writer persists only what WAIT confirms.
 * WAIT counts the replicas that have every write this connection made, and reading the
 * pending list after a reconnect writes nothing; so first one write of our own -- an
 * XCLAIM of the batch's first entry to ourselves (JUSTID: nothing changes but its idle
 * time) -- whose offset is past every admission this master made before it. 1 = yes;
 * 0 = not yet (the connection is dropped: the entries stay pending and come back). */
static int batch_replicated(writer_t *wr)
{
    const wentry_t *e = &wr->ents[0];
    char n[16], t[16];
    int tmo = wr->redis_timeout_ms / 2;
    snprintf(n, sizeof n, "%d", wr->wait_replicas);
    snprintf(t, sizeof t, "%d", tmo > 0 ? tmo : 1);
    size_t k = 0;
    writer_args(wr, &k, "XCLAIM");
    writer_args(wr, &k, wr->streams[e->si].key);
    writer_args(wr, &k, KEY_GROUP);
    writer_args(wr, &k, wr->name);
    writer_args(wr, &k, "0");
    writer_args(wr, &k, e->id);
    writer_args(wr, &k, "JUSTID");
    writer_append(wr, k);
    k = 0;
    writer_args(wr, &k, "WAIT");
    writer_args(wr, &k, n);
    writer_args(wr, &k, t);
    writer_append(wr, k);
    void *rv = NULL;
    if (redisGetReply(wr->rc, &rv) != REDIS_OK)
        return writer_redis_fail(wr, "XCLAIM", NULL) == 0;
    rv = NULL;
    if (redisGetReply(wr->rc, &rv) != REDIS_OK)
        return writer_redis_fail(wr, "WAIT", NULL) == 0;
    redisReply *r = rv;
    int ok = r->type == REDIS_REPLY_INTEGER && r->integer >= wr->wait_replicas;
    if (!ok) {
        char why[128];
        snprintf(why, sizeof why, "WAIT: %lld of %d replicas have the batch",
                 r->type == REDIS_REPLY_INTEGER ? (long long)r->integer : -1LL,
                 wr->wait_replicas);
        redis_drop(wr, why);
        return 0;
    }
    return 1;
}

/* Rounds of a batch: an event that freed its buyer (kind 'f', --cancel-frees-buyer) must
 * reach SQL before the orders behind it in its stream -- the buyer's next order would meet
 * the cancelled one in UNIQUE(user_id, voucher_id). So each entry's round is the number of
 * such events before it in its stream, and round r's orders, then its events, are written
 * before round r + 1's. Returns the number of rounds: 1 (one order transaction and one event
 * transaction, as always) unless the batch holds such an event followed by more. */
static int batch_rounds(writer_t *wr)
{
    int *seen = xcalloc(wr->nstreams ? wr->nstreams : 1, sizeof *seen), rounds = 1;
    for (size_t i = 0; i < wr->nents; i++) {
        wentry_t *e = &wr->ents[i];
        e->round = seen[e->si];
        if (e->round + 1 > rounds && (e->kind == E_ORDER || e->kind == E_EVENT))
            rounds = e->round + 1;
        if (e->kind == E_EVENT && e->ev.kind == 'f')
            seen[e->si]++;
    }
    free(seen);
    return rounds;
}

/* A freeing event of round r that was not applied (it waits, writer_life.c) holds back
 * the rest of its stream's batch: they wait with it (not acked; they come back). */
static void hold_back(writer_t *wr, int r)
{
    for (size_t i = 0; i < wr->nents; i++) {
        const wentry_t *e = &wr->ents[i];
        if (e->round != r || e->kind != E_WAIT || e->ev.kind != 'f')
            continue;
        for (size_t j = 0; j < wr->nents; j++)
            if (wr->ents[j].si == e->si && wr->ents[j].round > r &&
                (wr->ents[j].kind == E_ORDER || wr->ents[j].kind == E_EVENT))
                wr->ents[j].kind = E_WAIT;
    }
}

/* Writes round r's orders to SQL (one transaction). 0, or -1 if stopping gave up. With
 * one round they are packed to the front of wr->orders in place; with more, copied. */
static int write_round(writer_t *wr, int r, int rounds)
{
    store_order_t *orders = rounds == 1 ? wr->orders : xmalloc(wr->norders * sizeof *orders);
    size_t n = 0;
    for (size_t i = 0; i < wr->nents; i++) {
        const wentry_t *e = &wr->ents[i];
        if (e->kind != E_ORDER || e->round != r)
            continue;
        /* (in place, n never passes o0) */
        if (orders != wr->orders || n != e->o0)
            memmove(&orders[n], &wr->orders[e->o0], e->no * sizeof *orders);
        n += e->no;
    }
    int rc = 0;
    size_t ins = 0, conf = 0, fen = 0;
    if (n > 0) {
        rc = sql_write(wr, orders, n, &ins, &conf, &fen);
        if (rc == 0) {
            metric_add(&wr->m->orders_persisted, ins);
            metric_add(&wr->m->order_id_conflicts, conf);
            metric_add(&wr->m->orders_fenced, fen);
            metric_add(&wr->m->orders_replayed, n - ins - conf - fen);
            metric_inc(&wr->m->writer_batches);
            metric_add(&wr->m->writer_batch_orders, n);
        }
    }
    /* replays (not fenced ones, which never get written): an order skipped because its
     * buyer's earlier order is not yet cancelled in SQL waits for that (writer_life.c) */
    if (rc == 0 && n > ins + conf + fen && fen == 0) {
        size_t at = 0;
        for (size_t i = 0; i < wr->nents; i++) {
            wentry_t *e = &wr->ents[i];
            if (e->kind != E_ORDER || e->round != r)
                continue;
            if (writer_life_held(wr, e, &orders[at], e->no))
                e->kind = E_WAIT;
            at += e->no;
        }
    }
    if (orders != wr->orders)
        free(orders);
    return rc;
}

/* Writes wr->ents to SQL (one transaction for the orders, one for the events; per round,
 * batch_rounds), then acks them. Returns 0; -1 if Redis failed (connection dropped: the
 * entries stay pending and are replayed); -2 if stopping gave up on SQL. */
static int handle_batch(writer_t *wr)
{
    if (wr->nents == 0)
        return 0;
    if (wr->wait_replicas > 0 && wr->rc && !batch_replicated(wr))
        return -1;
    for (int backoff = SQL_BACKOFF_MIN_MS; writer_dead_check(wr) != 0;) {
        if (wr->st) {
            log_warn("writer: voucher check failed (%s); retry in %d ms", store_errmsg(wr->st),
                     backoff);
            store_close(wr->st);   /* reopened by the next try */
            wr->st = NULL;
        }
        /* A failed batch attempt like any other (sql_write's): counted, and SQL is down
         * for /metrics until a write works again. */
        wr->sql_down = 1;
        atomic_store(&wr->app->sql_up, 0);
        metric_inc(&wr->m->writer_failures);
        metric_inc(&wr->m->sql_errors);
        if (stopping(wr))
            return -2;   /* the batch stays pending in the stream */
        sql_wait(wr, backoff);
        backoff = backoff * 2 > SQL_BACKOFF_MAX_MS ? SQL_BACKOFF_MAX_MS : backoff * 2;
    }
    size_t ndead = 0;
    for (size_t i = 0; i < wr->nents; i++) {
        const wentry_t *e = &wr->ents[i];
        if (e->kind == E_ORDER || e->kind == E_EVENT) {
            continue;   /* written by rounds, below */
        } else if (e->kind == E_DEAD) {
            ndead++;
            log_error("writer: %s entry %s cannot be an order (%s): moved to "
                      "seckill:dead:{%lld}",
                      wr->streams[e->si].key, e->id, e->reason,
                      (long long)wr->streams[e->si].vid);
        } else {
            wr->deleted++;
            log_error("writer: %s entry %s was deleted from the stream before it was "
                      "written; acking it",
                      wr->streams[e->si].key, e->id);
        }
    }
    int rounds = batch_rounds(wr);
    for (int r = 0; r < rounds; r++) {
        if (write_round(wr, r, rounds) != 0)
            return -2;
        ndead += writer_life_apply(wr, r);
        hold_back(wr, r);
    }
    if (!wr->rc)
        return -1;
    /* Only now, after the commit: acks (and dead letters), pipelined. */
    size_t replies = append_acks(wr);
    for (size_t i = 0; i < wr->nents; i++)
        if (wr->ents[i].kind == E_DEAD) {
            writer_dead_append(wr, &wr->ents[i]);
            replies += 4;
        }
    int ok = 1;
    for (size_t i = 0; i < replies; i++) {
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK) {
            return writer_redis_fail(wr, "XACK", NULL);
        }
        redisReply *r = rv;
        if (r->type == REDIS_REPLY_ERROR) {
            log_error("writer: ack failed: %s", r->str);
            ok = 0;
        }
    }
    wr->dead += ndead;
    if (!ok) {
        redis_drop(wr, "ack failed");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the passes */

/* Whether a read names stream s: a drained one never (its sale is over and every order
 * it admitted is in SQL: writer_sweep_run watches it instead), in the pending pass only until
 * it reports nothing left. */
static int reads(const wstream_t *s, int pending)
{
    return !s->drained && !(pending && s->done);
}

/* XREADGROUP GROUP g1 <name> COUNT <count> -- the head of every read. */
static void args_xreadgroup(writer_t *wr, size_t *n, const char *count)
{
    writer_args(wr, n, "XREADGROUP");
    writer_args(wr, n, "GROUP");
    writer_args(wr, n, KEY_GROUP);
    writer_args(wr, n, wr->name);
    writer_args(wr, n, "COUNT");
    writer_args(wr, n, count);
}

/* A sub-writer's read: Redis Cluster refuses a multi-key XREADGROUP whose keys are in
 * different slots (CROSSSLOT) even on one node, and every voucher has its own slot. So
 * one non-blocking XREADGROUP per stream goes out in one pipeline, and the answers are
 * put together into one reply of the usual shape ([key, entries] per stream) for
 * parse_read. A stream that moved (MOVED/ASK) or lost its group is skipped and the
 * stream list re-read; the caller naps when nothing came back. */
static int read_group_node(writer_t *wr, int pending)
{
    char count[16];
    snprintf(count, sizeof count, "%d", wr->batch);
    size_t sent = 0;
    for (size_t i = 0; i < wr->nstreams; i++) {
        if (!reads(&wr->streams[i], pending))
            continue;
        size_t n = 0;
        args_xreadgroup(wr, &n, count);
        writer_args(wr, &n, "STREAMS");
        writer_args(wr, &n, wr->streams[i].key);
        writer_args(wr, &n, pending ? wr->streams[i].cursor : ">");
        writer_append(wr, n);
        sent++;
    }
    if (sent == 0)
        return 0;
    redisReply *all = rarena_alloc(wr->arena, sizeof *all);
    redisReply **els = rarena_alloc(wr->arena, sent * sizeof *els);
    memset(all, 0, sizeof *all);
    all->type = REDIS_REPLY_ARRAY;
    all->element = els;
    int failed = 0;
    char why[256] = "";
    for (size_t k = 0; k < sent; k++) {
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK) {
            return writer_redis_fail(wr, "XREADGROUP", NULL);
        }
        redisReply *r = rv;
        if (r->type == REDIS_REPLY_ERROR) {
            if (strncmp(r->str, "NOGROUP", 7) == 0 || strncmp(r->str, "MOVED", 5) == 0 ||
                strncmp(r->str, "ASK", 3) == 0 || strncmp(r->str, "TRYAGAIN", 8) == 0 ||
                strncmp(r->str, "CLUSTERDOWN", 11) == 0) {
                /* The stream is elsewhere now, or its group must be made again. */
                if (wr->streams_at != 0)
                    log_info("writer: %s on %s:%d; re-reading the stream list", r->str,
                             wr->addr.host, wr->addr.port);
                for (size_t i = 0; i < wr->nstreams; i++)
                    wr->streams[i].group_ok = 0;
                wr->streams_at = 0;
            } else if (!failed) {
                failed = 1;
                snprintf(why, sizeof why, "XREADGROUP: %.200s", r->str);
            }
            continue;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
            els[all->elements++] = r->element[0];   /* moved into all */
            r->elements = 0;
        } else if (r->type != REDIS_REPLY_NIL) {
            failed = 1;
            snprintf(why, sizeof why, "XREADGROUP: unexpected reply shape");
        }
    }
    if (failed) {
        redis_drop(wr, why);
        return -1;
    }
    wr->nents = 0;
    if (parse_read(wr, all, pending) != 0) {
        log_error("writer: unexpected XREADGROUP reply shape");
        redis_drop(wr, "XREADGROUP: unexpected reply shape");
        return -1;
    }
    return (int)wr->nents;
}

/* XREADGROUP over all streams (those not done, for the pending pass). ids: ">" for new
 * entries, else each stream's cursor. Returns entries read (>= 0) or -1 on Redis error.
 * The reply lives in wr->arena until the next read, so the batch's entries can borrow
 * from it (a dead letter keeps its original fields). */
static int read_group(writer_t *wr, int pending, int block_ms)
{
    rarena_reset(wr->arena);   /* the previous batch's replies are done with */
    if (wr->node_mode)
        return read_group_node(wr, pending);
    char count[16], block[16];
    snprintf(count, sizeof count, "%d", wr->batch);
    snprintf(block, sizeof block, "%d", block_ms);
    size_t n = 0;
    args_xreadgroup(wr, &n, count);
    if (block_ms > 0) {
        writer_args(wr, &n, "BLOCK");
        writer_args(wr, &n, block);
    }
    writer_args(wr, &n, "STREAMS");
    size_t k = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        if (reads(&wr->streams[i], pending)) {
            writer_args(wr, &n, wr->streams[i].key);
            k++;
        }
    if (k == 0)
        return 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        if (reads(&wr->streams[i], pending))
            writer_args(wr, &n, pending ? wr->streams[i].cursor : ">");

    if (block_ms > 0)
        redisSetTimeout(wr->rc, tv_ms(block_ms + wr->redis_timeout_ms));
    redisReply *r = writer_cmd(wr, n);
    if (block_ms > 0 && wr->rc && !wr->rc->err)
        redisSetTimeout(wr->rc, tv_ms(wr->redis_timeout_ms));
    if (!r)
        return writer_redis_fail(wr, "XREADGROUP", NULL);
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOGROUP", 7) == 0) {
            /* A stream or its group vanished (deleted key, flushed Redis): recreate. */
            log_warn("writer: %s; recreating consumer groups", r->str);
            for (size_t i = 0; i < wr->nstreams; i++)
                wr->streams[i].group_ok = 0;
            wr->streams_at = 0;
            return 0;
        }
        return writer_redis_fail(wr, "XREADGROUP", r);
    }
    wr->nents = 0;
    if (parse_read(wr, r, pending) != 0) {
        log_error("writer: unexpected XREADGROUP reply shape");
        return writer_redis_fail(wr, "XREADGROUP", r);
    }
    return (int)wr->nents;
}

/* Step 1: this consumer's own pending entries, until none is left. */
static int pending_pass(writer_t *wr)
{
    for (size_t i = 0; i < wr->nstreams; i++) {
        snprintf(wr->streams[i].cursor, sizeof wr->streams[i].cursor, "0");
        wr->streams[i].done = wr->streams[i].drained;
    }
    size_t total = 0;
    for (;;) {
        int got = read_group(wr, 1, 0);
        if (got < 0)
            return -1;
        int rc = handle_batch(wr);
        total += wr->nents;
        wr->nents = 0;
        if (rc != 0)
            return rc;
        /* Nothing came back for any stream still asked about: all drained. When stopping,
         * the rest stays pending for the next start. */
        if (got == 0 || stopping(wr))
            break;
    }
    if (total)
        log_info("writer: replayed %zu entries this consumer had read but not acked", total);
    wr->need_pending = 0;
    return 0;
}

/* Step 3: adopt entries idle longer than claim_idle_ms, whoever holds them. */
static int claim_pass(writer_t *wr)
{
    char idle[16], count[16];
    snprintf(idle, sizeof idle, "%d", wr->claim_idle_ms);
    snprintf(count, sizeof count, "%d", wr->batch);
    for (size_t si = 0; si < wr->nstreams && !stopping(wr); si++) {
        if (wr->streams[si].drained)
            continue;   /* nothing pending when marked; writer_sweep_run checks it stays so */
        char cursor[ENTRY_ID_MAX] = "0-0";
        for (int rounds = 0; !stopping(wr); rounds++) {
            size_t n = 0;
            writer_args(wr, &n, "XAUTOCLAIM");
            writer_args(wr, &n, wr->streams[si].key);
            writer_args(wr, &n, KEY_GROUP);
            writer_args(wr, &n, wr->name);
            writer_args(wr, &n, idle);
            writer_args(wr, &n, cursor);
            writer_args(wr, &n, "COUNT");
            writer_args(wr, &n, count);
            rarena_reset(wr->arena);   /* the previous round's replies are done with */
            redisReply *r = writer_cmd(wr, n);
            if (!r)
                return writer_redis_fail(wr, "XAUTOCLAIM", NULL);
            if (r->type == REDIS_REPLY_ERROR) {
                if (strncmp(r->str, "NOGROUP", 7) == 0) {
                    wr->streams[si].group_ok = 0;
                    wr->streams_at = 0;
                    break;
                }
                return writer_redis_fail(wr, "XAUTOCLAIM", r);
            }
            /* [next-cursor, [entries], [deleted ids] (Redis >= 7)] */
            if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || !is_str(r->element[0]) ||
                r->element[0]->len >= ENTRY_ID_MAX || r->element[1]->type != REDIS_REPLY_ARRAY)
                return writer_redis_fail(wr, "XAUTOCLAIM (unexpected reply)", r);
            memcpy(cursor, r->element[0]->str, r->element[0]->len);
            cursor[r->element[0]->len] = '\0';
            wr->nents = 0;
            const redisReply *list = r->element[1];
            for (size_t j = 0; j < list->elements; j++)
                parse_entry(wr, si, list->element[j]);
            if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_ARRAY &&
                r->element[2]->elements > 0) {
                /* Redis removed these from the group's pending list itself. */
                wr->deleted += r->element[2]->elements;
                log_error("writer: %s: %zu pending entries were deleted from the stream "
                          "before anyone wrote them",
                          wr->streams[si].key, r->element[2]->elements);
            }
            size_t claimed = wr->nents;
            if (claimed) {
                metric_add(&wr->m->writer_claimed, claimed);
                log_info("writer: adopted %zu idle entries of %s", claimed,
                         wr->streams[si].key);
            }
            int rc = handle_batch(wr);
            wr->nents = 0;
            if (rc != 0)
                return rc;
            if (strcmp(cursor, "0-0") == 0)
                break;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- metrics */

/* The backlog gauges: a writer's own go to the metrics; a sub-writer's to its node's
 * fields, summed over the nodes by the supervisor. Backlog and stream counts cover the
 * live streams (drained ones are not asked: writer_sweep_run checks them slowly). */
void writer_publish_backlog(writer_t *wr, int64_t pending, int64_t lag)
{
    int64_t live = 0, drained = 0;
    if (wr->cluster) {
        for (size_t i = 0; i < wr->nsubs; i++) {
            live += atomic_load(&wr->subs[i]->node_live);
            drained += atomic_load(&wr->subs[i]->node_drained);
        }
    } else {
        for (size_t i = 0; i < wr->nstreams; i++)
            drained += wr->streams[i].drained;
        live = (int64_t)wr->nstreams - drained;
    }
    if (wr->node_mode) {
        atomic_store(&wr->node_pending, pending);
        atomic_store(&wr->node_lag, lag);
        atomic_store(&wr->node_live, live);
        atomic_store(&wr->node_drained, drained);
        return;
    }
    atomic_store(&wr->m->stream_pending, pending);
    atomic_store(&wr->m->stream_lag, lag);
    atomic_store(&wr->m->writer_streams_live, live);
    atomic_store(&wr->m->writer_streams_drained, drained);
}

/* Every ~1 s: pending and lag of g1 summed over the live streams (XINFO GROUPS; a drained
 * stream is not asked), and in stream mode the drained marks (writer_sweep_marks). */
static int info_pass(writer_t *wr)
{
    int marks = wr->drains;
    if (marks) {
        size_t n = 0;
        writer_args(wr, &n, "TIME");
        writer_append(wr, n);
    }
    for (size_t i = 0; i < wr->nstreams; i++) {
        if (wr->streams[i].drained)
            continue;
        size_t n = 0;
        writer_args(wr, &n, "XINFO");
        writer_args(wr, &n, "GROUPS");
        writer_args(wr, &n, wr->streams[i].key);
        writer_append(wr, n);
    }
    int64_t now = 0;
    if (marks) {
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK)
            return writer_redis_fail(wr, "TIME", NULL);
        const redisReply *t = rv;
        if (t->type != REDIS_REPLY_ARRAY || t->elements < 1 || !is_str(t->element[0]) ||
            sb_parse_pos(t->element[0]->str, t->element[0]->len, &now) != 0)
            now = 0;   /* nothing is marked this pass */
    }
    int64_t pending = 0, lag = 0;
    size_t stale = 0;   /* streams whose lag did not move with nothing pending */
    for (size_t i = 0; i < wr->nstreams; i++) {
        if (wr->streams[i].drained)
            continue;
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK)
            return writer_redis_fail(wr, "XINFO GROUPS", NULL);
        int64_t p, l;
        int lag_known;
        wstream_t *s = &wr->streams[i];
        s->idle = 0;
        if (writer_sweep_group_state(rv, &p, &l, &lag_known)) {
            pending += p;
            lag += l;
            s->idle = p == 0 && lag_known && l == 0;
            s->lag_still = p == 0 && l > 0 && l == s->last_lag;
            stale += s->lag_still;
            s->last_lag = p == 0 ? l : 0;
        }
    }
    /* A lag that stands still with nothing pending for a second, while this writer reads
     * every poll: maybe a promoted replica's stale counter (writer_guard.c), set again if
     * the group has in fact read everything. */
    for (size_t i = 0; stale && i < wr->nstreams && wr->rc; i++) {
        wstream_t *s = &wr->streams[i];
        if (!s->drained && s->lag_still) {
            writer_guard_fix_lag(wr, i);
            s->last_lag = 0;
            s->lag_still = 0;
        }
    }
    if (!wr->rc)
        return -1;
    if (marks && now > 0)
        writer_sweep_marks(wr, now);
    writer_publish_backlog(wr, pending, lag);
    return wr->rc ? 0 : -1;   /* writer_sweep_marks may have lost the connection */
}

/* ---------------------------------------------------------------- the thread */

/* On a clean stop the workers have already stopped admitting (server.c stops them
 * first), so what the streams hold now is all this instance will add. Write it without
 * blocking, for a bounded time, so a clean stop leaves nothing behind; whatever is left
 * stays pending in Redis for the next start or another instance. */
static void final_drain(writer_t *wr)
{
    uint64_t until = clock_mono_ms() + FINAL_DRAIN_MS;
    size_t total = 0;
    while (wr->rc && wr->nstreams > 0 && clock_mono_ms() < until) {
        int got = read_group(wr, 0, 0);
        if (got > 0)
            total += (size_t)got;
        int rc = got > 0 ? handle_batch(wr) : 0;
        wr->nents = 0;
        if (got <= 0 || rc != 0)
            break;
    }
    if (total)
        log_info("writer: wrote %zu queued stream entries before stopping", total);
}

/* The writer's thread yields the CPU to the workers: its work can wait (every admitted
 * order is safe in the stream until its commit and XACK), the answers cannot. On a host
 * with as many busy threads as cores (two workers, redis-server, the writer) a writer at
 * the workers' priority takes its fair share right when the sale's grabs arrive; niced
 * (--writer-nice) it runs in the gaps, commits bigger batches and catches up once the
 * stock is gone. Linux keeps the nice value per thread: it is set on the writer's thread
 * id, so the workers keep theirs. */
static void lower_priority(int nice)
{
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (cur == -1 && errno != 0)
        cur = 0;
    int want = cur + (nice > 0 ? nice : 0);
    if (want > 19)
        want = 19;
    if (want != cur && setpriority(PRIO_PROCESS, (id_t)gettid(), want) != 0)
        log_warn("writer: cannot lower its priority to nice %d: %s", want, strerror(errno));
}

void *writer_main(void *arg)
{
    writer_t *wr = arg;
    int gave_up = 0;
    int idle_ms = 0;   /* sub-writer: current poll interval while quiet */
    log_set_thread_name("writer");
    pthread_setname_np(pthread_self(), "writer");   /* top -H, the bench's timeline */
    lower_priority(wr->nice);
    log_info("writer: consumer %s of group %s, batch %d, block %d ms, claim idle %d ms",
             wr->name, KEY_GROUP, wr->batch, wr->block_ms, wr->claim_idle_ms);
    while (!stopping(wr)) {
        rarena_reset(wr->arena);   /* no reply outlives a turn of the loop */
        if (redis_ensure(wr) != 0) {
            writer_nap(wr, (int)(wr->redis_retry_at > clock_mono_ms()
                              ? wr->redis_retry_at - clock_mono_ms()
                              : 10));
            continue;
        }
        int guard = writer_guard_run(wr);
        if (guard != 0) {
            /* short of replicas: Redis refuses our reads and acks there; look again */
            if (guard > 0)
                writer_nap(wr, GUARD_EVERY_MS);
            continue;
        }
        uint64_t now = clock_mono_ms();
        if (now >= wr->streams_at && writer_streams_refresh(wr) != 0)
            continue;
        if (wr->nstreams == 0) {
            if (now >= wr->info_at) {
                wr->info_at = now + INFO_EVERY_MS;
                if (info_pass(wr) != 0)
                    continue;   /* the connection was lost: nothing more on it this turn */
            }
            /* no stream: sync mode, or a Redis that lost them -- the SQL scan still runs */
            if (now >= wr->due_at) {
                wr->due_at = now + DUE_EVERY_MS;
                if (writer_life_sweep(wr) != 0)
                    continue;
            }
            /* (a refund command running: its exit looked for sooner, writer_refund.c) */
            writer_nap(wr, writer_refund_block_ms(wr, wr->block_ms < STREAMS_REFRESH_MS
                                                          ? wr->block_ms
                                                          : STREAMS_REFRESH_MS));
            wr->streams_at = 0;
            continue;
        }
        int rc = 0;
        if (wr->need_pending)
            rc = pending_pass(wr);
        if (rc == -2) {
            gave_up = 1;
            break;
        }
        if (rc != 0)
            continue;
        now = clock_mono_ms();
        if (now >= wr->claim_at) {
            wr->claim_at = now + CLAIM_EVERY_MS;
            rc = claim_pass(wr);
            if (rc == -2) {
                gave_up = 1;
                break;
            }
            if (rc != 0)
                continue;
        }
        if (now >= wr->info_at) {
            wr->info_at = now + INFO_EVERY_MS;
            if (info_pass(wr) != 0)
                continue;
        }
        if (wr->drains && now >= wr->sweep_at) {
            wr->sweep_at = now + (uint64_t)wr->sweep_ms;
            if (writer_sweep_run(wr) != 0)
                continue;
        }
        if (now >= wr->due_at) {
            wr->due_at = now + DUE_EVERY_MS;
            if (writer_life_sweep(wr) != 0)
                continue;
        }
        if (stopping(wr))
            break;
        if (writer_streams_live(wr) == 0) {
            /* every stream drained: nothing to read, look for new ones after a while */
            writer_nap(wr, wr->block_ms < STREAMS_REFRESH_MS ? wr->block_ms : STREAMS_REFRESH_MS);
            wr->streams_at = 0;
            continue;
        }
        int block = writer_life_wait_ms(wr, writer_refund_block_ms(wr, wr->block_ms));
        int got = read_group(wr, 0, block);
        if (got < 0)
            continue;
        rc = handle_batch(wr);
        wr->nents = 0;
        if (rc == -2) {
            gave_up = 1;
            break;
        }
        if (wr->node_mode) {
            /* No BLOCK across slots (read_group_node): poll, backing off while quiet
             * from IDLE_MIN_MS to IDLE_MAX_MS (never beyond block_ms). */
            if (got > 0) {
                idle_ms = 0;
            } else {
                idle_ms = idle_ms ? idle_ms * 2 : IDLE_MIN_MS;
                int cap = wr->block_ms < IDLE_MAX_MS ? wr->block_ms : IDLE_MAX_MS;
                if (idle_ms > cap)
                    idle_ms = cap;
                writer_nap(wr, writer_life_wait_ms(wr, idle_ms));
            }
            if (got == 0 && clock_mono_ms() >= wr->streams_at)
                wr->streams_at = 0;
            continue;
        }
        if (got == 0)
            wr->streams_at = 0;   /* quiet: look for new streams now */
    }
    if (!gave_up)
        final_drain(wr);
    if (wr->dead || wr->deleted)
        log_warn("writer: %llu entries moved to dead letters, %llu found deleted",
                 (unsigned long long)wr->dead, (unsigned long long)wr->deleted);
    log_info("writer: stopped");
    return NULL;
}

/* A writer (not yet running) for app; addr is its Redis (a node of a cluster for a
 * sub-writer). */
writer_t *writer_new(struct app *app, const url_redis_t *addr)
{
    writer_t *wr = xcalloc(1, sizeof *wr);
    wr->app = app;
    wr->arena = rarena_new();
    wr->side_arena = rarena_new();
    wr->m = app->metrics ? app->metrics : &wr->m_own;
    const config_t *c = &app->cfg;
    wr->batch = c->writer_batch > 0 ? c->writer_batch : 512;
    wr->block_ms = c->writer_block_ms > 0 ? c->writer_block_ms : 1000;
    wr->nice = c->writer_nice;
    wr->claim_idle_ms = c->claim_idle_ms > 0 ? c->claim_idle_ms : 30000;
    wr->drains = c->mode == MODE_STREAM;
    wr->sweep_ms = c->writer_drain_sweep_ms > 0 ? c->writer_drain_sweep_ms : 60000;
    wr->sweep_at = clock_mono_ms() + (uint64_t)wr->sweep_ms;
    wr->redis_timeout_ms = c->redis_timeout_ms > 0 ? c->redis_timeout_ms : 1000;
    wr->wait_replicas = c->redis_wait_replicas;
    wr->sql_timeout_ms = c->sql_timeout_ms > 0 ? c->sql_timeout_ms : 2000;
    if (app->name[0]) {
        snprintf(wr->name, sizeof wr->name, "%s", app->name);
    } else {
        char host[64] = "localhost";
        gethostname(host, sizeof host - 1);
        snprintf(wr->name, sizeof wr->name, "%s:%ld", host, (long)getpid());
    }
    wr->addr = *addr;
    wr->redis_backoff_ms = REDIS_BACKOFF_MIN_MS;
    wr->reg_card = -1;
    wr->need_pending = 1;
    atomic_init(&wr->stop, 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wr->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&wr->mu, NULL);
    return wr;
}

void writer_free(writer_t *wr)
{
    if (wr->rc)
        redisFree(wr->rc);
    rarena_free(wr->arena);   /* after the reader that used it */
    rarena_free(wr->side_arena);
    rcl_sync_close(wr->rcs);
    store_close(wr->st);
    free(wr->streams);
    free(wr->ents);
    free(wr->orders);
    free(wr->evs);
    free(wr->argv);
    free(wr->argvlen);
    free(wr->cmdbuf);
    free(wr->subs);
    writer_refund_free(wr);
    writer_life_free(wr);
    pthread_cond_destroy(&wr->cv);
    pthread_mutex_destroy(&wr->mu);
    free(wr);
}

writer_t *writer_start(struct app *app, char *err, size_t errlen)
{
    url_redis_t addr;
    if (url_parse_redis(app->redis_url, &addr) != 0) {
        snprintf(err, errlen, "writer: bad Redis URL");
        return NULL;
    }
    writer_t *wr = writer_new(app, &addr);
    if (!wr) {
        snprintf(err, errlen, "writer: out of memory");
        return NULL;
    }
    wr->cluster = addr.cluster;
    int rc = pthread_create(&wr->tid, NULL, wr->cluster ? writer_cluster_main : writer_main, wr);
    if (rc != 0) {
        snprintf(err, errlen, "writer: cannot start thread: %s", strerror(rc));
        writer_free(wr);
        return NULL;
    }
    return wr;
}

void writer_stop(writer_t *wr)
{
    if (!wr)
        return;
    pthread_mutex_lock(&wr->mu);
    atomic_store(&wr->stop, 1);
    pthread_cond_broadcast(&wr->cv);
    pthread_mutex_unlock(&wr->mu);
    pthread_join(wr->tid, NULL);
    /* A supervisor: its sub-writers stop together (each sees the flag within a BLOCK). */
    for (size_t i = 0; i < wr->nsubs; i++) {
        pthread_mutex_lock(&wr->subs[i]->mu);
        atomic_store(&wr->subs[i]->stop, 1);
        pthread_cond_broadcast(&wr->subs[i]->cv);
        pthread_mutex_unlock(&wr->subs[i]->mu);
    }
    for (size_t i = 0; i < wr->nsubs; i++)
        writer_stop(wr->subs[i]);
    writer_free(wr);
}
