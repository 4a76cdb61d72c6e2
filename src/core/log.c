/* log.c -- one-line log records to stderr (see log.h).
 *
 * Each record is formatted into one buffer and written with a single write(2), so lines
 * from different threads never interleave (writes to a pipe up to PIPE_BUF bytes are
 * atomic; to a file or terminal one write is one line in practice). Control characters
 * in the message are replaced, so text that came from a client (a path, a header) cannot
 * forge extra log lines. */
#include "core/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int min_level = LOG_INFO;
static __thread const char *thread_name;

void log_set_level(int level)
{
    atomic_store_explicit(&min_level, level, memory_order_relaxed);
}

void log_set_thread_name(const char *name)
{
    thread_name = name;
}

static const char *level_name(int level)
{
    switch (level) {
    case LOG_DEBUG: return "DEBUG";
    case LOG_INFO: return "INFO";
    case LOG_WARN: return "WARN";
    default: return "ERROR";
    }
}

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(STDERR_FILENO, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return;          /* nowhere left to report a logging failure */
        }
        p += k;
        n -= (size_t)k;
    }
}

void log_msg(int level, const char *fmt, ...)
{
    if (level < atomic_load_explicit(&min_level, memory_order_relaxed))
        return;
    int saved_errno = errno;  /* callers may log and then inspect errno */

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);

    char tname[24];
    const char *name = thread_name;
    if (!name) {
        pid_t tid = (pid_t)syscall(SYS_gettid);
        if (tid == getpid())
            name = "main";
        else {
            snprintf(tname, sizeof tname, "t%d", (int)tid);
            name = tname;
        }
    }

    char stack[1024];
    char *buf = stack;
    size_t cap = sizeof stack;
    int head = snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03d %s [%s] ",
                        tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                        tm.tm_sec, (int)(ts.tv_nsec / 1000000), level_name(level), name);
    if (head < 0 || (size_t)head >= cap)
        head = 0;             /* cannot happen with a sane thread name; drop the prefix */

    va_list ap;
    va_start(ap, fmt);
    int body = vsnprintf(buf + head, cap - (size_t)head, fmt, ap);
    va_end(ap);
    if (body < 0)
        body = 0;
    if ((size_t)head + (size_t)body + 1 >= cap) {
        /* Long record: format again into a heap buffer of the exact size. */
        size_t need = (size_t)head + (size_t)body + 2;
        char *big = malloc(need);
        if (big) {
            memcpy(big, buf, (size_t)head);
            va_start(ap, fmt);
            vsnprintf(big + head, need - (size_t)head, fmt, ap);
            va_end(ap);
            buf = big;
            cap = need;
        } else {
            body = (int)(cap - (size_t)head - 2);   /* truncated but still one line */
        }
    }
    size_t n = (size_t)head + (size_t)body;
    for (size_t i = (size_t)head; i < n; i++) {
        unsigned char ch = (unsigned char)buf[i];
        if (ch < 0x20 && ch != '\t')
            buf[i] = '?';
    }
    buf[n++] = '\n';
    write_all(buf, n);
    if (buf != stack)
        free(buf);
    errno = saved_errno;
}
