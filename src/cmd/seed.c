/* seed.c -- minting tools' users and tokens (seed.h), and the `seckill tokens` command. */
#include "cmd/seed.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <hiredis/hiredis.h>

#include "cmd/cmd_args.h"
#include "core/clock.h"
#include "redis/rcl_sync.h"
#include "core/rnd.h"
#include "auth/token.h"
#include "core/xmem.h"

#define PIPE 1000

/* The hashes spread by their own keys: on a Redis Cluster each goes to its slot's node
 * (rcl_sync_route_key), one pipeline per node; on one Redis all go to the one connection. */
static int write_hashes(const seed_req_t *q, char (*tokens)[33], const int64_t *ids, char *err,
                        size_t errlen)
{
    rcl_sync_route_t rt;
    if (rcl_sync_route_open(q->redis_url, 10000, &rt, err, errlen) < 0)
        return -1;
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", q->ttl_s > 0 ? q->ttl_s : 7200);
    redisContext **ctx = xcalloc(2 * PIPE, sizeof *ctx);
    int rc = 0;
    uint64_t retry_until = 0;
    for (size_t lo = 0; lo < q->n && rc == 0;) {
        size_t hi = lo + PIPE < q->n ? lo + PIPE : q->n, nc = 0;
        for (size_t i = lo; i < hi; i++) {
            char key[64], id[24], nick[32];
            snprintf(key, sizeof key, "login:token:%s", tokens[i]);
            snprintf(id, sizeof id, "%lld", (long long)ids[i]);
            snprintf(nick, sizeof nick, "bench_%lld", (long long)(ids[i] - SEED_USER_ID_BASE));
            const char *hset[] = {"HSET", key, "id", id, "nickName", nick, "icon", ""};
            const char *exp[] = {"EXPIRE", key, ttl};
            redisContext *c = rcl_sync_route_key(&rt, key, err, errlen);
            if (!c) {
                rc = -1;
                break;
            }
            redisAppendCommandArgv(c, 8, hset, NULL);
            redisAppendCommandArgv(c, 3, exp, NULL);
            ctx[nc++] = c;
            ctx[nc++] = c;
        }
        if (rc == 0 && rcl_sync_route_replies(ctx, nc, NULL, NULL, "writing token hashes", err,
                                         errlen) == 0) {
            retry_until = 0;
            lo = hi;
            continue;
        }
        /* a failover or reshard on a cluster: the chunk again (HSET and EXPIRE repeat
         * harmlessly) on the new map */
        if (!retry_until)
            retry_until = rcl_sync_route_deadline(&rt);
        rc = rcl_sync_route_retry(&rt, retry_until, err) ? 0 : -1;
    }
    free(ctx);
    rcl_sync_route_close(&rt);
    return rc;
}

int seed_users(const seed_req_t *q, char (*tokens)[33], int64_t *ids, char *err, size_t errlen)
{
    token_signer_t *s = NULL;
    if (q->key_file && q->key_file[0]) {
        uint8_t key[TOKEN_KEY_MAX];
        size_t len = 0;
        if (token_key_read(q->key_file, key, &len, err, errlen) < 0)
            return -1;
        s = token_signer_new(key, len);
        memset(key, 0, sizeof key);
        if (!s) {
            snprintf(err, errlen, "cannot set up the token key");
            return -1;
        }
    }
    int64_t now = clock_wall_s();
    int rc = 0;
    for (size_t i = 0; i < q->n && rc == 0; i++) {
        ids[i] = SEED_USER_ID_BASE + q->user_base + (int64_t)i;
        uint16_t nonce = 0;
        if (s && getrandom(&nonce, sizeof nonce, 0) == (ssize_t)sizeof nonce &&
            token_mint(s, ids[i], now, nonce, tokens[i]) == 0)
            continue;
        if (rnd_hex(tokens[i], 16) != 0) {   /* no key, or an id past 2^32-1 */
            snprintf(err, errlen, "the kernel's random number generator failed");
            rc = -1;
        }
    }
    token_signer_free(s);
    if (rc == 0 && q->redis_url && q->redis_url[0])
        rc = write_hashes(q, tokens, ids, err, errlen);
    return rc;
}

/* ------------------------------------------------------------- seckill tokens */

static void tokens_usage(FILE *f)
{
    fprintf(f,
            "usage: seckill tokens --users N [--key-file F] [--redis URL | --no-redis]\n"
            "                      [--user-base N] [--ttl S]\n\n"
            "Mints N users' login tokens and prints \"<token> <user id>\" lines (the format of\n"
            "`seckill bench --tokens FILE`). With --key-file (the service's --token-key-file or\n"
            "<data-dir>/token-key) the tokens are signed and the service verifies them without\n"
            "Redis; without one they are random. With --redis each token's login:token:<t>\n"
            "hash (id, nickName, icon) is written too, with TTL --ttl [7200] s. User ids are\n"
            "%lld + user-base + i.\n",
            (long long)SEED_USER_ID_BASE);
}

typedef struct tokens_args {
    int64_t users, user_base;
    int ttl_s, no_redis;
    const char *key_file, *redis;
} tokens_args_t;

#define F(field) CMD_ARGS_FIELD(tokens_args_t, field)

/* No help lines: the synopsis of tokens_usage() above is the help. */
static const cmd_arg_t tokens_arg_rows[] = {
    {"users", CMD_ARG_I64, F(users), 1, 100000000, "N", NULL},
    {"user-base", CMD_ARG_I64, F(user_base), 0, 1000000000, "N", NULL},
    {"ttl", CMD_ARG_INT, F(ttl_s), 10, 100000000, "S", NULL},
    {"key-file", CMD_ARG_PTR, F(key_file), 0, 0, "F", NULL},
    {"redis", CMD_ARG_PTR, F(redis), 0, 0, "URL", NULL},
    {"no-redis", CMD_ARG_SET, CMD_ARGS_SET(tokens_args_t, no_redis, 1), 0, 0, NULL, NULL},
};
static const cmd_args_t tokens_args_spec = {
    tokens_arg_rows, sizeof tokens_arg_rows / sizeof tokens_arg_rows[0], 0};

int seed_tokens_main(int argc, char **argv)
{
    tokens_args_t a = {.users = -1, .ttl_s = 7200};
    int exit_now = cmd_args_main(&tokens_args_spec, "seckill tokens", tokens_usage, argc, argv, &a);
    if (exit_now >= 0)
        return exit_now;
    if (a.users < 0 || (!a.redis && !a.no_redis) || (a.redis && a.no_redis)) {
        fprintf(stderr, "seckill tokens: --users N and one of --redis URL or --no-redis are "
                        "needed\n\n");
        tokens_usage(stderr);
        return 2;
    }
    seed_req_t q = {.redis_url = a.redis, .key_file = a.key_file, .user_base = a.user_base,
                    .n = (size_t)a.users, .ttl_s = a.ttl_s};
    char(*tokens)[33] = xcalloc(q.n, sizeof *tokens);
    int64_t *ids = xcalloc(q.n, sizeof *ids);
    char err[512] = "";
    int rc = 0;
    if (seed_users(&q, tokens, ids, err, sizeof err) < 0) {
        fprintf(stderr, "seckill tokens: %s\n", err);
        rc = 1;
    } else {
        for (size_t i = 0; i < q.n; i++)
            printf("%s %lld\n", tokens[i], (long long)ids[i]);
        if (fflush(stdout) != 0) {
            fprintf(stderr, "seckill tokens: writing the tokens: %s\n", strerror(errno));
            rc = 1;
        }
    }
    free(tokens);
    free(ids);
    return rc;
}
