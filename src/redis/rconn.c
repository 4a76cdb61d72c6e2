/* rconn.c -- a blocking Redis connection (rconn.h). */
#include "redis/rconn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "core/clock.h"

#define DEFAULT_TIMEOUT_MS 5000

static struct timeval tv_ms(int64_t ms)
{
    if (ms < 1)
        ms = 1;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

static redisReply *check(redisContext *c, redisReply *r, char *err, size_t errlen)
{
    if (!r) {
        snprintf(err, errlen, "%s", c->errstr[0] ? c->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s", r->str ? r->str : "error reply");
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

redisReply *rconn_cmd(redisContext *c, char *err, size_t errlen, int argc, const char **argv,
                      const size_t *argvlen)
{
    if (c->err) {
        snprintf(err, errlen, "%s", c->errstr);
        return NULL;
    }
    return check(c, redisCommandArgv(c, argc, argv, argvlen), err, errlen);
}

redisReply *rconn_cmdf(redisContext *c, char *err, size_t errlen, const char *fmt, ...)
{
    if (c->err) {
        snprintf(err, errlen, "%s", c->errstr);
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    return check(c, r, err, errlen);
}

void rconn_hello(const url_redis_t *a, rconn_hello_t *h)
{
    h->n = 0;
    if (a->password[0]) {
        struct rconn_hello_cmd *c = &h->cmd[h->n++];
        c->name = "AUTH";
        c->argc = 2;
        c->argv[0] = "AUTH";
        c->argvlen[0] = 4;
        c->argv[1] = a->password;
        c->argvlen[1] = strlen(a->password);
    }
    if (a->db != 0) {
        struct rconn_hello_cmd *c = &h->cmd[h->n++];
        int n = snprintf(h->db, sizeof h->db, "%d", a->db);
        c->name = "SELECT";
        c->argc = 2;
        c->argv[0] = "SELECT";
        c->argvlen[0] = 6;
        c->argv[1] = h->db;
        c->argvlen[1] = (size_t)n;
    }
}

/* One handshake command within what is left of the deadline. */
static int step(redisContext *c, uint64_t deadline, struct rconn_hello_cmd *hc, char *err,
                size_t errlen)
{
    uint64_t now = clock_mono_ms();
    if (now >= deadline) {
        snprintf(err, errlen, "%s: deadline passed", hc->name);
        return -1;
    }
    redisSetTimeout(c, tv_ms((int64_t)(deadline - now)));
    char why[256];
    redisReply *r = rconn_cmd(c, why, sizeof why, hc->argc, hc->argv, hc->argvlen);
    if (!r) {
        snprintf(err, errlen, "%s: %s", hc->name, why);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

redisContext *rconn_open(const url_redis_t *a, int timeout_ms, char *err, size_t errlen)
{
    if (timeout_ms <= 0)
        timeout_ms = DEFAULT_TIMEOUT_MS;
    uint64_t deadline = clock_mono_ms() + (uint64_t)timeout_ms;
    struct timeval tv = tv_ms(timeout_ms);
    redisContext *c = a->unix_path[0] ? redisConnectUnixWithTimeout(a->unix_path, tv)
                                      : redisConnectWithTimeout(a->host, a->port, tv);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (c->err) {
        snprintf(err, errlen, "%s", c->errstr);
        redisFree(c);
        return NULL;
    }
    rconn_hello_t h;
    rconn_hello(a, &h);
    for (int i = 0; i < h.n; i++) {
        if (step(c, deadline, &h.cmd[i], err, errlen) < 0) {
            redisFree(c);
            return NULL;
        }
    }
    redisSetTimeout(c, tv);
    return c;
}

/* INFO cluster says cluster_enabled:1. A server that does not answer INFO (renamed, or
 * denied by an ACL) is taken for what the URL says. */
static int cluster_enabled(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO cluster");
    int on = r && r->type == REDIS_REPLY_STRING && r->str &&
             strstr(r->str, "cluster_enabled:1") != NULL;
    freeReplyObject(r);
    return on;
}

redisContext *rconn_open_url(const char *url, int timeout_ms, char *err, size_t errlen)
{
    char shown[600], why[512];
    url_redact(url, shown, sizeof shown);
    url_redis_t a;
    if (url_parse_redis(url, &a) != 0) {
        snprintf(err, errlen,
                 "bad Redis URL \"%s\": use redis://[:password@]host:port[/db] or "
                 "unix:PATH[?db=N]",
                 shown);
        return NULL;
    }
    redisContext *c = rconn_open(&a, timeout_ms, why, sizeof why);
    if (!c) {
        snprintf(err, errlen, "Redis at %s: %s", shown, why);
        return NULL;
    }
    if (!a.cluster && cluster_enabled(c)) {
        snprintf(err, errlen,
                 "Redis at %s runs in cluster mode (cluster_enabled:1): address it as "
                 "redis+cluster://host:port[,host:port...] (seed nodes). As a single Redis "
                 "every key would go to this one node, and commands over several vouchers' "
                 "keys are refused there (CROSSSLOT)",
                 shown);
        redisFree(c);
        return NULL;
    }
    return c;
}

void rconn_close(redisContext *c)
{
    if (c)
        redisFree(c);
}

int rconn_int(const redisReply *r, int64_t *out)
{
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER) {
        *out = r->integer;
        return 0;
    }
    if (r->type == REDIS_REPLY_STRING && r->len > 0) {
        char *end;
        errno = 0;
        long long v = strtoll(r->str, &end, 10);
        if (errno || *end != '\0')
            return -1;
        *out = v;
        return 0;
    }
    return -1;
}
