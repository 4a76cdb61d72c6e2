/* redis_child.c -- the embedded default's private redis-server (see redis_child.h).
 *
 * Start: find the binary on PATH (before forking, so a missing one gives a clear hint),
 * create <data_dir>/redis, clear a stale socket left by a crashed run (refusing to start
 * if a live redis-server still answers on it), fork and exec redis-server listening only
 * on <data_dir>/redis/redis.sock, then poll with PING every 50 ms until it answers.
 *
 * The child:
 *   - gets PR_SET_PDEATHSIG(SIGTERM): if this process dies, even by kill -9, the kernel
 *     sends SIGTERM and redis-server shuts down cleanly (AOF flushed). The signal follows
 *     the *thread* that forked, so redis_child_start must be called from the main
 *     thread (or one that lives as long as the process);
 *   - runs in its own process group, so a Ctrl-C in the terminal reaches only us; we
 *     then stop it ourselves, after the workers and the order writer are done with it;
 *   - has its stdout/stderr appended to redis.log (next to its own log lines), so a
 *     start-up failure is reported with the log's last line;
 *   - given a data dir pinned by its descriptor (/proc/self/fd/N, datadir.h), keeps that
 *     one descriptor open across exec, so its --dir, socket and log paths name the same
 *     directory in the child; every other descriptor is closed.
 *
 * Watch: the main thread calls redis_child_watch() about every 250 ms. A child that died
 * (kill -9, OOM killer, a crash) is reaped and started again on the same socket and
 * directory; it reloads its AOF, which holds every write it answered (Redis appends to
 * the AOF before it replies; everysec only bounds what a *host* crash loses). The workers,
 * the writer and the rebuild watch reconnect by themselves.
 *
 * Stop: SHUTDOWN over the socket (falls back to SIGTERM), wait up to 10 s, then SIGKILL. */
#include "server/events.h"
#include "redis/redis_child.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/xmem.h"

#define START_WAIT_MS 10000
#define POLL_MS 50
#define STOP_WAIT_MS 10000
#define RESTART_RETRY_MS 2000   /* between failed restarts (a crash loop logs every 2 s) */

struct redis_child {
    pid_t pid;             /* 0 while none runs (it died and a restart failed) */
    int fsync_always;
    char bin[PATH_MAX];    /* the redis-server binary found at start */
    char dir[PATH_MAX];    /* <data_dir>/redis, absolute */
    int keep_fd;           /* the data dir's descriptor the paths go through, or -1 */
    char sock[108];        /* sizeof(sun_path) */
    char log[PATH_MAX];
    uint64_t retry_ms;     /* monotonic: when to try a failed restart again */
};

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Finds bin: as given if it holds a slash, else on PATH. Returns 0 and the path. */
static int find_bin(const char *bin, char *out, size_t outlen)
{
    if (strchr(bin, '/')) {
        if (access(bin, X_OK) != 0 || (size_t)snprintf(out, outlen, "%s", bin) >= outlen)
            return -1;
        return 0;
    }
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    const char *p = path;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        int len = n ? snprintf(out, outlen, "%.*s/%s", (int)n, p, bin)
                    : snprintf(out, outlen, "./%s", bin);
        struct stat st;
        if (len > 0 && (size_t)len < outlen && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
            access(out, X_OK) == 0)
            return 0;
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    return -1;
}

/* mkdir -p with mode 0700 for the directories it creates. */
static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s", path) >= sizeof(tmp))
        return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
        return -1;
    struct stat st;
    return stat(tmp, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* The last non-empty line of what the file gained past offset from, or "" if none. */
static void last_line(const char *file, off_t from, char *out, size_t outlen)
{
    out[0] = '\0';
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[4096];
    off_t end = lseek(fd, 0, SEEK_END);
    off_t start = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
    if (start < from)
        start = from;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, start);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    const char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    size_t len = strlen(line);
    if (len >= outlen)
        len = outlen - 1;
    memcpy(out, line, len);
    out[len] = '\0';
}

/* 1 if a server answers PING on sock ("LOADING" counts as answering), else 0.
 * *loading is set when it answered that it is still loading its data. */
static int ping_sock(const char *sock, int timeout_ms, int *loading)
{
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    redisContext *ctx = redisConnectUnixWithTimeout(sock, tv);
    int up = 0;
    if (loading)
        *loading = 0;
    /* hiredis 0.14 bounds only the connect of a Unix socket; bound the reply too. */
    if (ctx && !ctx->err && redisSetTimeout(ctx, tv) == REDIS_OK) {
        redisReply *r = redisCommand(ctx, "PING");
        if (r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0) {
            up = 1;
        } else if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) == 0) {
            up = 1;
            if (loading)
                *loading = 1;
        }
        if (r)
            freeReplyObject(r);
    }
    if (ctx)
        redisFree(ctx);
    return up;
}

/* Removes a socket left by a crashed run. A live server on it is waited for briefly
 * (it may be shutting down after its parent died), then refused. */
static int clear_stale_socket(const char *sock, char *err, size_t errlen)
{
    uint64_t until = clock_mono_ms() + 5000;
    for (;;) {
        struct stat st;
        if (lstat(sock, &st) < 0)
            return 0;
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "%s exists and is not a socket: remove it or use another --data-dir",
                     sock);
            return -1;
        }
        if (!ping_sock(sock, 500, NULL)) {
            if (unlink(sock) < 0 && errno != ENOENT) {
                snprintf(err, errlen, "cannot remove stale socket %s: %s", sock, strerror(errno));
                return -1;
            }
            log_info("removed stale redis socket %s", sock);
            return 0;
        }
        if (clock_mono_ms() >= until) {
            snprintf(err, errlen,
                     "a redis-server is already running on %s (another seckill using this "
                     "--data-dir?): stop it or use another --data-dir", sock);
            return -1;
        }
        sleep_ms(100);
    }
}

static int wait_exit(pid_t pid, int ms, int *status)
{
    uint64_t until = clock_mono_ms() + (uint64_t)ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return 0;
        if (clock_mono_ms() >= until)
            return -1;
        sleep_ms(20);
    }
}

static void describe_status(int st, char *out, size_t outlen)
{
    if (WIFEXITED(st))
        snprintf(out, outlen, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(out, outlen, "signal %d", WTERMSIG(st));
    else
        snprintf(out, outlen, "status %d", st);
}

/* Clears a stale socket, forks and execs redis-server on c's socket and directory, and
 * waits until it answers PING. Returns 0 (c->pid set) or -1 with err. */
static int spawn(redis_child_t *c, char *err, size_t errlen)
{
    if (clear_stale_socket(c->sock, err, errlen) < 0)
        return -1;

    int logfd = open(c->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    off_t log_start = logfd >= 0 ? lseek(logfd, 0, SEEK_END) : 0;
    int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (logfd < 0 || nullfd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", c->log, strerror(errno));
        if (logfd >= 0)
            close(logfd);
        if (nullfd >= 0)
            close(nullfd);
        return -1;
    }

    /* Everything the child needs is built before fork: after it, only async-signal-safe
     * calls (the parent may have other threads). */
    const char *argv[] = {
        c->bin,
        "--port", "0",
        "--unixsocket", c->sock,
        "--unixsocketperm", "700",
        "--dir", c->dir,
        "--appendonly", "yes",
        "--appendfsync", c->fsync_always ? "always" : "everysec",
        "--save", "",
        "--daemonize", "no",
        "--logfile", c->log,
        NULL,
    };
    static const char exec_failed[] = "seckill: exec of redis-server failed\n";
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(logfd);
        close(nullfd);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);   /* the parent died before prctl took effect */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        static const int sigs[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGCHLD, SIGUSR1 };
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
            sigaction(sigs[i], &dfl, NULL);
        dup2(nullfd, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        if (c->keep_fd >= 3) {
            /* the paths are /proc/self/fd/<keep_fd>/...: the same directory in the child */
            fcntl(c->keep_fd, F_SETFD, 0);
            if (c->keep_fd > 3)
                close_range(3, (unsigned)c->keep_fd - 1, 0);
            close_range((unsigned)c->keep_fd + 1, ~0U, 0);
        } else {
            close_range(3, ~0U, 0);
        }
        execv(c->bin, (char *const *)argv);
        ssize_t w = write(2, exec_failed, sizeof(exec_failed) - 1);
        (void)w;
        _exit(127);
    }
    close(logfd);
    close(nullfd);
    c->pid = pid;

    uint64_t deadline = clock_mono_ms() + START_WAIT_MS;
    int said_loading = 0;
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char how[64], line[512];
            describe_status(st, how, sizeof(how));
            last_line(c->log, log_start, line, sizeof(line));
            snprintf(err, errlen, "redis-server exited during start (%s): %s", how,
                     line[0] ? line : "(nothing in its log)");
            c->pid = 0;
            return -1;
        }
        int loading = 0;
        if (ping_sock(c->sock, 200, &loading)) {
            if (!loading)
                break;
            /* Answering but still reading its AOF: progress, so keep waiting. */
            if (!said_loading++)
                log_info("redis-server is loading its data from %s ...", c->dir);
            deadline = clock_mono_ms() + START_WAIT_MS;
        }
        if (clock_mono_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            snprintf(err, errlen, "redis-server did not answer on %s within %d s (see %s)",
                     c->sock, START_WAIT_MS / 1000, c->log);
            c->pid = 0;
            return -1;
        }
        sleep_ms(POLL_MS);
    }
    return 0;
}

redis_child_t *redis_child_start(const char *bin, const char *data_dir, int fsync_always,
                                 char *url, size_t urllen, char *err, size_t errlen)
{
    char binpath[PATH_MAX];
    if (bin == NULL || *bin == '\0')
        bin = "redis-server";
    if (data_dir == NULL || *data_dir == '\0')
        data_dir = "./var";
    if (find_bin(bin, binpath, sizeof(binpath)) < 0) {
        if (strcmp(bin, "redis-server") == 0)
            snprintf(err, errlen, "redis-server not found: install it with `apt-get install "
                                  "redis-server`, or pass --redis redis://host:port");
        else
            snprintf(err, errlen, "redis-server not found (%s): install it with `apt-get "
                                  "install redis-server`, or pass --redis redis://host:port", bin);
        return NULL;
    }

    redis_child_t *c = xcalloc(1, sizeof(*c));
    c->fsync_always = fsync_always;
    snprintf(c->bin, sizeof(c->bin), "%s", binpath);
    char rel[PATH_MAX];
    /* A data dir pinned by its descriptor (datadir.h) is used as it is: realpath would
     * turn it back into a path resolved again. */
    int fd = -1, used = 0;
    c->keep_fd = sscanf(data_dir, "/proc/self/fd/%d%n", &fd, &used) == 1 &&
                 data_dir[used] == '\0' ? fd : -1;
    if ((size_t)snprintf(rel, sizeof(rel), "%s/redis", data_dir) >= sizeof(rel) ||
        mkdir_p(rel) < 0 ||
        (c->keep_fd >= 0 ? snprintf(c->dir, sizeof(c->dir), "%s", rel) < 0
                         : realpath(rel, c->dir) == NULL)) {
        snprintf(err, errlen, "cannot create %s: %s", rel, strerror(errno));
        free(c);
        return NULL;
    }
    if ((size_t)snprintf(c->sock, sizeof(c->sock), "%s/redis.sock", c->dir) >= sizeof(c->sock)) {
        snprintf(err, errlen, "socket path %s/redis.sock is longer than %zu bytes: use a "
                              "shorter --data-dir", c->dir, sizeof(c->sock) - 1);
        free(c);
        return NULL;
    }
    if ((size_t)snprintf(c->log, sizeof(c->log), "%s/redis.log", c->dir) >= sizeof(c->log) ||
        (size_t)snprintf(url, urllen, "unix:%s", c->sock) >= urllen) {
        snprintf(err, errlen, "redis url buffer too small");
        free(c);
        return NULL;
    }
    if (spawn(c, err, errlen) < 0) {
        free(c);
        return NULL;
    }
    log_debug("redis-server started (pid %d, %s, appendfsync %s, log %s)", (int)c->pid, url,
              fsync_always ? "always" : "everysec", c->log);
    return c;
}

int redis_child_watch(redis_child_t *c)
{
    if (c == NULL)
        return 0;
    if (c->pid > 0) {
        int st = 0;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR))
            return 0;          /* running */
        char how[64], line[512];
        if (r == c->pid)
            describe_status(st, how, sizeof(how));
        else
            snprintf(how, sizeof(how), "waitpid: %s", strerror(errno));
        last_line(c->log, 0, line, sizeof(line));
        log_error("private redis-server (pid %d) exited (%s; its log's last line: %s): starting "
                  "it again from its AOF", (int)c->pid, how, line[0] ? line : "(empty)");
        c->pid = 0;
        c->retry_ms = 0;
    }
    if (clock_mono_ms() < c->retry_ms)
        return -1;
    char err[1024];
    if (spawn(c, err, sizeof(err)) < 0) {
        log_error("private redis-server: restart failed: %s; trying again in %d s", err,
                  RESTART_RETRY_MS / 1000);
        c->retry_ms = clock_mono_ms() + RESTART_RETRY_MS;
        return -1;
    }
    log_info("private redis-server restarted (pid %d) on unix:%s", (int)c->pid, c->sock);
    events_add(EV_REDIS_RESTART, 0, "private redis-server restarted (pid %d)", (int)c->pid);
    return 1;
}

void redis_child_stop(redis_child_t *c)
{
    if (c == NULL)
        return;
    if (c->pid <= 0) {
        /* It died and could not be started again: nothing to stop (and kill(0, ...)
         * would signal our own process group). */
        free(c);
        return;
    }
    int sent = 0;
    struct timeval tv = { 1, 0 };
    redisContext *ctx = redisConnectUnixWithTimeout(c->sock, tv);
    if (ctx && !ctx->err && redisSetTimeout(ctx, tv) == REDIS_OK) {
        /* Success closes the connection (NULL reply, EOF); an error reply means it
         * refused, and a timeout means it is stuck: both get SIGTERM. */
        redisReply *r = redisCommand(ctx, "SHUTDOWN");
        if (r == NULL) {
            sent = ctx->err == REDIS_ERR_EOF;
        } else {
            log_warn("redis-server refused SHUTDOWN: %s; sending SIGTERM",
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
            freeReplyObject(r);
        }
    }
    if (ctx)
        redisFree(ctx);
    if (!sent)
        kill(c->pid, SIGTERM);

    int st = 0;
    if (wait_exit(c->pid, STOP_WAIT_MS, &st) < 0) {
        log_warn("redis-server (pid %d) did not stop within %d s; killing it", (int)c->pid,
                 STOP_WAIT_MS / 1000);
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &st, 0);
    } else {
        char how[64];
        describe_status(st, how, sizeof(how));
        log_info("redis-server stopped (%s)", how);
    }
    free(c);
}
