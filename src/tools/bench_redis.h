/* bench_redis.h -- blocking Redis helpers shared by `seckill bench` and `seckill audit`.
 *
 * One hiredis redisContext with socket timeouts as deadlines (like the order writer):
 * connect by URL (rds_parse_url's forms), AUTH and SELECT, then plain commands. None of
 * this runs inside the service; it is for the command-line tools only. */
#ifndef SECKILL_BENCH_REDIS_H
#define SECKILL_BENCH_REDIS_H

#include <stddef.h>
#include <stdint.h>

struct redisContext;
struct redisReply;

/* Connects, authenticates and selects the db of url. Returns NULL and a reason in err
 * on failure. Free with bredis_close. */
struct redisContext *bredis_open(const char *url, int timeout_ms, char *err, size_t errlen);
void bredis_close(struct redisContext *c);            /* NULL is fine */

/* One command (argv form). Returns the reply (free with freeReplyObject) or NULL with a
 * reason in err -- a transport failure or a Redis error reply (the reply is freed). */
struct redisReply *bredis_cmd(struct redisContext *c, char *err, size_t errlen, int argc,
                              const char **argv);
/* Same with printf-style arguments (hiredis's format: %s %d %lld %b). */
struct redisReply *bredis_cmdf(struct redisContext *c, char *err, size_t errlen,
                               const char *fmt, ...);

/* Integer value of a reply: integer, or a string holding a number. -1 on anything else
 * (out untouched). */
int bredis_int(const struct redisReply *r, int64_t *out);

/* The pid of the redis-server if it runs on this host and its /proc entry is readable
 * (INFO server process_id, then /proc/<pid>/comm starts with "redis"), else 0. */
int bredis_local_pid(struct redisContext *c, const char *url);

/* Stream entry ids "ms-seq" as a pair, for comparison. Returns 0 or -1. */
typedef struct sid {
    uint64_t ms, seq;
} sid_t;
int sid_parse(const char *z, sid_t *out);
int sid_cmp(sid_t a, sid_t b);

#endif
