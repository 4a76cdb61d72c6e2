/* config.c -- settings from defaults, a config file, SECKILL_* variables and flags.
 *
 * One table row per setting drives all four sources and the --help text, so a setting
 * cannot exist as a flag but not as a file key. File syntax: `key = value` lines, `#`
 * comments, keys spelled like the flags without the dashes (listen, redis, db, ...).
 * Precedence: flag > environment > file > default. The file itself is named by
 * --config or SECKILL_CONFIG. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/secret.h"
#include "core/url.h"

typedef enum { T_STR, T_INT, T_SIZE, T_LISTEN, T_LEVEL, T_BOOL, T_RATE, T_ADDR } ctype_t;

typedef struct setting {
    const char *name;      /* flag without "--", file key */
    const char *env;       /* environment variable */
    ctype_t type;
    size_t off;            /* offsetof(config_t, field) */
    size_t size;           /* for T_STR: buffer size */
    const char *def;       /* default as text ("" = empty) */
    long min, max;         /* for T_INT / T_SIZE */
    const char *help;
} setting_t;

#define S(name, env, type, field, def, min, max, help) \
    {name, env, type, offsetof(config_t, field), sizeof(((config_t *)0)->field), def, min, max, help}

static const setting_t settings[] = {
    S("listen", "SECKILL_LISTEN", T_LISTEN, listen_host, "127.0.0.1:8081", 0, 0,
      "HOST:PORT to serve HTTP on (the course's port 8081)"),
    S("threads", "SECKILL_THREADS", T_INT, threads, "0", 0, 256,
      "worker threads (0 = number of cores)"),
    S("steer-connections", "SECKILL_STEER_CONNECTIONS", T_BOOL, steer_connections, "1", 0, 1,
      "give each connection to the worker whose listener is marked with the CPU that took its handshake (worker i: the i-th CPU, when there are as many CPUs as workers), unless that worker has too many; the workers stay free to run anywhere"),
    S("redis", "SECKILL_REDIS", T_STR, redis_url, "", 0, 0,
      "redis://[:password@]host:port[/db] or unix:PATH; empty = start a private redis-server"),
    S("db", "SECKILL_DB", T_STR, db_url, "", 0, 0,
      "sqlite:PATH (default sqlite:<data-dir>/seckill.db)"),
    S("data-dir", "SECKILL_DATA_DIR", T_STR, data_dir, "./var", 0, 0,
      "directory for the SQLite file and the private redis-server's data"),
    S("mode", "SECKILL_MODE", T_STR, mode_name, "stream", 0, 0,
      "order mode: stream (Redis Stream, durable), queue (in-process, loses orders on a crash) or sync (SQL under a per-user lock); "
      "or a row a plug-in adds to the table of order modes (sale/order_mode.h): the lab's course steps (docs/lab.md)"),
    S("admin-token", "SECKILL_ADMIN_TOKEN", T_STR, admin_token, "", 0, 0,
      "token for x-admin-token (voucher creation); generated on the embedded default"),
    S("name", "SECKILL_NAME", T_STR, name, "", 0, 0,
      "instance name = stream consumer name (default host:pid; \"local\" when embedded)"),
    S("log-level", "SECKILL_LOG_LEVEL", T_LEVEL, log_level, "info", 0, 0,
      "debug, info, warn or error"),
    S("redis-server-bin", "SECKILL_REDIS_SERVER_BIN", T_STR, redis_server_bin, "redis-server", 0, 0,
      "redis-server binary for the embedded default"),
    S("appendfsync-always", "SECKILL_APPENDFSYNC_ALWAYS", T_BOOL, appendfsync_always, "0", 0, 1,
      "embedded redis-server: fsync the AOF on every write (slower, loses nothing)"),
    S("redis-timeout-ms", "SECKILL_REDIS_TIMEOUT_MS", T_INT, redis_timeout_ms, "1000", 10, 60000,
      "deadline of every Redis command"),
    S("redis-wait-replicas", "SECKILL_REDIS_WAIT_REPLICAS", T_INT, redis_wait_replicas, "0", 0, 16,
      "after an admission, WAIT until N replicas have it (timeout: half the Redis deadline); "
      "on timeout the buyer is told to retry, never success"),
    S("sql-timeout-ms", "SECKILL_SQL_TIMEOUT_MS", T_INT, sql_timeout_ms, "2000", 10, 60000,
      "deadline of every SQL call"),
    S("token-ttl-s", "SECKILL_TOKEN_TTL_S", T_INT, token_ttl_s, "1800", 10, 100000000,
      "login token sliding expiry"),
    S("token-cache-ms", "SECKILL_TOKEN_CACHE_MS", T_INT, token_cache_ms, "1000", 0, 60000,
      "how long a worker trusts a token it has looked up"),
    S("token-format", "SECKILL_TOKEN_FORMAT", T_STR, token_format, "signed", 0, 0,
      "login tokens: signed (HMAC, verified without Redis) or opaque (random, looked up in Redis)"),
    S("token-key-file", "SECKILL_TOKEN_KEY_FILE", T_STR, token_key_file, "", 0, 0,
      "key of signed tokens, shared by every instance (default <data-dir>/token-key, created 0600)"),
    S("token-refresh-s", "SECKILL_TOKEN_REFRESH_S", T_INT, token_refresh_s, "60", 1, 60,
      "sliding expiry: at most one EXPIRE per token per worker per this many seconds"),
    S("token-max-age-s", "SECKILL_TOKEN_MAX_AGE_S", T_INT, token_max_age_s, "86400", 0, 100000000,
      "signed tokens are refused this long after their login however much they are used (0 = no limit)"),
    S("token-accept-opaque", "SECKILL_TOKEN_ACCEPT_OPAQUE", T_BOOL, token_accept_opaque, "0", 0, 1,
      "signed format: also accept a token that does not verify if Redis has its login:token:<t> hash "
      "(course-style tokens of a backend sharing Redis); opaque format: always"),
    S("pow-min-bits", "SECKILL_POW_MIN_BITS", T_INT, pow_min_bits, "16", 8, 32,
      "bot gate (docs/bot-gate.md): proof-of-work difficulty in bits at a quiet join rate"),
    S("pow-max-bits", "SECKILL_POW_MAX_BITS", T_INT, pow_max_bits, "20", 8, 32,
      "bot gate: the difficulty's cap in bits"),
    S("pow-rate", "SECKILL_POW_RATE", T_INT, pow_rate, "50", 1, 1000000,
      "bot gate: right solutions per second per voucher and instance before the difficulty "
      "rises (one bit per doubling)"),
    S("code-gate", "SECKILL_CODE_GATE", T_STR, code_gate, "off", 0, 0,
      "POST /user/code needs a solved proof-of-work challenge: off, sale (while a voucher with "
      "botGate is on sale) or always"),
    S("rate-ip-token-lookup", "SECKILL_RATE_IP_TOKEN_LOOKUP", T_RATE, rate_ip_token_lookup, "5/s:20", 0, 0,
      "Redis lookups of tokens that turn out unknown, per client IP (per instance, 1/threads per worker); "
      "over it such tokens get 401 without Redis (0 = off)"),
    S("token-lookup-budget", "SECKILL_TOKEN_LOOKUP_BUDGET", T_RATE, token_lookup_budget, "500/s:1000", 0, 0,
      "Redis lookups of tokens that turn out unknown, all clients together (per instance, 1/threads per worker; 0 = off)"),
    S("rate-ip-admin", "SECKILL_RATE_IP_ADMIN", T_RATE, rate_ip_admin, "5/m:5", 0, 0,
      "wrong x-admin-token guesses per client IP (exact per instance); over it: 429 with Retry-After, "
      "the token not even compared (0 = off)"),
    S("soldout-cache-ms", "SECKILL_SOLDOUT_CACHE_MS", T_INT, soldout_cache_ms, "500", 0, 60000,
      "how long a worker answers sold out / ended / not started from memory"),
    S("writer-batch", "SECKILL_WRITER_BATCH", T_INT, writer_batch, "512", 1, 100000,
      "stream entries per SQL transaction at most (an entry: one admission call's orders, <= 64)"),
    S("writer-block-ms", "SECKILL_WRITER_BLOCK_MS", T_INT, writer_block_ms, "1000", 10, 60000,
      "how long the writer waits for new orders per read"),
    S("writer-nice", "SECKILL_WRITER_NICE", T_INT, writer_nice, "10", 0, 19,
      "the order writer runs this much nicer than the workers: it yields to answers and catches up"),
    S("claim-idle-ms", "SECKILL_CLAIM_IDLE_MS", T_INT, claim_idle_ms, "30000", 100, 86400000,
      "adopt stream entries left pending this long by a dead instance"),
    S("writer-drain-sweep-ms", "SECKILL_WRITER_DRAIN_SWEEP_MS", T_INT, writer_drain_sweep_ms, "60000", 100, 86400000,
      "the writer re-checks up to 64 drained streams this often, reads again any with orders (tests shorten it)"),
    S("queue-capacity", "SECKILL_QUEUE_CAPACITY", T_SIZE, queue_capacity, "1048576", 1, 100000000,
      "queue mode: admitted orders the in-process queue holds (the course's 1024*1024)"),
    S("lab-pause", "SECKILL_LAB_PAUSE", T_STR, lab_pause, "", 0, 0,
      "lab modes only: POINT:MS[,...] delays at check-write, get-del, unlock, pop-write, subscribe (docs/lab.md)"),
    S("lab-lease-ms", "SECKILL_LAB_LEASE_MS", T_INT, lab_lease_ms, "1200000", 1, 86400000,
      "lab lock modes (setnx, setnx-owner, lua-unlock): the lock's lease (the course's tryLock(1200) s)"),
    S("max-conns", "SECKILL_MAX_CONNS", T_INT, max_conns, "0", 0, 1000000,
      "open connections per worker thread (0 = 10000, lowered to fit the file-descriptor limit)"),
    S("idle-timeout-s", "SECKILL_IDLE_TIMEOUT_S", T_INT, idle_timeout_s, "60", 1, 86400,
      "close keep-alive connections idle this long"),
    S("header-timeout-s", "SECKILL_HEADER_TIMEOUT_S", T_INT, header_timeout_s, "10", 1, 3600,
      "a started request must arrive completely within this time"),
    S("max-header-bytes", "SECKILL_MAX_HEADER_BYTES", T_SIZE, max_header_bytes, "8192", 1024, 1048576,
      "request line plus headers at most"),
    S("max-body-bytes", "SECKILL_MAX_BODY_BYTES", T_SIZE, max_body_bytes, "65536", 1024, 67108864,
      "request body at most"),
    S("max-conns-per-ip", "SECKILL_MAX_CONNS_PER_IP", T_INT, max_conns_per_ip, "1024", 0, 10000000,
      "open connections from one client address, all workers together (0 = no cap)"),
    S("max-buffered-bytes", "SECKILL_MAX_BUFFERED_BYTES", T_SIZE, max_buffered_bytes, "268435456",
      65536, 1099511627776L, "request bytes held in memory by all connections together; over it: 503"),
    S("max-buffered-ip-pct", "SECKILL_MAX_BUFFERED_IP_PCT", T_INT, max_buffered_ip_pct, "10", 1, 100,
      "share of --max-buffered-bytes one client address (IPv6: its /64) may hold, in percent; over it: 503"),
    S("min-body-rate", "SECKILL_MIN_BODY_RATE", T_INT, min_body_rate, "1024", 0, 1073741824,
      "bytes/s a request body must keep up after a 2 s grace, or 408 and close (0 = off)"),
    S("sndbuf-bytes", "SECKILL_SNDBUF_BYTES", T_SIZE, sndbuf_bytes, "65536", 0, 16777216,
      "SO_SNDBUF of every accepted connection (the kernel doubles it; 0 = the kernel's autotuning)"),
    S("write-timeout-s", "SECKILL_WRITE_TIMEOUT_S", T_INT, write_timeout_s, "10", 1, 3600,
      "close a connection whose replies have not drained for this long (a client that does not read)"),
    S("metrics-listen", "SECKILL_METRICS_LISTEN", T_ADDR, metrics_listen, "", 0, 0,
      "HOST:PORT: serve /metrics there only (not on --listen); empty = on --listen, with --metrics-token or --metrics-public"),
    S("metrics-public", "SECKILL_METRICS_PUBLIC", T_BOOL, metrics_public, "0", 0, 1,
      "serve /metrics on --listen to anyone, without --metrics-token (a private network only)"),
    /* Abuse limits (ratelimit.h): N[/s|/m|/h][:BURST], 0 = off. */
    S("rate-user-seckill", "SECKILL_RATE_USER_SECKILL", T_RATE, rate_user_seckill, "20/s:40", 0, 0,
      "flash-sale requests per user (per instance; each worker gets 1/threads)"),
    S("rate-ip-seckill", "SECKILL_RATE_IP_SECKILL", T_RATE, rate_ip_seckill, "0", 0, 0,
      "flash-sale requests per client IP (0 = off; per instance, 1/threads per worker)"),
    S("rate-ip-code", "SECKILL_RATE_IP_CODE", T_RATE, rate_ip_code, "10/m:20", 0, 0,
      "/user/code requests per client IP (0 = off; per instance)"),
    S("rate-phone-code", "SECKILL_RATE_PHONE_CODE", T_RATE, rate_phone_code, "1/m:3", 0, 0,
      "login codes per phone number (0 = off; kept in Redis: exact across instances)"),
    S("code-day-cap", "SECKILL_CODE_DAY_CAP", T_INT, code_day_cap, "10", 0, 1000000,
      "login codes per phone number per 24 hours (0 = no cap; kept in Redis: exact across instances)"),
    S("code-budget", "SECKILL_CODE_BUDGET", T_RATE, code_budget, "1200/m:1200", 0, 0,
      "login codes this instance sends, all phones together; above it /user/code answers 503 (0 = off)"),
    S("rate-phone-login", "SECKILL_RATE_PHONE_LOGIN", T_RATE, rate_phone_login, "10/m:10", 0, 0,
      "login attempts per phone number from one client (0 = off; exact per instance)"),
    S("rate-ip-login", "SECKILL_RATE_IP_LOGIN", T_RATE, rate_ip_login, "10/s:100", 0, 0,
      "/user/login requests per client IP (0 = off; exact per instance)"),
    S("rate-user-lookup", "SECKILL_RATE_USER_LOOKUP", T_RATE, rate_user_lookup, "10/s:20", 0, 0,
      "order lookups (GET /voucher-order/...) per user (0 = off; exact per instance)"),
    /* Secrets off the command line: /proc/PID/cmdline shows the file names only. */
    S("admin-token-file", "SECKILL_ADMIN_TOKEN_FILE", T_STR, admin_token_file, "", 0, 0,
      "file whose first line is the admin token (instead of --admin-token)"),
    S("redis-password-file", "SECKILL_REDIS_PASSWORD_FILE", T_STR, redis_password_file, "", 0, 0,
      "file whose first line is the Redis password (put into --redis's URL)"),
    S("db-password-file", "SECKILL_DB_PASSWORD_FILE", T_STR, db_password_file, "", 0, 0,
      "file whose first line is the database password (put into --db's URL)"),
    S("log-login-codes", "SECKILL_LOG_LOGIN_CODES", T_BOOL, log_login_codes, "0", 0, 1,
      "write login codes to the log (always on the embedded default, which has no other delivery)"),
    S("code-command", "SECKILL_CODE_COMMAND", T_STR, code_command, "", 0, 0,
      "delivers each login code: run by sh -c with SECKILL_PHONE and SECKILL_CODE in its environment; failure = no code"),
    S("code-command-timeout-ms", "SECKILL_CODE_COMMAND_TIMEOUT_MS", T_INT, code_command_timeout_ms, "5000", 100, 60000,
      "--code-command is killed and the code refused after this long"),
    S("code-command-max", "SECKILL_CODE_COMMAND_MAX", T_INT, code_command_max, "16", 1, 4096,
      "--code-command processes running at once, all workers; one more request gets 503 and starts none"),
    S("pay-key-file", "SECKILL_PAY_KEY_FILE", T_STR, pay_key_file, "", 0, 0,
      "file whose first line is the key of POST /pay/notify's x-pay-signature (HMAC-SHA256); "
      "default <data-dir>/pay-key, created 0600, on the embedded default; else notices are refused"),
    S("refund-command", "SECKILL_REFUND_COMMAND", T_STR, refund_command, "", 0, 0,
      "sends a refund (a payment for a cancelled order): run by sh -c with SECKILL_ORDER_ID, "
      "SECKILL_PAYMENT_ID and SECKILL_AMOUNT in its environment, until it exits 0 (retried with "
      "back-off); unset = logged and marked refunded"),
    S("refund-command-timeout-ms", "SECKILL_REFUND_COMMAND_TIMEOUT_MS", T_INT, refund_command_timeout_ms, "5000", 100, 60000,
      "--refund-command is killed (and the refund tried again later) after this long"),
    S("refund-command-max", "SECKILL_REFUND_COMMAND_MAX", T_INT, refund_command_max, "4", 1, 256,
      "--refund-command processes running at once per order writer; the other refunds wait "
      "in the outbox"),
    S("pay-timeout-s", "SECKILL_PAY_TIMEOUT_S", T_INT, pay_timeout_s, "900", 0, 604800,
      "an order still unpaid this long after its creation is cancelled and its unit sold again "
      "(0 = never; stream mode)"),
    S("timeout-rate", "SECKILL_TIMEOUT_RATE", T_INT, timeout_rate, "15000", 0, 10000000,
      "the payment-deadline sweep times out at most this many orders a second per order writer "
      "(a wave of deadlines leaves Redis to the sale; 0 = as fast as Redis answers)"),
    S("cancel-frees-buyer", "SECKILL_CANCEL_FREES_BUYER", T_BOOL, cancel_frees_buyer, "0", 0, 1,
      "a buyer whose order was cancelled or timed out may buy the voucher again (0 = one order "
      "per user and voucher, cancelled or not; docs/lifecycle.md)"),
    S("metrics-token", "SECKILL_METRICS_TOKEN", T_STR, metrics_token, "", 0, 0,
      "if set, /metrics requires the header \"authorization: Bearer <token>\""),
    S("trusted-proxy", "SECKILL_TRUSTED_PROXY", T_STR, trusted_proxy, "", 0, 0,
      "comma-separated addresses (or CIDR ranges) of reverse proxies whose X-Forwarded-For names the client"),
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

int config_split_hostport(const char *v, char *host, size_t hostsz, int *port)
{
    const char *colon = strrchr(v, ':');
    size_t hl = colon ? (size_t)(colon - v) : 0;
    char *end;
    errno = 0;
    long x = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || hl == 0 || hl >= hostsz || colon[1] == '\0' || *end != '\0' || errno ||
        x < 1 || x > 65535)
        return -1;
    /* [::1]:8081 -> ::1 */
    if (v[0] == '[' && hl >= 2 && v[hl - 1] == ']') {
        memcpy(host, v + 1, hl - 2);
        host[hl - 2] = '\0';
    } else {
        memcpy(host, v, hl);
        host[hl] = '\0';
    }
    *port = (int)x;
    return 0;
}

static const setting_t *find_setting(const char *name, size_t n)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strlen(settings[i].name) == n && memcmp(settings[i].name, name, n) == 0)
            return &settings[i];
    return NULL;
}

static int parse_long(const char *v, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0')
        return -1;
    *out = x;
    return 0;
}

/* "N[/s|/m|/h][:BURST]" -> rate; N and BURST whole numbers, "0" = off. Without a
 * burst, one period's worth (at least 1). Returns 0 or -1. */
#define RATE_MAX 1000000L
static int parse_rate(const char *v, config_rate_t *out)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || !isdigit((unsigned char)v[0]) || n < 0 || n > RATE_MAX)
        return -1;
    double period = 1;
    if (*end == '/') {
        switch (end[1]) {
        case 's': period = 1; break;
        case 'm': period = 60; break;
        case 'h': period = 3600; break;
        default: return -1;
        }
        end += 2;
    }
    long burst = n > 0 ? n : 1;
    if (*end == ':') {
        const char *b = end + 1;
        errno = 0;
        burst = strtol(b, &end, 10);
        if (errno || end == b || !isdigit((unsigned char)b[0]) || burst < 1 || burst > RATE_MAX)
            return -1;
    }
    if (*end != '\0')
        return -1;
    out->per_s = n == 0 ? 0 : (double)n / period;
    out->burst = n == 0 ? 0 : (double)burst;
    return 0;
}

/* Applies one value to cfg. `from` names the source for the error message. */
static int apply(config_t *cfg, const setting_t *s, const char *v, const char *from, char *err,
                 size_t errlen)
{
    char *field = (char *)cfg + s->off;
    long x;

    switch (s->type) {
    case T_STR:
        if (strlen(v) >= s->size) {
            snprintf(err, errlen, "%s: %s is too long (at most %zu bytes)", from, s->name, s->size - 1);
            return -1;
        }
        memcpy(field, v, strlen(v) + 1);
        return 0;
    case T_INT:
    case T_SIZE:
    case T_BOOL:
        if (s->type == T_BOOL && (strcmp(v, "true") == 0 || strcmp(v, "yes") == 0))
            v = "1";
        else if (s->type == T_BOOL && (strcmp(v, "false") == 0 || strcmp(v, "no") == 0))
            v = "0";
        if (parse_long(v, &x) < 0 || x < s->min || x > s->max) {
            snprintf(err, errlen, "%s: %s must be a whole number from %ld to %ld, not \"%s\"", from,
                     s->name, s->min, s->max, v);
            return -1;
        }
        if (s->type == T_SIZE)
            *(size_t *)field = (size_t)x;
        else
            *(int *)field = (int)x;
        return 0;
    case T_LISTEN:
        if (config_split_hostport(v, cfg->listen_host, sizeof(cfg->listen_host), &cfg->listen_port) < 0) {
            snprintf(err, errlen, "%s: listen must be HOST:PORT (e.g. 127.0.0.1:8081), not \"%s\"",
                     from, v);
            return -1;
        }
        return 0;
    case T_ADDR: {
        char host[256];
        int port;
        if (v[0] != '\0' && (strlen(v) >= s->size ||
                             config_split_hostport(v, host, sizeof(host), &port) < 0)) {
            snprintf(err, errlen, "%s: %s must be HOST:PORT (e.g. 127.0.0.1:9100), not \"%s\"",
                     from, s->name, v);
            return -1;
        }
        snprintf(field, s->size, "%s", v);
        return 0;
    }
    case T_RATE:
        if (parse_rate(v, (config_rate_t *)field) < 0) {
            snprintf(err, errlen, "%s: %s must be N[/s|/m|/h][:BURST] (e.g. 20/s:40, 1/m:3, 0 = off), "
                     "not \"%s\"", from, s->name, v);
            return -1;
        }
        return 0;
    case T_LEVEL: {
        static const char *levels[] = {"debug", "info", "warn", "error"};
        for (int i = 0; i < 4; i++)
            if (strcmp(v, levels[i]) == 0) {
                cfg->log_level = i;
                return 0;
            }
        snprintf(err, errlen, "%s: log-level must be debug, info, warn or error, not \"%s\"", from, v);
        return -1;
    }
    }
    return -1;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Whether setting `key` = val puts a secret in the config file: a token, or a URL with
 * a password (user:password@). */
static int holds_secret(const char *key, const char *val)
{
    if (strcmp(key, "admin-token") == 0 || strcmp(key, "metrics-token") == 0)
        return val[0] != '\0';
    if (strcmp(key, "redis") != 0 && strcmp(key, "db") != 0)
        return 0;
    const char *auth = strstr(val, "://");
    const char *at = auth ? strchr(auth + 3, '@') : NULL;
    return at != NULL && memchr(auth + 3, ':', (size_t)(at - auth - 3)) != NULL;
}

static int load_file(config_t *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
        return -1;
    }
    char line[2048], from[600];
    int lineno = 0, rc = 0, secret = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = trim(line);
        if (*p == '\0' || *p == '#')
            continue;
        char *eq = strchr(p, '=');
        snprintf(from, sizeof from, "%s:%d", path, lineno);
        if (!eq) {
            snprintf(err, errlen, "%s: expected key = value", from);
            rc = -1;
            break;
        }
        *eq = '\0';
        char *key = trim(p), *val = trim(eq + 1);
        /* Allow quoted values: key = "a value". */
        size_t vl = strlen(val);
        if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
            val[vl - 1] = '\0';
            val++;
        }
        const setting_t *s = find_setting(key, strlen(key));
        if (!s || strcmp(key, "config") == 0) {
            snprintf(err, errlen, "%s: unknown setting \"%s\"", from, key);
            rc = -1;
            break;
        }
        secret |= holds_secret(key, val);
        rc = apply(cfg, s, val, from, err, errlen);
    }
    explicit_bzero(line, sizeof line);
    /* A file holding a secret gets a secret file's checks, on the file read (fstat); the
     * refusal is said by config_read_secrets, where serve refuses its other secrets. */
    if (rc == 0 && secret) {
        char shown[700];
        snprintf(shown, sizeof shown, "config file %s (it holds a token or password)", path);
        if (secret_check_fd(fileno(f), shown, 0, cfg->config_refused,
                            sizeof cfg->config_refused) == 0)
            cfg->config_refused[0] = '\0';
    }
    fclose(f);
    return rc;
}

int config_load(config_t *cfg, int argc, char **argv, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NSETTINGS; i++)
        if (apply(cfg, &settings[i], settings[i].def, "default", err, errlen) < 0)
            return -1;

    /* The config file is named first, by flag or environment, then read. */
    const char *file = getenv("SECKILL_CONFIG");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
    }
    if (file && *file) {
        if (strlen(file) >= sizeof cfg->config_file) {
            snprintf(err, errlen, "config file name too long");
            return -1;
        }
        strcpy(cfg->config_file, file);
        if (load_file(cfg, file, err, errlen) < 0)
            return -1;
    }

    for (size_t i = 0; i < NSETTINGS; i++) {
        const char *v = getenv(settings[i].env);
        if (v && apply(cfg, &settings[i], v, settings[i].env, err, errlen) < 0)
            return -1;
    }

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", a);
            return -1;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const char *val;
        if (n == 6 && memcmp(a, "config", 6) == 0) {
            if (!eq)
                i++;
            continue;
        }
        const setting_t *s = find_setting(a, n);
        if (!s) {
            snprintf(err, errlen, "unknown option \"%s\" (see --help)", argv[i]);
            return -1;
        }
        if (eq) {
            val = eq + 1;
        } else if (s->type == T_BOOL && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) {
            val = "1";   /* a bare boolean flag means "on" */
        } else {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "option --%s needs a value", s->name);
                return -1;
            }
            val = argv[++i];
        }
        if (apply(cfg, s, val, "command line", err, errlen) < 0)
            return -1;
    }

    if (strcmp(cfg->code_gate, "off") != 0 && strcmp(cfg->code_gate, "sale") != 0 &&
        strcmp(cfg->code_gate, "always") != 0) {
        snprintf(err, errlen, "code-gate: \"%s\" is not off, sale or always", cfg->code_gate);
        return -1;
    }
    if (cfg->pow_min_bits > cfg->pow_max_bits) {
        snprintf(err, errlen, "pow-min-bits %d is above pow-max-bits %d", cfg->pow_min_bits,
                 cfg->pow_max_bits);
        return -1;
    }
    if (strcmp(cfg->token_format, "signed") != 0 && strcmp(cfg->token_format, "opaque") != 0) {
        snprintf(err, errlen, "token-format: \"%s\" is not signed or opaque", cfg->token_format);
        return -1;
    }
    if (cfg->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
    }
    return 0;
}

void config_usage(const char *subcommand)
{
    printf("usage: seckill %s [options]\n\n"
           "Every option is also an environment variable and a config-file key;\n"
           "flags win over the environment, which wins over the file.\n\n",
           subcommand);
    printf("  %-26s %-28s %s\n", "--config FILE", "SECKILL_CONFIG", "config file (key = value lines)");
    for (size_t i = 0; i < NSETTINGS; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s%s", settings[i].name, settings[i].type == T_BOOL ? "" : " V");
        printf("  %-26s %-28s %s", flag, settings[i].env, settings[i].help);
        if (settings[i].def[0] && settings[i].type != T_BOOL)
            printf(" [%s]", settings[i].def);
        printf("\n");
    }
}

/* The first line of a secret file, without its line end, into out, read with secret.h's
 * checks (flags: SECRET_KEY for a token). Returns 0 or -1. */
static int read_secret_file(const char *what, const char *path, int flags, char *out,
                            size_t cap, char *err, size_t errlen)
{
    char shown[700];
    snprintf(shown, sizeof shown, "--%s %s", what, path);
    int rc = secret_read(AT_FDCWD, path, shown, flags | SECRET_LINE, 0, out, cap, NULL, err,
                         errlen);
    if (rc == 0)
        snprintf(err, errlen, "%s: %s", shown, strerror(ENOENT));
    return rc == 1 ? 0 : -1;
}

/* Puts the password in file (if named) into url (cap bytes). */
static int password_into(const char *what, const char *file, char *url, size_t cap, char *err,
                         size_t errlen)
{
    if (!file[0])
        return 0;
    if (!url[0]) {
        snprintf(err, errlen, "--%s needs a URL to go with it", what);
        return -1;
    }
    char pw[512], out[2048], why[256];
    if (read_secret_file(what, file, 0, pw, sizeof pw, err, errlen) < 0)
        return -1;
    int rc = url_with_password(url, pw, out, sizeof out, why, sizeof why);
    explicit_bzero(pw, sizeof pw);
    if (rc == 0 && strlen(out) >= cap) {
        snprintf(why, sizeof why, "the URL with its password is too long");
        rc = -1;
    }
    if (rc < 0) {
        snprintf(err, errlen, "--%s: %s", what, why);
    } else {
        memcpy(url, out, strlen(out) + 1);
    }
    explicit_bzero(out, sizeof out);
    return rc;
}

int config_read_secrets(config_t *cfg, char *err, size_t errlen)
{
    if (cfg->config_refused[0]) {
        snprintf(err, errlen, "%s", cfg->config_refused);
        return -1;
    }
    if (cfg->admin_token_file[0]) {
        if (cfg->admin_token[0]) {
            snprintf(err, errlen, "both --admin-token and --admin-token-file given: use one");
            return -1;
        }
        if (read_secret_file("admin-token-file", cfg->admin_token_file, SECRET_KEY,
                             cfg->admin_token, sizeof cfg->admin_token, err, errlen) < 0)
            return -1;
    }
    if (cfg->pay_key_file[0] &&
        read_secret_file("pay-key-file", cfg->pay_key_file, SECRET_KEY, cfg->pay_key,
                         sizeof cfg->pay_key, err, errlen) < 0)
        return -1;
    if (password_into("redis-password-file", cfg->redis_password_file, cfg->redis_url,
                      sizeof cfg->redis_url, err, errlen) < 0)
        return -1;
    return password_into("db-password-file", cfg->db_password_file, cfg->db_url,
                         sizeof cfg->db_url, err, errlen);
}
