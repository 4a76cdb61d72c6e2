/* pass.h -- waiting-room passes: signed, bound to (user, voucher, start, expiry), verified in
 * memory.
 *
 * A pass is text: "<userId>.<voucherId>.<fromMs>.<expiresAtMs>.<mac>", valid for orders in
 * [fromMs, expiresAtMs) only (a pass handed out before its place is due starts then; room.lua),
 * mac = 32 lowercase hex digits,
 * the first 16 bytes of HMAC-SHA256(pass key, the text before the last dot). The pass key is
 * derived from the token key (token.h) with a label, so every instance sharing the token key
 * issues and accepts the same passes, and a pass is never a token nor a token a pass. With
 * opaque tokens (no token key) the key is random per process: passes then hold on the
 * instance that issued them only (docs/waiting-room.md).
 *
 * A pass_key_t is read-only once made; pass_verify costs two SHA-256 runs (~1 us), no Redis. */
#ifndef SECKILL_PASS_H
#define SECKILL_PASS_H

#include <stddef.h>
#include <stdint.h>

#define PASS_MAX 112  /* a pass's text with its NUL */
/* A pass is accepted from its start less this: the start is Redis's clock (room.lua), the
 * check the instance's, read once per loop wake-up in whole ms -- an order sent the moment
 * a pass is issued (start = now) must not find it not yet valid; hosts under NTP agree to
 * within it. */
#define PASS_CLOCK_SLACK_MS 20

struct token_signer;
typedef struct pass_key pass_key_t;

/* The pass key from the token key (NULL: the process's random key). NULL only on out of
 * randomness. */
pass_key_t *pass_key_new(const struct token_signer *token_key);
void pass_key_free(pass_key_t *k);   /* NULL is fine */

/* Writes the pass of (user, voucher, [from, expiry)) into out (PASS_MAX bytes): its length,
 * or -1 (also for from >= expiry). */
int pass_sign(const pass_key_t *k, int64_t user_id, int64_t voucher_id, int64_t from_ms,
              int64_t expires_ms, char *out, size_t n);

/* 1 if z[0..n-1] is a pass under k for this user and voucher valid at now_ms (from -
 * PASS_CLOCK_SLACK_MS <= now_ms < expiry; then *expires_ms, if given, is its expiry), 0
 * otherwise: a pass before its start is refused like a missing one. */
int pass_verify(const pass_key_t *k, const char *z, size_t n, int64_t user_id,
                int64_t voucher_id, int64_t now_ms, int64_t *expires_ms);

#endif
