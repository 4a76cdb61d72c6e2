/* test_sentry.c -- reading order stream entries (sentry.h): the compact form admit.lua
 * writes, the named form of earlier versions, and what either may not carry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "sentry.h"

/* A field/value array reply built by hand: n strings. */
typedef struct {
    redisReply arr;
    redisReply el[12];
    redisReply *ptr[12];
} fields_t;

static const redisReply *mk(fields_t *f, size_t n, const char *const *s)
{
    memset(f, 0, sizeof *f);
    f->arr.type = REDIS_REPLY_ARRAY;
    f->arr.elements = n;
    f->arr.element = f->ptr;
    for (size_t i = 0; i < n; i++) {
        f->el[i].type = REDIS_REPLY_STRING;
        f->el[i].str = (char *)s[i];
        f->el[i].len = strlen(s[i]);
        f->ptr[i] = &f->el[i];
    }
    return &f->arr;
}

static int parse(size_t n, const char *const *s, sentry_t *e, const char **why)
{
    fields_t f;
    *why = NULL;
    return sentry_parse(mk(&f, n, s), 42, e, why);
}

static void test_compact(void **state)
{
    (void)state;
    sentry_t e;
    const char *why;
    const char *ok[] = {"o", "281479271677953 1000000001 1796155124 3"};
    assert_int_equal(parse(2, ok, &e, &why), 0);
    assert_true(e.order_id == 281479271677953LL && e.user_id == 1000000001 &&
                e.ts == 1796155124 && e.ep == 3);
    const char *ep0[] = {"o", "5 6 7 0"};
    assert_int_equal(parse(2, ep0, &e, &why), 0);
    assert_int_equal(e.ep, 0);
    static const char *const bad[][2] = {
        {"o", ""}, {"o", "5 6 7"}, {"o", "5 6 7 0 9"}, {"o", "5  6 7 0"}, {"o", "0 6 7 0"},
        {"o", "5 0 7 0"}, {"o", "5 -6 7 0"}, {"o", "5 6 7 x"}, {"o", " 5 6 7 0"},
        {"o", "5 6 7 0 "}, {"o", "99999999999999999999 6 7 0"},
    };
    static const char *const reason[] = {
        "missing or bad id", "bad ts", "bad ep", "missing or bad userId",
        "missing or bad id", "missing or bad userId", "missing or bad userId", "bad ep",
        "missing or bad id", "bad ep", "missing or bad id",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(2, bad[i], &e, &why), -1);
        assert_string_equal(why, reason[i]);
    }
}

static void test_named(void **state)
{
    (void)state;
    sentry_t e;
    const char *why;
    const char *ok[] = {"id", "9", "userId", "8", "voucherId", "42", "ts", "1700000000", "ep", "2"};
    assert_int_equal(parse(10, ok, &e, &why), 0);
    assert_true(e.order_id == 9 && e.user_id == 8 && e.ts == 1700000000 && e.ep == 2);
    const char *old[] = {"id", "9", "userId", "8", "voucherId", "42", "ts", "soon"};
    assert_int_equal(parse(8, old, &e, &why), 0);   /* no ep: 0; a bad ts: 0 (the id's time) */
    assert_true(e.ts == 0 && e.ep == 0);
    const char *other[] = {"id", "9", "userId", "8", "voucherId", "43"};
    assert_int_equal(parse(6, other, &e, &why), -1);
    assert_string_equal(why, "voucherId is not the stream's voucher");
    const char *nov[] = {"id", "9", "userId", "8"};
    assert_int_equal(parse(4, nov, &e, &why), -1);
    assert_string_equal(why, "missing or bad voucherId");
    const char *badep[] = {"id", "9", "userId", "8", "voucherId", "42", "ep", "-1"};
    assert_int_equal(parse(8, badep, &e, &why), -1);
    assert_string_equal(why, "bad ep");
    const char *odd[] = {"id", "9", "userId"};
    assert_int_equal(parse(3, odd, &e, &why), -1);
    assert_string_equal(why, "fields are not field/value pairs");
    assert_int_equal(sentry_parse(NULL, 42, &e, &why), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
