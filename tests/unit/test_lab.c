/* test_lab.c -- the lab's flags (lab.h): --lab-pause parsing, which points each mode has,
 * and the refusal of both lab flags outside the lab modes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/config.h"
#include "lab/lab.h"

static int load(config_t *c, char *err, size_t errlen, const char *mode, const char *pause,
                const char *lease)
{
    char *argv[8];
    int argc = 0;
    argv[argc++] = "serve";
    argv[argc++] = "--mode";
    argv[argc++] = (char *)mode;
    if (pause) {
        argv[argc++] = "--lab-pause";
        argv[argc++] = (char *)pause;
    }
    if (lease) {
        argv[argc++] = "--lab-lease-ms";
        argv[argc++] = (char *)lease;
    }
    argv[argc] = NULL;
    /* as main.c does: the generic checks, then the lab flags' */
    int rc = config_load(c, argc, argv, err, errlen);
    return rc == 0 ? lab_config_check(c, err, errlen) : rc;
}

static void test_pause_points(void **state)
{
    (void)state;
    config_t c;
    char err[512];
    assert_int_equal(load(&c, err, sizeof err, "setnx-owner", "check-write:300,get-del:20", "100"), 0);
    assert_int_equal(c.lab_pause_ms[LAB_P_CHECK_WRITE], 300);
    assert_int_equal(c.lab_pause_ms[LAB_P_GET_DEL], 20);
    assert_int_equal(c.lab_pause_ms[LAB_P_UNLOCK], 0);
    assert_int_equal(c.lab_lease_ms, 100);
    assert_int_equal(load(&c, err, sizeof err, "pubsub", "subscribe:900", NULL), 0);
    assert_int_equal(c.lab_pause_ms[LAB_P_SUBSCRIBE], 900);
    assert_int_equal(load(&c, err, sizeof err, "list", "pop-write:5", NULL), 0);
    assert_int_equal(load(&c, err, sizeof err, "naive", NULL, NULL), 0);
    assert_int_equal(c.lab_pause_ms[LAB_P_CHECK_WRITE], 0);
}

static void test_refused(void **state)
{
    (void)state;
    config_t c;
    char err[512];
    /* outside the lab modes */
    assert_int_equal(load(&c, err, sizeof err, "stream", "check-write:10", NULL), -1);
    assert_non_null(strstr(err, "lab modes only"));
    assert_int_equal(load(&c, err, sizeof err, "sync", "check-write:10", NULL), -1);
    assert_int_equal(load(&c, err, sizeof err, "stream", NULL, "100"), -1);
    assert_non_null(strstr(err, "--lab-lease-ms"));
    assert_int_equal(load(&c, err, sizeof err, "reentrant", NULL, "100"), -1);
    /* a point the mode does not have */
    assert_int_equal(load(&c, err, sizeof err, "naive", "get-del:10", NULL), -1);
    assert_non_null(strstr(err, "has no get-del point"));
    assert_int_equal(load(&c, err, sizeof err, "setnx", "get-del:10", NULL), -1);
    assert_int_equal(load(&c, err, sizeof err, "list", "subscribe:10", NULL), -1);
    /* bad syntax */
    assert_int_equal(load(&c, err, sizeof err, "naive", "check-write", NULL), -1);
    assert_int_equal(load(&c, err, sizeof err, "naive", "check-write:-1", NULL), -1);
    assert_int_equal(load(&c, err, sizeof err, "naive", "check-write:10x", NULL), -1);
    assert_int_equal(load(&c, err, sizeof err, "naive", "nowhere:10", NULL), -1);
    assert_int_equal(load(&c, err, sizeof err, "naive", "check-write:600001", NULL), -1);
}

static void test_modes(void **state)
{
    (void)state;
    assert_true(lab_mode_is_sql(MODE_NAIVE) && lab_mode_is_sql(MODE_REENTRANT));
    assert_false(lab_mode_is_sql(MODE_SYNC) || lab_mode_is_sql(MODE_LIST));
    assert_true(lab_mode_is_mq(MODE_LIST) && lab_mode_is_mq(MODE_PUBSUB));
    assert_false(lab_mode_is_lab(MODE_STREAM) || lab_mode_is_lab(MODE_QUEUE) ||
                 lab_mode_is_lab(MODE_SYNC));
    for (int m = 0; m < MODE__COUNT; m++)
        assert_string_not_equal(config_mode_name((order_mode_t)m), "?");
    assert_string_equal(lab_point_name(LAB_P_GET_DEL), "get-del");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pause_points),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
