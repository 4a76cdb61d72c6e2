/* pow.h -- the bot gate: stateless proof-of-work challenges, their check, the replay set
 * and the difficulty that rises with the join rate (docs/bot-gate.md).
 *
 * A challenge is a string any instance can check without Redis:
 *
 *   v1.<user>.<voucher>.<expiry>.<difficulty>.<random>.<mac>
 *
 * user and voucher are decimal ids (voucher 0 is the "login" scope of /user/code, user 0
 * there: nobody is logged in yet), expiry is unix seconds, difficulty D is in bits,
 * random is 24 hex digits (96 bits from getrandom) and mac is the first 16 bytes, as 32
 * lowercase hex digits, of HMAC-SHA256(pow key, everything before ".<mac>"). The pow key
 * is HMAC-SHA256(token key, "seckill pow v1"): the tokens' key never signs anything
 * else, and every instance that shares the token key (token.h) shares this one.
 *
 * A solution is a decimal string s of 1..20 digits such that SHA-256(challenge ":" s)
 * starts with at least D zero bits. A right solution is used once: its challenge's mac
 * goes into Redis as seckill:pow:{<voucher>}:<mac> (SET NX PX until the expiry), in the
 * voucher's slot on a Redis Cluster. A wrong one costs no Redis.
 *
 * Difficulty: per voucher and per instance, an exponentially weighted rate of first uses
 * of right solutions (time constant POW_RATE_TAU_MS); D = min bits while that rate is at most
 * --pow-rate per second, then one bit more each time the rate doubles, up to max bits.
 * One SHA-256 per try: 2^D tries on average (D = 16: 65,536).
 *
 * Threads: pow_* may be called from any thread; the state is made once by pow_init
 * before the workers start and freed by pow_free after they stop. */
#ifndef SECKILL_POW_H
#define SECKILL_POW_H

#include <stddef.h>
#include <stdint.h>

#include "core/app.h"

#define POW_CHALLENGE_MAX 160     /* a challenge with its NUL fits in this */
#define POW_SOLUTION_MAX 20       /* digits */
#define POW_TTL_S 120             /* a challenge is good this long after it was issued */
#define POW_RATE_TAU_MS 5000      /* the join rate's EWMA time constant */
#define POW_MIN_BITS 8            /* the bounds --pow-min-bits/--pow-max-bits accept */
#define POW_MAX_BITS 32
#define POW_REPLAY_KEY_MAX 96
#define POW_LOGIN_SCOPE 0         /* the "voucher" of /user/code's challenges */

struct rds;
struct redisReply;

/* --code-gate: when POST /user/code needs a solved challenge of the login scope. */
enum { POW_CODE_GATE_OFF = 0, POW_CODE_GATE_SALE, POW_CODE_GATE_ALWAYS };

typedef struct pow_conf {
    int min_bits;                 /* difficulty at a quiet join rate [16] */
    int max_bits;                 /* the cap [20] */
    double rate;                  /* right solutions per second per voucher and instance
                                     before the difficulty rises [50] */
    int code_gate;                /* POW_CODE_GATE_* [off] */
} pow_conf_t;

/* "off", "sale", "always" -> POW_CODE_GATE_*, or -1. */
int pow_code_gate_mode(const char *name);

/* Makes app->pow from the token key (key, len), or from 32 random bytes when key is NULL
 * (opaque tokens: then only this instance can check its challenges). 0, or -1 with err.
 * Hook: server.c's token_key_setup, before it wipes the key; pow_free at shutdown. */
int pow_init(app_t *app, const uint8_t *key, size_t len, const pow_conf_t *conf, char *err,
             size_t errlen);
void pow_free(app_t *app);

/* The contract's two calls (room.h's join uses them).
 *
 * pow_challenge writes a new challenge for (user, voucher) into out (n >= POW_CHALLENGE_MAX)
 * and its difficulty into *difficulty: 0, or -1 (no pow state, n too small, no random). */
int pow_challenge(const app_t *app, int64_t user_id, int64_t voucher_id, char *out, size_t n,
                  int *difficulty);

/* Checks a solution and uses it up: 0 ok; -1 wrong, expired, malformed or someone else's
 * (another user, another voucher, another key); -2 replayed (already used); -3 Redis
 * unavailable. Blocking: the SET NX goes over this thread's own blocking connection
 * (opened on first use, the --redis-timeout-ms deadline), one round trip, and only for a
 * right solution. On a worker's loop prefer pow_check + pow_use_async, which do the same
 * without blocking the loop. */
int pow_verify(app_t *app, int64_t user_id, int64_t voucher_id, const char *challenge,
               const char *solution);

/* The part of pow_verify without Redis: 0 when the solution is right for (user, voucher)
 * at wall time now_ms (then replay_key, POW_REPLAY_KEY_MAX bytes, holds the key to SET NX
 * and *ttl_ms how long it must live), -1 otherwise. */
int pow_check(const app_t *app, int64_t user_id, int64_t voucher_id, const char *challenge,
              const char *solution, uint64_t now_ms, char *replay_key, int64_t *ttl_ms);

/* Uses up a checked solution on a worker's Redis client (rds.h): cb(rc, priv) runs once,
 * on that worker's thread, with rc 0 (first use), -2 (replayed) or -3 (Redis unavailable).
 * A first use counts in voucher_id's join rate (pow_used). */
typedef void (*pow_use_cb)(int rc, void *priv);
void pow_use_async(const app_t *app, struct rds *rds, int64_t voucher_id, const char *replay_key,
                   int64_t ttl_ms, pow_use_cb cb, void *priv);

/* Counts one first use of a right solution in voucher_id's join rate (pow_verify and
 * pow_use_async do it): a replayed solution never raises the difficulty. */
void pow_used(const app_t *app, int64_t voucher_id);
/* The reply of SET key 1 NX PX ttl as pow_verify's code: 0, -2 or -3. */
int pow_use_result(const struct redisReply *r);

/* The /user/code gate (docs/bot-gate.md). pow_gate_sale tells this instance that voucher_id
 * has a bot gate and sells from begin_s to end_s (unix seconds): the room's code calls
 * it wherever it learns of such a voucher (created here, loaded, rebuilt). Up to 64
 * windows are kept; ended ones make room. pow_code_gate_on: 1 when /user/code needs a
 * solved login-scope challenge at now_s: --code-gate always, or sale while a kept window
 * is open. */
void pow_gate_sale(app_t *app, int64_t voucher_id, int64_t begin_s, int64_t end_s);
int pow_code_gate_on(const app_t *app, int64_t now_s);

/* The difficulty a challenge for voucher_id gets now (min..max by its join rate). */
int pow_difficulty(const app_t *app, int64_t voucher_id);

/* Leading zero bits of SHA-256(challenge ":" solution). */
int pow_zero_bits(const char *challenge, const char *solution);

/* Finds the smallest solution >= start with at least difficulty leading zero bits (the
 * reference solver: bench and the tests). Writes it into out (>= 21 bytes) and returns
 * the number of hashes tried, or 0 when none was found below start + max_tries. */
uint64_t pow_solve(const char *challenge, int difficulty, uint64_t start, uint64_t max_tries,
                   char *out, size_t n);

#endif
