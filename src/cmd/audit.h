/* audit.h -- `seckill audit`: checks a deployment's Redis and SQL for the flash-sale
 * invariants (seckill-anchors §5.2) and prints each with its figures.
 *
 * Read-only: on Redis only XINFO, XPENDING, EXISTS, HMGET, HLEN, XLEN, HSCAN, XRANGE (and
 * MULTI/EXEC around reads that must be taken together), SMEMBERS and GET of the sale
 * board's announcements (the live instances' modes); on SQL only SELECTs through store.h. It can run against a live deployment while a sale is on: every comparison
 * between the two stores is arranged so that orders moving from Redis to SQL in the
 * meantime cannot produce a false violation (docs/bench.md explains the reading order).
 *
 * Checks, per flash-sale voucher (ids as printed; I1..I5 are the anchors' numbering):
 *   I1 no-oversell         SQL orders <= initial stock and admitted <= initial (needs it)
 *   I1 stock-nonneg        Redis stock >= 0 and SQL stock >= 0
 *   I1 redis-stock         Redis stock = initial - admitted (needs initial)
 *   I1 sql-stock           SQL stock = initial - persisted (needs initial)
 *   I1 stock-agree         Redis stock + admitted = SQL stock + persisted (always)
 *   I1 stream-entries      stream length = admitted (one entry per admission, never trimmed)
 *   I1 redis-idle          (a mode that keeps the sale in SQL, instead of stream-entries)
 *                          no buyer admitted and no stream entry in Redis
 *   I2 dup-sql             at most one SQL order per (user, voucher)
 *   I2 dup-buyers          no order id shared by two buyers in Redis
 *   I2 dup-stream          at most one stream entry per user and per order id
 *   I2 dup-answers         no order id (or user) answered success twice (with a record)
 *   I3 sql-admitted        every SQL order is in the buyer hash, with the same order id
 *   I3 admitted-persisted  every buyer is in SQL (in-flight entries excused unless drained)
 *   I3 answered-persisted  every order answered success is in SQL, for the same user
 *   I3 persisted-answered  every SQL order was answered success (complete record only)
 *   I5 window              no SQL order and no stream entry outside [begin, end)
 *   I5 window-agree        Redis and SQL hold the same sale window
 *   -- stream-drained      pending 0 and lag 0 (a violation only when drain was awaited)
 *   -- dead-letters        nothing in seckill:dead:{id}
 * "admitted" is the buyer hash's size (HLEN), "persisted" the SQL order count.
 * Each mode is checked by what it keeps (order_mode.h's sql_counts): a mode that takes each
 * order in SQL alone (sync, the lab's SQL steps) skips redis-stock, sql-admitted,
 * admitted-persisted and stream-drained, and its no-oversell counts SQL orders only.
 * Besides the checks, each voucher gets the lab's figures (docs/lab.md): oversold,
 * duplicate buyers, lost admitted orders, buyers refused while stock remained. */
#ifndef SECKILL_AUDIT_H
#define SECKILL_AUDIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One flash-sale answer the client saw: success with this order id, for this user
 * (user_id 0 = not known to the client). */
typedef struct audit_answer {
    int64_t order_id;
    int64_t user_id;
} audit_answer_t;

typedef struct audit_opts {
    const char *redis_url;
    const char *db_url;
    const int64_t *vouchers;      /* NULL/0: every flash-sale voucher in SQL */
    size_t nvouchers;
    int64_t initial_stock;        /* < 0: unknown (one voucher only) */
    const audit_answer_t *answers;/* the client's record (one voucher only), or NULL */
    size_t nanswers;
    int have_answers;
    int answers_complete;         /* the record covers every request ever made to it */
    int64_t unanswered;           /* requests whose answer the client never got */
    const int64_t *soldout_users; /* users the client saw answered sold out (the lab's */
    size_t nsoldout;              /* "refused while stock remained"), or NULL */
    const int64_t *maybe_users;   /* users the client saw answered 503 (0 where not known): */
    size_t nmaybe;                /* their order may have been taken (docs/api.md) */
    const char *mode;             /* the service's --mode (order_mode.h), which decides the
                                   * checks; NULL: the mode the live instances announce */
    int wait_drain_ms;            /* > 0: wait up to this for pending = lag = 0 first */
    int timeout_ms;               /* per Redis command / SQL call; 0 = 10 s */
    FILE *out;                    /* the human report; NULL = stdout */
    FILE *json;                   /* also a JSON report here, or NULL */
} audit_opts_t;

/* Runs every check. Returns 0 when all hold, 1 on any violation, 2 when the audit could
 * not run (unreachable store, unknown voucher, ...; the reason goes to stderr). */
int audit_run(const audit_opts_t *o);

/* Drain of one voucher's order stream, as seen by audit_wait_drain. */
typedef struct audit_drain {
    int drained;                  /* pending = 0 and nothing undelivered */
    int64_t pending, lag;
    int64_t admitted;             /* HLEN of the buyer hash at the end */
    int64_t persisted_start, persisted_end;   /* SQL orders at the start and the end */
    double seconds;               /* waited */
    double active_seconds;        /* from the first to the last observed SQL progress */
} audit_drain_t;

/* Polls (every 20 ms) until the voucher's stream is drained or timeout_ms passes.
 * Returns 0 (see d->drained) or -1 with a reason in err. */
int audit_wait_drain(const char *redis_url, const char *db_url, int64_t voucher_id,
                     int timeout_ms, audit_drain_t *d, char *err, size_t errlen);

/* The record file `seckill bench --record` writes and `audit --orders` reads:
 *   # seckill-bench-record v1 voucher=<id> stock=<n> complete=<0|1> unanswered=<n>
 *   <order id> <user id>          (one line per success answer; user id 0 if unknown)
 *   soldout <user id>             (one line per sold-out answer, for the lab's figures)
 *   maybe <user id>               (one line per 503 answer: the order may have been taken)
 * Header values are -1 when unknown. Returns 0 or -1 with a reason in err; *out is
 * malloc'ed (free()). */
typedef struct audit_record {
    int64_t voucher_id, stock, unanswered;
    int complete;
    audit_answer_t *answers;
    size_t n;
    int64_t *soldout;             /* users answered sold out (0 where not known) */
    size_t nsoldout;
    int64_t *maybe;               /* users answered 503 (0 where not known) */
    size_t nmaybe;
} audit_record_t;
int audit_record_read(const char *path, audit_record_t *rec, char *err, size_t errlen);
int audit_record_write(const char *path, const audit_record_t *rec, char *err, size_t errlen);

/* `seckill audit ...` (argv[0] is "audit"). Exit status as audit_run. */
int audit_main(int argc, char **argv);

#endif
