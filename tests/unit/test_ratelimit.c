/* test_ratelimit.c -- the token-bucket table, its keys, and the --rate-* settings
 * (ratelimit.h, config.h). The HTTP side (429 replies, metrics) is tested end to end in
 * tests/it/test_security.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/config.h"
#include "sale/ratelimit.h"

static void test_burst_then_refill(void **state)
{
    (void)state;
    rl_table_t *t = ratelimit_table_new(10.0, 5.0, 64, 42, RL_FULL_EVICTS);   /* 10/s, burst 5 */
    assert_non_null(t);
    uint64_t now = 1000000;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ratelimit_table_take(t, 7, now), 1);
    }
    assert_int_equal(ratelimit_table_take(t, 7, now), 0);
    assert_int_equal(ratelimit_table_take(t, 7, now + 50), 0);    /* half a token */
    assert_int_equal(ratelimit_table_take(t, 7, now + 100), 1);   /* one token after 100 ms */
    assert_int_equal(ratelimit_table_take(t, 7, now + 100), 0);
    /* other keys have their own buckets */
    assert_int_equal(ratelimit_table_take(t, 8, now), 1);
    /* a long pause refills to the burst, not beyond */
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ratelimit_table_take(t, 7, now + 100000), 1);
    }
    assert_int_equal(ratelimit_table_take(t, 7, now + 100000), 0);
    /* time going backwards (another thread's clock read) adds nothing */
    assert_int_equal(ratelimit_table_take(t, 7, now), 0);
    ratelimit_table_free(t);
    ratelimit_table_free(NULL);
}

static void test_refused_requests_do_not_pay(void **state)
{
    (void)state;
    /* 1 per second, burst 1: a client hammering while empty still gets one a second */
    rl_table_t *t = ratelimit_table_new(1.0, 1.0, 64, 1, RL_FULL_EVICTS);
    uint64_t now = 5000;
    assert_int_equal(ratelimit_table_take(t, 99, now), 1);
    int allowed = 0;
    for (int ms = 1; ms <= 3000; ms++) {
        allowed += ratelimit_table_take(t, 99, now + (uint64_t)ms);
    }
    assert_int_equal(allowed, 3);
    ratelimit_table_free(t);
}

static void test_bounded_memory_and_eviction(void **state)
{
    (void)state;
    /* 8 buckets in all (one set): the ninth key evicts somebody */
    rl_table_t *t = ratelimit_table_new(1.0, 2.0, 8, 3, RL_FULL_EVICTS);
    uint64_t now = 100000;
    /* an abuser empties its bucket and keeps using it */
    assert_int_equal(ratelimit_table_take(t, 1000, now), 1);
    assert_int_equal(ratelimit_table_take(t, 1000, now), 1);
    assert_int_equal(ratelimit_table_take(t, 1000, now), 0);
    /* a crowd of one-off keys, each later than the abuser's last use */
    for (uint64_t k = 1; k <= 200; k++) {
        assert_int_equal(ratelimit_table_take(t, k, now + k), 1);
        assert_int_equal(ratelimit_table_take(t, 1000, now + k), 0);   /* still limited */
    }
    /* refilled buckets are taken first: after a pause everybody starts full */
    assert_int_equal(ratelimit_table_take(t, 5000, now + 100000), 1);
    ratelimit_table_free(t);
}

static void test_full_table_refuses(void **state)
{
    (void)state;
    /* The security review's attack on a table that guards a secret: spend a key's
     * bucket, flood with other keys, come back. A closed table never evicts a bucket
     * still in use: the flood is refused once the set is full, the spent key stays
     * spent, and keys get in again as buckets refill. */
    rl_table_t *t = ratelimit_table_new(10.0 / 60, 10.0, 8, 5, RL_FULL_REFUSES);   /* 10/m:10 */
    uint64_t now = 100000;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(ratelimit_table_take(t, 4242, now), 1);
    }
    assert_int_equal(ratelimit_table_take(t, 4242, now), 0);
    int admitted = 0;
    for (uint64_t k = 1; k <= 12000; k++) {
        admitted += ratelimit_table_take(t, k, now + 1);
    }
    assert_int_equal(admitted, 7);                      /* the 7 other ways of the set */
    assert_int_equal(ratelimit_table_take(t, 4242, now + 2), 0);   /* still spent */
    /* the open policy on the same flood forgets it: the difference this test is about */
    rl_table_t *o = ratelimit_table_new(10.0 / 60, 10.0, 8, 5, RL_FULL_EVICTS);
    for (int i = 0; i < 10; i++) {
        ratelimit_table_take(o, 4242, now);
    }
    for (uint64_t k = 1; k <= 12000; k++) {
        ratelimit_table_take(o, k, now + 1);
    }
    assert_int_equal(ratelimit_table_take(o, 4242, now + 2), 1);
    ratelimit_table_free(o);
    /* a minute later every bucket has refilled: new keys get in, nothing was lost */
    assert_int_equal(ratelimit_table_take(t, 99999, now + 61000), 1);
    ratelimit_table_free(t);
}

static void test_bad_tables(void **state)
{
    (void)state;
    assert_null(ratelimit_table_new(0, 5, 64, 0, RL_FULL_EVICTS));
    assert_null(ratelimit_table_new(1, 0.5, 64, 0, RL_FULL_EVICTS));
    rl_table_t *t = ratelimit_table_new(1, 1, 0, 0, RL_FULL_EVICTS);   /* rounds up to one set */
    assert_non_null(t);
    assert_int_equal(ratelimit_table_take(t, 0, 1), 1);   /* key 0 is folded, not "free" */
    assert_int_equal(ratelimit_table_take(t, 0, 1), 0);
    ratelimit_table_free(t);
}

static void test_keys(void **state)
{
    (void)state;
    uint64_t a = ratelimit_key_ip("127.0.0.1");
    assert_int_equal(a, (UINT64_C(1) << 32) | 0x7f000001u);
    assert_int_equal(ratelimit_key_ip("::ffff:127.0.0.1"), a);
    assert_int_not_equal(ratelimit_key_ip("127.0.0.2"), a);
    /* IPv6: one /64 is one client */
    assert_int_equal(ratelimit_key_ip("2001:db8:1:2::1"), ratelimit_key_ip("2001:db8:1:2:ffff::9"));
    assert_int_not_equal(ratelimit_key_ip("2001:db8:1:2::1"), ratelimit_key_ip("2001:db8:1:3::1"));
    assert_int_equal(ratelimit_key_ip("2001:db8:1:2::1"), UINT64_C(0x20010db800010002));
    assert_int_not_equal(ratelimit_key_ip("::1"), 0);
    assert_int_equal(ratelimit_key_ip("unknown"), 1);
    assert_int_equal(ratelimit_key_ip(NULL), 1);
    assert_int_equal(ratelimit_key_digits("13800000000"), UINT64_C(13800000000));
    assert_int_equal(ratelimit_key_digits(""), 0);
    assert_int_equal(ratelimit_key_digits("138x"), 0);
    assert_int_equal(ratelimit_key_digits("12345678901234567890"), 0);   /* 20 digits */
    assert_int_equal(ratelimit_key_digits(NULL), 0);
}

static void test_per_worker(void **state)
{
    (void)state;
    double r, b;
    ratelimit_per_worker(20, 40, 2, &r, &b);
    assert_true(r == 10 && b == 20);
    ratelimit_per_worker(1.0 / 60, 3, 16, &r, &b);
    assert_true(r > 0 && r < 1.0 / 60 && b == 1);   /* burst never below one request */
    ratelimit_per_worker(5, 5, 0, &r, &b);
    assert_true(r == 5 && b == 5);
}

static int load(config_t *cfg, const char *flag, const char *value, char *err, size_t n)
{
    char *argv[] = { "serve", (char *)flag, (char *)value, NULL };
    return config_load(cfg, value ? 3 : 2, argv, err, n);
}

static void test_config(void **state)
{
    (void)state;
    config_t cfg;
    char err[512];
    assert_int_equal(load(&cfg, "--threads", "2", err, sizeof(err)), 0);
    assert_true(cfg.rate_user_seckill.per_s == 20 && cfg.rate_user_seckill.burst == 40);
    assert_true(cfg.rate_ip_seckill.per_s == 0);
    assert_true(cfg.rate_ip_code.per_s == 10.0 / 60 && cfg.rate_ip_code.burst == 20);
    assert_true(cfg.code_budget.per_s == 20 && cfg.code_budget.burst == 1200);
    assert_int_equal(cfg.code_day_cap, 10);
    assert_int_equal(cfg.code_command_max, 16);
    assert_true(cfg.rate_phone_code.per_s == 1.0 / 60 && cfg.rate_phone_code.burst == 3);
    assert_true(cfg.rate_phone_login.per_s == 10.0 / 60 && cfg.rate_phone_login.burst == 10);
    assert_true(cfg.rate_ip_login.per_s == 10 && cfg.rate_ip_login.burst == 100);

    assert_int_equal(load(&cfg, "--rate-ip-code", "30/m", err, sizeof(err)), 0);
    assert_true(cfg.rate_ip_code.per_s == 0.5 && cfg.rate_ip_code.burst == 30);
    assert_int_equal(load(&cfg, "--rate-ip-seckill", "100/s:5", err, sizeof(err)), 0);
    assert_true(cfg.rate_ip_seckill.per_s == 100 && cfg.rate_ip_seckill.burst == 5);
    assert_int_equal(load(&cfg, "--rate-phone-code", "10/h:2", err, sizeof(err)), 0);
    assert_true(cfg.rate_phone_code.per_s == 10.0 / 3600 && cfg.rate_phone_code.burst == 2);
    assert_int_equal(load(&cfg, "--rate-user-seckill=7", NULL, err, sizeof(err)), 0);
    assert_true(cfg.rate_user_seckill.per_s == 7 && cfg.rate_user_seckill.burst == 7);
    assert_int_equal(load(&cfg, "--rate-user-seckill", "0", err, sizeof(err)), 0);
    assert_true(cfg.rate_user_seckill.per_s == 0);

    static const char *bad[] = { "", "-1", "+5", " 5", "5/d", "5/", "5:0", "5:", "5:x",
                                 "5/s:3x", "1000001", "5/s:1000001", "0x10", "1e3", "5/sec" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(load(&cfg, "--rate-user-seckill", bad[i], err, sizeof(err)), -1);
        assert_non_null(strstr(err, "rate-user-seckill"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_refill),
        cmocka_unit_test(test_refused_requests_do_not_pay),
        cmocka_unit_test(test_bounded_memory_and_eviction),
        cmocka_unit_test(test_full_table_refuses),
        cmocka_unit_test(test_bad_tables),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_per_worker),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
