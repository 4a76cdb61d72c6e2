/* test_pow.c -- the bot gate's proof of work (room/pow.h): a solved challenge verifies;
 * a wrong solution, a tampered field or MAC, an expired, foreign-user, foreign-voucher or
 * foreign-key challenge does not; the difficulty threshold is exact in bits; the
 * difficulty rises with the rate of right solutions; and, against the real Redis the
 * runner starts (REDIS_URL), a solution is used once (replay -> -2) and an unreachable
 * Redis answers -3. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/sha.h>

#include "core/clock.h"
#include "room/pow.h"

static const uint8_t KEY[] = "0123456789abcdef0123456789abcdef";

static app_t *mk_app(const uint8_t *key, int min_bits, int max_bits, double rate)
{
    app_t *app = calloc(1, sizeof *app);
    assert_non_null(app);
    const char *url = getenv("REDIS_URL");
    snprintf(app->redis_url, sizeof app->redis_url, "%s", url ? url : "redis://127.0.0.1:1");
    app->cfg.redis_timeout_ms = 1000;
    pow_conf_t c = {min_bits, max_bits, rate};
    char err[256];
    assert_int_equal(pow_init(app, key, key ? sizeof KEY - 1 : 0, &c, err, sizeof err), 0);
    return app;
}

static void rm_app(app_t *app)
{
    pow_free(app);
    free(app);
}

/* A challenge for (uid, vid) and its solution. */
static int issue_solved(app_t *app, int64_t uid, int64_t vid, char ch[POW_CHALLENGE_MAX],
                        char sol[24])
{
    int d = 0;
    assert_int_equal(pow_challenge(app, uid, vid, ch, POW_CHALLENGE_MAX, &d), 0);
    assert_true(pow_solve(ch, d, 0, UINT64_C(1) << 30, sol, 24) > 0);
    return d;
}

static int check(app_t *app, int64_t uid, int64_t vid, const char *ch, const char *sol)
{
    char key[POW_REPLAY_KEY_MAX];
    int64_t ttl = 0;
    return pow_check(app, uid, vid, ch, sol, clock_wall_ms(), key, &ttl);
}

static void test_roundtrip_and_layout(void **state)
{
    (void)state;
    app_t *app = mk_app(KEY, 10, 10, 50);
    char ch[POW_CHALLENGE_MAX], sol[24], key[POW_REPLAY_KEY_MAX];
    int d = issue_solved(app, 42, 7, ch, sol);
    assert_int_equal(d, 10);
    /* v1.42.7.<expiry>.10.<24 hex>.<32 hex> */
    assert_memory_equal(ch, "v1.42.7.", 8);
    const char *dot = strstr(ch + 8, ".10.");
    assert_non_null(dot);
    assert_int_equal(strlen(dot + 4), 24 + 1 + 32);
    int64_t expiry = strtoll(ch + 8, NULL, 10);
    int64_t now_s = (int64_t)(clock_wall_ms() / 1000);
    assert_true(expiry >= now_s + POW_TTL_S - 1 && expiry <= now_s + POW_TTL_S + 1);
    assert_true(pow_zero_bits(ch, sol) >= 10);
    int64_t ttl = 0;
    assert_int_equal(pow_check(app, 42, 7, ch, sol, clock_wall_ms(), key, &ttl), 0);
    assert_true(ttl > (POW_TTL_S - 2) * 1000 && ttl <= (POW_TTL_S + 1) * 1000);
    /* the replay key: the voucher's hash tag and the challenge's mac */
    char want[POW_REPLAY_KEY_MAX];
    snprintf(want, sizeof want, "seckill:pow:{7}:%s", strrchr(ch, '.') + 1);
    assert_string_equal(key, want);
    /* two challenges differ (the random part) */
    char ch2[POW_CHALLENGE_MAX];
    int d2;
    assert_int_equal(pow_challenge(app, 42, 7, ch2, sizeof ch2, &d2), 0);
    assert_string_not_equal(ch, ch2);
    /* too small a buffer */
    assert_int_equal(pow_challenge(app, 42, 7, ch2, 40, &d2), -1);
    rm_app(app);
}

static void test_wrong_solution(void **state)
{
    (void)state;
    app_t *app = mk_app(KEY, 12, 12, 50);
    char ch[POW_CHALLENGE_MAX], sol[24];
    issue_solved(app, 1, 2, ch, sol);
    /* the first number whose hash has fewer than 12 zero bits */
    char bad[24];
    for (int i = 0;; i++) {
        snprintf(bad, sizeof bad, "%d", i);
        if (pow_zero_bits(ch, bad) < 12)
            break;
    }
    assert_int_equal(check(app, 1, 2, ch, bad), -1);
    /* malformed solutions */
    assert_int_equal(check(app, 1, 2, ch, ""), -1);
    assert_int_equal(check(app, 1, 2, ch, NULL), -1);
    assert_int_equal(check(app, 1, 2, ch, "12a"), -1);
    assert_int_equal(check(app, 1, 2, ch, "-1"), -1);
    assert_int_equal(check(app, 1, 2, ch, "123456789012345678901"), -1);
    assert_int_equal(check(app, 1, 2, ch, sol), 0);
    rm_app(app);
}

/* Replaces the n-th '.'-separated field (0 = "v1") of ch with val into out. */
static void set_field(const char *ch, int n, const char *val, char *out, size_t len)
{
    const char *p = ch;
    for (int i = 0; i < n; i++)
        p = strchr(p, '.') + 1;
    const char *end = strchr(p, '.');
    snprintf(out, len, "%.*s%s%s", (int)(p - ch), ch, val, end ? end : "");
}

static void test_tampered(void **state)
{
    (void)state;
    app_t *app = mk_app(KEY, 10, 10, 50);
    char ch[POW_CHALLENGE_MAX], sol[24], t[POW_CHALLENGE_MAX], s2[24];
    issue_solved(app, 5, 6, ch, sol);
    /* a lower difficulty, solved for real: the MAC no longer matches */
    set_field(ch, 4, "8", t, sizeof t);
    assert_true(pow_solve(t, 8, 0, 1u << 24, s2, sizeof s2) > 0);
    assert_int_equal(check(app, 5, 6, t, s2), -1);
    /* a later expiry */
    char later[32];
    snprintf(later, sizeof later, "%lld", (long long)(clock_wall_ms() / 1000 + 100));
    set_field(ch, 3, later, t, sizeof t);
    assert_true(pow_solve(t, 10, 0, 1u << 24, s2, sizeof s2) > 0);
    assert_int_equal(check(app, 5, 6, t, s2), -1);
    /* one digit of the MAC changed */
    snprintf(t, sizeof t, "%s", ch);
    char *m = strrchr(t, '.') + 1;
    m[5] = m[5] == '0' ? '1' : '0';
    assert_true(pow_solve(t, 10, 0, 1u << 24, s2, sizeof s2) > 0);
    assert_int_equal(check(app, 5, 6, t, s2), -1);
    /* shape: uppercase MAC, truncated, trailing text, leading zero in a number */
    snprintf(t, sizeof t, "%s", ch);
    m = strrchr(t, '.') + 1;
    for (char *q = m; *q; q++)
        if (*q >= 'a' && *q <= 'f')
            *q = (char)(*q - 32);
    assert_int_equal(check(app, 5, 6, t, sol), -1);
    snprintf(t, sizeof t, "%.*s", (int)strlen(ch) - 1, ch);
    assert_int_equal(check(app, 5, 6, t, sol), -1);
    snprintf(t, sizeof t, "%.150s0", ch);
    assert_int_equal(check(app, 5, 6, t, sol), -1);
    set_field(ch, 1, "05", t, sizeof t);
    assert_int_equal(check(app, 5, 6, t, sol), -1);
    assert_int_equal(check(app, 5, 6, "v2", sol), -1);
    assert_int_equal(check(app, 5, 6, NULL, sol), -1);
    assert_int_equal(check(app, 5, 6, ch, sol), 0);
    rm_app(app);
}

static void test_expired_and_foreign(void **state)
{
    (void)state;
    app_t *app = mk_app(KEY, 10, 10, 50);
    char ch[POW_CHALLENGE_MAX], sol[24], key[POW_REPLAY_KEY_MAX];
    int64_t ttl;
    issue_solved(app, 9, 3, ch, sol);
    uint64_t now = clock_wall_ms();
    assert_int_equal(pow_check(app, 9, 3, ch, sol, now + (POW_TTL_S + 2) * 1000, key, &ttl), -1);
    assert_int_equal(pow_check(app, 9, 3, ch, sol, now + (POW_TTL_S - 5) * 1000, key, &ttl), 0);
    assert_int_equal(check(app, 10, 3, ch, sol), -1);   /* another user */
    assert_int_equal(check(app, 9, 4, ch, sol), -1);    /* another voucher */
    assert_int_equal(check(app, 0, POW_LOGIN_SCOPE, ch, sol), -1);
    /* another key: another deployment's challenge */
    static const uint8_t OTHER[] = "fedcba9876543210fedcba9876543210";
    app_t *other = mk_app(OTHER, 10, 10, 50);
    assert_int_equal(check(other, 9, 3, ch, sol), -1);
    /* the random key of an instance with opaque tokens is its own */
    app_t *rnd = mk_app(NULL, 10, 10, 50);
    assert_int_equal(check(rnd, 9, 3, ch, sol), -1);
    issue_solved(rnd, 9, 3, ch, sol);
    assert_int_equal(check(rnd, 9, 3, ch, sol), 0);
    assert_int_equal(check(app, 9, 3, ch, sol), -1);
    rm_app(rnd);
    rm_app(other);
    rm_app(app);
}

/* pow_zero_bits against OpenSSL's SHA256 and a count done bit by bit. */
static int zero_bits_slow(const char *ch, const char *s)
{
    char buf[256];
    uint8_t d[32];
    int n = snprintf(buf, sizeof buf, "%s:%s", ch, s);
    SHA256((const uint8_t *)buf, (size_t)n, d);
    int bits = 0;
    while (bits < 256 && !(d[bits / 8] & (0x80 >> (bits % 8))))
        bits++;
    return bits;
}

/* The smallest number whose hash has exactly bits leading zero bits. */
static void find_exact(const char *ch, int bits, char out[24])
{
    for (uint64_t i = 0;; i++) {
        snprintf(out, 24, "%llu", (unsigned long long)i);
        if (pow_zero_bits(ch, out) == bits)
            return;
    }
}

static void test_difficulty_bits_exact(void **state)
{
    (void)state;
    for (int i = 0; i < 3000; i++) {
        char s[16];
        snprintf(s, sizeof s, "%d", i);
        assert_int_equal(pow_zero_bits("v1.test", s), zero_bits_slow("v1.test", s));
    }
    /* at difficulty k a solution with exactly k zero bits passes, one with k - 1 fails */
    for (int k = 8; k <= 12; k++) {
        app_t *app = mk_app(KEY, k, k, 50);
        char ch[POW_CHALLENGE_MAX], sol[24];
        int d;
        assert_int_equal(pow_challenge(app, 1, 1, ch, sizeof ch, &d), 0);
        assert_int_equal(d, k);
        find_exact(ch, k - 1, sol);
        assert_int_equal(check(app, 1, 1, ch, sol), -1);
        find_exact(ch, k, sol);
        assert_int_equal(check(app, 1, 1, ch, sol), 0);
        /* the solver's answer is the smallest: every smaller number has fewer bits */
        assert_true(pow_solve(ch, k, 0, UINT64_C(1) << 30, sol, sizeof sol) > 0);
        long first = atol(sol);
        assert_true(pow_zero_bits(ch, sol) >= k);
        for (long j = 0; j < first; j++) {
            char s[24];
            snprintf(s, sizeof s, "%ld", j);
            assert_true(pow_zero_bits(ch, s) < k);
        }
        rm_app(app);
    }
}

static void test_difficulty_rises_with_rate(void **state)
{
    (void)state;
    app_t *app = mk_app(KEY, 8, 12, 1);   /* one right solution a second is "quiet" */
    assert_int_equal(pow_difficulty(app, 77), 8);
    assert_int_equal(pow_difficulty(app, 78), 8);
    int last = 8, rose = 0;
    for (int i = 0; i < 40; i++) {
        char ch[POW_CHALLENGE_MAX], sol[24];
        int d = issue_solved(app, i + 1, 77, ch, sol);
        assert_true(d >= last);   /* within a second or so the rate only grows */
        last = d;
        assert_int_equal(check(app, i + 1, 77, ch, sol), 0);
        /* a check alone is not a use: only the first use of a solution counts */
        assert_int_equal(pow_difficulty(app, 77), d);
        pow_used(app, 77);
    }
    rose = pow_difficulty(app, 77);
    /* 40 solutions at once: an EWMA of ~8/s = 2^3 * the threshold -> min + 4, capped 12 */
    assert_true(rose >= 11 && rose <= 12);
    assert_int_equal(pow_difficulty(app, 78), 8);   /* per voucher */
    /* wrong answers do not count */
    app_t *q = mk_app(KEY, 8, 12, 1);
    for (int i = 0; i < 40; i++) {
        char ch[POW_CHALLENGE_MAX];
        int d;
        assert_int_equal(pow_challenge(q, 1, 77, ch, sizeof ch, &d), 0);
        check(q, 1, 77, ch, "0");
    }
    assert_true(pow_difficulty(q, 77) <= 9);
    rm_app(q);
    rm_app(app);
}

static void test_replay_in_redis(void **state)
{
    (void)state;
    if (getenv("REDIS_URL") == NULL) {
        skip();
    }
    app_t *app = mk_app(KEY, 8, 8, 50);
    char ch[POW_CHALLENGE_MAX], sol[24];
    issue_solved(app, 31, 4242, ch, sol);
    assert_int_equal(pow_verify(app, 31, 4242, ch, sol), 0);
    assert_int_equal(pow_verify(app, 31, 4242, ch, sol), -2);   /* replay */
    /* replays do not raise the difficulty (--pow-rate 1 here: 20 first uses would) */
    app_t *low = mk_app(KEY, 8, 12, 1);
    char ch1[POW_CHALLENGE_MAX], sol1[24];
    issue_solved(low, 31, 4243, ch1, sol1);
    assert_int_equal(pow_verify(low, 31, 4243, ch1, sol1), 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(pow_verify(low, 31, 4243, ch1, sol1), -2);
    assert_int_equal(pow_difficulty(low, 4243), 8);
    rm_app(low);
    /* a different solution of the same challenge is the same challenge used again */
    char sol2[24];
    assert_true(pow_solve(ch, 8, (uint64_t)atoll(sol) + 1, UINT64_C(1) << 30, sol2, sizeof sol2) > 0);
    assert_int_equal(pow_verify(app, 31, 4242, ch, sol2), -2);
    /* wrong: no Redis needed, -1 */
    assert_int_equal(pow_verify(app, 32, 4242, ch, sol), -1);
    /* a fresh challenge of the same user is fine */
    issue_solved(app, 31, 4242, ch, sol);
    assert_int_equal(pow_verify(app, 31, 4242, ch, sol), 0);
    rm_app(app);

    /* Redis unreachable: -3 for a right solution, still -1 for a wrong one */
    app_t *down = calloc(1, sizeof *down);
    snprintf(down->redis_url, sizeof down->redis_url, "redis://127.0.0.1:1");
    down->cfg.redis_timeout_ms = 200;
    pow_conf_t c = {8, 8, 50};
    char err[128];
    assert_int_equal(pow_init(down, KEY, sizeof KEY - 1, &c, err, sizeof err), 0);
    issue_solved(down, 1, 1, ch, sol);
    assert_int_equal(pow_verify(down, 1, 1, ch, sol), -3);
    assert_int_equal(pow_verify(down, 2, 1, ch, sol), -1);
    pow_free(down);
    free(down);
}

static void test_init_checks(void **state)
{
    (void)state;
    app_t app;
    memset(&app, 0, sizeof app);
    char err[128];
    pow_conf_t bad[] = {{7, 10, 1}, {12, 10, 1}, {8, 33, 1}, {8, 10, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(pow_init(&app, KEY, sizeof KEY - 1, &bad[i], err, sizeof err), -1);
        assert_true(err[0] != 0);
        assert_null(app.pow);
    }
    /* no state: everything refuses */
    char ch[POW_CHALLENGE_MAX];
    int d;
    assert_int_equal(pow_challenge(&app, 1, 1, ch, sizeof ch, &d), -1);
    assert_int_equal(check(&app, 1, 1, "v1.1.1.1.8.x.y", "1"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_layout),
        cmocka_unit_test(test_wrong_solution),
        cmocka_unit_test(test_tampered),
        cmocka_unit_test(test_expired_and_foreign),
        cmocka_unit_test(test_difficulty_bits_exact),
        cmocka_unit_test(test_difficulty_rises_with_rate),
        cmocka_unit_test(test_replay_in_redis),
        cmocka_unit_test(test_init_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
