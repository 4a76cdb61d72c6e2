/* lab.c -- which modes are the lab's, and its delay injection (lab.h). */
#include "lab/lab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/app.h"

static const char *const point_names[LAB_P__COUNT] = {
    [LAB_P_CHECK_WRITE] = "check-write", [LAB_P_GET_DEL] = "get-del",
    [LAB_P_UNLOCK] = "unlock",           [LAB_P_POP_WRITE] = "pop-write",
    [LAB_P_SUBSCRIBE] = "subscribe",
};

#define DEFAULT_LEASE_MS 1200000   /* config.c's default: the course's tryLock(1200) s */

int lab_mode_is_sql(order_mode_t m)
{
    return m >= MODE_NAIVE && m <= MODE_REENTRANT;
}

int lab_mode_is_mq(order_mode_t m)
{
    return m == MODE_LIST || m == MODE_PUBSUB;
}

int lab_mode_is_lab(order_mode_t m)
{
    return lab_mode_is_sql(m) || lab_mode_is_mq(m);
}

const char *lab_point_name(int point)
{
    return point >= 0 && point < LAB_P__COUNT ? point_names[point] : "?";
}

static int lock_mode(order_mode_t m)
{
    return m >= MODE_LOCAL_LOCK && m <= MODE_REENTRANT;
}

/* Whether a pause point is on the path of this mode (a pause nowhere would only mislead). */
static int point_in_mode(int p, order_mode_t m)
{
    switch (p) {
    case LAB_P_CHECK_WRITE: return lab_mode_is_sql(m);
    case LAB_P_GET_DEL: return m == MODE_SETNX_OWNER || m == MODE_LUA_UNLOCK;
    case LAB_P_UNLOCK: return lock_mode(m);
    case LAB_P_POP_WRITE: return lab_mode_is_mq(m);
    case LAB_P_SUBSCRIBE: return m == MODE_PUBSUB;
    default: return 0;
    }
}

int lab_pause_parse(const char *spec, order_mode_t mode, int ms[LAB_P__COUNT], char *err,
                    size_t errlen)
{
    memset(ms, 0, LAB_P__COUNT * sizeof *ms);
    if (!spec || !*spec)
        return 0;
    if (!lab_mode_is_lab(mode)) {
        snprintf(err, errlen, "--lab-pause is for the lab modes only (naive ... pubsub, "
                 "docs/lab.md), not --mode %s", config_mode_name(mode));
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
        if (!point_in_mode(point, mode)) {
            snprintf(err, errlen, "--lab-pause: mode %s has no %s point (docs/lab.md)",
                     config_mode_name(mode), point_names[point]);
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
    int setnx_like = cfg->mode == MODE_SETNX || cfg->mode == MODE_SETNX_OWNER ||
                     cfg->mode == MODE_LUA_UNLOCK;
    if (cfg->lab_lease_ms != DEFAULT_LEASE_MS && !setnx_like) {
        snprintf(err, errlen, "--lab-lease-ms is for the lab modes setnx, setnx-owner and "
                 "lua-unlock only, not --mode %s", config_mode_name(cfg->mode));
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
