/* test_sentry.c -- reading order stream entries (sentry.h): the many-order form admit.lua
 * writes, the one-order compact and named forms of earlier versions, and what each may not
 * carry. */
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

static int take_all(const redisReply *fields, sentry_t *out, size_t *n, const char **why);

/* Opens an entry of one order and reads it into *e; the one-pass reader (take_all) must
 * say the same. */
static int parse(size_t n, const char *const *s, sentry_t *e, const char **why)
{
    fields_t f;
    sentry_it_t it;
    size_t no;
    sentry_t e2;
    size_t n2 = 1;
    const char *why2 = NULL;
    int rc2 = take_all(mk(&f, n, s), &e2, &n2, &why2);
    *why = NULL;
    if (sentry_open(mk(&f, n, s), 42, &it, &no, why) != 0) {
        assert_int_equal(rc2, -1);
        assert_string_equal(why2, *why);
        return -1;
    }
    assert_int_equal(no, 1);
    assert_int_equal(sentry_next(&it, e), 1);
    assert_int_equal(sentry_next(&it, e), 0);
    assert_int_equal(rc2, 0);
    assert_int_equal(n2, 1);
    assert_true(e2.order_id == e->order_id && e2.user_id == e->user_id && e2.ts == e->ts &&
                e2.ep == e->ep);
    return 0;
}

/* sentry_open_lazy + sentry_take over a whole entry: the orders into out (at most
 * *n), *n the count; 0, or -1 with *why, as sentry_open would say. */
static int take_all(const redisReply *fields, sentry_t *out, size_t *n, const char **why)
{
    sentry_it_t it;
    size_t bound, k = 0;
    if (sentry_open_lazy(fields, 42, &it, &bound, why) != 0)
        return -1;
    assert_true(bound <= 4096);
    sentry_t e;
    int rc;
    while ((rc = sentry_take(&it, &e, why)) == 1) {
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
    sentry_it_t it;
    sentry_t e;
    size_t no;
    const char *why = NULL;
    const char *ok[] = {"os", "1796155124 3 281479271677953 1000000001 7 8 9 10"};
    assert_int_equal(sentry_open(mk(&f, 2, ok), 42, &it, &no, &why), 0);
    assert_int_equal(no, 3);
    static const int64_t want[3][2] = {{281479271677953LL, 1000000001}, {7, 8}, {9, 10}};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(sentry_next(&it, &e), 1);
        assert_true(e.order_id == want[k][0] && e.user_id == want[k][1] &&
                    e.ts == 1796155124 && e.ep == 3);
    }
    assert_int_equal(sentry_next(&it, &e), 0);
    /* the one-pass reader gives the same orders */
    sentry_t got[4];
    size_t ngot = 4;
    assert_int_equal(take_all(mk(&f, 2, ok), got, &ngot, &why), 0);
    assert_int_equal(ngot, 3);
    for (size_t k = 0; k < 3; k++)
        assert_true(got[k].order_id == want[k][0] && got[k].user_id == want[k][1] &&
                    got[k].ts == 1796155124 && got[k].ep == 3);
    const char *one[] = {"os", "0 0 5 6"};   /* ts 0: the entry id's time */
    assert_int_equal(parse(2, one, &e, &why), 0);
    assert_true(e.order_id == 5 && e.user_id == 6 && e.ts == 0 && e.ep == 0);
    /* one bad order makes the whole entry bad: an entry is one unit */
    static const char *const bad[][2] = {
        {"os", ""}, {"os", "1 2"}, {"os", "1 2 "}, {"os", "1 2 5"}, {"os", "1 2 5 6 7"},
        {"os", "1 2 5 6 0 8"}, {"os", "1 2 5 6 7 0"}, {"os", "1 2 5 6 7 8 "},
        {"os", "1 2 5  6"}, {"os", "x 2 5 6"}, {"os", "1 -2 5 6"},
        {"os", "1 2 5 99999999999999999999"},
    };
    static const char *const reason[] = {
        "bad ts", "missing or bad id", "bad ep", "missing or bad userId",
        "missing or bad userId", "missing or bad id", "missing or bad userId",
        "missing or bad userId", "missing or bad userId", "bad ts", "bad ep",
        "missing or bad userId",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        assert_int_equal(sentry_open(mk(&f, 2, bad[i]), 42, &it, &no, &why), -1);
        assert_string_equal(why, reason[i]);
        why = NULL;
        ngot = 4;
        assert_int_equal(take_all(mk(&f, 2, bad[i]), got, &ngot, &why), -1);
        assert_string_equal(why, reason[i]);
    }
    /* more orders than a call admits: refused before anyone allocates for them */
    size_t big = 4097, len = 0;
    char *z = malloc(4 + big * 4);
    assert_non_null(z);
    len += (size_t)sprintf(z, "1 2");
    for (size_t k = 0; k < big; k++)
        len += (size_t)sprintf(z + len, " 5 6");
    const char *huge[] = {"os", z};
    assert_int_equal(sentry_open(mk(&f, 2, huge), 42, &it, &no, &why), -1);
    assert_string_equal(why, "more orders than one admission call writes");
    why = NULL;
    ngot = 0;
    assert_int_equal(take_all(mk(&f, 2, huge), got, &ngot, &why), -1);
    assert_string_equal(why, "more orders than one admission call writes");
    assert_int_equal(ngot, 4096);   /* the bound the reader allocated for: never past it */
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
    sentry_it_t it;
    size_t no;
    assert_int_equal(sentry_open(NULL, 42, &it, &no, &why), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
