/* fuzz_redis_reply.c -- whatever Redis might answer, through every piece of code that
 * reads a Redis reply.
 *
 * The input is RESP bytes, parsed by hiredis's own reader (redisReaderCreate/Feed/
 * GetReply) into the redisReply tree the service would get. Byte 0 picks the reader:
 *   0, 1  the order writer's stream parsing: parse_read() of an XREADGROUP reply (new
 *         entries / own pending entries with cursors), then the XACK and dead-letter
 *         commands built from what it parsed (append_acks, writer_dead_append);
 *   2     the admission verdict (admission_try -> on_admit, EVALSHA reply);
 *   3     the login lookup (auth_resolve -> HGETALL reply -> user), and the user's
 *         nickName and icon written as JSON the way /user/me does;
 *   4     publishing a voucher (XGROUP CREATE, SADD, HSET replies);
 *   5     login: the code check's verdict (EVALSHA login_code.lua 'check' reply);
 *   6     /user/code: the code's store (EVALSHA login_code.lua 'issue' reply);
 *   7     /health: the PING reply.
 * writer.c is #included for its statics (seam: none in writer.c itself); its commands
 * to Redis are only formatted (--wrap=redisAppendCommandArgv, redisAppendFormattedCommand), never sent. The others go
 * through their public functions, with rds_command/rds_evalsha answering the fuzzed
 * reply (fuzz_common.h) and http_reply checked as in fuzz_json.c.
 * Checks: every parsed order is complete and belongs to its stream, every lifecycle
 * event of an entry whole (an expire call's evs entry holds many); entry ids and
 * cursors fit their buffers; every callback runs exactly once with a legal result;
 * every HTTP answer is one valid JSON envelope; no sanitizer report. */
#include "writer/writer.c"

#include <jansson.h>

#include "sale/admission.h"
#include "sale/publish.h"
#include "api/api.h"
#include "auth/auth.h"
#include "fuzz_common.h"
#include "http/http.h"
#include "core/sb.h"
#include "server/worker.h"

/* ------------------------------------------------------------ writer seam */

static writer_t wr;

static void writer_setup(void)
{
    if (wr.streams != NULL) {
        return;
    }
    static const int64_t vids[] = { 1, 2, 42 };
    wr.m = &wr.m_own;
    snprintf(wr.name, sizeof(wr.name), "fuzz");
    wr.batch = 512;
    wr.nstreams = 3;
    wr.streams = calloc(wr.nstreams, sizeof(*wr.streams));
    if (wr.streams == NULL) {
        abort();
    }
    for (size_t i = 0; i < wr.nstreams; i++) {
        wr.streams[i].vid = vids[i];
        if (key_stream(wr.streams[i].key, sizeof(wr.streams[i].key), vids[i]) < 0) {
            abort();
        }
    }
}

/* The writer sends most commands preformatted (src/redis/resp.h): only checked to be one
 * whole RESP array, never sent. */
int __wrap_redisAppendFormattedCommand(redisContext *c, const char *cmd, size_t len);
int __wrap_redisAppendFormattedCommand(redisContext *c, const char *cmd, size_t len)
{
    (void)c;
    if (cmd == NULL || len < 4 || cmd[0] != '*' || cmd[len - 2] != '\r' || cmd[len - 1] != '\n') {
        abort();
    }
    return REDIS_OK;
}

int __wrap_redisAppendCommandArgv(redisContext *c, int argc, const char **argv,
                                  const size_t *argvlen);
int __wrap_redisAppendCommandArgv(redisContext *c, int argc, const char **argv,
                                  const size_t *argvlen)
{
    (void)c;
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    if (len < 0 || cmd == NULL) {
        abort();
    }
    free(cmd);
    return REDIS_OK;
}

static void fuzz_writer(const redisReply *rep, int pending)
{
    writer_setup();
    wr.nents = 0;
    for (size_t i = 0; i < wr.nstreams; i++) {
        wr.streams[i].done = 0;
        memcpy(wr.streams[i].cursor, "0", 2);
    }
    parse_read(&wr, rep, pending);
    for (size_t i = 0; i < wr.nents; i++) {
        const wentry_t *e = &wr.ents[i];
        if (e->si >= wr.nstreams || strnlen(e->id, ENTRY_ID_MAX) >= ENTRY_ID_MAX ||
            e->id[0] == '\0') {
            abort();
        }
        if (e->kind == E_ORDER) {
            /* an entry holds every order of one admission call: each must be whole */
            if (e->no == 0 || e->o0 + e->no > wr.norders || e->reason) {
                abort();
            }
            for (size_t k = e->o0; k < e->o0 + e->no; k++) {
                const store_order_t *o = &wr.orders[k];
                if (o->id <= 0 || o->user_id <= 0 || o->voucher_id != wr.streams[e->si].vid) {
                    abort();
                }
            }
        }
        if (e->kind == E_EVENT) {
            /* an event entry (ev, or an expire call's evs) holds its events whole */
            if (e->nv == 0 || e->v0 + e->nv > wr.nevs || e->reason ||
                e->ev.order_id != wr.evs[e->v0].order_id) {
                abort();
            }
            for (size_t k = e->v0; k < e->v0 + e->nv; k++) {
                const sentry_ev_t *ev = &wr.evs[k];
                if (ev->order_id <= 0 || ev->user_id <= 0 || ev->ts <= 0 || ev->ep < 0 ||
                    ev->kind != e->ev.kind || strchr("ctprf", ev->kind) == NULL) {
                    abort();
                }
            }
        }
        if (e->kind == E_DEAD && e->reason == NULL) {
            abort();
        }
        if (e->kind != E_ORDER && e->kind != E_DEAD && e->kind != E_DELETED &&
            e->kind != E_EVENT) {
            abort();
        }
    }
    for (size_t i = 0; i < wr.nstreams; i++) {
        if (strnlen(wr.streams[i].cursor, ENTRY_ID_MAX) >= ENTRY_ID_MAX) {
            abort();
        }
    }
    /* what handle_batch sends after the commit */
    append_acks(&wr);
    for (size_t i = 0; i < wr.nents; i++) {
        if (wr.ents[i].kind == E_DEAD) {
            writer_dead_append(&wr, &wr.ents[i]);
        }
    }
    wr.nents = 0;
}

/* ------------------------------------------------------------ replies to requests */

static http_req_t req;
static int replies, callbacks;

static void check_json(const char *body, size_t len, const char *what)
{
    json_error_t err;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
    if (j == NULL) {
        fprintf(stderr, "fuzz_redis_reply: %s is not valid JSON (%s): %.*s\n", what, err.text,
                (int)len, body);
        abort();
    }
    json_decref(j);
}

void __wrap_http_reply(http_req_t *r, int status, const char *ctype, const char *body, size_t len);
void __wrap_http_reply(http_req_t *r, int status, const char *ctype, const char *body, size_t len)
{
    if (r != &req || ++replies > 1) {
        fprintf(stderr, "fuzz_redis_reply: reply to a finished or unknown request\n");
        abort();
    }
    if (len > 0 && ctype == NULL) {
        check_json(body, len, "reply");
    }
    (void)status;
}

static void on_admitted(http_req_t *r, int code, const admission_order_t *order)
{
    int64_t order_id = order != NULL ? order->id : 0;
    if (r != &req || ++callbacks > 1 || code < ADMIT_RETRY || code > ADMIT_PAUSED ||
        (code == ADMIT_OK) != (order_id > 0)) {
        fprintf(stderr, "fuzz_redis_reply: admission callback (%d, %lld)\n", code,
                (long long)order_id);
        abort();
    }
}

static void on_user(http_req_t *r, int status, const auth_user_t *u)
{
    if (r != &req || ++callbacks > 1 || status < -1 || status > 1 || (status == 0) != (u != NULL)) {
        abort();
    }
    if (u != NULL) {
        if (u->id <= 0 || strnlen(u->nick_name, sizeof(u->nick_name)) >= sizeof(u->nick_name) ||
            strnlen(u->icon, sizeof(u->icon)) >= sizeof(u->icon)) {
            abort();
        }
        /* /user/me's data, built the same way */
        sb_t s = SB_INIT;
        sb_printf(&s, "{\"id\":%lld,\"nickName\":", (long long)u->id);
        sb_json_str(&s, u->nick_name, strlen(u->nick_name));
        sb_puts(&s, ",\"icon\":");
        sb_json_str(&s, u->icon, strlen(u->icon));
        sb_puts(&s, "}");
        check_json(s.buf, s.len, "/user/me data");
        sb_free(&s);
    }
}

static void on_published(http_req_t *r, int ok)
{
    if (r != &req || ++callbacks > 1 || (ok != 0 && ok != 1)) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const extra[] = {
        "--token-cache-ms", "0", "--soldout-cache-ms", "0",
        "--rate-ip-code", "0", "--rate-phone-code", "0", "--rate-phone-login", "0",
        "--rate-ip-login", "0", NULL
    };
    fz_env_t *e = fz_env(extra);
    if (size < 1) {
        return 0;
    }
    unsigned sel = data[0] & 7;
    size_t used;
    redisReply *rep = fz_parse_resp(data + 1, size - 1, &used);
    if (rep == NULL) {
        return 0;
    }
    fz_async = 0;
    fz_jobs_run = 0;
    fz_reply = rep;
    memset(&req, 0, sizeof(req));
    req.w = e->w;
    req.method = HM_POST;
    req.path = "/";
    req.path_len = 1;
    req.query = "";
    req.body = "";
    req.peer = "127.0.0.1";
    req.start_ns = clock_mono_ns();
    replies = callbacks = 0;
    int want_reply = 0, want_cb = 0;
    switch (sel) {
    case 0:
    case 1:
        fuzz_writer(rep, sel == 1);
        break;
    case 2:
        admission_try(&req, 42, 7, on_admitted);
        want_cb = 1;
        break;
    case 3:
        req.authorization = "0123456789abcdef0123456789abcdef";
        auth_resolve(&req, on_user);
        want_cb = 1;
        break;
    case 4:
        publish_voucher(&req, 42, 100, 1700000000, 1800000000, 1, NULL, on_published);
        want_cb = 1;
        break;
    case 5: {
        static const char body[] = "{\"phone\":\"13800000000\",\"code\":\"123456\"}";
        req.body = body;
        req.body_len = sizeof(body) - 1;
        api_user_login(&req);
        want_reply = 1;
        break;
    }
    case 6:
        req.query = "phone=13800000000";
        api_user_code(&req);
        want_reply = 1;
        break;
    default:
        api_ops_health(&req);
        want_reply = 1;
        break;
    }
    fz_drain();
    if (replies != want_reply || callbacks != want_cb) {
        fprintf(stderr, "fuzz_redis_reply: %d replies, %d callbacks (expected %d, %d)\n",
                replies, callbacks, want_reply, want_cb);
        abort();
    }
    fz_reply = NULL;
    freeReplyObject(rep);
    return 0;
}
