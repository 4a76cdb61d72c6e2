/* secret.c -- reading secret files with one set of checks (secret.h). */
#include "core/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STR_(x) #x
#define STR(x) STR_(x)

int secret_check_fd(int fd, const char *path, int flags, char *err, size_t errlen)
{
    struct stat st;
    const char *why = NULL;
    char owner[96];
    if (fstat(fd, &st) < 0) {
        why = strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
        why = "not a regular file";
    } else if (st.st_uid != geteuid() && ((flags & SECRET_OURS) || st.st_uid != 0)) {
        snprintf(owner, sizeof owner, "owned by uid %u, not by this user (uid %u)%s",
                 (unsigned)st.st_uid, (unsigned)geteuid(),
                 (flags & SECRET_OURS) ? "" : " or root");
        why = owner;
    } else if (st.st_mode & S_IRWXO) {
        why = "readable or writable by others (chmod 600 it)";
    } else if (st.st_mode & S_IRWXG) {
        /* The package's way: root owns it, the service's group may read it (0640). */
        int root_group_read = !(flags & SECRET_OURS) && st.st_uid == 0 &&
                              st.st_gid == getegid() && !(st.st_mode & (S_IWGRP | S_IXGRP));
        if (!root_group_read)
            why = "readable or writable by its group (chmod 600 it; or 0640 root:<the "
                  "service's group>)";
    }
    if (why == NULL)
        return 0;
    snprintf(err, errlen, "%s: %s: refused", path, why);
    return -1;
}

const char *secret_weak(const void *p, size_t n)
{
    unsigned char seen[256] = {0};
    int distinct = 0;
    for (size_t i = 0; i < n; i++)
        if (!seen[((const unsigned char *)p)[i]]++)
            distinct++;
    return distinct < SECRET_MIN_DISTINCT
               ? "too little variety (fewer than " STR(SECRET_MIN_DISTINCT) " different bytes): use a random "
                 "one, e.g. `head -c 32 /dev/urandom | xxd -p -c 64`"
               : NULL;
}

int secret_read(int dirfd, const char *path, const char *shown, int flags, size_t min_len,
                char *buf, size_t cap, size_t *len, char *err, size_t errlen)
{
    int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s%s", shown, strerror(errno),
                 errno == ELOOP ? " (a symlink: refused; put the file itself there)" : "");
        return -1;
    }
    if (secret_check_fd(fd, shown, flags, err, errlen) < 0) {
        close(fd);
        return -1;
    }
    size_t n = 0;
    int more = 0;
    for (;;) {
        char extra;
        ssize_t got = n + 1 < cap ? read(fd, buf + n, cap - 1 - n) : read(fd, &extra, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            snprintf(err, errlen, "%s: %s", shown, strerror(errno));
            close(fd);
            explicit_bzero(buf, cap);
            return -1;
        }
        if (got == 0)
            break;
        if (n + 1 >= cap) {
            more = 1;
            break;
        }
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    if (flags & SECRET_LINE) {
        n = strcspn(buf, "\r\n");
        more = more && n == cap - 1;    /* a long file is fine if its first line fits */
    } else {
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
                         buf[n - 1] == '\t'))
            n--;
    }
    buf[n] = '\0';
    const char *bad = NULL;
    char sz[96];
    if (more) {
        snprintf(sz, sizeof sz, "too long (at most %zu bytes)", cap - 1);
        bad = sz;
    } else if (n == 0) {
        bad = "empty";
    } else if (n < min_len) {
        snprintf(sz, sizeof sz, "too short (%zu bytes; at least %zu)", n, min_len);
        bad = sz;
    } else if (flags & SECRET_KEY) {
        bad = secret_weak(buf, n);
    }
    if (bad != NULL) {
        snprintf(err, errlen, "%s: %s: refused", shown, bad);
        explicit_bzero(buf, cap);
        return -1;
    }
    if (len != NULL)
        *len = n;
    return 1;
}
