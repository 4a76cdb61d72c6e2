/* test_api.c -- unit tests for the pure parts of the API layer: id and phone parsing,
 * token shape, admission result mapping, metrics bucketing and rendering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sale/admission.h"
#include "api/api.h"
#include "core/app.h"
#include "auth/auth.h"
#include "server/metrics.h"
#include "core/sb.h"
#include "server/worker.h"

static int parse(const char *z, int64_t *out)
{
    return api_parse_id(z, strlen(z), out);
}

static void test_parse_id_accepts(void **state)
{
    (void)state;
    static const struct { const char *in; int64_t want; } ok[] = {
        { "1", 1 },
        { "42", 42 },
        { "0042", 42 },
        { "418027448932761601", 418027448932761601LL },
        { "9223372036854775807", INT64_MAX },
        { "00000000000000000000009", 9 },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        int64_t v = -7;
        assert_int_equal(parse(ok[i].in, &v), 0);
        assert_true(v == ok[i].want);
    }
}

static void test_parse_id_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "0", "000", "-1", "+1", " 1", "1 ", "1a", "a1", "0x10", "1.0", "1e3",
        "9223372036854775808", "18446744073709551616", "99999999999999999999999",
        "%31", "1/2",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t v = -7;
        assert_int_equal(parse(bad[i], &v), -1);
        assert_true(v == -7);   /* untouched on failure */
    }
    int64_t v;
    assert_int_equal(api_parse_id(NULL, 0, &v), -1);
    /* only n bytes count: "12" within "123" */
    assert_int_equal(api_parse_id("123", 2, &v), 0);
    assert_true(v == 12);
}

static void test_phone(void **state)
{
    (void)state;
    static const struct { const char *in; int valid; } cases[] = {
        { "13812345678", 1 }, { "13012345678", 1 }, { "18012345678", 1 },
        { "18912345678", 1 }, { "14512345678", 1 }, { "14712345678", 1 },
        { "14912345678", 1 }, { "14412345678", 0 }, { "14612345678", 0 },
        { "15012345678", 1 }, { "15312345678", 1 }, { "15412345678", 0 },
        { "15512345678", 1 }, { "15912345678", 1 },
        { "15,12345678", 1 },   /* the literal comma in [0-3,5-9], as Java matches it */
        { "16612345678", 1 }, { "16512345678", 0 }, { "17012345678", 1 },
        { "17112345678", 1 }, { "17212345678", 0 }, { "17412345678", 0 },
        { "17812345678", 1 }, { "19812345678", 1 }, { "19912345678", 1 },
        { "19712345678", 0 }, { "12012345678", 0 }, { "10012345678", 0 },
        { "11012345678", 0 }, { "23812345678", 0 },
        { "1381234567", 0 }, { "138123456789", 0 }, { "1381234567a", 0 },
        { "13,12345678", 0 }, { "1381234 678", 0 }, { "", 0 }, { " 13812345678", 0 },
        { "13812345678\n", 0 }, { "１3812345678", 0 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (api_phone_valid(cases[i].in) != cases[i].valid) {
            fail_msg("phone \"%s\": want %d", cases[i].in, cases[i].valid);
        }
    }
    assert_int_equal(api_phone_valid(NULL), 0);
}

static void test_token_shape(void **state)
{
    (void)state;
    assert_true(auth_token_valid("0123456789abcdef0123456789abcdef"));
    assert_true(auth_token_valid("9f0c3c0e2b7d4a5a8a1c4c8e1f6b2d3a"));
    assert_false(auth_token_valid(NULL));
    assert_false(auth_token_valid(""));
    assert_false(auth_token_valid("0123456789abcdef0123456789abcde"));    /* 31 */
    assert_false(auth_token_valid("0123456789abcdef0123456789abcdef0"));  /* 33 */
    assert_false(auth_token_valid("0123456789ABCDEF0123456789abcdef"));   /* upper case */
    assert_false(auth_token_valid("0123456789abcdeg0123456789abcdef"));
    assert_false(auth_token_valid("01234567-89ab-cdef-0123-456789abcd"));
    assert_false(auth_token_valid("Bearer 0123456789abcdef0123456789ab"));
}

static void test_admission_mapping(void **state)
{
    (void)state;
    static const struct { int code; const char *msg, *mcode; outcome_t out; } m[] = {
        { ADMIT_SOLD_OUT, "库存不足", "SOLD_OUT", OUT_SOLD_OUT },
        { ADMIT_DUPLICATE, "不能重复下单", "DUPLICATE", OUT_DUPLICATE },
        { ADMIT_NOT_STARTED, "秒杀尚未开始！", "NOT_STARTED", OUT_NOT_STARTED },
        { ADMIT_ENDED, "秒杀已经结束！", "ENDED", OUT_ENDED },
        { ADMIT_NO_VOUCHER, "优惠券不存在", "NO_VOUCHER", OUT_NO_VOUCHER },
        { ADMIT_PAUSED, "秒杀已暂停", "PAUSED", OUT_PAUSED },
        { ADMIT_QUEUE_REQUIRED, "请先排队", "QUEUE_REQUIRED", OUT_QUEUE_REQUIRED },
        { ADMIT_UNAVAILABLE, "服务器异常", "UNAVAILABLE", OUT_UNAVAILABLE },
        { ADMIT_RETRY, "系统繁忙，请重试", "RETRY", OUT_UNAVAILABLE },
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        assert_string_equal(admission_msg(m[i].code), m[i].msg);
        assert_string_equal(admission_code(m[i].code), m[i].mcode);
        assert_int_equal(admission_outcome(m[i].code), m[i].out);
    }
    assert_null(admission_msg(ADMIT_OK));
    assert_null(admission_code(ADMIT_OK));
    assert_int_equal(admission_outcome(ADMIT_OK), OUT_OK);
    assert_null(admission_msg(ADMIT_QUEUE_REQUIRED + 1));
    assert_null(admission_code(-3));
    assert_int_equal(admission_outcome(42), OUT_OTHER);
}

static void test_metrics(void **state)
{
    (void)state;
    static metrics_shard_t shard0, shard1;
    static metrics_t global;
    worker_t w0, w1;
    memset(&w0, 0, sizeof(w0));
    memset(&w1, 0, sizeof(w1));
    memset(&shard0, 0, sizeof(shard0));
    memset(&shard1, 0, sizeof(shard1));
    memset(&global, 0, sizeof(global));
    w0.m = &shard0;
    w1.m = &shard1;
    worker_t *ws[2] = { &w0, &w1 };
    app_t app;
    memset(&app, 0, sizeof(app));
    app.nworkers = 2;
    app.workers = ws;
    app.metrics = &global;

    metrics_seckill_done(&shard0, OUT_OK, 50000);        /* 0.05 ms: first bucket */
    metrics_seckill_done(&shard0, OUT_OK, 100000);       /* exactly 0.1 ms: first bucket */
    metrics_seckill_done(&shard1, OUT_SOLD_OUT, 100001); /* second bucket */
    metrics_seckill_done(&shard1, OUT_UNAVAILABLE, 6000000000ull); /* +Inf */
    assert_int_equal(atomic_load(&shard0.lat_bucket[0]), 2);
    assert_int_equal(atomic_load(&shard1.lat_bucket[1]), 1);
    assert_int_equal(atomic_load(&shard1.lat_bucket[METRICS_LAT_BUCKETS - 1]), 1);
    metric_add(&global.orders_persisted, 7);

    sb_t out = SB_INIT;
    metrics_render(&app, &out);
    const char *t = sb_cstr(&out);
    assert_non_null(strstr(t, "seckill_seckill_requests_total{outcome=\"ok\"} 2\n"));
    assert_non_null(strstr(t, "seckill_seckill_requests_total{outcome=\"sold_out\"} 1\n"));
    assert_non_null(strstr(t, "seckill_seckill_requests_total{outcome=\"unavailable\"} 1\n"));
    assert_non_null(strstr(t, "seckill_request_duration_seconds_bucket{le=\"0.0001\"} 2\n"));
    assert_non_null(strstr(t, "seckill_request_duration_seconds_bucket{le=\"0.00025\"} 3\n"));
    assert_non_null(strstr(t, "seckill_request_duration_seconds_bucket{le=\"5\"} 3\n"));
    assert_non_null(strstr(t, "seckill_request_duration_seconds_bucket{le=\"+Inf\"} 4\n"));
    assert_non_null(strstr(t, "seckill_request_duration_seconds_count 4\n"));
    assert_non_null(strstr(t, "seckill_request_duration_seconds_sum 6.000250\n"));
    assert_non_null(strstr(t, "seckill_orders_persisted_total 7\n"));
    assert_non_null(strstr(t, "# TYPE seckill_stream_lag gauge\n"));
    assert_non_null(strstr(t, "seckill_redis_up{worker=\"1\"} 0\n"));
    sb_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_id_accepts),
        cmocka_unit_test(test_parse_id_rejects),
        cmocka_unit_test(test_phone),
        cmocka_unit_test(test_token_shape),
        cmocka_unit_test(test_admission_mapping),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
