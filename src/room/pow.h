/* pow.h -- the bot gate's proof-of-work challenges (issue #28): issue, verify, replay set,
 * difficulty controller. A challenge is stateless (user, voucher, expiry, nonce, HMAC);
 * solving it means finding a decimal s such that SHA-256(challenge ":" s) has at least the
 * difficulty's leading zero bits; a solved challenge is used once. */
#ifndef SECKILL_POW_H
#define SECKILL_POW_H

#include <stddef.h>
#include <stdint.h>

struct app;

/* A challenge for (user, voucher) into out (n bytes) and its difficulty: 0, or -1. */
int pow_challenge(const struct app *app, int64_t user_id, int64_t voucher_id, char *out,
                  size_t n, int *difficulty);

/* 0 ok; -1 wrong/expired/foreign; -2 replayed; -3 Redis unavailable. */
int pow_verify(struct app *app, int64_t user_id, int64_t voucher_id, const char *challenge,
               const char *solution);

#endif
