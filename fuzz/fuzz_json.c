/* fuzz_json.c -- request bodies and queries straight into the handlers that validate
 * them: POST /user/login (phone + code), POST /voucher and /voucher/seckill (the
 * course's Voucher JSON, checked field by field), POST /user/code?phone=...
 *
 * No sockets: the request is built here and http_reply is replaced (--wrap) by a check
 * of the answer. Redis and the job pool are fuzz_common.h's stand-ins.
 *
 * Input: byte 0 = selector, the rest = the body (or the query for /user/code).
 *   bits 0-1  0 login, 1 voucher, 2 flash-sale voucher, 3 /user/code
 *   bit 2     wrong admin token
 *   bit 3     jobs run (else the queue is full)
 *   bit 4     Redis says the code is right (login_code.lua's 1; else Redis is down)
 * Checks: exactly one reply per request; every JSON reply is a valid object (UTF-8,
 * escaped) with a boolean "success", a non-empty string "errorMsg" when it is false, and
 * only the envelope's members; status is one the API documents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "api/api.h"
#include "core/app.h"
#include "core/clock.h"
#include "fuzz_common.h"
#include "http/http.h"
#include "server/worker.h"

static http_req_t req;
static int replies;

void __wrap_http_reply(http_req_t *r, int status, const char *ctype, const char *body, size_t len);
void __wrap_http_reply(http_req_t *r, int status, const char *ctype, const char *body, size_t len)
{
    if (r != &req) {
        fprintf(stderr, "fuzz_json: reply to a request that does not exist\n");
        abort();
    }
    if (++replies > 1) {
        fprintf(stderr, "fuzz_json: second reply (status %d)\n", status);
        abort();
    }
    switch (status) {
    case 200: case 400: case 401: case 403: case 429: case 503:
        break;
    default:
        fprintf(stderr, "fuzz_json: unexpected status %d\n", status);
        abort();
    }
    if (len == 0) {
        if (status != 401) {
            fprintf(stderr, "fuzz_json: empty body with status %d\n", status);
            abort();
        }
        return;
    }
    if (ctype != NULL) {
        abort();   /* these handlers answer JSON only */
    }
    json_error_t err;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
    if (j == NULL) {
        fprintf(stderr, "fuzz_json: reply is not valid JSON (%s): %.*s\n", err.text, (int)len,
                body);
        abort();
    }
    json_t *ok = json_object_get(j, "success");
    json_t *msg = json_object_get(j, "errorMsg");
    if (!json_is_object(j) || !json_is_boolean(ok) ||
        (json_is_false(ok) && (!json_is_string(msg) || json_string_length(msg) == 0)) ||
        (json_is_true(ok) && msg != NULL) || (status != 200 && json_is_true(ok))) {
        fprintf(stderr, "fuzz_json: bad envelope: %.*s\n", (int)len, body);
        abort();
    }
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        if (strcmp(key, "success") != 0 && strcmp(key, "errorMsg") != 0 &&
            strcmp(key, "data") != 0 && strcmp(key, "total") != 0 && strcmp(key, "code") != 0) {
            fprintf(stderr, "fuzz_json: unexpected member %s\n", key);
            abort();
        }
    }
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const extra[] = {
        "--token-cache-ms", "0", "--soldout-cache-ms", "0",
        "--rate-ip-code", "0", "--rate-phone-code", "0", "--rate-phone-login", "0",
        "--rate-ip-login", "0", NULL
    };
    static redisReply *code_reply;
    fz_env_t *e = fz_env(extra);
    if (code_reply == NULL) {
        static const char resp[] = ":1\r\n";   /* login_code.lua: the right code */
        size_t used;
        code_reply = fz_parse_resp((const uint8_t *)resp, sizeof(resp) - 1, &used);
    }
    if (size < 1) {
        return 0;
    }
    unsigned sel = data[0];
    data++;
    size--;
    char *body = malloc(size + 1);   /* http.c hands handlers a NUL-terminated body */
    if (body == NULL) {
        return 0;
    }
    memcpy(body, data, size);
    body[size] = '\0';

    fz_async = 0;
    fz_jobs_run = (sel >> 3) & 1;
    fz_reply = (sel & 16) ? code_reply : NULL;
    fz_eval_reply = NULL;
    memset(&req, 0, sizeof(req));
    req.w = e->w;
    req.method = HM_POST;
    req.query = "";
    req.peer = "127.0.0.1";
    req.start_ns = clock_mono_ns();
    req.admin_token = (sel & 4) ? "wrong-token" : FZ_ADMIN_TOKEN;
    replies = 0;
    static const char *const paths[4] = { "/user/login", "/voucher", "/voucher/seckill",
                                          "/user/code" };
    req.path = paths[sel & 3];
    req.path_len = strlen(req.path);
    if ((sel & 3) == 3) {
        req.query = body;
        req.body = "";
    } else {
        req.body = body;
        req.body_len = size;
    }
    switch (sel & 3) {
    case 0: api_user_login(&req); break;
    case 1: api_voucher_create(&req, 0); break;
    case 2: api_voucher_create(&req, 1); break;
    default: api_user_code(&req); break;
    }
    fz_drain();
    if (replies != 1) {
        fprintf(stderr, "fuzz_json: %d replies to one request\n", replies);
        abort();
    }
    free(body);
    return 0;
}
