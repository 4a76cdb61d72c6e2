/* bench.c -- `seckill bench`: a flash-sale rehearsal over the public HTTP API (bench.h).
 *
 * The run, in order:
 *   1. options; --data-dir fills in the embedded default's Redis socket, SQLite file and
 *      admin token;
 *   2. the voucher: --voucher ID, or a new one through POST /voucher/seckill (admin token)
 *      with --stock and a window opening --begin-in seconds from now;
 *   3. the users (bench_users.c): API login, --seed-tokens or --tokens FILE;
 *   4. the load (bench_load.c), with a live progress line on stderr;
 *   5. the report: outcomes, requests/s, latency percentiles, and the server's and
 *      redis-server's CPU time per request when their /proc/PID/stat can be read;
 *      --json for machines, --record for `seckill audit --orders`;
 *   6. wait for the order writer to drain the voucher's stream, then run the audit
 *      (audit.c) with the record of every success answer. Exit 1 if it finds anything. */
#include "cmd/bench.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <http_parser.h>

#include "cmd/audit.h"
#include "cmd/bench_hist.h"
#include "cmd/bench_procs.h"
#include "cmd/bench_timeline.h"
#include "cmd/bench_cpuprobe.h"
#include "cmd/bench_redis.h"
#include "cmd/cmd_args.h"
#include "redis/rconn.h"
#include "core/clock.h"
#include "core/datadir.h"
#include "core/xmem.h"

/* ==== options ==== */

#define F(field) CMD_ARGS_FIELD(bench_opts_t, field)
#define SET(field, v) CMD_ARGS_SET(bench_opts_t, field, v)

static const cmd_arg_t bench_opt_rows[] = {
    {"target", CMD_ARG_STR, F(target), 0, 0, "URL", "the service [http://127.0.0.1:8081]"},
    {"also-target", CMD_ARG_STR, F(target2), 0, 0, "URL",
     "a second instance: every other sale connection goes there (the lab's two instances)"},
    {"data-dir", CMD_ARG_STR, F(data_dir), 0, 0, "DIR",
     "an embedded default's data dir: its Redis socket, SQLite file and admin token"},
    {"redis", CMD_ARG_STR, F(redis_url), 0, 0, "URL",
     "Redis: login codes or seeding, drain, audit"},
    {"db", CMD_ARG_STR, F(db_url), 0, 0, "URL", "SQL store: drain and audit"},
    {"admin-token", CMD_ARG_STR, F(admin_token), 0, 0, "T", "to create the voucher"},
    {"voucher", CMD_ARG_I64, F(voucher), 1, 9e18, "ID", "use this voucher instead of creating one"},
    {"create-only", CMD_ARG_SET, SET(create_only, 1), 0, 0, NULL,
     "create the voucher, print its id and stop (then sell it with --voucher)"},
    {"stock", CMD_ARG_I64, F(stock), 0, 1e8, "N",
     "initial stock (of the new voucher, or of --voucher) [1000]"},
    {"begin-in", CMD_ARG_INT, F(begin_in_s), 0, 86400, "S",
     "the new sale opens S seconds from now [0]"},
    {"window", CMD_ARG_INT, F(window_s), 1, 1e8, "S", "the new sale lasts S seconds [3600]"},
    {"buckets", CMD_ARG_INT, F(buckets), 1, 16, "K",
     "the new voucher's stock in K buckets (stockBuckets; docs/redis-cluster.md) [1]"},
    {"users", CMD_ARG_I64, F(users), 1, 1e8, "U", "buyers [10000]"},
    {"user-base", CMD_ARG_I64, F(user_base), 0, 1e9, "N",
     "first user index (phones, seeded ids) [0]"},
    {"conns", CMD_ARG_INT, F(conns), 1, 100000, "C", "keep-alive connections [64]"},
    {"pipeline", CMD_ARG_INT, F(pipeline), 1, 1024, "P", "requests in flight per connection [1]"},
    {"threads", CMD_ARG_INT, F(threads), 1, 64, "T", "event-loop threads [1]"},
    {"duration", CMD_ARG_DBL, F(duration_s), 0, 86400, "S",
     "stop after S seconds [until every user tried]"},
    {"rate", CMD_ARG_DBL, F(rate), 0, 1e8, "R", "open loop: R requests/s in total [closed loop]"},
    {"tick-us", CMD_ARG_INT, F(tick_us), 50, 100000, "T",
     "open loop: send what fell due every T us, together (each timed from its own due time) [500]"},
    {"dup", CMD_ARG_DBL, F(dup), 0, 10, "F", "sequential repeat attempts, per user [0.1]"},
    {"burst-share", CMD_ARG_DBL, F(burst_share), 0, 1, "F",
     "share of users whose first try is sent as concurrent copies [0.05]"},
    {"burst", CMD_ARG_INT, F(burst), 1, 64, "K", "copies in such a try [3]"},
    {"seed-tokens", CMD_ARG_SET, SET(login, LOGIN_SEED), 0, 0, NULL,
     "prepare users by writing login tokens straight into Redis (needs --redis)"},
    {"tokens", CMD_ARG_STR, F(tokens_file), 0, 0, "FILE",
     "use these tokens, one per line [API login]"},
    {"token-ttl", CMD_ARG_INT, F(token_ttl_s), 10, 1e8, "S", "TTL of seeded tokens [7200]"},
    {"token-key-file", CMD_ARG_STR, F(token_key_file), 0, 0, "F",
     "sign seeded tokens with the service's key [<data-dir>/token-key if it exists; else random]"},
    {"record", CMD_ARG_STR, F(record), 0, 0, "FILE",
     "write every success answer (for audit --orders)"},
    {"json", CMD_ARG_STR, F(json), 0, 0, "FILE", "also write the results as JSON (- = stdout)"},
    {"timeline", CMD_ARG_STR, F(timeline), 0, 0, "FILE",
     "also write the sale per 100 ms: latency, backlog, and each thread's CPU and run-queue wait"},
    {"html", CMD_ARG_STR, F(html), 0, 0, "FILE",
     "also write the report as a page: outcomes over time, latency curve, stock, audit"},
    {"server-pid", CMD_ARG_INT, F(server_pid), 1, INT_MAX, "PID",
     "for CPU/request [the listener's]"},
    {"redis-pid", CMD_ARG_INT, F(redis_pid), 1, INT_MAX, "PID",
     "for CPU/request [from INFO, if local]"},
    {"no-audit", CMD_ARG_SET, SET(audit, 0), 0, 0, NULL, "skip the drain wait and the audit"},
    {"audit-mode", CMD_ARG_STR, F(audit_mode), 0, 0, "NAME",
     "the target's --mode, which decides the audit's checks [the mode\n"
     "the live instances announce in Redis]"},
    {"cpu-probe", CMD_ARG_SET, SET(cpu_probe, 1), 0, 0, NULL,
     "watch the machine's CPU speed during the load: its slow spells, the tail outside them"},
    {"drain-timeout", CMD_ARG_INT, F(drain_timeout_s), 1, 86400, "S",
     "wait for the writer at most [60]"},
    {"timeout", CMD_ARG_INT, F(timeout_s), 1, 3600, "S",
     "wait for answers after the last send [10]"},
    {"seed", CMD_ARG_I64, F(seed), 0, 9e18, "N", "random seed of the schedule [time]"},
    {"quiet", CMD_ARG_SET, SET(progress, 0), 0, 0, NULL, "no live progress line"},
    {"waiting-room", CMD_ARG_SET, SET(room, 1), 0, 0, NULL,
     "sell through the voucher's waiting room: join, poll, buy with the pass (docs/bench.md)"},
    {"room-rate", CMD_ARG_INT, F(room_rate), 1, 1000000, "R",
     "the new voucher's waitingRoom.admitPerSecond [1000]"},
    {"room-pass-ttl", CMD_ARG_INT, F(room_pass_ttl_s), 5, 3600, "S", "its passTtlS [60]"},
    {"room-bot-gate", CMD_ARG_SET, SET(room_bot_gate, 1), 0, 0, NULL,
     "its botGate: every join solves a proof-of-work challenge first"},
    {"room-early", CMD_ARG_DBL, F(room_early), 0, 1, "F",
     "share of buyers joining before beginTime (needs --begin-in) [0.5]"},
    {"room-slow", CMD_ARG_DBL, F(room_slow), 0, 1, "F", "share of buyers in the slow class [0.5]"},
    {"room-slow-ms", CMD_ARG_INT, F(room_slow_ms), 0, 60000, "MS",
     "the slow class's extra delay per request [200]"},
    {"room-late", CMD_ARG_INT, F(room_late_s), 0, 86400, "S",
     "the other buyers join over S seconds after beginTime [10]"},
    {"pay-share", CMD_ARG_DBL, F(pay_share), 0, 1, "P",
     "after the sale, pay this share of the orders (POST /pay/notify; bench_life.h) [0]"},
    {"cancel-share", CMD_ARG_DBL, F(cancel_share), 0, 1, "C",
     "after the sale, its buyers cancel this share of the orders [0]"},
    {"pay-timeout", CMD_ARG_INT, F(pay_timeout_s), 1, 86400, "S",
     "the server's --pay-timeout-s: the rest time out, checked against S"},
    {"pay-key-file", CMD_ARG_STR, F(pay_key_file), 0, 0, "F",
     "the key payment notices are signed with [<data-dir>/pay-key]"},
    {"shop", CMD_ARG_I64, F(shop), 1, 9e18, "ID",
     "--voucher's shop: --pay-share pays its payValue from GET /voucher/list/ID [1]"},
};
static const cmd_args_t bench_opts_spec = {
    bench_opt_rows, sizeof bench_opt_rows / sizeof bench_opt_rows[0], 22};

void bench_usage(void)
{
    printf("usage: seckill bench [options]\n\n"
           "Rehearses a flash sale against a running service over its public HTTP API:\n"
           "creates a voucher (or uses --voucher), prepares buyers, sends every buyer's\n"
           "order at least once (plus repeats and concurrent copies), reports outcomes,\n"
           "requests/s, latency and CPU per request, then waits for the order writer and\n"
           "runs `seckill audit`. Exit status 0 = clean, 1 = the audit found a violation,\n"
           "2 = could not run.\n\n");
    cmd_args_help(stdout, &bench_opts_spec);
    printf("\nExamples:\n"
           "  seckill bench --data-dir ./var --users 2000 --stock 500\n"
           "  seckill bench --data-dir ./var --seed-tokens --users 1000000 --stock 100000 \\\n"
           "                --rate 50000 --dup 0.1\n"
           "  seckill bench --target http://10.0.0.5:8081 --tokens tokens.txt --voucher 12 --no-audit\n");
}

/* http://HOST:PORT into host and *port (flag names the option, for messages). */
static int parse_target(const char *flag, const char *url, char *host, size_t hostlen, int *port,
                        char *err, size_t errlen)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) != 0) {
        snprintf(err, errlen, "%s must be http://HOST:PORT, not \"%s\"", flag, url);
        return -1;
    }
    p += 7;
    const char *hs = p, *he;
    if (*p == '[') {
        hs = p + 1;
        he = strchr(hs, ']');
        if (!he) {
            snprintf(err, errlen, "%s: unclosed [ in \"%s\"", flag, url);
            return -1;
        }
        p = he + 1;
    } else {
        while (*p && *p != ':' && *p != '/')
            p++;
        he = p;
    }
    if (he == hs || (size_t)(he - hs) >= hostlen) {
        snprintf(err, errlen, "%s: no host in \"%s\"", flag, url);
        return -1;
    }
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    *port = 80;
    if (*p == ':') {
        char *end;
        errno = 0;
        long pnum = strtol(p + 1, &end, 10);
        if (errno || end == p + 1 || pnum < 1 || pnum > 65535 || (*end && strcmp(end, "/") != 0)) {
            snprintf(err, errlen, "%s: bad port in \"%s\"", flag, url);
            return -1;
        }
        *port = (int)pnum;
    } else if (*p && strcmp(p, "/") != 0) {
        snprintf(err, errlen, "%s: only http://HOST:PORT is understood, not \"%s\"",
                 flag, url);
        return -1;
    }
    return 0;
}

int bench_parse_args(int argc, char **argv, bench_opts_t *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    snprintf(o->target, sizeof o->target, "http://127.0.0.1:8081");
    o->stock = -1;
    o->window_s = 3600;
    o->users = 10000;
    o->conns = 64;
    o->pipeline = 1;
    o->threads = 1;
    o->dup = 0.1;
    o->burst_share = 0.05;
    o->burst = 3;
    o->tick_us = 500;
    o->token_ttl_s = 7200;
    o->audit = 1;
    o->drain_timeout_s = 60;
    o->timeout_s = 10;
    o->progress = 1;
    o->room_rate = 1000;
    o->room_pass_ttl_s = 60;
    o->room_early = 0.5;
    o->room_slow = 0.5;
    o->room_slow_ms = 200;
    o->room_late_s = 10;
    o->shop = 1;
    o->pay_value = 100;   /* create_voucher's payValue */
    o->seed = clock_mono_ns() ^ ((uint64_t)getpid() << 32);   /* unless --seed */
    int rc = cmd_args_parse(&bench_opts_spec, argc, argv, o, err, errlen);
    if (rc != 0)
        return rc;
    if (parse_target("--target", o->target, o->host, sizeof o->host, &o->port, err, errlen) < 0)
        return -1;
    if (o->target2[0] && parse_target("--also-target", o->target2, o->host2, sizeof o->host2,
                                      &o->port2, err, errlen) < 0)
        return -1;
    if (o->tokens_file[0] && o->login == LOGIN_SEED) {
        snprintf(err, errlen, "--seed-tokens and --tokens exclude each other");
        return -1;
    }
    if (o->tokens_file[0])
        o->login = LOGIN_FILE;
    if (o->pay_share + o->cancel_share > 1) {
        snprintf(err, errlen, "--pay-share + --cancel-share: at most 1");
        return -1;
    }
    if ((o->pay_share > 0 || o->cancel_share > 0) && o->pay_timeout_s == 0) {
        snprintf(err, errlen, "--pay-share/--cancel-share need --pay-timeout S (the server's "
                 "--pay-timeout-s: the orders left unpaid time out)");
        return -1;
    }
    if (o->users > 4000000000LL) {
        snprintf(err, errlen, "--users: at most 4000000000");
        return -1;
    }
    return 0;
}

/* ==== small helpers ==== */

static void fmt_count(uint64_t v, char *buf, size_t len)
{
    char raw[32];
    int n = snprintf(raw, sizeof raw, "%llu", (unsigned long long)v);
    size_t j = 0;
    for (int i = 0; i < n && j + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[j++] = ',';
        buf[j++] = raw[i];
    }
    buf[j] = '\0';
}

/* utime + stime of a process, in microseconds; -1 if unreadable. */
static int64_t proc_cpu_us(int pid)
{
    if (pid <= 0)
        return -1;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');   /* the command name may hold spaces */
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime(15) */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    return (int64_t)((ut + st) * 1000000ull / (unsigned long long)hz);
}

/* The pid of the process listening on TCP port `port` on this host, or 0. Reads
 * /proc/net/tcp{,6} for the socket inodes, then every /proc/PID/fd for them. */
static int listener_pid(int port)
{
    unsigned long inodes[64];
    int ni = 0;
    const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int f = 0; f < 2; f++) {
        FILE *fp = fopen(files[f], "r");
        if (!fp)
            continue;
        char line[512];
        if (!fgets(line, sizeof line, fp)) {
            fclose(fp);
            continue;
        }
        while (fgets(line, sizeof line, fp) && ni < 64) {
            char local[128];
            unsigned st;
            unsigned long inode;
            if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*d %*d %lu", local, &st, &inode) != 3)
                continue;
            const char *colon = strrchr(local, ':');
            if (!colon || st != 0x0A)
                continue;
            if ((int)strtol(colon + 1, NULL, 16) == port && inode)
                inodes[ni++] = inode;
        }
        fclose(fp);
    }
    if (ni == 0)
        return 0;
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        int pid = atoi(e->d_name);
        if (pid == getpid())
            continue;
        char fdp[64];
        snprintf(fdp, sizeof fdp, "/proc/%d/fd", pid);
        DIR *fd = opendir(fdp);
        if (!fd)
            continue;
        struct dirent *x;
        while (!found && (x = readdir(fd))) {
            char lp[320], target[64];
            snprintf(lp, sizeof lp, "%s/%s", fdp, x->d_name);
            ssize_t n = readlink(lp, target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            unsigned long ino;
            if (sscanf(target, "socket:[%lu]", &ino) != 1)
                continue;
            for (int i = 0; i < ni; i++)
                if (inodes[i] == ino)
                    found = pid;
        }
        closedir(fd);
    }
    closedir(d);
    return found;
}

int bench_resp_on_body(http_parser *p, const char *at, size_t n)
{
    bench_resp_t *r = p->data;
    if (r->keep_all) {
        if (r->alen + n + 1 > r->acap) {
            r->acap = (r->alen + n + 1) * 2;
            r->all = xrealloc(r->all, r->acap);
        }
        memcpy(r->all + r->alen, at, n);
        r->alen += n;
        r->all[r->alen] = '\0';
    }
    size_t room = sizeof r->body - 1 - r->blen;
    if (n > room)
        n = room;
    memcpy(r->body + r->blen, at, n);
    r->blen += n;
    r->body[r->blen] = '\0';
    return 0;
}

int bench_resp_on_complete(http_parser *p)
{
    bench_resp_t *r = p->data;
    r->status = (int)p->status_code;
    r->done = 1;
    return 0;
}

/* One blocking HTTP request (Connection: close) for set-up calls. */
typedef bench_resp_t simple_resp_t;

static int http_simple(const bench_load_t *P, const char *req, size_t len, simple_resp_t *r,
                       int keep_all, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->keep_all = keep_all;
    int fd = socket(P->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (const struct sockaddr *)&P->addr, P->addrlen) < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", P->hosthdr, strerror(errno));
        close(fd);
        return -1;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n <= 0) {
            snprintf(err, errlen, "send to %s: %s", P->hosthdr, strerror(errno));
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    http_parser hp;
    http_parser_init(&hp, HTTP_RESPONSE);
    hp.data = r;
    http_parser_settings s;
    memset(&s, 0, sizeof s);
    s.on_body = bench_resp_on_body;
    s.on_message_complete = bench_resp_on_complete;
    char buf[4096];
    while (!r->done) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            http_parser_execute(&hp, &s, buf, 0);   /* EOF may complete a body */
            break;
        }
        if (http_parser_execute(&hp, &s, buf, (size_t)n) != (size_t)n)
            break;
    }
    close(fd);
    if (!r->done) {
        snprintf(err, errlen, "no complete answer from %s", P->hosthdr);
        return -1;
    }
    return 0;
}

int bench_http_simple(const bench_load_t *P, const char *req, size_t len, simple_resp_t *r,
                      char *err, size_t errlen)
{
    return http_simple(P, req, len, r, 0, err, errlen);
}

int bench_http_simple_all(const bench_load_t *P, const char *req, size_t len, simple_resp_t *r,
                          char *err, size_t errlen)
{
    return http_simple(P, req, len, r, 1, err, errlen);
}

static void local_time(int64_t t, char *buf, size_t len)
{
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
}

static int create_voucher(const bench_opts_t *o, const bench_load_t *P, int64_t stock,
                          int64_t *id, int64_t *begin, int64_t *end, char *err, size_t errlen)
{
    int64_t now = clock_wall_s();
    *begin = o->begin_in_s > 0 ? now + o->begin_in_s : now - 60;
    *end = (o->begin_in_s > 0 ? *begin : now) + o->window_s;
    char b[32], e[32], body[512], req[2048], kb[64] = "";
    /* stock 0 (a rehearsal of the sold-out path) is a sale that cannot sell: asked for */
    snprintf(kb, sizeof kb, "%s%s", stock == 0 ? ",\"allowClosed\":true" : "",
             o->buckets > 1 ? ",\"stockBuckets\":" : "");
    if (o->buckets > 1)
        snprintf(kb + strlen(kb), sizeof kb - strlen(kb), "%d", o->buckets);
    char wr[160] = "";
    if (o->room)
        snprintf(wr, sizeof wr, ",\"waitingRoom\":{\"admitPerSecond\":%d,\"passTtlS\":%d,"
                 "\"botGate\":%s}", o->room_rate, o->room_pass_ttl_s,
                 o->room_bot_gate ? "true" : "false");
    local_time(*begin, b, sizeof b);
    local_time(*end, e, sizeof e);
    int bl = snprintf(body, sizeof body,
                      "{\"shopId\":1,\"title\":\"seckill bench\",\"subTitle\":\"rehearsal\","
                      "\"rules\":\"one per user\",\"payValue\":100,\"actualValue\":1000,\"type\":1,"
                      "\"stock\":%lld,\"beginTime\":\"%s\",\"endTime\":\"%s\"%s%s}",
                      (long long)stock, b, e, kb, wr);
    int n = snprintf(req, sizeof req,
                     "POST /voucher/seckill HTTP/1.1\r\nHost: %s\r\nx-admin-token: %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %d\r\n"
                     "Connection: close\r\n\r\n%s",
                     P->hosthdr, o->admin_token, bl, body);
    simple_resp_t r;
    if (bench_http_simple(P, req, (size_t)n, &r, err, errlen) < 0)
        return -1;
    const char *d = strstr(r.body, "\"data\":");
    if (r.status != 200 || !strstr(r.body, "\"success\":true") || !d) {
        snprintf(err, errlen, "POST /voucher/seckill: HTTP %d %.300s", r.status, r.body);
        return -1;
    }
    *id = strtoll(d + 7, NULL, 10);
    return *id > 0 ? 0 : -1;
}

/* Asks the target for the sale board's data (GET /admin/api/board, admin token): the
 * target announces itself and its --mode in Redis there and then, so the audit finds that
 * mode even after a sale shorter than the board's first announcement. Best effort: the
 * audit says how it found the mode, or that it found none. */
static void announce_target(const bench_opts_t *o, const bench_load_t *P)
{
    if (!o->admin_token[0] || o->audit_mode[0])
        return;
    char req[512], err[256];
    int n = snprintf(req, sizeof req,
                     "GET /admin/api/board HTTP/1.1\r\nHost: %s\r\nx-admin-token: %s\r\n"
                     "Connection: close\r\n\r\n", P->hosthdr, o->admin_token);
    simple_resp_t r;
    if (n > 0 && (size_t)n < sizeof req)
        (void)bench_http_simple(P, req, (size_t)n, &r, err, sizeof err);
}

/* ==== progress and report ==== */

typedef struct prog {
    int tty;
    uint64_t last_done;
    double last_t;
    int print;                  /* the live line (not --quiet) */
    double last_print;
    bench_series_t *series;     /* --html: samples of the counters, else NULL */
    bench_procs_t *procs;       /* per-thread CPU of the server, Redis and the bench */
} prog_t;

static void sum_counters(const bench_load_t *L, uint64_t out[BO__COUNT], uint64_t *sent,
                         uint64_t kinds[3], uint64_t *p99, uint64_t *backlog)
{
    memset(out, 0, sizeof(uint64_t) * BO__COUNT);
    if (kinds)
        memset(kinds, 0, sizeof(uint64_t) * 3);
    *sent = 0;
    if (p99)
        *p99 = 0;
    if (backlog)
        *backlog = 0;
    for (int t = 0; t < L->threads; t++) {
        bench_counters_t *c = &L->ctr[t];
        *sent += atomic_load_explicit(&c->sent, memory_order_relaxed);
        for (int i = 0; i < BO__COUNT; i++)
            out[i] += atomic_load_explicit(&c->out[i], memory_order_relaxed);
        for (int i = 0; kinds && i < 3; i++)
            kinds[i] += atomic_load_explicit(&c->by_kind[i], memory_order_relaxed);
        uint64_t p = atomic_load_explicit(&c->p99_us, memory_order_relaxed);
        if (p99 && p > *p99)
            *p99 = p;
        if (backlog)
            *backlog += atomic_load_explicit(&c->backlog, memory_order_relaxed);
    }
}

static void on_progress(bench_load_t *L, double t, void *arg)
{
    prog_t *p = arg;
    uint64_t out[BO__COUNT], sent, p99, backlog;
    sum_counters(L, out, &sent, NULL, &p99, &backlog);
    bench_procs_sample(p->procs, (uint32_t)(t * 1e6));
    if (p->series)
        bench_html_series_add(p->series, t, out);
    /* Samples may come more often than the line is worth printing: once a second. */
    if (!p->print || t - p->last_print < 0.95)
        return;
    p->last_print = t;
    uint64_t done = 0;
    for (int i = 0; i < BO__COUNT; i++)
        done += out[i];
    double rps = t > p->last_t ? (double)(done - p->last_done) / (t - p->last_t) : 0;
    p->last_done = done;
    p->last_t = t;
    char a[32], b[32], c[32], d[32], bl[48] = "";
    fmt_count((uint64_t)rps, a, sizeof a);
    fmt_count(out[BO_SUCCESS], b, sizeof b);
    fmt_count(out[BO_SOLD_OUT], c, sizeof c);
    fmt_count(out[BO_DUPLICATE], d, sizeof d);
    if (backlog)
        snprintf(bl, sizeof bl, " | backlog %llu", (unsigned long long)backlog);
    uint64_t errs = out[BO_ERROR] + out[BO_OTHER] + out[BO_UNAVAILABLE] + out[BO_UNAUTHORIZED];
    fprintf(stderr, "%s[%5.1fs] %9s req/s | success %s | sold out %s | duplicate %s | errors %llu | "
                    "p99 %.2f ms | in flight %llu%s%s",
            p->tty ? "\r" : "", t, a, b, c, d, (unsigned long long)errs, (double)p99 / 1000.0,
            (unsigned long long)(sent - done), bl, p->tty ? "\033[K" : "\n");
}

typedef struct results {
    uint64_t out[BO__COUNT], sent, kinds[3], answered;
    double seconds, rps;
    bench_hist_t *h, *hs;               /* hs: open loop, from the actual send */
    int64_t server_cpu_us, redis_cpu_us, self_cpu_us;
    int server_pid, redis_pid;
    double server_us_req, redis_us_req, self_us_req;
    bench_slot_t *slots;                /* the timeline (100 ms slots) and the two phases */
    size_t nslots;
    bench_phase_t phase[2];             /* selling, sold out */
    const bench_procs_t *procs;
    const bench_cpuprobe_t *probe;      /* NULL: without --cpu-probe */
    bench_span_t *slow;                 /* the probe's slow spells, us since the origin */
    size_t nslow;
    double slow_factor;                 /* their median slowdown */
    bench_phase_t outside[3];           /* all, selling, sold out: requests that missed them */
} results_t;

#define SLOT_US 100000
static const char *const phase_names[2] = {"selling", "sold out"};

/* CPU and run-queue wait of thread group gi over a phase, in % of one core. */
static void phase_share(const bench_procs_t *bp, size_t gi, const bench_phase_t *ph, double *cpu,
                        double *wait)
{
    uint64_t run, w;
    bench_procs_between(bp, gi, ph->from_us, ph->to_us, &run, &w);
    double span = ph->to_us > ph->from_us ? (double)(ph->to_us - ph->from_us) * 1e3 : 0;
    *cpu = span > 0 ? 100.0 * (double)run / span : 0;
    *wait = span > 0 ? 100.0 * (double)w / span : 0;
}

/* CPU of the host's other tenants over a phase (host busy - the watched threads), in % of
 * one core; -1 when /proc/stat was not read. */
static double phase_others(const bench_procs_t *bp, const bench_phase_t *ph)
{
    double ours = 0, busy = -1;
    for (size_t g = 0; g < bp->ng; g++) {
        double cpu, wait;
        phase_share(bp, g, ph, &cpu, &wait);
        if (strcmp(bp->g[g].name, BP_HOST_BUSY) == 0)
            busy = cpu;
        else if (strcmp(bp->g[g].name, BP_HOST_STEAL) != 0)
            ours += cpu;
    }
    return busy < 0 ? -1 : busy > ours ? busy - ours : 0;
}

/* Requests whose life met a slow spell of the CPU, or started within this long after
 * one, are left out of the "outside" percentiles: the backlog a spell leaves takes a few
 * ms to clear at 20,000 req/s. */
#define SLOW_PAD_US 30000

static uint32_t clamp_u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* The probe's slow spells in the load's time, and the percentiles without them. */
static void slow_spells(results_t *r, const bench_load_t *L)
{
    size_t n;
    const bench_cpuprobe_span_t *sp = bench_cpuprobe_spans(r->probe, &n);
    r->slow = xcalloc(n ? n : 1, sizeof *r->slow);
    double *f = xcalloc(n ? n : 1, sizeof *f);
    for (size_t i = 0; i < n; i++) {
        if (sp[i].to_ns <= L->origin_ns)
            continue;   /* while the connections were made */
        uint64_t a = sp[i].from_ns > L->origin_ns ? sp[i].from_ns - L->origin_ns : 0;
        r->slow[r->nslow].from_us = clamp_u32(a / 1000);
        r->slow[r->nslow].to_us = clamp_u32((sp[i].to_ns - L->origin_ns) / 1000);
        f[r->nslow++] = sp[i].factor;
    }
    /* the median slowdown over the spells (insertion sort: a handful) */
    for (size_t i = 1; i < r->nslow; i++)
        for (size_t j = i; j > 0 && f[j - 1] > f[j]; j--) {
            double t = f[j];
            f[j] = f[j - 1];
            f[j - 1] = t;
        }
    r->slow_factor = r->nslow ? f[r->nslow / 2] : 0;
    free(f);
    bench_timeline_phases_outside(L->recs, L->nrecs, r->slow, r->nslow, SLOW_PAD_US,
                                  r->phase[0].n ? r->phase[0].to_us : 0, &r->outside[0],
                                  &r->outside[1], &r->outside[2]);
}

static uint64_t slow_total_us(const results_t *r)
{
    uint64_t us = 0;
    for (size_t i = 0; i < r->nslow; i++)
        us += r->slow[i].to_us - r->slow[i].from_us;
    return us;
}

/* How much of [from, to) lay in a slow spell, in us. */
static uint64_t slow_within(const results_t *r, uint32_t from, uint32_t to)
{
    uint64_t us = 0;
    for (size_t i = 0; i < r->nslow; i++) {
        uint32_t a = r->slow[i].from_us > from ? r->slow[i].from_us : from;
        uint32_t b = r->slow[i].to_us < to ? r->slow[i].to_us : to;
        if (b > a)
            us += b - a;
    }
    return us;
}

/* The probe's lines: when the machine's CPU ran slow, and the tail without those spells. */
static void print_probe(FILE *f, const results_t *r, uint64_t requests)
{
    if (!r->probe)
        return;
    if (!r->nslow) {
        fprintf(f,
                "  host CPU    never slow: a probe thread's fixed work (%.0f us of CPU, %llu runs) "
                "never took %.0fx as long\n",
                (double)bench_cpuprobe_work_ns(r->probe) / 1e3,
                (unsigned long long)bench_cpuprobe_runs(r->probe), CPR_SLOW_X);
        return;
    }
    fprintf(f, "  host CPU    slow %zu time%s, %.0f ms in all, at", r->nslow, r->nslow > 1 ? "s" : "",
            (double)slow_total_us(r) / 1e3);
    for (size_t i = 0; i < r->nslow && i < 12; i++)
        fprintf(f, "%s %.2f", i ? "," : "", r->slow[i].from_us / 1e6);
    fprintf(f, "%s s: the probe's fixed work took %.1fx its CPU time (median; the machine's "
               "CPU, not its processes)\n", r->nslow > 12 ? ", ..." : "", r->slow_factor);
    const bench_phase_t *o = r->outside;
    fprintf(f, "  outside     them (%.1f%% of the requests left out: those that met a slow spell or "
               "came within %d ms after it): p99 %.3f ms; selling %.3f, sold out %.3f\n",
            requests ? 100.0 * (double)(requests - o[0].n) / (double)requests : 0.0,
            SLOW_PAD_US / 1000, o[0].p99_us / 1e3, o[1].p99_us / 1e3, o[2].p99_us / 1e3);
}

/* Where the tail is: each phase's percentiles, the worst slots, which threads ran. */
static void print_timeline(FILE *f, const bench_load_t *L, const results_t *r)
{
    if (!r->nslots)
        return;
    for (int k = 0; k < 2; k++) {
        const bench_phase_t *ph = &r->phase[k];
        if (!ph->n)
            continue;
        char a[32];
        fmt_count(ph->n, a, sizeof a);
        fprintf(f, "  %-11s due %.2f-%.2f s, %s requests: p50 %.3f  p99 %.3f  max %.3f ms; "
                   "from send p99 %.3f; sent late p99 %.3f\n",
                k == 0 ? "selling" : "sold out", ph->from_us / 1e6, ph->to_us / 1e6, a,
                ph->p50_us / 1e3, ph->p99_us / 1e3, ph->max_us / 1e3, ph->send_p99_us / 1e3,
                ph->late_p99_us / 1e3);
    }
    size_t idx[3], nw = bench_timeline_worst(r->slots, r->nslots, 3, idx);
    fprintf(f, "  worst 100ms");
    for (size_t i = 0; i < nw; i++) {
        const bench_slot_t *s = &r->slots[idx[i]];
        fprintf(f, "%s at %.1f s p99 %.3f ms (sent late p99 %.3f, backlog %u, in flight %u)",
                i ? ";" : "", s->t_us / 1e6, s->p99_us / 1e3, s->late_p99_us / 1e3, s->backlog,
                s->inflight);
    }
    fprintf(f, "\n");
    if (L->recs_truncated)
        fprintf(f, "  timeline    only the first answers: the log filled up\n");
    print_probe(f, r, L->nrecs);
    const bench_procs_t *bp = r->procs;
    if (!bp || !bp->ng)
        return;
    fprintf(f, "  threads     CPU %% / run-queue wait %% per phase (100 = one core), busy ones only\n");
    for (int k = 0; k < 2; k++) {
        if (!r->phase[k].n)
            continue;
        fprintf(f, "    %-9s", phase_names[k]);
        for (size_t g = 0; g < bp->ng; g++) {
            double cpu, wait;
            phase_share(bp, g, &r->phase[k], &cpu, &wait);
            if (strcmp(bp->g[g].name, BP_HOST_BUSY) != 0 && (cpu >= 1.0 || wait >= 1.0))
                fprintf(f, " %s %.0f/%.0f", bp->g[g].name, cpu, wait);
        }
        double others = phase_others(bp, &r->phase[k]);
        if (others >= 0)   /* the other tenants of the host, to within the 10 ms tick */
            fprintf(f, " | other processes %.0f", others);
        fprintf(f, "\n");
    }
}

/* --timeline FILE: the slots, then per thread group its CPU and run-queue wait in ms. */
static int write_timeline(const char *path, const results_t *r, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    const bench_procs_t *bp = r->procs;
    bench_timeline_write_header(f);
    fprintf(f, "\thost_slow_ms");
    for (size_t g = 0; bp && g < bp->ng; g++)
        fprintf(f, "\tcpu_ms:%s\twait_ms:%s", bp->g[g].name, bp->g[g].name);
    fputc('\n', f);
    for (size_t i = 0; i < r->nslots; i++) {
        bench_timeline_write_slot(f, &r->slots[i]);
        fprintf(f, "\t%.1f", (double)slow_within(r, r->slots[i].t_us, r->slots[i].t_us + SLOT_US) / 1e3);
        for (size_t g = 0; bp && g < bp->ng; g++) {
            uint64_t run, wait;
            bench_procs_between(bp, g, r->slots[i].t_us, r->slots[i].t_us + SLOT_US, &run, &wait);
            fprintf(f, "\t%.1f\t%.1f", (double)run / 1e6, (double)wait / 1e6);
        }
        fputc('\n', f);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, errlen, "%s: write failed", path);
        return -1;
    }
    return 0;
}

static int64_t own_cpu_us(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
           (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
}

static void print_report(FILE *f, const bench_opts_t *o, const bench_load_t *L, int64_t vid,
                         int64_t stock, int created, const char *login, const results_t *r)
{
    char a[32], b[32], c[32], d[32];
    fprintf(f, "\nseckill bench: %s, voucher %lld (stock %lld, %s), %llu users (%s)\n", o->target,
            (long long)vid, (long long)stock, created ? "created" : "given",
            (unsigned long long)o->users, login);
    if (o->rate > 0)
        fprintf(f, "  load        open loop at %.0f req/s, %d connections x %d in flight, %d thread%s\n",
                o->rate, o->conns, o->pipeline, o->threads, o->threads > 1 ? "s" : "");
    else
        fprintf(f, "  load        closed loop, %d connections x %d in flight, %d thread%s\n", o->conns,
                o->pipeline, o->threads, o->threads > 1 ? "s" : "");
    fmt_count(r->answered, a, sizeof a);
    fmt_count((uint64_t)r->rps, b, sizeof b);
    fprintf(f, "  requests    %s answered in %.2f s = %s req/s\n", a, r->seconds, b);
    fmt_count(r->kinds[K_FIRST], a, sizeof a);
    fmt_count(r->kinds[K_BURST], c, sizeof c);
    fmt_count(r->kinds[K_REPEAT], d, sizeof d);
    fprintf(f, "  sent        %s first tries, %s concurrent copies, %s repeats\n", a, c, d);
    fprintf(f, "  outcome            count    share\n");
    for (int i = 0; i < BO__COUNT; i++) {
        if (r->out[i] == 0 && i != BO_SUCCESS && i != BO_SOLD_OUT && i != BO_DUPLICATE)
            continue;
        fmt_count(r->out[i], a, sizeof a);
        fprintf(f, "    %-12s %11s  %6.2f%%\n", bench_outcome_names[i], a,
                100.0 * (double)r->out[i] / (double)(r->sent ? r->sent : 1));
    }
    fprintf(f, "  latency ms  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (mean %.3f%s)\n",
            (double)bench_hist_percentile(r->h, 50) / 1000,
            (double)bench_hist_percentile(r->h, 90) / 1000,
            (double)bench_hist_percentile(r->h, 99) / 1000,
            (double)bench_hist_percentile(r->h, 99.9) / 1000, (double)r->h->max / 1000,
            bench_hist_mean(r->h) / 1000, o->rate > 0 ? "; from each request's due time" : "");
    if (r->hs && r->hs->count)
        fprintf(f,
                "  from send   p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (the part spent "
                "in the network and the server)\n",
                (double)bench_hist_percentile(r->hs, 50) / 1000,
                (double)bench_hist_percentile(r->hs, 90) / 1000,
                (double)bench_hist_percentile(r->hs, 99) / 1000,
                (double)bench_hist_percentile(r->hs, 99.9) / 1000, (double)r->hs->max / 1000);
    print_timeline(f, L, r);
    if (r->server_pid && r->seconds < 1.0)
        fprintf(f, "  server CPU  run too short to measure (/proc counts in %ld ms ticks)\n",
                1000 / (sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100));
    else if (r->server_pid)
        fprintf(f, "  server CPU  %.1f us/request (pid %d, %.2f s of CPU)\n", r->server_us_req,
                r->server_pid, (double)r->server_cpu_us / 1e6);
    else
        fprintf(f, "  server CPU  not readable (not local? give --server-pid)\n");
    if (r->redis_pid && r->seconds >= 1.0)
        fprintf(f, "  redis CPU   %.1f us/request (pid %d, %.2f s of CPU)\n", r->redis_us_req,
                r->redis_pid, (double)r->redis_cpu_us / 1e6);
    fprintf(f, "  bench CPU   %.1f us/request (this load generator: %.0f%% of one core)\n",
            r->self_us_req, r->seconds > 0 ? 100.0 * (double)r->self_cpu_us / 1e6 / r->seconds : 0.0);
    if (L->unanswered)
        fprintf(f, "  unanswered  %llu requests lost their connection before an answer\n",
                (unsigned long long)L->unanswered);
}

static void json_results(FILE *f, const bench_life_t *life, const bench_opts_t *o,
                         const bench_load_t *L, int64_t vid,
                         int64_t stock, const char *login, const results_t *r,
                         const audit_drain_t *dr, int have_drain, int audit_status)
{
    fprintf(f, "{\"target\":\"%s\",\"voucher\":%lld,\"stock\":%lld,\"users\":%lld,\"login\":\"%s\","
               "\"conns\":%d,\"pipeline\":%d,\"threads\":%d,\"mode\":\"%s\",\"rate\":%.0f,"
               "\"requests\":%llu,\"seconds\":%.3f,\"rps\":%.1f,\"unanswered\":%llu,\"outcomes\":{",
            o->target, (long long)vid, (long long)stock, (long long)o->users, login, o->conns,
            o->pipeline, o->threads, o->rate > 0 ? "open" : "closed", o->rate,
            (unsigned long long)r->answered, r->seconds, r->rps, (unsigned long long)L->unanswered);
    for (int i = 0; i < BO__COUNT; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s", bench_outcome_names[i]);
        for (char *p = key; *p; p++)
            if (*p == ' ')
                *p = '_';
        fprintf(f, "%s\"%s\":%llu", i ? "," : "", key, (unsigned long long)r->out[i]);
    }
    fprintf(f,
            "},\"latency_us\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p99_9\":%llu,"
            "\"max\":%llu,\"mean\":%.1f},",
            (unsigned long long)bench_hist_percentile(r->h, 50),
            (unsigned long long)bench_hist_percentile(r->h, 90),
            (unsigned long long)bench_hist_percentile(r->h, 99),
            (unsigned long long)bench_hist_percentile(r->h, 99.9), (unsigned long long)r->h->max,
            bench_hist_mean(r->h));
    if (r->hs && r->hs->count)
        fprintf(f,
                "\"latency_from_send_us\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p99_9\":%llu,"
                "\"max\":%llu},",
                (unsigned long long)bench_hist_percentile(r->hs, 50),
                (unsigned long long)bench_hist_percentile(r->hs, 90),
                (unsigned long long)bench_hist_percentile(r->hs, 99),
                (unsigned long long)bench_hist_percentile(r->hs, 99.9),
                (unsigned long long)r->hs->max);
    for (int k = 0; k < 2 && r->nslots; k++) {
        const bench_phase_t *ph = &r->phase[k];
        fprintf(f, "%s\"%s\":{\"from_s\":%.3f,\"to_s\":%.3f,\"requests\":%llu,\"p50_us\":%u,"
                   "\"p99_us\":%u,\"max_us\":%u,\"send_p99_us\":%u,\"late_p99_us\":%u,\"threads\":{",
                k == 0 ? "\"phases\":{" : ",", k == 0 ? "selling" : "sold_out", ph->from_us / 1e6,
                ph->to_us / 1e6, (unsigned long long)ph->n, ph->p50_us, ph->p99_us, ph->max_us,
                ph->send_p99_us, ph->late_p99_us);
        for (size_t g = 0; r->procs && ph->n && g < r->procs->ng; g++) {
            double cpu, wait;
            phase_share(r->procs, g, ph, &cpu, &wait);
            fprintf(f, "%s\"%s\":{\"cpu_pct\":%.1f,\"wait_pct\":%.1f}", g ? "," : "",
                    r->procs->g[g].name, cpu, wait);
        }
        fprintf(f, "}");
        if (r->procs && ph->n)
            fprintf(f, ",\"others_cpu_pct\":%.1f", phase_others(r->procs, ph));
        fprintf(f, "}%s", k == 1 ? "}," : "");
    }
    fprintf(f, "\"server_cpu_us_per_request\":%.2f,\"redis_cpu_us_per_request\":%.2f,"
               "\"bench_cpu_us_per_request\":%.2f",
            r->server_pid ? r->server_us_req : -1.0, r->redis_pid ? r->redis_us_req : -1.0,
            r->self_us_req);
    if (r->probe) {
        const bench_phase_t *ou = r->outside;
        fprintf(
            f,
            ",\"cpu_probe\":{\"runs\":%llu,\"work_us\":%.1f,\"slow_spells\":%zu,\"slow_ms\":%.1f,"
            "\"slowdown\":%.2f,\"outside\":{\"requests\":%llu,\"p99_us\":%u,\"selling_p99_us\":%u,"
            "\"sold_out_p99_us\":%u}}",
            (unsigned long long)bench_cpuprobe_runs(r->probe),
            (double)bench_cpuprobe_work_ns(r->probe) / 1e3, r->nslow,
            (double)slow_total_us(r) / 1e3, r->slow_factor, (unsigned long long)ou[0].n,
            ou[0].p99_us, ou[1].p99_us, ou[2].p99_us);
    }
    if (have_drain)
        fprintf(f, ",\"drain\":{\"drained\":%s,\"seconds\":%.3f,\"persisted\":%lld,\"pending\":%lld,"
                   "\"lag\":%lld}",
                dr->drained ? "true" : "false", dr->seconds, (long long)dr->persisted_end,
                (long long)dr->pending, (long long)dr->lag);
    if (life != NULL)
        bench_life_json(f, life);
    fprintf(f, ",\"audit\":%d}\n", audit_status);
}

/* ==== main ==== */

int bench_main(int argc, char **argv)
{
    bench_opts_t o;
    char err[1024];
    int rc = bench_parse_args(argc, argv, &o, err, sizeof err);
    if (rc == 1) {
        bench_usage();
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "seckill bench: %s\n", err);
        return 2;
    }
    if (o.data_dir[0]) {
        const char *redis = o.redis_url, *db = o.db_url;
        char rbuf[DATADIR_URL_MAX], dbuf[DATADIR_URL_MAX], abs[PATH_MAX];
        if (datadir_urls(o.data_dir, &redis, &db, rbuf, dbuf, err, sizeof err) < 0) {
            fprintf(stderr, "seckill bench: %s\n", err);
            return 2;
        }
        if (!realpath(o.data_dir, abs)) {
            fprintf(stderr, "seckill bench: data dir %s: %s\n", o.data_dir, strerror(errno));
            return 2;
        }
        snprintf(o.redis_url, sizeof o.redis_url, "%s", redis);
        snprintf(o.db_url, sizeof o.db_url, "%s", db);
        /* the embedded default's admin token, read as the service reads it (datadir.h) */
        if (!o.admin_token[0] && datadir_read_secret(abs, "admin-token", o.admin_token,
                                                     sizeof o.admin_token, err, sizeof err) < 0)
            fprintf(stderr, "seckill bench: admin token: %s\n", err);
        /* The embedded default's signing key: seeded tokens then verify like real ones. */
        char kf[sizeof o.token_key_file];
        if (!o.token_key_file[0] &&
            snprintf(kf, sizeof kf, "%.490s/token-key", abs) < (int)sizeof kf &&
            access(kf, R_OK) == 0)
            memcpy(o.token_key_file, kf, sizeof kf);
    }
    if ((o.login == LOGIN_SEED || o.login == LOGIN_API) && !o.redis_url[0]) {
        fprintf(stderr, "seckill bench: %s needs Redis: give --redis URL or --data-dir DIR "
                        "(or --tokens FILE)\n",
                o.login == LOGIN_SEED ? "--seed-tokens" : "logging in through the API (the "
                                                          "login code is only in Redis)");
        return 2;
    }

    /* the target */
    bench_load_t L;
    memset(&L, 0, sizeof L);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    char port[8];
    snprintf(port, sizeof port, "%d", o.port);
    int gai = getaddrinfo(o.host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "seckill bench: %s: %s\n", o.host, gai_strerror(gai));
        return 2;
    }
    memcpy(&L.addr, ai->ai_addr, ai->ai_addrlen);
    L.addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    if (o.target2[0]) {
        snprintf(port, sizeof port, "%d", o.port2);
        gai = getaddrinfo(o.host2, port, &hints, &ai);
        if (gai != 0 || !ai) {
            fprintf(stderr, "seckill bench: %s: %s\n", o.host2, gai_strerror(gai));
            return 2;
        }
        memcpy(&L.addr2, ai->ai_addr, ai->ai_addrlen);
        L.addrlen2 = ai->ai_addrlen;
        freeaddrinfo(ai);
    }
    snprintf(L.hosthdr, sizeof L.hosthdr, "%s:%d", o.host, o.port);

    /* the users: prepared before the voucher is made, so a sale that opens --begin-in
     * seconds after its creation still has its crowd at the door however long seeding or
     * logging in a million buyers took */
    const char *login = o.login == LOGIN_SEED ? "seeded tokens"
                        : o.login == LOGIN_FILE ? "tokens file" : "API login";
    bench_users_t users;
    memset(&users, 0, sizeof users);
    uint64_t t0 = clock_mono_ns();
    if (!o.create_only && bench_users_prepare(&o, &L, &users, err, sizeof err) < 0) {
        fprintf(stderr, "seckill bench: preparing users: %s\n", err);
        return 2;
    }
    o.users = (int64_t)users.n;
    if (o.progress)
        fprintf(stderr, "seckill bench: %zu users ready (%s) in %.2f s\n", users.n, login,
                (double)(clock_mono_ns() - t0) / 1e9);

    /* the voucher */
    int created = 0;
    int64_t vid = o.voucher, stock = o.stock, begin = 0, end = 0;
    if (!vid) {
        if (!o.admin_token[0]) {
            fprintf(stderr, "seckill bench: creating a voucher needs --admin-token (or --data-dir "
                            "of an embedded default), or pass --voucher ID\n");
            bench_users_free(&users);
            return 2;
        }
        if (stock < 0)
            stock = 1000;
        if (create_voucher(&o, &L, stock, &vid, &begin, &end, err, sizeof err) < 0) {
            fprintf(stderr, "seckill bench: %s\n", err);
            bench_users_free(&users);
            return 2;
        }
        created = 1;
        if (o.create_only) {   /* the lab makes the voucher before it injects a fault */
            printf("%lld\n", (long long)vid);
            bench_users_free(&users);
            return 0;
        }
        if (o.progress)
            fprintf(stderr, "seckill bench: voucher %lld, stock %lld, sale %s\n", (long long)vid,
                    (long long)stock, o.begin_in_s ? "opens shortly" : "open");
    } else if (o.pay_share > 0 && o.pay_timeout_s > 0 &&
               bench_life_pay_value(&o, &L, vid, &o.pay_value, err, sizeof err) < 0) {
        /* asked before the sale: a wrong --shop is told at once */
        fprintf(stderr, "seckill bench: %s\n", err);
        bench_users_free(&users);
        return 2;
    }

    if (o.room) {
        /* the waiting room's own run, report and audit (bench_room.c) */
        int st = bench_room_run(&o, &L, &users, vid, stock, created ? begin : 0, created);
        bench_users_free(&users);
        return st;
    }

    /* CPU accounting */
    results_t r;
    memset(&r, 0, sizeof r);
    r.server_pid = o.server_pid ? o.server_pid : listener_pid(o.port);
    if (o.redis_pid) {
        r.redis_pid = o.redis_pid;
    } else if (o.redis_url[0]) {
        redisContext *rc2 = rconn_open_url(o.redis_url, 2000, err, sizeof err);
        if (rc2) {
            r.redis_pid = bench_redis_local_pid(rc2, o.redis_url);
            rconn_close(rc2);
        }
    }
    /* Started (and calibrated) before the bench's own CPU is first read: its CPU time is
     * taken out of the bench's per request below. */
    bench_cpuprobe_t *probe = o.cpu_probe ? bench_cpuprobe_start() : NULL;
    int64_t s0 = proc_cpu_us(r.server_pid), r0 = proc_cpu_us(r.redis_pid), b0 = own_cpu_us();
    if (s0 < 0)
        r.server_pid = 0;
    if (r0 < 0)
        r.redis_pid = 0;

    /* the sale */
    L.o = &o;
    L.job = JOB_SALE;
    L.voucher = vid;
    L.user_lo = 0;
    L.user_hi = (uint32_t)users.n;
    L.tokens = users.tokens;
    L.user_base = o.user_base;
    L.threads = o.threads;
    L.conns = o.conns;
    L.pipeline = o.pipeline;
    L.rate = o.rate;
    L.duration_s = o.duration_s;
    L.dup = o.dup;
    L.burst_share = o.burst_share;
    L.burst = o.burst;
    L.tick_us = o.tick_us;
    L.timeout_s = o.timeout_s;
    L.seed = o.seed;
    bench_series_t series = {0};
    bench_procs_t procs;
    memset(&procs, 0, sizeof procs);
    bench_procs_watch(&procs, r.server_pid, "server");
    bench_procs_watch(&procs, r.redis_pid, "redis");
    bench_procs_watch(&procs, getpid(), "bench");
    prog_t prog = {isatty(2), 0, 0, o.progress, 0, o.html[0] ? &series : NULL, &procs};
    uint64_t zero[BO__COUNT] = {0};
    if (o.html[0])
        bench_html_series_add(&series, 0, zero);
    /* ten samples a second: the timeline's threads, and the charts of --html */
    L.progress_ms = SLOT_US / 1000;
    bench_procs_sample(&procs, 0);
    int64_t first_ms = (int64_t)clock_wall_ms();    /* the lifecycle's deadlines start here */
    int load_rc = bench_load_run(&L, on_progress, &prog, err, sizeof err);
    bench_cpuprobe_stop(probe);
    if (load_rc < 0) {
        bench_cpuprobe_free(probe);
        bench_html_series_free(&series);
        bench_procs_free(&procs);
        fprintf(stderr, "\nseckill bench: %s\n", err);
        bench_load_free(&L);
        bench_users_free(&users);
        return 2;
    }
    if (o.progress && prog.tty)
        fprintf(stderr, "\n");
    int64_t s1 = proc_cpu_us(r.server_pid), r1 = proc_cpu_us(r.redis_pid);
    r.self_cpu_us = own_cpu_us() - b0 - (int64_t)(bench_cpuprobe_cpu_ns(probe) / 1000);
    bench_procs_sample(&procs, (uint32_t)((clock_mono_ns() - L.origin_ns) / 1000));
    r.procs = &procs;
    r.nslots = bench_timeline_build(L.recs, L.nrecs, SLOT_US, &r.slots);
    bench_timeline_phases(L.recs, L.nrecs, &r.phase[0], &r.phase[1]);
    r.probe = probe;
    if (probe)
        slow_spells(&r, &L);

    sum_counters(&L, r.out, &r.sent, r.kinds, NULL, NULL);
    for (int i = 0; i < BO__COUNT; i++)
        if (i != BO_ERROR)
            r.answered += r.out[i];
    r.seconds = L.t_last_ns > L.t_first_ns ? (double)(L.t_last_ns - L.t_first_ns) / 1e9 : 0;
    r.rps = r.seconds > 0 ? (double)r.answered / r.seconds : 0;
    r.h = bench_hist_new();
    for (int i = 0; i < L.threads; i++)
        bench_hist_merge(r.h, L.hist[i]);
    if (L.hist_send) {
        r.hs = bench_hist_new();
        for (int i = 0; i < L.threads; i++)
            bench_hist_merge(r.hs, L.hist_send[i]);
    }
    r.self_us_req = r.answered ? (double)r.self_cpu_us / (double)r.answered : 0;
    if (r.server_pid && s1 >= s0) {
        r.server_cpu_us = s1 - s0;
        r.server_us_req = r.answered ? (double)r.server_cpu_us / (double)r.answered : 0;
    } else {
        r.server_pid = 0;
    }
    if (r.redis_pid && r1 >= r0) {
        r.redis_cpu_us = r1 - r0;
        r.redis_us_req = r.answered ? (double)r.redis_cpu_us / (double)r.answered : 0;
    } else {
        r.redis_pid = 0;
    }
    /* With --json -, stdout carries the JSON alone and the report goes to stderr. */
    FILE *hout = strcmp(o.json, "-") == 0 ? stderr : stdout;
    /* The final counts: a sample of their own, or (when the last sample is as late as the
     * run's measured end: the two clocks start a little apart) the last sample's. */
    if (o.html[0] && series.n > 0 && series.s[series.n - 1].t >= r.seconds)
        memcpy(series.s[series.n - 1].out, r.out, sizeof r.out);
    else if (o.html[0])
        bench_html_series_add(&series, r.seconds, r.out);
    /* --html keeps the texts for the page as well: they are printed from memory. */
    char *report_text = NULL, *audit_text = NULL;
    size_t report_len = 0, audit_len = 0;
    FILE *rep = o.html[0] ? open_memstream(&report_text, &report_len) : NULL;
    print_report(rep ? rep : hout, &o, &L, vid, stock, created, login, &r);
    if (rep) {
        fclose(rep);
        fputs(report_text, hout);
    }

    /* the record of success answers */
    audit_record_t rec;
    memset(&rec, 0, sizeof rec);
    rec.voucher_id = vid;
    rec.stock = stock;
    rec.complete = created;
    rec.unanswered = (int64_t)L.unanswered;
    rec.n = L.nsucc;
    rec.answers = xcalloc(L.nsucc, sizeof *rec.answers);
    for (size_t i = 0; i < L.nsucc; i++) {
        rec.answers[i].order_id = L.succ[i].order_id;
        rec.answers[i].user_id = users.user_ids[L.succ[i].user];
    }
    rec.nsoldout = L.nsoldout;
    rec.soldout = xcalloc(L.nsoldout, sizeof *rec.soldout);
    for (size_t i = 0; i < L.nsoldout; i++)
        rec.soldout[i] = users.user_ids[L.soldout[i]];
    rec.nmaybe = L.nmaybe;
    rec.maybe = xcalloc(L.nmaybe ? L.nmaybe : 1, sizeof *rec.maybe);
    for (size_t i = 0; i < L.nmaybe; i++)
        rec.maybe[i] = users.user_ids[L.maybe[i]];
    int status = 0;
    if (o.record[0] && audit_record_write(o.record, &rec, err, sizeof err) < 0) {
        fprintf(stderr, "seckill bench: %s\n", err);
        status = 2;
    }

    /* the lifecycle rehearsal: pays, cancels, the timeouts (bench_life.h) */
    bench_life_t life;
    memset(&life, 0, sizeof life);
    if (o.pay_timeout_s > 0) {
        if (!o.redis_url[0]) {
            fprintf(stderr, "seckill bench: --pay-timeout needs Redis (--redis or --data-dir)\n");
            status = 2;
        } else if (bench_life_run(&o, &L, &users, vid, first_ms, &life, hout, err,
                                  sizeof err) < 0) {
            fprintf(stderr, "seckill bench: lifecycle: %s\n", err);
            status = 2;
        } else if (!life.ok && status < 1) {
            status = 1;
        }
        fflush(hout);
    }

    /* drain and audit */
    audit_drain_t dr;
    memset(&dr, 0, sizeof dr);
    int have_drain = 0, audit_status = -1;
    if (o.audit && o.redis_url[0] && o.db_url[0]) {
        if (audit_wait_drain(o.redis_url, o.db_url, vid, o.drain_timeout_s * 1000, &dr, err,
                             sizeof err) < 0) {
            fprintf(stderr, "seckill bench: waiting for the order writer: %s\n", err);
            status = 2;
        } else {
            have_drain = 1;
            int64_t moved = dr.persisted_end - dr.persisted_start;
            fprintf(hout, "  drain       %s after %.2f s: %lld orders in SQL, %lld written while waiting",
                   dr.drained ? "drained" : "NOT drained", dr.seconds, (long long)dr.persisted_end,
                   (long long)moved);
            if (moved > 0 && dr.active_seconds > 0.05)
                fprintf(hout, " (%.0f orders/s)", (double)moved / dr.active_seconds);
            fprintf(hout, "\n\n");
            fflush(hout);
            announce_target(&o, &L);
            audit_opts_t ao;
            memset(&ao, 0, sizeof ao);
            ao.mode = o.audit_mode[0] ? o.audit_mode : NULL;
            ao.redis_url = o.redis_url;
            ao.db_url = o.db_url;
            ao.vouchers = &vid;
            ao.nvouchers = 1;
            ao.initial_stock = stock;
            ao.answers = rec.answers;
            ao.nanswers = rec.n;
            ao.have_answers = 1;
            ao.answers_complete = created;
            ao.unanswered = (int64_t)L.unanswered;
            ao.soldout_users = rec.soldout;
            ao.nsoldout = rec.nsoldout;
            ao.maybe_users = rec.maybe;
            ao.nmaybe = rec.nmaybe;
            ao.wait_drain_ms = 1;   /* already waited: now it must be drained */
            FILE *aud = o.html[0] ? open_memstream(&audit_text, &audit_len) : NULL;
            ao.out = aud ? aud : hout;
            audit_status = audit_run(&ao);
            if (aud) {
                fclose(aud);
                fputs(audit_text, hout);
            }
            if (audit_status > status)
                status = audit_status;
        }
    } else if (o.audit) {
        fprintf(hout, "  audit       skipped: needs --redis and --db (or --data-dir)\n");
    }
    /* Every answer a 401: the service took none of the buyers' tokens (seeded ones signed
     * with another key, or expired), so nothing was sold or measured -- and the audit of an
     * untouched sale is clean. Not a rehearsal that passed. */
    if (r.answered > 0 && r.out[BO_UNAUTHORIZED] == r.answered) {
        fprintf(stderr, "seckill bench: every answer was 401: the service refused all the "
                        "buyers' tokens%s\n",
                o.login == LOGIN_SEED ? " (--seed-tokens signs them with --token-key-file's key: "
                                        "give the service's, <its data dir>/token-key)" : "");
        if (status < 1)
            status = 1;
    }

    if (o.json[0]) {
        FILE *jf = strcmp(o.json, "-") == 0 ? stdout : fopen(o.json, "w");
        if (!jf) {
            fprintf(stderr, "seckill bench: %s: %s\n", o.json, strerror(errno));
            status = 2;
        } else {
            json_results(jf, o.pay_timeout_s > 0 ? &life : NULL, &o, &L, vid, stock, login, &r, &dr, have_drain, audit_status);
            if (jf != stdout)
                fclose(jf);
        }
    }
    if (o.timeline[0] && write_timeline(o.timeline, &r, err, sizeof err) < 0) {
        fprintf(stderr, "seckill bench: %s\n", err);
        status = 2;
    }
    if (o.html[0]) {
        bench_html_t page = {o.target, vid, stock, &series, L.recs_truncated ? NULL : L.recs,
                             L.recs_truncated ? 0 : L.nrecs, r.h, report_text, audit_text,
                             audit_status, o.pay_timeout_s > 0 ? &life : NULL};
        if (bench_html_write(o.html, &page, err, sizeof err) < 0) {
            fprintf(stderr, "seckill bench: %s\n", err);
            status = 2;
        } else {
            fprintf(hout, "  html        %s\n", o.html);
        }
    }
    free(report_text);
    free(audit_text);
    bench_html_series_free(&series);
    bench_life_free(&life);
    bench_procs_free(&procs);
    bench_cpuprobe_free(probe);
    free(r.slow);
    free(r.slots);
    free(rec.answers);
    free(rec.soldout);
    free(rec.maybe);
    bench_hist_free(r.h);
    bench_hist_free(r.hs);
    bench_load_free(&L);
    bench_users_free(&users);
    return status;
}
