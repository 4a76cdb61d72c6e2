/* bench_redis.c -- Redis helpers only the command-line tools need (bench_redis.h). */
#include "cmd/bench_redis.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "redis/rconn.h"
#include "core/url.h"

int bench_redis_local_pid(redisContext *c, const char *url)
{
    url_redis_t a;
    if (url_parse_redis(url, &a) != 0)
        return 0;
    if (!a.unix_path[0] && strcmp(a.host, "127.0.0.1") != 0 && strcmp(a.host, "localhost") != 0 &&
        strcmp(a.host, "::1") != 0)
        return 0;
    char err[128];
    redisReply *r = rconn_cmdf(c, err, sizeof err, "INFO server");
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

int bench_redis_sid_parse(const char *z, sid_t *out)
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

int bench_redis_sid_cmp(sid_t a, sid_t b)
{
    if (a.ms != b.ms)
        return a.ms < b.ms ? -1 : 1;
    if (a.seq != b.seq)
        return a.seq < b.seq ? -1 : 1;
    return 0;
}
