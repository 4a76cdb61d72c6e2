/* test_sentry_event.c -- the order stream's lifecycle events (sentry.h: sentry_event, and
 * sentry_evopen / sentry_evnext for both forms, ev and an expire call's evs): the forms
 * life.lua writes, malformed ones, and order entries, which are not events -- while the
 * order reader (sentry_open) never takes an event for an order. */
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

/* Every event of an entry through sentry_evopen / sentry_evnext into out (at most max):
 * how many, or -1 with *why when the entry is bad. */
static int read_events(const redisReply *f, sentry_ev_t *out, size_t max, const char **why)
{
    sentry_evit_t it;
    size_t bound, n = 0;
    int rc = sentry_evopen(f, &it, &bound, why);
    if (rc != 1)
        return rc == 0 ? 0 : -1;
    assert_true(bound >= 1);
    sentry_ev_t ev;
    while ((rc = sentry_evnext(&it, &ev, why)) == 1) {
        assert_true(n < bound);
        assert_true(n < max);
        out[n++] = ev;
    }
    return rc < 0 ? -1 : (int)n;
}

/* An expire call's entry: every order it timed out, one ts and ep. */
static void test_evs(void **state)
{
    (void)state;
    fields_t f;
    sentry_ev_t ev[8];
    const char *why = NULL;
    assert_int_equal(read_events(mk(&f, "evs", "t 1796155124 3 281479271677953 1000000001 "
                                                "7 8 9 10"), ev, 8, &why), 3);
    const int64_t oid[] = {281479271677953LL, 7, 9}, uid[] = {1000000001LL, 8, 10};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ev[i].kind, 't');
        assert_int_equal(ev[i].order_id, oid[i]);
        assert_int_equal(ev[i].user_id, uid[i]);
        assert_int_equal(ev[i].ts, 1796155124LL);
        assert_int_equal(ev[i].ep, 3);
    }
    assert_int_equal(read_events(mk(&f, "evs", "c 7 0 5 6"), ev, 8, &why), 1);
    assert_int_equal(ev[0].kind, 'c');
    assert_int_equal(ev[0].ep, 0);
    /* an old entry of one event reads the same way: one event */
    assert_int_equal(read_events(mk(&f, "ev", "t 5 6 7 2"), ev, 8, &why), 1);
    assert_int_equal(ev[0].kind, 't');
    assert_int_equal(ev[0].order_id, 5);
    assert_int_equal(ev[0].user_id, 6);
    assert_int_equal(ev[0].ts, 7);
    assert_int_equal(ev[0].ep, 2);
    /* neither field: an order entry, no event */
    assert_int_equal(read_events(mk(&f, "os", "1796155124 0 5 6"), ev, 8, &why), 0);
    assert_int_equal(read_events(NULL, ev, 8, &why), 0);
    /* the order reader refuses an evs entry; sentry_event (ev alone) does not see one */
    sentry_it_t it;
    size_t bound;
    assert_int_equal(sentry_open(mk(&f, "evs", "t 7 0 5 6"), &it, &bound, &why), -1);
    assert_string_equal(why, "no os field");
    assert_int_equal(sentry_event(mk(&f, "evs", "t 7 0 5 6"), &ev[0], &why), 0);
}

static void test_bad_evs(void **state)
{
    (void)state;
    fields_t f;
    sentry_ev_t ev[8];
    const char *bad_kind[] = {"", "t", "p 7 0 5 6", "r 7 0 5 6", "x 7 0 5 6", "tt 7 0 5 6",
                              " t 7 0 5 6"};
    for (size_t i = 0; i < sizeof bad_kind / sizeof *bad_kind; i++) {
        const char *why = NULL;
        assert_int_equal(read_events(mk(&f, "evs", bad_kind[i]), ev, 8, &why), -1);
        assert_string_equal(why, "bad event kind");
    }
    /* ts, ep, then whole positive pairs: every number checked */
    const char *bad[] = {"t ", "t 7", "t 7 0", "t 7 0 ", "t 0 0 5 6", "t x 0 5 6",
                         "t 7 -1 5 6", "t 7 0 5", "t 7 0 5 6 8", "t 7 0 0 6", "t 7 0 5 0",
                         "t 7 0 5 6 ", "t 7 0 5  6", "t 7 0 5 6 8 x", "t 7 0 -5 6",
                         "t 7 0 5 99999999999999999999", "t 7 0 5 6\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *why = NULL;
        assert_int_equal(read_events(mk(&f, "evs", bad[i]), ev, 8, &why), -1);
        assert_non_null(why);
    }
    /* not a string */
    const char *why = NULL;
    mk(&f, "evs", "t 7 0 5 6");
    f.el[1].type = REDIS_REPLY_INTEGER;
    assert_int_equal(read_events(&f.arr, ev, 8, &why), -1);
    /* both forms in one entry */
    static const char *four[] = {"ev", "t 5 6 7 0", "evs", "t 7 0 5 6"};
    redisReply el[4], *ptr[4], arr = {.type = REDIS_REPLY_ARRAY, .elements = 4, .element = ptr};
    for (int i = 0; i < 4; i++) {
        el[i] = (redisReply){.type = REDIS_REPLY_STRING, .str = (char *)four[i],
                             .len = strlen(four[i])};
        ptr[i] = &el[i];
    }
    assert_int_equal(read_events(&arr, ev, 8, &why), -1);
    assert_string_equal(why, "both ev and evs fields");
}

/* More pairs than any call writes: refused before a reader makes room for them. */
static void test_evs_bound(void **state)
{
    (void)state;
    size_t n = 5000, len = 0;
    char *v = malloc(16 + 4 * n);
    assert_non_null(v);
    len += (size_t)sprintf(v, "t 7 0");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(v + len, " 1 2");
    fields_t f;
    sentry_evit_t it;
    size_t bound, got = 0;
    const char *why = NULL;
    assert_int_equal(sentry_evopen(mk(&f, "evs", v), &it, &bound, &why), 1);
    assert_int_equal(bound, 4096);
    sentry_ev_t ev;
    int rc;
    while ((rc = sentry_evnext(&it, &ev, &why)) == 1)
        got++;
    assert_int_equal(rc, -1);
    assert_int_equal(got, 4096);
    assert_string_equal(why, "more events than one expire call writes");
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event),
        cmocka_unit_test(test_bad_events),
        cmocka_unit_test(test_evs),
        cmocka_unit_test(test_bad_evs),
        cmocka_unit_test(test_evs_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
