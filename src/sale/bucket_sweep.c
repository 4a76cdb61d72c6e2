/* bucket_sweep.c -- stock buckets off the hot path: registry, sweep of cut-short
 * transfers, the rebuild rule, units in transit (see bucket_sweep.h). */
#include "sale/bucket_sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "embedded.h"
#include "core/key.h"
#include "core/log.h"
#include "redis/rconn.h"
#include "core/xmem.h"

int bucket_sweep_registry(rcl_sync_route_t *rt, bks_voucher_t **out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    redisContext *c = rcl_sync_route_key(rt, KEY_STREAMS, err, errlen);
    if (c == NULL)
        return -1;
    redisReply *r = rconn_cmdf(c, err, errlen, "SMEMBERS %s", KEY_STREAMS);
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        snprintf(err, errlen, "SMEMBERS %s: unexpected reply", KEY_STREAMS);
        return -1;
    }
    bks_voucher_t *v = NULL;
    size_t nv = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        int64_t vid;
        int b, k;
        if (e->type != REDIS_REPLY_STRING || key_bmember_parse(e->str, e->len, &vid, &b, &k) != 0)
            continue;
        size_t j = 0;
        while (j < nv && v[j].voucher_id != vid)
            j++;
        if (j < nv)
            continue;
        v = xrealloc(v, (nv + 1) * sizeof *v);
        v[nv].voucher_id = vid;
        v[nv].k = k;
        nv++;
    }
    freeReplyObject(r);
    *out = v;
    *n = nv;
    return 0;
}

/* The context and a key of bucket b: which = 'v' voucher hash, 'l' log, 'a' applied. */
static redisContext *bucket_key(rcl_sync_route_t *rt, int64_t vid, int b, int k, int which,
                                char *key, size_t keylen, char *err, size_t errlen)
{
    char tag[48];
    int n = key_btag(tag, sizeof tag, vid, b, k);
    if (n >= 0)
        n = which == 'v' ? key_voucher_t(key, keylen, tag)
            : which == 'l' ? key_xfer_log(key, keylen, tag) : key_xfer_applied(key, keylen, tag);
    if (n < 0) {
        snprintf(err, errlen, "voucher %lld bucket %d: key out of range", (long long)vid, b);
        return NULL;
    }
    return rcl_sync_route_key(rt, key, err, errlen);
}

/* EVAL src/sale/transfer.lua on bucket b (voucher hash + its log or applied set). */
static redisReply *transfer(rcl_sync_route_t *rt, int64_t vid, int b, int k, int second,
                            const char *step, const char *a2, const char *a3, char *err,
                            size_t errlen)
{
    char kv[64], k2[80];
    redisContext *c = bucket_key(rt, vid, b, k, 'v', kv, sizeof kv, err, errlen);
    if (c == NULL || bucket_key(rt, vid, b, k, second, k2, sizeof k2, err, errlen) == NULL)
        return NULL;
    const char *argv[8] = { "EVAL", script_transfer_lua, "2", kv, k2, step, a2, a3 };
    return rconn_cmd(c, err, errlen, a3 ? 8 : 7, argv, NULL);
}

/* --redis-wait-replicas: 1 if wr replicas of the node of bucket b have everything it
 * did so far (WAIT), 0 if not (or wr is 0: 1). */
static int replicated(rcl_sync_route_t *rt, int64_t vid, int b, int k, const bks_wait_t *wt)
{
    if (wt == NULL || wt->replicas <= 0)
        return 1;
    char kv[64], err[128];
    redisContext *c = bucket_key(rt, vid, b, k, 'v', kv, sizeof kv, err, sizeof err);
    redisReply *r = c ? rconn_cmdf(c, err, sizeof err, "WAIT %d %d", wt->replicas,
                                   wt->timeout_ms > 0 ? wt->timeout_ms : 1) : NULL;
    int64_t n = 0;
    if (r)
        rconn_int(r, &n);
    freeReplyObject(r);
    return n >= wt->replicas;
}

int bucket_sweep_voucher(rcl_sync_route_t *rt, int64_t vid, int k, int stale_ms, const bks_wait_t *wt,
                         char *err, size_t errlen)
{
    int finished = 0;
    char age[16];
    snprintf(age, sizeof age, "%d", stale_ms);
    for (int d = 0; d < k; d++) {
        redisReply *r = transfer(rt, vid, d, k, 'l', "stale", age, NULL, err, errlen);
        if (r == NULL)
            return -1;
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && !replicated(rt, vid, d, k, wt)) {
            freeReplyObject(r);   /* the takes are not on the replicas yet: next pass */
            continue;
        }
        for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 2 < r->elements; i += 3) {
            const redisReply *xid = r->element[i], *recv = r->element[i + 1],
                             *units = r->element[i + 2];
            int64_t rb = -1;
            if (xid->type != REDIS_REPLY_STRING || rconn_int(recv, &rb) != 0 || rb < 0 ||
                rb >= k || units->type != REDIS_REPLY_STRING)
                continue;
            redisReply *a = transfer(rt, vid, (int)rb, k, 'a', "apply", xid->str, units->str,
                                     err, errlen);
            if (a == NULL) {
                freeReplyObject(r);
                return -1;
            }
            int64_t res = 0;
            rconn_int(a, &res);
            freeReplyObject(a);
            if (res >= 0 && !replicated(rt, vid, (int)rb, k, wt))
                continue;   /* applied, not yet on the replicas: the entry stays */
            if (res >= 0) {
                char kl[80];
                redisContext *c = bucket_key(rt, vid, d, k, 'l', kl, sizeof kl, err, errlen);
                redisReply *h = c ? rconn_cmdf(c, err, errlen, "HDEL %s %s", kl, xid->str) : NULL;
                if (h == NULL) {
                    freeReplyObject(r);
                    return -1;
                }
                freeReplyObject(h);
                log_warn("voucher %lld: transfer %s of %s units from bucket %d to %lld was cut "
                         "short; finished by the sweep%s", (long long)vid, xid->str, units->str,
                         d, (long long)rb, res == 0 ? " (it had been applied)" : "");
            } else {
                redisReply *cn = transfer(rt, vid, d, k, 'l', "cancel", xid->str, NULL, err,
                                          errlen);
                if (cn == NULL) {
                    freeReplyObject(r);
                    return -1;
                }
                freeReplyObject(cn);
                log_warn("voucher %lld: transfer %s from bucket %d: bucket %lld has no voucher "
                         "hash (data lost?); its %s units went back to bucket %d",
                         (long long)vid, xid->str, d, (long long)rb, units->str, d);
            }
            finished++;
        }
        freeReplyObject(r);
    }
    return finished;
}

int bucket_sweep_all(rcl_sync_route_t *rt, const bks_wait_t *wt)
{
    char err[256];
    bks_voucher_t *v = NULL;
    size_t n = 0;
    int total = 0;
    if (bucket_sweep_registry(rt, &v, &n, err, sizeof err) != 0) {
        log_warn("bucket sweep: %s", err);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int done =
            bucket_sweep_voucher(rt, v[i].voucher_id, v[i].k, BKS_STALE_MS, wt, err, sizeof err);
        if (done < 0)
            log_warn("bucket sweep: voucher %lld: %s", (long long)v[i].voucher_id, err);
        else
            total += done;
    }
    free(v);
    return total;
}

/* 1 if the hash of bucket b of k has a stock field, 0 if not, -1 (err) on failure. */
static int bucket_present(rcl_sync_route_t *rt, int64_t vid, int b, int k, char *kv, size_t kvlen,
                          char *err, size_t errlen)
{
    redisContext *c = bucket_key(rt, vid, b, k, 'v', kv, kvlen, err, errlen);
    redisReply *r = c ? rconn_cmdf(c, err, errlen, "HEXISTS %s stock", kv) : NULL;
    if (r == NULL)
        return -1;
    int64_t x = 0;
    rconn_int(r, &x);
    freeReplyObject(r);
    return x != 0;
}

int bucket_sweep_present(rcl_sync_route_t *rt, int64_t vid, int k, unsigned *mask, char *err,
                         size_t errlen)
{
    char kv[64];
    *mask = 0;
    for (int b = 0; b < k && b < KEY_BUCKETS_MAX; b++) {
        int p = bucket_present(rt, vid, b, k, kv, sizeof kv, err, errlen);
        if (p < 0)
            return -1;
        if (p)
            *mask |= 1u << b;
    }
    return 0;
}

int bucket_sweep_live_units(rcl_sync_route_t *rt, int64_t vid, int k, unsigned mask, int64_t *units,
                            char *err, size_t errlen)
{
    *units = 0;
    for (int b = 0; b < k && b < KEY_BUCKETS_MAX; b++) {
        if (!(mask & (1u << b)))
            continue;
        char tag[48], kv[64], kb[64];
        if (key_btag(tag, sizeof tag, vid, b, k) < 0 || key_voucher_t(kv, sizeof kv, tag) < 0 ||
            key_buyers_t(kb, sizeof kb, tag) < 0) {
            snprintf(err, errlen, "voucher %lld bucket %d: key out of range", (long long)vid, b);
            return -1;
        }
        redisContext *c = rcl_sync_route_key(rt, kv, err, errlen);
        if (c == NULL)
            return -1;
        /* one moment: an admission moves a unit from stock to buyers atomically, a
         * cancel or timeout (life.lua) gives it back to stock and counts the buyer in
         * `returned` -- a buyer holds a unit unless returned; a cancel that freed its
         * buyer (--cancel-frees-buyer, whatever the flag is now) also took the buyer out
         * of the hash and counted it in `freed`: the orders are the buyers plus freed */
        redisReply *r = rconn_cmdf(c, err, errlen,
                                   "EVAL %s 2 %s %s",
                                   "return {redis.call('HGET', KEYS[1], 'stock') or '0', "
                                   "redis.call('HLEN', KEYS[2]), "
                                   "redis.call('HGET', KEYS[1], 'returned') or '0', "
                                   "redis.call('HGET', KEYS[1], 'freed') or '0'}",
                                   kv, kb);
        if (r == NULL)
            return -1;
        int64_t st = 0, n = 0, ret = 0, freed = 0;
        int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
                 rconn_int(r->element[0], &st) == 0 && rconn_int(r->element[1], &n) == 0 &&
                 rconn_int(r->element[2], &ret) == 0 && rconn_int(r->element[3], &freed) == 0;
        freeReplyObject(r);
        if (!ok) {
            snprintf(err, errlen, "bucket %d of voucher %lld: unexpected reply", b, (long long)vid);
            return -1;
        }
        *units += st + n - ret + freed;
    }
    return 0;
}

/* Every possible bucket (K = 2..KEY_BUCKETS_MAX, b = 1..K-1) is probed, not only the K
 * the registry names: the registry lives on one node, which may be the one that lost
 * its data. Rebuilds are rare; 120 HEXISTS are nothing beside one. */
int bucket_sweep_rebuild_allowed(rcl_sync_route_t *rt, int64_t vid, char *err, size_t errlen)
{
    char kv[64];
    int p = bucket_present(rt, vid, 0, 1, kv, sizeof kv, err, errlen);
    if (p != 0)
        return p < 0 ? -1 : 1;   /* bucket 0 is there: the rebuild finds it present */
    for (int k = 2; k <= KEY_BUCKETS_MAX; k++)
        for (int b = 1; b < k; b++) {
            p = bucket_present(rt, vid, b, k, kv, sizeof kv, err, errlen);
            if (p < 0)
                return -1;
            if (p) {
                snprintf(err, errlen, "bucket %d of %d still holds its stock (%s): "
                         "rebuilding bucket 0 from SQL would sell that stock twice", b, k, kv);
                return 0;
            }
        }
    return 1;
}

int bucket_sweep_in_transit(rcl_sync_route_t *rt, int64_t vid, int k, int64_t *units, char *err,
                            size_t errlen)
{
    *units = 0;
    for (int d = 0; d < k; d++) {
        char kl[80];
        redisContext *c = bucket_key(rt, vid, d, k, 'l', kl, sizeof kl, err, errlen);
        redisReply *r = c ? rconn_cmdf(c, err, errlen, "HGETALL %s", kl) : NULL;
        if (r == NULL)
            return -1;
        for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
            const redisReply *xid = r->element[i], *val = r->element[i + 1];
            int rb = -1;
            long long n = 0;
            if (xid->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING ||
                sscanf(val->str, "%d %lld", &rb, &n) != 2 || rb < 0 || rb >= k)
                continue;
            char ka[80];
            redisContext *ca = bucket_key(rt, vid, rb, k, 'a', ka, sizeof ka, err, errlen);
            redisReply *m = ca ? rconn_cmdf(ca, err, errlen, "SISMEMBER %s %s", ka, xid->str)
                               : NULL;
            if (m == NULL) {
                freeReplyObject(r);
                return -1;
            }
            int64_t applied = 0;
            rconn_int(m, &applied);
            freeReplyObject(m);
            if (!applied)
                *units += n;
        }
        freeReplyObject(r);
    }
    return 0;
}
