/* test_lab.c -- the lab as a plug-in (lab.h): its steps are rows of the table of order
 * modes after lab_register, and only then; --lab-pause parsing, which points each mode
 * has, and the refusal of both lab flags outside the lab modes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/config.h"
#include "lab/lab.h"
#include "sale/order_mode.h"

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
    /* as main.c does: the generic checks, then the table's row and the plug-ins' checks */
    int rc = config_load(c, argc, argv, err, errlen);
    return rc == 0 ? order_mode_pick(c, err, errlen) : rc;
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

/* Before lab_register the table has the service's modes only; the lab's names are
 * unknown, and --mode's error lists no lab step. */
static void test_unregistered(void **state)
{
    (void)state;
    config_t c;
    char err[512];
    assert_int_equal(load(&c, err, sizeof err, "naive", NULL, NULL), -1);
    assert_non_null(strstr(err, "--mode must be stream, queue or sync"));
    assert_null(strstr(err, "lab"));
    assert_int_equal(load(&c, err, sizeof err, "sync", NULL, NULL), 0);
    assert_int_equal(c.mode, MODE_SYNC);
    assert_int_equal(lab_step(c.mode), -1);
    assert_null(order_mode_row(MODE__SERVICE));
}

static int setup(void **state)
{
    (void)state;
    return lab_register();
}

static void test_modes(void **state)
{
    (void)state;
    config_t c;
    char err[512];
    static const char *const names[LAB__COUNT] = {
        "naive", "cas-stock-eq", "cas-stock-gt0", "local-lock", "setnx", "setnx-owner",
        "lua-unlock", "reentrant", "list", "pubsub"};
    for (int i = 0; i < LAB__COUNT; i++) {
        assert_int_equal(load(&c, err, sizeof err, names[i], NULL, NULL), 0);
        assert_int_equal(lab_step(c.mode), i);
        assert_string_equal(order_mode_name(c.mode), names[i]);
        const order_mode_row_t *row = order_mode_row(c.mode);
        assert_non_null(row);
        assert_non_null(row->order);
        assert_non_null(row->start);
        assert_non_null(row->stop);
        assert_int_equal(row->job_threads, lab_step_is_sql(i) ? LAB_JOB_THREADS : 0);
        assert_int_equal(lab_step_is_sql(i), i <= LAB_REENTRANT);
        assert_int_equal(lab_step_is_mq(i), i == LAB_LIST || i == LAB_PUBSUB);
    }
    /* the service's rows are where config.h says, untouched by the lab's */
    assert_string_equal(order_mode_name(MODE_STREAM), "stream");
    assert_string_equal(order_mode_name(MODE_QUEUE), "queue");
    assert_string_equal(order_mode_name(MODE_SYNC), "sync");
    assert_int_equal(lab_step(MODE_STREAM), -1);
    assert_int_equal(lab_register(), 0);   /* once: a second call adds nothing */
    assert_int_equal(load(&c, err, sizeof err, "pubsub", NULL, NULL), 0);
    assert_int_equal(lab_step(c.mode), LAB_PUBSUB);
    assert_null(order_mode_row(c.mode + 1));
    /* a name nobody has: the error names every row */
    assert_int_equal(load(&c, err, sizeof err, "nope", NULL, NULL), -1);
    assert_non_null(strstr(err, "a lab step (naive, cas-stock-eq"));
    assert_non_null(strstr(err, "pubsub), not \"nope\""));
    assert_string_equal(lab_point_name(LAB_P_GET_DEL), "get-del");
}

int main(void)
{
    const struct CMUnitTest before[] = {
        cmocka_unit_test(test_unregistered),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pause_points),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_modes),
    };
    int failed = cmocka_run_group_tests_name("unregistered", before, NULL, NULL);
    return failed + cmocka_run_group_tests_name("lab", tests, setup, NULL);
}
