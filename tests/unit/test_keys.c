/* test_keys.c -- the exact Redis key names (keys.h): other tools and the course's data
 * depend on them byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/key.h"
#include "redis/rcluster.h"

static void test_voucher_keys(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(key_voucher(buf, sizeof(buf), 42), 20);
    assert_string_equal(buf, "seckill:voucher:{42}");
    assert_int_equal(key_buyers(buf, sizeof(buf), 42), 18);
    assert_string_equal(buf, "seckill:order:{42}");
    assert_int_equal(key_stream(buf, sizeof(buf), 42), 19);
    assert_string_equal(buf, "seckill:stream:{42}");
    int n = key_voucher(buf, sizeof(buf), INT64_MAX);
    assert_int_equal(n, (int)strlen(buf));
    assert_string_equal(buf, "seckill:voucher:{9223372036854775807}");
}

/* The numeric keys are put together by hand (no snprintf): they must match "%lld" for
 * every value, signs and extremes included. */
static void test_numeric_keys_match_printf(void **state)
{
    (void)state;
    static const int64_t vals[] = {0, 1, 9, 10, 99, 100, 12345, 999999999, 1000000000,
                                   3000000000LL, 281479271677953LL, INT64_MAX, -1, -10, -99,
                                   -12345, INT64_MIN, INT64_MIN + 1};
    char got[64], want[64];
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        long long v = (long long)vals[i];
        int n;
        n = snprintf(want, sizeof want, "seckill:voucher:{%lld}", v);
        assert_int_equal(key_voucher(got, sizeof got, vals[i]), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:order:{%lld}", v);
        assert_int_equal(key_buyers(got, sizeof got, vals[i]), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:stream:{%lld}", v);
        assert_int_equal(key_stream(got, sizeof got, vals[i]), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:dead:{%lld}", v);
        assert_int_equal(key_dead(got, sizeof got, vals[i]), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:rebuild:{%lld}", v);
        assert_int_equal(key_rebuild_lock(got, sizeof got, vals[i]), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:rebuild:buyers:{%lld}", v);
        assert_int_equal(key_rebuild_buyers(got, sizeof got, vals[i]), n);
        assert_string_equal(got, want);
        /* one byte short of the key and its NUL: refused, nothing left behind */
        memset(got, 'x', sizeof got);
        assert_int_equal(key_rebuild_buyers(got, (size_t)n, vals[i]), -1);
        assert_string_equal(got, "");
        assert_int_equal(key_rebuild_buyers(got, (size_t)n + 1, vals[i]), n);
    }
}

/* The same for the keys around a hash tag, and the tags of stock buckets. */
static void test_tag_keys_match_printf(void **state)
{
    (void)state;
    static const char *const tags[] = {"42", "42.b3.17", "", "9223372036854775807.b31.65535"};
    char got[96], want[96];
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
        const char *t = tags[i];
        int n;
        n = snprintf(want, sizeof want, "seckill:voucher:{%s}", t);
        assert_int_equal(key_voucher_t(got, sizeof got, t), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:order:{%s}", t);
        assert_int_equal(key_buyers_t(got, sizeof got, t), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:stream:{%s}", t);
        assert_int_equal(key_stream_t(got, sizeof got, t), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:dead:{%s}", t);
        assert_int_equal(key_dead_t(got, sizeof got, t), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:xfer:{%s}", t);
        assert_int_equal(key_xfer_log(got, sizeof got, t), n);
        assert_string_equal(got, want);
        n = snprintf(want, sizeof want, "seckill:xfer:applied:{%s}", t);
        assert_int_equal(key_xfer_applied(got, sizeof got, t), n);
        assert_string_equal(got, want);
        memset(got, 'x', sizeof got);
        assert_int_equal(key_xfer_applied(got, (size_t)n, t), -1);
        assert_string_equal(got, "");
    }
    assert_int_equal(key_voucher_t(got, sizeof got, NULL), -1);
    assert_string_equal(got, "");
    static const struct { int64_t v; int b; unsigned salt; } bt[] = {
        {42, 0, 7}, {42, 1, 0}, {42, 3, 17}, {-5, 2, 1}, {INT64_MAX, 31, 65535}};
    for (size_t i = 0; i < sizeof bt / sizeof bt[0]; i++) {
        int n = bt[i].b <= 0 ? snprintf(want, sizeof want, "%lld", (long long)bt[i].v)
                             : snprintf(want, sizeof want, "%lld.b%d.%u", (long long)bt[i].v,
                                        bt[i].b, bt[i].salt);
        assert_int_equal(key_btag_salt(got, sizeof got, bt[i].v, bt[i].b, bt[i].salt), n);
        assert_string_equal(got, want);
        assert_int_equal(key_btag_salt(got, (size_t)n, bt[i].v, bt[i].b, bt[i].salt), -1);
        assert_string_equal(got, "");
    }
}

static void test_login_keys(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(key_login_code(buf, sizeof(buf), "13812345678"), 22);
    assert_string_equal(buf, "login:code:13812345678");
    const char *tok = "0123456789abcdef0123456789abcdef";
    assert_int_equal(key_login_token(buf, sizeof(buf), tok), 44);
    assert_string_equal(buf, "login:token:0123456789abcdef0123456789abcdef");
    assert_int_equal(key_login_code(buf, sizeof(buf), NULL), -1);
    /* the counter's hash tag is the code's whole key: one Cluster slot for both */
    assert_int_equal(key_login_fails(buf, sizeof(buf), "13812345678"), 30);
    assert_string_equal(buf, "{login:code:13812345678}:fails");
    assert_int_equal(key_login_fails(buf, sizeof(buf), NULL), -1);
    assert_int_equal(key_login_token(buf, sizeof(buf), NULL), -1);
}

/* The payment id's claim (src/order/life.c): a 64-character id (LIFE_PAYMENT_ID_MAX) fits
 * the 79 bytes life.c gives it, and no fewer. */
static void test_payid_key(void **state)
{
    (void)state;
    char buf[80], id[65];
    memset(id, 'x', 64);
    id[64] = '\0';
    assert_int_equal(key_payid(buf, 79, id), 78);
    assert_string_equal(buf + 14, id);
    assert_int_equal(key_payid(buf, 78, id), -1);
    assert_int_equal(key_payid(buf, sizeof buf, "P-1"), 17);
    assert_string_equal(buf, "seckill:payid:P-1");
    assert_int_equal(key_payid(buf, sizeof buf, NULL), -1);
}

static void test_constants(void **state)
{
    (void)state;
    assert_string_equal(KEY_GROUP, "g1");
    assert_string_equal(KEY_STREAMS, "seckill:streams");
    assert_string_equal(KEY_INSTANCE, "seckill:instance");
    /* order lookups SDIFF the two in one command: one slot on a cluster */
    assert_int_equal(rcluster_slot(KEY_DRAINED, strlen(KEY_DRAINED)),
                     rcluster_slot(KEY_STREAMS, strlen(KEY_STREAMS)));
}

static void test_too_small(void **state)
{
    (void)state;
    char buf[32];
    /* exactly fits: 20 characters + NUL */
    assert_int_equal(key_voucher(buf, 21, 42), 20);
    assert_string_equal(buf, "seckill:voucher:{42}");
    /* one byte short: refused, and no truncated key is left behind */
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(key_voucher(buf, 20, 42), -1);
    assert_string_equal(buf, "");
    assert_int_equal(key_stream(buf, 5, 1), -1);
    assert_int_equal(key_buyers(buf, 1, 1), -1);
    assert_int_equal(key_login_token(buf, 12, "abc"), -1);
    assert_int_equal(key_voucher(buf, 0, 1), -1);
    assert_int_equal(key_voucher(NULL, 10, 1), -1);
}

/* Stock buckets: bucket 0 is the voucher's own tag; bucket b of K lands within 32 slots
 * after a b/K turn of the ring from bucket 0's slot, so K = 3 on three equal masters puts
 * one bucket on each (unless within 32 slots of a boundary). */
static void test_bucket_tags(void **state)
{
    (void)state;
    char tag[48], key[80];
    assert_int_equal(key_btag(tag, sizeof tag, 42, 0, 1), 2);
    assert_string_equal(tag, "42");
    assert_int_equal(key_btag(tag, sizeof tag, 42, 0, 6), 2);
    assert_int_equal(key_voucher_t(key, sizeof key, tag), 20);
    assert_string_equal(key, "seckill:voucher:{42}");
    assert_int_equal(key_btag(tag, sizeof tag, 42, 6, 6), -1);   /* b must be < K */
    assert_int_equal(key_btag(tag, sizeof tag, 42, 1, 17), -1);
    assert_int_equal(key_btag(tag, sizeof tag, 42, -1, 6), -1);
    int spread = 0;
    for (int64_t v = 1; v <= 300; v++) {
        char t0[32];
        int n0 = key_btag(t0, sizeof t0, v, 0, 3);
        unsigned s0 = rcluster_slot(t0, (size_t)n0), third[3];
        for (int b = 0; b < 3; b++) {
            int n = key_btag(tag, sizeof tag, v, b, 3);
            assert_true(n > 0);
            unsigned slot = rcluster_slot(tag, (size_t)n);
            unsigned target = (s0 + ((unsigned)b * RCL_SLOTS + 1) / 3) % RCL_SLOTS;
            assert_true((slot + RCL_SLOTS - target) % RCL_SLOTS < 32);
            third[b] = slot * 3 / RCL_SLOTS;
            /* the same tag from its salt, and stable across calls */
            char again[48];
            assert_int_equal(key_btag_salt(again, sizeof again, v, b, key_bsalt(v, b, 3)), n);
            assert_string_equal(again, tag);
        }
        spread += third[0] != third[1] && third[1] != third[2] && third[0] != third[2];
    }
    assert_true(spread >= 290);   /* one bucket per third of the ring, nearly always */
    assert_int_equal(key_xfer_log(key, sizeof key, "7.b1.3"), 21);
    assert_string_equal(key, "seckill:xfer:{7.b1.3}");
    assert_int_equal(key_xfer_applied(key, sizeof key, "7"), 24);
    assert_string_equal(key, "seckill:xfer:applied:{7}");
}

/* The members "<id>.<b>.<K>" of seckill:streams (the writer, the sweep and the board
 * read them); a plain id or anything malformed is not one. */
static void test_bucket_members(void **state)
{
    (void)state;
    int64_t v = 0;
    int b = 0, k = 0;
    assert_int_equal(key_bmember_parse("42.3.4", 6, &v, &b, &k), 0);
    assert_true(v == 42 && b == 3 && k == 4);
    static const char *const bad[] = { "42", "42.0.4", "42.4.4", "42.1.1", "42.1.17",
                                       "0.1.4", "42.1.4x", "42.1", "", "x.1.4" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(key_bmember_parse(bad[i], strlen(bad[i]), &v, &b, &k), -1);
    /* only the n bytes given count */
    assert_int_equal(key_bmember_parse("42.1.4.9", 6, &v, &b, &k), 0);
    assert_int_equal(key_bmember_parse("42.1.4.9", 8, &v, &b, &k), -1);
}

/* key_bmember writes what key_bmember_parse reads, and the stream key of that bucket
 * (the rebuild watch lists a lost member again when its stream exists). */
static void test_bucket_member_format(void **state)
{
    (void)state;
    char mem[48], ks[64], tag[48], want[64];
    assert_int_equal(key_bmember(mem, sizeof mem, ks, sizeof ks, 42, 0, 1), 2);
    assert_string_equal(mem, "42");
    assert_string_equal(ks, "seckill:stream:{42}");
    assert_int_equal(key_bmember(mem, sizeof mem, ks, sizeof ks, 42, 0, 6), 2);
    assert_string_equal(mem, "42");
    assert_int_equal(key_bmember(mem, sizeof mem, ks, sizeof ks, 42, 3, 6), 6);
    assert_string_equal(mem, "42.3.6");
    assert_true(key_btag(tag, sizeof tag, 42, 3, 6) > 0);
    assert_true(key_stream_t(want, sizeof want, tag) > 0);
    assert_string_equal(ks, want);
    int64_t v = 0;
    int b = 0, k = 0;
    assert_int_equal(key_bmember_parse(mem, strlen(mem), &v, &b, &k), 0);
    assert_true(v == 42 && b == 3 && k == 6);
    /* no stream key asked for */
    assert_int_equal(key_bmember(mem, sizeof mem, NULL, 0, 7, 1, 2), 5);
    assert_string_equal(mem, "7.1.2");
    assert_int_equal(key_bmember(mem, sizeof mem, NULL, 0, 7, 2, 2), -1);
    assert_int_equal(key_bmember(mem, sizeof mem, NULL, 0, 7, -1, 2), -1);
    assert_int_equal(key_bmember(mem, sizeof mem, NULL, 0, 7, 1, KEY_BUCKETS_MAX + 1), -1);
    assert_int_equal(key_bmember(mem, 3, NULL, 0, 7, 1, 2), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_voucher_keys),
        cmocka_unit_test(test_numeric_keys_match_printf),
        cmocka_unit_test(test_tag_keys_match_printf),
        cmocka_unit_test(test_login_keys),
        cmocka_unit_test(test_payid_key),
        cmocka_unit_test(test_constants),
        cmocka_unit_test(test_too_small),
        cmocka_unit_test(test_bucket_tags),
        cmocka_unit_test(test_bucket_members),
        cmocka_unit_test(test_bucket_member_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
