/* datadir.h -- the data directory and the secrets kept in it, opened defensively.
 *
 * The data directory holds the SQLite database, the private redis-server's data, the
 * token-signing key and the embedded default's admin token. Anyone who can write into it
 * can plant a token or a symlink, so it is only trusted when this process's user owns it
 * and nobody else may write to it:
 *   - created (with missing parents) with mode 0700;
 *   - an existing one owned by another user, or writable by group or others, is refused
 *     with a message saying why and how to fix it (server.c then exits non-zero);
 *   - its path is resolved once: datadir_prepare opens it, checks the descriptor with
 *     fstat and keeps it open. Everything in it is reached through that descriptor, so a
 *     symlink swapped in the path after the check changes nothing. Code taking names uses
 *     openat on datadir_fd(); SQLite and redis-server, which take paths, get
 *     /proc/self/fd/<fd>/NAME (datadir_pinned): the kernel resolves that through the open
 *     descriptor, and SQLite's own symlink resolution of it yields the directory's real
 *     path, free of the symlinks of the configured one (docs/reliability.md, "4.");
 *   - the database files and the private Redis's files are checked at start: a symlink or
 *     another user's file is refused, ours with group/other bits made private (fchmod,
 *     logged: a data dir from a build without umask 077);
 *   - secrets in it are read by secret.h as this user's alone (O_NOFOLLOW, fstat, mode
 *     0600) and created with O_EXCL and mode 0600 (an existing file is never overwritten).
 * server.c sets the process umask to 077 before anything is created, so the database,
 * its WAL and journal files and the private Redis's files are 0600 too.
 *
 * The commands beside serve (`seckill audit`, `redis rebuild`, `bench --data-dir`) find the
 * embedded default's stores in it: the private redis-server's socket redis/redis.sock and
 * the SQLite file seckill.db. State: the prepared directory's descriptor. */
#ifndef SECKILL_DATADIR_H
#define SECKILL_DATADIR_H

#include <stddef.h>

/* Creates path (mode 0700, parents too) or checks an existing one and its data files as
 * above, and keeps it open (replacing one prepared before). Returns 0, or -1 with the
 * reason in err. */
int datadir_prepare(const char *path, char *err, size_t errlen);

/* The prepared directory as a path through its descriptor, "/proc/self/fd/N" (NULL
 * before datadir_prepare), and the descriptor itself (-1 before). The descriptor is
 * close-on-exec: a child that needs the path keeps it open itself (redis_child.c). */
const char *datadir_pinned(void);
int datadir_fd(void);

/* Reads the first line of file `name` in dir into buf (without the line end); dir the
 * prepared data dir's path (then the name is looked up from its descriptor) or any
 * other. Returns 1 if read, 0 if the file does not exist, -1 with the reason in err if
 * it exists but may not be trusted (secret.h with SECRET_OURS) or cannot be read. */
int datadir_read_secret(const char *dir, const char *name, char *buf, size_t len,
                        char *err, size_t errlen);

/* Creates file `name` in dir (looked up as for datadir_read_secret) holding value and a
 * newline, mode 0600, failing if anything by that name exists. Returns 0, or -1 with the reason in err. */
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
