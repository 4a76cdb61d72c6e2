/* rebuild.c -- rebuild a flash-sale voucher's Redis keys from SQL (see rebuild.h).
 *
 * Users and orders are compared through arrays of (user id, order id) pairs (pairs.h:
 * .a the user, .b the order) sorted by user: a million orders cost tens of MB and a
 * sort, no hash tables. */
#include "rebuild/rebuild.h"
#include "rebuild/rebuild_life.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "sale/bucket_sweep.h"
#include "sale/buckets.h"
#include "sale/onsale.h"
#include "core/pairs.h"
#include "redis/rcl_sync.h"
#include "redis/rconn.h"
#include "sale/sentry.h"
#include "embedded.h"
#include "core/key.h"
#include "core/log.h"
#include "store/store.h"
#include "core/xmem.h"

#define PAGE 10000           /* SQL orders and stream entries per read */
#define HSET_CHUNK 1000      /* buyers per HSET */
#define LOCK_TTL_MS 30000

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int has_i64(const int64_t *a, size_t n, int64_t x)
{
    return n > 0 && bsearch(&x, a, n, sizeof *a, cmp_i64) != NULL;
}

static void plan(const rebuild_opts_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void plan(const rebuild_opts_t *o, const char *fmt, ...)
{
    if (!o->plan)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(o->plan, fmt, ap);
    va_end(ap);
    fputc('\n', o->plan);
}

int rebuild_present(redisContext *c, int64_t voucher_id, char *err, size_t errlen)
{
    char kv[64];
    if (key_voucher(kv, sizeof kv, voucher_id) < 0) {
        snprintf(err, errlen, "voucher id out of range");
        return -1;
    }
    redisReply *r = rconn_cmdf(c, err, errlen, "HEXISTS %s stock", kv);
    if (!r)
        return -1;
    int64_t v = 0;
    int ok = rconn_int(r, &v);
    freeReplyObject(r);
    if (ok != 0) {
        snprintf(err, errlen, "HEXISTS %s: unexpected reply", kv);
        return -1;
    }
    return v == 1;
}

/* The orders of one SQL table (with mask, only those of users whose home bucket of k is not
 * in it: the lost buckets) into life, with their status and the row's update time that
 * tells a timeout from a cancel (rebuild_life.h). */
static int read_sql_table(store_t *st, const char *table, int64_t vid, int pay_timeout_s,
                          unsigned mask, int k, rebuild_life_t *life, char *err, size_t errlen)
{
    /* update_time in the fifth column, the one store_exec_orders reads as a time */
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT id, user_id, voucher_id, status, update_time FROM %s "
                              "WHERE voucher_id = ? AND id > ? ORDER BY id LIMIT %d",
             table, PAGE);
    int64_t after = 0;
    for (;;) {
        store_order_t *page = NULL;
        size_t n = 0;
        store_arg_t args[2] = {{vid, 0}, {after, 0}};
        if (store_exec_orders(st, sql, args, 2, &page, &n) != STORE_OK) {
            snprintf(err, errlen, "SQL orders (%s): %s", table, store_errmsg(st));
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            if (!(mask & (1u << buckets_home(page[i].user_id, k))))
                rebuild_life_add(life, page[i].id, page[i].user_id, page[i].status,
                                 page[i].create_time, pay_timeout_s);
        if (n)
            after = page[n - 1].id;
        free(page);
        if (n < PAGE)
            return 0;
    }
}

/* Every order of the voucher in SQL into life: tb_voucher_order's (live, and cancelled ones
 * that kept their buyer), then tb_voucher_order_cancelled's, whose cancel freed the buyer
 * (--cancel-frees-buyer under this run or an earlier one): read second, so an order the
 * writer moves aside meanwhile is seen at least once. */
static int read_sql_orders(store_t *st, int64_t vid, int pay_timeout_s, unsigned mask, int k,
                           rebuild_life_t *life, char *err, size_t errlen)
{
    rebuild_life_t aside = {0};
    int rc = read_sql_table(st, "tb_voucher_order", vid, pay_timeout_s, mask, k, life, err,
                            errlen);
    if (rc == 0)
        rc = read_sql_table(st, "tb_voucher_order_cancelled", vid, pay_timeout_s, mask, k,
                            &aside, err, errlen);
    if (rc == 0)
        rebuild_life_aside(life, aside.v, aside.n);
    rebuild_life_free(&aside);
    if (rc == 0)
        rc = rebuild_life_payments(st, vid, life, err, errlen);   /* their payments */
    return rc;
}

/* The orders SQL has (either table) of bucket b of k's home users that are not entries of
 * its surviving stream (ids: every surviving stream's order ids, sorted -- an order is an
 * entry of its buyer's home bucket's stream alone): `seeded`, so the audit's stream entries
 * = buyers + freed - seeded, bucket by bucket. */
static int64_t seeded_orders(const rebuild_life_t *life, int b, int k, const int64_t *ids,
                             size_t nids)
{
    int64_t n = 0;
    for (size_t i = 0; i < life->n; i++) {
        const rebuild_life_order_t *o = &life->v[i];
        n += o->sql && buckets_home(o->user_id, k) == b && !has_i64(ids, nids, o->order_id);
    }
    return n;
}

/* read_stream's state while sentry_scan reads the stream. */
typedef struct stream_seen {
    int64_t epoch;
    int64_t *ids;
    size_t nids, cap;
    pairs_t *cur;
} stream_seen_t;

static int stream_entry(void *ctx, const char *id, const sentry_t *o, size_t n,
                        const char *reason)
{
    stream_seen_t *s = ctx;
    (void)id;
    (void)reason;   /* a bad entry: the writer moves it to the dead letters */
    for (size_t i = 0; i < n; i++) {   /* an entry holds one call's orders */
        if (s->nids == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 1024;
            s->ids = xrealloc(s->ids, s->cap * sizeof *s->ids);
        }
        s->ids[s->nids++] = o[i].order_id;
        if (o[i].ep == s->epoch)
            pairs_push(s->cur, o[i].user_id, o[i].order_id);
    }
    return 0;
}

/* Every entry of a surviving stream, added to what other streams gave: all order ids
 * (sorted), and the (user, order) of the entries of generation epoch, sorted by user. */
static int read_stream(redisContext *c, const char *ks, int64_t epoch, int64_t **ids,
                       size_t *nids, pairs_t *cur, char *err, size_t errlen)
{
    stream_seen_t s = {epoch, *ids, *nids, *nids, cur};
    int rc = sentry_scan(c, ks, stream_entry, &s, err, errlen);
    *ids = s.ids;
    *nids = s.nids;
    if (rc != 0)
        return -1;
    if (*nids > 1)
        qsort(*ids, *nids, sizeof **ids, cmp_i64);
    pairs_sort(cur);
    return 0;
}

/* Releases the lock if it still holds our token. */
static void unlock(redisContext *c, const char *kl, const char *token)
{
    char why[128];
    redisReply *r = rconn_cmdf(c, why, sizeof why,
                                "EVAL %s 1 %s %s",
                                "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                                "return redis.call('DEL', KEYS[1]) end return 0",
                                kl, token);
    if (r)
        freeReplyObject(r);
    else
        log_warn("rebuild: releasing %s: %s (it expires by itself)", kl, why);
}

/* Writes the buyers into the (emptied) staging hash, HSET_CHUNK at a time. */
static int stage_buyers(redisContext *c, const char *kt, const pairs_t *a, const pairs_t *b,
                        char *err, size_t errlen)
{
    char why[256];
    redisReply *r;
    size_t total = a->n + b->n, done = 0;
    const char **argv = xrealloc(NULL, (2 + 2 * HSET_CHUNK) * sizeof *argv);
    char(*num)[24] = xrealloc(NULL, 2 * HSET_CHUNK * sizeof *num);
    int rc = 0;
    while (done < total && rc == 0) {
        int argc = 0;
        argv[argc++] = "HSET";
        argv[argc++] = kt;
        for (size_t k = 0; k < HSET_CHUNK && done < total; k++, done++) {
            const pair_t *p = done < a->n ? &a->v[done] : &b->v[done - a->n];
            snprintf(num[2 * k], sizeof num[0], "%lld", (long long)p->a);
            snprintf(num[2 * k + 1], sizeof num[0], "%lld", (long long)p->b);
            argv[argc++] = num[2 * k];
            argv[argc++] = num[2 * k + 1];
        }
        r = rconn_cmd(c, why, sizeof why, argc, argv, NULL);
        if (!r) {
            snprintf(err, errlen, "HSET %s: %s", kt, why);
            rc = -1;
        } else {
            freeReplyObject(r);
        }
    }
    free(argv);
    free(num);
    return rc;
}

/* Bucket b's hash tag (bucket 0: the voucher id), 0 or -1. */
static int bucket_tag(char *tag, size_t len, int64_t vid, int b, int k)
{
    return b == 0 ? (snprintf(tag, len, "%lld", (long long)vid) < (int)len ? 0 : -1)
                  : key_btag(tag, len, vid, b, k) < 0 ? -1 : 0;
}

/* The connection that reaches key of bucket b (bucket 0's: c), or NULL (err). */
static redisContext *bucket_conn(redisContext *c, const rebuild_opts_t *o, int b,
                                 const char *key, char *err, size_t errlen)
{
    return b > 0 && o->rt ? rcl_sync_route_key(o->rt, key, err, errlen) : c;
}

/* Bucket b's key made by fn from its tag, and the connection to it: 0, or -1 (err). */
static int bucket_key(redisContext *c, const rebuild_opts_t *o, int64_t vid, int b, int k,
                      int (*fn)(char *, size_t, const char *), char *key, size_t len,
                      redisContext **bc, char *err, size_t errlen)
{
    char tag[48];
    if (bucket_tag(tag, sizeof tag, vid, b, k) < 0 || fn(key, len, tag) < 0) {
        snprintf(err, errlen, "voucher %lld bucket %d: key out of range", (long long)vid, b);
        return -1;
    }
    return (*bc = bucket_conn(c, o, b, key, err, errlen)) ? 0 : -1;
}

/* Source 3 of rebuild_life.h: bucket b's state hash, if it outlived the loss. */
static int keep_states(redisContext *c, const rebuild_opts_t *o, int64_t vid, int b, int k,
                       rebuild_life_t *life, char *err, size_t errlen)
{
    char ko[80];
    redisContext *bc;
    if (bucket_key(c, o, vid, b, k, key_ostate_t, ko, sizeof ko, &bc, err, errlen) != 0)
        return -1;
    return rebuild_life_keep(bc, ko, b, life, err, errlen);
}

/* Which of the buckets in want (a bit each) kept an order stream with entries: their bits
 * in *left. 0, or -1 (err) when Redis failed. */
static int streams_left(redisContext *c, const rebuild_opts_t *o, int64_t vid, int k,
                        unsigned want, unsigned *left, char *err, size_t errlen)
{
    *left = 0;
    for (int b = 0; b < k; b++) {
        char ks[80], why[256];
        redisContext *bc;
        if (!(want & (1u << b)))
            continue;
        if (bucket_key(c, o, vid, b, k, key_stream_t, ks, sizeof ks, &bc, err, errlen) != 0)
            return -1;
        redisReply *r = rconn_cmdf(bc, why, sizeof why, "XLEN %s", ks);
        int64_t n = 0;
        if (!r || rconn_int(r, &n) != 0) {
            snprintf(err, errlen, "XLEN %s: %s", ks, r ? "unexpected reply" : why);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
        if (n > 0)
            *left |= 1u << b;
    }
    return 0;
}

/* Source 2 of rebuild_life.h and the orders SQL lacks, from every surviving stream (the
 * buckets in left, streams_left): their entries of generation epoch that SQL does not
 * have join life unpaid, then their events move life's orders; every order id they hold
 * goes to ids (sorted, for seeded_orders). A bucket's stream holds its home buyers'
 * orders and decisions alone, and SQL may lack some of them whichever bucket it is.
 * 0, or -1 (err) when Redis failed. */
static int read_streams(redisContext *c, const rebuild_opts_t *o, int64_t vid, int k,
                        unsigned left, int64_t epoch, rebuild_life_t *life, int64_t **ids,
                        size_t *nids, char *err, size_t errlen)
{
    pairs_t cur = {0};
    int rc = 0;
    char ks[80];
    redisContext *bc;
    for (int b = 0; b < k && rc == 0; b++) {
        if (!(left & (1u << b)))
            continue;
        rc = bucket_key(c, o, vid, b, k, key_stream_t, ks, sizeof ks, &bc, err, errlen);
        if (rc == 0)
            rc = read_stream(bc, ks, epoch, ids, nids, &cur, err, errlen);
    }
    if (rc == 0)
        rebuild_life_unknown(life, &cur);   /* every stream's orders first: events find them */
    for (int b = 0; b < k && rc == 0; b++) {
        if (!(left & (1u << b)))
            continue;
        rc = bucket_key(c, o, vid, b, k, key_stream_t, ks, sizeof ks, &bc, err, errlen);
        if (rc == 0)
            rc = rebuild_life_events(bc, ks, life, err, errlen);
    }
    pairs_free(&cur);
    return rc;
}

/* The counters of the buckets in want (returned, paid, timedout, freed, seeded; ids as for
 * seeded_orders) from life's states, and the buyers' origin: SQL or a stream entry. */
static void count_states(const rebuild_life_t *life, int k, unsigned want, const pairs_t *buyers,
                         const int64_t *ids, size_t nids, rebuild_result_t *res)
{
    for (int b = 0; b < k; b++) {
        rebuild_life_counts_t lc;
        if (!(want & (1u << b)))
            continue;
        rebuild_life_count(life, b, k, &lc);
        res->returned += lc.returned;
        res->paid += lc.paid;
        res->timedout += lc.timedout;
        res->freed += lc.freed;
        res->seeded += seeded_orders(life, b, k, ids, nids);
    }
    for (size_t i = 0; i < life->n; i++)
        res->from_sql += life->v[i].sql && !life->v[i].freed;
    res->events = life->events;
    res->buyers = (int64_t)buyers->n;
    res->from_stream = res->buyers - res->from_sql;
}

/* The pairs of in (user, order) whose user's home is bucket b of k, into out. */
static void home_split(const pairs_t *in, int b, int k, pairs_t *out)
{
    for (size_t i = 0; i < in->n; i++)
        if (buckets_home(in->v[i].a, k) == b)
            pairs_push(out, in->v[i].a, in->v[i].b);
}

/* Step 4 for bucket b (0: the voucher's own keys): stage its buyers (a, then b2) and its
 * home orders' states (life), list its stream in seckill:streams, and run rebuild.lua on
 * its node (the counters `returned`, `paid`, `timedout`, `freed` from those states). Bucket 0's lock is the one
 * step 1 took; a bucket b >= 1 gets a lock key of its own (its slot's), taken with the
 * same token: the voucher's lock, held meanwhile, already makes this the one rebuilder.
 * A REBUILD_* code. */
static int publish_bucket(redisContext *c, redisContext *g, const rebuild_opts_t *o,
                          int64_t vid, int b, const rebuild_result_t *res, const pairs_t *a,
                          const pairs_t *b2, const rebuild_life_t *life, int64_t stock,
                          int64_t seeded, const char *token, char *err, size_t errlen)
{
    char tag[48], kv[80], kb[80], ks[80], kl[80], kt[96], ko[80], kto[96], mem[48], why[256];
    int k = res->buckets;
    if (bucket_tag(tag, sizeof tag, vid, b, k) < 0 ||
        key_voucher_t(kv, sizeof kv, tag) < 0 || key_buyers_t(kb, sizeof kb, tag) < 0 ||
        key_stream_t(ks, sizeof ks, tag) < 0 || key_rebuild_lock_t(kl, sizeof kl, tag) < 0 ||
        key_rebuild_buyers_t(kt, sizeof kt, tag) < 0 || key_ostate_t(ko, sizeof ko, tag) < 0 ||
        key_rebuild_ostate_t(kto, sizeof kto, tag) < 0 ||
        key_bmember(mem, sizeof mem, NULL, 0, vid, b, k) < 0) {
        snprintf(err, errlen, "voucher %lld bucket %d: key out of range", (long long)vid, b);
        return REBUILD_ERR;
    }
    redisContext *bc = bucket_conn(c, o, b, kv, err, errlen);
    if (!bc)
        return REBUILD_ERR;
    if (b > 0) {
        plan(o, "  bucket %d: stock %lld, %zu buyers (HSET %s, RENAME to %s), SADD %s %s", b,
             (long long)stock, a->n + b2->n, kt, kb, KEY_STREAMS, mem);
        redisReply *r = rconn_cmdf(bc, why, sizeof why, "SET %s %s PX %d", kl, token,
                                   o->lock_ttl_ms > 0 ? o->lock_ttl_ms : LOCK_TTL_MS);
        if (!r) {
            snprintf(err, errlen, "SET %s: %s", kl, why);
            return REBUILD_ERR;
        }
        freeReplyObject(r);
    }
    /* staging left by a rebuild that died midway must not be renamed into place */
    redisReply *r = rconn_cmdf(bc, why, sizeof why, "DEL %s %s", kt, kto);
    if (!r) {
        snprintf(err, errlen, "DEL %s: %s", kt, why);
        return REBUILD_ERR;
    }
    freeReplyObject(r);
    if (a->n + b2->n > 0 && stage_buyers(bc, kt, a, b2, err, errlen) != 0)
        return REBUILD_ERR;
    rebuild_life_counts_t lc;
    rebuild_life_count(life, b, k, &lc);
    if (rebuild_life_stage(bc, kto, life, b, k, err, errlen) != 0 ||
        rebuild_life_requeue(bc, tag, life, b, k, err, errlen) != 0)
        return REBUILD_ERR;
    r = rconn_cmdf(g, why, sizeof why, "SADD %s %s", KEY_STREAMS, mem);
    if (!r) {
        snprintf(err, errlen, "SADD %s: %s", KEY_STREAMS, why);
        return REBUILD_ERR;
    }
    freeReplyObject(r);
    char a_stock[24], a_begin[24], a_end[24], a_ep[24], a_seeded[24], a_k[16], a_ret[24],
         a_rr[24], a_rt[16], a_rg[4], a_paid[24], a_to[24], a_freed[24];
    snprintf(a_ret, sizeof a_ret, "%lld", (long long)lc.returned);
    snprintf(a_freed, sizeof a_freed, "%lld", (long long)lc.freed);
    snprintf(a_paid, sizeof a_paid, "%lld", (long long)lc.paid);
    snprintf(a_to, sizeof a_to, "%lld", (long long)lc.timedout);
    snprintf(a_stock, sizeof a_stock, "%lld", (long long)stock);
    snprintf(a_begin, sizeof a_begin, "%lld", (long long)res->begin);
    snprintf(a_end, sizeof a_end, "%lld", (long long)res->end);
    snprintf(a_ep, sizeof a_ep, "%lld", (long long)res->epoch);
    snprintf(a_seeded, sizeof a_seeded, "%lld", (long long)(seeded > 0 ? seeded : 0));
    snprintf(a_k, sizeof a_k, "%d", k);
    /* the room lives in bucket 0's hash (a room voucher has no other buckets) */
    snprintf(a_rr, sizeof a_rr, "%lld", (long long)(b == 0 ? res->room_r : 0));
    snprintf(a_rt, sizeof a_rt, "%d", res->room_ttl);
    snprintf(a_rg, sizeof a_rg, "%d", res->room_gate ? 1 : 0);
    const char *argv[] = {"EVAL", script_rebuild_lua, "7", kv, kb, ks, kl, kt, ko, kto,
                          token, a_stock, a_begin, a_end, a_ep, a_seeded, KEY_GROUP, a_k,
                          a_ret, a_rr, a_rt, a_rg, a_paid, a_to, a_freed};
    r = rconn_cmd(bc, why, sizeof why, (int)(sizeof argv / sizeof argv[0]), argv, NULL);
    int64_t out = -2;
    if (!r || rconn_int(r, &out) != 0) {
        snprintf(err, errlen, "rebuild.lua: %s", r ? "unexpected reply" : why);
        if (r)
            freeReplyObject(r);
        return REBUILD_ERR;
    }
    freeReplyObject(r);
    if (out == 1)
        return REBUILD_DONE;
    if (out == 0) {
        if (b > 0)
            log_error("rebuild: voucher %lld: bucket %d was back already; its stock and the "
                      "share rebuilt for the others may add up to more than SQL's",
                      (long long)vid, b);
        return b == 0 ? REBUILD_PRESENT : REBUILD_DONE;
    }
    return REBUILD_BUSY;   /* the lock expired under us: someone else owns the rebuild */
}

/* 16 random hex digits into hex[17]. */
static void random_hex(char hex[17])
{
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t t = (uint64_t)time(NULL) ^ (uint64_t)clock();
        memcpy(rnd, &t, sizeof rnd);
    }
    for (int i = 0; i < 8; i++)
        snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
}

/* After a rebuild published: a new token in KEY_REBUILT (on g, the registry's node), so the
 * payment-timeout scans read SQL's unpaid orders from the first again -- the rebuild may
 * have brought back unpaid orders whose timeout Redis had decided and lost with the stream
 * before SQL had it, which a scan cursor already past them would never read again. A
 * failure is logged (those orders then wait for the scanner's next start). */
static void mark_rebuilt(redisContext *g, int64_t vid)
{
    char hex[17], why[256];
    random_hex(hex);
    redisReply *r = rconn_cmdf(g, why, sizeof why, "SET %s %s", KEY_REBUILT, hex);
    if (!r || r->type == REDIS_REPLY_ERROR)
        log_warn("rebuild: voucher %lld: SET %s: %s (the payment-timeout scan is not told to "
                 "read SQL from the start again)", (long long)vid, KEY_REBUILT,
                 r ? r->str : why);
    freeReplyObject(r);
}

/* Step 1's lock: SET kl <token> NX PX with a fresh token (into token). 1 taken, 0 held by
 * another rebuilder, -1 Redis failed (err). */
static int lock_voucher(redisContext *c, const char *kl, const rebuild_opts_t *o, char *token,
                        size_t toklen, char *err, size_t errlen)
{
    char hex[17];
    random_hex(hex);
    snprintf(token, toklen, "%s:%s", o->owner && o->owner[0] ? o->owner : "seckill", hex);
    char why[256];
    redisReply *r = rconn_cmdf(c, why, sizeof why, "SET %s %s NX PX %d", kl, token,
                               o->lock_ttl_ms > 0 ? o->lock_ttl_ms : LOCK_TTL_MS);
    if (!r) {
        snprintf(err, errlen, "SET %s NX: %s", kl, why);
        return -1;
    }
    int got = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    return got;
}

/* Some of a bucketed voucher's buckets lost (a cluster node lost its data), the others
 * kept and selling. The lost ones come back with their home buyers from SQL and the units
 * nobody else accounts for: SQL's initial stock (stock + orders) minus what the kept
 * buckets hold (stock + the units their buyers hold, bucket_sweep_live_units), minus units
 * in transfers not yet applied, minus the units the lost buckets' SQL orders hold (buyers
 * - returned + freed) -- split over the lost buckets as at creation. The generation is not raised: the kept buckets' streams hold entries of the
 * current one. Under the voucher's lock; bucket 0 last if it is among them. */
static int rebuild_partial(redisContext *c, redisContext *g, store_t *st, int64_t vid,
                           const rebuild_opts_t *o, rebuild_result_t *res, char *err,
                           size_t errlen)
{
    int k = res->buckets, rc = REBUILD_ERR, locked = 0;
    unsigned mask = 0, all = (1u << k) - 1, left = 0;
    char kl[64], token[160] = "dry-run";
    pairs_t sql = {0};   /* the lost buckets' buyers */
    rebuild_life_t life = {0};
    int64_t *sids = NULL;   /* the order ids of the lost buckets' surviving streams */
    size_t nsids = 0;
    store_voucher_t v;
    memset(&v, 0, sizeof v);
    if (key_rebuild_lock(kl, sizeof kl, vid) < 0) {
        snprintf(err, errlen, "voucher id %lld out of range", (long long)vid);
        return REBUILD_ERR;
    }
    if (!o->dry_run) {
        int l = lock_voucher(c, kl, o, token, sizeof token, err, errlen);
        if (l <= 0)
            return l < 0 ? REBUILD_ERR : REBUILD_BUSY;
        locked = 1;
    }
    /* again under the lock: someone may have finished meanwhile */
    if (bucket_sweep_present(o->rt, vid, k, &mask, err, errlen) < 0)
        goto out;
    if (mask == all) {
        rc = REBUILD_PRESENT;
        goto out;
    }
    int got = store_voucher_get(st, vid, &v);
    if (got == STORE_NOTFOUND ||
        (got == STORE_OK && !onsale_voucher(v.is_seckill, v.type, v.status))) {
        rc = REBUILD_NOT_SALE;
        goto out;
    }
    int64_t count = 0, stock = 0, live = 0, transit = 0;
    if (got != STORE_OK || store_redis_epoch(st, vid, 0, &res->epoch) != STORE_OK ||
        store_voucher_counts(st, vid, &count, &stock) != STORE_OK) {
        snprintf(err, errlen, "SQL: %s", store_errmsg(st));
        res->sql_failed = 1;
        goto out;
    }
    res->begin = v.begin_time;
    res->end = v.end_time;
    res->initial = stock + count;
    /* the lost buckets' buyers only: the kept ones are in their buckets */
    if (read_sql_orders(st, vid, o->pay_timeout_s, mask, k, &life, err, errlen) != 0) {
        res->sql_failed = 1;
        goto out;
    }
    if (bucket_sweep_live_units(o->rt, vid, k, mask, &live, err, errlen) < 0 ||
        bucket_sweep_in_transit(o->rt, vid, k, &transit, err, errlen) < 0)
        goto out;
    /* a lost bucket whose stream outlived its hash (the hash alone gone): its orders and
     * decisions SQL does not have yet are there */
    if (streams_left(c, o, vid, k, all & ~mask, &left, err, errlen) != 0 ||
        read_streams(c, o, vid, k, left, res->epoch, &life, &sids, &nsids, err, errlen) != 0)
        goto out;
    res->stream_survived = left != 0;
    int nlost = 0;
    for (int b = 0; b < k; b++) {
        if (mask & (1u << b))
            continue;
        nlost++;
        if (keep_states(c, o, vid, b, k, &life, err, errlen) != 0)
            goto out;
    }
    rebuild_life_buyers(&life, &sql);
    count_states(&life, k, all & ~mask, &sql, sids, nsids, res);
    /* a cancelled buyer of a lost bucket holds no unit (its `returned`); a freed one is no
     * buyer by that order but counts in `returned` all the same (its `freed`) */
    res->stock = res->initial - live - transit - (res->buyers - res->returned + res->freed);
    plan(o, "voucher %lld: %d of its %d stock buckets lost: SQL stock %lld + %lld orders = "
            "initial %lld; the kept buckets hold %lld (stock + units sold), %lld in transfers; "
            "the lost ones get %lld units and their %lld buyers (%lld with an SQL order, "
            "%lld entries of their surviving streams not yet in SQL)",
         (long long)vid, nlost, k, (long long)stock, (long long)count, (long long)res->initial,
         (long long)live, (long long)transit, (long long)res->stock, (long long)res->buyers,
         (long long)res->from_sql, (long long)res->from_stream);
    if (res->stock < 0) {
        log_error("rebuild: voucher %lld: the kept buckets and SQL account for %lld units more "
                  "than its initial stock %lld: the lost buckets get stock 0",
                  (long long)vid, (long long)-res->stock, (long long)res->initial);
        res->stock = 0;
    }
    if (o->dry_run) {
        rc = REBUILD_DONE;
        goto out;
    }
    rc = REBUILD_DONE;
    pairs_t none = {0};
    for (int b = k - 1, i = nlost - 1; b >= 0 && rc == REBUILD_DONE; b--) {
        if (mask & (1u << b))
            continue;
        pairs_t ba = {0};
        home_split(&sql, b, k, &ba);
        rc = publish_bucket(c, g, o, vid, b, res, &ba, &none, &life,
                            buckets_share(res->stock, i--, nlost),
                            seeded_orders(&life, b, k, sids, nsids), token, err, errlen);
        if (b == 0)
            locked = 0;   /* bucket 0's script released it */
        pairs_free(&ba);
    }
    /* The registry (seckill:streams) may have gone with the lost node: the kept buckets'
     * streams are listed again too, or no writer would read them. */
    for (int b = 0; b < k && rc == REBUILD_DONE; b++) {
        char mem[48], why[256];
        if (!(mask & (1u << b)))
            continue;
        key_bmember(mem, sizeof mem, NULL, 0, vid, b, k);
        redisReply *r = rconn_cmdf(g, why, sizeof why, "SADD %s %s", KEY_STREAMS, mem);
        if (!r) {
            snprintf(err, errlen, "SADD %s: %s", KEY_STREAMS, why);
            rc = REBUILD_ERR;
        }
        freeReplyObject(r);
    }
    if (rc == REBUILD_DONE)
        mark_rebuilt(g, vid);
out:
    if (locked)
        unlock(c, kl, token);
    store_voucher_clear(&v);
    pairs_free(&sql);
    rebuild_life_free(&life);
    free(sids);
    return rc;
}

int rebuild_voucher(redisContext *c, redisContext *g, store_t *st, int64_t vid,
                    const rebuild_opts_t *o, rebuild_result_t *res, char *err, size_t errlen)
{
    if (!g)
        g = c;
    memset(res, 0, sizeof *res);
    res->voucher_id = vid;
    char kv[64], kb[64], ks[64], kl[64], kt[80], token[160];
    if (key_voucher(kv, sizeof kv, vid) < 0 || key_buyers(kb, sizeof kb, vid) < 0 ||
        key_stream(ks, sizeof ks, vid) < 0 || key_rebuild_lock(kl, sizeof kl, vid) < 0 ||
        key_rebuild_buyers(kt, sizeof kt, vid) < 0) {
        snprintf(err, errlen, "voucher id %lld out of range", (long long)vid);
        return REBUILD_ERR;
    }
    /* K from SQL first: a bucketed voucher is present only with every bucket */
    if (store_voucher_buckets(st, vid, &res->buckets) != STORE_OK) {
        snprintf(err, errlen, "SQL stock buckets: %s", store_errmsg(st));
        res->sql_failed = 1;
        return REBUILD_ERR;
    }
    store_room_t room;
    if (store_voucher_room(st, vid, &room) != STORE_OK) {
        snprintf(err, errlen, "SQL waiting room: %s", store_errmsg(st));
        res->sql_failed = 1;
        return REBUILD_ERR;
    }
    res->room_r = room.admit_per_s;
    res->room_ttl = room.pass_ttl_s;
    res->room_gate = room.bot_gate;
    if (!o->rt)
        res->buckets = 1;   /* no way to the other buckets' nodes: bucket 0 alone */
    if (res->buckets > 1) {
        unsigned mask = 0, all = (1u << res->buckets) - 1;
        if (bucket_sweep_present(o->rt, vid, res->buckets, &mask, err, errlen) < 0)
            return REBUILD_ERR;
        if (mask == all)
            return REBUILD_PRESENT;
        if (mask != 0)
            return rebuild_partial(c, g, st, vid, o, res, err, errlen);
    } else if (o->rt) {
        int a = bucket_sweep_rebuild_allowed(o->rt, vid, err, errlen);
        if (a <= 0)
            return a < 0 ? REBUILD_ERR : REBUILD_REFUSED;
    }
    int p = rebuild_present(c, vid, err, errlen);
    if (p < 0)
        return REBUILD_ERR;
    if (p == 1)
        return REBUILD_PRESENT;

    /* 1. the lock */
    int locked = 0;
    if (!o->dry_run) {
        int l = lock_voucher(c, kl, o, token, sizeof token, err, errlen);
        if (l <= 0)
            return l < 0 ? REBUILD_ERR : REBUILD_BUSY;
        locked = 1;
        /* Someone may have finished between our look and the lock. */
        p = rebuild_present(c, vid, err, errlen);
        if (p != 0) {
            unlock(c, kl, token);
            return p < 0 ? REBUILD_ERR : REBUILD_PRESENT;
        }
    }

    int rc = REBUILD_ERR;
    pairs_t sql = {0};   /* the buyers (rebuild_life_buyers) */
    rebuild_life_t life = {0};
    int64_t *sids = NULL;
    size_t nsids = 0;

    /* 2. the voucher, the stream, the generation */
    store_voucher_t v;
    memset(&v, 0, sizeof v);
    int got = store_voucher_get(st, vid, &v);
    if (got == STORE_NOTFOUND ||
        (got == STORE_OK && !onsale_voucher(v.is_seckill, v.type, v.status))) {
        rc = REBUILD_NOT_SALE;
        goto out;
    }
    if (got != STORE_OK) {
        snprintf(err, errlen, "SQL voucher: %s", store_errmsg(st));
        res->sql_failed = 1;
        goto out;
    }
    res->begin = v.begin_time;
    res->end = v.end_time;
    /* every bucket's stream: one that survived holds entries of the current generation,
     * which a raised one would fence */
    unsigned left = 0;
    if (streams_left(c, o, vid, res->buckets, (1u << res->buckets) - 1, &left, err,
                     errlen) != 0)
        goto out;
    res->stream_survived = left != 0;
    int bump = !res->stream_survived;
    int e = store_redis_epoch(st, vid, bump && !o->dry_run, &res->epoch);
    if (e != STORE_OK) {
        if (e == STORE_NOTFOUND)
            rc = REBUILD_NOT_SALE;
        else
            snprintf(err, errlen, "SQL epoch: %s", store_errmsg(st));
        res->sql_failed = 1;
        goto out;
    }
    if (bump && o->dry_run)
        res->epoch++;
    if (bump)
        plan(o, "voucher %lld: the order stream%s empty or gone: Redis generation %lld -> "
                "%lld in SQL (orders of the lost state a writer still holds are refused)",
             (long long)vid, res->buckets > 1 ? "s of every bucket are" : " is",
             (long long)res->epoch - 1, (long long)res->epoch);

    /* 3. SQL at one moment, its orders, the surviving stream */
    int64_t count = 0, stock = 0;
    if (store_voucher_counts(st, vid, &count, &stock) != STORE_OK) {
        snprintf(err, errlen, "SQL counts: %s", store_errmsg(st));
        res->sql_failed = 1;
        goto out;
    }
    res->initial = stock + count;
    if (read_sql_orders(st, vid, o->pay_timeout_s, 0, 1, &life, err, errlen) != 0) {
        res->sql_failed = 1;
        goto out;
    }
    /* the orders and decisions SQL does not have yet: the surviving streams' entries and
     * events, and the state hashes if they outlived the voucher hash (rebuild_life.h) */
    if (read_streams(c, o, vid, res->buckets, left, res->epoch, &life, &sids, &nsids, err,
                     errlen) != 0)
        goto out;
    for (int bk = 0; bk < res->buckets; bk++)
        if (keep_states(c, o, vid, bk, res->buckets, &life, err, errlen) != 0)
            goto out;
    /* one buyer per user: the order not freed (a freed buyer who did not buy again is none) */
    rebuild_life_buyers(&life, &sql);
    count_states(&life, res->buckets, (1u << res->buckets) - 1, &sql, sids, nsids, res);
    /* a cancelled order's buyer stays in the buyers hash (one order per user) but holds no
     * unit: it counts in the voucher hash's `returned` (life.lua); a freed buyer's order
     * counts there too but its buyer left the hash (`freed`) */
    res->stock = res->initial - (res->buyers - res->returned + res->freed);
    if (res->stock < 0) {
        log_error("rebuild: voucher %lld: %lld buyers for an initial stock of %lld: "
                  "publishing stock 0", (long long)vid, (long long)res->buyers,
                  (long long)res->initial);
        res->stock = 0;
    }
    plan(o, "voucher %lld: SQL stock %lld + %lld orders = initial %lld; buyers %lld (%lld "
            "with an SQL order, %lld stream entries not yet in SQL); Redis stock %lld",
         (long long)vid, (long long)stock, (long long)count, (long long)res->initial,
         (long long)res->buyers, (long long)res->from_sql, (long long)res->from_stream,
         (long long)res->stock);
    plan(o, "voucher %lld: order states: %lld returned (cancelled, timed out, refunded), "
            "%lld paid, %lld timed out, %lld freed their buyer; %lld of them from stream "
            "events SQL lacks",
         (long long)vid, (long long)res->returned, (long long)res->paid,
         (long long)res->timedout, (long long)res->freed, (long long)res->events);
    if (res->buckets > 1)
        plan(o, "voucher %lld: %d stock buckets (SQL): each gets its share of the stock and "
                "its home buyers, bucket 0 last", (long long)vid, res->buckets);
    plan(o, "  HSET %s <%lld buyers>, then RENAME to %s", kt, (long long)res->buyers, kb);
    plan(o, "  SADD %s %lld", KEY_STREAMS, (long long)vid);
    plan(o, "  XGROUP CREATE %s %s 0 MKSTREAM", ks, KEY_GROUP);
    plan(o, "  HSET %s begin %lld end %lld ep %lld seeded %lld stock %lld", kv,
         (long long)res->begin, (long long)res->end, (long long)res->epoch,
         (long long)res->seeded, (long long)res->stock);
    if (res->room_r > 0)
        plan(o, "  HSET %s room_r %lld room_ttl %d room_gate %d (its waiting room, SQL)", kv,
             (long long)res->room_r, res->room_ttl, res->room_gate);
    if (o->dry_run) {
        rc = REBUILD_DONE;
        goto out;
    }

    /* 4. write: buckets 1..K-1 first, bucket 0 (the voucher's own keys) last */
    rc = REBUILD_DONE;
    for (int bk = res->buckets - 1; bk >= 0 && rc == REBUILD_DONE; bk--) {
        pairs_t ba = {0}, none = {0};
        home_split(&sql, bk, res->buckets, &ba);
        int64_t share = buckets_share(res->stock, bk, res->buckets);
        rc = publish_bucket(c, g, o, vid, bk, res, &ba, &none, &life, share,
                            seeded_orders(&life, bk, res->buckets, sids, nsids), token, err,
                            errlen);
        pairs_free(&ba);
    }
    locked = 0;   /* the script released it (or it was no longer ours) */
    if (rc == REBUILD_DONE)
        mark_rebuilt(g, vid);
out:
    if (locked)
        unlock(c, kl, token);
    store_voucher_clear(&v);
    pairs_free(&sql);
    rebuild_life_free(&life);
    free(sids);
    return rc;
}
