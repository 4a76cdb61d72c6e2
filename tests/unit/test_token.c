/* test_token.c -- signed login tokens (token.h): layout, the MAC against OpenSSL's own
 * HMAC(), and every way a token must fail to verify. */
#include <setjmp.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth/token.h"

static const char KEY[] = "0123456789abcdef0123456789abcdef";

static token_signer_t *signer(const char *key)
{
    token_signer_t *s = token_signer_new((const uint8_t *)key, strlen(key));
    assert_non_null(s);
    return s;
}

static void test_roundtrip_and_layout(void **state)
{
    (void)state;
    token_signer_t *s = signer(KEY);
    char t[33];
    int64_t issued = TOKEN_EPOCH + 123456 * 60 + 59;
    assert_int_equal(token_mint(s, 42, issued, 0xbeef, t), 0);
    assert_int_equal(strlen(t), 32);
    assert_true(token_shape_ok(t));
    /* minutes 123456 = 0x01e240, id 42, second 59 << 10 | (0xbeef & 0x3ff) = 0xeeef */
    assert_memory_equal(t, "01e2400000002aeeef", 18);
    int64_t uid = 0, at = 0;
    assert_int_equal(token_verify(s, t, &uid, &at), 1);
    assert_int_equal(uid, 42);
    assert_int_equal(at, issued);

    /* The MAC is HMAC-SHA256 over the first 9 bytes, truncated to 7. */
    uint8_t b[16], mac[32];
    unsigned int ml = 0;
    token_bytes(t, b);
    HMAC(EVP_sha256(), KEY, (int)strlen(KEY), b, 9, mac, &ml);
    assert_int_equal(ml, 32);
    assert_memory_equal(b + 9, mac, 7);
    token_signer_free(s);
}

static void test_long_key_is_hashed(void **state)
{
    (void)state;
    char key[200];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    token_signer_t *s = signer(key);
    char t[33];
    assert_int_equal(token_mint(s, 7, TOKEN_EPOCH, 1, t), 0);
    uint8_t b[16], mac[32];
    unsigned int ml = 0;
    token_bytes(t, b);
    HMAC(EVP_sha256(), key, (int)strlen(key), b, 9, mac, &ml);
    assert_memory_equal(b + 9, mac, 7);
    token_signer_free(s);
}

static void test_refusals(void **state)
{
    (void)state;
    token_signer_t *s = signer(KEY), *other = signer("another key, also long enough");
    char t[33], bad[40];
    int64_t uid, at;
    assert_int_equal(token_mint(s, 1000, TOKEN_EPOCH + 86400, 5, t), 0);
    assert_int_equal(token_verify(other, t, &uid, &at), 0);   /* another key */
    for (int i = 0; i < 32; i++) {                          /* any one digit changed */
        memcpy(bad, t, 33);
        bad[i] = bad[i] == '0' ? '1' : '0';
        assert_int_equal(token_verify(s, bad, &uid, &at), 0);
    }
    memcpy(bad, t, 33);
    bad[31] = '\0';                                         /* truncated */
    assert_int_equal(token_verify(s, bad, &uid, &at), 0);
    memcpy(bad, t, 33);
    bad[32] = 'a';                                          /* too long */
    bad[33] = '\0';
    assert_int_equal(token_verify(s, bad, &uid, &at), 0);
    memcpy(bad, t, 33);
    for (int i = 0; i < 32; i++)                            /* upper case */
        if (bad[i] >= 'a')
            bad[i] = (char)(bad[i] - 32);
    assert_int_equal(token_verify(s, bad, &uid, &at), 0);
    assert_int_equal(token_verify(s, NULL, &uid, &at), 0);
    assert_int_equal(token_verify(s, "", &uid, &at), 0);
    /* ids that do not fit, times before the epoch or past 2055 */
    assert_int_equal(token_mint(s, 0, TOKEN_EPOCH, 0, t), -1);
    assert_int_equal(token_mint(s, (int64_t)UINT32_MAX + 1, TOKEN_EPOCH, 0, t), -1);
    assert_int_equal(token_mint(s, 1, TOKEN_EPOCH - 1, 0, t), -1);
    assert_int_equal(token_mint(s, 1, TOKEN_EPOCH + (int64_t)0x1000000 * 60, 0, t), -1);
    assert_int_equal(token_mint(s, (int64_t)UINT32_MAX, TOKEN_EPOCH + (int64_t)0xFFFFFF * 60, 0, t), 0);
    assert_int_equal(token_verify(s, t, &uid, &at), 1);
    assert_int_equal(uid, (int64_t)UINT32_MAX);
    /* a second field of 60..63 is not a time, even under a valid MAC */
    uint8_t b[16], mac[32];
    unsigned int ml = 0;
    token_bytes(t, b);
    b[7] = (uint8_t)(60 << 2);
    HMAC(EVP_sha256(), KEY, (int)strlen(KEY), b, 9, mac, &ml);
    memcpy(b + 9, mac, 7);
    for (int i = 0; i < 16; i++)
        snprintf(bad + 2 * i, 3, "%02x", b[i]);
    assert_int_equal(token_verify(s, bad, &uid, &at), 0);
    token_signer_free(s);
    token_signer_free(other);
}

/* The shape rule, written out a character at a time. */
static int ref_parse(const char *z, uint8_t out[16])
{
    for (int i = 0; i < 32; i++) {
        char c = z[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return 0;   /* a NUL too: nothing past a short string is read */
        out[i / 2] = (uint8_t)(i % 2 ? (out[i / 2] | v) : v << 4);
    }
    return z[32] == '\0';
}

/* token_parse against the rule: every byte value at every position and every length from
 * 0 to 34 (32 lowercase hex digits, nothing else; the bytes as the digits say). */
static void test_parse_every_byte(void **state)
{
    (void)state;
    static const char base[] = "0123456789abcdef0f1e2d3c4b5a6978";
    char z[40];
    uint8_t got[16], want[16];
    for (int at = 0; at < 32; at++) {
        for (int b = 1; b < 256; b++) {
            memcpy(z, base, sizeof base);
            z[at] = (char)b;
            int w = ref_parse(z, want);
            if (token_parse(z, got) != w)
                fail_msg("byte 0x%02x at %d: token_parse %d, want %d", b, at, !w, w);
            if (w)
                assert_memory_equal(got, want, 16);
        }
    }
    for (size_t n = 0; n <= 34; n++) {
        memset(z, 'a', n);
        z[n] = '\0';
        assert_int_equal(token_parse(z, got), n == 32);
    }
    assert_int_equal(token_parse(NULL, got), 0);
}

static void test_key_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_token_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/token-key", dir);
    uint8_t k1[TOKEN_KEY_MAX], k2[TOKEN_KEY_MAX];
    size_t l1 = 0, l2 = 0;
    assert_int_equal(token_key_read(path, k1, &l1, err, sizeof err), -1);   /* missing */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    assert_int_equal(token_key_read_or_create(dfd, "token-key", path, k1, &l1, err, sizeof err), 0);
    assert_int_equal(l1, 64);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(token_key_read_or_create(dfd, "token-key", path, k2, &l2, err, sizeof err),
                     0);   /* kept */
    assert_int_equal(l2, 64);
    assert_memory_equal(k1, k2, 64);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("short\n", f);
    fclose(f);
    assert_int_equal(token_key_read(path, k1, &l1, err, sizeof err), -1);   /* too short */
    assert_non_null(strstr(err, "at least"));
    close(dfd);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_layout),
        cmocka_unit_test(test_long_key_is_hashed),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_key_files),
        cmocka_unit_test(test_parse_every_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
