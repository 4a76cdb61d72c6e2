/* test_bench_args.c -- the pure parts of `seckill bench` and `seckill audit`: option
 * parsing (bench_parse_args), answer classification (bench_load_classify), the phone numbers
 * of bench users, stream ids, and the record file's round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/audit.h"
#include "cmd/bench.h"
#include "cmd/bench_redis.h"

static int parse(bench_opts_t *o, char *err, ...)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "bench";
    va_list ap;
    va_start(ap, err);
    char *a;
    while ((a = va_arg(ap, char *)) != NULL && argc < 63)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    err[0] = '\0';
    return bench_parse_args(argc, argv, o, err, 256);
}

static void test_defaults(void **state)
{
    (void)state;
    bench_opts_t o;
    char err[256];
    assert_int_equal(parse(&o, err, NULL), 0);
    assert_string_equal(o.target, "http://127.0.0.1:8081");
    assert_string_equal(o.host, "127.0.0.1");
    assert_int_equal(o.port, 8081);
    assert_int_equal(o.users, 10000);
    assert_int_equal(o.conns, 64);
    assert_int_equal(o.pipeline, 1);
    assert_int_equal(o.threads, 1);
    assert_int_equal(o.stock, -1);
    assert_int_equal(o.voucher, 0);
    assert_int_equal(o.window_s, 3600);
    assert_int_equal(o.login, LOGIN_API);
    assert_int_equal(o.audit, 1);
    assert_int_equal(o.progress, 1);
    assert_true(o.rate == 0 && o.duration_s == 0);
    assert_true(o.dup > 0.09 && o.dup < 0.11);
    assert_int_equal(o.burst, 3);
    assert_int_equal(o.tick_us, 500);
    assert_int_equal(o.cpu_probe, 0);   /* the CPU probe is asked for (make perf does) */
    assert_int_equal(parse(&o, err, "--tick-us", "100", "--timeline", "t.tsv", "--cpu-probe", NULL),
                     0);
    assert_int_equal(o.tick_us, 100);
    assert_string_equal(o.timeline, "t.tsv");
    assert_int_equal(o.cpu_probe, 1);
}

static void test_values(void **state)
{
    (void)state;
    bench_opts_t o;
    char err[256];
    assert_int_equal(parse(&o, err, "--target", "http://[::1]:9000/", "--users", "1000000",
                           "--stock=500", "--conns", "128", "--pipeline", "16", "--threads", "2",
                           "--rate", "50000.5", "--duration", "2.5", "--dup", "0", "--burst-share",
                           "0.25", "--burst", "5", "--seed-tokens", "--no-audit", "--quiet",
                           "--voucher", "9007199254740993", "--seed", "42", "--record", "r.txt",
                           "--json", "-", "--data-dir", "/tmp/x", "--begin-in", "3", NULL),
                     0);
    assert_string_equal(o.host, "::1");
    assert_int_equal(o.port, 9000);
    assert_int_equal(o.users, 1000000);
    assert_int_equal(o.stock, 500);
    assert_int_equal(o.conns, 128);
    assert_int_equal(o.pipeline, 16);
    assert_int_equal(o.threads, 2);
    assert_true(o.rate == 50000.5);
    assert_true(o.duration_s == 2.5);
    assert_true(o.dup == 0);
    assert_true(o.burst_share == 0.25);
    assert_int_equal(o.burst, 5);
    assert_int_equal(o.login, LOGIN_SEED);
    assert_int_equal(o.audit, 0);
    assert_int_equal(o.progress, 0);
    assert_int_equal(o.voucher, 9007199254740993LL);   /* beyond 2^53: exact */
    assert_int_equal(o.seed, 42);
    assert_string_equal(o.record, "r.txt");
    assert_string_equal(o.json, "-");
    assert_string_equal(o.data_dir, "/tmp/x");
    assert_int_equal(o.begin_in_s, 3);

    assert_int_equal(parse(&o, err, "--tokens", "t.txt", "--target", "http://example.com", NULL), 0);
    assert_int_equal(o.login, LOGIN_FILE);
    assert_string_equal(o.tokens_file, "t.txt");
    assert_string_equal(o.host, "example.com");
    assert_int_equal(o.port, 80);

    assert_int_equal(parse(&o, err, "--help", NULL), 1);
    assert_int_equal(parse(&o, err, "--users", "5", "-h", NULL), 1);
}

static void test_errors(void **state)
{
    (void)state;
    bench_opts_t o;
    char err[256];
    struct {
        const char *a, *b, *needle;
    } bad[] = {
        {"--nope", NULL, "unknown option"},
        {"--no-cpu-probe", NULL, "unknown option"},   /* the probe is off unless asked */
        {"users", NULL, "unexpected argument"},
        {"--users", NULL, "needs a value"},
        {"--users", "0", "--users must be"},
        {"--users", "1.5", "whole number"},
        {"--users", "ten", "--users must be"},
        {"--conns", "0", "--conns"},
        {"--pipeline", "2000", "--pipeline"},
        {"--dup", "-0.5", "--dup"},
        {"--burst-share", "1.5", "--burst-share"},
        {"--rate", "nan", "--rate"},
        {"--tick-us", "10", "--tick-us"},
        {"--stock", "-1", "--stock"},
        {"--target", "https://x:1", "http://HOST:PORT"},
        {"--target", "http://:80", "no host"},
        {"--target", "http://h:0", "bad port"},
        {"--target", "http://h:99999", "bad port"},
        {"--target", "http://h:80/path", "bad port"},
        {"--target", "http://h/path", "only http://HOST:PORT"},
        {"--target", "http://[::1:80", "unclosed"},
        {"--seed-tokens=1", NULL, "takes no value"},
        {"--record", "", "empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = bad[i].b ? parse(&o, err, bad[i].a, bad[i].b, NULL) : parse(&o, err, bad[i].a, NULL);
        if (rc != -1 || !strstr(err, bad[i].needle)) {
            fprintf(stderr, "case %zu (%s %s): rc %d, err \"%s\"\n", i, bad[i].a,
                    bad[i].b ? bad[i].b : "", rc, err);
            fail();
        }
    }
    assert_int_equal(parse(&o, err, "--seed-tokens", "--tokens", "f", NULL), -1);
    assert_non_null(strstr(err, "exclude"));
    /* the lifecycle rehearsal (bench_life.c) */
    assert_int_equal(parse(&o, err, "--pay-share", "0.3", "--cancel-share", "0.2",
                           "--pay-timeout", "5", "--pay-key-file", "k", NULL), 0);
    assert_true(o.pay_share == 0.3 && o.cancel_share == 0.2 && o.pay_timeout_s == 5);
    assert_string_equal(o.pay_key_file, "k");
    assert_int_equal(parse(&o, err, "--pay-share", "0.7", "--cancel-share", "0.4",
                           "--pay-timeout", "5", NULL), -1);
    assert_non_null(strstr(err, "at most 1"));
    assert_int_equal(parse(&o, err, "--cancel-share", "0.4", NULL), -1);
    assert_non_null(strstr(err, "need --pay-timeout"));
    /* --voucher: its payValue is read from its shop's list (--shop, 1 by default) */
    assert_int_equal(parse(&o, err, "--pay-share", "0.4", "--pay-timeout", "5", "--voucher",
                           "7", NULL), 0);
    assert_true(o.shop == 1 && o.pay_value == 100);
    assert_int_equal(parse(&o, err, "--pay-share", "0.4", "--pay-timeout", "5", "--voucher",
                           "7", "--shop", "3", NULL), 0);
    assert_true(o.shop == 3);
    assert_int_equal(parse(&o, err, "--shop", "0", NULL), -1);
    assert_int_equal(parse(&o, err, "--pay-share", "1.5", NULL), -1);
    assert_int_equal(parse(&o, err, "--pay-timeout", "0", NULL), -1);
}

static void test_classify(void **state)
{
    (void)state;
    int64_t id = 0;
#define C(st, body) bench_load_classify(st, body, strlen(body), &id)
    assert_int_equal(C(200, "{\"success\":true,\"data\":281479271677953}"), BO_SUCCESS);
    assert_int_equal(id, 281479271677953LL);
    assert_int_equal(C(200, "{\"success\":false,\"errorMsg\":\"库存不足\",\"code\":\"SOLD_OUT\"}"),
                     BO_SOLD_OUT);
    assert_int_equal(C(200, "{\"success\":false,\"errorMsg\":\"不能重复下单\",\"code\":\"DUPLICATE\"}"),
                     BO_DUPLICATE);
    /* the course's own server: no code member, only the message */
    assert_int_equal(C(200, "{\"success\":false,\"errorMsg\":\"库存不足\"}"), BO_SOLD_OUT);
    assert_int_equal(C(200, "{\"success\":false,\"errorMsg\":\"不能重复下单\"}"), BO_DUPLICATE);
    assert_int_equal(C(200, "{\"success\":false,\"errorMsg\":\"秒杀尚未开始！\"}"), BO_NOT_STARTED);
    assert_int_equal(C(200, "{\"success\":false,\"errorMsg\":\"秒杀已经结束！\"}"), BO_ENDED);
    assert_int_equal(C(200, "{\"success\":false,\"errorMsg\":\"优惠券不存在\",\"code\":\"NO_VOUCHER\"}"),
                     BO_NO_VOUCHER);
    assert_int_equal(C(401, ""), BO_UNAUTHORIZED);
    assert_int_equal(C(503, "{\"success\":false,\"errorMsg\":\"服务器异常\",\"code\":\"UNAVAILABLE\"}"),
                     BO_UNAVAILABLE);
    assert_int_equal(C(200, "{\"success\":false,\"errorMsg\":\"服务器异常\"}"), BO_OTHER);
    assert_int_equal(C(200, "{\"success\":true}"), BO_OTHER);          /* no order id */
    assert_int_equal(C(200, "{\"success\":true,\"data\":\"x\"}"), BO_OTHER);
    assert_int_equal(C(404, "{\"success\":false}"), BO_OTHER);
    assert_int_equal(bench_load_classify(200, NULL, 0, &id), BO_OTHER);
    /* a truncated body (the bench keeps 512 bytes) still classifies by what it has */
    const char *b = "{\"success\":true,\"data\":12";
    assert_int_equal(bench_load_classify(200, b, strlen(b), &id), BO_SUCCESS);
    assert_int_equal(id, 12);
#undef C
}

static void test_phones(void **state)
{
    (void)state;
    regex_t re;
    assert_int_equal(regcomp(&re, "^1([38][0-9]|4[579]|5[0-3,5-9]|6[6]|7[0135678]|9[89])[0-9]{8}$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    int64_t probes[] = {0, 1, 99999999, 100000000, 999999999, 1000000000, 1999999999, 123456789};
    char prev[16] = "";
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        char p[16];
        bench_load_phone(probes[i], p);
        assert_int_equal(strlen(p), 11);
        assert_int_equal(regexec(&re, p, 0, NULL, 0), 0);
        assert_string_not_equal(p, prev);
        strcpy(prev, p);
    }
    char a[16], b[16];
    bench_load_phone(5, a);
    bench_load_phone(100000005, b);
    assert_string_equal(a, "13000000005");
    assert_string_equal(b, "13100000005");
    regfree(&re);
}

static void test_stream_ids(void **state)
{
    (void)state;
    sid_t a, b;
    assert_int_equal(bench_redis_sid_parse("1700000000000-5", &a), 0);
    assert_int_equal(a.ms, 1700000000000ull);
    assert_int_equal(a.seq, 5);
    assert_int_equal(bench_redis_sid_parse("1700000000000", &b), 0);
    assert_int_equal(b.seq, 0);
    assert_true(bench_redis_sid_cmp(a, b) > 0);
    assert_true(bench_redis_sid_cmp(b, a) < 0);
    assert_int_equal(bench_redis_sid_cmp(a, a), 0);
    assert_int_equal(bench_redis_sid_parse("17-", &a), -1);
    assert_int_equal(bench_redis_sid_parse("x-1", &a), -1);
    assert_int_equal(bench_redis_sid_parse("1-2-3", &a), -1);
    assert_int_equal(bench_redis_sid_parse(NULL, &a), -1);
    assert_int_equal(bench_redis_sid_parse("0-0", &a), 0);
    assert_int_equal(bench_redis_sid_parse("2-1", &b), 0);
    assert_true(bench_redis_sid_cmp(a, b) < 0);
}

static void test_record_roundtrip(void **state)
{
    (void)state;
    char path[] = "/tmp/seckill-record-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    audit_answer_t ans[] = {{281479271677953LL, 1000000000001LL}, {281479271677954LL, 0}};
    int64_t sold[] = {5, 0}, maybe[] = {1000000000002LL, 0, 9};
    audit_record_t rec = {.voucher_id = 12, .stock = 500, .unanswered = 3, .complete = 1,
                          .answers = ans, .n = 2, .soldout = sold, .nsoldout = 2,
                          .maybe = maybe, .nmaybe = 3};
    char err[256];
    assert_int_equal(audit_record_write(path, &rec, err, sizeof err), 0);
    audit_record_t back;
    assert_int_equal(audit_record_read(path, &back, err, sizeof err), 0);
    assert_int_equal(back.voucher_id, 12);
    assert_int_equal(back.stock, 500);
    assert_int_equal(back.unanswered, 3);
    assert_int_equal(back.complete, 1);
    assert_int_equal(back.n, 2);
    assert_int_equal(back.answers[0].order_id, 281479271677953LL);
    assert_int_equal(back.answers[0].user_id, 1000000000001LL);
    assert_int_equal(back.answers[1].user_id, 0);
    assert_int_equal(back.nsoldout, 2);
    assert_int_equal(back.soldout[0], 5);
    assert_int_equal(back.nmaybe, 3);
    assert_int_equal(back.maybe[0], 1000000000002LL);
    assert_int_equal(back.maybe[1], 0);
    assert_int_equal(back.maybe[2], 9);
    free(back.answers);
    free(back.soldout);
    free(back.maybe);
    /* a bad tagged line is refused with its line number */
    FILE *bad = fopen(path, "w");
    fputs("# seckill-bench-record v1 voucher=1\nmaybe x\n", bad);
    fclose(bad);
    assert_int_equal(audit_record_read(path, &back, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2: expected 'maybe <user id>'"));
    /* a hand-written file: ids only, blank lines, no header */
    FILE *f = fopen(path, "w");
    fputs("7\n\n8 3\n", f);
    fclose(f);
    assert_int_equal(audit_record_read(path, &back, err, sizeof err), 0);
    assert_int_equal(back.n, 2);
    assert_int_equal(back.voucher_id, -1);
    assert_int_equal(back.complete, 0);
    assert_int_equal(back.answers[1].user_id, 3);
    free(back.answers);
    f = fopen(path, "w");
    fputs("7\nnot a number\n", f);
    fclose(f);
    assert_int_equal(audit_record_read(path, &back, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2:"));
    unlink(path);
    assert_int_equal(audit_record_read(path, &back, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),          cmocka_unit_test(test_classify),
        cmocka_unit_test(test_phones),          cmocka_unit_test(test_stream_ids),
        cmocka_unit_test(test_record_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
