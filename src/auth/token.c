/* token.c -- signed login tokens (format in token.h): key files, minting, verifying.
 *
 * HMAC-SHA256 (RFC 2104) over OpenSSL's SHA-256. The signer keeps the SHA-256 states after
 * the key's inner and outer pads, so a token costs two block compressions and two struct
 * copies: ~0.4 us here, against ~1.3 us for EVP_MAC re-initialised per token and ~5 us
 * for the one-shot HMAC(), which fetches the digest each call (measured on this 2-core
 * machine). Every token of a sold-out request is verified, so this is on the hot path.
 * The SHA256_* functions are deprecated in OpenSSL 3 in favour of EVP, which has no
 * cheap way to clone a keyed state; hence OPENSSL_SUPPRESS_DEPRECATED, in this file only.
 * tests/unit/test_token.c checks the result against OpenSSL's own HMAC(). */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "auth/token.h"
#include "core/secret.h"
#include "core/xmem.h"

#define MAC_BYTES 7
#define BODY_BYTES 9

struct token_signer {
    SHA256_CTX inner;           /* after the key XOR ipad block */
    SHA256_CTX outer;           /* after the key XOR opad block */
};

/* ----------------------------------------------------------------- key files */

/* A key file through secret.h into key: 1 read, 0 absent, -1 refused (err). */
static int read_key(int dirfd, const char *path, const char *shown, int flags,
                    uint8_t key[TOKEN_KEY_MAX], size_t *len, char *err, size_t errlen)
{
    char buf[TOKEN_KEY_MAX + 1];
    size_t n = 0;
    int rc = secret_read(dirfd, path, shown, flags | SECRET_KEY, TOKEN_KEY_MIN, buf,
                         sizeof buf, &n, err, errlen);
    if (rc == 1) {
        memcpy(key, buf, n);
        *len = n;
    }
    explicit_bzero(buf, sizeof buf);
    return rc;
}

int token_key_read(const char *path, uint8_t key[TOKEN_KEY_MAX], size_t *len, char *err, size_t errlen)
{
    char shown[700];
    snprintf(shown, sizeof shown, "token key file %s", path);
    int rc = read_key(AT_FDCWD, path, shown, 0, key, len, err, errlen);
    if (rc == 0)
        snprintf(err, errlen, "cannot open %s: %s", shown, strerror(ENOENT));
    return rc == 1 ? 0 : -1;
}

int token_key_read_or_create(int dirfd, const char *name, const char *shown,
                             uint8_t key[TOKEN_KEY_MAX], size_t *len, char *err, size_t errlen)
{
    int rc = read_key(dirfd, name, shown, SECRET_OURS, key, len, err, errlen);
    if (rc != 0)
        return rc == 1 ? 0 : -1;
    uint8_t raw[32];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        snprintf(err, errlen, "getrandom failed: %s", strerror(errno));
        return -1;
    }
    static const char hex[] = "0123456789abcdef";
    char text[65];
    for (size_t i = 0; i < sizeof raw; i++) {
        text[2 * i] = hex[raw[i] >> 4];
        text[2 * i + 1] = hex[raw[i] & 15];
    }
    text[64] = '\n';
    /* O_EXCL: two instances sharing a data dir must not each write their own key (and a
     * symlink by that name is not followed). */
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST) {
            rc = read_key(dirfd, name, shown, SECRET_OURS, key, len, err, errlen);
            return rc == 1 ? 0 : -1;
        }
        snprintf(err, errlen, "cannot create %s: %s", shown, strerror(errno));
        return -1;
    }
    ssize_t w = write(fd, text, sizeof text);
    int cerr = close(fd);
    if (w != (ssize_t)sizeof text || cerr != 0) {
        snprintf(err, errlen, "cannot write %s", shown);
        unlinkat(dirfd, name, 0);
        return -1;
    }
    memcpy(key, text, 64);
    *len = 64;
    return 0;
}

/* ----------------------------------------------------------------- signer */

token_signer_t *token_signer_new(const uint8_t *key, size_t len)
{
    if (key == NULL || len == 0) {
        return NULL;
    }
    token_signer_t *s = xcalloc(1, sizeof(*s));
    uint8_t k[SHA256_CBLOCK], ipad[SHA256_CBLOCK], opad[SHA256_CBLOCK];
    memset(k, 0, sizeof k);
    if (len > SHA256_CBLOCK) {
        SHA256(key, len, k);   /* RFC 2104: a key longer than a block is hashed first */
    } else {
        memcpy(k, key, len);
    }
    for (size_t i = 0; i < SHA256_CBLOCK; i++) {
        ipad[i] = k[i] ^ 0x36;
        opad[i] = k[i] ^ 0x5c;
    }
    int ok = SHA256_Init(&s->inner) == 1 && SHA256_Update(&s->inner, ipad, sizeof ipad) == 1 &&
             SHA256_Init(&s->outer) == 1 && SHA256_Update(&s->outer, opad, sizeof opad) == 1;
    OPENSSL_cleanse(k, sizeof k);
    OPENSSL_cleanse(ipad, sizeof ipad);
    OPENSSL_cleanse(opad, sizeof opad);
    if (!ok) {
        token_signer_free(s);
        return NULL;
    }
    return s;
}

void token_signer_free(token_signer_t *s)
{
    if (s == NULL) {
        return;
    }
    OPENSSL_cleanse(s, sizeof(*s));
    free(s);
}

/* The last block of a message of len bytes (< 56 of them in this block, the key block
 * before it): its bytes were put at the start, then 0x80, zeros, the length in bits. */
static void pad_block(uint8_t blk[SHA256_CBLOCK], size_t used, uint64_t len)
{
    blk[used] = 0x80;
    memset(blk + used + 1, 0, SHA256_CBLOCK - 8 - used - 1);
    uint64_t bits = len * 8;
    for (int i = 0; i < 8; i++)
        blk[SHA256_CBLOCK - 1 - i] = (uint8_t)(bits >> (8 * i));
}

/* The hash state as the digest's bytes (big-endian words). */
static void state_out(const SHA256_CTX *c, uint8_t out[32])
{
    for (int i = 0; i < 8; i++) {
        uint32_t v = (uint32_t)c->h[i];
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        v = __builtin_bswap32(v);
#endif
        memcpy(out + 4 * i, &v, 4);
    }
}

/* HMAC-SHA256 of a token's body: the inner hash is one block (the 9 bytes, padded) after
 * the key's, the outer one block (the inner hash, padded) after the key's, so the two
 * compressions are run directly on the signer's states: SHA256_Update/Final's buffering
 * and per-call wiping cost as much again as the compressions. tests/unit/test_token.c
 * checks the result against OpenSSL's HMAC(). */
static void mac_of(const token_signer_t *s, const uint8_t body[BODY_BYTES], uint8_t out[32])
{
    uint8_t blk[SHA256_CBLOCK];
    memcpy(blk, body, BODY_BYTES);
    pad_block(blk, BODY_BYTES, SHA256_CBLOCK + BODY_BYTES);
    SHA256_CTX c = s->inner;
    SHA256_Transform(&c, blk);
    state_out(&c, blk);
    pad_block(blk, 32, SHA256_CBLOCK + 32);
    c = s->outer;
    SHA256_Transform(&c, blk);
    state_out(&c, out);
    /* Nothing to wipe: after each compression c holds a hash output (the MAC, its inner
     * hash), and the keyed states it was copied from stay in the signer anyway. */
}

/* Any message: the keyed states' copies, through SHA256_Update/Final. */
void token_mac(const token_signer_t *s, const void *msg, size_t n, uint8_t out[32])
{
    uint8_t inner[32];
    SHA256_CTX c = s->inner;
    SHA256_Update(&c, msg, n);
    SHA256_Final(inner, &c);
    c = s->outer;
    SHA256_Update(&c, inner, sizeof inner);
    SHA256_Final(out, &c);
}

/* ----------------------------------------------------------------- tokens */

/* Lowercase hex digit -> its value + 1; anything else (a NUL too) -> 0. */
static const uint8_t hexval1[256] = {
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
};

int token_parse(const char *z, uint8_t out[16])
{
    if (z == NULL) {
        return 0;
    }
    for (int i = 0; i < 16; i++) {
        /* A NUL is not a digit either: nothing past a short string is read. */
        unsigned hi = hexval1[(unsigned char)z[2 * i]];
        if (hi == 0) {
            return 0;
        }
        unsigned lo = hexval1[(unsigned char)z[2 * i + 1]];
        if (lo == 0) {
            return 0;
        }
        out[i] = (uint8_t)((hi - 1) << 4 | (lo - 1));
    }
    return z[32] == '\0';
}

int token_shape_ok(const char *z)
{
    uint8_t b[16];
    return token_parse(z, b);
}

void token_bytes(const char *token, uint8_t out[16])
{
    if (!token_parse(token, out)) {
        memset(out, 0, 16);
    }
}

int token_mint(const token_signer_t *s, int64_t user_id, int64_t issued_at, uint16_t nonce, char out[33])
{
    if (s == NULL || user_id <= 0 || user_id > (int64_t)UINT32_MAX || issued_at < TOKEN_EPOCH ||
        (issued_at - TOKEN_EPOCH) / 60 > 0xFFFFFF) {
        return -1;
    }
    uint8_t b[16], mac[32];
    uint32_t min = (uint32_t)((issued_at - TOKEN_EPOCH) / 60);
    uint16_t sec = (uint16_t)(((issued_at - TOKEN_EPOCH) % 60) << 10 | (nonce & 0x3FF));
    uint32_t uid = (uint32_t)user_id;
    b[0] = (uint8_t)(min >> 16);
    b[1] = (uint8_t)(min >> 8);
    b[2] = (uint8_t)min;
    b[3] = (uint8_t)(uid >> 24);
    b[4] = (uint8_t)(uid >> 16);
    b[5] = (uint8_t)(uid >> 8);
    b[6] = (uint8_t)uid;
    b[7] = (uint8_t)(sec >> 8);
    b[8] = (uint8_t)sec;
    mac_of(s, b, mac);
    memcpy(b + BODY_BYTES, mac, MAC_BYTES);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
    return 0;
}

int token_verify_bytes(const token_signer_t *s, const uint8_t b[16], int64_t *user_id,
                     int64_t *issued_at)
{
    if (s == NULL) {
        return 0;
    }
    uint8_t mac[32];
    mac_of(s, b, mac);
    if (CRYPTO_memcmp(mac, b + BODY_BYTES, MAC_BYTES) != 0) {
        return 0;
    }
    uint32_t uid = (uint32_t)b[3] << 24 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 8 | b[6];
    if (uid == 0) {
        return 0;
    }
    uint32_t min = (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2];
    unsigned sec = b[7] >> 2;
    if (sec > 59) {
        return 0;
    }
    *user_id = uid;
    *issued_at = TOKEN_EPOCH + (int64_t)min * 60 + sec;
    return 1;
}

int token_verify(const token_signer_t *s, const char *token, int64_t *user_id, int64_t *issued_at)
{
    uint8_t b[16];
    return s != NULL && token_parse(token, b) && token_verify_bytes(s, b, user_id, issued_at);
}
