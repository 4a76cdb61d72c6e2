/* api_board.c -- the sale board: GET /admin/ (page, script, style) and GET /admin/api/board.
 *
 * The page (web/board.*) is compiled into the binary (tools/embed.sh) and public: it holds
 * no data. Its data call needs x-admin-token. One EVALSHA of scripts/board.lua announces
 * this instance and returns every live instance's snapshot (board.c) and every sale's
 * Redis stock and buyer count; the page polls it once a second and takes rates from the
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
#include "rds.h"
#include "sb.h"
#include "worker.h"

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

static void on_board(redisReply *rep, void *priv)
{
    http_req_t *r = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_ARRAY || rep->element[1]->type != REDIS_REPLY_ARRAY) {
        api_unavailable(r, rep != NULL && rep->type == REDIS_REPLY_ERROR ? "redis error" : "redis");
        return;
    }
    app_t *app = r->w->app;
    sb_t s = SB_INIT;
    sb_puts(&s, "{\"self\":");
    sb_json_str(&s, app->name, strlen(app->name));
    sb_printf(&s, ",\"now\":%llu,\"instances\":[", (unsigned long long)clock_wall_ms());
    const redisReply *in = rep->element[0];
    int first = 1;
    for (size_t i = 0; i < in->elements; i++) {
        const redisReply *e = in->element[i];
        if (!is_str(e)) {
            continue;
        }
        json_t *j = json_loadb(e->str, e->len, 0, NULL);
        int ok = j != NULL && json_is_object(j);
        json_decref(j);
        if (ok) {
            sb_puts(&s, first ? "" : ",");
            sb_append(&s, e->str, e->len);
            first = 0;
        }
    }
    sb_puts(&s, "],\"sales\":[");
    const redisReply *sa = rep->element[1];
    first = 1;
    for (size_t i = 0; i < sa->elements; i++) {
        const redisReply *e = sa->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 5) {
            continue;
        }
        static const char *const field[5] = { "id", "stock", "begin", "end", "buyers" };
        sb_puts(&s, first ? "{" : ",{");
        for (int f = 0; f < 5; f++) {
            sb_printf(&s, "%s\"%s\":", f ? "," : "", field[f]);
            put_num(&s, e->element[f]);
        }
        sb_puts(&s, "}");
        first = 0;
    }
    sb_puts(&s, "]}");
    api_ok(r, s.buf, s.len);
    sb_free(&s);
}

void api_board_data(http_req_t *r)
{
    if (!api_admin_ok(r)) {
        api_error(r, 403, "admin token required", "FORBIDDEN");
        return;
    }
    worker_t *w = r->w;
    if (!board_is_supported(w->app)) {
        api_unavailable(r, "the sale board needs a single Redis, not a Redis Cluster");
        return;
    }
    sb_t s = SB_INIT;
    board_snapshot(w, &s);
    char ttl[16];
    int tl = snprintf(ttl, sizeof ttl, "%d", BOARD_TTL_MS);
    const char *argv[4] = { w->app->name, s.buf, ttl, "1" };
    size_t lens[4] = { strlen(w->app->name), s.len, (size_t)tl, 1 };
    rds_evalsha(w->rds, SCRIPT_BOARD, on_board, r, 0, 4, argv, lens);
    sb_free(&s);
}
