/* url.h -- every URL the service reads: Redis (redis://, unix:), databases (mysql://,
 * sqlite:), one percent-decoding, and the redaction that hides passwords in messages.
 *
 * The shapes:
 *   redis://[[user]:password@]host[:port][/db]   host may be [IPv6]; defaults 127.0.0.1:6379/0
 *   unix:PATH[?db=N[&password=P]]                 (unix://PATH too)
 *   redis+cluster://[[user]:password@]h1[:p1][,h2[:p2]...]   a Redis Cluster's seed
 *                                                 nodes (up to 16; each as redis://)
 *   mysql://[user[:password]@]host[:port]/db[?socket=PATH]   default port 3306
 *   sqlite:PATH                                   (sqlite://PATH, sqlite:///abs/path too)
 *
 * One rule finds the password everywhere: the userinfo of scheme://userinfo@host ends at
 * the LAST '@' before any '?', so a password may hold '@', ':' or '/' unescaped; the
 * password is what follows the first ':' of the userinfo; a "password=" query parameter
 * is one too. url_redact() finds it with the same splitter the parsers use, so what is
 * parsed as a password is always what a message hides.
 *
 * Pure functions: no allocation, no globals; safe from any thread. */
#ifndef SECKILL_URL_H
#define SECKILL_URL_H

#include <stddef.h>

/* 0-15 for a hex digit (either case), else -1. */
int url_hexval(int ch);

/* Percent-decoding of s[0..n) into out (cap bytes, NUL-terminated). Returns the decoded
 * length or -1 when it does not fit, holds a NUL ("%00": callers use C strings, and an
 * embedded NUL would let "138...%00junk" pass a check on its first part), or -- in the
 * default strict mode -- a '%' not followed by two hex digits. */
enum {
    URL_PCT_STRICT = 0,
    URL_PCT_FORM = 1, /* query strings: '+' is a space, a stray '%' stays as it is */
};
int url_pct_decode(const char *s, size_t n, char *out, size_t cap, int mode);

/* A Redis address (redis://, unix:, or redis+cluster://). For a cluster, host/port are
 * the first seed and db is 0 (a cluster has no other). */
#define URL_MAX_SEEDS 16
typedef struct url_redis {
    char host[256];
    int port;
    char unix_path[512]; /* non-empty for unix: URLs */
    char password[256];  /* empty: no AUTH */
    int db;
    int cluster; /* redis+cluster://[[user]:password@]h1[:p1],h2[:p2],... */
    int nseeds;  /* cluster: seeds[0..nseeds) */
    struct url_seed {
        char host[256];
        int port;
    } seeds[URL_MAX_SEEDS];
} url_redis_t;
/* Returns 0, or -1 leaving *out untouched. */
int url_parse_redis(const char *url, url_redis_t *out);

/* A MariaDB/MySQL address. dbname is [A-Za-z0-9_$]+, so it can be quoted safely. */
typedef struct url_mysql {
    char host[256]; /* "localhost" when the URL has none */
    unsigned port;
    char user[128];
    char pass[256];
    char dbname[65];
    char socket[512]; /* ?socket=PATH, else empty */
} url_mysql_t;
/* Returns 0, or -1 with a reason in err (never the password). The scheme's name is not
 * checked (store.c picks the backend by it, case-insensitively). */
int url_parse_mysql(const char *url, url_mysql_t *out, char *err, size_t errlen);

/* The file of a sqlite: URL (a pointer into url), or NULL if it names none. The scheme's
 * name is not checked. */
const char *url_sqlite_path(const char *url);

/* url with password put in (percent-encoded), where the parsers above look for it: the
 * userinfo of scheme://[user]@host (":password@" added after the user), or a
 * "password=" query parameter of unix: URLs. For --redis-password-file and
 * --db-password-file, so that a password need not be on the command line. Returns 0, or
 * -1 with a reason in err if url already holds a password, has no place for one
 * (sqlite:), or the result does not fit in cap. */
int url_with_password(const char *url, const char *password, char *out, size_t cap, char *err,
                      size_t errlen);

/* url as it may be logged or shown: every password (see above) becomes "***", also in
 * URLs that do not parse. Returns out (size n); NULL url gives "". */
const char *url_redact(const char *url, char *out, size_t n);

#endif
