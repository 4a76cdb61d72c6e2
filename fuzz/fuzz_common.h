/* fuzz_common.h -- what the libFuzzer targets in fuzz/ share: a worker without threads
 * or sockets, and stand-ins for Redis and the SQL job pool.
 *
 * The targets link the service's own objects (build/fuzz/libseckill.a, built by clang
 * with coverage and ASan+UBSan). The calls that would reach a real Redis or a thread
 * pool are replaced at link time with -Wl,--wrap (fuzz/fuzz.mk), so no source file of
 * the service carries a test hook:
 *
 *   rds_command, rds_evalsha   answer with fz_reply (NULL = "Redis down"), at once or
 *                              from the event loop (fz_async), as rds.h allows;
 *   jobs_submit                refuses (queue full), or runs run(NULL, arg) then
 *                              done(w, arg) from the loop -- rds.h/jobs.h's contract for
 *                              "no database connection".
 *
 * Everything the stand-ins schedule runs on fz_env.w->base; fz_drain() runs the loop
 * until nothing is left. */
#ifndef SECKILL_FUZZ_COMMON_H
#define SECKILL_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

struct app;
struct worker;
struct redisReply;

typedef struct fz_env {
    struct app *app;
    struct worker *w;
} fz_env_t;

#define FZ_ADMIN_TOKEN "fuzz-admin-token-0123456789abcdef"

/* Builds the app (default configuration, one thread, FZ_ADMIN_TOKEN) and its worker
 * once per process; returns the same environment on every call. extra_argv (may be
 * NULL) adds flags to the configuration, e.g. {"--rate-user-seckill", "0", NULL}. */
fz_env_t *fz_env(const char *const *extra_argv);

/* How the stand-ins answer. */
extern int fz_async;                       /* 0: before returning; 1: from the loop */
extern int fz_jobs_run;                    /* 0: jobs_submit refuses; 1: runs them */
extern const struct redisReply *fz_reply;  /* what every Redis command gets (NULL: down) */
extern const struct redisReply *fz_eval_reply;  /* if set, what EVALSHA gets instead */
extern unsigned long fz_redis_calls, fz_jobs_calls;

/* Runs w's loop until no event is pending or active (bounded; aborts if it never ends,
 * which would be a hang in the code under test). */
void fz_drain(void);

/* Parses RESP bytes with hiredis's own reader into one reply tree (freeReplyObject it),
 * or NULL if the bytes are not one complete, valid reply. *used gets the bytes taken. */
struct redisReply *fz_parse_resp(const uint8_t *data, size_t size, size_t *used);

#endif
