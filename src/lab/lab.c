/* lab.c -- the lab's rows of the table of order modes, which mode is which step, and its
 * delay injection (lab.h). */
#include "lab/lab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/app.h"
#include "lab/lab_store.h"
#include "sale/order_mode.h"

static const char *const point_names[LAB_P__COUNT] = {
    [LAB_P_CHECK_WRITE] = "check-write", [LAB_P_GET_DEL] = "get-del",
    [LAB_P_UNLOCK] = "unlock",           [LAB_P_POP_WRITE] = "pop-write",
    [LAB_P_SUBSCRIBE] = "subscribe",
};

#define DEFAULT_LEASE_MS 1200000   /* config.c's default: the course's tryLock(1200) s */

#define SQL_STEP(name) \
    {name, lab_sql_order, LAB_JOB_THREADS, lab_sql_start, lab_sql_stop, lab_store_voucher_counts}
#define MQ_STEP(name) {name, lab_mq_order, 0, lab_mq_start, lab_mq_stop}

static const order_mode_row_t rows[LAB__COUNT] = {
    [LAB_NAIVE] = SQL_STEP("naive"),
    [LAB_CAS_EQ] = SQL_STEP("cas-stock-eq"),
    [LAB_CAS_GT0] = SQL_STEP("cas-stock-gt0"),
    [LAB_LOCAL_LOCK] = SQL_STEP("local-lock"),
    [LAB_SETNX] = SQL_STEP("setnx"),
    [LAB_SETNX_OWNER] = SQL_STEP("setnx-owner"),
    [LAB_LUA_UNLOCK] = SQL_STEP("lua-unlock"),
    [LAB_REENTRANT] = SQL_STEP("reentrant"),
    [LAB_LIST] = MQ_STEP("list"),
    [LAB_PUBSUB] = MQ_STEP("pubsub"),
};

static const order_mode_plugin_t plugin = {
    .what = "a lab step", .rows = rows, .nrows = LAB__COUNT, .check = lab_config_check,
};

static int first_mode = -1;   /* the table's id of LAB_NAIVE, once registered */

int lab_register(void)
{
    if (first_mode < 0)
        first_mode = order_mode_plugin(&plugin);
    return first_mode < 0 ? -1 : 0;
}

int lab_step(order_mode_t m)
{
    return first_mode >= 0 && m >= first_mode && m < first_mode + LAB__COUNT ? m - first_mode
                                                                             : -1;
}

int lab_step_is_sql(int step)
{
    return step >= LAB_NAIVE && step <= LAB_REENTRANT;
}

int lab_step_is_mq(int step)
{
    return step == LAB_LIST || step == LAB_PUBSUB;
}

const char *lab_point_name(int point)
{
    return point >= 0 && point < LAB_P__COUNT ? point_names[point] : "?";
}

static int lock_step(int step)
{
    return step >= LAB_LOCAL_LOCK && step <= LAB_REENTRANT;
}

/* Whether a pause point is on the path of this step (a pause nowhere would only mislead). */
static int point_in_step(int p, int step)
{
    switch (p) {
    case LAB_P_CHECK_WRITE: return lab_step_is_sql(step);
    case LAB_P_GET_DEL: return step == LAB_SETNX_OWNER || step == LAB_LUA_UNLOCK;
    case LAB_P_UNLOCK: return lock_step(step);
    case LAB_P_POP_WRITE: return lab_step_is_mq(step);
    case LAB_P_SUBSCRIBE: return step == LAB_PUBSUB;
    default: return 0;
    }
}

int lab_pause_parse(const char *spec, order_mode_t mode, int ms[LAB_P__COUNT], char *err,
                    size_t errlen)
{
    memset(ms, 0, LAB_P__COUNT * sizeof *ms);
    if (!spec || !*spec)
        return 0;
    int step = lab_step(mode);
    if (step < 0) {
        snprintf(err, errlen, "--lab-pause is for the lab modes only (naive ... pubsub, "
                 "docs/lab.md), not --mode %s", order_mode_name(mode));
        return -1;
    }
    const char *p = spec;
    while (*p) {
        size_t n = strcspn(p, ":,");
        int point = -1;
        for (int i = 0; i < LAB_P__COUNT; i++)
            if (strlen(point_names[i]) == n && memcmp(point_names[i], p, n) == 0)
                point = i;
        if (point < 0 || p[n] != ':') {
            snprintf(err, errlen, "--lab-pause: expected POINT:MS[,POINT:MS] with POINT one of "
                     "check-write, get-del, unlock, pop-write, subscribe; got \"%s\"", spec);
            return -1;
        }
        if (!point_in_step(point, step)) {
            snprintf(err, errlen, "--lab-pause: mode %s has no %s point (docs/lab.md)",
                     order_mode_name(mode), point_names[point]);
            return -1;
        }
        char *end;
        errno = 0;
        long v = strtol(p + n + 1, &end, 10);
        if (errno || end == p + n + 1 || v < 0 || v > 600000 || (*end && *end != ',')) {
            snprintf(err, errlen, "--lab-pause: %s needs a delay of 0..600000 ms", point_names[point]);
            return -1;
        }
        ms[point] = (int)v;
        p = *end ? end + 1 : end;
    }
    return 0;
}

int lab_config_check(config_t *cfg, char *err, size_t errlen)
{
    if (lab_pause_parse(cfg->lab_pause, cfg->mode, cfg->lab_pause_ms, err, errlen) < 0)
        return -1;
    int step = lab_step(cfg->mode);
    int setnx_like = step == LAB_SETNX || step == LAB_SETNX_OWNER || step == LAB_LUA_UNLOCK;
    if (cfg->lab_lease_ms != DEFAULT_LEASE_MS && !setnx_like) {
        snprintf(err, errlen, "--lab-lease-ms is for the lab modes setnx, setnx-owner and "
                 "lua-unlock only, not --mode %s", order_mode_name(cfg->mode));
        return -1;
    }
    return 0;
}

void lab_pause(const struct app *app, int point)
{
    int ms = app->cfg.lab_pause_ms[point];
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
