/* token.h -- signed login tokens: minted and verified without Redis.
 *
 * A signed token is still 32 lowercase hex characters (16 bytes), so every client and page
 * that handles the course's random tokens handles it too. Its bytes:
 *
 *   0..2   issued     minutes since 2024-01-01T00:00:00Z, big-endian (good until 2055)
 *   3..6   user id    big-endian (ids above 2^32-1 get a random, opaque token instead)
 *   7..8   second     the second within that minute (top 6 bits) and 10 random bits:
 *                     two logins of one user differ (1 in 1024 in the same second on
 *                     different workers may not; auth.c re-rolls against the last token
 *                     its worker made and the revoked ones)
 *   9..15  MAC        the first 7 bytes of HMAC-SHA256(key, bytes 0..8)
 *
 * The algorithm is fixed here (there is no algorithm field to confuse), the MAC is
 * compared in constant time (CRYPTO_memcmp), and a random course-style token verifies with
 * probability 2^-56, so "does not verify" means "not ours": no token, or, where opaque
 * tokens are accepted, one to look up in Redis (auth.h). The key is
 * the bytes of a key file (trailing whitespace dropped, at least 16 bytes); every instance
 * of a cluster must share it.
 *
 * A token_signer_t is read-only once made: all threads share the one in app_t. */
#ifndef SECKILL_TOKEN_H
#define SECKILL_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define TOKEN_KEY_MIN 16
#define TOKEN_KEY_MAX 512

typedef struct token_signer token_signer_t;

/* Reads a key file with secret.h's checks (ours or root's, no access for others, not a
 * symlink, at least TOKEN_KEY_MIN bytes of some variety): 0 and *len, or -1 with a
 * reason in err. */
int token_key_read(const char *path, uint8_t key[TOKEN_KEY_MAX], size_t *len, char *err, size_t errlen);

/* Reads file `name` in the directory dirfd (the data dir: ours alone, mode 0600), or
 * creates it (mode 0600, 32 random bytes as 64 hex characters) when it does not exist;
 * `shown` names it in messages. 0, or -1 with a reason. */
int token_key_read_or_create(int dirfd, const char *name, const char *shown,
                             uint8_t key[TOKEN_KEY_MAX], size_t *len, char *err, size_t errlen);

token_signer_t *token_signer_new(const uint8_t *key, size_t len);   /* NULL on failure */
void token_signer_free(token_signer_t *s);                          /* NULL is fine */

#define TOKEN_EPOCH 1704067200   /* 2024-01-01T00:00:00Z */

/* Writes a signed token for user_id issued at issued_at (unix seconds) with the low 10
 * bits of nonce into out (33 bytes with the NUL). 0, or -1 if user_id or the time does not
 * fit. */
int token_mint(const token_signer_t *s, int64_t user_id, int64_t issued_at, uint16_t nonce, char out[33]);

/* 1 if token is a signed token under this key (then *user_id and *issued_at, unix
 * seconds, are set), 0 otherwise (not 32 lowercase hex, the MAC does not match, or a
 * second field above 59). */
int token_verify(const token_signer_t *s, const char *token, int64_t *user_id, int64_t *issued_at);
/* token_verify on a token already parsed by token_parse (the hot path parses once). */
int token_verify_bytes(const token_signer_t *s, const uint8_t b[16], int64_t *user_id,
                     int64_t *issued_at);

/* HMAC-SHA256(key, msg[0..n-1]) into out: for keys derived from the token key (a label
 * as msg) and for what they sign (src/room/pass.h). ~1 us. */
void token_mac(const token_signer_t *s, const void *msg, size_t n, uint8_t out[32]);

/* 1 if z is 32 lowercase hex characters, and then its 16 bytes are in out: the shape
 * check and the decoding in one pass. */
int token_parse(const char *z, uint8_t out[16]);
/* 1 if z is 32 lowercase hex characters. */
int token_shape_ok(const char *z);
/* Hex token (shape already checked) to its 16 bytes (all zero if the shape is wrong). */
void token_bytes(const char *token, uint8_t out[16]);

#endif
