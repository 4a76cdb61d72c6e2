/* api_room.c -- the waiting room's endpoints (room.h, docs/waiting-room.md):
 *   POST /seckill/queue/{id}      join (keeps the place of one who joined before)
 *   GET  /seckill/queue/{id}      poll: place, wait, and the pass once admitted
 *   GET  /seckill/challenge/{id}  the bot gate's proof-of-work challenge (pow.h)
 * A join or a poll is one room.lua call; a poll, a join or a challenge faster than its limit
 * is refused from memory (429). With a bot gate the join carries a solved challenge, checked
 * first. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include <jansson.h>

#include "api/api.h"
#include "auth/auth.h"
#include "core/clock.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "room/pass.h"
#include "room/pow.h"
#include "room/room.h"
#include "server/metrics.h"
#include "server/worker.h"

#define CHALLENGE_MAX 512

/* reply_state counts its answers by state in /metrics: room.h's states 0..3 */
_Static_assert(ROOM_WAITING == 0 && ROOM_NOT_QUEUED + 1 == METRICS_ROOM_STATES,
               "metrics.h's room states follow room.h's");

static const char *state_name(int st)
{
    switch (st) {
    case ROOM_WAITING: return "waiting";
    case ROOM_ADMITTED: return "admitted";
    case ROOM_SOLD_OUT: return "soldOut";
    default: return "notQueued";
    }
}

/* Redis did not answer, or its master cannot take writes now (a failover, a master short
 * of its replicas under --redis-wait-replicas): a join or a poll is safe to send again,
 * and the buyer hears what a refused admission says. */
static void redis_busy(http_req_t *r)
{
    r->retry_after_s = 1;
    api_error(r, 503, "系统繁忙，请重试", "RETRY");
}

/* A room.lua answer, for a join or a poll. */
static void reply_state(http_req_t *r, const room_state_t *st)
{
    switch (st->state) {
    case ROOM_NO_VOUCHER: api_fail(r, "优惠券不存在", "NO_VOUCHER"); return;
    case ROOM_NO_QUEUE: api_fail(r, "该优惠券无需排队", "NO_QUEUE"); return;
    case ROOM_ENDED: api_fail(r, "秒杀已经结束！", "ENDED"); return;
    case ROOM_JOIN_SOLD_OUT: api_fail(r, "库存不足", "SOLD_OUT"); return;
    case ROOM_WAITING: case ROOM_ADMITTED: case ROOM_SOLD_OUT: case ROOM_NOT_QUEUED: break;
    default: redis_busy(r); return;
    }
    int64_t after = room_poll_after_ms(st);
    sb_t s = SB_INIT;
    sb_printf(&s, "{\"state\":\"%s\",\"position\":%lld,\"waitS\":%lld,\"pollAfterMs\":%lld",
              state_name(st->state), (long long)room_position(st), (long long)room_wait_s(st),
              (long long)after);
    if (st->from_ms > 0 && (st->state == ROOM_ADMITTED || st->state == ROOM_WAITING)) {
        /* admitted, or waiting with a pass valid from its place's due moment */
        char pass[PASS_MAX];
        if (room_pass(r->w, st->user_id, st->voucher_id, st->from_ms, st->expires_ms, pass,
                      sizeof pass) < 0) {
            sb_free(&s);
            api_unavailable(r, "cannot sign a pass");
            return;
        }
        sb_printf(&s, ",\"pass\":\"%s\",\"passFrom\":%lld,\"passExpiresAt\":%lld", pass,
                  (long long)st->from_ms, (long long)st->expires_ms);
        shard_inc(&r->w->m->room_passes);
    }
    sb_puts(&s, "}");
    shard_inc(&r->w->m->room_answers[st->state]);   /* ROOM_WAITING .. ROOM_NOT_QUEUED */
    r->retry_after_s = (int)((after + 999) / 1000);
    api_ok(r, s.buf, s.len);
    sb_free(&s);
}

/* 429 from memory: the user asked faster than room.h's limits allow. */
static void too_fast(http_req_t *r)
{
    r->retry_after_s = (ROOM_POLL_MIN_MS / 2 + 999) / 1000;
    api_error(r, 429, "请求过于频繁，请稍后再试", "RATE_LIMITED");
}

/* ------------------------------------------------------------ join */

/* A gated join between its solution's check and its use (on_solution_used). */
typedef struct join_ctx {
    http_req_t *r;
    int64_t voucher_id, user_id;
} join_ctx_t;

static void on_solution_used(int rc, void *priv)
{
    join_ctx_t *j = priv;
    http_req_t *r = j->r;
    int64_t voucher_id = j->voucher_id, user_id = j->user_id;
    free(j);
    if (rc == -3) {
        redis_busy(r);
        return;
    }
    if (rc != 0) {   /* replayed: someone used this solution already */
        api_fail(r, "请先完成验证", "CHALLENGE_REQUIRED");
        return;
    }
    room_join(r, voucher_id, user_id, reply_state);
}

/* A join of a voucher with a bot gate: the solved challenge is checked in memory (a wrong
 * one costs no Redis), then used up with one SET NX on this worker's own Redis client
 * (pow_use_async), so the worker's loop never waits on Redis; the join goes on in
 * on_solution_used. */
static void join_gated(http_req_t *r, int64_t voucher_id, int64_t user_id)
{
    json_error_t jerr;
    json_t *root = json_loadb(r->body ? r->body : "", r->body_len, 0, &jerr);
    const char *ch = NULL, *so = NULL;
    if (root != NULL && json_is_object(root)) {
        ch = json_string_value(json_object_get(root, "challenge"));
        so = json_string_value(json_object_get(root, "solution"));
    }
    char key[POW_REPLAY_KEY_MAX];
    int64_t ttl_ms = 0;
    int ok = ch != NULL && so != NULL &&
             pow_check(r->w->app, user_id, voucher_id, ch, so, clock_now_wall_ms(), key,
                       &ttl_ms) == 0;
    json_decref(root);
    if (!ok) {
        api_fail(r, "请先完成验证", "CHALLENGE_REQUIRED");
        return;
    }
    join_ctx_t *j = xmalloc(sizeof *j);
    j->r = r;
    j->voucher_id = voucher_id;
    j->user_id = user_id;
    pow_use_async(r->w->app, r->w->rds, voucher_id, key, ttl_ms, on_solution_used, j);
}

/* The user id the handler left in r->ctx (room_info's callers), taken back; -1 after
 * answering 503 when Redis could not say what the voucher has. */
static int64_t info_user(http_req_t *r, const room_info_t *ri)
{
    int64_t user_id = (int64_t)(intptr_t)r->ctx;
    r->ctx = NULL;
    if (!ri->known) {
        redis_busy(r);
        return -1;
    }
    return user_id;
}

static void on_join_info(http_req_t *r, int64_t voucher_id, const room_info_t *ri)
{
    int64_t user_id = info_user(r, ri);
    if (user_id < 0)
        return;
    if (!ri->exists) {
        api_fail(r, "优惠券不存在", "NO_VOUCHER");
        return;
    }
    if (!ri->has_room) {
        api_fail(r, "该优惠券无需排队", "NO_QUEUE");
        return;
    }
    if (ri->bot_gate)
        join_gated(r, voucher_id, user_id);
    else
        room_join(r, voucher_id, user_id, reply_state);
}

void api_room_join(http_req_t *r, int64_t voucher_id, const auth_user_t *u)
{
    if (u == NULL) {   /* only if routed without login: a wiring bug */
        api_unauthorized(r);
        return;
    }
    if (!room_join_allowed(r, u->id)) {
        too_fast(r);
        return;
    }
    r->ctx = (void *)(intptr_t)u->id;
    room_info(r, voucher_id, on_join_info);
}

/* ------------------------------------------------------------ poll */

void api_room_poll(http_req_t *r, int64_t voucher_id, const auth_user_t *u)
{
    if (u == NULL) {
        api_unauthorized(r);
        return;
    }
    if (!room_poll_allowed(r, u->id)) {
        too_fast(r);
        return;
    }
    room_poll(r, voucher_id, u->id, reply_state);
}

/* ------------------------------------------------------------ challenge */

static void on_challenge_info(http_req_t *r, int64_t voucher_id, const room_info_t *ri)
{
    int64_t user_id = info_user(r, ri);
    if (user_id < 0)
        return;
    if (!ri->exists) {
        api_fail(r, "优惠券不存在", "NO_VOUCHER");
        return;
    }
    if (!ri->has_room || !ri->bot_gate) {
        api_fail(r, "该优惠券无需验证", "NO_CHALLENGE");
        return;
    }
    char ch[CHALLENGE_MAX];
    int difficulty = 0;
    if (pow_challenge(r->w->app, user_id, voucher_id, ch, sizeof ch, &difficulty) != 0) {
        api_unavailable(r, "cannot make a challenge");
        return;
    }
    sb_t s = SB_INIT;
    sb_puts(&s, "{\"challenge\":");
    sb_json_str(&s, ch, strlen(ch));
    sb_printf(&s, ",\"difficulty\":%d}", difficulty);
    api_ok(r, s.buf, s.len);
    sb_free(&s);
}

void api_room_challenge(http_req_t *r, int64_t voucher_id, const auth_user_t *u)
{
    if (u == NULL) {
        api_unauthorized(r);
        return;
    }
    if (!room_challenge_allowed(r, u->id)) {
        too_fast(r);
        return;
    }
    r->ctx = (void *)(intptr_t)u->id;
    room_info(r, voucher_id, on_challenge_info);
}
