/* log.h -- one-line log records to stderr, safe from any thread.
 *
 * Every record is "2026-11-29T16:45:00.123 LEVEL [thread] message\n", written with a
 * single write(2) so lines from different threads never interleave. Never log tokens,
 * passwords or admin secrets. Login codes are logged only where the log is their
 * delivery: the embedded default and --log-login-codes (logincode.c). */
#ifndef SECKILL_LOG_H
#define SECKILL_LOG_H

enum { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

/* Records below this level are dropped; set once at start, read without locking. */
void log_set_level(int level);
/* Name shown in the [thread] column for records from the calling thread ("main", "w0"...).
 * The string must outlive the thread (use a literal or a static buffer). */
void log_set_thread_name(const char *name);

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
