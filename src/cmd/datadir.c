/* datadir.c -- the tools' default addresses from a data directory (datadir.h). */
#include "cmd/datadir.h"

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
        /* realpath allocates: no PATH_MAX buffer to overflow or truncate into. */
        char *abs = realpath(dd, NULL);
        if (!abs) {
            fprintf(stderr, "%s: data dir %s: %s\n", tool, dd, strerror(errno));
            return 2;
        }
        if (strlen(abs) + sizeof "sqlite:/redis/redis.sock" > DATADIR_URL_MAX) {
            fprintf(stderr, "%s: data dir path too long: %s\n", tool, abs);
            free(abs);
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
        free(abs);
    }
    if (!*redis || !*db) {
        fprintf(stderr, "%s: give both --redis and --db, or --data-dir\n", tool);
        return 2;
    }
    return 0;
}
