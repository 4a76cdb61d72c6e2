/* test_rarena.c -- replies built in an arena (rarena.h) are the trees hiredis builds.
 *
 * The same RESP is fed to a reader with hiredis's own functions and to one attached to
 * an arena; the two trees must be equal field by field: every reply type, binary
 * strings, nil and empty arrays, nesting as deep as XREADGROUP's, replies bigger than a
 * chunk, pipelined replies, replies arriving a byte at a time, and reuse after resets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "redis/rarena.h"
#include "core/sb.h"

static void same(const redisReply *want, const redisReply *got)
{
    assert_non_null(got);
    assert_int_equal(got->type, want->type);
    switch (want->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        assert_int_equal(got->len, want->len);
        assert_memory_equal(got->str, want->str, want->len);
        assert_int_equal(got->str[got->len], '\0');
        break;
    case REDIS_REPLY_INTEGER:
        assert_int_equal(got->integer, want->integer);
        break;
    case REDIS_REPLY_ARRAY:
        assert_int_equal(got->elements, want->elements);
        for (size_t i = 0; i < want->elements; i++)
            same(want->element[i], got->element[i]);
        break;
    default:
        assert_int_equal(want->type, REDIS_REPLY_NIL);
        break;
    }
}

/* Feeds resp to both readers (in pieces of step bytes; 0 = at once) and compares the
 * nreplies replies that come out. */
static void check(rarena_t *a, const char *resp, size_t len, size_t step, int nreplies)
{
    redisReader *def = redisReaderCreate();
    redisReader *ar = redisReaderCreate();
    rarena_attach(a, ar);
    redisReply *want[8] = {0};
    redisReply *got[8] = {0};
    int nw = 0, ng = 0;
    size_t off = 0;
    while (off < len) {
        size_t n = step == 0 || len - off < step ? len - off : step;
        assert_int_equal(redisReaderFeed(def, resp + off, n), REDIS_OK);
        assert_int_equal(redisReaderFeed(ar, resp + off, n), REDIS_OK);
        off += n;
        void *r;
        while (nw < 8 && redisReaderGetReply(def, &r) == REDIS_OK && r != NULL)
            want[nw++] = r;
        while (ng < 8 && redisReaderGetReply(ar, &r) == REDIS_OK && r != NULL)
            got[ng++] = r;
    }
    assert_int_equal(nw, nreplies);
    assert_int_equal(ng, nreplies);
    for (int i = 0; i < nreplies; i++) {
        same(want[i], got[i]);
        freeReplyObject(want[i]);
    }
    redisReaderFree(def);
    redisReaderFree(ar);
}

static void check_str(rarena_t *a, const char *resp, int nreplies)
{
    check(a, resp, strlen(resp), 0, nreplies);
    check(a, resp, strlen(resp), 1, nreplies);
}

static void test_every_type(void **state)
{
    (void)state;
    rarena_t *a = rarena_new();
    check_str(a, "+OK\r\n", 1);
    check_str(a, "-NOGROUP No such key\r\n", 1);
    check_str(a, ":-9223372036854775808\r\n", 1);
    check_str(a, "$5\r\nhello\r\n", 1);
    check_str(a, "$0\r\n\r\n", 1);
    check_str(a, "$-1\r\n", 1);
    check_str(a, "*-1\r\n", 1);
    check_str(a, "*0\r\n", 1);
    check(a, "$3\r\na\0b\r\n", 9, 0, 1);   /* a NUL inside a string */
    /* pipelined: several replies in one read */
    check_str(a, "+OK\r\n:1\r\n$2\r\nhi\r\n*2\r\n:1\r\n$-1\r\n", 4);
    rarena_free(a);
}

/* An XREADGROUP reply of n entries: [[key, [[id, [f, v, ...]], ...]]]. */
static char *xread_reply(int n, size_t *len)
{
    sb_t s = SB_INIT;
    sb_printf(&s, "*1\r\n*2\r\n$19\r\nseckill:stream:{42}\r\n*%d\r\n", n);
    for (int i = 0; i < n; i++) {
        char id[32], uid[32];
        int il = snprintf(id, sizeof id, "1764619200000-%d", i);
        int ul = snprintf(uid, sizeof uid, "%lld", 3000000000LL + i);
        sb_printf(&s, "*2\r\n$%d\r\n%s\r\n*10\r\n$2\r\nid\r\n$15\r\n281479271677953\r\n"
                      "$6\r\nuserId\r\n$%d\r\n%s\r\n$9\r\nvoucherId\r\n$2\r\n42\r\n"
                      "$2\r\nts\r\n$10\r\n1764619200\r\n$2\r\nep\r\n$1\r\n0\r\n",
                  il, id, ul, uid);
    }
    /* a pending entry deleted from the stream: [id, nil] */
    sb_printf(&s, "*1\r\n*2\r\n$19\r\nseckill:stream:{43}\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*-1\r\n");
    *len = s.len;
    return s.buf;
}

static void test_xreadgroup_shapes_and_reuse(void **state)
{
    (void)state;
    rarena_t *a = rarena_new();
    size_t len;
    char *big = xread_reply(2000, &len);   /* ~1.5 MB of objects: past a chunk and the keep */
    char *small = xread_reply(3, &len);
    for (int round = 0; round < 3; round++) {
        size_t bl = strlen(big), sl = strlen(small);
        check(a, big, bl, 0, 2);
        rarena_reset(a);
        check(a, small, sl, 7, 2);
        check(a, small, sl, 0, 2);   /* no reset in between: the arena grows */
        rarena_reset(a);
    }
    free(big);
    free(small);
    /* one string bigger than a chunk */
    size_t n = 200 * 1024;
    char *huge = malloc(n + 32);
    int h = snprintf(huge, 32, "$%zu\r\n", n);
    memset(huge + h, 'x', n);
    memcpy(huge + h + n, "\r\n", 2);
    check(a, huge, (size_t)h + n + 2, 0, 1);
    free(huge);
    rarena_reset(a);
    rarena_free(a);
}

static void test_composed_and_aligned(void **state)
{
    (void)state;
    rarena_t *a = rarena_new();
    for (size_t n = 1; n < 300; n += 7) {
        void *p = rarena_alloc(a, n);
        assert_int_equal((uintptr_t)p % _Alignof(max_align_t), 0);
        memset(p, 0xab, n);
    }
    rarena_reset(a);
    rarena_free(a);
    rarena_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_xreadgroup_shapes_and_reuse),
        cmocka_unit_test(test_composed_and_aligned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
