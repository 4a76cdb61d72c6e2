/* datadir.c -- the data directory and its secrets (datadir.h). */
#include "core/datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p with mode 0700 for what it creates. */
static int make_dirs(const char *path)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

int datadir_prepare(const char *path, char *err, size_t errlen)
{
    if (path == NULL || path[0] == '\0') {
        snprintf(err, errlen, "no data directory given (--data-dir)");
        return -1;
    }
    if (make_dirs(path) < 0) {
        snprintf(err, errlen, "cannot create data directory %s: %s", path, strerror(errno));
        return -1;
    }
    /* The directory itself (through a symlink to it, if the operator made one): what
     * matters is who may write into the place our files go. */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "cannot open data directory %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen,
                 "data directory %s belongs to uid %u, not to this user (uid %u): its admin "
                 "token and database could have been planted; use a directory of your own "
                 "(--data-dir) or chown it", path, (unsigned)st.st_uid, (unsigned)geteuid());
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen,
                 "data directory %s is writable by %s (mode %04o): others could plant files "
                 "in it; chmod 700 it", path,
                 (st.st_mode & S_IWOTH) ? "every user" : "its group",
                 (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

int datadir_read_secret(const char *dir, const char *name, char *buf, size_t len, char *err,
                        size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s%s", path, strerror(errno),
                 errno == ELOOP ? " (a symlink: refused; remove it)" : "");
        return -1;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) < 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (st.st_uid != geteuid())
        why = "owned by another user";
    else if (st.st_mode & 077)
        why = "readable or writable by others (chmod 600 it)";
    if (why != NULL) {
        snprintf(err, errlen, "%s: %s: refused", path, why);
        close(fd);
        return -1;
    }
    size_t n = 0;
    while (n + 1 < len) {
        ssize_t got = read(fd, buf + n, len - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    return 1;
}

int datadir_write_secret(const char *dir, const char *name, const char *value, char *err,
                         size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = strlen(value);
    int ok = write(fd, value, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    if (close(fd) < 0)
        ok = 0;
    if (!ok) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

int datadir_urls(const char *data_dir, const char **redis, const char **db,
                 char rbuf[DATADIR_URL_MAX], char dbuf[DATADIR_URL_MAX], char *err,
                 size_t errlen)
{
    int have_redis = *redis && **redis, have_db = *db && **db;
    if (data_dir || (!have_redis && !have_db)) {
        const char *dd = data_dir ? data_dir : "./var";
        /* realpath allocates: no PATH_MAX buffer to overflow or truncate into. */
        char *abs = realpath(dd, NULL);
        if (!abs) {
            snprintf(err, errlen, "data dir %s: %s", dd, strerror(errno));
            return -1;
        }
        if (strlen(abs) + sizeof "sqlite:/redis/redis.sock" > DATADIR_URL_MAX) {
            snprintf(err, errlen, "data dir path too long: %s", abs);
            free(abs);
            return -1;
        }
        if (!have_redis) {
            snprintf(rbuf, DATADIR_URL_MAX, "unix:%s/redis/redis.sock", abs);
            *redis = rbuf;
            have_redis = 1;
        }
        if (!have_db) {
            snprintf(dbuf, DATADIR_URL_MAX, "sqlite:%s/seckill.db", abs);
            *db = dbuf;
            have_db = 1;
        }
        free(abs);
    }
    if (!have_redis || !have_db) {
        snprintf(err, errlen, "give both --redis and --db, or --data-dir");
        return -1;
    }
    return 0;
}
