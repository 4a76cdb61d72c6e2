/* test_h1.c -- unit tests for h1.c, the strict HTTP/1.1 request parser: heads that are
 * accepted and what they mean, heads that are refused and with which status, chunked
 * bodies fed whole and one byte at a time, trailers dropped. tests/it/test_smuggling.py
 * covers the same rules end to end, directly and through nginx. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "http/h1.h"

/* Measures and parses a complete head; returns 0 or the status (positive). */
static int head(const char *z, h1_head_t *h)
{
    size_t scan = 0;
    long n = h1_head_len(z, strlen(z), &scan, 8192);
    if (n <= 0)
        return n == 0 ? -1 : (int)-n;
    assert_int_equal((size_t)n, strlen(z));
    return h1_parse_head(z, (size_t)n, h);
}

static void test_head_accepted(void **state)
{
    (void)state;
    h1_head_t h;
    assert_int_equal(head("GET /a?b=c HTTP/1.1\r\nHost: x\r\nauthorization:  tok \t\r\n"
                          "X-Admin-Token: adm\r\nConnection: keep-alive, Upgrade\r\n"
                          "Upgrade: h2c\r\n\r\n", &h), 0);
    assert_int_equal(h.method.n, 3);
    assert_memory_equal(h.target.p, "/a?b=c", 6);
    assert_int_equal(h.minor, 1);
    assert_true(h.has_auth);
    assert_int_equal(h.auth.n, 3);
    assert_memory_equal(h.auth.p, "tok", 3);
    assert_true(h.has_admin);
    assert_true(h.conn_keep_alive && h.conn_upgrade && h.has_upgrade && !h.conn_close);
    assert_false(h.has_length || h.chunked);

    assert_int_equal(head("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0012\r\n"
                          "Expect: 100-Continue\r\n\r\n", &h), 0);
    assert_true(h.has_length && h.content_length == 12 && h.expect_continue);
    assert_int_equal(head("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked \r\n\r\n", &h),
                     0);
    assert_true(h.chunked);
    assert_int_equal(head("GET / HTTP/1.0\r\n\r\n", &h), 0);              /* no Host in 1.0 */
    assert_int_equal(h.minor, 0);
    assert_int_equal(head("GET / HTTP/1.1\r\nHost:\r\nX-Empty:\r\n\r\n", &h), 0);
    /* uri-host [":" port]: names, IPv4, IP literals, percent-encoding, sub-delims */
    assert_int_equal(head("GET / HTTP/1.1\r\nHost: shop_1.example.com:8081\r\n\r\n", &h), 0);
    assert_int_equal(head("GET / HTTP/1.1\r\nHost: 127.0.0.1:8081\r\n\r\n", &h), 0);
    assert_int_equal(head("GET / HTTP/1.1\r\nHost: [::1]:8081\r\n\r\n", &h), 0);
    assert_int_equal(head("GET / HTTP/1.1\r\nHost: a%2Db~!$&'()*+,;=\r\n\r\n", &h), 0);
    assert_int_equal(head("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                          &h), 0);
    assert_true(h.content_length == UINT64_MAX);                           /* saturates: 413 */
}

static void test_head_refused(void **state)
{
    (void)state;
    static const struct { const char *z; int status; } cases[] = {
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 2\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding\t: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nX: 1\r\n 2\r\n\r\n", 400},             /* obs-fold */
        {"GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\nHost: x\r\n\r\n", 400},                               /* bare LF */
        {"GET / HTTP/1.1\r\nHost: x\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\rY: 1\r\n\r\n", 400},                       /* bare CR */
        {"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\x7f\r\n\r\n", 400},
        {"GET / HTTP/1.2\r\nHost: x\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 400},
        {"GET / http/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400},
        {"G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n\r\n", 400},                                        /* no Host */
        {"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400},
        /* RFC 9112 3.2: a Host that is not uri-host [":" port] is a 400 too */
        {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\tb\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a?b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a#\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: \"a\"\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: \xc3\xa9.cn\r\n\r\n", 400},
        {"GET / HTTP/1.0\r\nHost: a b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nContent-Length: 1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: a\r\nauthorization: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nx-admin-token: a\r\nX-Admin-Token: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nx-seckill-pass: a\r\nX-Seckill-Pass: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n", 400},                      /* empty name */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        h1_head_t h;
        int st = head(cases[i].z, &h);
        if (st != cases[i].status)
            fail_msg("case %zu (%s): got %d, want %d", i, cases[i].z, st, cases[i].status);
    }
}

static void test_head_len(void **state)
{
    (void)state;
    const char *z = "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET";
    size_t scan = 0;
    /* fed one byte more at a time: incomplete until the empty line, then its length */
    for (size_t n = 1; n < 27; n++)
        assert_int_equal(h1_head_len(z, n, &scan, 8192), 0);
    assert_int_equal(h1_head_len(z, strlen(z), &scan, 8192), 27);
    char big[300];
    memset(big, 'a', sizeof big);
    scan = 0;
    assert_int_equal(h1_head_len(big, sizeof big, &scan, 256), -414);      /* no line end */
    memcpy(big, "GET / HTTP/1.1\r\n", 16);
    scan = 0;
    assert_int_equal(h1_head_len(big, sizeof big, &scan, 256), -431);
    scan = 0;
    assert_int_equal(h1_head_len("\r\nGET", 5, &scan, 256), -400);         /* caller skips CRLF */
}

/* ---- chunked bodies ---- */

typedef struct {
    char buf[256];
    size_t len;
} sink_t;

static int sink(void *ctx, const char *p, size_t n)
{
    sink_t *s = ctx;
    if (s->len + n > sizeof s->buf)
        return 503;
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    return 0;
}

/* Feeds z in pieces of `step` bytes; returns 1 (complete, *rest = bytes after it), or the
 * error status. */
static int feed(const char *z, size_t step, sink_t *out, size_t *rest, uint64_t max)
{
    h1_chunked_t d;
    h1_chunked_init(&d, max, 64);
    size_t len = strlen(z), off = 0;
    memset(out, 0, sizeof *out);
    while (off < len) {
        size_t n = len - off < step ? len - off : step, used = 0;
        int st = h1_chunked_feed(&d, z + off, n, &used, sink, out);
        off += used;
        if (st != 0) {
            *rest = len - off;
            return st;
        }
        assert_int_equal(used, n);
    }
    return 0;
}

static void test_chunked(void **state)
{
    (void)state;
    const char *ok = "5;a=b\r\nhello\r\nA\r\n 012345678\r\n0\r\nX-T: 1\r\nauthorization: x\r\n\r\nNEXT";
    for (size_t step = 1; step <= strlen(ok); step++) {
        sink_t s;
        size_t rest = 0;
        assert_int_equal(feed(ok, step, &s, &rest, 1024), 1);
        assert_int_equal(rest, 4);                     /* "NEXT" is the next request's */
        assert_int_equal(s.len, 15);
        assert_memory_equal(s.buf, "hello 012345678", 15);
    }
    static const struct { const char *z; int status; } bad[] = {
        {"5\r\nhelloXX0\r\n\r\n", 400},
        {"5\r\nhello\n0\r\n\r\n", 400},
        {"5 \r\nhello\r\n0\r\n\r\n", 400},
        {"5\nhello\r\n0\r\n\r\n", 400},
        {"0x5\r\nhello\r\n0\r\n\r\n", 400},
        {"-5\r\nhello\r\n0\r\n\r\n", 400},
        {"\r\nhello\r\n0\r\n\r\n", 400},
        {"5;a\nb\r\nhello\r\n0\r\n\r\n", 400},
        {"0\r\nX: 1\r\n 2\r\n\r\n", 400},              /* obs-fold in the trailers */
        {"0\r\nX : 1\r\n\r\n", 400},
        {"0\r\n\n", 400},
        {"ffffffffffffffffffffff\r\n", 413},
        {"401\r\n", 413},                               /* over max (1024) */
        {"200\r\n", 503},                               /* the sink refuses (its buffer) */
        {"0\r\nX: 0123456789012345678901234567890123456789012345678901234567890123\r\n\r\n", 431},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sink_t s;
        size_t rest = 0;
        char z[512];
        snprintf(z, sizeof z, "%s", bad[i].z);
        if (bad[i].status == 503) {
            /* 384 of the chunk's 512 bytes: more than the sink's 256 */
            size_t n = strlen(z);
            memset(z + n, 'x', 384);
            z[n + 384] = '\0';
        }
        int st = feed(z, 7, &s, &rest, 1024);
        if (st != bad[i].status)
            fail_msg("case %zu (%s): got %d, want %d", i, bad[i].z, st, bad[i].status);
    }
}

/* The target and the field values are scanned eight bytes at a time: every byte value at
 * every position of a 24-byte target and value (each word, each offset within it, the
 * byte-at-a-time tail) is accepted or refused exactly as the byte rules say. */
/* z = a, then the 24 bytes of mid, then b; returns the length. */
static size_t cat3(char *z, const char *a, const char *mid, const char *b)
{
    size_t n = strlen(a);
    memcpy(z, a, n);
    memcpy(z + n, mid, 24);
    n += 24;
    memcpy(z + n, b, strlen(b));
    return n + strlen(b);
}

static void test_every_byte_everywhere(void **state)
{
    (void)state;
    /* What h1_head_len would not have measured as a head is refused, not scanned past
     * its end. */
    {
        static const char part[] = "GET / HTTP/1.0\r\nAbc";
        h1_head_t h;
        assert_int_equal(h1_parse_head(part, sizeof part - 1, &h), 400);
        assert_int_equal(h1_parse_head("GET / HTTP/1.0\r\n", 16, &h), 400);
    }
    for (int b = 0; b < 256; b++) {
        for (size_t at = 1; at < 23; at++) {
            char tgt[25], val[25];
            memset(tgt, 'a', 24);
            memset(val, 'v', 24);
            tgt[0] = '/';
            tgt[at] = (char)b;
            val[at] = (char)b;
            tgt[24] = val[24] = '\0';
            char z[160];
            h1_head_t h;
            /* the target (put together with memcpy: the byte may be NUL) */
            size_t n = cat3(z, "GET ", tgt, " HTTP/1.1\r\nHost: x\r\n\r\n");
            int st = h1_parse_head(z, n, &h);
            int ok = b > 0x20 && b != 0x7f;
            if ((st == 0) != ok)
                fail_msg("target byte 0x%02x at %zu: got %d", b, at, st);
            if (ok)
                assert_int_equal(h.target.n, 24);
            /* a field value */
            n = cat3(z, "GET / HTTP/1.1\r\nHost: x\r\nauthorization: ", val, "\r\n\r\n");
            st = h1_parse_head(z, n, &h);
            ok = b == '\t' || (b >= 0x20 && b != 0x7f);
            if ((st == 0) != ok)
                fail_msg("value byte 0x%02x at %zu: got %d", b, at, st);
            if (ok) {
                assert_int_equal(h.auth.n, 24);
                assert_memory_equal(h.auth.p, val, 24);
            }
        }
    }
}

/* h1_head_len: a bare LF at any position of a line is found, and a head's end at any
 * length, fed whole or one byte at a time. */
static void test_head_len_every_position(void **state)
{
    (void)state;
    for (size_t tl = 1; tl < 40; tl++) {
        char z[128];
        int n = snprintf(z, sizeof z, "GET /%.*s HTTP/1.1\r\nHost: x\r\n\r\n", (int)tl,
                         "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
        size_t scan = 0;
        assert_int_equal(h1_head_len(z, (size_t)n, &scan, 8192), n);
        scan = 0;
        for (int k = 1; k < n; k++)
            assert_int_equal(h1_head_len(z, (size_t)k, &scan, 8192), 0);
        assert_int_equal(h1_head_len(z, (size_t)n, &scan, 8192), n);
        for (size_t at = 1; at < (size_t)n - 4; at++) {
            if (z[at] == '\r' || z[at] == '\n' || z[at - 1] == '\r')
                continue;
            char y[128];
            memcpy(y, z, (size_t)n);
            y[at] = '\n';                          /* an LF without a CR before it */
            scan = 0;
            long got = h1_head_len(y, (size_t)n, &scan, 8192);
            if (got != -400)
                fail_msg("bare LF at %zu of a %d-byte head: got %ld", at, n, got);
        }
    }
}

/* The fields the parser knows are recognised in any letter case and not when any one
 * byte differs (names are compared a word at a time). */
static void test_field_names_exact(void **state)
{
    (void)state;
    static const char *names[] = {
        "host", "expect", "upgrade", "connection", "authorization", "x-admin-token",
        "content-length", "x-forwarded-for", "transfer-encoding", "x-seckill-pass",
    };
    static const char *values[] = {
        "y", "100-continue", "h2c", "close", "tok", "adm", "5", "1.2.3.4", "chunked", "p",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t nn = strlen(names[i]);
        for (size_t at = 0; at <= nn; at++) {
            for (int how = 0; how < 3; how++) {
                char name[32];
                memcpy(name, names[i], nn + 1);
                int same = 1;
                if (at < nn && how == 0) {
                    if (name[at] >= 'a' && name[at] <= 'z')
                        name[at] = (char)(name[at] - 'a' + 'A');   /* same field */
                } else if (at < nn && how == 1) {
                    name[at] = name[at] == 'z' ? 'y' : (char)(name[at] + 1);
                    same = 0;
                } else if (at < nn && how == 2) {
                    name[at] = name[at] == '-' ? '_' : '^';          /* tchar, not a letter */
                    same = 0;
                } else if (at < nn) {
                    continue;
                }
                char z[200];
                /* HTTP/1.1 needs a Host of its own unless this is the Host field */
                int n = snprintf(z, sizeof z, "POST / HTTP/1.1\r\n%s%s: %s\r\n\r\n",
                                 i == 0 ? "" : "Host: x\r\n", name, values[i]);
                h1_head_t h;
                int st = h1_parse_head(z, (size_t)n, &h);
                int seen;
                switch (i) {
                case 0: seen = st == 0; break;              /* else 400: no Host */
                case 1: seen = h.expect_continue; break;
                case 2: seen = h.has_upgrade; break;
                case 3: seen = h.conn_close; break;
                case 4: seen = h.has_auth; break;
                case 5: seen = h.has_admin; break;
                case 6: seen = h.has_length; break;
                case 7: seen = h.has_xff; break;
                case 8: seen = h.chunked; break;
                default: seen = h.has_pass && h.pass.n == 1 && h.pass.p[0] == 'p'; break;
                }
                if (i != 0)
                    assert_int_equal(st, 0);
                if (seen != same)
                    fail_msg("field %s: seen %d, want %d", name, seen, same);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_accepted),
        cmocka_unit_test(test_head_refused),
        cmocka_unit_test(test_head_len),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_every_byte_everywhere),
        cmocka_unit_test(test_field_names_exact),
        cmocka_unit_test(test_head_len_every_position),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
