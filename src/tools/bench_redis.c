/* bench_redis.c -- blocking Redis helpers for the command-line tools (bench_redis.h). */
#include "bench_redis.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "rds.h"

static struct timeval tv_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

redisContext *bredis_open(const char *url, int timeout_ms, char *err, size_t errlen)
{
    rds_addr_t a;
    if (rds_parse_url(url, &a) != 0) {
        snprintf(err, errlen, "bad Redis URL '%s' (redis://[:password@]host:port[/db] or "
                              "unix:PATH)", url ? url : "");
        return NULL;
    }
    if (timeout_ms <= 0)
        timeout_ms = 5000;
    struct timeval tv = tv_ms(timeout_ms);
    redisContext *c = a.unix_path[0] ? redisConnectUnixWithTimeout(a.unix_path, tv)
                                     : redisConnectWithTimeout(a.host, a.port, tv);
    if (!c) {
        snprintf(err, errlen, "Redis %s: out of memory", url);
        return NULL;
    }
    if (c->err) {
        snprintf(err, errlen, "Redis %s: %s", url, c->errstr);
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    char why[256];
    redisReply *r;
    if (a.password[0]) {
        r = bredis_cmdf(c, why, sizeof why, "AUTH %s", a.password);
        if (!r) {
            snprintf(err, errlen, "Redis %s: AUTH: %s", url, why);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    if (a.db > 0) {
        r = bredis_cmdf(c, why, sizeof why, "SELECT %d", a.db);
        if (!r) {
            snprintf(err, errlen, "Redis %s: SELECT: %s", url, why);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

void bredis_close(redisContext *c)
{
    if (c)
        redisFree(c);
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

redisReply *bredis_cmd(redisContext *c, char *err, size_t errlen, int argc, const char **argv)
{
    if (c->err) {
        snprintf(err, errlen, "%s", c->errstr);
        return NULL;
    }
    return check(c, redisCommandArgv(c, argc, argv, NULL), err, errlen);
}

redisReply *bredis_cmdf(redisContext *c, char *err, size_t errlen, const char *fmt, ...)
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

int bredis_int(const redisReply *r, int64_t *out)
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

int bredis_local_pid(redisContext *c, const char *url)
{
    rds_addr_t a;
    if (rds_parse_url(url, &a) != 0)
        return 0;
    if (!a.unix_path[0] && strcmp(a.host, "127.0.0.1") != 0 && strcmp(a.host, "localhost") != 0 &&
        strcmp(a.host, "::1") != 0)
        return 0;
    char err[128];
    redisReply *r = bredis_cmdf(c, err, sizeof err, "INFO server");
    if (!r)
        return 0;
    int pid = 0;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        const char *p = strstr(r->str, "process_id:");
        if (p)
            pid = atoi(p + 11);
    }
    freeReplyObject(r);
    if (pid <= 0)
        return 0;
    char path[64], comm[64] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(comm, sizeof comm, f))
        comm[0] = '\0';
    fclose(f);
    return strncmp(comm, "redis", 5) == 0 ? pid : 0;
}

int sid_parse(const char *z, sid_t *out)
{
    if (!z)
        return -1;
    char *end;
    errno = 0;
    unsigned long long ms = strtoull(z, &end, 10);
    if (errno || end == z)
        return -1;
    unsigned long long seq = 0;
    if (*end == '-') {
        const char *s = end + 1;
        seq = strtoull(s, &end, 10);
        if (errno || end == s)
            return -1;
    }
    if (*end != '\0')
        return -1;
    out->ms = ms;
    out->seq = seq;
    return 0;
}

int sid_cmp(sid_t a, sid_t b)
{
    if (a.ms != b.ms)
        return a.ms < b.ms ? -1 : 1;
    if (a.seq != b.seq)
        return a.seq < b.seq ? -1 : 1;
    return 0;
}
