/* test_sb.c -- unit tests for sb.c (buffer, JSON escaping, integers, date-times) and for
 * http_query_get (http.c), the only pure function of the HTTP layer.
 *
 * Time-zone dependent tests set TZ to POSIX rule strings ("CST-8", "EST5EDT,...") so
 * they need no tzdata and give the same answer on every machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/http.h"
#include "core/sb.h"

static void set_tz(const char *tz)
{
    setenv("TZ", tz, 1);
    tzset();
}

/* ---- buffer ---- */

static void test_append_and_cstr(void **state)
{
    (void)state;
    sb_t s = SB_INIT;
    assert_string_equal(sb_cstr(&s), "");          /* never NULL, even unallocated */
    sb_puts(&s, "abc");
    sb_append(&s, "def", 3);
    sb_append(&s, "", 0);
    assert_int_equal(s.len, 6);
    assert_string_equal(sb_cstr(&s), "abcdef");
    sb_printf(&s, "-%d-%s", 42, "x");
    assert_string_equal(sb_cstr(&s), "abcdef-42-x");
    sb_reset(&s);
    assert_int_equal(s.len, 0);
    assert_string_equal(sb_cstr(&s), "");
    sb_free(&s);
    assert_null(s.buf);
    sb_free(&s);                                    /* twice is harmless */
}

static void test_growth(void **state)
{
    (void)state;
    sb_t s = SB_INIT;
    char big[5000];
    memset(big, 'x', sizeof big);
    for (int i = 0; i < 100; i++)
        sb_append(&s, big, sizeof big);
    assert_int_equal(s.len, 500000);
    assert_int_equal(s.buf[s.len], '\0');
    sb_reset(&s);
    sb_printf(&s, "%0*d", 3000, 7);                 /* longer than the first guess */
    assert_int_equal(s.len, 3000);
    assert_int_equal(s.buf[2999], '7');
    sb_free(&s);
}

static void test_parse_pos(void **state)
{
    (void)state;
    int64_t v = -1;
    assert_int_equal(sb_parse_pos("42", 2, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(sb_parse_pos("9223372036854775807", 19, &v), 0);
    assert_true(v == INT64_MAX);
    static const char *const bad[] = {"", "0", "00", "-1", "+1", " 1", "1 ", "1a",
                                      "9223372036854775808", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        assert_int_equal(sb_parse_pos(bad[i], strlen(bad[i]), &v), -1);
        assert_int_equal(v, 7);
    }
}

/* v through sb_dec against printf; nothing written after the NUL. */
static void check_dec(int64_t v)
{
    char want[32], got[SB_DEC_MAX + 8];
    int wn = snprintf(want, sizeof want, "%lld", (long long)v);
    memset(got, 'x', sizeof got);
    assert_int_equal(sb_dec(got, v), wn);
    assert_string_equal(got, want);
    for (size_t i = (size_t)wn + 1; i < sizeof got; i++)
        assert_int_equal(got[i], 'x');
}

static void test_i64(void **state)
{
    (void)state;
    static const struct {
        int64_t v;
        const char *z;
    } cases[] = {
        {0, "0"}, {7, "7"}, {10, "10"}, {99, "99"}, {100, "100"}, {-1, "-1"},
        {123456789, "123456789"}, {-987654321012LL, "-987654321012"},
        {INT64_MAX, "9223372036854775807"}, {INT64_MIN, "-9223372036854775808"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb_t s = SB_INIT;
        sb_i64(&s, cases[i].v);
        assert_string_equal(sb_cstr(&s), cases[i].z);
        sb_free(&s);
    }
    /* sb_dec counts the digits before it writes them: every power of ten and its
     * neighbours, both signs, against printf. */
    for (int64_t p = 1;; p *= 10) {
        for (int64_t d = -1; d <= 1; d++) {
            for (int sign = 0; sign < 2; sign++)
                check_dec(sign ? -(p + d) : p + d);
        }
        if (p > INT64_MAX / 10)
            break;
    }
}

/* sb_dec writes four digits per division and numbers below 100 from a shorter path:
 * every value of the last two four-digit groups under prefixes of every length (0 to 11
 * digits: numbers of 1 to 19 digits), then pseudo-random numbers of every length and
 * sign, against printf. */
static void test_dec_many(void **state)
{
    (void)state;
    static const int64_t high[] = {0, 1, 12345678, 99999999, 1234567890LL, 92233720367LL};
    for (int64_t a = 0; a < 10000; a++) {
        int64_t w = a * 10000 + (9999 - a);          /* both halves take every value */
        for (size_t i = 0; i < sizeof high / sizeof high[0]; i++) {
            int64_t v = high[i] * 100000000 + w;
            check_dec(v);
            check_dec(-v);
        }
    }
    uint64_t x = 88172645463325252ull;                /* xorshift64 */
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t v = (int64_t)(x >> (x % 64));          /* every length, both signs */
        check_dec(v);
    }
}

/* ---- JSON strings ---- */

static void check_json(const char *in, size_t n, const char *want)
{
    sb_t s = SB_INIT;
    sb_json_str(&s, in, n);
    assert_string_equal(sb_cstr(&s), want);
    assert_int_equal(s.len, strlen(want));
    sb_free(&s);
}

static void test_json_escaping(void **state)
{
    (void)state;
    check_json("", 0, "\"\"");
    check_json("plain", 5, "\"plain\"");
    check_json("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
    check_json("\n\r\t\b\f", 5, "\"\\n\\r\\t\\b\\f\"");
    check_json("\x01\x1f", 2, "\"\\u0001\\u001f\"");
    check_json("a\0b", 3, "\"a\\u0000b\"");          /* embedded NUL, length-driven */
    check_json("/", 1, "\"/\"");                      /* no need to escape '/' */
    check_json("\x7f", 1, "\"\x7f\"");
    /* UTF-8 passes through untouched. */
    check_json("库存不足", strlen("库存不足"), "\"库存不足\"");
    check_json("秒杀尚未开始！", strlen("秒杀尚未开始！"), "\"秒杀尚未开始！\"");
}

/* bytes that are not UTF-8 become U+FFFD, so the output is always valid JSON */
static void test_json_bad_utf8(void **state)
{
    (void)state;
    check_json("a\xff" "b", 3, "\"a\xef\xbf\xbd" "b\"");
    check_json("\xe5\x85", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");            /* cut short */
    check_json("\xe5\x85\x83!", 4, "\"\xe5\x85\x83!\"");                   /* whole: kept */
    check_json("\xc0\x80", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");            /* overlong NUL */
    check_json("\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""); /* surrogate */
    check_json("\xf0\x9f\x98\x80", 4, "\"\xf0\x9f\x98\x80\"");
    check_json("\xf4\x90\x80\x80", 4,
               "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");       /* > U+10FFFF */
    assert_int_equal(sb_utf8_len("", 0), 0);
    assert_int_equal(sb_utf8_len("a", 1), 1);
    assert_int_equal(sb_utf8_len("\xc3\xa9", 2), 2);
    assert_int_equal(sb_utf8_len("\xc3\xa9", 1), 0);
    assert_int_equal(sb_utf8_len("\x80", 1), 0);
    assert_int_equal(sb_utf8_len("\xf5\x80\x80\x80", 4), 0);
}

static void test_json_appends(void **state)
{
    (void)state;
    sb_t s = SB_INIT;
    sb_puts(&s, "{\"errorMsg\":");
    sb_json_str(&s, "x\"y", 3);
    sb_puts(&s, "}");
    assert_string_equal(sb_cstr(&s), "{\"errorMsg\":\"x\\\"y\"}");
    sb_free(&s);
}

/* ---- date-times ---- */

static void test_datetime_known_values(void **state)
{
    (void)state;
    int64_t t = 0;
    set_tz("UTC0");
    assert_int_equal(sb_datetime_parse("2022-01-01T00:00:00", &t), 0);
    assert_int_equal(t, 1640995200);
    set_tz("CST-8");                                /* China: UTC+8, no DST */
    assert_int_equal(sb_datetime_parse("2022-01-01T00:00:00", &t), 0);
    assert_int_equal(t, 1640995200 - 8 * 3600);
    assert_int_equal(sb_datetime_parse("2024-02-29T23:59:59", &t), 0);   /* leap day */
    assert_int_equal(sb_datetime_parse("2000-02-29T12:00:00", &t), 0);   /* 400-year rule */
}

static void test_datetime_round_trip(void **state)
{
    (void)state;
    static const char *zones[] = {"UTC0", "CST-8", "EST5EDT,M3.2.0,M11.1.0"};
    static const char *times[] = {"2022-01-01T00:00:00", "2026-11-29T16:45:00",
                                  "2024-07-04T12:34:56", "1999-12-31T23:59:59",
                                  "2024-03-10T03:00:00", "2024-11-03T01:30:00"};
    for (size_t z = 0; z < sizeof zones / sizeof zones[0]; z++) {
        set_tz(zones[z]);
        for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
            int64_t t = 0;
            assert_int_equal(sb_datetime_parse(times[i], &t), 0);
            sb_t s = SB_INIT;
            sb_json_datetime(&s, t);
            char want[32];
            snprintf(want, sizeof want, "\"%s\"", times[i]);
            assert_string_equal(sb_cstr(&s), want);
            sb_free(&s);
        }
    }
    set_tz("CST-8");
    sb_t s = SB_INIT;
    sb_json_datetime(&s, 0);
    assert_string_equal(sb_cstr(&s), "\"1970-01-01T08:00:00\"");
    sb_free(&s);
}

static void test_datetime_rejects(void **state)
{
    (void)state;
    set_tz("CST-8");
    static const char *bad[] = {
        "", "2022-01-01", "2022-01-01T00:00", "2022-01-01 00:00:00", "2022-01-01T00:00:00Z",
        "2022-01-01T00:00:00.000", "2022-01-01T00:00:00+08:00", " 2022-01-01T00:00:00",
        "2022-01-01T00:00:00 ", "2022-1-01T00:00:00", "22-01-01T00:00:00",
        "2022/01/01T00:00:00", "2022-01-01t00:00:00", "+022-01-01T00:00:00",
        "2022-00-01T00:00:00", "2022-13-01T00:00:00", "2022-01-00T00:00:00",
        "2022-01-32T00:00:00", "2022-02-29T00:00:00", "1900-02-29T00:00:00",
        "2022-04-31T00:00:00", "2022-01-01T24:00:00", "2022-01-01T00:60:00",
        "2022-01-01T00:00:60", "2022-01-01T-1:00:00", "1969-12-31T23:59:59",
        "abcd-ef-ghTij:kl:mn", "2022-01-01T00:00:00\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t t = 12345;
        if (sb_datetime_parse(bad[i], &t) != -1)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_int_equal(t, 12345);                 /* out untouched on failure */
    }
    int64_t t;
    assert_int_equal(sb_datetime_parse(NULL, &t), -1);
    /* A wall time that does not exist (spring-forward gap) is refused, not shifted. */
    set_tz("EST5EDT,M3.2.0,M11.1.0");
    assert_int_equal(sb_datetime_parse("2024-03-10T02:30:00", &t), -1);
}

/* ---- http_query_get ---- */

static void test_query_get(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(http_query_get("phone=13800000000", "phone", out, sizeof out), 11);
    assert_string_equal(out, "13800000000");
    assert_int_equal(http_query_get("a=1&phone=138&b=2", "phone", out, sizeof out), 3);
    assert_string_equal(out, "138");
    assert_int_equal(http_query_get("a=1&b=2", "b", out, sizeof out), 1);
    assert_string_equal(out, "2");
    /* percent-decoding and '+' */
    assert_int_equal(http_query_get("q=a%20b+c%2Bd%e4%BD%A0", "q", out, sizeof out), 10);
    assert_string_equal(out, "a b c+d你");
    /* a malformed escape stays literal */
    assert_int_equal(http_query_get("q=100%&r=%zz%4", "q", out, sizeof out), 4);
    assert_string_equal(out, "100%");
    assert_int_equal(http_query_get("q=100%&r=%zz%4", "r", out, sizeof out), 5);
    assert_string_equal(out, "%zz%4");
    /* empty and valueless */
    assert_int_equal(http_query_get("a=&b", "a", out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(http_query_get("a=&b", "b", out, sizeof out), 0);
    assert_string_equal(out, "");
    /* first occurrence wins; keys match whole, not as prefixes */
    assert_int_equal(http_query_get("k=1&k=2", "k", out, sizeof out), 1);
    assert_string_equal(out, "1");
    assert_int_equal(http_query_get("phone2=9&phone=8", "phone", out, sizeof out), 1);
    assert_string_equal(out, "8");
    assert_int_equal(http_query_get("xphone=9", "phone", out, sizeof out), -1);
    /* an encoded key matches its decoded form */
    assert_int_equal(http_query_get("ph%6Fne=7", "phone", out, sizeof out), 1);
    /* absent */
    assert_int_equal(http_query_get("", "a", out, sizeof out), -1);
    assert_int_equal(http_query_get("&&", "a", out, sizeof out), -1);
    assert_int_equal(http_query_get("=1", "a", out, sizeof out), -1);
    assert_int_equal(http_query_get(NULL, "a", out, sizeof out), -1);
    /* too long for out: exactly outlen-1 fits, one more does not */
    char small[4];
    assert_int_equal(http_query_get("a=123", "a", small, sizeof small), 3);
    assert_string_equal(small, "123");
    assert_int_equal(http_query_get("a=1234", "a", small, sizeof small), -1);
    assert_int_equal(http_query_get("a=1", "a", small, 0), -1);
    /* an embedded NUL is refused: "138%00junk" must not pass as "138" */
    assert_int_equal(http_query_get("phone=138%00junk", "phone", out, sizeof out), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_cstr),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_i64),
        cmocka_unit_test(test_dec_many),
        cmocka_unit_test(test_parse_pos),
        cmocka_unit_test(test_json_escaping),
        cmocka_unit_test(test_json_bad_utf8),
        cmocka_unit_test(test_json_appends),
        cmocka_unit_test(test_datetime_known_values),
        cmocka_unit_test(test_datetime_round_trip),
        cmocka_unit_test(test_datetime_rejects),
        cmocka_unit_test(test_query_get),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
