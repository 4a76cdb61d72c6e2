/* seed.h -- login tokens minted by the tools, for load without the login API.
 *
 * `seckill bench --seed-tokens` and `seckill tokens` make users this way: user id
 * SEED_USER_ID_BASE + index (far above real ids, no tb_user rows), a token signed with the
 * service's key (token.h) when one is given -- then the service verifies it without Redis,
 * as it does its own logins -- else a random opaque one, and, when a Redis URL is given,
 * the course's login:token:<t> hash (id, nickName bench_<index>, icon "") with a TTL,
 * written pipelined. */
#ifndef SECKILL_SEED_H
#define SECKILL_SEED_H

#include <stddef.h>
#include <stdint.h>

/* Ids stay below 2^32 for the signed layout: indexes up to ~1.29e9. */
#define SEED_USER_ID_BASE 3000000000LL

typedef struct seed_req {
    const char *redis_url;      /* NULL or "": do not write hashes */
    const char *key_file;       /* NULL or "": opaque tokens */
    int64_t user_base;          /* first index */
    size_t n;
    int ttl_s;                  /* of the hashes */
} seed_req_t;

/* Fills tokens[0..n) and ids[0..n). 0, or -1 with a reason in err. */
int seed_users(const seed_req_t *q, char (*tokens)[33], int64_t *ids, char *err, size_t errlen);

/* `seckill tokens`: argv[0] = "tokens". Exit status. */
int seed_tokens_main(int argc, char **argv);

#endif
