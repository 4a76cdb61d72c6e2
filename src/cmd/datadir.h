/* datadir.h -- the command-line tools' default addresses: a data directory laid out as
 * `seckill serve --data-dir` lays it out gives the Redis socket (redis/redis.sock) and
 * the SQLite file (seckill.db), so `seckill audit` and `seckill redis` need no URLs on
 * the embedded default. */
#ifndef SECKILL_DATADIR_H
#define SECKILL_DATADIR_H

#include <stddef.h>

#define DATADIR_URL_MAX 700

/* With data_dir given, or neither *redis nor *db: fills the NULL ones from data_dir
 * (./var when NULL) into rbuf / dbuf. Then both must be set. Returns 0, or 2 (the tools'
 * usage exit status) after a message on stderr starting with `tool` ("seckill audit"). */
int datadir_urls(const char *tool, const char *data_dir, const char **redis, const char **db,
                 char rbuf[DATADIR_URL_MAX], char dbuf[DATADIR_URL_MAX]);

#endif
