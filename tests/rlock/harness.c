/*
 * harness.c -- see harness.h.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SERVERS 16
static th_server_t *started[MAX_SERVERS];
static pid_t started_pid[MAX_SERVERS];
static char started_dir[MAX_SERVERS][64];
static int nstarted;
static th_server_t shared;
static bool shared_up;

int64_t th_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t th_now_ms(void)
{
    return th_now_us() / 1000;
}

void th_sleep_ms(int64_t ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void cleanup(void)
{
    for (int i = 0; i < nstarted; i++) {
        if (started_pid[i] > 0) {
            kill(started_pid[i], SIGCONT);
            kill(started_pid[i], SIGKILL);
            waitpid(started_pid[i], NULL, 0);
            started_pid[i] = 0;
        }
        if (started_dir[i][0]) {
            char cmd[1200];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", started_dir[i]);
            if (system(cmd) != 0) {
            }
            started_dir[i][0] = 0;
        }
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t n = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &n) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port == 6379 ? -1 : port;
}

static bool ping(int port, int64_t timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    while (th_now_ms() < end) {
        struct timeval tv = { 0, 200000 };
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) {
            redisReply *r = redisCommand(c, "PING");
            bool ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return true;
        } else if (c) {
            redisFree(c);
        }
        th_sleep_ms(20);
    }
    return false;
}

static bool launch(th_server_t *s)
{
    char port[16], mport[16];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(mport, sizeof mport, "%d", s->master_port);
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        char sock[128];
        snprintf(sock, sizeof sock, "%s/redis.sock", s->dir);
        if (s->master_port < 0)
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", s->dir, "--daemonize", "no",
                   "--protected-mode", "no", "--logfile", "", "--loglevel", "warning",
                   "--unixsocket", sock, "--unixsocketperm", "700", (char *)NULL);
        else if (s->master_port > 0)
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", s->dir, "--daemonize", "no",
                   "--protected-mode", "no", "--logfile", "", "--loglevel", "warning",
                   "--replicaof", "127.0.0.1", mport, (char *)NULL);
        else
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", s->dir, "--daemonize", "no",
                   "--protected-mode", "no", "--logfile", "", "--loglevel", "warning",
                   (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < nstarted; i++)
        if (started[i] == s) {
            started_pid[i] = pid;
            return ping(s->port, 5000);
        }
    if (nstarted < MAX_SERVERS) {
        if (nstarted == 0) atexit(cleanup);
        started[nstarted] = s;
        started_pid[nstarted] = pid;
        snprintf(started_dir[nstarted], sizeof started_dir[0], "%s", s->dir);
        nstarted++;
    }
    return ping(s->port, 5000);
}

static bool start_impl(th_server_t *s, int master_port);

bool th_server_start(th_server_t *s)
{
    return start_impl(s, 0);
}

bool th_server_start_unix(th_server_t *s)
{
    return start_impl(s, -1);
}

bool th_server_start_replica(th_server_t *s, const th_server_t *master)
{
    /* Redis 7 delays a diskless full sync by 5 s by default */
    redisContext *m = th_connect(master->url);
    if (m) {
        redisReply *x = redisCommand(m, "CONFIG SET repl-diskless-sync-delay 0");
        if (x) freeReplyObject(x);
        redisFree(m);
    }
    if (!start_impl(s, master->port)) return false;
    redisContext *r = th_connect(s->url);
    bool up = false;
    for (int i = 0; r && i < 500 && !up; i++) {
        redisReply *x = redisCommand(r, "INFO replication");
        up = x && x->type == REDIS_REPLY_STRING && strstr(x->str, "master_link_status:up");
        if (x) freeReplyObject(x);
        if (!up) th_sleep_ms(20);
    }
    if (r) redisFree(r);
    /* ...and the master must count it (online, acknowledging) for WAIT */
    redisContext *m2 = up ? th_connect(master->url) : NULL;
    bool online = false;
    for (int i = 0; m2 && i < 500 && !online; i++) {
        redisReply *x = redisCommand(m2, "WAIT 1 100");
        online = x && x->type == REDIS_REPLY_INTEGER && x->integer >= 1;
        if (x) freeReplyObject(x);
        if (!online) th_sleep_ms(20);
    }
    if (m2) redisFree(m2);
    return up && online;
}

static bool start_impl(th_server_t *s, int master_port)
{
    memset(s, 0, sizeof *s);
    s->master_port = master_port;
    snprintf(s->dir, sizeof s->dir, "/tmp/rlock-test-XXXXXX");
    if (!mkdtemp(s->dir)) return false;
    for (int tries = 0; tries < 5; tries++) {
        s->port = free_port();
        if (s->port <= 0) continue;
        snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", s->port);
        if (launch(s)) return true;
        th_server_kill(s, SIGKILL);
    }
    return false;
}

bool th_server_restart(th_server_t *s)
{
    for (int tries = 0; tries < 50; tries++) {
        if (launch(s)) return true;
        th_server_kill(s, SIGKILL);
        th_sleep_ms(50);
    }
    return false;
}

static void forget(th_server_t *s)
{
    for (int i = 0; i < nstarted; i++)
        if (started[i] == s) started_pid[i] = 0;
    s->pid = 0;
}

void th_server_stop(th_server_t *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGCONT);
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    forget(s);
}

void th_server_kill(th_server_t *s, int sig)
{
    if (s->pid <= 0) return;
    if (sig == SIGKILL) kill(s->pid, SIGCONT);
    kill(s->pid, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
        waitpid(s->pid, NULL, 0);
        forget(s);
    }
}

const char *th_url(void)
{
    const char *u = getenv("REDIS_URL");
    if (u && *u) return u;
    if (!shared_up) {
        if (!th_server_start(&shared)) {
            fprintf(stderr, "harness: cannot start redis-server\n");
            exit(2);
        }
        shared_up = true;
    }
    return shared.url;
}

bool th_parse_url(const char *url, char *host, size_t hlen, int *port)
{
    const char *p = strncmp(url, "redis://", 8) == 0 ? url + 8 : url;
    const char *at = strchr(p, '@');
    if (at) p = at + 1;
    size_t n = strcspn(p, ":/");
    if (n == 0 || n >= hlen) return false;
    memcpy(host, p, n);
    host[n] = 0;
    *port = 6379;
    if (p[n] == ':') *port = atoi(p + n + 1);
    return true;
}

redisContext *th_connect(const char *url)
{
    char host[256];
    int port;
    if (!th_parse_url(url, host, sizeof host, &port)) return NULL;
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

long long th_subscribers(const char *url, const char *name, const char *suffix)
{
    redisContext *r = th_connect(url);
    if (!r) return -1;
    redisReply *x = redisCommand(r, "PUBSUB NUMSUB rlock:{%s}%s:ch", name, suffix);
    long long n = -1;
    if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        x->element[1]->type == REDIS_REPLY_INTEGER)
        n = x->element[1]->integer;
    if (x) freeReplyObject(x);
    redisFree(r);
    return n;
}

rlock_client_t *th_client(const char *url, int64_t watchdog_ms)
{
    rlock_config_t cfg;
    rlock_config_init(&cfg);
    cfg.url = url;
    if (watchdog_ms > 0) cfg.watchdog_lease_ms = watchdog_ms;
    cfg.unsubscribe_delay_ms = 200;
    cfg.command_timeout_ms = 1000;
    cfg.connect_timeout_ms = 500;
    rlock_client_t *c = NULL;
    if (rlock_client_new(&cfg, &c) != RLOCK_OK) return NULL;
    return c;
}

void th_name(char *buf, size_t len, const char *prefix)
{
    unsigned char r[6];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) memset(r, 7, sizeof r);
    snprintf(buf, len, "%s-%02x%02x%02x%02x%02x%02x", prefix, r[0], r[1], r[2], r[3], r[4], r[5]);
}

pid_t th_spawn_self(char *const args[], int *to_child, int *from_child)
{
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return -1;
    char *argv[32];
    int n = 0;
    argv[n++] = "rlock-test-child";
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (to_child) *to_child = in[1];
    else close(in[1]);
    if (from_child) *from_child = out[0];
    else close(out[0]);
    return pid;
}

bool th_read_line(int fd, char *buf, size_t len, int64_t timeout_ms)
{
    size_t n = 0;
    int64_t end = th_now_ms() + timeout_ms;
    while (n + 1 < len) {
        int64_t left = end - th_now_ms();
        if (left <= 0) return false;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int r = poll(&p, 1, (int)left);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return false;
        }
        char ch;
        ssize_t k = read(fd, &ch, 1);
        if (k <= 0) return false;
        if (ch == '\n') break;
        buf[n++] = ch;
    }
    buf[n] = 0;
    return true;
}

int th_wait_exit(pid_t pid, int64_t timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0) return -1;
        if (th_now_ms() >= end) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
        th_sleep_ms(10);
    }
}
