/* test_sentry_event.c -- the order stream's lifecycle events (sentry.h, sentry_event): the
 * form life.lua writes, malformed ones, and order entries, which are not events -- while
 * the order reader (sentry_open) never takes an event for an order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "sale/sentry.h"

typedef struct {
    redisReply arr;
    redisReply el[4];
    redisReply *ptr[4];
} fields_t;

static const redisReply *mk(fields_t *f, const char *k, const char *v)
{
    memset(f, 0, sizeof *f);
    f->arr.type = REDIS_REPLY_ARRAY;
    f->arr.elements = 2;
    f->arr.element = f->ptr;
    const char *s[2] = {k, v};
    for (size_t i = 0; i < 2; i++) {
        f->el[i].type = REDIS_REPLY_STRING;
        f->el[i].str = (char *)s[i];
        f->el[i].len = strlen(s[i]);
        f->ptr[i] = &f->el[i];
    }
    return &f->arr;
}

static void test_event(void **state)
{
    (void)state;
    fields_t f;
    sentry_ev_t ev;
    const char *why = NULL;
    assert_int_equal(sentry_event(mk(&f, "ev", "c 281479271677953 1000000001 1796155124 3"),
                                  &ev, &why), 1);
    assert_int_equal(ev.kind, 'c');
    assert_int_equal(ev.order_id, 281479271677953LL);
    assert_int_equal(ev.user_id, 1000000001LL);
    assert_int_equal(ev.ts, 1796155124LL);
    assert_int_equal(ev.ep, 3);
    const char kinds[] = "ctpr";
    for (int i = 0; i < 4; i++) {
        char v[16];
        snprintf(v, sizeof v, "%c 5 6 7 0", kinds[i]);
        assert_int_equal(sentry_event(mk(&f, "ev", v), &ev, &why), 1);
        assert_int_equal(ev.kind, kinds[i]);
        assert_int_equal(ev.ep, 0);
    }
    /* an order entry is no event; an event is no order entry */
    assert_int_equal(sentry_event(mk(&f, "os", "1796155124 0 5 6"), &ev, &why), 0);
    sentry_it_t it;
    size_t bound;
    assert_int_equal(sentry_open(mk(&f, "ev", "c 5 6 7 0"), &it, &bound, &why), -1);
    assert_string_equal(why, "no os field");
}

static void test_bad_events(void **state)
{
    (void)state;
    fields_t f;
    sentry_ev_t ev;
    const char *bad_kind[] = {"x 5 6 7 0", "c", "", "cc 5 6 7 0", "z 5 6 7 0"};
    for (size_t i = 0; i < sizeof bad_kind / sizeof *bad_kind; i++) {
        const char *why = NULL;
        assert_int_equal(sentry_event(mk(&f, "ev", bad_kind[i]), &ev, &why), -1);
        assert_string_equal(why, "bad event kind");
    }
    const char *bad[] = {"c 5 6 7", "c 0 6 7 0", "c 5 0 7 0", "c 5 6 7 0 ", "c 5 6 7 0 9",
                         "c -5 6 7 0", "c 5 6 7 x", "c 5  6 7 0", "c 99999999999999999999 6 7 0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *why = NULL;
        assert_int_equal(sentry_event(mk(&f, "ev", bad[i]), &ev, &why), -1);
        assert_string_equal(why, "bad event");
    }
    const char *why = NULL;
    mk(&f, "ev", "c 5 6 7 0");
    f.el[1].type = REDIS_REPLY_INTEGER;
    assert_int_equal(sentry_event(&f.arr, &ev, &why), -1);
    assert_int_equal(sentry_event(NULL, &ev, &why), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event),
        cmocka_unit_test(test_bad_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
