/* test_url.c -- url.h: Redis and MariaDB URL forms and rejects, percent-decoding, redaction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/url.h"

static url_redis_t parse_ok(const char *url)
{
    url_redis_t a;
    memset(&a, 0x5a, sizeof(a));
    if (url_parse_redis(url, &a) != 0)
        fail_msg("rejected: %s", url);
    return a;
}

static void test_tcp_forms(void **state)
{
    (void)state;
    url_redis_t a = parse_ok("redis://127.0.0.1:6379");
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
    url_redis_t a = parse_ok("redis://:secret@10.0.0.5:6380/1");
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
    url_redis_t a = parse_ok("unix:/var/run/redis/redis.sock");
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
        url_redis_t a;
        memset(&a, 0x5a, sizeof(a));
        if (url_parse_redis(bad[i], &a) != -1)
            fail_msg("accepted: \"%s\"", bad[i]);
        /* a rejected URL leaves the output alone */
        for (size_t j = 0; j < sizeof(a); j++)
            if (((unsigned char *)&a)[j] != 0x5a)
                fail_msg("\"%s\" wrote into out", bad[i]);
    }
    url_redis_t a;
    assert_int_equal(url_parse_redis(NULL, &a), -1);
    assert_int_equal(url_parse_redis("redis://h", NULL), -1);
}

static void test_long_fields(void **state)
{
    (void)state;
    char url[2048];
    char big[600];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    url_redis_t a;
    snprintf(url, sizeof(url), "unix:/%s", big); /* path > 511 */
    assert_int_equal(url_parse_redis(url, &a), -1);
    snprintf(url, sizeof(url), "redis://%.300s:1", big); /* host > 255 */
    assert_int_equal(url_parse_redis(url, &a), -1);
    snprintf(url, sizeof(url), "redis://:%.300s@h", big); /* password > 255 */
    assert_int_equal(url_parse_redis(url, &a), -1);
    snprintf(url, sizeof(url), "redis://%.255s:1", big); /* host of 255 fits */
    assert_int_equal(url_parse_redis(url, &a), 0);
    assert_int_equal(strlen(a.host), 255);
}

static void test_mysql(void **state)
{
    (void)state;
    url_mysql_t u;
    char err[256];
    assert_int_equal(
        url_parse_mysql("mysql://root:p%40ss@db.local:3307/seckill", &u, err, sizeof err), 0);
    assert_string_equal(u.user, "root");
    assert_string_equal(u.pass, "p@ss");
    assert_string_equal(u.host, "db.local");
    assert_int_equal(u.port, 3307);
    assert_string_equal(u.dbname, "seckill");
    /* the userinfo ends at the last '@': raw '@', ':' and '/' in a password */
    assert_int_equal(
        url_parse_mysql("mysql://u:a@b:c/d@[::1]/x?socket=/run/my%2esock", &u, err, sizeof err), 0);
    assert_string_equal(u.pass, "a@b:c/d");
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 3306);
    assert_string_equal(u.socket, "/run/my.sock");
    assert_int_equal(url_parse_mysql("mysql://u@/x", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "localhost");
    assert_string_equal(u.pass, "");
    static const char *const bad[] = {
        "mysql:/x",          "mysql://h/",    "mysql://h",         "mysql://h:0/x",
        "mysql://h:x/x",     "mysql://h/a-b", "mysql://h/x?foo=1", "mysql://h/x?socket=",
        "mysql://u:%zz@h/x", "mysql://h/x?",  "mysql://[::1/x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (url_parse_mysql(bad[i], &u, err, sizeof err) != -1)
            fail_msg("accepted: \"%s\"", bad[i]);
        assert_true(err[0] != '\0');
    }
    assert_int_equal(url_parse_mysql("mysql://u:secret@h/x?socket=", &u, err, sizeof err), -1);
    assert_null(strstr(err, "secret"));
}

static void test_sqlite(void **state)
{
    (void)state;
    assert_string_equal(url_sqlite_path("sqlite:var/db.sqlite"), "var/db.sqlite");
    assert_string_equal(url_sqlite_path("sqlite:///abs/db"), "/abs/db");
    assert_string_equal(url_sqlite_path("sqlite::memory:"), ":memory:");
    assert_null(url_sqlite_path("sqlite:"));
    assert_null(url_sqlite_path("sqlite://"));
    assert_null(url_sqlite_path(NULL));
}

static void test_pct(void **state)
{
    (void)state;
    char out[16];
    assert_int_equal(url_pct_decode("a%41+b", 6, out, sizeof out, URL_PCT_STRICT), 4);
    assert_string_equal(out, "aA+b");
    assert_int_equal(url_pct_decode("a%41+b", 6, out, sizeof out, URL_PCT_FORM), 4);
    assert_string_equal(out, "aA b");
    assert_int_equal(url_pct_decode("5%", 2, out, sizeof out, URL_PCT_STRICT), -1);
    assert_int_equal(url_pct_decode("5%", 2, out, sizeof out, URL_PCT_FORM), 2);
    assert_string_equal(out, "5%");
    assert_int_equal(url_pct_decode("%4g", 3, out, sizeof out, URL_PCT_FORM), 3);
    assert_int_equal(url_pct_decode("1%002", 5, out, sizeof out, URL_PCT_FORM), -1);
    assert_int_equal(url_pct_decode("1%002", 5, out, sizeof out, URL_PCT_STRICT), -1);
    assert_int_equal(url_pct_decode("0123456789abcdef", 16, out, sizeof out, URL_PCT_STRICT), -1);
    assert_int_equal(url_pct_decode("", 0, out, sizeof out, URL_PCT_STRICT), 0);
    assert_string_equal(out, "");
}

/* Whatever the parser takes as the password, redaction hides, and nothing else. */
static void test_cluster_forms(void **state)
{
    (void)state;
    url_redis_t a = parse_ok("redis+cluster://127.0.0.1:7000,127.0.0.1:7001,10.0.0.3");
    assert_int_equal(a.cluster, 1);
    assert_int_equal(a.nseeds, 3);
    assert_string_equal(a.seeds[0].host, "127.0.0.1");
    assert_int_equal(a.seeds[0].port, 7000);
    assert_int_equal(a.seeds[1].port, 7001);
    assert_string_equal(a.seeds[2].host, "10.0.0.3");
    assert_int_equal(a.seeds[2].port, 6379);
    assert_string_equal(a.host, "127.0.0.1");
    assert_int_equal(a.port, 7000);
    assert_int_equal(a.db, 0);
    assert_string_equal(a.password, "");
    a = parse_ok("redis+cluster://:p%40ss@[::1]:7000");
    assert_int_equal(a.nseeds, 1);
    assert_string_equal(a.seeds[0].host, "::1");
    assert_string_equal(a.password, "p@ss");
    a = parse_ok("redis+cluster://h:1/0");
    assert_int_equal(a.seeds[0].port, 1);
    a = parse_ok("redis://h:1"); /* plain URLs are not cluster URLs */
    assert_int_equal(a.cluster, 0);
    static const char *const bad[] = {
        "redis+cluster://",
        "redis+cluster://h:1,",
        "redis+cluster://,h:1",
        "redis+cluster://h:1,,h:2",
        "redis+cluster://h:1/2",
        "redis+cluster://h:0",
        "redis+cluster://h:1,h:x",
        "redis+cluster://user@h:1",
        "redis+cluster://h 1",
        "redis+cluster://h:1?db=1",
        "redis+cluster:h:1",
        "redis+cluster://h:1,h:2,h:3,h:4,h:5,h:6,h:7,h:8,h:9,h:10,h:11,h:12,h:13,h:14,h:15,"
        "h:16,h:17",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        url_redis_t b;
        if (url_parse_redis(bad[i], &b) == 0)
            fail_msg("accepted: %s", bad[i]);
    }
}

static void test_redact(void **state)
{
    (void)state;
    static const struct {
        const char *url, *shown;
    } cases[] = {
        {"redis://:s3cret@h:1/2", "redis://:***@h:1/2"},
        {"redis://user:p@ss:w/rd?x@h", "redis://user:***@h"},
        {"redis://h:6379", "redis://h:6379"},
        {"unix:/run/r.sock?db=2&password=pw%26x", "unix:/run/r.sock?db=2&password=***"},
        {"unix:/run/r.sock?password=pw&db=1", "unix:/run/r.sock?password=***&db=1"},
        {"mysql://root:pw@h:3306/db", "mysql://root:***@h:3306/db"},
        {"mysql://root@h/db", "mysql://root@h/db"},
        {"sqlite:var/x.db", "sqlite:var/x.db"},
        {"REDIS://:pw@h", "REDIS://:***@h"}, /* does not parse; still hidden */
        {"redis://:pw@h:bad", "redis://:***@h:bad"},
        {"unix:/x?password=pw&", "unix:/x?password=***&"},
        {"no-scheme@host", "***@host"},
        {"redis+cluster://:pw@h:1,h:2", "redis+cluster://:***@h:1,h:2"},
        {"", ""},
    };
    char out[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        url_redact(cases[i].url, out, sizeof out);
        if (strcmp(out, cases[i].shown) != 0)
            fail_msg("%s -> %s, want %s", cases[i].url, out, cases[i].shown);
    }
    url_redis_t a;
    assert_int_equal(url_parse_redis("redis://user:p@ss:w/rd?x@h", &a), 0);
    assert_string_equal(a.password, "p@ss:w/rd?x");
    assert_string_equal(url_redact(NULL, out, sizeof out), "");
    char tiny[8];
    assert_string_equal(url_redact("redis://:secretpw@host", tiny, sizeof tiny), "redis:/");
}

/* --*-password-file: the password goes where the parsers find it, encoded, and
 * round-trips through them byte for byte. */
static void test_with_password(void **state)
{
    (void)state;
    char out[512], err[256];
    url_redis_t a;
    const char *pw = "p@ss:w/rd?&%=";
    assert_int_equal(
        url_with_password("redis://10.0.0.1:6380/2", pw, out, sizeof out, err, sizeof err), 0);
    assert_int_equal(url_parse_redis(out, &a), 0);
    assert_string_equal(a.password, pw);
    assert_string_equal(a.host, "10.0.0.1");
    assert_int_equal(a.port, 6380);
    assert_int_equal(a.db, 2);
    assert_int_equal(
        url_with_password("unix:/run/r.sock?db=3", pw, out, sizeof out, err, sizeof err), 0);
    assert_int_equal(url_parse_redis(out, &a), 0);
    assert_string_equal(a.password, pw);
    assert_int_equal(a.db, 3);
    assert_int_equal(
        url_with_password("redis+cluster://h1:7000,h2:7001", "x", out, sizeof out, err, sizeof err),
        0);
    assert_int_equal(url_parse_redis(out, &a), 0);
    assert_string_equal(a.password, "x");
    assert_int_equal(a.nseeds, 2);
    url_mysql_t m;
    assert_int_equal(
        url_with_password("mysql://app@db:3307/shop", pw, out, sizeof out, err, sizeof err), 0);
    assert_int_equal(url_parse_mysql(out, &m, err, sizeof err), 0);
    assert_string_equal(m.user, "app");
    assert_string_equal(m.pass, pw);
    assert_string_equal(m.dbname, "shop");
    /* a password in two places, none possible, no room */
    assert_int_equal(url_with_password("redis://:a@h", "b", out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "already"));
    assert_int_equal(url_with_password("unix:/s?password=a", "b", out, sizeof out, err, sizeof err),
                     -1);
    assert_int_equal(url_with_password("sqlite:/x.db", "b", out, sizeof out, err, sizeof err), -1);
    assert_int_equal(url_with_password("redis://h", "b", out, 12, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_forms),     cmocka_unit_test(test_passwords),
        cmocka_unit_test(test_unix_forms),    cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_long_fields),   cmocka_unit_test(test_mysql),
        cmocka_unit_test(test_sqlite),        cmocka_unit_test(test_pct),
        cmocka_unit_test(test_redact),        cmocka_unit_test(test_with_password),
        cmocka_unit_test(test_cluster_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
