/* publish.c -- makes a flash-sale voucher sellable in Redis, bucket by bucket (publish.h).
 *
 * A bucket's four commands go out pipelined and may land on two nodes (its hash and stream
 * on its slot's, seckill:streams on another); each reply is counted, so the state lives
 * until the last one, and a failed step fails the whole publication (the rebuild watch
 * then publishes the voucher from SQL once Redis answers). */
#include "sale/publish.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/key.h"
#include "core/log.h"
#include "core/xmem.h"
#include "http/http_req.h"
#include "redis/rds.h"
#include "sale/admission.h"
#include "sale/buckets.h"
#include "room/room.h"
#include "server/worker.h"
#include "store/store.h"

#define BUCKET_CMDS 4

typedef struct pub {
    http_req_t *r;
    void (*done)(http_req_t *r, int ok);
    int64_t voucher_id, stock, begin, end;
    store_room_t room;          /* admit_per_s 0: none */
    int k;
    int left;                   /* replies still to come in this phase */
    int ok;
    int zero_sent;              /* bucket 0 is out: its replies are the last */
} pub_t;

static void send_bucket(pub_t *p, int b);

/* One reply: a failure is logged; after the phase's last reply, bucket 0 goes out (the
 * other buckets are all there) or done runs. */
static void step(pub_t *p, int ok, const char *what, const redisReply *rep)
{
    if (!ok) {
        p->ok = 0;
        if (rep != NULL && rep->type == REDIS_REPLY_ERROR)
            log_error("publish voucher %lld: %s failed: %.*s", (long long)p->voucher_id, what,
                      (int)(rep->len > 200 ? 200 : rep->len), rep->str);
        else
            log_error("publish voucher %lld: %s failed: %s", (long long)p->voucher_id, what,
                      rep == NULL ? "redis unavailable" : "unexpected reply");
    }
    if (--p->left > 0)
        return;
    if (p->ok && !p->zero_sent) {
        p->zero_sent = 1;
        p->left = BUCKET_CMDS;
        send_bucket(p, 0);
        return;
    }
    http_req_t *r = p->r;
    void (*done)(http_req_t *, int) = p->done;
    int all_ok = p->ok;
    free(p);
    done(r, all_ok);
}

static void on_xgroup(struct redisReply *rep, void *priv)
{
    int ok = rep != NULL && (rep->type == REDIS_REPLY_STATUS ||
                             (rep->type == REDIS_REPLY_ERROR && rep->len >= 9 &&
                              memcmp(rep->str, "BUSYGROUP", 9) == 0));
    step(priv, ok, "XGROUP CREATE", rep);
}

static void on_sadd(struct redisReply *rep, void *priv)
{
    step(priv, rep != NULL && rep->type == REDIS_REPLY_INTEGER, "SADD", rep);
}

static void on_hset(struct redisReply *rep, void *priv)
{
    step(priv, rep != NULL && rep->type == REDIS_REPLY_INTEGER, "HSET", rep);
}

/* Bucket b's four commands, in the order that makes it sellable last: the stream and its
 * group exist and the writers know the stream before the hash holds stock, so no
 * admitted order lands in a stream nobody reads. */
static void send_bucket(pub_t *p, int b)
{
    worker_t *w = p->r->w;
    char kv[64], kb[64], ks[64], mem[48], sk[8], sst[24], sbe[24], sen[24], rr[24], rt[16];
    int lv, lb, ls;
    int lm = key_bmember(mem, sizeof mem, NULL, 0, p->voucher_id, b, p->k);
    if (buckets_keys(p->voucher_id, b, key_bsalt(p->voucher_id, b, p->k), kv, kb, ks, &lv, &lb,
                     &ls) < 0 || lm < 0) {
        for (int i = 0; i < BUCKET_CMDS; i++)
            step(p, 0, "a key", NULL);
        return;
    }
    int lk = snprintf(sk, sizeof sk, "%d", p->k);
    int l1 = snprintf(sst, sizeof sst, "%lld", (long long)buckets_share(p->stock, b, p->k));
    int l2 = snprintf(sbe, sizeof sbe, "%lld", (long long)p->begin);
    int l3 = snprintf(sen, sizeof sen, "%lld", (long long)p->end);
    const char *xg[6] = { "XGROUP", "CREATE", ks, KEY_GROUP, "0", "MKSTREAM" };
    size_t xgl[6] = { 6, 6, (size_t)ls, strlen(KEY_GROUP), 1, 8 };
    const char *sa[3] = { "SADD", KEY_STREAMS, mem };
    size_t sal[3] = { 4, strlen(KEY_STREAMS), (size_t)lm };
    /* K = 1 writes no `buckets` field: exactly an unbucketed voucher's hash; a voucher
     * without a room no room_* fields */
    const char *hs[14] = { "HSET", kv, "begin", sbe, "end", sen };
    size_t hsl[14] = { 4, (size_t)lv, 5, (size_t)l2, 3, (size_t)l3 };
    int nh = 6;
    if (p->k > 1) {
        hs[nh] = "buckets"; hsl[nh++] = 7;
        hs[nh] = sk; hsl[nh++] = (size_t)lk;
    }
    if (b == 0 && p->room.admit_per_s > 0) {
        hs[nh] = "room_r"; hsl[nh++] = 6;
        hs[nh] = rr; hsl[nh++] = (size_t)snprintf(rr, sizeof rr, "%lld",
                                                   (long long)p->room.admit_per_s);
        hs[nh] = "room_ttl"; hsl[nh++] = 8;
        hs[nh] = rt; hsl[nh++] = (size_t)snprintf(rt, sizeof rt, "%d", p->room.pass_ttl_s);
        hs[nh] = "room_gate"; hsl[nh++] = 9;
        hs[nh] = p->room.bot_gate ? "1" : "0"; hsl[nh++] = 1;
    }
    const char *hn[4] = { "HSETNX", kv, "stock", sst };
    size_t hnl[4] = { 6, (size_t)lv, 5, (size_t)l1 };
    rds_command(w->rds, on_xgroup, p, 6, xg, xgl);
    rds_command(w->rds, on_sadd, p, 3, sa, sal);
    rds_command(w->rds, on_hset, p, nh, hs, hsl);
    rds_command(w->rds, on_hset, p, 4, hn, hnl);
}

void publish_voucher(http_req_t *r, int64_t voucher_id, int64_t stock, int64_t begin,
                     int64_t end, int k, const store_room_t *room,
                     void (*done)(http_req_t *r, int ok))
{
    admission_forget(r->w, voucher_id);
    room_forget(r->w, voucher_id);
    pub_t *p = xmalloc(sizeof *p);
    k = k < 1 ? 1 : k > BUCKETS_MAX ? BUCKETS_MAX : k;
    *p = (pub_t){ .r = r, .done = done, .voucher_id = voucher_id, .stock = stock,
                  .begin = begin, .end = end, .k = k, .ok = 1, .zero_sent = k == 1,
                  .left = BUCKET_CMDS * (k > 1 ? k - 1 : 1) };
    if (room != NULL)
        p->room = *room;
    /* Every command is answered (a failed step counts as an answer), so p lives until the
     * last reply of the phase that ends it -- which may come before send_bucket returns
     * (Redis down): the loop reads k, not p. */
    if (k == 1) {
        send_bucket(p, 0);
        return;
    }
    for (int b = 1; b < k; b++)
        send_bucket(p, b);
}
