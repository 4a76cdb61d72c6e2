/* bench_users.c -- preparing the buyers of `seckill bench` (bench.h).
 *
 * Three ways, one result (a token per user, and the user id where it is known):
 *
 *   API login (default)  POST /user/code for each phone, the code read from Redis
 *                        (login:code:<phone> -- there is no SMS gateway; read-only), then
 *                        POST /user/login. Real users in tb_user; costs two requests and a
 *                        SQL lookup/insert per user, so it is for thousands, not millions.
 *                        Done in chunks of 10,000 so codes (valid 2 minutes) never expire.
 *   --seed-tokens        mints tokens (seed.h: signed with --token-key-file, or the data
 *                        dir's token-key, so the service verifies them without Redis) and
 *                        writes their login:token:<token> hashes straight into Redis,
 *                        pipelined: a million users in seconds. User ids are
 *                        SEED_USER_ID_BASE + user-base + i, far from real ones; no tb_user rows.
 *   --tokens FILE        tokens made elsewhere, one per line ("<token> [<user id>]"): the
 *                        only way that needs nothing but the public API. */
#include "cmd/bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cmd/bench_redis.h"
#include "core/key.h"
#include "core/clock.h"
#include "redis/rcl_sync.h"
#include "cmd/seed.h"
#include "core/xmem.h"

#define CHUNK 10000
#define PIPE 1000

void bench_users_free(bench_users_t *u)
{
    free(u->tokens);
    free(u->user_ids);
    memset(u, 0, sizeof *u);
}

static int seed_tokens(const bench_opts_t *o, bench_users_t *u, char *err, size_t errlen)
{
    seed_req_t q = {.redis_url = o->redis_url, .key_file = o->token_key_file,
                    .user_base = o->user_base, .n = u->n, .ttl_s = o->token_ttl_s};
    return seed_users(&q, u->tokens, u->user_ids, err, errlen);
}

static int tokens_file(const bench_opts_t *o, bench_users_t *u, char *err, size_t errlen)
{
    FILE *f = fopen(o->tokens_file, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", o->tokens_file, strerror(errno));
        return -1;
    }
    char line[256];
    size_t n = 0;
    while (n < u->n && fgets(line, sizeof line, f)) {
        char tok[64];
        long long uid = 0;
        int k = sscanf(line, "%63s %lld", tok, &uid);
        if (k < 1 || tok[0] == '#')
            continue;
        if (strlen(tok) != 32) {
            snprintf(err, errlen, "%s: token '%.40s' is not 32 characters", o->tokens_file, tok);
            fclose(f);
            return -1;
        }
        memcpy(u->tokens[n], tok, 33);
        u->user_ids[n] = k == 2 ? uid : 0;
        n++;
    }
    fclose(f);
    if (n == 0) {
        snprintf(err, errlen, "%s: no tokens", o->tokens_file);
        return -1;
    }
    if (n < u->n) {
        fprintf(stderr, "seckill bench: %s has %zu tokens: %zu users instead of %zu\n",
                o->tokens_file, n, n, u->n);
        u->n = n;
    }
    return 0;
}

typedef struct codes_dst {
    char (*codes)[8];
    size_t lo;
    char (*keys)[32];
} codes_dst_t;

static int take_code(size_t i, const redisReply *e, void *arg, char *err, size_t errlen)
{
    codes_dst_t *d = arg;
    if (e->type != REDIS_REPLY_STRING || e->len >= 8) {
        snprintf(err, errlen, "no login code in Redis for user %zu (%s)", d->lo + i, d->keys[i]);
        return -1;
    }
    memcpy(d->codes[d->lo + i], e->str, e->len + 1);
    return 0;
}

/* One GET per phone, pipelined (per node on a cluster: the codes' keys are in different
 * slots, so one MGET could not fetch them there). */
static int read_codes(rcl_sync_route_t *rt, const bench_opts_t *o, char (*codes)[8], size_t lo,
                      size_t hi, char *err, size_t errlen)
{
    redisContext **ctx = xcalloc(PIPE, sizeof *ctx);
    char(*keys)[32] = xcalloc(PIPE, sizeof *keys);
    int rc = 0;
    uint64_t retry_until = 0;
    for (size_t a = lo; a < hi && rc == 0;) {
        size_t b = a + PIPE < hi ? a + PIPE : hi, nc = 0;
        for (size_t i = a; i < b; i++) {
            char phone[16];
            bench_load_phone(o->user_base + (int64_t)i, phone);
            key_login_code(keys[i - a], sizeof keys[0], phone);
            redisContext *c = rcl_sync_route_key(rt, keys[i - a], err, errlen);
            if (!c) {
                rc = -1;
                break;
            }
            const char *argv[2] = {"GET", keys[i - a]};
            redisAppendCommandArgv(c, 2, argv, NULL);
            ctx[nc++] = c;
        }
        codes_dst_t d = {codes, a, keys};
        if (rc == 0 &&
            rcl_sync_route_replies(ctx, nc, take_code, &d, "reading login codes", err, errlen) == 0) {
            retry_until = 0;
            a = b;
            continue;
        }
        /* a failover or reshard on a cluster: the chunk again on the new map */
        if (!retry_until)
            retry_until = rcl_sync_route_deadline(rt);
        rc = rcl_sync_route_retry(rt, retry_until, err) ? 0 : -1;
    }
    free(ctx);
    free(keys);
    return rc;
}

static int api_login(const bench_opts_t *o, const bench_load_t *proto, bench_users_t *u, char *err,
                     size_t errlen)
{
    rcl_sync_route_t rt;
    if (rcl_sync_route_open(o->redis_url, 10000, &rt, err, errlen) < 0)
        return -1;
    char(*codes)[8] = xcalloc(u->n, sizeof *codes);
    int rc = 0;
    uint64_t t0 = clock_mono_ns();
    for (size_t lo = 0; lo < u->n && rc == 0; lo += CHUNK) {
        size_t hi = lo + CHUNK < u->n ? lo + CHUNK : u->n;
        for (int job = JOB_CODE; job <= JOB_LOGIN && rc == 0; job++) {
            bench_load_t L;
            memset(&L, 0, sizeof L);
            L.o = o;
            L.job = job;
            L.addr = proto->addr;
            L.addrlen = proto->addrlen;
            memcpy(L.hosthdr, proto->hosthdr, sizeof L.hosthdr);
            L.user_lo = (uint32_t)lo;
            L.user_hi = (uint32_t)hi;
            L.tokens = u->tokens;
            L.codes = codes;
            L.user_base = o->user_base;
            L.threads = 1;
            L.conns = o->conns < 32 ? o->conns : 32;
            L.pipeline = 1;
            L.timeout_s = o->timeout_s;
            L.seed = 1;
            if (bench_load_run(&L, NULL, NULL, err, errlen) < 0) {
                rc = -1;
            } else if (L.failed_users > 0) {
                /* A 429 names no limit; list the server's that can refuse this step. */
                if (job == JOB_CODE)
                    snprintf(err, errlen, "%d of %zu users could not get a login code (see "
                             "above). An HTTP 429 is one of the server's limits: per IP "
                             "(--rate-ip-code, on by default: start it with --rate-ip-code 0), "
                             "per phone (--rate-phone-code: 3 codes, then 1 a minute, and "
                             "--code-day-cap a day; a rerun asks for the same phones: pick others "
                             "with --user-base); a 503 is its --code-budget "
                             "(docs/reliability.md); --seed-tokens needs none of them",
                             L.failed_users, hi - lo);
                else
                    snprintf(err, errlen, "%d of %zu users could not log in (see above). An "
                             "HTTP 429 is one of the server's limits: per IP (start it with "
                             "--rate-ip-login 0) or per phone (--rate-phone-login); "
                             "--seed-tokens needs neither", L.failed_users, hi - lo);
                rc = -1;
            }
            bench_load_free(&L);
            if (rc == 0 && job == JOB_CODE)
                rc = read_codes(&rt, o, codes, lo, hi, err, errlen);
        }
        if (o->progress && u->n > CHUNK)
            fprintf(stderr, "seckill bench: logged in %zu of %zu users (%.1f s)\n", hi, u->n,
                    (double)(clock_mono_ns() - t0) / 1e9);
    }
    free(codes);
    rcl_sync_route_close(&rt);
    return rc;
}

int bench_users_prepare(const bench_opts_t *o, const bench_load_t *proto, bench_users_t *u,
                        char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    u->n = (size_t)o->users;
    u->tokens = xcalloc(u->n, sizeof *u->tokens);
    u->user_ids = xcalloc(u->n, sizeof *u->user_ids);
    int rc;
    switch (o->login) {
    case LOGIN_SEED:
        rc = seed_tokens(o, u, err, errlen);
        break;
    case LOGIN_FILE:
        rc = tokens_file(o, u, err, errlen);
        break;
    default:
        rc = api_login(o, proto, u, err, errlen);
        break;
    }
    if (rc < 0)
        bench_users_free(u);
    return rc;
}
