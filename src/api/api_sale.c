/* api_sale.c -- the admin's sale controls: POST /admin/api/sale/{id}/{pause,resume,end,extend}.
 *
 * Each control is one SQL job then one Redis step on every stock bucket of the voucher:
 *   - end:    SQL end_time and the hash's `end` become now (a sale not started yet: its
 *             begin, so it never opens): admit.lua refuses 秒杀已经结束！ from the next
 *             admission on (its window check reads the hash);
 *   - extend: body {"endTime":"2026-01-31T12:00:00"}, later than now, than the sale's
 *             current end and than its begin: SQL and the hash's `end` take it, so an
 *             ended sale sells again;
 *   - pause:  the hash's `paused` field is set: admit.lua refuses 秒杀已暂停 (code PAUSED);
 *   - resume: the field is removed.
 * SQL goes first, so a rebuild from SQL (rebuild.h) brings the new end back; a pause lives
 * in Redis only (a hash rebuilt after Redis lost its data starts unpaused). Nothing here
 * touches stock, buyers or streams: admissions already made are persisted as usual (an
 * extend takes the sale's streams out of the writers' drained set, and the writers read
 * a sale's window again before marking its stream drained or an order dead). Each
 * instance's workers keep a voucher's refusal for soldout_cache_ms (admission.h), so every
 * instance follows within that (500 ms by default); this worker's is dropped at once.
 * Pause needs admit.lua's check: it is refused in modes that do not admit through it
 * (sync and the lab's). Each control is written to the event log (events.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "api/api.h"
#include "core/app.h"
#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "redis/rds.h"
#include "sale/admission.h"
#include "sale/buckets.h"
#include "server/events.h"
#include "server/jobs.h"
#include "store/store.h"
#include "server/worker.h"

typedef struct ctl {
    http_req_t *r;
    int64_t id;
    sale_action_t act;
    int64_t now, new_end;       /* wall seconds; the end to write (end, extend) */
    int64_t begin, end;         /* the sale's, from SQL */
    int k;                      /* its stock buckets */
    int rc;                     /* STORE_* of the job */
    char err[200];              /* a refusal the job found (400), else "" */
    int left, failed;           /* Redis replies still due; one failed */
} ctl_t;

static const char *const act_name[] = { "pause", "resume", "end", "extend" };

static void run_ctl(store_t *st, void *arg)
{
    ctl_t *c = arg;
    store_voucher_t v;
    memset(&v, 0, sizeof v);
    c->rc = st == NULL ? STORE_ERR : store_voucher_get(st, c->id, &v);
    if (c->rc != STORE_OK)
        return;
    int seckill = v.is_seckill;
    c->begin = v.begin_time;
    c->end = v.end_time;
    store_voucher_clear(&v);
    if (!seckill) {
        c->rc = STORE_NOTFOUND;
        return;
    }
    int k = 1;
    if (store_voucher_buckets(st, c->id, &k) != STORE_OK) {
        c->rc = STORE_ERR;
        return;
    }
    c->k = k < 1 ? 1 : k > BUCKETS_MAX ? BUCKETS_MAX : k;
    if (c->act == SALE_END) {
        if (c->end <= c->now) {
            snprintf(c->err, sizeof c->err, "the sale has already ended");
            return;
        }
        /* a sale not started yet ends at its begin: it never opens */
        c->new_end = c->now > c->begin ? c->now : c->begin;
    } else if (c->act == SALE_EXTEND) {
        if (c->new_end <= c->begin)
            snprintf(c->err, sizeof c->err, "endTime must be after beginTime");
        else if (c->new_end <= c->end)
            snprintf(c->err, sizeof c->err, "endTime must be later than the sale's current end");
        if (c->err[0])
            return;
    } else {
        return;
    }
    store_arg_t a[2] = { { .v = c->new_end, .is_time = 1 }, { .v = c->id } };
    int64_t changed = 0;
    if (store_exec(st, "UPDATE tb_seckill_voucher SET end_time = ? WHERE voucher_id = ?", a, 2,
                   1, &changed) != STORE_OK)
        c->rc = STORE_ERR;
}

static void ctl_reply(ctl_t *c)
{
    http_req_t *r = c->r;
    if (c->failed) {
        api_unavailable(r, "redis unavailable: the change is in SQL, retry the control");
    } else {
        admission_forget(r->w, c->id);
        if (c->act == SALE_PAUSE)
            events_add(EV_SALE_PAUSED, c->id, "sale %lld paused", (long long)c->id);
        else if (c->act == SALE_RESUME)
            events_add(EV_SALE_RESUMED, c->id, "sale %lld resumed", (long long)c->id);
        else if (c->act == SALE_END)
            events_add(EV_SALE_ENDED, c->id, "sale %lld ended by the admin", (long long)c->id);
        else
            events_add(EV_SALE_EXTENDED, c->id, "sale %lld extended", (long long)c->id);
        log_info("sale %lld: %s", (long long)c->id, act_name[c->act]);
        sb_t s = SB_INIT;
        sb_printf(&s, "{\"id\":%lld,\"action\":\"%s\",\"endTime\":", (long long)c->id,
                  act_name[c->act]);
        sb_json_datetime(&s, c->new_end ? c->new_end : c->end);
        sb_printf(&s, ",\"paused\":%s}", c->act == SALE_PAUSE ? "true" : "false");
        api_ok(r, s.buf, s.len);
        sb_free(&s);
    }
    free(c);
}

static void on_hash(redisReply *rep, void *priv)
{
    ctl_t *c = priv;
    if (rep == NULL || rep->type != REDIS_REPLY_INTEGER) {
        c->failed = 1;
        log_error("sale %lld: %s: a bucket's hash was not written: %s", (long long)c->id,
                  act_name[c->act], rep != NULL && rep->type == REDIS_REPLY_ERROR ? rep->str
                                                                                : "no answer");
    }
    if (--c->left == 0)
        ctl_reply(c);
}

/* An extended sale's stream may already be in the writers' drained set (its sale had
 * ended and every order was in SQL: writer_sweep.c): it is taken out, so the writers read
 * it again (they notice the set shrink on their next metrics pass) before the new
 * window's orders would wait for the sweep. */
static void undrain(worker_t *w, ctl_t *c, int b)
{
    char mem[48];
    int ml = key_bmember(mem, sizeof mem, NULL, 0, c->id, b, c->k);
    if (ml < 0) {
        c->failed = 1;
        c->left--;
        return;
    }
    const char *argv[3] = { "SREM", KEY_DRAINED, mem };
    size_t lens[3] = { 4, strlen(KEY_DRAINED), (size_t)ml };
    rds_command(w->rds, on_hash, c, 3, argv, lens);
}

static void done_ctl(worker_t *w, void *arg)
{
    ctl_t *c = arg;
    http_req_t *r = c->r;
    if (c->rc == STORE_NOTFOUND) {
        free(c);
        api_error(r, 404, "优惠券不存在", "NO_VOUCHER");
        return;
    }
    if (c->rc != STORE_OK) {
        free(c);
        api_unavailable(r, "database unavailable");
        return;
    }
    if (c->err[0]) {
        api_error(r, 400, c->err, "BAD_REQUEST");
        free(c);
        return;
    }
    char end[24];
    int el = snprintf(end, sizeof end, "%lld", (long long)c->new_end);
    /* one reply per bucket (two when extending), and this function's own */
    c->left = (c->act == SALE_EXTEND ? 2 * c->k : c->k) + 1;
    for (int b = 0; b < c->k; b++) {
        char kv[64], kb[64], ks[64];
        int lv, lb, ls;
        if (buckets_keys(c->id, b, key_bsalt(c->id, b, c->k), kv, kb, ks, &lv, &lb, &ls) < 0) {
            c->failed = 1;
            c->left--;
            continue;
        }
        const char *argv[4] = { "HSET", kv, "end", end };
        size_t lens[4] = { 4, (size_t)lv, 3, (size_t)el };
        if (c->act == SALE_PAUSE) {
            argv[2] = "paused";
            argv[3] = "1";
            lens[2] = 6;
            lens[3] = 1;
        } else if (c->act == SALE_RESUME) {
            argv[0] = "HDEL";
            argv[2] = "paused";
            lens[2] = 6;
        }
        rds_command(w->rds, on_hash, c, c->act == SALE_RESUME ? 3 : 4, argv, lens);
        if (c->act == SALE_EXTEND)
            undrain(w, c, b);
    }
    on_hash(&(redisReply){ .type = REDIS_REPLY_INTEGER }, c);   /* this function's own */
}

void api_sale_control(http_req_t *r, int64_t voucher_id, sale_action_t act)
{
    if (!api_admin_ok(r)) {
        api_error(r, 403, "admin token required", "FORBIDDEN");
        return;
    }
    order_mode_t mode = r->w->app->cfg.mode;
    if ((act == SALE_PAUSE || act == SALE_RESUME) && mode != MODE_STREAM && mode != MODE_QUEUE) {
        char msg[160];
        snprintf(msg, sizeof msg, "pause needs --mode stream or queue; this server runs --mode %s",
                 r->w->app->cfg.mode_name);
        api_error(r, 400, msg, "BAD_REQUEST");
        return;
    }
    ctl_t *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->id = voucher_id;
    c->act = act;
    c->now = clock_wall_s();
    if (act == SALE_EXTEND) {
        json_t *root = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
        json_t *v = json_is_object(root) ? json_object_get(root, "endTime") : NULL;
        const char *msg = NULL;
        if (!json_is_string(v) || sb_datetime_parse(json_string_value(v), &c->new_end) != 0)
            msg = "endTime must be a local date-time like \"2024-01-31T10:00:00\"";
        else if (c->new_end <= c->now)
            msg = "endTime must be in the future";
        json_decref(root);
        if (msg != NULL) {
            free(c);
            api_error(r, 400, msg, "BAD_REQUEST");
            return;
        }
    }
    if (jobs_submit(r->w->app->jobs, r->w, run_ctl, done_ctl, c) != 0) {
        free(c);
        api_unavailable(r, "server busy");
    }
}
