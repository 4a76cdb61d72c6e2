/* api_board.c -- the sale board: GET /admin/ (page, script, style) and GET /admin/api/board.
 *
 * The page (web/board.*) is compiled into the binary (tools/embed.sh) and public: it holds
 * no data. Its data call needs x-admin-token. One EVALSHA of scripts/board.lua announces
 * this instance and returns every live instance's snapshot (board.c); beside it, every
 * sale's Redis stock and buyer count are read voucher by voucher, so the board works on a
 * Redis Cluster too. The page polls it once a second and takes rates from the
 * differences. Snapshots come back from Redis as text: each is checked to be a JSON
 * object before it is passed on, so a bad entry cannot break the page. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "api.h"
#include "app.h"
#include "board.h"
#include "clock.h"
#include "embedded.h"
#include "keys.h"
#include "rds.h"
#include "sb.h"
#include "worker.h"
#include "xmem.h"

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

static int is_str(const redisReply *e)
{
    return e != NULL && (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS);
}

/* A decimal integer reply element (string or integer), or the JSON null. */
static void put_num(sb_t *s, const redisReply *e)
{
    if (e != NULL && e->type == REDIS_REPLY_INTEGER) {
        sb_i64(s, (int64_t)e->integer);
        return;
    }
    if (is_str(e) && e->len > 0 && e->len < 21) {
        char buf[24], *end;
        memcpy(buf, e->str, e->len);
        buf[e->len] = '\0';
        long long v = strtoll(buf, &end, 10);
        if (*end == '\0') {
            sb_i64(s, v);
            return;
        }
    }
    sb_puts(s, "null");
}

/* One board request. Its parts: board.lua on the {board} slot's node (announce, and every
 * live instance's snapshot), SMEMBERS seckill:streams (the sales), then per sale an HMGET
 * of its voucher hash and an HLEN of its buyers, each sent to the node owning that
 * voucher's slot (on one Redis all go down the one connection, pipelined). The page
 * needs no single moment across vouchers, so nothing here has to span slots. */
typedef struct board_req board_req_t;

typedef struct board_sale {
    board_req_t *b;
    int64_t id;
    sb_t hm;                /* "stock":..,"begin":..,"end":.. once HMGET answered */
    sb_t buyers;            /* the HLEN as JSON, once answered */
} board_sale_t;

struct board_req {
    http_req_t *r;
    int pending;            /* replies still due, plus one while a step is sending */
    int failed;             /* board.lua or SMEMBERS failed: 503 */
    const char *why;
    sb_t insts;             /* the valid snapshots, comma-separated */
    board_sale_t *sales;
    size_t nsales;
};

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
            sb_printf(&s, "%s{\"id\":%lld,", i ? "," : "", (long long)e->id);
            if (e->hm.len > 0) {
                sb_append(&s, e->hm.buf, e->hm.len);
            } else {
                sb_puts(&s, "\"stock\":null,\"begin\":null,\"end\":null");
            }
            sb_puts(&s, ",\"buyers\":");
            if (e->buyers.len > 0) {
                sb_append(&s, e->buyers.buf, e->buyers.len);
            } else {
                sb_puts(&s, "null");
            }
            sb_puts(&s, "}");
        }
        sb_puts(&s, "]}");
        api_ok(r, s.buf, s.len);
        sb_free(&s);
    }
    for (size_t i = 0; i < b->nsales; i++) {
        sb_free(&b->sales[i].hm);
        sb_free(&b->sales[i].buyers);
    }
    free(b->sales);
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

/* A voucher Redis does not answer for (its node is down) shows nulls: the rest of the
 * board is still worth showing. */
static void on_hmget(redisReply *rep, void *priv)
{
    board_sale_t *e = priv;
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3) {
        static const char *const field[3] = { "stock", "begin", "end" };
        for (int f = 0; f < 3; f++) {
            sb_printf(&e->hm, "%s\"%s\":", f ? "," : "", field[f]);
            put_num(&e->hm, rep->element[f]);
        }
    }
    board_unref(e->b);
}

static void on_hlen(redisReply *rep, void *priv)
{
    board_sale_t *e = priv;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER) {
        put_num(&e->buyers, rep);
    }
    board_unref(e->b);
}

/* The sales: then one HMGET and one HLEN per voucher, each routed by its own key. */
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
        char buf[24], *end;
        if (!is_str(e) || e->len == 0 || e->len >= sizeof buf) {
            continue;
        }
        memcpy(buf, e->str, e->len);
        buf[e->len] = '\0';
        long long id = strtoll(buf, &end, 10);
        if (*end != '\0' || id <= 0) {
            continue;
        }
        board_sale_t *s = &b->sales[b->nsales++];
        s->b = b;
        s->id = id;
    }
    rds_t *c = b->r->w->rds;
    b->pending += 2 * (int)b->nsales;      /* this callback's own reference is still held */
    for (size_t i = 0; i < b->nsales; i++) {
        board_sale_t *s = &b->sales[i];
        char vk[64], bk[64];
        int vl = key_voucher(vk, sizeof vk, s->id), bl = key_buyers(bk, sizeof bk, s->id);
        const char *hm[5] = { "HMGET", vk, "stock", "begin", "end" };
        size_t hml[5] = { 5, (size_t)vl, 5, 5, 3 };
        const char *hl[2] = { "HLEN", bk };
        size_t hll[2] = { 4, (size_t)bl };
        rds_command(c, on_hmget, s, 5, hm, hml);
        rds_command(c, on_hlen, s, 2, hl, hll);
    }
    board_unref(b);
}

void api_board_data(http_req_t *r)
{
    if (!api_admin_ok(r)) {
        api_error(r, 403, "admin token required", "FORBIDDEN");
        return;
    }
    board_req_t *b = xcalloc(1, sizeof *b);
    b->r = r;
    b->insts = (sb_t)SB_INIT;
    b->pending = 3;                        /* two replies, and this function's own */
    board_announce(r->w, 1, on_insts, b);
    const char *sm[2] = { "SMEMBERS", KEY_STREAMS };
    size_t sml[2] = { 8, strlen(KEY_STREAMS) };
    rds_command(r->w->rds, on_streams, b, 2, sm, sml);
    board_unref(b);
}
