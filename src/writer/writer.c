/* writer.c -- the order writer (writer.h): Redis Stream consumer group -> SQL.
 *
 * One thread, one blocking hiredis connection (socket timeouts are the deadlines), one
 * store connection. The loop, in the order it runs:
 *
 *   connect     Redis, with back-off 100 ms doubling to 2 s while it is down; after every
 *               (re)connect the stream list is re-read and our own pending entries are
 *               replayed, since XACKs in flight when the connection broke may be lost;
 *   streams     SMEMBERS seckill:streams -> seckill:stream:{id} for each voucher id, every
 *               ~1 s and whenever a read comes back empty (on a single Redis an SCARD
 *               equal to the last full read's count stands for it, the registry only
 *               grows; a full read every 30 s and after a reconnect); for new streams
 *               (all after a reconnect) one SMISMEMBER of the drained set (below);
 *               XGROUP CREATE key g1 0 MKSTREAM for each new live one (BUSYGROUP is fine);
 *   pending     XREADGROUP ... STREAMS k.. 0.. with a per-stream cursor until every stream
 *               reports nothing left: entries this consumer read and never acked;
 *   claim       every ~2 s, XAUTOCLAIM k g1 <name> <claim_idle_ms> 0-0 COUNT batch, cursor
 *               followed to the end: entries of consumers that died holding them;
 *   metrics     every ~1 s, XINFO GROUPS per live stream -> stream_pending, stream_lag; in
 *               stream mode also TIME first, and a stream whose sale has ended and whose
 *               group has nothing undelivered or pending goes into the drained set
 *               (drain_marks: order lookups skip it, orders.h), and SCARD of the set
 *               (drained_check);
 *   sweep       stream mode, every --writer-drain-sweep-ms (60 s): drain_sweep, below;
 *   read        XREADGROUP GROUP g1 <name> COUNT batch BLOCK block_ms STREAMS k.. >..
 *
 * Live and drained streams. seckill:streams is never trimmed: a service that sells every
 * day lists thousands of streams. A drained one (in {seckill:streams}:drained: its sale
 * ended by its Redis's clock + DRAIN_MARGIN_S and g1 had no lag and nothing pending, so
 * every order it admitted is in SQL and none can be admitted any more) is named by none of
 * the reads, claims and XINFO passes above: the per-poll work follows the live streams.
 * What keeps that safe:
 *   - the set lost (Redis data loss, its master flushed, a DEL): SCARD each metrics pass
 *     is below the number of streams we skip -> SMISMEMBER again, a stream no longer in
 *     it is read again (pending pass included) and re-marked as before; after a reconnect
 *     every stream is looked up again;
 *   - the sweep: up to SWEEP_MAX drained streams per sweep, round-robin, XINFO GROUPS in
 *     one pipeline and one SMISMEMBER: a stream showing lag or pending (an operator's
 *     XADD, a bug) or whose g1 is gone is taken out of the set (SREM: lookups ask it
 *     again), counted (writer_undrained) and logged as an error, and read again; one an
 *     operator took out of the set is read again and re-marked. A full round over N
 *     drained streams takes N / SWEEP_MAX sweeps;
 *   - stream_pending and stream_lag sum the live streams only (a drained one had 0 of
 *     each when marked; the sweep is what watches it since); writer_streams_live and
 *     writer_streams_drained count the two kinds.
 * Queue and lab modes never mark nor skip (their orders are not in the streams alone).
 * Every batch, whatever its source, goes the same way (handle_batch): parse, write the
 * orders in ONE transaction (store_orders_write: idempotent inserts + stock decrement),
 * and only after the commit XACK them. A failed write keeps the batch and retries it
 * (50 ms doubling to 5 s; writer_failures; sql_up = 0) -- it is never dropped and never
 * acked unwritten. Replays are harmless: the order id is the primary key and
 * (user, voucher) is unique.
 *
 * An entry carries every order of one admission call (sentry.h): its orders are all in
 * the batch's one transaction, so the entry is acked only once ALL of them are in SQL;
 * one order of it that cannot be written makes the whole entry a dead letter (below).
 * COUNT batch counts entries, so a batch holds up to 64 x batch orders.
 *
 * An entry that can never parse (missing or non-numeric id/userId/voucherId, or a
 * voucherId that is not its stream's), or that the admission script would never have
 * written (a user id past 2^53-1, a time before 2000 or past this host's clock + 1 h or
 * outside the voucher's sale window, a voucher SQL does not have: check_vouchers), would
 * otherwise reach SQL -- or, with a time SQL cannot store, fail every retry of its batch
 * -- so it is moved aside: XADD seckill:dead:{voucher} (stream, entry, reason and its original
 * fields) and XACK in one MULTI/EXEC, logged and counted. An entry deleted from the
 * stream while pending (nil fields) has nothing left to write: it is acked and logged.
 *
 * Redis Cluster (a redis+cluster:// URL): writer_start starts a supervisor instead, which
 * runs one writer like the above per master ("sub-writer": its connection goes to that
 * node only, and it keeps only the streams whose slot that node owns, so its one
 * XREADGROUP names only keys of one node). Every second the supervisor re-reads the
 * slot map and starts a sub-writer for a new master (a promoted replica) and stops the
 * one of a node that owns no slot any more. All sub-writers use the instance's consumer
 * name: a stream that moves to another node (reshard, failover) is picked up there with
 * its pending entries, which the new owner's sub-writer replays (idempotently) as for any
 * stream it starts reading. seckill:streams is read through the cluster client
 * (rcl_sync.h), wherever its slot lives.
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

#include "core/xmem.h"
#include "core/app.h"
#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "server/metrics.h"
#include "redis/rcl_sync.h"
#include "redis/rarena.h"
#include "redis/resp.h"
#include "redis/rconn.h"
#include "core/sb.h"
#include "sale/sentry.h"
#include "store/store.h"
#include "core/url.h"
#include "writer/wprio.h"
#include "writer/writer.h"

#define STREAMS_REFRESH_MS 1000
#define CLAIM_EVERY_MS 2000
#define INFO_EVERY_MS 1000
#define REDIS_BACKOFF_MIN_MS 100
#define REDIS_BACKOFF_MAX_MS 2000
#define SQL_BACKOFF_MIN_MS 50
#define SQL_BACKOFF_MAX_MS 5000
#define FINAL_DRAIN_MS 3000    /* clean stop: write what is queued for at most this */
#define STOP_GRACE_MS 5000
#define DOWN_LOG_EVERY_MS 30000
#define DEAD_MAXLEN "100000"
#define ENTRY_ID_MAX 48
/* What a stream entry may hold (checked before SQL; anything else is a dead letter):
 * user ids up to 2^53-1 (what the course's JSON clients can hold exactly), times from
 * 2000-01-01 to an hour past this host's clock and within the voucher's sale window
 * give or take WRITER_TIME_SLACK_S (clocks differ between hosts). */
#define WRITER_MAX_USER_ID 9007199254740991LL
#define WRITER_MIN_TIME 946684800LL
#define WRITER_TIME_SLACK_S 3600
#define CLUSTER_CHECK_MS 1000
#define IDLE_MIN_MS 5          /* sub-writer poll interval while quiet: 5 ms doubling ... */
#define IDLE_MAX_MS 100        /* ... to 100 ms */
/* The drained set (orders.h): a stream is marked once its sale ended this long ago by its
 * own Redis's clock -- the clock admit.lua judges the window by, so the margin only covers
 * that clock stepping back or a failover to a node whose clock lags. */
#define DRAIN_MARGIN_S 5
#define VOUCHER_RELOOK_MS 30000   /* drain check: next SQL look-up of a voucher not found */
#define SWEEP_MAX 64              /* drained streams re-checked per sweep (drain_sweep) */
#define REGISTRY_FULL_MS 30000    /* single Redis: SMEMBERS seckill:streams at least this often */

enum { E_ORDER, E_DELETED, E_DEAD };

typedef struct wstream {
    int64_t vid;
    int bucket;                      /* its stock bucket (buckets.h): 0 = the voucher's own */
    char tag[48];                    /* the bucket's hash tag: "<vid>" for bucket 0 */
    char key[64];
    int group_ok;                    /* XGROUP CREATE done on this connection */
    char cursor[ENTRY_ID_MAX];       /* pending pass: last entry id seen */
    int done;                        /* pending pass: nothing more */
    int vknown;                      /* the voucher was found in SQL (vbegin, vend valid) */
    int64_t vbegin, vend;            /* its sale window, epoch seconds */
    char member[48];                 /* its member of seckill:streams */
    int idle;                        /* last XINFO GROUPS: g1 with lag 0 and nothing pending */
    int drained;                     /* in the drained set (added, or seen there) */
    int drained_known;               /* the drained set was read since the stream was added */
    uint64_t vlook_at;               /* drain check: no SQL look-up of the voucher before */
} wstream_t;

typedef struct wentry {
    size_t si;                       /* index into streams */
    char id[ENTRY_ID_MAX];           /* stream entry id */
    int kind;                        /* E_* */
    size_t o0, no;                   /* E_ORDER: its orders, wr->orders[o0 .. o0+no) (an
                                      * entry of admit.lua holds every order of one call) */
    const char *reason;              /* E_DEAD */
    const redisReply *fields;        /* E_DEAD: the original fields (borrowed) */
} wentry_t;

struct writer {
    app_t *app;
    metrics_t *m;
    metrics_t m_own;                 /* when app->metrics is NULL (tests) */
    pthread_t tid;
    atomic_int stop;
    pthread_mutex_t mu;              /* with cv: sleeps that writer_stop can cut short */
    pthread_cond_t cv;

    char name[128];                  /* consumer name */
    int batch, block_ms, claim_idle_ms, redis_timeout_ms, sql_timeout_ms;
    int nice;                      /* added to the thread's nice value at its start */
    int idle_lag_ms, pace_ms;      /* wprio.h: idle class while it keeps up, commit pacing */
    wprio_t prio;                  /* the thread's own */
    int wait_replicas;               /* --redis-wait-replicas: write only replicated orders */
    url_redis_t addr;

    redisContext *rc;
    rarena_t *arena;                 /* every reply of rc lives here (rarena.h): reset
                                      * before each read and each turn of the loop */
    int redis_backoff_ms;
    uint64_t redis_retry_at;
    int redis_down;                  /* a failure has been logged, not yet recovered */
    uint64_t redis_down_logged_at;

    store_t *st;
    int sql_down;

    wstream_t *streams;
    size_t nstreams;
    uint64_t streams_at, claim_at, info_at;
    int need_pending;
    int drains;                      /* stream mode: drained streams are skipped (orders.h) */
    int sweep_ms;                    /* --writer-drain-sweep-ms */
    uint64_t sweep_at;
    size_t sweep_next;               /* drain_sweep's round-robin position in streams */
    long long reg_card;              /* single Redis: members of seckill:streams at the last
                                      * full read (-1: none since the connection opened) */
    uint64_t reg_full_at;            /* ... and when the next full read is due */

    wentry_t *ents;
    size_t nents, capents;
    store_order_t *orders;           /* the batch's orders, entry by entry */
    size_t norders, caporders;
    const char **argv;               /* command building */
    size_t *argvlen;
    size_t capargv;
    char *cmdbuf;                    /* the command in RESP (append) */
    size_t capcmd;

    uint64_t dead, deleted;          /* counted here (no metric for them yet) */

    /* Redis Cluster. The supervisor (cluster = 1) owns subs; a sub-writer (node_mode = 1)
     * has addr = its node and rcs for the slot map and seckill:streams. */
    int cluster;
    struct writer **subs;
    size_t nsubs;
    int node_mode;
    url_redis_t cluster_addr;
    rcl_sync_t *rcs;
    _Atomic int64_t node_pending, node_lag;   /* sub-writer: its node's backlog and */
    _Atomic int64_t node_live, node_drained;  /* streams; the supervisor sums them into
                                                * the metrics */
};

/* ---------------------------------------------------------------- small helpers */

static int stopping(writer_t *wr)
{
    return atomic_load(&wr->stop);
}

/* Sleeps ms, or less if writer_stop is called. */
static void nap(writer_t *wr, int ms)
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

static struct timeval tv_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

static int is_str(const redisReply *r)
{
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static int str_eq(const redisReply *r, const char *z)
{
    return is_str(r) && r->len == strlen(z) && memcmp(r->str, z, r->len) == 0;
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

static void arg(writer_t *wr, size_t *n, const char *z, size_t len)
{
    args_need(wr, *n + 1);
    wr->argv[*n] = z;
    wr->argvlen[*n] = len;
    (*n)++;
}

static void args(writer_t *wr, size_t *n, const char *z)
{
    arg(wr, n, z, strlen(z));
}

/* ---------------------------------------------------------------- Redis connection */

/* Counts one failure towards the back-off (100 ms doubling to 2 s) and logs it: the first
 * one, then a reminder every DOWN_LOG_EVERY_MS while Redis stays unusable. */
static void redis_down_step(writer_t *wr, const char *what, const char *why)
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
static void redis_up(writer_t *wr)
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
    redis_down_step(wr, "Redis connection lost", why);
}

/* For a command that got no reply or an error reply: drops the connection, so the next
 * loop reconnects and replays what was not acked. */
static int redis_fail(writer_t *wr, const char *cmd, redisReply *r)
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
static void append(writer_t *wr, size_t n)
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
static redisReply *cmd(writer_t *wr, size_t n)
{
    append(wr, n);
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
        redis_down_step(wr, "cannot reach Redis", why);
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
    }
    wr->streams_at = 0;
    wr->reg_card = -1;
    wr->need_pending = 1;
    return 0;
}

/* ---------------------------------------------------------------- streams */

static int group_create(writer_t *wr, wstream_t *s)
{
    size_t n = 0;
    args(wr, &n, "XGROUP");
    args(wr, &n, "CREATE");
    args(wr, &n, s->key);
    args(wr, &n, KEY_GROUP);
    args(wr, &n, "0");
    args(wr, &n, "MKSTREAM");
    redisReply *r = cmd(wr, n);
    if (!r)
        return redis_fail(wr, "XGROUP CREATE", NULL);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)
        return redis_fail(wr, "XGROUP CREATE", r);
    s->group_ok = 1;
    return 0;
}

/* Re-reads seckill:streams: keeps known streams, adds new ones, drops the ones no longer
 * registered. Creates missing groups. */
/* Sub-writer: 1 if stream key lives on this sub-writer's node (per the last map). */
static int mine(writer_t *wr, const char *key)
{
    int o = rcl_sync_owner(wr->rcs, key, strlen(key));
    if (o < 0)
        return 0;
    const rcluster_node_t *n = &rcl_sync_map(wr->rcs)->nodes[o];
    return n->port == wr->addr.port && strcmp(n->host, wr->addr.host) == 0;
}

/* Sub-writer: the slot map and SMEMBERS seckill:streams through the cluster client. */
static redisReply *cluster_streams(writer_t *wr)
{
    char why[300];
    if (wr->rcs == NULL)
        wr->rcs = rcl_sync_open(&wr->cluster_addr, wr->redis_timeout_ms, why, sizeof why);
    else
        (void)rcl_sync_refresh(wr->rcs, why, sizeof why);   /* on failure the old map stays;
                                                        * SMEMBERS below tells */
    if (wr->rcs == NULL) {
        redis_down_step(wr, "cannot read the cluster's slot map", why);
        return NULL;
    }
    const char *argv[2] = { "SMEMBERS", KEY_STREAMS };
    redisReply *r = rcl_sync_command(wr->rcs, NULL, 0, 2, argv, NULL, why, sizeof why);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        redis_down_step(wr, "SMEMBERS " KEY_STREAMS, r && r->type == REDIS_REPLY_ERROR ? r->str : why);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int drained_read(writer_t *wr);

/* The end of a refresh, the list known: which streams are drained, before the pending pass
 * and the first read name them (a writer that (re)starts reads only the live ones; on a
 * failure they are read), and the live ones' groups. */
static int streams_ready(writer_t *wr)
{
    if (wr->drains && drained_read(wr) != 0 && wr->rc == NULL)
        return -1;
    for (size_t i = 0; i < wr->nstreams; i++)
        if (!wr->streams[i].group_ok && !wr->streams[i].drained &&
            group_create(wr, &wr->streams[i]) != 0)
            return -1;
    wr->streams_at = clock_mono_ms() + STREAMS_REFRESH_MS;
    redis_up(wr);
    return 0;
}

static int streams_refresh(writer_t *wr)
{
    size_t n = 0;
    redisReply *r;
    if (wr->node_mode) {
        r = cluster_streams(wr);
        if (r == NULL) {
            wr->streams_at = clock_mono_ms() + STREAMS_REFRESH_MS;
            return -1;
        }
    } else {
        /* The registry only grows (never trimmed): as many members as at the last full
         * read means the same ones -- one SCARD instead of a reply that grows with history.
         * A full read after a reconnect and every REGISTRY_FULL_MS all the same. */
        if (wr->reg_card >= 0 && clock_mono_ms() < wr->reg_full_at) {
            args(wr, &n, "SCARD");
            args(wr, &n, KEY_STREAMS);
            r = cmd(wr, n);
            if (!r || r->type != REDIS_REPLY_INTEGER)
                return redis_fail(wr, "SCARD " KEY_STREAMS, r);
            if (r->integer == wr->reg_card)
                return streams_ready(wr);
            n = 0;
        }
        args(wr, &n, "SMEMBERS");
        args(wr, &n, KEY_STREAMS);
        r = cmd(wr, n);
        if (!r || r->type != REDIS_REPLY_ARRAY)
            return redis_fail(wr, "SMEMBERS " KEY_STREAMS, r);
        wr->reg_card = (long long)r->elements;
        wr->reg_full_at = clock_mono_ms() + REGISTRY_FULL_MS;
    }
    wstream_t *next = xrealloc(NULL, (r->elements + 1) * sizeof *next);
    size_t nn = 0;
    int added = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        int64_t vid;
        int bucket = 0, nb = 1;
        if (!is_str(e) || (sb_parse_pos(e->str, e->len, &vid) != 0 &&
                           key_bmember_parse(e->str, e->len, &vid, &bucket, &nb) != 0)) {
            log_debug("writer: ignoring member of %s that is not a voucher id", KEY_STREAMS);
            continue;
        }
        size_t k = 0;
        while (k < wr->nstreams && (wr->streams[k].vid != vid || wr->streams[k].bucket != bucket))
            k++;
        if (k < wr->nstreams) {
            if (!wr->node_mode || mine(wr, wr->streams[k].key))
                next[nn++] = wr->streams[k];
            else
                log_info("writer: order stream %s moved to another node", wr->streams[k].key);
            continue;
        }
        wstream_t *s = &next[nn];
        memset(s, 0, sizeof *s);
        s->vid = vid;
        s->bucket = bucket;
        if (key_btag(s->tag, sizeof s->tag, vid, bucket, nb) < 0 ||
            key_stream_t(s->key, sizeof s->key, s->tag) < 0 || e->len >= sizeof s->member)
            continue;
        memcpy(s->member, e->str, e->len);
        s->member[e->len] = '\0';
        if (wr->node_mode && !mine(wr, s->key))
            continue;
        nn++;
        added++;
        if (wr->node_mode)
            log_info("writer: reading order stream %s on %s:%d", s->key, wr->addr.host,
                     wr->addr.port);
        else
            log_info("writer: reading order stream %s", s->key);
    }
    if (wr->node_mode)
        freeReplyObject(r);   /* the cluster client's; our own connection's live in the arena */
    free(wr->streams);
    wr->streams = next;
    wr->nstreams = nn;
    if (added)
        wr->need_pending = 1;
    return streams_ready(wr);
}

static size_t stream_index(writer_t *wr, const redisReply *key)
{
    for (size_t i = 0; i < wr->nstreams; i++)
        if (str_eq(key, wr->streams[i].key))
            return i;
    return (size_t)-1;
}

/* ---------------------------------------------------------------- parsing */

static wentry_t *ent_new(writer_t *wr)
{
    if (wr->nents == wr->capents) {
        wr->capents = wr->capents ? wr->capents * 2 : 256;
        wr->ents = xrealloc(wr->ents, wr->capents * sizeof *wr->ents);
    }
    if (wr->nents == 0)
        wr->norders = 0;   /* a new batch (every reader empties ents before parsing) */
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
    /* The entry's format, many orders, one compact or named: sentry.h. An entry is one
     * unit: all its orders are written, or (one of them bad) it goes to the dead letters
     * whole. */
    sentry_it_t it;
    size_t bound;
    if (sentry_open_lazy(f, wr->streams[si].vid, &it, &bound, &e->reason) != 0)
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
    while ((rc = sentry_take(&it, &se, &e->reason)) == 1) {
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
        /* ep: the voucher's Redis generation at admission (admit.lua); entries written
         * before generations existed have none, i.e. 0. */
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
        size_t si = stream_index(wr, sr->element[0]);
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

/* Writes wr->orders[0..n) until it commits. Returns 0, or -1 if stopping gave up. */
static int sql_write(writer_t *wr, size_t n, size_t *inserted, size_t *conflicts,
                     size_t *fenced)
{
    int backoff = SQL_BACKOFF_MIN_MS, fails = 0;
    uint64_t stop_seen = 0;
    for (;;) {
        char err[512] = "";
        if (!wr->st) {
            wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
        }
        if (wr->st) {
            wprio_hold(&wr->prio);   /* SQL's write lock: never held at idle priority */
            int wrc = store_orders_write(wr->st, wr->orders, n, inserted, conflicts, fenced);
            wprio_release(&wr->prio);
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
        nap_hard(stopping(wr) && backoff > 500 ? 500 : backoff);
        if (backoff < SQL_BACKOFF_MAX_MS) {
            backoff *= 2;
            if (backoff > SQL_BACKOFF_MAX_MS)
                backoff = SQL_BACKOFF_MAX_MS;
        }
    }
}

/* ---------------------------------------------------------------- one batch */

/* Appends one XACK key g1 ids... per run of entries of the same stream (a batch holds
 * each stream's entries together), leaving out E_DEAD ones (acked inside their MULTI).
 * Returns how many commands were appended. */
static size_t append_acks(writer_t *wr)
{
    size_t cmds = 0;
    for (size_t i = 0; i < wr->nents;) {
        size_t si = wr->ents[i].si, n = 0, ids = 0;
        args(wr, &n, "XACK");
        args(wr, &n, wr->streams[si].key);
        args(wr, &n, KEY_GROUP);
        for (; i < wr->nents && wr->ents[i].si == si; i++)
            if (wr->ents[i].kind != E_DEAD) {
                args(wr, &n, wr->ents[i].id);
                ids++;
            }
        if (ids > 0) {
            append(wr, n);
            cmds++;
        }
    }
    return cmds;
}

/* MULTI; XADD seckill:dead:{v} ...; XACK; EXEC -- 4 replies. */
static void append_dead(writer_t *wr, const wentry_t *e)
{
    const wstream_t *s = &wr->streams[e->si];
    char dkey[96];
    key_dead_t(dkey, sizeof dkey, s->tag);
    size_t n = 0;
    args(wr, &n, "MULTI");
    append(wr, n);
    n = 0;
    args(wr, &n, "XADD");
    args(wr, &n, dkey);
    args(wr, &n, "MAXLEN");
    args(wr, &n, "~");
    args(wr, &n, DEAD_MAXLEN);
    args(wr, &n, "*");
    args(wr, &n, "stream");
    args(wr, &n, s->key);
    args(wr, &n, "entry");
    args(wr, &n, e->id);
    args(wr, &n, "reason");
    args(wr, &n, e->reason);
    args(wr, &n, "consumer");
    args(wr, &n, wr->name);
    /* The original fields follow as "f:<name>" <value>, so they cannot clash with ours.
     * hiredis copies the arguments when appending, so the names can be freed after. */
    char *names = NULL;
    if (e->fields) {
        size_t total = 0;
        for (size_t i = 0; i + 1 < e->fields->elements; i += 2)
            if (is_str(e->fields->element[i]))
                total += e->fields->element[i]->len + 2;
        names = xrealloc(NULL, total);
        char *p = names;
        for (size_t i = 0; i + 1 < e->fields->elements; i += 2) {
            const redisReply *k = e->fields->element[i], *v = e->fields->element[i + 1];
            if (!is_str(k) || !is_str(v))
                continue;
            p[0] = 'f';
            p[1] = ':';
            memcpy(p + 2, k->str, k->len);
            arg(wr, &n, p, k->len + 2);
            arg(wr, &n, v->str, v->len);
            p += k->len + 2;
        }
    }
    append(wr, n);
    free(names);
    n = 0;
    args(wr, &n, "XACK");
    args(wr, &n, s->key);
    args(wr, &n, KEY_GROUP);
    args(wr, &n, e->id);
    append(wr, n);
    n = 0;
    args(wr, &n, "EXEC");
    append(wr, n);
}

/* Writes wr->ents to SQL (one transaction), then acks them. Returns 0; -1 if Redis
 * failed (connection dropped: the entries stay pending and are replayed); -2 if stopping
 * gave up on SQL. */
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
    args(wr, &k, "XCLAIM");
    args(wr, &k, wr->streams[e->si].key);
    args(wr, &k, KEY_GROUP);
    args(wr, &k, wr->name);
    args(wr, &k, "0");
    args(wr, &k, e->id);
    args(wr, &k, "JUSTID");
    append(wr, k);
    k = 0;
    args(wr, &k, "WAIT");
    args(wr, &k, n);
    args(wr, &k, t);
    append(wr, k);
    void *rv = NULL;
    if (redisGetReply(wr->rc, &rv) != REDIS_OK)
        return redis_fail(wr, "XCLAIM", NULL) == 0;
    rv = NULL;
    if (redisGetReply(wr->rc, &rv) != REDIS_OK)
        return redis_fail(wr, "WAIT", NULL) == 0;
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

/* Looks up, once per stream, the voucher of every stream with orders in the batch
 * (is it a flash-sale voucher in SQL, and its window), then turns orders of a missing
 * voucher, or outside its window, into dead letters. Returns 0, or -1 when SQL failed
 * (nothing is decided: the caller retries). */
/* The stream's voucher from SQL: vknown, vbegin, vend once SQL has it as a flash-sale
 * voucher. 0 (found or not), or -1 when SQL failed. */
static int voucher_load(writer_t *wr, wstream_t *s)
{
    char err[512] = "";
    if (!wr->st)
        wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
    if (!wr->st)
        return -1;
    store_voucher_t v;
    memset(&v, 0, sizeof v);
    int rc = store_voucher_get(wr->st, s->vid, &v);
    if (rc == STORE_OK && v.is_seckill) {
        s->vknown = 1;
        s->vbegin = v.begin_time;
        s->vend = v.end_time;
    }
    store_voucher_clear(&v);
    return rc == STORE_OK || rc == STORE_NOTFOUND ? 0 : -1;
}

static int check_vouchers(writer_t *wr)
{
    for (size_t i = 0; i < wr->nents; i++) {
        wentry_t *e = &wr->ents[i];
        if (e->kind != E_ORDER)
            continue;
        wstream_t *s = &wr->streams[e->si];
        if (!s->vknown && voucher_load(wr, s) != 0)
            return -1;
        if (!s->vknown) {
            e->kind = E_DEAD;
            e->reason = "no such flash-sale voucher in SQL";
        } else {
            for (size_t k = e->o0; k < e->o0 + e->no; k++)
                if (wr->orders[k].create_time < s->vbegin - WRITER_TIME_SLACK_S ||
                    wr->orders[k].create_time > s->vend + WRITER_TIME_SLACK_S) {
                    e->kind = E_DEAD;
                    e->reason = "time outside the voucher's sale window";
                    break;
                }
        }
    }
    return 0;
}

static int handle_batch(writer_t *wr)
{
    if (wr->nents == 0)
        return 0;
    if (wr->wait_replicas > 0 && wr->rc && !batch_replicated(wr))
        return -1;
    for (int backoff = SQL_BACKOFF_MIN_MS; check_vouchers(wr) != 0;) {
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
        nap_hard(backoff);
        backoff = backoff * 2 > SQL_BACKOFF_MAX_MS ? SQL_BACKOFF_MAX_MS : backoff * 2;
    }
    size_t n = 0, ndead = 0;
    for (size_t i = 0; i < wr->nents; i++) {
        const wentry_t *e = &wr->ents[i];
        if (e->kind == E_ORDER) {
            /* the orders of the entries to write, packed to the front (in place: n never
             * passes o0) */
            if (n != e->o0)
                memmove(&wr->orders[n], &wr->orders[e->o0], e->no * sizeof *wr->orders);
            n += e->no;
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
    if (n > 0) {
        size_t ins = 0, conf = 0, fen = 0;
        if (sql_write(wr, n, &ins, &conf, &fen) != 0)
            return -2;
        metric_add(&wr->m->orders_persisted, ins);
        metric_add(&wr->m->order_id_conflicts, conf);
        metric_add(&wr->m->orders_fenced, fen);
        metric_add(&wr->m->orders_replayed, n - ins - conf - fen);
        metric_inc(&wr->m->writer_batches);
        metric_add(&wr->m->writer_batch_orders, n);
    }
    if (!wr->rc)
        return -1;
    /* Only now, after the commit: acks (and dead letters), pipelined. */
    size_t replies = append_acks(wr);
    for (size_t i = 0; i < wr->nents; i++)
        if (wr->ents[i].kind == E_DEAD) {
            append_dead(wr, &wr->ents[i]);
            replies += 4;
        }
    int ok = 1;
    for (size_t i = 0; i < replies; i++) {
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK) {
            return redis_fail(wr, "XACK", NULL);
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

/* XREADGROUP over all streams (those not done, for the pending pass). ids: ">" for new
 * entries, else each stream's cursor. Returns entries read (>= 0) or -1 on Redis error.
 * The reply lives in wr->arena until the next read, so the batch's entries can borrow
 * from it (a dead letter keeps its original fields). */
/* Whether a read names stream s: a drained one never (its sale is over and every order
 * it admitted is in SQL: drain_sweep watches it instead), in the pending pass only until
 * it reports nothing left. */
static int reads(const wstream_t *s, int pending)
{
    return !s->drained && !(pending && s->done);
}

/* XREADGROUP GROUP g1 <name> COUNT <count> -- the head of every read. */
static void args_xreadgroup(writer_t *wr, size_t *n, const char *count)
{
    args(wr, n, "XREADGROUP");
    args(wr, n, "GROUP");
    args(wr, n, KEY_GROUP);
    args(wr, n, wr->name);
    args(wr, n, "COUNT");
    args(wr, n, count);
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
        args(wr, &n, "STREAMS");
        args(wr, &n, wr->streams[i].key);
        args(wr, &n, pending ? wr->streams[i].cursor : ">");
        append(wr, n);
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
            return redis_fail(wr, "XREADGROUP", NULL);
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
        args(wr, &n, "BLOCK");
        args(wr, &n, block);
    }
    args(wr, &n, "STREAMS");
    size_t k = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        if (reads(&wr->streams[i], pending)) {
            args(wr, &n, wr->streams[i].key);
            k++;
        }
    if (k == 0)
        return 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        if (reads(&wr->streams[i], pending))
            args(wr, &n, pending ? wr->streams[i].cursor : ">");

    if (block_ms > 0)
        redisSetTimeout(wr->rc, tv_ms(block_ms + wr->redis_timeout_ms));
    redisReply *r = cmd(wr, n);
    if (block_ms > 0 && wr->rc && !wr->rc->err)
        redisSetTimeout(wr->rc, tv_ms(wr->redis_timeout_ms));
    if (!r)
        return redis_fail(wr, "XREADGROUP", NULL);
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOGROUP", 7) == 0) {
            /* A stream or its group vanished (deleted key, flushed Redis): recreate. */
            log_warn("writer: %s; recreating consumer groups", r->str);
            for (size_t i = 0; i < wr->nstreams; i++)
                wr->streams[i].group_ok = 0;
            wr->streams_at = 0;
            return 0;
        }
        return redis_fail(wr, "XREADGROUP", r);
    }
    wr->nents = 0;
    if (parse_read(wr, r, pending) != 0) {
        log_error("writer: unexpected XREADGROUP reply shape");
        return redis_fail(wr, "XREADGROUP", r);
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
            continue;   /* nothing pending when marked; drain_sweep checks it stays so */
        char cursor[ENTRY_ID_MAX] = "0-0";
        for (int rounds = 0; !stopping(wr); rounds++) {
            size_t n = 0;
            args(wr, &n, "XAUTOCLAIM");
            args(wr, &n, wr->streams[si].key);
            args(wr, &n, KEY_GROUP);
            args(wr, &n, wr->name);
            args(wr, &n, idle);
            args(wr, &n, cursor);
            args(wr, &n, "COUNT");
            args(wr, &n, count);
            rarena_reset(wr->arena);   /* the previous round's replies are done with */
            redisReply *r = cmd(wr, n);
            if (!r)
                return redis_fail(wr, "XAUTOCLAIM", NULL);
            if (r->type == REDIS_REPLY_ERROR) {
                if (strncmp(r->str, "NOGROUP", 7) == 0) {
                    wr->streams[si].group_ok = 0;
                    wr->streams_at = 0;
                    break;
                }
                return redis_fail(wr, "XAUTOCLAIM", r);
            }
            /* [next-cursor, [entries], [deleted ids] (Redis >= 7)] */
            if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || !is_str(r->element[0]) ||
                r->element[0]->len >= ENTRY_ID_MAX || r->element[1]->type != REDIS_REPLY_ARRAY)
                return redis_fail(wr, "XAUTOCLAIM (unexpected reply)", r);
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

/* The backlog gauges: a writer's own go to the metrics; a sub-writer's to its node's
 * fields, summed over the nodes by the supervisor. Backlog and stream counts cover the
 * live streams (drained ones are not asked: drain_sweep checks them slowly). */
static void publish_backlog(writer_t *wr, int64_t pending, int64_t lag)
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

/* A command on the drained set: on one Redis through our connection (its reply lives in
 * the arena), on a cluster through the cluster client (the set lives in seckill:streams'
 * slot; the caller frees the reply with drained_done). NULL: no reply (why says). */
static redisReply *drained_cmd(writer_t *wr, int argc, const char **argv, const size_t *lens,
                               char *why, size_t whylen)
{
    if (wr->node_mode)
        return wr->rcs ? rcl_sync_command(wr->rcs, KEY_DRAINED, strlen(KEY_DRAINED), argc, argv,
                                     lens, why, whylen)
                       : NULL;
    size_t n = 0;
    for (int k = 0; k < argc; k++)
        arg(wr, &n, argv[k], lens[k]);
    redisReply *r = cmd(wr, n);
    if (r == NULL)
        redis_fail(wr, argv[0], NULL);
    return r;
}

static void drained_done(writer_t *wr, redisReply *r)
{
    if (wr->node_mode)
        freeReplyObject(r);
}

/* SADD (add = 1) or SREM of s's member. */
static int drained_set(writer_t *wr, const wstream_t *s, int add)
{
    const char *argv[3] = { add ? "SADD" : "SREM", KEY_DRAINED, s->member };
    size_t lens[3] = { 4, strlen(KEY_DRAINED), strlen(s->member) };
    char why[300] = "";
    redisReply *r = drained_cmd(wr, 3, argv, lens, why, sizeof why);
    int ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (!ok)
        log_warn("writer: %s %s %s: %s", argv[0], KEY_DRAINED, s->member,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : why[0] ? why : "no reply");
    drained_done(wr, r);
    return ok ? 0 : -1;
}

/* Which of our streams not yet looked up (drained_known = 0) the drained set holds: one
 * SMISMEMBER, after streams were added, a reconnect, or the set found shrunk. A writer that
 * restarts reads only the live streams, re-marks nothing and looks up no old voucher. A
 * stream not in the set is read (again). */
static int drained_read(writer_t *wr)
{
    size_t k = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        k += !wr->streams[i].drained_known;
    if (k == 0)
        return 0;
    const char **argv = xmalloc((k + 2) * sizeof *argv);
    size_t *lens = xmalloc((k + 2) * sizeof *lens);
    argv[0] = "SMISMEMBER";
    argv[1] = KEY_DRAINED;
    lens[0] = 10;
    lens[1] = strlen(KEY_DRAINED);
    size_t n = 2;
    for (size_t i = 0; i < wr->nstreams; i++)
        if (!wr->streams[i].drained_known) {
            argv[n] = wr->streams[i].member;
            lens[n++] = strlen(wr->streams[i].member);
        }
    char why[300] = "";
    redisReply *r = drained_cmd(wr, (int)n, argv, lens, why, sizeof why);
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == k;
    if (ok) {
        size_t j = 0;
        for (size_t i = 0; i < wr->nstreams; i++) {
            wstream_t *s = &wr->streams[i];
            if (s->drained_known)
                continue;
            const redisReply *e = r->element[j++];
            s->drained = e->type == REDIS_REPLY_INTEGER && e->integer == 1;
            s->drained_known = 1;
        }
    } else {
        log_warn("writer: SMISMEMBER %s: %s", KEY_DRAINED,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : why[0] ? why : "no reply");
    }
    drained_done(wr, r);
    free(argv);
    free(lens);
    return ok ? 0 : -1;
}

/* The drained set may be lost (Redis data loss, its master flushed, an operator's DEL):
 * then every stream must be read again and re-marked as before. One SCARD per pass tells
 * it cheaply: the set holds at least our drained streams unless some were taken out. */
static int drained_check(writer_t *wr)
{
    int64_t ours = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        ours += wr->streams[i].drained;
    if (ours == 0)
        return 0;
    const char *argv[2] = { "SCARD", KEY_DRAINED };
    size_t lens[2] = { 5, strlen(KEY_DRAINED) };
    char why[300] = "";
    redisReply *r = drained_cmd(wr, 2, argv, lens, why, sizeof why);
    int ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    long long card = ok ? r->integer : 0;
    drained_done(wr, r);
    if (!ok || card >= ours)
        return ok ? 0 : -1;
    log_warn("writer: %s holds %lld members, fewer than the %lld streams this writer skips "
             "as drained: reading it again, streams not in it are read again",
             KEY_DRAINED, card, (long long)ours);
    for (size_t i = 0; i < wr->nstreams; i++)
        if (wr->streams[i].drained)
            wr->streams[i].drained_known = 0;
    int rc = drained_read(wr);
    for (size_t i = 0; i < wr->nstreams; i++)
        if (!wr->streams[i].drained)
            wr->streams[i].group_ok = 0;   /* maybe lost with the set: recreated if so */
    wr->streams_at = 0;
    wr->need_pending = 1;
    return rc;
}

/* Marks the streams no order lookup needs to ask any more (orders.h): the voucher's sale
 * ended DRAIN_MARGIN_S before now (the stream's Redis's TIME, read before its XINFO) and
 * g1 had nothing undelivered or pending at that XINFO. Only in stream mode: queue mode's
 * orders wait in a process's memory, the lab's in their own lists. A marked stream is no
 * longer read nor asked by the metrics pass. */
static void drain_marks(writer_t *wr, int64_t now)
{
    if (drained_check(wr) != 0)
        return;
    int need_read = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        need_read |= wr->streams[i].idle && !wr->streams[i].drained_known;
    if (need_read && drained_read(wr) != 0)
        return;
    uint64_t mono = clock_mono_ms();
    for (size_t i = 0; i < wr->nstreams && wr->rc; i++) {
        wstream_t *s = &wr->streams[i];
        if (s->drained || !s->idle || s->member[0] == '\0')
            continue;
        if (!s->vknown) {
            if (mono < s->vlook_at)
                continue;
            s->vlook_at = mono + VOUCHER_RELOOK_MS;
            if (voucher_load(wr, s) != 0 || !s->vknown)
                continue;
        }
        if (now < s->vend + DRAIN_MARGIN_S)
            continue;
        if (drained_set(wr, s, 1) != 0)
            return;
        s->drained = 1;
        s->idle = 0;
        log_info("writer: %s: the sale has ended and every order is in SQL; order lookups "
                 "and this writer's reads skip it (%s)", s->key, KEY_DRAINED);
    }
}

/* g1's pending count and lag in an XINFO GROUPS reply. Returns 1 if g1 is there (lag_known:
 * Redis could tell the lag; nil after deleted entries), 0 if not. */
static int group_state(const redisReply *r, int64_t *pending, int64_t *lag, int *lag_known)
{
    *pending = *lag = 0;
    *lag_known = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t g = 0; g < r->elements; g++) {
        const redisReply *gr = r->element[g];
        if (gr->type != REDIS_REPLY_ARRAY)
            continue;
        int mine = 0, known = 0;
        int64_t p = 0, l = 0;
        for (size_t k = 0; k + 1 < gr->elements; k += 2) {
            const redisReply *key = gr->element[k], *val = gr->element[k + 1];
            if (str_eq(key, "name"))
                mine = str_eq(val, KEY_GROUP);
            else if (str_eq(key, "pending") && val->type == REDIS_REPLY_INTEGER)
                p = val->integer;
            else if (str_eq(key, "lag") && val->type == REDIS_REPLY_INTEGER) {
                l = val->integer;
                known = 1;
            }
        }
        if (mine) {
            *pending = p;
            *lag = l;
            *lag_known = known;
            return 1;
        }
    }
    return 0;
}

/* Every ~1 s: pending and lag of g1 summed over the live streams (XINFO GROUPS; a drained
 * stream is not asked), and in stream mode the drained marks (drain_marks). */
static int info_pass(writer_t *wr)
{
    int marks = wr->drains;
    if (marks) {
        size_t n = 0;
        args(wr, &n, "TIME");
        append(wr, n);
    }
    for (size_t i = 0; i < wr->nstreams; i++) {
        if (wr->streams[i].drained)
            continue;
        size_t n = 0;
        args(wr, &n, "XINFO");
        args(wr, &n, "GROUPS");
        args(wr, &n, wr->streams[i].key);
        append(wr, n);
    }
    int64_t now = 0;
    if (marks) {
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK)
            return redis_fail(wr, "TIME", NULL);
        const redisReply *t = rv;
        if (t->type != REDIS_REPLY_ARRAY || t->elements < 1 || !is_str(t->element[0]) ||
            sb_parse_pos(t->element[0]->str, t->element[0]->len, &now) != 0)
            now = 0;   /* nothing is marked this pass */
    }
    int64_t pending = 0, lag = 0;
    for (size_t i = 0; i < wr->nstreams; i++) {
        if (wr->streams[i].drained)
            continue;
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK)
            return redis_fail(wr, "XINFO GROUPS", NULL);
        int64_t p, l;
        int lag_known;
        wr->streams[i].idle = 0;
        if (group_state(rv, &p, &l, &lag_known)) {
            pending += p;
            lag += l;
            wr->streams[i].idle = p == 0 && lag_known && l == 0;
        }
    }
    if (marks && now > 0)
        drain_marks(wr, now);
    publish_backlog(wr, pending, lag);
    return wr->rc ? 0 : -1;   /* drain_marks may have lost the connection */
}

/* A drained stream found with something to write: read again at once. */
static void undrain(writer_t *wr, wstream_t *s)
{
    s->drained = 0;
    s->idle = 0;
    s->group_ok = 0;             /* made again if it was lost */
    wr->streams_at = 0;
    wr->need_pending = 1;        /* any entries of ours pending there, then new ones */
}

/* The safety net (every --writer-drain-sweep-ms, SWEEP_MAX streams, round-robin): a drained
 * stream must stay without undelivered or pending entries -- nothing can be admitted
 * after its sale -- but an operator's XADD or a bug must not strand orders. One pipeline
 * of XINFO GROUPS for the next SWEEP_MAX drained streams and one SMISMEMBER of their
 * members: a stream showing lag or pending (or whose g1 is gone) is taken out of the set
 * and read again, loudly (writer_undrained); one no longer in the set (an operator's SREM)
 * is read again and re-marked as usual. */
static int drain_sweep(writer_t *wr)
{
    size_t idx[SWEEP_MAX], k = 0;
    for (size_t j = 0; j < wr->nstreams && k < SWEEP_MAX; j++) {
        size_t i = (wr->sweep_next + j) % wr->nstreams;
        if (wr->streams[i].drained)
            idx[k++] = i;
    }
    if (k == 0)
        return 0;
    wr->sweep_next = (idx[k - 1] + 1) % wr->nstreams;
    for (size_t j = 0; j < k; j++) {
        size_t n = 0;
        args(wr, &n, "XINFO");
        args(wr, &n, "GROUPS");
        args(wr, &n, wr->streams[idx[j]].key);
        append(wr, n);
    }
    int bad[SWEEP_MAX];
    for (size_t j = 0; j < k; j++) {
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK)
            return redis_fail(wr, "XINFO GROUPS", NULL);
        const redisReply *r = rv;
        wstream_t *s = &wr->streams[idx[j]];
        int64_t p, l;
        int known;
        bad[j] = 0;
        if (r->type == REDIS_REPLY_ERROR) {
            /* "no such key": nothing to write. MOVED and the like: the stream list is read
             * again and the stream's new owner checks it. */
            if (strncmp(r->str, "ERR no such key", 15) != 0) {
                log_info("writer: sweep: XINFO GROUPS %s: %s", s->key, r->str);
                wr->streams_at = 0;
            }
            continue;
        }
        if (!group_state(r, &p, &l, &known)) {
            log_error("writer: drained stream %s has no group %s any more; reading it again",
                      s->key, KEY_GROUP);
            bad[j] = 1;
        } else if (p > 0 || l > 0 || !known) {
            log_error("writer: drained stream %s has %lld pending and %s undelivered entries "
                      "after its sale ended; taking it out of %s and reading it again", s->key,
                      (long long)p, known ? (l > 0 ? "some" : "no") : "unknown", KEY_DRAINED);
            bad[j] = 1;
        }
    }
    for (size_t j = 0; j < k; j++) {
        wstream_t *s = &wr->streams[idx[j]];
        if (!bad[j])
            continue;
        metric_inc(&wr->m->writer_undrained);
        /* out of the set first: order lookups ask the stream's bucket again */
        if (drained_set(wr, s, 0) != 0 && wr->rc == NULL)
            return -1;
        undrain(wr, s);
    }
    /* still members? (the set is checked as a whole by drained_check every pass) */
    for (size_t j = 0; j < k; j++)
        if (wr->streams[idx[j]].drained)
            wr->streams[idx[j]].drained_known = 0;
    if (drained_read(wr) != 0)
        return wr->rc ? 0 : -1;
    for (size_t j = 0; j < k; j++) {
        wstream_t *s = &wr->streams[idx[j]];
        if (!bad[j] && !s->drained) {
            log_warn("writer: stream %s is no longer in %s; reading it again", s->key,
                     KEY_DRAINED);
            undrain(wr, s);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- the thread */

static size_t live_count(const writer_t *wr)
{
    size_t n = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        n += !wr->streams[i].drained;
    return n;
}

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

/* The writer's thread yields the CPU to the workers (wprio.h): its work can wait (every
 * admitted order is safe in the stream until its commit and XACK), the answers cannot. On
 * a host with as many busy threads as cores (two workers, redis-server, the writer) a
 * writer at the workers' priority takes its fair share right when the sale's grabs
 * arrive; niced (--writer-nice) it runs in the gaps, commits bigger batches and catches
 * up once the stock is gone. --writer-pace-ms spaces its short reads (fewer commits);
 * with --writer-idle-lag-ms it runs in the idle class, and leaves it when it falls behind
 * for that long. */
static void *writer_main(void *arg)
{
    writer_t *wr = arg;
    int gave_up = 0;
    int idle_ms = 0;   /* sub-writer: current poll interval while quiet */
    log_set_thread_name("writer");
    pthread_setname_np(pthread_self(), "writer");   /* top -H, the bench's timeline */
    wprio_start(&wr->prio, wr->nice, wr->idle_lag_ms, wr->pace_ms);
    log_info("writer: consumer %s of group %s, batch %d, block %d ms, claim idle %d ms",
             wr->name, KEY_GROUP, wr->batch, wr->block_ms, wr->claim_idle_ms);
    while (!stopping(wr)) {
        rarena_reset(wr->arena);   /* no reply outlives a turn of the loop */
        if (redis_ensure(wr) != 0) {
            nap(wr, (int)(wr->redis_retry_at > clock_mono_ms()
                              ? wr->redis_retry_at - clock_mono_ms()
                              : 10));
            continue;
        }
        uint64_t now = clock_mono_ms();
        if (now >= wr->streams_at && streams_refresh(wr) != 0)
            continue;
        if (wr->nstreams == 0) {
            if (now >= wr->info_at) {
                info_pass(wr);
                wr->info_at = now + INFO_EVERY_MS;
            }
            nap(wr, wr->block_ms < STREAMS_REFRESH_MS ? wr->block_ms : STREAMS_REFRESH_MS);
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
            if (drain_sweep(wr) != 0)
                continue;
        }
        if (stopping(wr))
            break;
        if (live_count(wr) == 0) {
            /* every stream drained: nothing to read, look for new ones after a while */
            nap(wr, wr->block_ms < STREAMS_REFRESH_MS ? wr->block_ms : STREAMS_REFRESH_MS);
            wr->streams_at = 0;
            continue;
        }
        wprio_read_begins(&wr->prio, clock_mono_ms());
        int got = read_group(wr, 0, wr->block_ms);
        if (got < 0)
            continue;
        rc = handle_batch(wr);
        wr->nents = 0;
        if (rc == -2) {
            gave_up = 1;
            break;
        }
        /* caught up: let the next orders gather (fewer commits, each an fsync) */
        int pause = rc == 0 ? wprio_after_batch(&wr->prio, got, wr->batch, clock_mono_ms()) : 0;
        if (pause > 0 && !wr->node_mode)
            nap(wr, pause);
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
                nap(wr, idle_ms);
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
static writer_t *writer_new(struct app *app, const url_redis_t *addr)
{
    writer_t *wr = xcalloc(1, sizeof *wr);
    wr->app = app;
    wr->arena = rarena_new();
    wr->m = app->metrics ? app->metrics : &wr->m_own;
    const config_t *c = &app->cfg;
    wr->batch = c->writer_batch > 0 ? c->writer_batch : 512;
    wr->block_ms = c->writer_block_ms > 0 ? c->writer_block_ms : 1000;
    wr->nice = c->writer_nice;
    wr->idle_lag_ms = c->writer_idle_lag_ms;
    wr->pace_ms = c->writer_pace_ms;
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

static void writer_free(writer_t *wr)
{
    if (wr->rc)
        redisFree(wr->rc);
    rarena_free(wr->arena);   /* after the reader that used it */
    rcl_sync_close(wr->rcs);
    store_close(wr->st);
    free(wr->streams);
    free(wr->ents);
    free(wr->orders);
    free(wr->argv);
    free(wr->argvlen);
    free(wr->cmdbuf);
    free(wr->subs);
    pthread_cond_destroy(&wr->cv);
    pthread_mutex_destroy(&wr->mu);
    free(wr);
}

/* ---------------------------------------------------------------- cluster supervisor */

static int sub_index(const writer_t *sup, const rcluster_node_t *n)
{
    for (size_t i = 0; i < sup->nsubs; i++)
        if (sup->subs[i]->addr.port == n->port && strcmp(sup->subs[i]->addr.host, n->host) == 0)
            return (int)i;
    return -1;
}

static void sub_start(writer_t *sup, const rcluster_node_t *n)
{
    url_redis_t a = sup->addr;
    a.cluster = 0;
    a.nseeds = 0;
    a.db = 0;
    a.unix_path[0] = '\0';
    snprintf(a.host, sizeof a.host, "%s", n->host);
    a.port = n->port;
    writer_t *sub = writer_new(sup->app, &a);
    if (sub == NULL)
        return;
    sub->node_mode = 1;
    sub->cluster_addr = sup->addr;
    if (pthread_create(&sub->tid, NULL, writer_main, sub) != 0) {
        log_error("writer: cannot start the writer of node %s:%d", n->host, n->port);
        writer_free(sub);
        return;
    }
    sup->subs = xrealloc(sup->subs, (sup->nsubs + 1) * sizeof *sup->subs);
    sup->subs[sup->nsubs++] = sub;
    log_info("writer: reading the order streams of master %s:%d", n->host, n->port);
}

/* One pass: a sub-writer for every master, none for a node that owns no slot. */
static void supervise(writer_t *sup)
{
    char why[300];
    if (sup->rcs == NULL) {
        sup->rcs = rcl_sync_open(&sup->addr, sup->redis_timeout_ms, why, sizeof why);
        if (sup->rcs == NULL) {
            redis_down_step(sup, "cannot read the cluster's slot map", why);
            return;
        }
    } else if (rcl_sync_refresh(sup->rcs, why, sizeof why) != 0) {
        redis_down_step(sup, "cannot read the cluster's slot map", why);
        return;
    }
    redis_up(sup);
    const rcluster_map_t *m = rcl_sync_map(sup->rcs);
    int ms[RCL_MAX_NODES];
    int n = rcluster_map_masters(m, ms);
    for (int i = 0; i < n; i++)
        if (sub_index(sup, &m->nodes[ms[i]]) < 0)
            sub_start(sup, &m->nodes[ms[i]]);
    for (size_t i = 0; i < sup->nsubs;) {
        int still = 0;
        for (int k = 0; k < n && !still; k++)
            still = sup->subs[i]->addr.port == m->nodes[ms[k]].port &&
                    strcmp(sup->subs[i]->addr.host, m->nodes[ms[k]].host) == 0;
        if (still) {
            i++;
            continue;
        }
        /* What it read and did not ack stays pending under our consumer name; the node's
         * slots' new owner replays it. */
        writer_t *sub = sup->subs[i];
        log_info("writer: %s:%d owns no slot any more; its writer stops", sub->addr.host,
                 sub->addr.port);
        sup->subs[i] = sup->subs[--sup->nsubs];
        writer_stop(sub);
    }
}

static void *supervisor_main(void *arg)
{
    writer_t *sup = arg;
    log_set_thread_name("writer");
    log_info("writer: Redis Cluster: one writer per master, consumer %s of group %s", sup->name,
             KEY_GROUP);
    while (!stopping(sup)) {
        supervise(sup);
        int64_t pending = 0, lag = 0;
        for (size_t i = 0; i < sup->nsubs; i++) {
            pending += atomic_load(&sup->subs[i]->node_pending);
            lag += atomic_load(&sup->subs[i]->node_lag);
        }
        publish_backlog(sup, pending, lag);
        nap(sup, CLUSTER_CHECK_MS);
    }
    /* writer_stop joins the sub-writers (each finishes its batch and drains). */
    return NULL;
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
    int rc = pthread_create(&wr->tid, NULL, wr->cluster ? supervisor_main : writer_main, wr);
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
