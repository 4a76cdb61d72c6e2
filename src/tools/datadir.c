/* datadir.c -- the tools' default addresses from a data directory (datadir.h). */
#include "datadir.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int datadir_urls(const char *tool, const char *data_dir, const char **redis, const char **db,
                 char rbuf[DATADIR_URL_MAX], char dbuf[DATADIR_URL_MAX])
{
    if (data_dir || (!*redis && !*db)) {
        const char *dd = data_dir ? data_dir : "./var";
        char abs[512];
        if (!realpath(dd, abs)) {
            fprintf(stderr, "%s: data dir %s: %s\n", tool, dd, strerror(errno));
            return 2;
        }
        if (!*redis) {
            snprintf(rbuf, DATADIR_URL_MAX, "unix:%s/redis/redis.sock", abs);
            *redis = rbuf;
        }
        if (!*db) {
            snprintf(dbuf, DATADIR_URL_MAX, "sqlite:%s/seckill.db", abs);
            *db = dbuf;
        }
    }
    if (!*redis || !*db) {
        fprintf(stderr, "%s: give both --redis and --db, or --data-dir\n", tool);
        return 2;
    }
    return 0;
}
