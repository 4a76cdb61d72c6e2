/* datadir.c -- the data directory and its secrets (datadir.h). */
#include "core/datadir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/secret.h"

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

/* The directory opened and checked by datadir_prepare, kept for the process's life:
 * every later name in it is looked up from this descriptor, never from the path again. */
static int pinned_fd = -1;
static char pinned_path[32];    /* /proc/self/fd/<pinned_fd> */
static char pinned_given[4096]; /* the path it was opened by, for messages */

/* Data-dir files the server does not read as secrets but that hold its data: the SQLite
 * database and its side files. The private Redis's files (redis/, one level of
 * subdirectories such as appendonlydir/) are walked too. */
static const char *const data_files[] = {
    "seckill.db", "seckill.db-wal", "seckill.db-shm", "seckill.db-journal",
};

/* One entry of the data dir (name in directory at): a symlink or another user's file is
 * refused; ours with group/other bits is made private through its descriptor and said
 * in the log (a data dir from a build without umask 077). Sockets and the like are left
 * alone (redis.sock is made 0700 by redis-server itself). depth: subdirectories still to
 * walk. Returns 0, or -1 with the reason in err. */
static int fix_entry(int at, const char *shown, const char *name, int depth, char *err,
                     size_t errlen)
{
    struct stat st;
    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "%s/%s: %s", shown, name, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        snprintf(err, errlen, "%s/%s is a symlink: refused (its data would go wherever it "
                 "points); remove it", shown, name);
        return -1;
    }
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return 0;
    int fd = openat(at, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "%s/%s: %s", shown, name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen, "%s/%s belongs to uid %u, not to this user (uid %u): refused; "
                 "chown it", shown, name, (unsigned)st.st_uid, (unsigned)geteuid());
        close(fd);
        return -1;
    }
    if (st.st_mode & 077) {
        mode_t to = st.st_mode & 0700;
        if (fchmod(fd, to) < 0) {
            snprintf(err, errlen, "%s/%s has mode %04o and cannot be made %04o: %s", shown,
                     name, (unsigned)(st.st_mode & 07777), (unsigned)to, strerror(errno));
            close(fd);
            return -1;
        }
        log_warn("%s/%s had mode %04o (readable or writable by others): made %04o", shown,
                 name, (unsigned)(st.st_mode & 07777), (unsigned)to);
    }
    int rc = 0;
    if (S_ISDIR(st.st_mode) && depth > 0) {
        DIR *d = fdopendir(fd);
        if (d == NULL) {
            snprintf(err, errlen, "%s/%s: %s", shown, name, strerror(errno));
            close(fd);
            return -1;
        }
        char sub[4200];
        snprintf(sub, sizeof sub, "%s/%s", shown, name);
        struct dirent *e;
        while (rc == 0 && (e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                rc = fix_entry(dirfd(d), sub, e->d_name, depth - 1, err, errlen);
        closedir(d);
        return rc;
    }
    close(fd);
    return rc;
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
    /* The path is resolved this once (through a symlink to the directory, if the operator
     * made one): the descriptor pins what it resolved to, the checks below are on it, and
     * every later file is reached through it (datadir_pinned), so a symlink swapped in the
     * path afterwards changes nothing. */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "cannot open data directory %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen,
                 "data directory %s belongs to uid %u, not to this user (uid %u): its admin "
                 "token and database could have been planted; use a directory of your own "
                 "(--data-dir) or chown it", path, (unsigned)st.st_uid, (unsigned)geteuid());
        close(fd);
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen,
                 "data directory %s is writable by %s (mode %04o): others could plant files "
                 "in it; chmod 700 it", path,
                 (st.st_mode & S_IWOTH) ? "every user" : "its group",
                 (unsigned)(st.st_mode & 07777));
        close(fd);
        return -1;
    }
    for (size_t i = 0; i < sizeof data_files / sizeof data_files[0]; i++)
        if (fix_entry(fd, path, data_files[i], 0, err, errlen) < 0) {
            close(fd);
            return -1;
        }
    if (fix_entry(fd, path, "redis", 2, err, errlen) < 0) {
        close(fd);
        return -1;
    }
    if (pinned_fd >= 0)
        close(pinned_fd);
    pinned_fd = fd;
    snprintf(pinned_path, sizeof pinned_path, "/proc/self/fd/%d", fd);
    snprintf(pinned_given, sizeof pinned_given, "%s", path);
    return 0;
}

const char *datadir_pinned(void)
{
    return pinned_fd >= 0 ? pinned_path : NULL;
}

int datadir_fd(void)
{
    return pinned_fd;
}

/* The directory a name in dir is looked up from: the pinned descriptor when dir is the
 * prepared data dir, else dir's path (a command reading a data dir it did not prepare). */
static int lookup_in(const char *dir, const char *name, char *path, size_t pathlen)
{
    if (pinned_fd >= 0 && strcmp(dir, pinned_given) == 0) {
        snprintf(path, pathlen, "%s", name);
        return pinned_fd;
    }
    snprintf(path, pathlen, "%s/%s", dir, name);
    return AT_FDCWD;
}

int datadir_read_secret(const char *dir, const char *name, char *buf, size_t len, char *err,
                        size_t errlen)
{
    char path[4200], shown[4200];
    int at = lookup_in(dir, name, path, sizeof path);
    snprintf(shown, sizeof shown, "%s/%s", dir, name);
    return secret_read(at, path, shown, SECRET_OURS | SECRET_LINE, 0, buf, len, NULL, err,
                       errlen);
}

int datadir_write_secret(const char *dir, const char *name, const char *value, char *err,
                         size_t errlen)
{
    char path[4200], shown[4200];
    int at = lookup_in(dir, name, path, sizeof path);
    snprintf(shown, sizeof shown, "%s/%s", dir, name);
    int fd = openat(at, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", shown, strerror(errno));
        return -1;
    }
    size_t n = strlen(value);
    int ok = write(fd, value, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    if (close(fd) < 0)
        ok = 0;
    if (!ok) {
        snprintf(err, errlen, "cannot write %s: %s", shown, strerror(errno));
        unlinkat(at, path, 0);
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
