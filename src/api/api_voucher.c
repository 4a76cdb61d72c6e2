/* api_voucher.c -- POST /voucher, POST /voucher/seckill (admin), GET /voucher/list/{shopId}.
 *
 * Creation is admin-only here (the course leaves it open): header x-admin-token must
 * equal the configured token, compared in constant time; with no token configured the
 * endpoints are refused. The body is the course's Voucher JSON, checked strictly: every
 * field has a type and a range, and the first bad one is named in a 400 reply.
 *
 * A flash-sale voucher is written to SQL (one transaction, a job) and then published to
 * Redis (publish_voucher), which is what makes it sellable. If publishing fails after
 * the SQL insert, the reply is 503; the voucher exists in SQL and the rebuild watch
 * (rebuild_watch.h) publishes it once Redis is back (docs/api-notes.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sale/onsale.h"
#include "room/pow.h"
#include "sale/publish.h"
#include "api/api.h"
#include "sale/buckets.h"
#include "core/app.h"
#include "core/clock.h"
#include "server/jobs.h"
#include "core/log.h"
#include "core/sb.h"
#include "store/store.h"
#include "server/worker.h"
#include "core/xmem.h"

#define MAX_STOCK 100000000LL
#define TITLE_MAX 255
#define SUBTITLE_MAX 255
#define RULES_MAX 1024

/* ------------------------------------------------------------ body checks */

static void bad(http_req_t *r, const char *fmt, const char *field)
{
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, field);
    api_error(r, 400, msg, "BAD_REQUEST");
}

/* Characters (code points) in a valid UTF-8 string, as MySQL's VARCHAR(n) counts. */
static size_t utf8_chars(const char *z, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)z[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    return c;
}

/* An integer member in [lo, hi]. Absent or null: *present = 0 (an error if required).
 * Returns 0, or -1 after replying 400. */
static int int_member(http_req_t *r, json_t *obj, const char *name, int required, int64_t lo,
                      int64_t hi, const char *range_msg, int64_t *out, int *present)
{
    json_t *v = json_object_get(obj, name);
    *present = 0;
    if (v == NULL || json_is_null(v)) {
        if (required) {
            bad(r, "%s is required", name);
            return -1;
        }
        return 0;
    }
    if (!json_is_integer(v)) {
        bad(r, "%s must be an integer", name);
        return -1;
    }
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s must be %s", name, range_msg);
        api_error(r, 400, msg, "BAD_REQUEST");
        return -1;
    }
    *out = (int64_t)x;
    *present = 1;
    return 0;
}

/* A string member of at most max characters; required ones must be non-empty. *out is a
 * malloc'ed copy or NULL when absent. Returns 0, or -1 after replying 400. */
static int str_member(http_req_t *r, json_t *obj, const char *name, int required, size_t max,
                      char **out)
{
    json_t *v = json_object_get(obj, name);
    *out = NULL;
    if (v == NULL || json_is_null(v)) {
        if (required) {
            bad(r, "%s is required", name);
            return -1;
        }
        return 0;
    }
    if (!json_is_string(v)) {
        bad(r, "%s must be a string", name);
        return -1;
    }
    const char *z = json_string_value(v);
    size_t n = json_string_length(v);
    if (required && n == 0) {
        bad(r, "%s must not be empty", name);
        return -1;
    }
    if (utf8_chars(z, n) > max) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s must be at most %zu characters", name, max);
        api_error(r, 400, msg, "BAD_REQUEST");
        return -1;
    }
    *out = xstrndup(z, n);
    return 0;
}

static int time_member(http_req_t *r, json_t *obj, const char *name, int64_t *out)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL || json_is_null(v)) {
        bad(r, "%s is required", name);
        return -1;
    }
    if (!json_is_string(v) || sb_datetime_parse(json_string_value(v), out) != 0) {
        bad(r, "%s must be a local date-time like \"2024-01-31T10:00:00\"", name);
        return -1;
    }
    return 0;
}

/* A flash sale that can sell: stock at least 1, an end in the future, a price not above
 * the voucher's worth (the checks the board's create form makes too, web/board.js). Body
 * member "allowClosed": true accepts stock 0 and an end in the past -- a sale recorded
 * that never sells (tests, a benchmark of the sold-out path, a past sale's record); the
 * price and the order of the times are checked anyway. Runs after the members' own checks.
 * Returns 0, or -1 after replying 400. */
static int sale_checks(http_req_t *r, json_t *obj, const store_voucher_t *v)
{
    json_t *ac = json_object_get(obj, "allowClosed");
    if (ac != NULL && !json_is_boolean(ac) && !json_is_null(ac)) {
        api_error(r, 400, "allowClosed must be true or false", "BAD_REQUEST");
        return -1;
    }
    int closed_ok = json_is_true(ac);
    const char *msg = NULL;
    if (v->pay_value > v->actual_value)
        msg = "payValue must not be above actualValue";
    else if (v->begin_time >= v->end_time)
        msg = "endTime must be after beginTime";
    else if (!closed_ok && v->stock < 1)
        msg = "stock must be an integer from 1 to 100000000";
    else if (!closed_ok && v->end_time <= clock_wall_s())
        msg = "endTime must be in the future";
    if (msg != NULL) {
        api_error(r, 400, msg, "BAD_REQUEST");
        return -1;
    }
    return 0;
}

/* "waitingRoom": {"admitPerSecond": R, "passTtlS": P, "botGate": bool} (room.h), optional.
 * Returns 0 (room->admit_per_s 0 when absent), or -1 after replying 400. */
static int room_member(http_req_t *r, json_t *root, store_room_t *room)
{
    json_t *o = json_object_get(root, "waitingRoom");
    memset(room, 0, sizeof *room);
    if (o == NULL || json_is_null(o))
        return 0;
    if (!json_is_object(o)) {
        api_error(r, 400, "waitingRoom must be an object", "BAD_REQUEST");
        return -1;
    }
    /* a misspelt member (botgate) would make a room without what the operator asked for */
    const char *k;
    json_t *kv;
    json_object_foreach(o, k, kv) {
        if (strcmp(k, "admitPerSecond") != 0 && strcmp(k, "passTtlS") != 0 &&
            strcmp(k, "botGate") != 0) {
            int shown = strlen(k) <= 40;   /* named when short and printable ASCII */
            for (const char *c = k; shown && *c; c++)
                shown = *c >= 0x20 && *c < 0x7f;
            bad(r, shown ? "waitingRoom has no member %s (admitPerSecond, passTtlS, botGate)"
                         : "waitingRoom has an unknown member%s (admitPerSecond, passTtlS, "
                           "botGate)", shown ? k : "");
            return -1;
        }
    }
    int64_t ttl = 60;
    int p;
    if (int_member(r, o, "admitPerSecond", 1, 1, 1000000, "an integer from 1 to 1000000",
                   &room->admit_per_s, &p) ||
        int_member(r, o, "passTtlS", 0, 5, 3600, "an integer from 5 to 3600", &ttl, &p))
        return -1;
    room->pass_ttl_s = (int)ttl;
    json_t *g = json_object_get(o, "botGate");
    if (g != NULL && !json_is_null(g) && !json_is_boolean(g)) {
        api_error(r, 400, "botGate must be true or false", "BAD_REQUEST");
        return -1;
    }
    room->bot_gate = g != NULL && json_is_true(g);
    return 0;
}

/* ------------------------------------------------------------ create */

typedef struct create_ctx {
    http_req_t *r;
    store_voucher_t v;
    int64_t buckets;            /* stockBuckets: how many stock buckets (buckets.h) */
    int rc;
    char err[160];
} create_ctx_t;

static void create_free(create_ctx_t *c)
{
    free(c->v.title);
    free(c->v.sub_title);
    free(c->v.rules);
    free(c);
}

static void reply_id(http_req_t *r, int64_t id)
{
    char data[24];
    int n = snprintf(data, sizeof(data), "%lld", (long long)id);
    api_ok(r, data, (size_t)n);
}

static void on_published(http_req_t *r, int ok)
{
    create_ctx_t *c = r->ctx;
    r->ctx = NULL;
    int64_t id = c->v.id;
    create_free(c);
    if (ok) {
        log_info("flash-sale voucher %lld created and published", (long long)id);
        reply_id(r, id);
        return;
    }
    log_error("flash-sale voucher %lld is in SQL but could not be published to Redis: "
              "the rebuild watch publishes it from SQL once Redis answers", (long long)id);
    char msg[160];
    snprintf(msg, sizeof(msg), "voucher %lld was saved but could not be made sellable "
             "(redis unavailable)", (long long)id);
    api_unavailable(r, msg);
}

static void run_create(store_t *st, void *arg)
{
    create_ctx_t *c = arg;
    if (st == NULL) {
        c->rc = STORE_ERR;
        snprintf(c->err, sizeof(c->err), "no database connection");
        return;
    }
    c->rc = store_voucher_create(st, &c->v);
    if (c->rc != STORE_OK) {
        snprintf(c->err, sizeof(c->err), "%s", store_errmsg(st));
    }
}

static void done_create(worker_t *w, void *arg)
{
    create_ctx_t *c = arg;
    http_req_t *r = c->r;
    if (c->rc != STORE_OK) {
        log_error("voucher create failed: %s", c->err);
        create_free(c);
        api_unavailable(r, "database unavailable");
        return;
    }
    if (!onsale_voucher(c->v.is_seckill, c->v.type, c->v.status)) {
        /* kept in SQL, not sold (onsale.h); a grab answers as for an unknown voucher */
        int64_t id = c->v.id;
        if (c->v.is_seckill)
            log_info("voucher %lld created, not on sale (type %d, status %d): not published",
                     (long long)id, c->v.type, c->v.status);
        else
            log_info("voucher %lld created", (long long)id);
        create_free(c);
        reply_id(r, id);
        return;
    }
    if (c->v.room.bot_gate)   /* --code-gate sale, here at once (elsewhere: rebuild_watch) */
        pow_gate_sale(w->app, c->v.id, c->v.begin_time, c->v.end_time);
    r->ctx = c;
    publish_voucher(r, c->v.id, c->v.stock, c->v.begin_time, c->v.end_time, (int)c->buckets,
                    &c->v.room, on_published);
}

void api_voucher_create(http_req_t *r, int seckill)
{
    if (!api_admin_required(r)) {
        return;
    }
    json_error_t jerr;
    json_t *root = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL || !json_is_object(root)) {
        char msg[256];
        if (root != NULL || r->body_len == 0) {
            snprintf(msg, sizeof(msg), "request body must be a JSON object");
        } else {
            snprintf(msg, sizeof(msg), "invalid JSON body: %s (line %d, column %d)", jerr.text,
                     jerr.line, jerr.column);
        }
        json_decref(root);
        api_error(r, 400, msg, "BAD_REQUEST");
        return;
    }
    create_ctx_t *c = xcalloc(1, sizeof(*c));
    store_voucher_t *v = &c->v;
    c->buckets = 1;
    int64_t type = seckill ? 1 : 0, status = 1;
    int p;
    int failed =
        int_member(r, root, "shopId", 1, 1, INT64_MAX, "a positive integer", &v->shop_id, &p) ||
        str_member(r, root, "title", 1, TITLE_MAX, &v->title) ||
        str_member(r, root, "subTitle", 0, SUBTITLE_MAX, &v->sub_title) ||
        str_member(r, root, "rules", 0, RULES_MAX, &v->rules) ||
        int_member(r, root, "payValue", 1, 0, INT64_MAX, "a non-negative integer (cents)",
                   &v->pay_value, &p) ||
        int_member(r, root, "actualValue", 1, 0, INT64_MAX, "a non-negative integer (cents)",
                   &v->actual_value, &p) ||
        int_member(r, root, "type", 0, 0, 1, "0 (normal) or 1 (flash sale)", &type, &p) ||
        int_member(r, root, "status", 0, 1, 3, "1 (on shelf), 2 (off shelf) or 3 (expired)",
                   &status, &p);
    if (!failed && seckill) {
        failed = int_member(r, root, "stock", 1, 0, MAX_STOCK, "an integer from 0 to 100000000",
                            &v->stock, &p) ||
                 time_member(r, root, "beginTime", &v->begin_time) ||
                 time_member(r, root, "endTime", &v->end_time) ||
                 int_member(r, root, "stockBuckets", 0, 1, BUCKETS_MAX, "an integer from 1 to 16",
                            &c->buckets, &p);
        if (!failed)
            failed = room_member(r, root, &v->room);
        if (!failed && v->room.admit_per_s > 0 && c->buckets > 1) {
            /* a room counts one voucher's stock (room.lua reads bucket 0's hash) */
            api_error(r, 400, "waitingRoom cannot be combined with stockBuckets above 1",
                      "BAD_REQUEST");
            failed = 1;
        }
        if (!failed && sale_checks(r, root, v) != 0)
            failed = 1;
        order_mode_t mode = r->w->app->cfg.mode;
        if (!failed && c->buckets > 1 && mode != MODE_STREAM) {
            /* Buckets split the Redis admission and its streams: elsewhere they would be
             * accepted and mean nothing (docs/redis-cluster.md, "Stock buckets"). */
            char msg[200];
            snprintf(msg, sizeof msg, "stockBuckets above 1 needs --mode stream; this server "
                     "runs --mode %s", r->w->app->cfg.mode_name);
            api_error(r, 400, msg, "BAD_REQUEST");
            failed = 1;
        }
    }
    json_decref(root);
    if (failed) {
        create_free(c);
        return;
    }
    v->type = (int)type;
    v->status = (int)status;
    v->is_seckill = seckill;
    v->buckets = (int)c->buckets;   /* kept in SQL too: a rebuild brings every bucket back */
    c->r = r;
    c->rc = STORE_ERR;
    if (jobs_submit(r->w->app->jobs, r->w, run_create, done_create, c) != 0) {
        create_free(c);
        api_unavailable(r, "server busy");
    }
}

/* ------------------------------------------------------------ list */

typedef struct list_ctx {
    http_req_t *r;
    int64_t shop_id;
    int rc;
    store_voucher_t *list;
    size_t n;
} list_ctx_t;

static void run_list(store_t *st, void *arg)
{
    list_ctx_t *c = arg;
    c->rc = st == NULL ? STORE_ERR : store_voucher_list(st, c->shop_id, &c->list, &c->n);
    if (c->rc == STORE_NOTFOUND) {
        c->rc = STORE_OK;
        c->list = NULL;
        c->n = 0;
    }
}

static void json_str_member(sb_t *s, const char *key, const char *z)
{
    if (z != NULL) {
        sb_printf(s, ",\"%s\":", key);
        sb_json_str(s, z, strlen(z));
    }
}

static void done_list(worker_t *w, void *arg)
{
    list_ctx_t *c = arg;
    http_req_t *r = c->r;
    if (c->rc != STORE_OK) {
        store_voucher_list_free(c->list, c->n);
        free(c);
        api_unavailable(r, "database unavailable");
        return;
    }
    sb_t s = SB_INIT;
    sb_puts(&s, "[");
    for (size_t i = 0; i < c->n; i++) {
        const store_voucher_t *v = &c->list[i];
        sb_printf(&s, "%s{\"id\":%lld,\"shopId\":%lld", i ? "," : "", (long long)v->id,
                  (long long)v->shop_id);
        json_str_member(&s, "title", v->title ? v->title : "");
        json_str_member(&s, "subTitle", v->sub_title);
        json_str_member(&s, "rules", v->rules);
        sb_printf(&s, ",\"payValue\":%lld,\"actualValue\":%lld,\"type\":%d",
                  (long long)v->pay_value, (long long)v->actual_value, v->type);
        if (v->is_seckill) {
            sb_printf(&s, ",\"stock\":%lld,\"beginTime\":", (long long)v->stock);
            sb_json_datetime(&s, v->begin_time);
            sb_puts(&s, ",\"endTime\":");
            sb_json_datetime(&s, v->end_time);
        }
        sb_puts(&s, "}");
    }
    sb_puts(&s, "]");
    store_voucher_list_free(c->list, c->n);
    free(c);
    api_ok(r, s.buf, s.len);
    sb_free(&s);
}

void api_voucher_list(http_req_t *r, int64_t shop_id)
{
    list_ctx_t *c = xcalloc(1, sizeof(*c));
    c->r = r;
    c->shop_id = shop_id;
    c->rc = STORE_ERR;
    if (jobs_submit(r->w->app->jobs, r->w, run_list, done_list, c) != 0) {
        free(c);
        api_unavailable(r, "server busy");
    }
}
