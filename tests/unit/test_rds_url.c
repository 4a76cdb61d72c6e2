/* test_rds_url.c -- rds_parse_url: the accepted Redis URL forms and the rejects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "rds.h"

static rds_addr_t parse_ok(const char *url)
{
    rds_addr_t a;
    memset(&a, 0x5a, sizeof(a));
    if (rds_parse_url(url, &a) != 0)
        fail_msg("rejected: %s", url);
    return a;
}

static void test_tcp_forms(void **state)
{
    (void)state;
    rds_addr_t a = parse_ok("redis://127.0.0.1:6379");
    assert_string_equal(a.host, "127.0.0.1");
    assert_int_equal(a.port, 6379);
    assert_int_equal(a.db, 0);
    assert_string_equal(a.password, "");
    assert_string_equal(a.unix_path, "");

    a = parse_ok("redis://redis.internal");
    assert_string_equal(a.host, "redis.internal");
    assert_int_equal(a.port, 6379);

    a = parse_ok("redis://10.0.0.5:6380/3");
    assert_string_equal(a.host, "10.0.0.5");
    assert_int_equal(a.port, 6380);
    assert_int_equal(a.db, 3);

    a = parse_ok("redis://host/");
    assert_string_equal(a.host, "host");
    assert_int_equal(a.db, 0);

    a = parse_ok("redis://[::1]:7000/2");
    assert_string_equal(a.host, "::1");
    assert_int_equal(a.port, 7000);
    assert_int_equal(a.db, 2);

    /* everything missing: the defaults */
    a = parse_ok("redis://");
    assert_string_equal(a.host, "127.0.0.1");
    assert_int_equal(a.port, 6379);
    assert_int_equal(a.db, 0);
}

static void test_passwords(void **state)
{
    (void)state;
    rds_addr_t a = parse_ok("redis://:secret@10.0.0.5:6380/1");
    assert_string_equal(a.password, "secret");
    assert_string_equal(a.host, "10.0.0.5");
    assert_int_equal(a.port, 6380);
    assert_int_equal(a.db, 1);

    /* a user name is accepted and ignored (AUTH <password>, the default user) */
    a = parse_ok("redis://alice:pw@host:1");
    assert_string_equal(a.password, "pw");
    assert_string_equal(a.host, "host");
    assert_int_equal(a.port, 1);

    /* percent escapes, and raw '@' ':' '/' (the last '@' ends the password) */
    a = parse_ok("redis://:pa%40ss%2F@host");
    assert_string_equal(a.password, "pa@ss/");
    a = parse_ok("redis://:p@ss:w/rd@host:6390/4");
    assert_string_equal(a.password, "p@ss:w/rd");
    assert_string_equal(a.host, "host");
    assert_int_equal(a.port, 6390);
    assert_int_equal(a.db, 4);
}

static void test_unix_forms(void **state)
{
    (void)state;
    rds_addr_t a = parse_ok("unix:/var/run/redis/redis.sock");
    assert_string_equal(a.unix_path, "/var/run/redis/redis.sock");
    assert_int_equal(a.db, 0);
    assert_string_equal(a.password, "");

    a = parse_ok("unix:/tmp/r.sock?db=5");
    assert_string_equal(a.unix_path, "/tmp/r.sock");
    assert_int_equal(a.db, 5);

    a = parse_ok("unix:///tmp/r.sock");
    assert_string_equal(a.unix_path, "/tmp/r.sock");

    a = parse_ok("unix:var/redis.sock?db=2&password=s%26cret");
    assert_string_equal(a.unix_path, "var/redis.sock");
    assert_int_equal(a.db, 2);
    assert_string_equal(a.password, "s&cret");
}

static void test_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "127.0.0.1:6379",
        "localhost",
        "http://host:6379",
        "rediss://host:6379",
        "REDIS://host",
        "redis:/host",
        "redis://host:",
        "redis://host:0",
        "redis://host:65536",
        "redis://host:-1",
        "redis://host:99999999999",
        "redis://host:abc",
        "redis://host:6379/x",
        "redis://host:6379/1/2",
        "redis://host:6379/-1",
        "redis://host:6379?db=1",
        "redis://ho st",
        "redis://host name:1",
        "redis://user@host",
        "redis://:@host",
        "redis://:pw%zz@host",
        "redis://:pw%4@host",
        "redis://:pw%00@host",
        "redis://[::1",
        "redis://[]:1",
        "redis://[zz]:1",
        "unix:",
        "unix:?db=1",
        "unix:/x?",
        "unix:/x?db=",
        "unix:/x?db=a",
        "unix:/x?db=1&",
        "unix:/x?foo=1",
        "unix:/x?db",
        "unix:/x?password=",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rds_addr_t a;
        memset(&a, 0x5a, sizeof(a));
        if (rds_parse_url(bad[i], &a) != -1)
            fail_msg("accepted: \"%s\"", bad[i]);
        /* a rejected URL leaves the output alone */
        for (size_t j = 0; j < sizeof(a); j++)
            if (((unsigned char *)&a)[j] != 0x5a)
                fail_msg("\"%s\" wrote into out", bad[i]);
    }
    rds_addr_t a;
    assert_int_equal(rds_parse_url(NULL, &a), -1);
    assert_int_equal(rds_parse_url("redis://h", NULL), -1);
}

static void test_long_fields(void **state)
{
    (void)state;
    char url[2048];
    char big[600];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    rds_addr_t a;
    snprintf(url, sizeof(url), "unix:/%s", big);         /* path > 511 */
    assert_int_equal(rds_parse_url(url, &a), -1);
    snprintf(url, sizeof(url), "redis://%.300s:1", big); /* host > 255 */
    assert_int_equal(rds_parse_url(url, &a), -1);
    snprintf(url, sizeof(url), "redis://:%.300s@h", big); /* password > 255 */
    assert_int_equal(rds_parse_url(url, &a), -1);
    snprintf(url, sizeof(url), "redis://%.255s:1", big);  /* host of 255 fits */
    assert_int_equal(rds_parse_url(url, &a), 0);
    assert_int_equal(strlen(a.host), 255);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_forms),
        cmocka_unit_test(test_passwords),
        cmocka_unit_test(test_unix_forms),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_long_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
