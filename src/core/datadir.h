/* datadir.h -- the data directory and the secrets kept in it, opened defensively.
 *
 * The data directory holds the SQLite database, the private redis-server's data and the
 * embedded default's admin token. Anyone who can write into it can plant a token or a
 * symlink, so it is only trusted when this process's user owns it and nobody else may
 * write to it:
 *   - created (with missing parents) with mode 0700;
 *   - an existing one owned by another user, or writable by group or others, is refused
 *     with a message saying why and how to fix it (server.c then exits non-zero);
 *   - secrets in it are opened with O_NOFOLLOW (a symlink is refused, never followed),
 *     read only from a regular file of ours with no group/other access, and created with
 *     O_EXCL and mode 0600 (an existing file is never overwritten).
 * server.c sets the process umask to 077 before anything is created, so the database,
 * its WAL and journal files and the private Redis's files are 0600 too.
 *
 * The commands beside serve (`seckill audit`, `redis rebuild`, `bench --data-dir`) find the
 * embedded default's stores in it: the private redis-server's socket redis/redis.sock and
 * the SQLite file seckill.db. No state. */
#ifndef SECKILL_DATADIR_H
#define SECKILL_DATADIR_H

#include <stddef.h>

/* Creates path (mode 0700, parents too) or checks an existing one as above. Returns 0,
 * or -1 with the reason in err. */
int datadir_prepare(const char *path, char *err, size_t errlen);

/* Reads the first line of file `name` in dir into buf (without the line end). Returns
 * 1 if read, 0 if the file does not exist, -1 with the reason in err if it exists but
 * may not be trusted (a symlink, not a regular file, not ours, readable or writable by
 * others) or cannot be read. */
int datadir_read_secret(const char *dir, const char *name, char *buf, size_t len,
                        char *err, size_t errlen);

/* Creates file `name` in dir holding value and a newline, mode 0600, failing if
 * anything by that name exists. Returns 0, or -1 with the reason in err. */
int datadir_write_secret(const char *dir, const char *name, const char *value, char *err,
                         size_t errlen);

#define DATADIR_URL_MAX 700

/* The commands' Redis and SQL URLs. With data_dir given, or neither *redis nor *db (NULL
 * or "": not given): fills the missing ones from data_dir (./var when NULL) into rbuf /
 * dbuf as unix:ABS/redis/redis.sock and sqlite:ABS/seckill.db (ABS its absolute path).
 * Then both must be set. Returns 0, or -1 with the reason in err. */
int datadir_urls(const char *data_dir, const char **redis, const char **db,
                 char rbuf[DATADIR_URL_MAX], char dbuf[DATADIR_URL_MAX], char *err,
                 size_t errlen);

#endif
