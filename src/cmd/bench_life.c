/* bench_life.c -- seckill bench's lifecycle rehearsal after the sale (bench.h): pay a
 * share of the orders, cancel a share, let the rest time out, and check Redis's answer
 * (sync mode, whose orders and their decisions are SQL's alone: SQL's). */
#include "cmd/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cmd/audit.h"
#include "core/clock.h"
#include "core/datadir.h"
#include "core/key.h"
#include "core/secret.h"
#include "core/xmem.h"
#include "embedded.h"
#include "redis/rcl_sync.h"
#include "redis/rconn.h"
#include "store/store.h"

#define LIFE_SLACK_MS 5000      /* a timeout is late past the last deadline plus this */

enum { FATE_PAY = 0, FATE_CANCEL, FATE_EXPIRE };

/* An order's fate from its id (a hash: the fates spread over the sale's time). */
static int fate_of(const bench_opts_t *o, int64_t order_id)
{
    uint64_t h = (uint64_t)order_id * 0x9E3779B97F4A7C15ULL;
    double x = (double)(h >> 11) / 9007199254740992.0;    /* [0, 1) */
    if (x < o->pay_share)
        return FATE_PAY;
    return x < o->pay_share + o->cancel_share ? FATE_CANCEL : FATE_EXPIRE;
}

/* The pay key: --pay-key-file, or the data dir's pay-key, read as the service reads it. */
static int read_key(const bench_opts_t *o, char *key, size_t cap, char *err, size_t errlen)
{
    int rc;
    if (o->pay_key_file[0]) {
        char shown[600];
        snprintf(shown, sizeof shown, "--pay-key-file %.500s", o->pay_key_file);
        rc = secret_read(AT_FDCWD, o->pay_key_file, shown, SECRET_KEY | SECRET_LINE, 16, key,
                         cap, NULL, err, errlen);
    } else if (o->data_dir[0]) {
        char abs[PATH_MAX];
        if (!realpath(o->data_dir, abs)) {
            snprintf(err, errlen, "data dir %.400s: %s", o->data_dir, strerror(errno));
            return -1;
        }
        rc = datadir_read_secret(abs, "pay-key", key, cap, err, errlen);
    } else {
        snprintf(err, errlen, "--pay-share needs the pay key: --pay-key-file F or --data-dir");
        return -1;
    }
    if (rc == 0)
        snprintf(err, errlen, "no pay key found (--pay-key-file, <data-dir>/pay-key)");
    return rc == 1 ? 0 : -1;
}

/* POST path with body (and the signature or the token): the answer's `data` string or the
 * errorMsg in out. 0 = success true, 1 = refused, -1 = no answer (err). */
static int post(const bench_load_t *L, const char *path, const char *hdr, const char *body,
                char *out, size_t outlen, char *err, size_t errlen)
{
    char req[2048];
    int n = snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: %s\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s", path, L->hosthdr, hdr, strlen(body), body);
    bench_resp_t r;
    if (n < 0 || (size_t)n >= sizeof req ||
        bench_http_simple(L, req, (size_t)n, &r, err, errlen) < 0)
        return -1;
    snprintf(out, outlen, "%.200s", r.body);
    return r.status == 200 && strstr(r.body, "\"success\":true") ? 0 : 1;
}

int bench_life_pay_value(const bench_opts_t *o, const bench_load_t *L, int64_t vid, int64_t *pv,
                         char *err, size_t errlen)
{
    char req[512];
    int n = snprintf(req, sizeof req, "GET /voucher/list/%lld HTTP/1.1\r\nHost: %s\r\n"
                     "Connection: close\r\n\r\n", (long long)o->shop, L->hosthdr);
    bench_resp_t r;   /* the whole list: a shop's outgrows the 4 KiB kept by default */
    int rc = bench_http_simple_all(L, req, (size_t)n, &r, err, errlen);
    json_t *root = rc == 0 && r.status == 200 && r.all ? json_loads(r.all, 0, NULL) : NULL;
    free(r.all);
    if (rc < 0)
        return -1;
    json_t *data = json_object_get(root, "data");
    size_t i;
    json_t *v;
    int found = 0;
    json_array_foreach(data, i, v) {
        json_t *id = json_object_get(v, "id"), *p = json_object_get(v, "payValue");
        if (json_is_integer(id) && json_integer_value(id) == vid && json_is_integer(p)) {
            *pv = json_integer_value(p);
            found = 1;
            break;
        }
    }
    json_decref(root);
    if (!found)
        snprintf(err, errlen, "voucher %lld's payValue: not in GET /voucher/list/%lld (HTTP %d; "
                 "--shop names the voucher's shop)", (long long)vid, (long long)o->shop,
                 r.status);
    return found ? 0 : -1;
}

static int pay(const bench_load_t *L, const char *key, int64_t oid, int64_t amount, char *out,
               size_t outlen, char *err, size_t errlen)
{
    char body[160], hdr[128], hex[65];
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int ml = 0;
    int bl = snprintf(body, sizeof body,
                      "{\"orderId\":%lld,\"paymentId\":\"bench-%lld\",\"amount\":%lld}",
                      (long long)oid, (long long)oid, (long long)amount);
    if (!HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)body, (size_t)bl,
              mac, &ml) || ml != 32) {
        snprintf(err, errlen, "HMAC failed");
        return -1;
    }
    for (unsigned i = 0; i < ml; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    snprintf(hdr, sizeof hdr, "x-pay-signature: %s\r\n", hex);
    int rc = post(L, "/pay/notify", hdr, body, out, outlen, err, errlen);
    /* a payment the server refunds (the order timed out first) is success with REFUNDED */
    return rc == 0 && strstr(out, "\"PAID\"") == NULL ? 1 : rc;
}

static int cancel(const bench_load_t *L, const char *token, int64_t oid, char *out,
                  size_t outlen, char *err, size_t errlen)
{
    char path[64], hdr[128];
    snprintf(path, sizeof path, "/voucher-order/%lld/cancel", (long long)oid);
    snprintf(hdr, sizeof hdr, "authorization: %s\r\n", token);
    return post(L, path, hdr, "", out, outlen, err, errlen);
}

/* Redis's counters (life.lua op board) summed over the voucher's k buckets: {paid,
 * timedout, returned}, each bucket asked on the node owning its slot (one Redis, or a
 * cluster's). 0, or -1 with err. */
static int counters(rcl_sync_route_t *rt, int64_t vid, int k, int64_t out[3], char *err,
                    size_t errlen)
{
    memset(out, 0, 3 * sizeof *out);
    for (int b = 0; b < k; b++) {
        char tag[48], kv[64], kb[64], ko[64], ks[64], kc[64];
        if (key_btag(tag, sizeof tag, vid, b, k) < 0 || key_voucher_t(kv, sizeof kv, tag) < 0 ||
            key_buyers_t(kb, sizeof kb, tag) < 0 || key_ostate_t(ko, sizeof ko, tag) < 0 ||
            key_stream_t(ks, sizeof ks, tag) < 0 || key_paysweep_t(kc, sizeof kc, tag) < 0) {
            snprintf(err, errlen, "voucher %lld: key names too long", (long long)vid);
            return -1;
        }
        const char *av[11] = {"EVAL", script_life_lua, "5", kv, kb, ko, ks, kc, "board", "",
                              "0"};
        size_t al[11];
        for (int i = 0; i < 11; i++)
            al[i] = strlen(av[i]);
        redisContext *c = rcl_sync_route_key(rt, kv, err, errlen);
        if (c == NULL)
            return -1;
        redisReply *r = redisCommandArgv(c, 11, av, al);
        int64_t v[3];
        /* {paid, timedout, returned, due, capped[, freed]}: the first three are read */
        int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 5;
        for (int i = 0; ok && i < 3; i++)
            ok = rconn_int(r->element[i], &v[i]) == 0;
        if (!ok) {
            snprintf(err, errlen, "EVAL life.lua board: %s",
                     r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr[0] ? c->errstr :
                     "unexpected reply");
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
        for (int i = 0; i < 3; i++)
            out[i] += v[i];
    }
    return 0;
}

/* Sync mode's figures, from SQL's orders of the voucher: {paid (2, 3), cancelled or timed
 * out by the server (4, 5, 6) less the cancels this rehearsal had answered, all of 4, 5, 6}
 * -- the counters Redis keeps in stream mode. 0, or -1 with err. */
static int sql_counters(store_t *st, int64_t vid, int64_t cancelled, int64_t out[3],
                        char *err, size_t errlen)
{
    memset(out, 0, 3 * sizeof *out);
    int64_t after = 0;
    for (;;) {
        store_order_t *rows = NULL;
        size_t n = 0;
        if (store_voucher_orders(st, vid, after, 10000, &rows, &n) != STORE_OK) {
            snprintf(err, errlen, "SQL orders of voucher %lld: %s", (long long)vid,
                     store_errmsg(st));
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            out[0] += rows[i].status == 2 || rows[i].status == 3;
            out[2] += rows[i].status >= 4 && rows[i].status <= 6;
            after = rows[i].id;
        }
        free(rows);
        if (n < 10000)
            break;
    }
    out[1] = out[2] - cancelled;
    return 0;
}

/* Whether the sale's orders are SQL's alone (sync mode): its buyers hash is empty though
 * the sale answered orders (a Redis mode records every buyer there). 1, 0, or -1. */
static int orders_in_sql(rcl_sync_route_t *rt, int64_t vid, size_t nsucc, char *err,
                         size_t errlen)
{
    char kb[64];
    if (nsucc == 0)
        return 0;
    if (key_buyers(kb, sizeof kb, vid) < 0) {
        snprintf(err, errlen, "voucher %lld: key names too long", (long long)vid);
        return -1;
    }
    redisContext *c = rcl_sync_route_key(rt, kb, err, errlen);
    redisReply *r = c ? rconn_cmdf(c, err, errlen, "HLEN %s", kb) : NULL;
    if (r == NULL)
        return -1;
    int sql = r->type == REDIS_REPLY_INTEGER && r->integer == 0;
    freeReplyObject(r);
    return sql;
}

static void sample(bench_life_t *r, double t, int64_t paid, int64_t cancelled, int64_t expired)
{
    if (r->ns == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->t = xrealloc(r->t, r->cap * sizeof *r->t);
        r->n = xrealloc(r->n, r->cap * sizeof *r->n);
    }
    r->t[r->ns] = t;
    r->n[r->ns][0] = paid;
    r->n[r->ns][1] = cancelled;
    r->n[r->ns][2] = expired;
    r->ns++;
}

int bench_life_run(const bench_opts_t *o, const bench_load_t *L, const bench_users_t *u,
                   int64_t vid, int64_t first_ms, bench_life_t *r, FILE *f, char *err,
                   size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->expired_after_s = -1;
    char key[256] = "";
    if (o->pay_share > 0 && read_key(o, key, sizeof key, err, errlen) < 0)
        return -1;
    rcl_sync_route_t rt;
    if (rcl_sync_route_open(o->redis_url, 5000, &rt, err, errlen) < 0)
        return -1;
    rcl_sync_route_t *c = &rt;
    int k = o->buckets > 1 ? o->buckets : 1;
    int64_t base[3] = {0, 0, 0};
    store_t *st = NULL;   /* sync mode: the figures are SQL's */
    int in_sql = orders_in_sql(c, vid, L->nsucc, err, errlen);
    if (in_sql > 0 && !o->db_url[0]) {
        snprintf(err, errlen, "the sale's orders are in SQL alone (sync mode): the "
                              "lifecycle rehearsal needs --db (or --data-dir)");
        in_sql = -1;
    } else if (in_sql > 0 && (st = store_open(o->db_url, 5000, err, errlen)) == NULL) {
        in_sql = -1;
    }
    if (in_sql < 0 || (!st && counters(c, vid, k, base, err, errlen) < 0)) {
        rcl_sync_route_close(c);
        return -1;
    }
    r->in_sql = st != NULL;
    /* a payment is checked against the order in SQL (src/order/life.c): the writer first */
    if (o->pay_share > 0 && o->db_url[0]) {
        audit_drain_t dr;
        memset(&dr, 0, sizeof dr);
        if (audit_wait_drain(o->redis_url, o->db_url, vid, o->drain_timeout_s * 1000, &dr, err,
                             errlen) < 0) {
            rcl_sync_route_close(c);
            store_close(st);
            return -1;
        }
    }
    uint64_t t0 = clock_wall_ms();
    char out[256], why[256];
    int64_t last_note = 0;
    for (size_t i = 0; i < L->nsucc; i++) {
        int64_t oid = L->succ[i].order_id;
        int fate = fate_of(o, oid), rc = 0;
        if (fate == FATE_PAY) {
            r->to_pay++;
            rc = pay(L, key, oid, o->pay_value, out, sizeof out, why, sizeof why);
            r->paid += rc == 0;
        } else if (fate == FATE_CANCEL) {
            r->to_cancel++;
            rc = cancel(L, u->tokens[L->succ[i].user], oid, out, sizeof out, why, sizeof why);
            r->cancelled += rc == 0;
        } else {
            r->to_expire++;
            continue;
        }
        if (rc != 0) {
            r->refused++;
            if (r->refused <= 3)
                fprintf(f, "  lifecycle   order %lld: %s %s\n", (long long)oid,
                        fate == FATE_PAY ? "payment" : "cancel", rc < 0 ? why : out);
        }
        int64_t now = (int64_t)clock_wall_ms();
        if (now - last_note >= 100) {
            last_note = now;
            sample(r, (double)(now - (int64_t)t0) / 1000.0, r->paid, r->cancelled, 0);
        }
    }
    /* the timeouts: wait until Redis has decided every unpaid order, at most until the last
     * deadline (the last admission is before t0) plus the slack */
    int64_t want_ms = first_ms + (int64_t)o->pay_timeout_s * 1000;
    if (st)   /* sync mode's deadline is the one shown, createTime (a second) + S */
        want_ms = first_ms / 1000 * 1000 + (int64_t)o->pay_timeout_s * 1000;
    int64_t bound_ms = (int64_t)t0 + (int64_t)o->pay_timeout_s * 1000 + LIFE_SLACK_MS;
    int64_t now3[3] = {0, 0, 0}, done_ms = -1;
    for (;;) {
        if (st ? sql_counters(st, vid, r->cancelled, now3, err, errlen) < 0
               : counters(c, vid, k, now3, err, errlen) < 0) {
            rcl_sync_route_close(c);
            store_close(st);
            return -1;
        }
        int64_t now = (int64_t)clock_wall_ms();
        int64_t expired = now3[1] - base[1];
        sample(r, (double)(now - (int64_t)t0) / 1000.0, r->paid, r->cancelled, expired);
        if (expired >= r->to_expire) {
            done_ms = now;
            break;
        }
        if (now > bound_ms)
            break;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);   /* Redis's counters are polled: nothing to wait on */
    }
    rcl_sync_route_close(c);
    store_close(st);
    r->r_paid = now3[0] - base[0];
    r->r_timedout = now3[1] - base[1];
    r->r_returned = now3[2] - base[2];
    if (done_ms >= 0)
        r->expired_after_s = (double)(done_ms - first_ms) / 1000.0;
    /* the server's timeout is S when none came before S after the first admission (a
     * shorter one would) and all came by the last deadline plus the slack (a longer one
     * would not) -- measured only when some order was left to time out */
    r->timeout_ok = r->to_expire == 0 || (done_ms >= 0 && done_ms >= want_ms);
    r->ok = r->timeout_ok && r->r_paid == r->paid && r->r_timedout == r->to_expire &&
            r->r_returned == r->cancelled + r->to_expire;
    fprintf(f, "  lifecycle   %lld orders: %lld to pay (%lld paid), %lld to cancel (%lld "
               "cancelled), %lld left unpaid; %lld refused\n",
            (long long)L->nsucc, (long long)r->to_pay, (long long)r->paid,
            (long long)r->to_cancel, (long long)r->cancelled, (long long)r->to_expire,
            (long long)r->refused);
    fprintf(f, "  timeouts    --pay-timeout %d: ", o->pay_timeout_s);
    if (r->to_expire == 0)
        fprintf(f, "no order left to time out\n");
    else if (done_ms < 0)
        fprintf(f, "NOT all timed out: %lld of %lld by %.1f s after the first admission (the "
                   "server's --pay-timeout-s above %d, or its sweep behind)\n",
                (long long)r->r_timedout, (long long)r->to_expire,
                (double)(bound_ms - first_ms) / 1000.0, o->pay_timeout_s);
    else
        fprintf(f, "all %lld timed out %.2f s after the first admission%s\n",
                (long long)r->to_expire, r->expired_after_s,
                r->timeout_ok ? "" : ": too early, the server's --pay-timeout-s is below it");
    fprintf(f, "  %-11s paid %lld, timed out %lld, returned %lld: %s\n\n",
            r->in_sql ? "sql" : "redis", (long long)r->r_paid, (long long)r->r_timedout, (long long)r->r_returned,
            r->ok ? "as rehearsed" : "NOT as rehearsed");
    return 0;
}

void bench_life_json(FILE *f, const bench_life_t *r)
{
    fprintf(f, ",\"lifecycle\":{\"to_pay\":%lld,\"paid\":%lld,\"to_cancel\":%lld,"
               "\"cancelled\":%lld,\"to_expire\":%lld,\"refused\":%lld,\"redis\":{\"paid\":%lld,"
               "\"timedout\":%lld,\"returned\":%lld},\"expired_after_s\":%.3f,"
               "\"timeout_ok\":%s,\"ok\":%s,\"counted_in\":\"%s\"}",
            (long long)r->to_pay, (long long)r->paid, (long long)r->to_cancel,
            (long long)r->cancelled, (long long)r->to_expire, (long long)r->refused,
            (long long)r->r_paid, (long long)r->r_timedout, (long long)r->r_returned,
            r->expired_after_s, r->timeout_ok ? "true" : "false", r->ok ? "true" : "false",
            r->in_sql ? "sql" : "redis");
}

void bench_life_free(bench_life_t *r)
{
    free(r->t);
    free(r->n);
    r->t = NULL;
    r->n = NULL;
}
