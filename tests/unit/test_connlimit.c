/* test_connlimit.c -- connlimit.h: an IPv6 client is counted by its /64 (every address of
 * one /64 shares one cap), its /48 by CONNLIMIT_V6_48_FACTOR x the cap; IPv4 and
 * v4-mapped IPv6 by the address; per-address bytes stay within their cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "http/connlimit.h"

static connlimit_key_t key_of(const char *addr)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
    }
    connlimit_key_t k;
    connlimit_key(&ss, &k);
    return k;
}

static int acquire(connlimit_t *cl, const char *addr)
{
    connlimit_key_t k = key_of(addr);
    return connlimit_acquire(cl, &k, NULL);
}

static void test_ipv6_counted_by_its_64(void **state)
{
    (void)state;
    connlimit_t *cl = connlimit_new(4);
    char a[64];
    for (int i = 1; i <= 4; i++) {
        snprintf(a, sizeof a, "2001:db8:1:2::%x", i * 0x1111);
        assert_int_equal(acquire(cl, a), 0);
    }
    /* Another address of the same /64: over the cap. */
    assert_int_equal(acquire(cl, "2001:db8:1:2:ffff:ffff:ffff:ffff"), -1);
    /* Another /64: its own cap. */
    assert_int_equal(acquire(cl, "2001:db8:1:3::1"), 0);
    connlimit_key_t k = key_of("2001:db8:1:2::1");
    connlimit_release(cl, &k);
    assert_int_equal(acquire(cl, "2001:db8:1:2::abcd"), 0);
    connlimit_free(cl);
}

static void test_ipv6_48_capped(void **state)
{
    (void)state;
    connlimit_t *cl = connlimit_new(2);
    char a[64];
    int got = 0;
    for (int i = 0; i < 64; i++) {       /* 64 /64s of one /48, 2 connections each */
        for (int j = 0; j < 2; j++) {
            snprintf(a, sizeof a, "2001:db8:7:%x::%x", i, j + 1);
            got += acquire(cl, a) == 0;
        }
    }
    assert_int_equal(got, 2 * CONNLIMIT_V6_48_FACTOR);
    assert_int_equal(acquire(cl, "2001:db8:8::1"), 0);      /* another /48 */
    /* A refused /64 was not counted: releasing one of the /48's frees room for it. */
    connlimit_key_t k = key_of("2001:db8:7:0::1");
    connlimit_release(cl, &k);
    assert_int_equal(acquire(cl, "2001:db8:7:3f::1"), 0);
    assert_int_equal(acquire(cl, "2001:db8:7:3e::1"), -1);
    connlimit_free(cl);
}

static void test_ipv4_and_mapped(void **state)
{
    (void)state;
    connlimit_t *cl = connlimit_new(2);
    assert_int_equal(acquire(cl, "192.0.2.1"), 0);
    assert_int_equal(acquire(cl, "::ffff:192.0.2.1"), 0);
    assert_int_equal(acquire(cl, "192.0.2.1"), -1);
    assert_int_equal(acquire(cl, "192.0.2.2"), 0);           /* IPv4: each address */
    connlimit_free(cl);
}

static void test_bytes_per_address(void **state)
{
    (void)state;
    connlimit_t *cl = connlimit_new(8);
    connlimit_key_t k = key_of("2001:db8::1"), k2 = key_of("2001:db8::2");
    connlimit_entry_t *e = NULL, *e2 = NULL;
    assert_int_equal(connlimit_acquire(cl, &k, &e), 0);
    assert_int_equal(connlimit_acquire(cl, &k2, &e2), 0);
    assert_ptr_equal(e, e2);                                 /* one /64, one budget */
    assert_int_equal(connlimit_charge(e, 600, 1000), 0);
    assert_int_equal(connlimit_charge(e2, 500, 1000), -1);
    assert_int_equal(connlimit_charge(e2, 400, 1000), 0);
    connlimit_uncharge(e, 600);
    assert_int_equal(connlimit_charge(e2, 600, 1000), 0);
    assert_int_equal(connlimit_charge(NULL, 5000, 1000), 0); /* not counted: never over */
    connlimit_uncharge(e2, 1000);
    connlimit_release(cl, &k);
    connlimit_release(cl, &k2);
    connlimit_free(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv6_counted_by_its_64),
        cmocka_unit_test(test_ipv6_48_capped),
        cmocka_unit_test(test_ipv4_and_mapped),
        cmocka_unit_test(test_bytes_per_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
