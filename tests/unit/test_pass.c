/* test_pass.c -- waiting-room passes (pass.h) and token_mac (token.h): token_mac against
 * OpenSSL's own HMAC(), the pass's layout and MAC, its window [from, expiry), and every way
 * a pass must fail (an old v1 pass, without a start, among them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth/token.h"
#include "room/pass.h"

static const char KEY[] = "0123456789abcdef0123456789abcdef";
#define LABEL "seckill waiting-room pass v2"

static void test_token_mac_is_hmac(void **state)
{
    (void)state;
    token_signer_t *s = token_signer_new((const uint8_t *)KEY, strlen(KEY));
    assert_non_null(s);
    const char *msgs[] = {"", "a", LABEL, "x.y.z and a message longer than one SHA-256 block: "
                          "0123456789012345678901234567890123456789"};
    for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
        uint8_t got[32], want[32];
        unsigned wl = 0;
        token_mac(s, msgs[i], strlen(msgs[i]), got);
        HMAC(EVP_sha256(), KEY, (int)strlen(KEY), (const uint8_t *)msgs[i], strlen(msgs[i]),
             want, &wl);
        assert_int_equal(wl, 32);
        assert_memory_equal(got, want, 32);
    }
    token_signer_free(s);
}

static void test_sign_layout_and_verify(void **state)
{
    (void)state;
    token_signer_t *s = token_signer_new((const uint8_t *)KEY, strlen(KEY));
    pass_key_t *k = pass_key_new(s);
    assert_non_null(k);
    char p[PASS_MAX];
    int n = pass_sign(k, 42, 7, 1765000000000, 1765000000123, p, sizeof p);
    assert_int_equal(n, (int)strlen(p));
    /* the MAC: HMAC(HMAC(token key, label), body), first 16 bytes as hex */
    uint8_t pk[32], mac[32];
    unsigned l = 0;
    HMAC(EVP_sha256(), KEY, (int)strlen(KEY), (const uint8_t *)LABEL, strlen(LABEL), pk, &l);
    const char body[] = "42.7.1765000000000.1765000000123";
    HMAC(EVP_sha256(), pk, 32, (const uint8_t *)body, strlen(body), mac, &l);
    char want[PASS_MAX];
    int off = snprintf(want, sizeof want, "%s.", body);
    for (int i = 0; i < 16; i++)
        off += snprintf(want + off, sizeof want - (size_t)off, "%02x", mac[i]);
    assert_string_equal(p, want);
    int64_t exp = 0;
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 7, 1765000000122, &exp), 1);
    assert_int_equal(exp, 1765000000123);
    /* valid from its start on (less the clock slack), not a ms before */
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 7, 1765000000000, NULL), 1);
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 7, 1765000000000 - PASS_CLOCK_SLACK_MS,
                                 NULL), 1);
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 7,
                                 1765000000000 - PASS_CLOCK_SLACK_MS - 1, NULL), 0);
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 7, 1764999000000, NULL), 0);
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 7, 0, NULL), 0);
    /* refusals: expired, another user, another voucher, a changed byte anywhere, cut,
     * longer, another key */
    const int64_t T = 1765000000050;
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 7, 1765000000123, NULL), 0);
    assert_int_equal(pass_verify(k, p, (size_t)n, 43, 7, T, NULL), 0);
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 8, T, NULL), 0);
    for (int i = 0; i < n; i++) {
        char q[PASS_MAX];
        memcpy(q, p, (size_t)n + 1);
        q[i] = q[i] == '1' ? '2' : '1';
        assert_int_equal(pass_verify(k, q, (size_t)n, 42, 7, T, NULL), 0);
    }
    assert_int_equal(pass_verify(k, p, (size_t)n - 1, 42, 7, T, NULL), 0);
    char longer[PASS_MAX + 8];
    snprintf(longer, sizeof longer, "%s0", p);
    assert_int_equal(pass_verify(k, longer, strlen(longer), 42, 7, T, NULL), 0);
    assert_int_equal(pass_verify(k, "", 0, 42, 7, T, NULL), 0);
    assert_int_equal(pass_verify(k, NULL, 0, 42, 7, T, NULL), 0);
    assert_int_equal(pass_verify(k, "042.7.1.2.00", 12, 42, 7, T, NULL), 0);
    token_signer_t *s2 = token_signer_new((const uint8_t *)"another key of 32 bytes, really", 31);
    pass_key_t *k2 = pass_key_new(s2);
    assert_int_equal(pass_verify(k2, p, (size_t)n, 42, 7, T, NULL), 0);
    /* a v1 pass "<user>.<voucher>.<expiry>.<mac>" (v1 label), valid by its own rules at T,
     * is no pass now */
    uint8_t k1[32];
    HMAC(EVP_sha256(), KEY, (int)strlen(KEY), (const uint8_t *)"seckill waiting-room pass v1",
         28, k1, &l);
    const char b1[] = "42.7.1765000000123";
    HMAC(EVP_sha256(), k1, 32, (const uint8_t *)b1, strlen(b1), mac, &l);
    char v1[PASS_MAX];
    off = snprintf(v1, sizeof v1, "%s.", b1);
    for (int i = 0; i < 16; i++)
        off += snprintf(v1 + off, sizeof v1 - (size_t)off, "%02x", mac[i]);
    assert_int_equal(pass_verify(k, v1, strlen(v1), 42, 7, T, NULL), 0);
    /* no token key: one random key per process, the same for every pass_key_new */
    pass_key_t *r1 = pass_key_new(NULL), *r2 = pass_key_new(NULL);
    n = pass_sign(r1, 42, 7, 1, 99, p, sizeof p);
    assert_int_equal(pass_verify(r2, p, (size_t)n, 42, 7, 1, NULL), 1);
    assert_int_equal(pass_verify(k, p, (size_t)n, 42, 7, 1, NULL), 0);
    assert_int_equal(pass_sign(k, 0, 7, 1, 99, p, sizeof p), -1);
    assert_int_equal(pass_sign(k, 42, 7, 1, 99, p, 10), -1);
    /* a start at or after the expiry, or none, is no pass */
    assert_int_equal(pass_sign(k, 42, 7, 99, 99, p, sizeof p), -1);
    assert_int_equal(pass_sign(k, 42, 7, 0, 99, p, sizeof p), -1);
    /* the longest fields fit */
    assert_true(pass_sign(k, 999999999999999999, 999999999999999999, 99999999999999,
                          999999999999999, p, sizeof p) > 0);
    pass_key_free(r1);
    pass_key_free(r2);
    pass_key_free(k2);
    pass_key_free(k);
    pass_key_free(NULL);
    token_signer_free(s2);
    token_signer_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_mac_is_hmac),
        cmocka_unit_test(test_sign_layout_and_verify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
