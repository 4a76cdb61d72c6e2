/* test_bodylimit.c -- bodylimit.h: the routes that read a body get theirs (voucher and
 * shop writes --max-body-bytes, login and the board's sale calls 4 KiB), every other route
 * and method a tiny one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "http/bodylimit.h"
#include "http/http_req.h"

static size_t lim(int method, const char *path, size_t max_body)
{
    return bodylimit_for(method, path, strlen(path), max_body);
}

static void test_routes(void **state)
{
    (void)state;
    assert_int_equal(lim(HM_POST, "/voucher", 65536), 65536);
    assert_int_equal(lim(HM_POST, "/voucher/seckill", 65536), 65536);
    assert_int_equal(lim(HM_POST, "/user/login", 65536), BODYLIMIT_LOGIN);
    assert_int_equal(lim(HM_POST, "/user/login", 2048), 2048);      /* never above max */
    assert_int_equal(lim(HM_POST, "/shop", 65536), 65536);
    assert_int_equal(lim(HM_PUT, "/shop", 65536), 65536);
    assert_int_equal(lim(HM_POST, "/admin/api/sale/7/extend", 65536), BODYLIMIT_SMALL);
    assert_int_equal(lim(HM_POST, "/pay/notify", 65536), BODYLIMIT_SMALL);
    /* Routes that read no body, near misses and other methods: the tiny limit. */
    static const char *none[] = {"/voucher-order/seckill/1", "/user/code", "/user/logout",
                                 "/voucher/", "/voucher/seckillx", "/user/login/", "/",
                                 "/admin/api/board", "/admin/api/sale/", "/metrics",
                                 "/shop/1"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        assert_int_equal(lim(HM_POST, none[i], 65536), BODYLIMIT_NONE);
    assert_int_equal(lim(HM_GET, "/voucher", 65536), BODYLIMIT_NONE);
    assert_int_equal(lim(HM_PUT, "/user/login", 65536), BODYLIMIT_NONE);
    assert_int_equal(lim(HM_HEAD, "/voucher/list/1", 65536), BODYLIMIT_NONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
