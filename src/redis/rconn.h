/* rconn.h -- a blocking Redis connection: connect, AUTH and SELECT under one deadline,
 * then plain commands, each with the same timeout.
 *
 * For the code that may block: start-up checks (server.c), the order writer's thread
 * (writer.c) and the command-line tools (src/cmd/). The event loops use rds.h instead.
 * Every failure -- unreachable, AUTH refused, SELECT refused (a db index the server does
 * not have) -- returns NULL and a reason; the reason never holds the password.
 *
 * Ownership: the caller owns the returned context (rconn_close) and every reply
 * (freeReplyObject). A context is used by one thread at a time. */
#ifndef SECKILL_RCONN_H
#define SECKILL_RCONN_H

#include <stddef.h>
#include <stdint.h>

#include "core/url.h"

struct redisContext;
struct redisReply;

/* The commands that open a session on a connection to a, in the order they are sent:
 * AUTH <password> when a has one (as the "default" user: url.c ignores a user name, as
 * redis-cli -a does), then SELECT <db> when db is not 0. The one place that decides the
 * handshake: rconn_open (blocking), a worker's node connection (rds_node.c) and the
 * revocation subscriber (revoke.c) all send these. The arguments point into a and into
 * the struct itself: use it in place, while a lives. */
#define RCONN_HELLO_MAX 2
typedef struct rconn_hello {
    int n;
    struct rconn_hello_cmd {
        const char *name;       /* "AUTH", "SELECT": for error messages */
        int argc;
        const char *argv[2];
        size_t argvlen[2];
    } cmd[RCONN_HELLO_MAX];
    char db[16];                /* SELECT's argument */
} rconn_hello_t;
void rconn_hello(const url_redis_t *a, rconn_hello_t *h);

/* Connects to a, authenticates and selects a->db, the whole within timeout_ms (<= 0:
 * 5 s); afterwards each command's socket timeout is timeout_ms. NULL + err on failure. */
struct redisContext *rconn_open(const url_redis_t *a, int timeout_ms, char *err, size_t errlen);
/* The same from a URL (url.h); err names the URL with its password hidden. A server in
 * cluster mode behind a plain redis:// or unix: address is refused (err says to use
 * redis+cluster://): it cannot serve a single-Redis client's multi-key commands. */
struct redisContext *rconn_open_url(const char *url, int timeout_ms, char *err, size_t errlen);
void rconn_close(struct redisContext *c); /* NULL is fine */

/* One command (argv form; argvlen NULL: C strings). Returns the reply or NULL with a
 * reason in err: a transport failure or a Redis error reply (then freed). */
struct redisReply *rconn_cmd(struct redisContext *c, char *err, size_t errlen, int argc,
                             const char **argv, const size_t *argvlen);
/* Same with hiredis's printf-style format (%s %d %lld %b). */
struct redisReply *rconn_cmdf(struct redisContext *c, char *err, size_t errlen, const char *fmt,
                              ...);

/* Integer value of a reply: an integer, or a string holding one. -1 on anything else
 * (out untouched). */
int rconn_int(const struct redisReply *r, int64_t *out);

#endif
