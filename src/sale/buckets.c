/* buckets.c -- stock buckets on a worker: the route cache, learning K, refills (transfers
 * between buckets) and publishing (see buckets.h).
 *
 * Transfers are rare (a handful per bucket and sale: each takes at least half of what
 * the donor holds), so src/sale/transfer.lua goes as EVAL with its text rather than a
 * preloaded SHA. */
#include "sale/buckets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "core/clock.h"
#include "embedded.h"
#include "http/http_req.h"
#include "core/log.h"
#include "server/metrics.h"
#include "sale/orderid.h"
#include "redis/rds.h"
#include "sale/vcache.h"
#include "server/worker.h"
#include "core/xmem.h"

#define ROUTE_SLOTS 256u

typedef struct waiter {
    void (*done)(void *priv, int64_t rc);
    void *priv;
} waiter_t;

/* One refill in flight: a scan of the donors home+1, home+2, ... until one gives units. */
typedef struct refill {
    struct bk_cache *bc;
    struct refill *next;
    worker_t *w;
    int64_t voucher_id;
    bk_route_t rt;
    int home;
    int step;                     /* current donor: (home + step) % k */
    int inflight;                 /* some donor had transfers in its log */
    int64_t units;
    char xid[24];
    waiter_t *wait;
    int nwait, capwait;
} refill_t;

struct bk_cache {
    vcache_t *routes;             /* voucher -> bk_route_t, for BK_ROUTE_TTL_MS */
    refill_t *refills;
};

bk_cache_t *bk_cache_new(void)
{
    bk_cache_t *bc = xcalloc(1, sizeof(bk_cache_t));
    bc->routes = vcache_new(ROUTE_SLOTS, sizeof(bk_route_t));
    return bc;
}

void bk_cache_free(bk_cache_t *bc)
{
    if (bc == NULL)
        return;
    vcache_free(bc->routes);
    free(bc);   /* refills hold admission contexts, so none is left when this runs */
}

/* ------------------------------------------------------------ arithmetic */

int bk_home(int64_t user_id, int k)
{
    if (k <= 1)
        return 0;
    uint64_t z = (uint64_t)user_id + UINT64_C(0x9e3779b97f4a7c15);   /* splitmix64 */
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    z ^= z >> 31;
    return (int)(z % (uint64_t)k);
}

int64_t bk_share(int64_t stock, int b, int k)
{
    if (k <= 1)
        return stock;
    return stock / k + (b < stock % k ? 1 : 0);
}

int bk_keys(int64_t voucher_id, int b, unsigned salt, char *kv, char *kb, char *ks, int *lv,
            int *lb, int *ls)
{
    char tag[48];
    if (key_btag_salt(tag, sizeof tag, voucher_id, b, salt) < 0)
        return -1;
    *lv = key_voucher_t(kv, 64, tag);
    *lb = key_buyers_t(kb, 64, tag);
    *ls = key_stream_t(ks, 64, tag);
    return *lv < 0 || *lb < 0 || *ls < 0 ? -1 : 0;
}

/* ------------------------------------------------------------ route cache */

void bk_route_fill(bk_route_t *rt, int64_t voucher_id, int k)
{
    memset(rt, 0, sizeof *rt);
    rt->k = k < 1 ? 1 : k > BK_MAX ? BK_MAX : k;
    for (int b = 1; b < rt->k; b++)
        rt->salt[b] = (uint16_t)key_bsalt(voucher_id, b, rt->k);
}

const bk_route_t *bk_lookup(bk_cache_t *bc, int64_t voucher_id, uint64_t now_ms)
{
    return vcache_get(bc->routes, voucher_id, now_ms);
}

void bk_forget(bk_cache_t *bc, int64_t voucher_id)
{
    vcache_drop(bc->routes, voucher_id);
}

static void route_put(bk_cache_t *bc, int64_t voucher_id, int k)
{
    bk_route_fill(vcache_put(bc->routes, voucher_id, clock_now_ms() + BK_ROUTE_TTL_MS),
                  voucher_id, k);
}

/* ------------------------------------------------------------ learning K */

typedef struct learn {
    bk_cache_t *bc;
    int64_t voucher_id;
    void (*done)(void *priv, int k);
    void *priv;
} learn_t;

static void on_learn(struct redisReply *rep, void *priv)
{
    learn_t *l = priv;
    int k = -1;
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2) {
        const redisReply *st = rep->element[0], *kb = rep->element[1];
        if (st->type != REDIS_REPLY_STRING) {
            k = 0;
        } else if (kb->type != REDIS_REPLY_STRING) {
            k = 1;
        } else {
            long long x = strtoll(kb->str, NULL, 10);
            k = x >= 2 && x <= BK_MAX ? (int)x : 1;
            if (x < 1 || x > BK_MAX)
                log_error("voucher %lld: field buckets = %.20s is out of range 1..%d: "
                          "sold as unbucketed", (long long)l->voucher_id, kb->str, BK_MAX);
        }
    }
    if (k >= 1)
        route_put(l->bc, l->voucher_id, k);
    void (*done)(void *, int) = l->done;
    void *p = l->priv;
    free(l);
    done(p, k);
}

void bk_learn(worker_t *w, bk_cache_t *bc, int64_t voucher_id,
              void (*done)(void *priv, int k), void *priv)
{
    char kv[64];
    int lv = key_voucher(kv, sizeof kv, voucher_id);
    if (lv < 0) {
        done(priv, -1);
        return;
    }
    learn_t *l = xmalloc(sizeof *l);
    l->bc = bc;
    l->voucher_id = voucher_id;
    l->done = done;
    l->priv = priv;
    const char *argv[4] = { "HMGET", kv, "stock", "buckets" };
    size_t lens[4] = { 5, (size_t)lv, 5, 7 };
    rds_command(w->rds, on_learn, l, 4, argv, lens);
}

/* ------------------------------------------------------------ refills */

static void refill_take(refill_t *f);

/* Detaches f, then tells every waiter (they may start new refills). */
static void refill_done(refill_t *f, int64_t rc)
{
    bk_cache_t *bc = f->bc;
    for (refill_t **pp = &bc->refills; *pp != NULL; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    waiter_t *wait = f->wait;
    int n = f->nwait;
    free(f);
    for (int i = 0; i < n; i++)
        wait[i].done(wait[i].priv, rc);
    free(wait);
}

static int transfer_eval(worker_t *w, int64_t vid, int b, unsigned salt, int log_key,
                         const char *step, const char *a2, const char *a3, const char *a4,
                         void (*cb)(struct redisReply *, void *), void *priv)
{
    char tag[48], kv[64], k2[80];
    if (key_btag_salt(tag, sizeof tag, vid, b, salt) < 0)
        return -1;
    int lv = key_voucher_t(kv, sizeof kv, tag);
    int l2 = log_key ? key_xfer_log(k2, sizeof k2, tag) : key_xfer_applied(k2, sizeof k2, tag);
    if (lv < 0 || l2 < 0)
        return -1;
    const char *argv[9] = { "EVAL", script_transfer_lua, "2", kv, k2, step, a2, a3, a4 };
    size_t lens[9] = { 4, strlen(script_transfer_lua), 1, (size_t)lv, (size_t)l2, strlen(step),
                       strlen(a2), strlen(a3), a4 ? strlen(a4) : 0 };
    rds_command(w->rds, cb, priv, a4 ? 9 : 8, argv, lens);
    return 0;
}

/* --redis-wait-replicas: a transfer step counts only once the replicas have it, else a
 * failover could undo one side of it and not the other (the take undone after the apply
 * landed would create units). WAIT goes to the node of bucket b. */
static void xfer_wait(refill_t *f, int b, void (*cb)(struct redisReply *, void *))
{
    char tag[48], kv[64], n[16], t[16];
    int tmo = f->w->app->cfg.redis_timeout_ms / 2;
    int lv = key_btag_salt(tag, sizeof tag, f->voucher_id, b, f->rt.salt[b]) < 0 ? -1
             : key_voucher_t(kv, sizeof kv, tag);
    if (lv < 0) {
        cb(NULL, f);
        return;
    }
    int ln = snprintf(n, sizeof n, "%d", f->w->app->cfg.redis_wait_replicas);
    int lt = snprintf(t, sizeof t, "%d", tmo > 0 ? tmo : 1);
    const char *argv[3] = { "WAIT", n, t };
    size_t lens[3] = { 4, (size_t)ln, (size_t)lt };
    rds_command_at(f->w->rds, kv, (size_t)lv, cb, f, 3, argv, lens);
}

static int waited(const redisReply *rep, const refill_t *f)
{
    return rep != NULL && rep->type == REDIS_REPLY_INTEGER &&
           rep->integer >= f->w->app->cfg.redis_wait_replicas;
}

/* The last step: the donor's log entry has done its job. If this is lost the sweep
 * replays apply (a no-op) and deletes it. */
static void finish_transfer(refill_t *f)
{
    int d = (f->home + f->step) % f->rt.k;
    char tag[48], kl[80];
    if (key_btag_salt(tag, sizeof tag, f->voucher_id, d, f->rt.salt[d]) >= 0) {
        int ll = key_xfer_log(kl, sizeof kl, tag);
        if (ll >= 0) {
            const char *argv[3] = { "HDEL", kl, f->xid };
            size_t lens[3] = { 4, (size_t)ll, strlen(f->xid) };
            rds_command(f->w->rds, NULL, NULL, 3, argv, lens);
        }
    }
    refill_done(f, f->units);
}

static void on_apply_waited(struct redisReply *rep, void *priv)
{
    refill_t *f = priv;
    if (waited(rep, f)) {
        finish_transfer(f);
        return;
    }
    /* Applied on the master, not known on its replicas: the log entry stays and the sweep
     * applies again later (a no-op, unless a failover lost this apply). */
    refill_done(f, f->units);
}

static void on_apply(struct redisReply *rep, void *priv)
{
    refill_t *f = priv;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1 &&
        f->w->app->metrics != NULL)
        metric_inc(&f->w->app->metrics->bucket_transfers);
    if (rep == NULL || rep->type != REDIS_REPLY_INTEGER || rep->integer < 0) {
        /* Not known to be applied: the donor's log keeps the units and the sweep
         * finishes (or, for a receiver without its hash, cancels) the transfer. */
        if (rep != NULL)
            log_warn("voucher %lld: transfer %s into bucket %d: %s", (long long)f->voucher_id,
                     f->xid, f->home, rep->type == REDIS_REPLY_INTEGER
                     ? "the bucket has no voucher hash" : "unexpected reply");
        refill_done(f, -1);
        return;
    }
    if (f->w->app->cfg.redis_wait_replicas > 0) {
        xfer_wait(f, f->home, on_apply_waited);
        return;
    }
    finish_transfer(f);
}

static void apply(refill_t *f)
{
    char n[24];
    snprintf(n, sizeof n, "%lld", (long long)f->units);
    if (transfer_eval(f->w, f->voucher_id, f->home, f->rt.salt[f->home], 0, "apply", f->xid, n,
                      NULL, on_apply, f) < 0)
        refill_done(f, -1);
}

static void on_take_waited(struct redisReply *rep, void *priv)
{
    refill_t *f = priv;
    if (waited(rep, f)) {
        apply(f);
        return;
    }
    refill_done(f, -1);   /* the units wait in the donor's log for the sweep */
}

static void on_take(struct redisReply *rep, void *priv)
{
    refill_t *f = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_INTEGER ||
        rep->element[1]->type != REDIS_REPLY_INTEGER) {
        /* If the take ran, its units are logged: the sweep moves them. */
        if (rep != NULL)
            log_warn("voucher %lld: transfer take: %.*s", (long long)f->voucher_id,
                     rep->type == REDIS_REPLY_ERROR ? (int)rep->len : 16,
                     rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        refill_done(f, -1);
        return;
    }
    f->units = rep->element[0]->integer;
    if (rep->element[1]->integer > 0)
        f->inflight = 1;
    if (f->units > 0) {
        if (f->w->app->cfg.redis_wait_replicas > 0)
            xfer_wait(f, (f->home + f->step) % f->rt.k, on_take_waited);
        else
            apply(f);
        return;
    }
    if (++f->step < f->rt.k) {
        refill_take(f);
        return;
    }
    refill_done(f, f->inflight ? BK_IN_FLIGHT : 0);
}

static void refill_take(refill_t *f)
{
    int d = (f->home + f->step) % f->rt.k;
    char home[8], want[16];
    snprintf(home, sizeof home, "%d", f->home);
    snprintf(want, sizeof want, "%d", f->nwait);
    if (transfer_eval(f->w, f->voucher_id, d, f->rt.salt[d], 1, "take", f->xid, home, want,
                      on_take, f) < 0)
        refill_done(f, -1);
}

void bk_refill(worker_t *w, bk_cache_t *bc, int64_t voucher_id, const bk_route_t *rt, int home,
               int want, void (*done)(void *priv, int64_t rc), void *priv)
{
    if (bc == NULL || rt == NULL || rt->k < 2 || home < 0 || home >= rt->k) {
        done(priv, -1);
        return;
    }
    for (refill_t *f = bc->refills; f != NULL; f = f->next)
        if (f->voucher_id == voucher_id && f->home == home) {
            if (f->nwait == f->capwait) {
                f->capwait *= 2;
                f->wait = xrealloc(f->wait, (size_t)f->capwait * sizeof *f->wait);
            }
            f->wait[f->nwait++] = (waiter_t){ done, priv };
            return;
        }
    refill_t *f = xcalloc(1, sizeof *f);
    f->bc = bc;
    f->w = w;
    f->voucher_id = voucher_id;
    f->rt = *rt;
    f->home = home;
    f->step = 1;
    f->capwait = want > 4 ? want : 4;
    f->wait = xmalloc((size_t)f->capwait * sizeof *f->wait);
    f->wait[f->nwait++] = (waiter_t){ done, priv };
    snprintf(f->xid, sizeof f->xid, "%lld", (long long)orderid_next(clock_wall_s()));
    f->next = bc->refills;
    bc->refills = f;
    refill_take(f);
}

/* ------------------------------------------------------------ publishing */

typedef struct bpub {
    http_req_t *r;
    void (*done)(http_req_t *r, int ok);
    int left, ok;
    int64_t voucher_id;
} bpub_t;

static void bpub_step(struct redisReply *rep, void *priv)
{
    bpub_t *p = priv;
    int ok = rep != NULL && (rep->type == REDIS_REPLY_INTEGER || rep->type == REDIS_REPLY_STATUS ||
                             (rep->type == REDIS_REPLY_ERROR && rep->len >= 9 &&
                              memcmp(rep->str, "BUSYGROUP", 9) == 0));
    if (!ok) {
        p->ok = 0;
        log_error("publish voucher %lld: a bucket command failed: %.*s", (long long)p->voucher_id,
                  rep != NULL && rep->type == REDIS_REPLY_ERROR ? (int)rep->len : 17,
                  rep != NULL && rep->type == REDIS_REPLY_ERROR ? rep->str : "redis unavailable");
    }
    if (--p->left > 0)
        return;
    http_req_t *r = p->r;
    void (*done)(http_req_t *, int) = p->done;
    int all_ok = p->ok;
    free(p);
    done(r, all_ok);
}

void bk_publish_buckets(http_req_t *r, int64_t voucher_id, int64_t stock, int64_t begin,
                        int64_t end, int k, void (*done)(http_req_t *r, int ok))
{
    worker_t *w = r->w;
    bpub_t *p = xcalloc(1, sizeof *p);
    p->r = r;
    p->done = done;
    p->ok = 1;
    p->voucher_id = voucher_id;
    p->left = 4 * (k - 1) + 1;
    char sk[8], sbe[24], sen[24], kv0[64];
    int lk = snprintf(sk, sizeof sk, "%d", k);
    int l2 = snprintf(sbe, sizeof sbe, "%lld", (long long)begin);
    int l3 = snprintf(sen, sizeof sen, "%lld", (long long)end);
    int l0 = key_voucher(kv0, sizeof kv0, voucher_id);
    /* Every command is sent and answered (a failed key is reported as a failed step), so
     * p lives until the last reply. */
    for (int b = 1; b < k; b++) {
        char kv[64], kb[64], ks[64], mem[48], sst[24];
        int lv, lb, ls;
        if (bk_keys(voucher_id, b, key_bsalt(voucher_id, b, k), kv, kb, ks, &lv, &lb, &ls) < 0) {
            for (int i = 0; i < 4; i++)
                bpub_step(NULL, p);
            continue;
        }
        int lm = key_bmember(mem, sizeof mem, NULL, 0, voucher_id, b, k);
        int l1 = snprintf(sst, sizeof sst, "%lld", (long long)bk_share(stock, b, k));
        const char *xg[6] = { "XGROUP", "CREATE", ks, KEY_GROUP, "0", "MKSTREAM" };
        size_t xgl[6] = { 6, 6, (size_t)ls, strlen(KEY_GROUP), 1, 8 };
        const char *sa[3] = { "SADD", KEY_STREAMS, mem };
        size_t sal[3] = { 4, strlen(KEY_STREAMS), (size_t)lm };
        const char *hs[8] = { "HSET", kv, "begin", sbe, "end", sen, "buckets", sk };
        size_t hsl[8] = { 4, (size_t)lv, 5, (size_t)l2, 3, (size_t)l3, 7, (size_t)lk };
        const char *hn[4] = { "HSETNX", kv, "stock", sst };
        size_t hnl[4] = { 6, (size_t)lv, 5, (size_t)l1 };
        rds_command(w->rds, bpub_step, p, 6, xg, xgl);
        rds_command(w->rds, bpub_step, p, 3, sa, sal);
        rds_command(w->rds, bpub_step, p, 8, hs, hsl);
        rds_command(w->rds, bpub_step, p, 4, hn, hnl);
    }
    if (l0 < 0) {
        bpub_step(NULL, p);
        return;
    }
    const char *hb[4] = { "HSET", kv0, "buckets", sk };
    size_t hbl[4] = { 4, (size_t)l0, 7, (size_t)lk };
    rds_command(w->rds, bpub_step, p, 4, hb, hbl);
}
