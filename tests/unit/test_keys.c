/* test_keys.c -- the exact Redis key names (keys.h): other tools and the course's data
 * depend on them byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "keys.h"

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

static void test_constants(void **state)
{
    (void)state;
    assert_string_equal(KEY_GROUP, "g1");
    assert_string_equal(KEY_STREAMS, "seckill:streams");
    assert_string_equal(KEY_INSTANCE, "seckill:instance");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_voucher_keys),
        cmocka_unit_test(test_login_keys),
        cmocka_unit_test(test_constants),
        cmocka_unit_test(test_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
