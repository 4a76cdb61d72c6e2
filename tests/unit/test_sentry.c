/* test_sentry.c -- reading order stream entries (sentry.h): the form admit.lua writes, what
 * it may not carry, and entries without it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "sale/sentry.h"

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

/* sentry_open + sentry_next over a whole entry: the orders into out (at most *n), *n the
 * count; 0, or -1 with *why. */
static int take_all(const redisReply *fields, sentry_t *out, size_t *n, const char **why)
{
    sentry_it_t it;
    size_t bound, k = 0;
    if (sentry_open(fields, &it, &bound, why) != 0)
        return -1;
    assert_true(bound >= 1 && bound <= 4096);
    sentry_t e;
    int rc;
    while ((rc = sentry_next(&it, &e, why)) == 1) {
        assert_true(k < bound);
        if (k < *n)
            out[k] = e;
        k++;
    }
    *n = k;
    return rc;
}

static void test_many(void **state)
{
    (void)state;
    fields_t f;
    const char *why = NULL;
    const char *ok[] = {"os", "1796155124 3 281479271677953 1000000001 7 8 9 10"};
    static const int64_t want[3][2] = {{281479271677953LL, 1000000001}, {7, 8}, {9, 10}};
    sentry_t got[4];
    size_t ngot = 4;
    assert_int_equal(take_all(mk(&f, 2, ok), got, &ngot, &why), 0);
    assert_int_equal(ngot, 3);
    for (size_t k = 0; k < 3; k++)
        assert_true(got[k].order_id == want[k][0] && got[k].user_id == want[k][1] &&
                    got[k].ts == 1796155124 && got[k].ep == 3);
    const char *one[] = {"os", "0 0 5 6"};   /* ts 0: the entry id's time */
    ngot = 4;
    assert_int_equal(take_all(mk(&f, 2, one), got, &ngot, &why), 0);
    assert_int_equal(ngot, 1);
    assert_true(got[0].order_id == 5 && got[0].user_id == 6 && got[0].ts == 0 && got[0].ep == 0);
    /* other fields beside os are not read */
    const char *more[] = {"x", "y", "os", "1 2 5 6"};
    ngot = 4;
    assert_int_equal(take_all(mk(&f, 4, more), got, &ngot, &why), 0);
    assert_true(ngot == 1 && got[0].order_id == 5 && got[0].ts == 1 && got[0].ep == 2);
    /* one bad order makes the whole entry bad: an entry is one unit */
    static const char *const bad[][2] = {
        {"os", ""}, {"os", "1 2"}, {"os", "1 2 "}, {"os", "1 2 5"}, {"os", "1 2 5 6 7"},
        {"os", "1 2 5 6 0 8"}, {"os", "1 2 5 6 7 0"}, {"os", "1 2 5 6 7 8 "},
        {"os", "1 2 5  6"}, {"os", "x 2 5 6"}, {"os", "1 -2 5 6"},
        {"os", "1 2 5 99999999999999999999"}, {"os", " 1 2 5 6"},
    };
    static const char *const reason[] = {
        "bad ts", "missing or bad id", "bad ep", "missing or bad userId",
        "missing or bad userId", "missing or bad id", "missing or bad userId",
        "missing or bad userId", "missing or bad userId", "bad ts", "bad ep",
        "missing or bad userId", "bad ts",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        ngot = 4;
        assert_int_equal(take_all(mk(&f, 2, bad[i]), got, &ngot, &why), -1);
        assert_string_equal(why, reason[i]);
    }
    /* more orders than a call admits: refused past the bound the reader allocated for */
    size_t big = 4097, len = 0;
    char *z = malloc(4 + big * 4);
    assert_non_null(z);
    len += (size_t)sprintf(z, "1 2");
    for (size_t k = 0; k < big; k++)
        len += (size_t)sprintf(z + len, " 5 6");
    const char *huge[] = {"os", z};
    why = NULL;
    ngot = 0;
    assert_int_equal(take_all(mk(&f, 2, huge), got, &ngot, &why), -1);
    assert_string_equal(why, "more orders than one admission call writes");
    assert_int_equal(ngot, 4096);   /* the bound: never past it */
    /* exactly as many as a call may admit: read whole */
    len = (size_t)sprintf(z, "1 2");
    for (size_t k = 0; k < 4096; k++)
        len += (size_t)sprintf(z + len, " 5 6");
    ngot = 0;
    assert_int_equal(take_all(mk(&f, 2, huge), got, &ngot, &why), 0);
    assert_int_equal(ngot, 4096);
    free(z);
}

/* Numbers of every length up to 20 digits, with a bad byte anywhere: what strtoull and
 * the limits say (next_num reads eight digits at a time where it can). */
static void test_numbers(void **state)
{
    (void)state;
    fields_t f;
    sentry_t got[2];
    size_t ngot;
    const char *why;
    char num[32], val[64];
    const char *fv[] = {"os", val};
    srand(7);
    for (int len = 1; len <= 20; len++) {
        for (int round = 0; round < 50; round++) {
            for (int i = 0; i < len; i++)
                num[i] = (char)('0' + (i == 0 ? 1 + rand() % 9 : rand() % 10));
            num[len] = '\0';
            if (round == 1)
                memset(num, '9', (size_t)len);
            int bad = round >= 40 ? rand() % len : -1;   /* a non-digit at bad */
            if (bad >= 0)
                num[bad] = "x/:a -"[round % 6];
            snprintf(val, sizeof val, "1 2 %s 77", num);
            ngot = 2;
            why = NULL;
            int rc = take_all(mk(&f, 2, fv), got, &ngot, &why);
            unsigned long long want = strtoull(num, NULL, 10);
            int ok = bad < 0 && len <= 19 && want <= INT64_MAX;
            if (ok) {
                assert_int_equal(rc, 0);
                assert_int_equal(ngot, 1);
                assert_true((unsigned long long)got[0].order_id == want);
                assert_int_equal(got[0].user_id, 77);
            } else {
                assert_int_equal(rc, -1);
            }
            snprintf(val, sizeof val, "1 2 77 %s", num);
            ngot = 2;
            rc = take_all(mk(&f, 2, fv), got, &ngot, &why);
            if (ok) {
                assert_int_equal(rc, 0);
                assert_true((unsigned long long)got[0].user_id == want);
            } else {
                assert_int_equal(rc, -1);
            }
        }
    }
}

/* Only the os form is an entry: the one-order forms ("o", or named id/userId/voucherId)
 * and anything not field/value strings are bad entries (the writer's dead letters). */
static void test_fields(void **state)
{
    (void)state;
    fields_t f;
    sentry_t got[2];
    size_t ngot = 2;
    const char *why = NULL;
    const char *compact[] = {"o", "281479271677953 1000000001 1796155124 3"};
    assert_int_equal(take_all(mk(&f, 2, compact), got, &ngot, &why), -1);
    assert_string_equal(why, "no os field");
    const char *named[] = {"id", "9", "userId", "8", "voucherId", "42", "ts", "1700000000"};
    assert_int_equal(take_all(mk(&f, 8, named), got, &ngot, &why), -1);
    assert_string_equal(why, "no os field");
    const char *none[] = {"x", "y"};
    assert_int_equal(take_all(mk(&f, 0, none), got, &ngot, &why), -1);
    assert_string_equal(why, "no os field");
    const char *odd[] = {"os", "1 2 5 6", "x"};
    assert_int_equal(take_all(mk(&f, 3, odd), got, &ngot, &why), -1);
    assert_string_equal(why, "fields are not field/value pairs");
    const char *num[] = {"os", "1 2 5 6"};
    mk(&f, 2, num);
    f.el[1].type = REDIS_REPLY_INTEGER;
    assert_int_equal(take_all(&f.arr, got, &ngot, &why), -1);
    assert_string_equal(why, "a field or value is not a string");
    sentry_it_t it;
    size_t bound;
    why = NULL;
    assert_int_equal(sentry_open(NULL, &it, &bound, &why), -1);
    assert_string_equal(why, "fields are not field/value pairs");
    redisReply nil;
    memset(&nil, 0, sizeof nil);
    nil.type = REDIS_REPLY_NIL;
    assert_int_equal(sentry_open(&nil, &it, &bound, &why), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
