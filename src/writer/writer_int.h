/* writer_int.h -- the order writer's own (src/writer/ only): the writer's state, shared by
 * its files, and what each file offers the others.
 *
 *   writer.c           the loop, the batch (parse, SQL, acks), the Redis connection, the
 *                      public API (writer.h)
 *   writer_streams.c   the stream registry: seckill:streams -> the streams read, their groups
 *   writer_sweep.c     the drained set: marking ended streams, its checks and the sweep
 *   writer_dead.c      dead letters: entries that can never be orders, moved aside
 *   writer_cluster.c   Redis Cluster: the supervisor and its sub-writers, one per master
 *   writer_life.c      lifecycle events (a cancelled order's status and unit) into SQL;
 *                      payment deadlines
 *   writer_refund.c    the refund outbox: --refund-command for each refund decided
 *
 * Everything here runs on the writer's own thread (a supervisor's on its own), one writer_t
 * each: no locks but mu/cv (writer_stop's wake-up) and the atomics. */
#ifndef SECKILL_WRITER_INT_H
#define SECKILL_WRITER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "core/url.h"
#include "redis/rarena.h"
#include "redis/rcl_sync.h"
#include "sale/sentry.h"
#include "server/metrics.h"
#include "store/store.h"
#include "writer/writer.h"

#define STREAMS_REFRESH_MS 1000
#define GUARD_EVERY_MS 1000      /* the replica promise's INFO replication (writer_guard.c) */
#define GUARD_REPLICAS_MAX 8
#define ENTRY_ID_MAX 48
/* What a stream entry may hold (checked before SQL; anything else is a dead letter):
 * user ids up to 2^53-1 (what the course's JSON clients can hold exactly), times from
 * 2000-01-01 to an hour past this host's clock and within the voucher's sale window
 * give or take WRITER_TIME_SLACK_S (clocks differ between hosts). */
#define WRITER_MAX_USER_ID 9007199254740991LL
#define WRITER_MIN_TIME 946684800LL
#define WRITER_TIME_SLACK_S 3600

/* What a batch entry is: orders to write, deleted from the stream while pending, a dead
 * letter, a lifecycle event (sentry.h) to apply after the batch's orders, or one that
 * waits (not acked: it comes back to a later batch, writer_life.c). */
enum { E_ORDER, E_DELETED, E_DEAD, E_EVENT, E_WAIT };

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
    int64_t last_lag;                /* last XINFO GROUPS: g1's lag with nothing pending */
    int lag_still;                   /* ... the same above 0 twice (writer_guard_fix_lag) */
    int drained;                     /* in the drained set (added, or seen there) */
    int drained_known;               /* the drained set was read since the stream was added */
    uint64_t vlook_at;               /* drain check: no SQL look-up of the voucher before */
    char paysweep[ENTRY_ID_MAX];     /* payment deadlines: the last entry swept ("": none) */
    int paysweep_known;              /* ... read from seckill:paysweep:{tag} */
    int refund_group;                /* the refund outbox's group made (writer_refund.c) */
    int refund_quiet;                /* ... and nothing in it at the last look */
} wstream_t;

typedef struct wentry {
    size_t si;                       /* index into streams */
    char id[ENTRY_ID_MAX];           /* stream entry id */
    int kind;                        /* E_* */
    size_t o0, no;                   /* E_ORDER: its orders, wr->orders[o0 .. o0+no) (an
                                      * entry of admit.lua holds every order of one call) */
    const char *reason;              /* E_DEAD */
    const redisReply *fields;        /* E_DEAD: the original fields (borrowed) */
    sentry_ev_t ev;                  /* E_EVENT: its first event (kind 'f': a c or t that
                                      * freed its buyer; every event of an entry has its
                                      * kind) */
    size_t v0, nv;                   /* E_EVENT: its events, wr->evs[v0 .. v0+nv) (an evs
                                      * entry holds every order of one expire call) */
    char pay_id[STORE_PAYMENT_ID_MAX + 1];   /* E_EVENT of a payment ("" none): its id, */
    int64_t pay_amount;              /* amount and answer (0 taken, 2 refunded) */
    int pay_answer;
    int round;                       /* handle_batch: written in this round (a freeing
                                      * event ends its stream's round: the buyer's next
                                      * order is written after it) */
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
    int nice;                        /* added to the thread's nice value at its start */
    int wait_replicas;               /* --redis-wait-replicas: write only replicated orders */
    url_redis_t addr;

    redisContext *rc;
    rarena_t *arena;                 /* every reply of rc lives here (rarena.h): reset
                                      * before each read and each turn of the loop */
    rarena_t *side_arena;            /* ... but the deadline sweeps' while a batch waits for
                                      * SQL (its entries borrow from arena): sql_wait */
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
    uint64_t due_at;                 /* writer_life_sweep: the next pass */
    uint64_t timeouts_at;            /* ... the next of its payment-deadline sweeps (the
                                      * refunds' reaping may call it more often) */
    uint64_t scan_at;                /* ... and its SQL scan's */
    uint64_t pace_ns;                /* ... the earliest its next expire call goes
                                      * (--timeout-rate; clock_mono_ns) */
    int paced;                       /* ... the pass ended held back by that pace */
    int sweep_slot;                  /* ... its lag's slot in /metrics, plus 1 (0: none yet) */
    int64_t scan_id;                 /* ... which reads SQL's orders after this id */
    char rebuilt[24];                /* ... and KEY_REBUILT at its last pass: a new value, */
    int rebuilt_known;               /* from 0 again (writer_life.c) */
    size_t sweep_next;               /* writer_sweep_run's round-robin position in streams */
    long long reg_card;              /* single Redis: members of seckill:streams at the last
                                      * full read (-1: none since the connection opened) */
    uint64_t reg_full_at;            /* ... and when the next full read is due */

    wentry_t *ents;
    size_t nents, capents;
    store_order_t *orders;           /* the batch's orders, entry by entry */
    size_t norders, caporders;
    sentry_ev_t *evs;                /* the batch's lifecycle events, entry by entry */
    size_t nevs, capevs;
    const char **argv;               /* command building */
    size_t *argvlen;
    size_t capargv;
    char *cmdbuf;                    /* the command in RESP (append) */
    size_t capcmd;

    uint64_t dead, deleted;          /* counted here (no metric for them yet) */
    struct wrefund *refund;          /* the refund outbox's sender (writer_refund.c) */

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

    /* The replica promise (writer_guard.c), per connection to the writer's master. */
    int guard_set;                   /* min-replicas-to-write sent on this connection */
    int guard_warned;                /* ... and the failure to set it logged */
    int guard_short, guard_known;    /* fewer in-sync replicas than the promise */
    uint64_t guard_at;               /* next INFO replication */
    int guard_nrep;                  /* replicas online at the last pass, given the promise */
    uint64_t guard_reassert_at;      /* next time every replica is given it again */
    struct { char host[64]; int port; } guard_rep[GUARD_REPLICAS_MAX];
    _Atomic int node_short;          /* sub-writer: guard_short, summed by the supervisor */
};

static inline int stopping(writer_t *wr)
{
    return atomic_load(&wr->stop);
}

static inline int is_str(const redisReply *r)
{
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static inline int str_eq(const redisReply *r, const char *z)
{
    return is_str(r) && r->len == strlen(z) && memcmp(r->str, z, r->len) == 0;
}

/* ---- writer.c */

/* Sleeps ms, or less if writer_stop is called. */
void writer_nap(writer_t *wr, int ms);
/* A command in wr->argv: appends one argument (len bytes; writer_args: a C string). */
void writer_arg(writer_t *wr, size_t *n, const char *z, size_t len);
void writer_args(writer_t *wr, size_t *n, const char *z);
/* Appends the command wr->argv[0..n) to the connection's output (sent with the next read
 * of a reply); writer_cmd sends it and waits for its reply (NULL: the connection failed). */
void writer_append(writer_t *wr, size_t n);
redisReply *writer_cmd(writer_t *wr, size_t n);
/* Redis unusable: counts one failure towards the back-off and logs it (what, why). */
void writer_redis_down(writer_t *wr, const char *what, const char *why);
/* Redis answered a real command after a failure: it is usable again. */
void writer_redis_up(writer_t *wr);
/* A command (cmd) got no reply or the error reply r: drops the connection, so the loop
 * reconnects and replays what was not acked. Returns -1. */
int writer_redis_fail(writer_t *wr, const char *cmd, redisReply *r);
/* The backlog gauges (stream_pending, stream_lag, the stream counts) of this writer. */
void writer_publish_backlog(writer_t *wr, int64_t pending, int64_t lag);
/* A writer (not yet running) for app, with addr its Redis; its thread; its end. */
writer_t *writer_new(struct app *app, const url_redis_t *addr);
void *writer_main(void *arg);
void writer_free(writer_t *wr);

/* ---- writer_streams.c */

/* Re-reads seckill:streams (the loop, when wr->streams_at is due): 0, or -1 when Redis
 * failed. */
int writer_streams_refresh(writer_t *wr);
/* The index in wr->streams of the stream named key, or (size_t)-1. */
size_t writer_streams_index(writer_t *wr, const redisReply *key);
/* s's voucher from SQL (vknown, vbegin, vend): 0 (found or not), -1 when SQL failed. */
int writer_streams_voucher(writer_t *wr, wstream_t *s);
/* How many of the streams are not drained. */
size_t writer_streams_live(const writer_t *wr);

/* ---- writer_sweep.c */

/* Which streams not yet looked up the drained set holds (one SMISMEMBER): 0, or -1. */
int writer_sweep_read(writer_t *wr);
/* The metrics pass's drained marks, at now (the Redis's TIME, epoch seconds). */
void writer_sweep_marks(writer_t *wr, int64_t now);
/* g1's pending count and lag in an XINFO GROUPS reply: 1 if g1 is there, else 0. */
int writer_sweep_group_state(const redisReply *r, int64_t *pending, int64_t *lag,
                             int *lag_known);
/* One sweep over the next drained streams: 0, or -1 when the connection was lost. */
int writer_sweep_run(writer_t *wr);
/* s, if drained, out of the set and read again (its new entries are expected ones): 0, or
 * -1 when the connection was lost. */
int writer_sweep_undrain(writer_t *wr, wstream_t *s);

/* ---- writer_life.c */

/* An entry's fields, if they are lifecycle events (sentry_evopen: ev, or evs): 1 with e
 * made E_EVENT, its events appended to wr->evs (or E_DEAD when one is malformed: the entry
 * is one unit), 0 when they are not (an order entry). */
int writer_life_parse(writer_t *wr, wentry_t *e, const redisReply *fields);
/* Applies the batch's E_EVENT entries of one round (wentry_t.round) to SQL, after that
 * round's orders are committed (an order's event follows its insert in the stream). An
 * entry with an event whose order SQL lacks, or that SQL could not take, becomes E_WAIT
 * (not acked: its events come back, the applied ones a replay); one with an event whose
 * order never came, E_DEAD. Returns how many became E_DEAD. */
size_t writer_life_apply(writer_t *wr, int round);
/* --cancel-frees-buyer: whether an order entry whose orders[0..n) were just committed
 * (with replays among them) must wait instead of being acked -- an order SQL does not have
 * was skipped because its buyer still holds an earlier order there whose freeing event
 * is not applied yet (pending in a dead instance's entries or another writer's batch).
 * The entry comes back after the event. Entries older than an event may be late are not
 * held (a duplicate after all, acked as before). */
int writer_life_held(writer_t *wr, const wentry_t *e, const store_order_t *orders, size_t n);
/* The refund outbox's pass (writer_refund_run), then --pay-timeout-s: cancels the orders
 * whose payment deadline passed (the entries of every stream this writer reads whose sale
 * may still have some, from the sweep's cursor up to now - timeout; at most every 500 ms):
 * 0, or -1 when the connection was lost. */
int writer_life_sweep(writer_t *wr);
/* ms, at most ms, to wait for new entries before the next sweep pass is due: less when
 * --timeout-rate ended the last pass early (it goes on once the pace allows). */
int writer_life_wait_ms(const writer_t *wr, int ms);
/* The payment deadlines of the streams alone, when due (every 500 ms; sooner while a wave
 * has more due): writer.c runs it while a batch waits for SQL, so a database outage does
 * not hold back the timeouts -- decided in Redis, their events wait in the stream for SQL.
 * No SQL, no refund outbox. 0, or -1 when the connection was lost. */
int writer_life_deadlines(writer_t *wr);
/* Its state: the sweep's slot in /metrics given back. */
void writer_life_free(writer_t *wr);

/* ---- writer_refund.c */

/* The refund outbox of every stream this writer reads (seckill:refunds:{tag}): the
 * commands that ended are reaped and their refunds marked sent in SQL and acked; new and
 * due refunds started, at most --refund-command-max at once. 0, or -1 when the
 * connection was lost. */
int writer_refund_run(writer_t *wr);
/* The read's BLOCK: block_ms, or less while a refund command runs (its exit is looked
 * for every REFUND_POLL_MS). */
int writer_refund_block_ms(const writer_t *wr, int block_ms);
/* Its state (the commands running are left to finish on their own). */
void writer_refund_free(writer_t *wr);

/* ---- writer_dead.c */

/* Turns the batch's entries of an unknown voucher or outside its sale window into dead
 * letters: 0, or -1 when SQL failed (nothing decided). */
int writer_dead_check(writer_t *wr);
/* Appends entry e's dead letter: MULTI; XADD seckill:dead:{v} ...; XACK; EXEC (4 replies). */
void writer_dead_append(writer_t *wr, const wentry_t *e);

/* ---- writer_cluster.c */

/* The supervisor's thread (writer_start on a redis+cluster:// URL). */
void *writer_cluster_main(void *arg);
/* Sub-writer: 1 if stream key lives on its node (per the last slot map). */
int writer_cluster_mine(writer_t *wr, const char *key);

/* writer_guard.c: --redis-wait-replicas N kept by the master (min-replicas-to-write).
 * reset: a new connection (the promise is sent again). run: every GUARD_EVERY_MS, sets
 * the promise, counts the in-sync replicas, logs a change; 1 = short of N (read nothing:
 * the master refuses writes, and nothing could be persisted), 0 = fine, -1 = the
 * connection was lost. fix_lag: g1's entries-read set again when the group has read the
 * whole stream (a promoted Redis 7.0 replica's stale counter). */
void writer_guard_reset(writer_t *wr);
int writer_guard_run(writer_t *wr);
void writer_guard_fix_lag(writer_t *wr, size_t si);
/* Sub-writer: SMEMBERS seckill:streams through the cluster client (the caller frees the
 * reply), or NULL (counted as Redis down). */
redisReply *writer_cluster_streams(writer_t *wr);

#endif
