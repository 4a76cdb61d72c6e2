/* bench_redis.h -- Redis helpers shared by `seckill bench` and `seckill audit` only:
 * where the redis-server runs, and stream entry ids. The connection itself is rconn.h's
 * blocking one, as in the service. */
#ifndef SECKILL_BENCH_REDIS_H
#define SECKILL_BENCH_REDIS_H

#include <stddef.h>
#include <stdint.h>

struct redisContext;

/* The pid of the redis-server if it runs on this host and its /proc entry is readable
 * (INFO server process_id, then /proc/<pid>/comm starts with "redis"), else 0. */
int bench_redis_local_pid(struct redisContext *c, const char *url);

/* Stream entry ids "ms-seq" as a pair, for comparison. Returns 0 or -1. */
typedef struct sid {
    uint64_t ms, seq;
} sid_t;
int bench_redis_sid_parse(const char *z, sid_t *out);
int bench_redis_sid_cmp(sid_t a, sid_t b);

#endif
