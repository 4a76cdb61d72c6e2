/* secret.h -- the one reader of secret files: admin token, token-signing key, Redis and
 * database passwords, a config file that holds a secret.
 *
 * A secret is only trusted from a file nobody else could have written or read:
 *   - opened with O_NOFOLLOW (a symlink as the last component is refused, never
 *     followed) and checked with fstat on the open descriptor (no name is looked up
 *     twice);
 *   - a regular file, owned by this process's user or by root;
 *   - no access for others; group access only as the packaging's `root:<our group> 0640`
 *     (owned by root, group = our group, group may read but not write). Files of the
 *     data dir (SECRET_OURS) must be ours with no group/other bits at all;
 *   - keys and tokens (SECRET_KEY) must not be of low variety: fewer than
 *     SECRET_MIN_DISTINCT different byte values (16 identical bytes, "abababab...") is
 *     refused. A random 16-character hex token has so few with probability 4e-7.
 * Every refusal names the file and what is wrong; the caller exits at start. No state. */
#ifndef SECKILL_SECRET_H
#define SECKILL_SECRET_H

#include <stddef.h>

#define SECRET_OURS 1           /* owned by us alone, mode 0600 or stricter */
#define SECRET_KEY 2            /* a key or token: its variety is checked */
#define SECRET_LINE 4           /* the first line only (else trailing blanks are cut) */
#define SECRET_MIN_DISTINCT 5

/* Reads the secret at path (relative to dirfd, or AT_FDCWD) into buf (cap bytes, NUL
 * terminated; *len its length without the NUL, may be NULL), checked as above; `shown`
 * names it in messages (e.g. "token key file /etc/seckill/key"). At least min_len bytes. Returns 1 if read, 0 if the file does
 * not exist (nothing said), -1 with the reason in err. */
int secret_read(int dirfd, const char *path, const char *shown, int flags, size_t min_len,
                char *buf, size_t cap, size_t *len, char *err, size_t errlen);

/* The ownership and mode checks alone, on an open descriptor (path names it in err).
 * Returns 0, or -1 with the reason in err. */
int secret_check_fd(int fd, const char *path, int flags, char *err, size_t errlen);

/* NULL if the n bytes at p are varied enough for a key or token, else why not. */
const char *secret_weak(const void *p, size_t n);

#endif
