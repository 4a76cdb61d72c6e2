/* pass.c -- signing and verifying waiting-room passes (format in pass.h). */
#include "room/pass.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>

#include "auth/token.h"
#include "core/xmem.h"

#define MAC_HEX 32
/* v2: the pass carries its start; a v1 pass (no start) fails its MAC under the v2 key */
#define LABEL "seckill waiting-room pass v2"

struct pass_key {
    token_signer_t *s;
};

/* Opaque tokens: one random key for the whole process, so every worker agrees. */
static uint8_t proc_key[32];
static int proc_key_ok;
static pthread_once_t proc_once = PTHREAD_ONCE_INIT;

static void proc_key_make(void)
{
    proc_key_ok = getrandom(proc_key, sizeof proc_key, 0) == (ssize_t)sizeof proc_key;
}

pass_key_t *pass_key_new(const token_signer_t *token_key)
{
    uint8_t k[32];
    if (token_key != NULL) {
        token_mac(token_key, LABEL, sizeof LABEL - 1, k);
    } else {
        pthread_once(&proc_once, proc_key_make);
        if (!proc_key_ok)
            return NULL;
        memcpy(k, proc_key, sizeof k);
    }
    token_signer_t *s = token_signer_new(k, sizeof k);
    OPENSSL_cleanse(k, sizeof k);
    if (s == NULL)
        return NULL;
    pass_key_t *p = xmalloc(sizeof *p);
    p->s = s;
    return p;
}

void pass_key_free(pass_key_t *k)
{
    if (k != NULL) {
        token_signer_free(k->s);
        free(k);
    }
}

static void mac_hex(const pass_key_t *k, const char *body, size_t n, char out[MAC_HEX])
{
    static const char hx[] = "0123456789abcdef";
    uint8_t mac[32];
    token_mac(k->s, body, n, mac);
    for (int i = 0; i < MAC_HEX / 2; i++) {
        out[2 * i] = hx[mac[i] >> 4];
        out[2 * i + 1] = hx[mac[i] & 15];
    }
}

int pass_sign(const pass_key_t *k, int64_t user_id, int64_t voucher_id, int64_t from_ms,
              int64_t expires_ms, char *out, size_t n)
{
    if (n < PASS_MAX || user_id <= 0 || voucher_id <= 0 || from_ms <= 0 || expires_ms <= from_ms)
        return -1;
    int b = snprintf(out, n, "%lld.%lld.%lld.%lld.", (long long)user_id, (long long)voucher_id,
                     (long long)from_ms, (long long)expires_ms);
    if (b <= 0 || (size_t)b + MAC_HEX + 1 > n)
        return -1;
    mac_hex(k, out, (size_t)b - 1, out + b);
    out[b + MAC_HEX] = '\0';
    return b + MAC_HEX;
}

/* A positive decimal without sign or leading zero at z[*i..] up to a '.': its value, or -1. */
static int64_t field(const char *z, size_t n, size_t *i)
{
    size_t s = *i;
    int64_t v = 0;
    while (*i < n && z[*i] >= '0' && z[*i] <= '9') {
        if (*i - s >= 18)
            return -1;
        v = v * 10 + (z[*i] - '0');
        (*i)++;
    }
    if (*i == s || *i >= n || z[*i] != '.' || z[s] == '0')
        return -1;
    (*i)++;
    return v;
}

int pass_verify(const pass_key_t *k, const char *z, size_t n, int64_t user_id,
                int64_t voucher_id, int64_t now_ms, int64_t *expires_ms)
{
    if (k == NULL || z == NULL || n >= PASS_MAX)
        return 0;
    size_t i = 0;
    int64_t u = field(z, n, &i), v = field(z, n, &i), f = field(z, n, &i), e = field(z, n, &i);
    if (u != user_id || v != voucher_id || f < 0 || e < 0 || n - i != MAC_HEX ||
        now_ms < f - PASS_CLOCK_SLACK_MS || e <= now_ms)
        return 0;
    char want[MAC_HEX];
    mac_hex(k, z, i - 1, want);
    if (CRYPTO_memcmp(want, z + i, MAC_HEX) != 0)
        return 0;
    if (expires_ms != NULL)
        *expires_ms = e;
    return 1;
}
