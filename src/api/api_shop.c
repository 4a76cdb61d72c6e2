/* api_shop.c -- the course's shop reads: GET /shop/{id}, /shop/of/type, /shop/of/name,
 * /shop-type/list; POST /shop and PUT /shop (admin) to add and change a shop.
 *
 * A shop by id and the shop-type list are read through the cache-aside helper
 * (cache/cacheaside.h) under the course's keys (cache:shop:<id>, 30 minutes; an unknown
 * id cached as "" for 2 minutes; a mutex lock:shop:<id> so concurrent misses cost one SQL
 * read; jittered TTLs). The cached value is the shop's JSON as the answer's data, so a
 * hit costs one GET and no re-encoding. The page lists (/shop/of/type, /shop/of/name) go
 * to SQL each time, as in the course; x and y (the GEO variant) are accepted and ignored.
 * SQL runs on the jobs pool (jobs.h), never on the event loop.
 *
 * Writing a shop needs the admin token (x-admin-token), as creating a voucher does. A
 * write goes to SQL first and then deletes cache:shop:<id> (the course's rule: delete,
 * not update, the cache after the database), before the answer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/api.h"
#include "cache/cacheaside.h"
#include "core/app.h"
#include "core/key.h"
#include "core/log.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "server/jobs.h"
#include "server/worker.h"
#include "store/store.h"

#define SHOP_TTL_S 1800          /* CACHE_SHOP_TTL, 30 minutes */
#define SHOP_EMPTY_TTL_S 120     /* CACHE_NULL_TTL, 2 minutes */
#define TYPE_PAGE 5              /* DEFAULT_PAGE_SIZE: /shop/of/type */
#define NAME_PAGE 10             /* MAX_PAGE_SIZE: /shop/of/name */
#define PAGE_MAX 100000          /* a larger ?current= is refused, not multiplied */
#define BUSY "系统繁忙，请重试"

static const cacheaside_spec_t shop_spec = { "shop", SHOP_TTL_S, SHOP_EMPTY_TTL_S };
static const cacheaside_spec_t types_spec = { "shop-type", SHOP_TTL_S, SHOP_EMPTY_TTL_S };

/* ------------------------------------------------------------------ JSON */

static void str_member(sb_t *s, const char *key, const char *z, int omit_empty)
{
    if (omit_empty && z[0] == '\0')
        return;
    sb_printf(s, ",\"%s\":", key);
    sb_json_str(s, z, strlen(z));
}

static void time_member(sb_t *s, const char *key, int64_t t)
{
    if (t <= 0)
        return;
    sb_printf(s, ",\"%s\":", key);
    sb_json_datetime(s, t);
}

/* The course's Shop JSON: NULL columns omitted (area, avgPrice, openHours). */
static void shop_json(sb_t *s, const store_shop_t *p)
{
    sb_printf(s, "{\"id\":%lld", (long long)p->id);
    str_member(s, "name", p->name, 0);
    sb_printf(s, ",\"typeId\":%lld", (long long)p->type_id);
    str_member(s, "images", p->images, 0);
    str_member(s, "area", p->area, 1);
    str_member(s, "address", p->address, 0);
    sb_printf(s, ",\"x\":%.15g,\"y\":%.15g", p->x, p->y);
    if (p->avg_price >= 0)
        sb_printf(s, ",\"avgPrice\":%lld", (long long)p->avg_price);
    sb_printf(s, ",\"sold\":%lld,\"comments\":%lld,\"score\":%lld", (long long)p->sold,
              (long long)p->comments, (long long)p->score);
    str_member(s, "openHours", p->open_hours, 1);
    time_member(s, "createTime", p->create_time);
    time_member(s, "updateTime", p->update_time);
    sb_puts(s, "}");
}

/* Hands s's buffer to the cache helper (malloc'ed, *len bytes). */
static int give(sb_t *s, char **json, size_t *len)
{
    *len = s->len;
    *json = s->buf;
    return CACHEASIDE_FOUND;
}

/* ------------------------------------------------------------------ GET /shop/{id} */

typedef struct get_ctx {
    http_req_t *r;
    int64_t id;
} get_ctx_t;

static int load_shop(store_t *st, void *arg, char **json, size_t *len)
{
    get_ctx_t *c = arg;
    store_shop_t *p = xcalloc(1, sizeof *p);
    int rc = store_shop_get(st, c->id, p);
    if (rc != STORE_OK) {
        if (rc == STORE_ERR)
            log_error("shop %lld: %s", (long long)c->id, store_errmsg(st));
        free(p);
        return rc == STORE_NOTFOUND ? CACHEASIDE_EMPTY : CACHEASIDE_UNAVAILABLE;
    }
    sb_t s = SB_INIT;
    shop_json(&s, p);
    free(p);
    return give(&s, json, len);
}

static void on_shop(void *priv, int status, const char *json, size_t len)
{
    get_ctx_t *c = priv;
    http_req_t *r = c->r;
    free(c);
    if (status == CACHEASIDE_FOUND)
        api_ok(r, json, len);
    else if (status == CACHEASIDE_EMPTY)
        api_fail(r, "店铺不存在！", "NOT_FOUND");
    else
        api_unavailable(r, BUSY);
}

void api_shop_get(http_req_t *r, int64_t id)
{
    char key[64], lock[64];
    if (key_cache_shop(key, sizeof key, id) < 0 || key_lock_shop(lock, sizeof lock, id) < 0) {
        api_unavailable(r, BUSY);
        return;
    }
    get_ctx_t *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->id = id;
    cacheaside_get(r->w, &shop_spec, key, lock, load_shop, c, on_shop, c);
}

/* ------------------------------------------------------------------ GET /shop-type/list */

static int load_types(store_t *st, void *arg, char **json, size_t *len)
{
    store_shop_type_t *t;
    size_t n;
    if (store_shop_types(st, &t, &n) != STORE_OK) {
        log_error("shop types: %s", store_errmsg(st));
        return CACHEASIDE_UNAVAILABLE;
    }
    sb_t s = SB_INIT;
    sb_puts(&s, "[");
    for (size_t i = 0; i < n; i++) {
        sb_printf(&s, "%s{\"id\":%lld", i ? "," : "", (long long)t[i].id);
        str_member(&s, "name", t[i].name, 0);
        str_member(&s, "icon", t[i].icon, 0);
        sb_printf(&s, ",\"sort\":%lld", (long long)t[i].sort);
        time_member(&s, "createTime", t[i].create_time);
        time_member(&s, "updateTime", t[i].update_time);
        sb_puts(&s, "}");
    }
    sb_puts(&s, "]");
    free(t);
    return give(&s, json, len);
}

static void on_types(void *priv, int status, const char *json, size_t len)
{
    http_req_t *r = priv;
    if (status == CACHEASIDE_FOUND)
        api_ok(r, json, len);
    else if (status == CACHEASIDE_EMPTY)   /* only if someone wrote "" into the key */
        api_ok(r, "[]", 2);
    else
        api_unavailable(r, BUSY);
}

void api_shop_types(http_req_t *r)
{
    cacheaside_get(r->w, &types_spec, KEY_CACHE_SHOP_TYPES, KEY_LOCK_SHOP_TYPES, load_types,
                   NULL, on_types, r);
}

/* ------------------------------------------------------------------ the page lists */

typedef struct list_ctx {
    http_req_t *r;
    store_shop_query_t q;
    char name[520];              /* a shop name's length at most (VARCHAR(128), UTF-8) */
    int rc;
    store_shop_t *shops;
    size_t n;
} list_ctx_t;

static void run_list(store_t *st, void *arg)
{
    list_ctx_t *c = arg;
    c->rc = st == NULL ? STORE_ERR : store_shop_list(st, &c->q, &c->shops, &c->n);
    if (c->rc == STORE_ERR && st != NULL)
        log_error("shop list: %s", store_errmsg(st));
}

static void done_list(worker_t *w, void *arg)
{
    list_ctx_t *c = arg;
    http_req_t *r = c->r;
    if (c->rc != STORE_OK) {
        free(c->shops);
        free(c);
        api_unavailable(r, BUSY);
        return;
    }
    sb_t s = SB_INIT;
    sb_puts(&s, "[");
    for (size_t i = 0; i < c->n; i++) {
        if (i)
            sb_puts(&s, ",");
        shop_json(&s, &c->shops[i]);
    }
    sb_puts(&s, "]");
    free(c->shops);
    free(c);
    api_ok(r, s.buf, s.len);
    sb_free(&s);
}

/* ?current= as the page number (1 when absent). Returns 0, or -1 after replying 400. */
static int page_param(http_req_t *r, int64_t *page)
{
    char v[24];
    *page = 1;
    int n = http_query_get(r->query, "current", v, sizeof v);
    if (n <= 0)
        return 0;
    if (api_parse_id(v, (size_t)n, page) != 0 || *page > PAGE_MAX) {
        api_error(r, 400, "current must be a page number from 1 to 100000", "BAD_REQUEST");
        return -1;
    }
    return 0;
}

static void list_submit(http_req_t *r, list_ctx_t *c, int64_t page, int64_t size)
{
    c->r = r;
    c->q.offset = (page - 1) * size;
    c->q.limit = size;
    c->rc = STORE_ERR;
    if (jobs_submit(r->w->app->jobs, r->w, run_list, done_list, c) != 0) {
        free(c);
        api_unavailable(r, BUSY);
    }
}

void api_shop_of_type(http_req_t *r)
{
    char v[24];
    int64_t type_id, page;
    int n = http_query_get(r->query, "typeId", v, sizeof v);
    if (n <= 0 || api_parse_id(v, (size_t)n, &type_id) != 0) {
        api_error(r, 400, "typeId is required: a shop type id", "BAD_REQUEST");
        return;
    }
    if (page_param(r, &page) != 0)
        return;
    list_ctx_t *c = xcalloc(1, sizeof *c);
    c->q.type_id = type_id;
    list_submit(r, c, page, TYPE_PAGE);
}

void api_shop_of_name(http_req_t *r)
{
    int64_t page;
    if (page_param(r, &page) != 0)
        return;
    list_ctx_t *c = xcalloc(1, sizeof *c);
    int n = http_query_get(r->query, "name", c->name, sizeof c->name);
    int given = strncmp(r->query, "name=", 5) == 0 || strstr(r->query, "&name=") != NULL;
    if (n < 0 && given) {
        free(c);
        api_error(r, 400, "name must be at most 128 characters", "BAD_REQUEST");
        return;
    }
    c->q.name = n > 0 ? c->name : NULL;
    list_submit(r, c, page, NAME_PAGE);
}

/* ------------------------------------------------------- POST /shop, PUT /shop (admin) */

typedef struct create_ctx {
    http_req_t *r;
    store_shop_t shop;
    int update;                  /* PUT: overwrite shop.id's row */
    int rc;
} create_ctx_t;

/* Copies a string member of at most max characters (UTF-8, as VARCHAR counts) into dst
 * (dstlen bytes, room for max 4-byte characters). Returns 0, or -1 with msg set. */
static int copy_text(const char *name, const char *z, size_t max, int required, char *dst,
                     size_t dstlen, char *msg, size_t msglen)
{
    size_t chars = 0, bytes = z ? strlen(z) : 0;
    for (size_t i = 0; i < bytes; i++)
        chars += ((unsigned char)z[i] & 0xC0) != 0x80;
    if (required && chars == 0) {
        snprintf(msg, msglen, "%s is required and must not be empty", name);
        return -1;
    }
    if (chars > max || bytes >= dstlen) {
        snprintf(msg, msglen, "%s must be at most %zu characters", name, max);
        return -1;
    }
    memcpy(dst, z ? z : "", bytes + 1);
    return 0;
}

/* The members of a shop in the body: 's' a string, 'i' an integer, 'n' a number;
 * required ones must be present and not null, an optional null counts as absent. */
static const struct {
    const char *key;
    char kind;
    int required;
} shop_members[] = {
    { "name", 's', 1 }, { "typeId", 'i', 1 }, { "images", 's', 0 }, { "area", 's', 0 },
    { "address", 's', 1 }, { "x", 'n', 1 }, { "y", 'n', 1 }, { "avgPrice", 'i', 0 },
    { "sold", 'i', 0 }, { "comments", 'i', 0 }, { "score", 'i', 0 }, { "openHours", 's', 0 },
    { "id", 'i', 0 },
};

/* Checks every member's presence and type; 0, or -1 with msg naming the first bad one. */
static int shop_members_ok(json_t *root, char *msg, size_t msglen)
{
    for (size_t i = 0; i < sizeof shop_members / sizeof shop_members[0]; i++) {
        json_t *v = json_object_get(root, shop_members[i].key);
        if (v == NULL || json_is_null(v)) {
            if (!shop_members[i].required)
                continue;
            snprintf(msg, msglen, "%s is required", shop_members[i].key);
            return -1;
        }
        char k = shop_members[i].kind;
        if ((k == 's' && !json_is_string(v)) || (k == 'i' && !json_is_integer(v)) ||
            (k == 'n' && !json_is_number(v))) {
            snprintf(msg, msglen, "%s must be %s", shop_members[i].key,
                     k == 's' ? "a string" : k == 'i' ? "an integer" : "a number");
            return -1;
        }
    }
    return 0;
}

static const char *text_of(json_t *root, const char *key)
{
    const char *z = json_string_value(json_object_get(root, key));
    return z ? z : "";
}

static json_int_t int_of(json_t *root, const char *key, json_int_t absent)
{
    json_t *v = json_object_get(root, key);
    return json_is_integer(v) ? json_integer_value(v) : absent;
}

/* Reads the body into p. Returns 0, or -1 with msg set. */
static int shop_from_body(const http_req_t *r, store_shop_t *p, char *msg, size_t msglen)
{
    json_error_t err;
    json_t *root = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL || !json_is_object(root)) {
        if (root == NULL && r->body_len > 0)
            snprintf(msg, msglen, "invalid JSON body: %s (line %d, column %d)", err.text,
                     err.line, err.column);
        else
            snprintf(msg, msglen, "request body must be a JSON object");
        json_decref(root);
        return -1;
    }
    if (shop_members_ok(root, msg, msglen) != 0) {
        json_decref(root);
        return -1;
    }
    int bad =
        copy_text("name", text_of(root, "name"), 128, 1, p->name, sizeof p->name, msg, msglen) ||
        copy_text("images", text_of(root, "images"), 1024, 0, p->images, sizeof p->images, msg,
                  msglen) ||
        copy_text("area", text_of(root, "area"), 128, 0, p->area, sizeof p->area, msg, msglen) ||
        copy_text("address", text_of(root, "address"), 255, 1, p->address, sizeof p->address,
                  msg, msglen) ||
        copy_text("openHours", text_of(root, "openHours"), 32, 0, p->open_hours,
                  sizeof p->open_hours, msg, msglen);
    json_int_t type_id = int_of(root, "typeId", 0), avg = int_of(root, "avgPrice", -1);
    json_int_t sold = int_of(root, "sold", 0), comments = int_of(root, "comments", 0);
    json_int_t score = int_of(root, "score", 0), id = int_of(root, "id", 0);
    if (avg < 0 && json_is_integer(json_object_get(root, "avgPrice")))
        avg = -2;   /* given and negative: refused below, not taken for "absent" */
    double x = json_number_value(json_object_get(root, "x"));
    double y = json_number_value(json_object_get(root, "y"));
    json_decref(root);
    if (bad)
        return -1;
    if (type_id < 1) {
        snprintf(msg, msglen, "typeId must be a positive integer");
        return -1;
    }
    if (!isfinite(x) || !isfinite(y) || x < -180 || x > 180 || y < -90 || y > 90) {
        snprintf(msg, msglen, "x must be a longitude (-180 to 180), y a latitude (-90 to 90)");
        return -1;
    }
    if (avg < -1 || sold < 0 || comments < 0 || avg > 1000000000 || sold > 1000000000 ||
        comments > 1000000000) {
        snprintf(msg, msglen, "avgPrice, sold and comments must be integers from 0 to 1000000000");
        return -1;
    }
    if (score < 0 || score > 50) {
        snprintf(msg, msglen, "score must be 0 to 50 (1 to 5 stars times 10)");
        return -1;
    }
    p->id = id > 0 ? id : 0;   /* PUT's row; POST ignores it (SQL picks the id) */
    p->type_id = type_id;
    p->x = x;
    p->y = y;
    p->avg_price = avg;
    p->sold = sold;
    p->comments = comments;
    p->score = score;
    return 0;
}

static void run_create(store_t *st, void *arg)
{
    create_ctx_t *c = arg;
    if (st == NULL)
        c->rc = STORE_ERR;
    else
        c->rc = c->update ? store_shop_update(st, &c->shop) : store_shop_create(st, &c->shop);
    if (c->rc == STORE_ERR && st != NULL)
        log_error("shop %s: %s", c->update ? "update" : "create", store_errmsg(st));
}

static void on_forgotten(void *priv, int ok)
{
    create_ctx_t *c = priv;
    http_req_t *r = c->r;
    int64_t id = c->shop.id;
    int update = c->update;
    free(c);
    if (!ok)
        log_warn("shop %lld %s; cache:shop:%lld could not be deleted (redis unavailable): "
                 "readers may see the old answer until its TTL ends", (long long)id,
                 update ? "updated" : "created", (long long)id);
    log_info("shop %lld %s", (long long)id, update ? "updated" : "created");
    if (update) {
        api_ok(r, NULL, 0);
        return;
    }
    char data[24];
    int n = snprintf(data, sizeof data, "%lld", (long long)id);
    api_ok(r, data, (size_t)n);
}

static void done_create(worker_t *w, void *arg)
{
    create_ctx_t *c = arg;
    http_req_t *r = c->r;
    char key[64];
    if (c->rc == STORE_NOTFOUND) {
        free(c);
        api_fail(r, "店铺不存在！", "NOT_FOUND");
        return;
    }
    if (c->rc != STORE_OK || key_cache_shop(key, sizeof key, c->shop.id) < 0) {
        free(c);
        api_unavailable(r, "database unavailable");
        return;
    }
    /* The course's order: SQL first, then delete the cache (not update it), answered only
     * once Redis has done it, so whoever is told "done" reads the new row. For a new id
     * this drops a cached "no such shop" left by a read before it existed. */
    cacheaside_forget(w, key, on_forgotten, c);
}

/* POST /shop (update 0) and PUT /shop (update 1; the body's id names the row). */
static void shop_write(http_req_t *r, int update)
{
    if (!api_admin_ok(r)) {
        api_error(r, 403, "admin token required", "FORBIDDEN");
        return;
    }
    create_ctx_t *c = xcalloc(1, sizeof *c);
    char msg[256];
    if (shop_from_body(r, &c->shop, msg, sizeof msg) != 0) {
        free(c);
        api_error(r, 400, msg, "BAD_REQUEST");
        return;
    }
    if (update && c->shop.id <= 0) {
        free(c);
        api_fail(r, "店铺id不能为空", "BAD_REQUEST");
        return;
    }
    c->r = r;
    c->update = update;
    c->rc = STORE_ERR;
    if (jobs_submit(r->w->app->jobs, r->w, run_create, done_create, c) != 0) {
        free(c);
        api_unavailable(r, BUSY);
    }
}

void api_shop_create(http_req_t *r)
{
    shop_write(r, 0);
}

void api_shop_update(http_req_t *r)
{
    shop_write(r, 1);
}
