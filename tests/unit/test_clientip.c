/* test_clientip.c -- --trusted-proxy ranges and the client behind them (clientip.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "http/clientip.h"

static void test_parse(void **state)
{
    (void)state;
    clientip_set_t s;
    char err[128];
    assert_int_equal(clientip_parse("127.0.0.1, 10.0.0.0/8,::1,2001:db8::/32", &s, err,
                                    sizeof err), 0);
    assert_int_equal(s.n, 4);
    assert_true(clientip_trusted(&s, "127.0.0.1"));
    assert_true(clientip_trusted(&s, "::ffff:127.0.0.1"));
    assert_true(clientip_trusted(&s, "10.255.1.2"));
    assert_false(clientip_trusted(&s, "11.0.0.1"));
    assert_true(clientip_trusted(&s, "::1"));
    assert_true(clientip_trusted(&s, "2001:db8:ffff::9"));
    assert_false(clientip_trusted(&s, "2001:db9::1"));
    assert_false(clientip_trusted(&s, "unknown"));
    assert_int_equal(clientip_parse("", &s, err, sizeof err), 0);
    assert_int_equal(s.n, 0);
    static const char *bad[] = { "nginx", "10.0.0.0/33", "10.0.0.0/", "::1/129", "1.2.3.4/8x",
                                 "1.2.3" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(clientip_parse(bad[i], &s, err, sizeof err), -1);
        assert_non_null(strstr(err, "trusted-proxy"));
    }
}

static void test_client_of(void **state)
{
    (void)state;
    clientip_set_t s;
    char err[128], buf[64];
    assert_int_equal(clientip_parse("127.0.0.1,10.0.0.0/8", &s, err, sizeof err), 0);
    /* untrusted peer: its header is ignored */
    assert_string_equal(clientip_of(&s, "192.0.2.1", "203.0.113.7", buf, sizeof buf),
                        "192.0.2.1");
    /* trusted peer: the rightmost untrusted entry, past trusted hops */
    assert_string_equal(clientip_of(&s, "127.0.0.1", "1.1.1.1, 203.0.113.7,10.1.2.3",
                                    buf, sizeof buf), "203.0.113.7");
    assert_string_equal(clientip_of(&s, "127.0.0.1", " 2001:db8::5 ", buf, sizeof buf),
                        "2001:db8::5");
    /* all trusted: the leftmost; malformed: the last trusted hop; absent: the peer */
    assert_string_equal(clientip_of(&s, "127.0.0.1", "10.0.0.1, 10.0.0.2", buf, sizeof buf),
                        "10.0.0.1");
    assert_string_equal(clientip_of(&s, "127.0.0.1", "junk, 10.0.0.2", buf, sizeof buf),
                        "10.0.0.2");
    assert_string_equal(clientip_of(&s, "127.0.0.1", "1.2.3.4:80", buf, sizeof buf),
                        "127.0.0.1");
    assert_string_equal(clientip_of(&s, "127.0.0.1", NULL, buf, sizeof buf), "127.0.0.1");
    assert_string_equal(clientip_of(NULL, "127.0.0.1", "1.1.1.1", buf, sizeof buf),
                        "127.0.0.1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_client_of),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
