/* test_logincode.c -- phones masked for the log (logincode_mask, logincode.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "auth/logincode.h"

static void test_mask(void **state)
{
    (void)state;
    char m[LOGINCODE_MASK_BYTES];
    assert_string_equal(logincode_mask("13812340000", m), "138****0000");
    assert_string_equal(logincode_mask("12345678", m), "123****5678");
    /* too short to keep anything, too long to be a phone we accept, or none */
    assert_string_equal(logincode_mask("1234567", m), "****");
    assert_string_equal(logincode_mask("1234567890123456", m), "****");
    assert_string_equal(logincode_mask("", m), "****");
    assert_string_equal(logincode_mask(NULL, m), "****");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
