/* test_vcache.c -- the per-voucher expiring cache (vcache.h) the sold-out verdicts and
 * the stock-bucket routes share: hits until the expiry and not after, an update in place,
 * a full set giving up the entry that expires first, drop, payloads that keep their
 * bytes and alignment whatever else the set holds, an expired entry still found by
 * vcache_find, and a payload zeroed when its slot goes to another voucher. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sale/vcache.h"

static void test_hit_until_expiry(void **state)
{
    (void)state;
    vcache_t *c = vcache_new(64, sizeof(int));
    assert_null(vcache_get(c, 42, 0));
    *(int *)vcache_put(c, 42, 1000) = 7;
    int *v = vcache_get(c, 42, 999);
    assert_non_null(v);
    assert_int_equal(*v, 7);
    assert_null(vcache_get(c, 42, 1000));           /* expired at its until */
    assert_null(vcache_get(c, 43, 0));              /* another voucher */
    *(int *)vcache_put(c, 42, 2000) = 9;            /* the same entry, renewed */
    assert_int_equal(*(int *)vcache_get(c, 42, 1500), 9);
    vcache_drop(c, 42);
    assert_null(vcache_get(c, 42, 0));
    vcache_drop(c, 42);                             /* dropping nothing is fine */
    vcache_free(c);
    vcache_free(NULL);
}

/* With as many slots as one set, every voucher shares it: the fifth put must replace the
 * entry that expires first and leave the other three. */
static void test_full_set_gives_up_first_expiring(void **state)
{
    (void)state;
    vcache_t *c = vcache_new(VCACHE_WAYS, sizeof(int64_t));
    uint64_t until[VCACHE_WAYS] = {500, 100, 900, 300};
    for (unsigned i = 0; i < VCACHE_WAYS; i++)
        *(int64_t *)vcache_put(c, 10 + i, until[i]) = 1000 + i;
    *(int64_t *)vcache_put(c, 99, 800) = 99;
    assert_null(vcache_get(c, 11, 0));              /* until 100: the one given up */
    assert_int_equal(*(int64_t *)vcache_get(c, 10, 0), 1000);
    assert_int_equal(*(int64_t *)vcache_get(c, 12, 0), 1002);
    assert_int_equal(*(int64_t *)vcache_get(c, 13, 0), 1003);
    assert_int_equal(*(int64_t *)vcache_get(c, 99, 0), 99);
    vcache_free(c);
}

/* Payloads of an odd size keep their bytes, and are aligned for any scalar. */
static void test_payload_bytes_and_alignment(void **state)
{
    (void)state;
    enum { N = 500, SIZE = 37 };
    vcache_t *c = vcache_new(1024, SIZE);
    for (int64_t id = 1; id <= N; id++) {
        unsigned char *p = vcache_put(c, id, 10);
        assert_int_equal((uintptr_t)p % 16, 0);
        memset(p, (int)(id & 0xff), SIZE);
    }
    int found = 0;
    for (int64_t id = 1; id <= N; id++) {
        const unsigned char *p = vcache_get(c, id, 0);
        if (p == NULL)
            continue;                               /* replaced in a crowded set */
        found++;
        for (int i = 0; i < SIZE; i++)
            assert_int_equal(p[i], (unsigned char)(id & 0xff));
    }
    assert_true(found > N / 2);
    vcache_free(c);
}

/* What outlives an expiry: found after it, kept by a put for the same voucher, zeroed
 * when the slot goes to another voucher. */
static void test_find_after_expiry_and_zeroed_takeover(void **state)
{
    (void)state;
    vcache_t *c = vcache_new(VCACHE_WAYS, sizeof(int64_t));
    assert_null(vcache_find(c, 7));
    *(int64_t *)vcache_put(c, 7, 100) = 70;
    assert_null(vcache_get(c, 7, 100));
    assert_int_equal(*(int64_t *)vcache_find(c, 7), 70);    /* expired, still there */
    assert_int_equal(*(int64_t *)vcache_put(c, 7, 200), 70); /* renewed: payload as it was */
    for (unsigned i = 0; i < VCACHE_WAYS - 1; i++)
        *(int64_t *)vcache_put(c, 20 + i, 1000) = -1;
    int64_t *p = vcache_put(c, 99, 1000);                   /* takes 7's slot (until 200) */
    assert_null(vcache_find(c, 7));
    assert_int_equal(*p, 0);
    vcache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_until_expiry),
        cmocka_unit_test(test_full_set_gives_up_first_expiring),
        cmocka_unit_test(test_payload_bytes_and_alignment),
        cmocka_unit_test(test_find_after_expiry_and_zeroed_takeover),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
