/* api_board.c -- the sale board: GET /admin/ (page, script, style) and GET /admin/api/board.
 *
 * The page (web/board.*) is compiled into the binary (tools/embed.sh) and public: it holds
 * no data. Its data call needs x-admin-token. One EVALSHA of src/server/board.lua announces
 * this instance and returns every live instance's snapshot (board.c); beside it, every
 * sale's Redis stock and buyer count are read voucher by voucher (and summed over its
 * stock buckets, buckets.h), so the board works on a Redis Cluster too. A mode that keeps
 * its sales in SQL alone (sync, the lab's SQL steps: order_mode.h's sql_counts) leaves the
 * published stock in Redis untouched: there each sale's stock and buyers are SQL's, read
 * on the job pool. The page polls it once a second and takes rates from the
 * differences. Snapshots come back from Redis as text: each is checked to be a JSON
 * object before it is passed on, so a bad entry cannot break the page.
 *
 * For running and reviewing a sale the reply also carries, per sale, its title (SQL, read
 * once per process: titles.h), whether it is paused (the hash's `paused` field,
 * api_sale.c) and its totals by outcome (seckill:{board}:totals:<id>, sale_totals.h), and
 * the newest events (seckill:{board}:events, events.h): one HGETALL per sale and one
 * LRANGE more per request, on the {board} slot's node. In stream mode, per sale and
 * bucket, one EVAL of life.lua's read-only board op: the order lifecycle's figures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "api/api.h"
#include "api/titles.h"
#include "core/app.h"
#include "server/board.h"
#include "server/events.h"
#include "server/jobs.h"
#include "server/sale_totals.h"
#include "store/store.h"
#include "core/clock.h"
#include "embedded.h"
#include "core/key.h"
#include "redis/rcluster.h"
#include "redis/rds.h"
#include "sale/order_mode.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "store/store.h"
#include "core/sb.h"
#include "server/worker.h"
#include "core/xmem.h"

void api_board_asset(http_req_t *r, board_asset_t a)
{
    const char *body = web_board_html, *type = "text/html; charset=utf-8";
    if (a == BOARD_JS) {
        body = web_board_js;
        type = "text/javascript; charset=utf-8";
    } else if (a == BOARD_CSS) {
        body = web_board_css;
        type = "text/css; charset=utf-8";
    }
    http_reply(r, 200, type, body, strlen(body));
}

/* --redis-wait-replicas: the master of the voucher's slot has fewer in-sync replicas than
 * promised, as the writer last saw (src/writer/writer_guard.c): it is not sellable. */
static int sale_short(const app_t *app, int64_t id)
{
    char k[64];
    int n = key_voucher(k, sizeof k, id);
    if (app->metrics == NULL || n < 0)
        return 0;
    unsigned slot = rcluster_slot(k, (size_t)n);
    return (atomic_load(&app->metrics->short_slots[slot / 64]) >> (slot % 64)) & 1;
}

static int is_str(const redisReply *e)
{
    return e != NULL && (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS);
}

/* A decimal integer reply element (string or integer) into *v: 0, or -1 if it is none. */
static int reply_i64(const redisReply *e, int64_t *v)
{
    if (e != NULL && e->type == REDIS_REPLY_INTEGER) {
        *v = (int64_t)e->integer;
        return 0;
    }
    if (is_str(e) && e->len > 0 && e->len < 21) {
        char buf[24], *end;
        memcpy(buf, e->str, e->len);
        buf[e->len] = '\0';
        long long x = strtoll(buf, &end, 10);
        if (*end == '\0') {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The same as JSON, or the JSON null. */
static void put_num(sb_t *s, const redisReply *e)
{
    int64_t v;
    if (reply_i64(e, &v) == 0) {
        sb_i64(s, v);
    } else {
        sb_puts(s, "null");
    }
}

/* One board request. Its parts: board.lua on the {board} slot's node (announce, and every
 * live instance's snapshot), SMEMBERS seckill:streams (the sales, and for a voucher with
 * K > 1 stock buckets its members "<id>.<b>.<K>"), then per sale and bucket an HMGET of
 * the bucket's voucher hash and an HLEN of its buyers, plus for K > 1 an HGETALL of the
 * bucket's transfer log and, per entry found there (rare: a transfer lasts a round trip),
 * a SISMEMBER on the receiver's applied set. Each command goes to the node owning its
 * bucket's slot; rds pipelines all of one node's commands on its one connection. The page
 * needs no single moment across vouchers or buckets, so nothing here has to span slots. */
typedef struct board_req board_req_t;

typedef struct board_sale {
    board_req_t *b;
    int64_t id;
    int k;                  /* stock buckets (1: unbucketed) */
    sb_t when;              /* "begin":..,"end":.. once bucket 0's HMGET answered */
    int64_t stock;          /* sum over the buckets, plus units in transit */
    int64_t buyers;         /* sum over the buckets */
    int stock_bad;          /* a bucket's stock, log or applied set unknown: stock null */
    int buyers_bad;         /* a bucket's buyer count unknown: buyers null */
    int64_t transit;        /* units in transfers not yet applied (K > 1) */
    int sql;                /* stock and buyers come from SQL (board_sql_sales), not Redis */
    struct board_part *parts;   /* its K buckets' parts, for the per-bucket figures */
    int paused;             /* bucket 0's hash has `paused` (api_sale.c) */
    int64_t totals[OUT__COUNT];   /* its answers by outcome, every instance's summed */
    int seen[OUT__COUNT];         /* outcomes the totals hash has */
    int64_t begin;          /* bucket 0's begin (epoch s), for the room's release count */
    int64_t room_r, room_ttl;   /* its waiting room (room_r > 0): passes/s, pass lifetime s */
    int64_t room_gen[5];    /* room.lua's pass counts: room_g, room_ga, room_gc, room_gp,
                             * room_go */
    int64_t room_queued;    /* ZCARD of the room */
    int room_queued_ok;
    int64_t life[6];        /* life.lua board, summed over the buckets: paid, timedout,
                               returned, due, capped, freed */
    int life_sent, life_bad;    /* stream mode asked every bucket; one did not answer */
} board_sale_t;

/* One command's context: its sale and bucket (for a transfer log, and its units for a
 * SISMEMBER on the receiver), and the bucket's own figures. */
typedef struct board_part {
    board_sale_t *s;
    int bucket;
    int64_t units;
    int64_t stock, buyers;  /* this bucket's, when known */
    int stock_ok, buyers_ok;
} board_part_t;

/* ,"inTransit":N,"perBucket":[{"stock":S,"buyers":B},...] of a sale in K > 1 buckets
 * (null where its Redis did not answer), so the page can show how the stock is spread. */
static void put_buckets(sb_t *s, const board_sale_t *e)
{
    sb_puts(s, ",\"inTransit\":");
    sb_i64(s, e->transit);
    sb_puts(s, ",\"perBucket\":[");
    for (int b = 0; b < e->k; b++) {
        const board_part_t *p = &e->parts[b];
        sb_puts(s, b ? ",{\"stock\":" : "{\"stock\":");
        if (p->stock_ok)
            sb_i64(s, p->stock);
        else
            sb_puts(s, "null");
        sb_puts(s, ",\"buyers\":");
        if (p->buyers_ok)
            sb_i64(s, p->buyers);
        else
            sb_puts(s, "null");
        sb_puts(s, "}");
    }
    sb_puts(s, "]");
}

/* ,"title":..,"paused":..,"totals":{..} of a sale: what running and reviewing it needs. */
static void put_review(sb_t *s, const board_sale_t *e)
{
    sb_puts(s, ",\"title\":");
    if (!titles_get(e->id, s))
        sb_puts(s, "null");
    sb_puts(s, e->paused ? ",\"paused\":true,\"totals\":{" : ",\"paused\":false,\"totals\":{");
    for (int o = 0, n = 0; o < OUT__COUNT; o++)
        if (e->seen[o])
            sb_printf(s, "%s\"%s\":%lld", n++ ? "," : "", metrics_outcome_name((outcome_t)o),
                      (long long)e->totals[o]);
    sb_puts(s, "}");
}

/* The places a room of `rate` per second has released `ms` after its begin (room.lua's
 * floor(ms * rate / 1000), without overflow); 0 before it. */
static int64_t released_by(int64_t rate, int64_t ms)
{
    return ms > 0 ? ms / 1000 * rate + ms % 1000 * rate / 1000 : 0;
}

/* ,"name":v, or nothing when the figure is unknown (the API sends no nulls). */
static void put_known(sb_t *s, const char *name, int ok, int64_t v)
{
    if (ok)
        sb_printf(s, ",\"%s\":%lld", name, (long long)v);
}

/* ,"room":{..} of a sale with a waiting room (docs/waiting-room.md); nothing for a sale
 * without one. queued is the room's ZCARD (everyone holding a place, admitted or not);
 * released the places the rate has let through so far, floor((now - begin) * R); waiting
 * the rest, and waitS the wait of the last in line (waiting / R, plus the time to begin).
 * issued counts the passes issued (room.lua counts each first issue by the pass lifetime's
 * generation of its start, now's or the next); used is the sale's buyers (every order on a
 * room voucher carried a valid pass: the order gate, room.h). expired is the passes
 * starting in generations older than the one before now's (a pass ends start + lifetime:
 * all past their expiry) less every use, at least 0: a lower bound while
 * passes are being issued (uses of newer passes are subtracted too), exact from two
 * lifetimes after the last pass was issued. A figure Redis did not answer for is left out. */
static void put_room(sb_t *s, const board_sale_t *e, int64_t now_ms)
{
    if (e->room_r <= 0)
        return;
    int64_t ttl_ms = (e->room_ttl > 0 ? e->room_ttl : 60) * 1000, begin_ms = e->begin * 1000;
    int64_t released = released_by(e->room_r, now_ms - begin_ms);
    int64_t waiting = e->room_queued > released ? e->room_queued - released : 0;
    int64_t wait_ms = waiting * 1000 / e->room_r + (begin_ms > now_ms ? begin_ms - now_ms : 0);
    /* the counts as of now's generation: room_g's may be one or more behind; its passes
     * start in room_g + 1 (ga), room_g (gc), room_g - 1 (gp) and before (go) */
    const int64_t *gn = e->room_gen;
    int64_t ahead = now_ms / ttl_ms - gn[0];
    int64_t old = gn[4] + (ahead >= 1 ? gn[3] : 0) + (ahead >= 2 ? gn[2] : 0) +
                  (ahead >= 3 ? gn[1] : 0);
    int64_t expired = old - e->buyers;
    sb_printf(s, ",\"room\":{\"admitPerSecond\":%lld,\"passTtlS\":%lld,\"released\":%lld,"
              "\"issued\":%lld", (long long)e->room_r, (long long)(ttl_ms / 1000),
              (long long)released, (long long)(gn[1] + gn[2] + gn[3] + gn[4]));
    put_known(s, "queued", e->room_queued_ok, e->room_queued);
    put_known(s, "waiting", e->room_queued_ok, waiting);
    put_known(s, "waitS", e->room_queued_ok, (wait_ms + 999) / 1000);
    put_known(s, "used", !e->buyers_bad, e->buyers);
    put_known(s, "expired", !e->buyers_bad, expired > 0 ? expired : 0);
    sb_puts(s, "}");
}

/* ,"life":{..} of a sale in stream mode (docs/lifecycle.md): its orders by lifecycle
 * state, summed over its buckets -- paid, cancelled by the buyer, expired (timed out),
 * unpaid (the orders less the three), returned (units cancels and timeouts gave back),
 * freed (of those, the orders whose buyer --cancel-frees-buyer let buy again: they left the
 * buyers, so the orders are the buyers plus them) --
 * and dueNextMinute, the unpaid orders whose payment deadline passes within the next
 * minute (or has passed and the sweep has not reached them yet), with dueCapped when the
 * look stopped at BOARD_DUE_CAP orders a bucket (a lower bound then). No figure is sent
 * when a bucket did not answer; dueNextMinute only when --pay-timeout-s is on. */
static void put_life(sb_t *s, const board_sale_t *e, int timeout_on)
{
    if (!e->life_sent || e->life_bad)
        return;
    const int64_t *l = e->life;
    int64_t cancelled = l[2] - l[1];
    sb_printf(s, ",\"life\":{\"paid\":%lld,\"cancelled\":%lld,\"expired\":%lld,"
              "\"returned\":%lld,\"freed\":%lld", (long long)l[0],
              (long long)(cancelled > 0 ? cancelled : 0), (long long)l[1], (long long)l[2],
              (long long)l[5]);
    if (!e->buyers_bad) {
        int64_t unpaid = e->buyers + l[5] - l[0] - l[2];
        sb_printf(s, ",\"unpaid\":%lld", (long long)(unpaid > 0 ? unpaid : 0));
    }
    if (timeout_on)
        sb_printf(s, ",\"dueNextMinute\":%lld,\"dueCapped\":%s", (long long)l[3],
                  l[4] ? "true" : "false");
    sb_puts(s, "}");
}

struct board_req {
    http_req_t *r;
    int pending;            /* replies still due, plus one while a step is sending */
    int failed;             /* board.lua or SMEMBERS failed: 503 */
    const char *why;
    sb_t insts;             /* the valid snapshots, comma-separated */
    board_sale_t *sales;
    size_t nsales;
    board_part_t *parts;    /* one per (sale, bucket) */
    sb_t events;            /* the newest events, a JSON array, once read */
    int64_t *untitled;      /* sales whose title this process does not know yet */
    size_t nuntitled;
};

#define BOARD_EVENTS 50     /* the newest events a board request returns */

static void board_finish(board_req_t *b)
{
    http_req_t *r = b->r;
    if (b->failed) {
        api_unavailable(r, b->why);
    } else {
        app_t *app = r->w->app;
        sb_t s = SB_INIT;
        sb_puts(&s, "{\"self\":");
        sb_json_str(&s, app->name, strlen(app->name));
        sb_printf(&s, ",\"now\":%llu,\"instances\":[", (unsigned long long)clock_wall_ms());
        sb_append(&s, b->insts.buf != NULL ? b->insts.buf : "", b->insts.len);
        sb_puts(&s, "],\"sales\":[");
        for (size_t i = 0; i < b->nsales; i++) {
            board_sale_t *e = &b->sales[i];
            sb_printf(&s, "%s{\"id\":%lld,\"buckets\":%d,\"stock\":", i ? "," : "",
                      (long long)e->id, e->k);
            if (e->stock_bad || e->when.len == 0) {
                sb_puts(&s, "null");
            } else {
                sb_i64(&s, e->stock);
            }
            sb_puts(&s, ",");
            if (e->when.len > 0) {
                sb_append(&s, e->when.buf, e->when.len);
            } else {
                sb_puts(&s, "\"begin\":null,\"end\":null");
            }
            sb_puts(&s, ",\"buyers\":");
            if (e->buyers_bad) {
                sb_puts(&s, "null");
            } else {
                sb_i64(&s, e->buyers);
            }
            sb_puts(&s, sale_short(app, e->id) ? ",\"replicasShort\":true"
                                                : ",\"replicasShort\":false");
            if (e->k > 1 && e->parts)
                put_buckets(&s, e);
            put_room(&s, e, (int64_t)clock_wall_ms());
            put_life(&s, e, app->cfg.pay_timeout_s > 0);
            put_review(&s, e);
            sb_puts(&s, "}");
        }
        sb_puts(&s, "],\"events\":");
        if (b->events.len > 0)
            sb_append(&s, b->events.buf, b->events.len);
        else
            sb_puts(&s, "[]");
        sb_puts(&s, "}");
        api_ok(r, s.buf, s.len);
        sb_free(&s);
    }
    for (size_t i = 0; i < b->nsales; i++) {
        sb_free(&b->sales[i].when);
    }
    sb_free(&b->events);
    free(b->untitled);
    free(b->sales);
    free(b->parts);
    sb_free(&b->insts);
    free(b);
}

static void board_unref(board_req_t *b)
{
    if (--b->pending == 0) {
        board_finish(b);
    }
}

static void board_fail(board_req_t *b, const redisReply *rep)
{
    if (!b->failed) {
        b->failed = 1;
        b->why = rep != NULL && rep->type == REDIS_REPLY_ERROR ? "redis error" : "redis";
    }
}

/* board.lua's reply: every live instance's snapshot, each checked to be a JSON object. */
static void on_insts(redisReply *rep, void *priv)
{
    board_req_t *b = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        board_fail(b, rep);
    } else {
        for (size_t i = 0; i < rep->elements; i++) {
            const redisReply *e = rep->element[i];
            if (!is_str(e)) {
                continue;
            }
            json_t *j = json_loadb(e->str, e->len, 0, NULL);
            int ok = j != NULL && json_is_object(j);
            json_decref(j);
            if (ok) {
                sb_puts(&b->insts, b->insts.len > 0 ? "," : "");
                sb_append(&b->insts, e->str, e->len);
            }
        }
    }
    board_unref(b);
}

static void on_room_zcard(redisReply *rep, void *priv)
{
    board_sale_t *e = priv;
    e->room_queued_ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER;
    e->room_queued = e->room_queued_ok ? (int64_t)rep->integer : 0;
    board_unref(e->b);
}

/* A sale with a waiting room: ZCARD of the room, one command in the voucher's slot
 * (nothing per order or per buyer; its pass counts came with the voucher's HMGET). */
static void board_send_room(board_sale_t *e)
{
    char kz[64];
    int lz = key_room(kz, sizeof kz, e->id);
    if (lz < 0)
        return;
    const char *zc[2] = { "ZCARD", kz };
    size_t zcl[2] = { 5, (size_t)lz };
    e->b->pending++;
    rds_command(e->b->r->w->rds, on_room_zcard, e, 2, zc, zcl);
}

/* A bucket's HMGET: stock (and for bucket 0 begin, end, paused and the room's settings
 * and pass counts, which send the room's ZCARD). A bucket Redis does not answer for (its node is
 * down), or that has no stock, makes the voucher's stock null: a partial sum would look
 * like a real figure. The rest of the board is still worth showing. */
static void on_hmget(redisReply *rep, void *priv)
{
    board_part_t *p = priv;
    board_sale_t *e = p->s;
    size_t want = p->bucket == 0 ? 11 : 1;
    int64_t v;
    if (e->sql) {
        /* SQL's figures (sql_job); Redis gave the window */
    } else if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == want &&
               reply_i64(rep->element[0], &v) == 0) {
        e->stock += v;
        p->stock = v;
        p->stock_ok = 1;
    } else {
        e->stock_bad = 1;
    }
    if (p->bucket == 0 && rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 11) {
        sb_puts(&e->when, "\"begin\":");
        put_num(&e->when, rep->element[1]);
        sb_puts(&e->when, ",\"end\":");
        put_num(&e->when, rep->element[2]);
        e->paused = is_str(rep->element[3]);
        if (reply_i64(rep->element[4], &e->room_r) == 0 && e->room_r > 0 &&
            reply_i64(rep->element[1], &e->begin) == 0) {
            if (reply_i64(rep->element[5], &e->room_ttl) != 0)
                e->room_ttl = 0;
            for (int i = 0; i < 5; i++)
                if (reply_i64(rep->element[6 + i], &e->room_gen[i]) != 0)
                    e->room_gen[i] = 0;
            board_send_room(e);
        } else {
            e->room_r = 0;
        }
    }
    board_unref(e->b);
}

static void on_hlen(redisReply *rep, void *priv)
{
    board_part_t *p = priv;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER) {
        p->s->buyers += (int64_t)rep->integer;
        p->buyers = (int64_t)rep->integer;
        p->buyers_ok = 1;
    } else {
        p->s->buyers_bad = 1;
    }
    board_unref(p->s->b);
}

/* The receiver's answer for one logged transfer: not applied yet, so its units are in
 * transit and still the voucher's stock (as seckill audit counts them). */
static void on_applied(redisReply *rep, void *priv)
{
    board_part_t *p = priv;
    board_sale_t *e = p->s;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER) {
        if (rep->integer == 0) {
            e->stock += p->units;
            e->transit += p->units;
        }
    } else {
        e->stock_bad = 1;
    }
    free(p);
    board_unref(e->b);
}

/* A bucket's life.lua board answer: {paid, timedout, returned, due, capped, freed}. */
static void on_life(redisReply *rep, void *priv)
{
    board_part_t *p = priv;
    board_sale_t *e = p->s;
    int64_t v[6];
    int ok = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 6;
    for (size_t i = 0; ok && i < 6; i++)
        ok = reply_i64(rep->element[i], &v[i]) == 0;
    if (ok) {
        for (int i = 0; i < 6; i++)
            e->life[i] += v[i];
    } else {
        e->life_bad = 1;
    }
    board_unref(e->b);
}

#define BOARD_DUE_CAP "1000"    /* orders a bucket's dueNextMinute looks at, at most */

/* Asks life.lua (op board) for one bucket's lifecycle figures: its counters, and the
 * unpaid orders admitted up to (now + 60 s - timeout) past the sweep's cursor. One EVAL
 * per bucket; inside Redis a read of at most BOARD_DUE_CAP orders' states. */
static void board_send_life(board_req_t *b, board_part_t *p, const char *tag)
{
    char kv[64], kb[64], kst[64], ks[64], kc[64], bound[32] = "";
    if (key_voucher_t(kv, sizeof kv, tag) < 0 || key_buyers_t(kb, sizeof kb, tag) < 0 ||
        key_ostate_t(kst, sizeof kst, tag) < 0 || key_stream_t(ks, sizeof ks, tag) < 0 ||
        key_paysweep_t(kc, sizeof kc, tag) < 0) {
        p->s->life_bad = 1;
        return;
    }
    int64_t t = b->r->w->app->cfg.pay_timeout_s;
    if (t > 0)
        snprintf(bound, sizeof bound, "%lld",
                 (long long)((int64_t)clock_wall_ms() + 60000 - t * 1000));
    const char *av[11] = { "EVAL", script_life_lua, "5", kv, kb, kst, ks, kc, "board", bound,
                           BOARD_DUE_CAP };
    size_t al[11];
    for (int i = 0; i < 11; i++)
        al[i] = strlen(av[i]);
    p->s->life_sent = 1;
    b->pending++;
    rds_command(b->r->w->rds, on_life, p, 11, av, al);
}

/* Bucket `bucket`'s hash tag (keys.h): "<id>" for bucket 0. Length, or -1. */
static int bucket_tag(const board_sale_t *e, int bucket, char *tag, size_t len)
{
    return key_btag(tag, len, e->id, bucket, e->k);
}

/* A bucket's transfer log: id -> "<receiver> <units> <ms>". Each entry's units are in
 * transit unless the receiver has applied the id: one SISMEMBER per entry asks. */
static void on_xlog(redisReply *rep, void *priv)
{
    board_part_t *p = priv;
    board_sale_t *e = p->s;
    board_req_t *b = e->b;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        e->stock_bad = 1;
        board_unref(b);
        return;
    }
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *xid = rep->element[i], *val = rep->element[i + 1];
        int rb = -1;
        long long n = 0;
        char tag[48], ka[96];
        if (!is_str(xid) || !is_str(val) || sscanf(val->str, "%d %lld", &rb, &n) != 2 ||
            rb < 0 || rb >= e->k || n < 0) {
            continue;          /* not an entry transfer.lua writes: the audit skips it too */
        }
        int kl = bucket_tag(e, rb, tag, sizeof tag) < 0 ? -1 : key_xfer_applied(ka, sizeof ka, tag);
        if (kl < 0) {
            e->stock_bad = 1;
            continue;
        }
        board_part_t *q = xmalloc(sizeof *q);
        *q = (board_part_t){ .s = e, .bucket = rb, .units = n };
        const char *sm[3] = { "SISMEMBER", ka, xid->str };
        size_t sml[3] = { 9, (size_t)kl, xid->len };
        b->pending++;
        rds_command(b->r->w->rds, on_applied, q, 3, sm, sml);
    }
    board_unref(b);
}

/* The sales of a mode that keeps them in SQL: one job on the pool reads every sale's
 * (orders, stock) as the mode counts them, so a board request costs the pool one job. */
typedef struct sql_job {
    board_req_t *b;
    int (*counts)(struct store *st, int64_t voucher_id, int64_t *orders, int64_t *stock);
    int64_t *orders, *stock;    /* per sale */
    int *ok;
} sql_job_t;

static void sql_job_run(struct store *st, void *arg)
{
    sql_job_t *j = arg;
    for (size_t i = 0; i < j->b->nsales; i++)
        j->ok[i] = st != NULL &&
                   j->counts(st, j->b->sales[i].id, &j->orders[i], &j->stock[i]) == STORE_OK;
}

static void sql_job_done(worker_t *w, void *arg)
{
    sql_job_t *j = arg;
    board_req_t *b = j->b;
    (void)w;
    for (size_t i = 0; i < b->nsales; i++) {
        board_sale_t *e = &b->sales[i];
        if (j->ok[i]) {
            e->stock = j->stock[i];
            e->buyers = j->orders[i];
        } else {
            e->stock_bad = e->buyers_bad = 1;
        }
    }
    free(j->orders);
    free(j->stock);
    free(j->ok);
    free(j);
    board_unref(b);
}

/* Submits the SQL job of a mode that keeps its sales in SQL (order_mode.h's sql_counts),
 * and marks the sales; nothing in a mode that keeps them in Redis. */
static void board_sql_sales(board_req_t *b)
{
    app_t *app = b->r->w->app;
    const order_mode_row_t *row = order_mode_row(app->cfg.mode);
    if (row == NULL || row->sql_counts == NULL || b->nsales == 0)
        return;
    sql_job_t *j = xcalloc(1, sizeof *j);
    j->b = b;
    j->counts = row->sql_counts;
    j->orders = xcalloc(b->nsales, sizeof *j->orders);
    j->stock = xcalloc(b->nsales, sizeof *j->stock);
    j->ok = xcalloc(b->nsales, sizeof *j->ok);
    for (size_t i = 0; i < b->nsales; i++)
        b->sales[i].sql = 1;
    b->pending++;
    if (jobs_submit(app->jobs, b->r->w, sql_job_run, sql_job_done, j) != 0) {
        /* the pool's queue is full: the sales' figures are unknown this time */
        for (size_t i = 0; i < b->nsales; i++)
            b->sales[i].stock_bad = b->sales[i].buyers_bad = 1;
        free(j->orders);
        free(j->stock);
        free(j->ok);
        free(j);
        b->pending--;
    }
}

/* A sale's totals hash (one field per outcome and process, sale_totals.h): summed by
 * outcome. */
static void on_totals(redisReply *rep, void *priv)
{
    board_sale_t *e = priv;
    for (size_t i = 0; rep != NULL && rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements;
         i += 2) {
        const redisReply *k = rep->element[i];
        int64_t v;
        if (is_str(k) && reply_i64(rep->element[i + 1], &v) == 0 && v >= 0)
            sale_totals_add(k->str, k->len, v, e->totals, e->seen);
    }
    board_unref(e->b);
}

static void on_events(redisReply *rep, void *priv)
{
    board_req_t *b = priv;
    events_json(&b->events, rep);
    board_unref(b);
}

static void run_titles(store_t *st, void *arg)
{
    board_req_t *b = arg;
    titles_load(st, b->untitled, b->nuntitled);
}

static void done_titles(worker_t *w, void *arg)
{
    board_unref(arg);
}

/* Reads the titles this process does not know yet (one job), before the reply. */
static void board_titles(board_req_t *b)
{
    sb_t probe = SB_INIT;
    b->untitled = xcalloc(b->nsales ? b->nsales : 1, sizeof *b->untitled);
    for (size_t i = 0; i < b->nsales; i++) {
        probe.len = 0;
        if (!titles_get(b->sales[i].id, &probe))
            b->untitled[b->nuntitled++] = b->sales[i].id;
    }
    sb_free(&probe);
    if (b->nuntitled == 0)
        return;
    b->pending++;
    if (jobs_submit(b->r->w->app->jobs, b->r->w, run_titles, done_titles, b) != 0)
        b->pending--;          /* busy: no titles this time, the next request asks again */
}

/* Sends one sale's commands: per bucket HMGET and HLEN, and HGETALL of its log if K > 1,
 * and the HGETALL of its totals; in a mode that keeps the sale in SQL (board_sql_sales),
 * the HMGET alone, for the window, and the totals. */
static void board_send_sale(board_req_t *b, board_sale_t *s, board_part_t *parts)
{
    rds_t *c = b->r->w->rds;
    s->parts = parts;
    char tk[64];
    const char *tg[2] = { "HGETALL", tk };
    size_t tgl[2] = { 7, (size_t)snprintf(tk, sizeof tk, "%s%lld", KEY_BOARD_TOTALS,
                                          (long long)s->id) };
    b->pending++;
    rds_command(c, on_totals, s, 2, tg, tgl);
    for (int bk = 0; bk < s->k; bk++) {
        board_part_t *p = &parts[bk];
        p->s = s;
        p->bucket = bk;
        char tag[48], vk[64], byk[64], lk[64];
        int vl = -1, bl = -1, ll = 0;
        if (bucket_tag(s, bk, tag, sizeof tag) >= 0) {
            vl = key_voucher_t(vk, sizeof vk, tag);
            bl = key_buyers_t(byk, sizeof byk, tag);
            ll = s->k > 1 ? key_xfer_log(lk, sizeof lk, tag) : 0;
        }
        if (vl < 0 || bl < 0 || ll < 0) {
            s->stock_bad = s->buyers_bad = 1;
            continue;
        }
        const char *hm[13] = { "HMGET", vk, "stock", "begin", "end", "paused", "room_r",
                               "room_ttl", "room_g", "room_ga", "room_gc", "room_gp",
                               "room_go" };
        size_t hml[13] = { 5, (size_t)vl, 5, 5, 3, 6, 6, 8, 6, 7, 7, 7, 7 };
        const char *hl[2] = { "HLEN", byk };
        size_t hll[2] = { 4, (size_t)bl };
        const char *hg[2] = { "HGETALL", lk };
        size_t hgl[2] = { 7, (size_t)ll };
        b->pending += s->sql ? 1 : s->k > 1 ? 3 : 2;
        rds_command(c, on_hmget, p, bk == 0 ? 13 : 3, hm, hml);
        if (s->sql) {
            continue;
        }
        rds_command(c, on_hlen, p, 2, hl, hll);
        if (b->r->w->app->cfg.mode == MODE_STREAM)
            board_send_life(b, p, tag);
        if (s->k > 1) {
            rds_command(c, on_xlog, p, 2, hg, hgl);
        }
    }
}

/* The sales (and their K): then each sale's commands, each routed by its own key. */
static void on_streams(redisReply *rep, void *priv)
{
    board_req_t *b = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        board_fail(b, rep);
        board_unref(b);
        return;
    }
    b->sales = xcalloc(rep->elements ? rep->elements : 1, sizeof *b->sales);
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        int64_t id;
        if (reply_i64(e, &id) != 0 || id <= 0) {
            continue;
        }
        board_sale_t *s = &b->sales[b->nsales++];
        s->b = b;
        s->id = id;
        s->k = 1;
    }
    size_t nparts = 0;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        int64_t id;
        int bk, k = 0;
        if (!is_str(e) || key_bmember_parse(e->str, e->len, &id, &bk, &k) != 0) {
            continue;
        }
        for (size_t j = 0; j < b->nsales; j++) {
            if (b->sales[j].id == id && k > b->sales[j].k) {
                b->sales[j].k = k;
            }
        }
    }
    for (size_t i = 0; i < b->nsales; i++) {
        nparts += (size_t)b->sales[i].k;
    }
    b->parts = xcalloc(nparts ? nparts : 1, sizeof *b->parts);
    /* this callback's own reference is still held while the commands go out */
    board_sql_sales(b);
    board_titles(b);
    for (size_t i = 0, at = 0; i < b->nsales; i++) {
        board_send_sale(b, &b->sales[i], &b->parts[at]);
        at += (size_t)b->sales[i].k;
    }
    board_unref(b);
}

void api_board_data(http_req_t *r)
{
    if (!api_admin_required(r)) {
        return;
    }
    board_req_t *b = xcalloc(1, sizeof *b);
    b->r = r;
    b->insts = (sb_t)SB_INIT;
    b->events = (sb_t)SB_INIT;
    b->pending = 4;                        /* three replies, and this function's own */
    board_announce(r->w, 1, on_insts, b);
    char n[16];
    const char *lr[4] = { "LRANGE", KEY_BOARD_EVENTS, "0", n };
    size_t lrl[4] = { 6, strlen(KEY_BOARD_EVENTS), 1,
                      (size_t)snprintf(n, sizeof n, "%d", BOARD_EVENTS - 1) };
    rds_command(r->w->rds, on_events, b, 4, lr, lrl);
    const char *sm[2] = { "SMEMBERS", KEY_STREAMS };
    size_t sml[2] = { 8, strlen(KEY_STREAMS) };
    rds_command(r->w->rds, on_streams, b, 2, sm, sml);
    board_unref(b);
}
