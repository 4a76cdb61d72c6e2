/*
 * rlock.c -- client, connections, pub/sub waiting, watchdog and the lock
 * operations of every kind.  The scripts are in rlock_scripts.c, the
 * multi-lock in rlock_multi.c, the libevent flavour in rlock_async.c.
 *
 * Reading order: utilities; connections; client; pub/sub thread and waiters;
 * watchdog thread; handles; acquire engine; release; queries; fencing.
 */
#include "rlock_int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ======================================================================== */
/* Utilities                                                                 */
/* ======================================================================== */

void *rlock__xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fputs("rlock: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *rlock__xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) {
        fputs("rlock: out of memory\n", stderr);
        abort();
    }
    return p;
}

char *rlock__xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = rlock__xmalloc(n);
    memcpy(p, s, n);
    return p;
}

char *rlock__xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = NULL;
    int n = vasprintf(&p, fmt, ap);
    va_end(ap);
    if (n < 0) {
        fputs("rlock: out of memory\n", stderr);
        abort();
    }
    return p;
}

int64_t rlock__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
    return tv;
}

static struct timespec us_ts(int64_t us)
{
    struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000 };
    return ts;
}

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* Wait on cv until woken or the monotonic time `until_us`. */
static void cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us)
{
    if (until_us == INT64_MAX) {
        pthread_cond_wait(cv, mu);
        return;
    }
    struct timespec ts = us_ts(until_us);
    pthread_cond_timedwait(cv, mu, &ts);
}

static bool debug_on(void)
{
    static atomic_int on = -1;   /* read from every thread */
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        v = getenv("RLOCK_DEBUG") != NULL;
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

#define DBG(...) do { if (debug_on()) fprintf(stderr, "rlock: " __VA_ARGS__); } while (0)

const char *rlock_status_str(rlock_status_t st)
{
    switch (st) {
    case RLOCK_OK: return "OK";
    case RLOCK_NOT_OWNER: return "NOT_OWNER";
    case RLOCK_LOST: return "LOST";
    case RLOCK_TIMEOUT: return "TIMEOUT";
    case RLOCK_REDIS_ERROR: return "REDIS_ERROR";
    case RLOCK_EINVAL: return "EINVAL";
    }
    return "UNKNOWN";
}

/* ======================================================================== */
/* Connections                                                               */
/* ======================================================================== */

void rlock__conn_close(rlock__conn_t *cn)
{
    if (cn->ctx) redisFree(cn->ctx);
    cn->ctx = NULL;
}

/* Send a command expecting a non-error reply; false on any failure. */
static bool simple_cmd(redisContext *ctx, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
    bool ok = r && r->type != REDIS_REPLY_ERROR;
    if (r && !ok) DBG("%s: %s\n", argv[0], r->str);
    if (r) freeReplyObject(r);
    return ok;
}

/* Open a connection with the client's timeouts, AUTH and SELECT. */
static redisContext *open_ctx(rlock_client_t *c)
{
    struct timeval tv = ms_tv(c->cfg.connect_timeout_ms);
    redisContext *ctx = c->unix_path ? redisConnectUnixWithTimeout(c->unix_path, tv)
                                     : redisConnectWithTimeout(c->host, c->cfg.port, tv);
    if (!ctx) return NULL;
    if (ctx->err) {
        DBG("connect %s:%d: %s\n", c->unix_path ? c->unix_path : c->host, c->cfg.port,
            ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, ms_tv(c->cfg.command_timeout_ms));
    if (!c->unix_path) redisEnableKeepAlive(ctx);
    if (c->password) {
        const char *argv[] = { "AUTH", c->password };
        if (!simple_cmd(ctx, 2, argv)) goto fail;
    }
    if (c->cfg.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", c->cfg.db);
        const char *argv[] = { "SELECT", db };
        if (!simple_cmd(ctx, 2, argv)) goto fail;
    }
    return ctx;
fail:
    redisFree(ctx);
    return NULL;
}

/* A script's text with every redis.call('publish', ...) made redis.call('spublish', ...):
 * sharded pub/sub (rlock_config_t.sharded_pubsub). The channel is always a KEYS entry
 * sharing the lock's tag, so SPUBLISH stays on the lock's shard. */
static char *sharded_text(const char *text)
{
    static const char from[] = "redis.call('publish',", to[] = "redis.call('spublish',";
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, from)) != NULL; p += sizeof from - 1)
        n++;
    char *out = rlock__xmalloc(strlen(text) + n * (sizeof to - sizeof from) + 1);
    char *o = out;
    for (const char *p = text;;) {
        const char *hit = strstr(p, from);
        size_t len = hit ? (size_t)(hit - p) : strlen(p);
        memcpy(o, p, len);
        o += len;
        if (!hit)
            break;
        memcpy(o, to, sizeof to - 1);
        o += sizeof to - 1;
        p = hit + sizeof from - 1;
    }
    *o = '\0';
    return out;
}

/* SCRIPT LOAD one script on cn and remember its SHA1 for every connection. */
static bool load_script(rlock_client_t *c, rlock__conn_t *cn, int i)
{
    redisReply *r = redisCommand(cn->ctx, "SCRIPT LOAD %s", c->script_text[i]);
    bool ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (!ok) {
        DBG("SCRIPT LOAD %d: %s\n", i,
            !r ? cn->ctx->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "?");
        if (!r) rlock__conn_close(cn);
    } else {
        pthread_mutex_lock(&c->sha_mu);
        memcpy(c->sha[i], r->str, 41);
        pthread_mutex_unlock(&c->sha_mu);
    }
    if (r) freeReplyObject(r);
    return ok;
}

/* The script's SHA1 into buf, loading it first if this client never did. */
static bool script_sha(rlock_client_t *c, rlock__conn_t *cn, int i, char buf[41])
{
    pthread_mutex_lock(&c->sha_mu);
    memcpy(buf, c->sha[i], 41);
    pthread_mutex_unlock(&c->sha_mu);
    if (buf[0]) return true;
    if (!load_script(c, cn, i)) return false;
    pthread_mutex_lock(&c->sha_mu);
    memcpy(buf, c->sha[i], 41);
    pthread_mutex_unlock(&c->sha_mu);
    return true;
}

/* Remember the current connection as one to fence off, then close it. */
static void conn_fail(rlock__conn_t *cn)
{
    if (cn->id > 0 && cn->run_id[0]) {
        if (cn->ndead == RLOCK__MAX_DEAD) {   /* drop the oldest */
            memmove(&cn->dead_id[0], &cn->dead_id[1], sizeof cn->dead_id[0] * (RLOCK__MAX_DEAD - 1));
            memmove(&cn->dead_run_id[0], &cn->dead_run_id[1],
                    sizeof cn->dead_run_id[0] * (RLOCK__MAX_DEAD - 1));
            cn->ndead--;
        }
        cn->dead_id[cn->ndead] = cn->id;
        memcpy(cn->dead_run_id[cn->ndead], cn->run_id, 41);
        cn->ndead++;
    }
    rlock__conn_close(cn);
}

/* CLIENT ID and the server's run_id of a fresh connection (one round trip). */
static bool conn_identify(rlock__conn_t *cn)
{
    redisAppendCommand(cn->ctx, "CLIENT ID");
    redisAppendCommand(cn->ctx, "INFO server");
    redisReply *a = NULL, *b = NULL;
    bool ok = redisGetReply(cn->ctx, (void **)&a) == REDIS_OK &&
              redisGetReply(cn->ctx, (void **)&b) == REDIS_OK;
    cn->id = 0;
    cn->run_id[0] = 0;
    if (ok && a->type == REDIS_REPLY_INTEGER) cn->id = a->integer;
    if (ok && b->type == REDIS_REPLY_STRING) {
        const char *p = strstr(b->str, "run_id:");
        if (p && strlen(p + 7) >= 40) {
            memcpy(cn->run_id, p + 7, 40);
            cn->run_id[40] = 0;
        }
    }
    if (a) freeReplyObject(a);
    if (b) freeReplyObject(b);
    return ok;
}

/* Fence off failed connections to this same server process. */
static bool conn_kill_dead(rlock__conn_t *cn)
{
    while (cn->ndead > 0) {
        int i = cn->ndead - 1;
        if (cn->run_id[0] && strcmp(cn->dead_run_id[i], cn->run_id) == 0) {
            redisReply *r = redisCommand(cn->ctx, "CLIENT KILL ID %lld", cn->dead_id[i]);
            if (!r) return false;   /* keep it for the next connection */
            DBG("fenced off connection %lld: %s\n", cn->dead_id[i],
                r->type == REDIS_REPLY_ERROR ? r->str : "killed");
            freeReplyObject(r);
        }
        /* a different run_id: that server process is gone, and its ids may
         * be reused by the new one -- nothing to kill, nothing to risk */
        cn->ndead--;
    }
    return true;
}

static bool conn_ensure(rlock_client_t *c, rlock__conn_t *cn)
{
    if (cn->ctx && !cn->ctx->err) return true;
    rlock__conn_close(cn);
    cn->ctx = open_ctx(c);
    if (!cn->ctx) return false;
    if (!conn_identify(cn) || !conn_kill_dead(cn)) {
        rlock__conn_close(cn);
        return false;
    }
    return true;
}

/*
 * Send argv (an EVALSHA of `script`, or a plain command when script < 0) on
 * cn and read its reply.  With acks != NULL and replica sync configured, a
 * WAIT is pipelined behind it (same round trip) and *acks gets its answer.
 * NOSCRIPT reloads the scripts and retries once.
 */
static rlock_status_t conn_exec(rlock_client_t *c, rlock__conn_t *cn, int script, int argc,
                                const char **argv, redisReply **out, long long *acks)
{
    rlock_status_t st = RLOCK_REDIS_ERROR;
    bool wait = acks && c->cfg.replica_acks > 0;
    char sha[41];
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!conn_ensure(c, cn)) break;
        if (script >= 0) {
            if (!script_sha(c, cn, script, sha)) break;
            argv[1] = sha;
        }
        if (cn == &c->cmd)
            atomic_fetch_add_explicit(&c->ncommands, wait ? 2 : 1, memory_order_relaxed);
        redisAppendCommandArgv(cn->ctx, argc, argv, NULL);
        if (wait)
            redisAppendCommand(cn->ctx, "WAIT %d %lld", c->cfg.replica_acks,
                               (long long)c->cfg.replica_timeout_ms);
        redisReply *r = NULL, *w = NULL;
        if (redisGetReply(cn->ctx, (void **)&r) != REDIS_OK ||
            (wait && redisGetReply(cn->ctx, (void **)&w) != REDIS_OK)) {
            DBG("%s %d: %s\n", argv[0], script, cn->ctx->errstr);
            if (r) freeReplyObject(r);
            conn_fail(cn);   /* the request may still run: fence it off */
            break;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            bool noscript = script >= 0 && strncmp(r->str, "NOSCRIPT", 8) == 0;
            DBG("%s %d: %s\n", argv[0], script, r->str);
            freeReplyObject(r);
            if (w) freeReplyObject(w);
            /* flushed or restarted server: load it again and retry once */
            if (noscript && load_script(c, cn, script)) continue;
            break;
        }
        if (wait) {
            *acks = w->type == REDIS_REPLY_INTEGER ? w->integer : -1;
            freeReplyObject(w);
        }
        *out = r;
        st = RLOCK_OK;
        break;
    }
    return st;
}

static rlock_status_t conn_eval_ex(rlock_client_t *c, rlock__conn_t *cn, int script,
                                   int nkeys, const char **keys, int nargs,
                                   const char **args, redisReply **out, long long *acks)
{
    const char *stack_argv[32];
    int argc = 3 + nkeys + nargs;
    const char **argv = argc <= 32 ? stack_argv : rlock__xmalloc(sizeof(char *) * (size_t)argc);
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[2] = nk;
    for (int i = 0; i < nkeys; i++) argv[3 + i] = keys[i];
    for (int i = 0; i < nargs; i++) argv[3 + nkeys + i] = args[i];
    rlock_status_t st = conn_exec(c, cn, script, argc, argv, out, acks);
    if (argv != stack_argv) free(argv);
    return st;
}

rlock_status_t rlock__conn_eval(rlock_client_t *c, rlock__conn_t *cn, int script,
                                int nkeys, const char **keys, int nargs,
                                const char **args, redisReply **out)
{
    return conn_eval_ex(c, cn, script, nkeys, keys, nargs, args, out, NULL);
}

/* A plain command on the client's command connection (acks: see conn_exec). */
static rlock_status_t cmd_argv_ex(rlock_client_t *c, int argc, const char **argv,
                                  redisReply **out, long long *acks)
{
    pthread_mutex_lock(&c->cmd_mu);
    rlock_status_t st = conn_exec(c, &c->cmd, -1, argc, argv, out, acks);
    pthread_mutex_unlock(&c->cmd_mu);
    return st;
}

static rlock_status_t cmd_argv(rlock_client_t *c, int argc, const char **argv,
                               redisReply **out)
{
    return cmd_argv_ex(c, argc, argv, out, NULL);
}

static rlock_status_t cmd_eval_ex(rlock_client_t *c, int script, int nkeys,
                                  const char **keys, int nargs, const char **args,
                                  redisReply **out, long long *acks)
{
    pthread_mutex_lock(&c->cmd_mu);
    rlock_status_t st = conn_eval_ex(c, &c->cmd, script, nkeys, keys, nargs, args, out, acks);
    pthread_mutex_unlock(&c->cmd_mu);
    return st;
}

static rlock_status_t cmd_eval(rlock_client_t *c, int script, int nkeys,
                               const char **keys, int nargs, const char **args,
                               redisReply **out)
{
    pthread_mutex_lock(&c->cmd_mu);
    rlock_status_t st = rlock__conn_eval(c, &c->cmd, script, nkeys, keys, nargs, args, out);
    pthread_mutex_unlock(&c->cmd_mu);
    return st;
}

/* Integer reply, or the integer in a one-level array at index i. */
static bool reply_int(const redisReply *r, long long *v)
{
    if (!r || r->type != REDIS_REPLY_INTEGER) return false;
    *v = r->integer;
    return true;
}

static bool reply_arr_int(const redisReply *r, size_t i, long long *v)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements <= i) return false;
    return reply_int(r->element[i], v);
}

/* ======================================================================== */
/* Client                                                                    */
/* ======================================================================== */

static void *sub_main(void *arg);
static void *wd_main(void *arg);

void rlock_config_init(rlock_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 6379;
    cfg->connect_timeout_ms = 1000;
    cfg->command_timeout_ms = 2000;
    cfg->watchdog_lease_ms = 30000;
    cfg->fair_waiter_ttl_ms = 5000;
    cfg->unsubscribe_delay_ms = 2000;
    cfg->drift_factor = 0.01;
    cfg->replica_acks = 0;
    cfg->replica_timeout_ms = 1000;
}

/* redis://[user][:password@]host[:port][/db]  or  unix:///path */
static bool parse_url(const char *url, char **host, int *port, char **password, int *db,
                      char **unix_path)
{
    const char *p = url;
    if (strncmp(p, "unix://", 7) == 0) {
        if (p[7] != '/' || strlen(p + 7) > 1000) return false;
        *unix_path = rlock__xstrdup(p + 7);
        *host = rlock__xstrdup("localhost");
        return true;
    }
    if (strncmp(p, "redis://", 8) != 0) return false;
    p += 8;
    const char *at = strchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon && at > colon + 1) {
            size_t n = (size_t)(at - colon - 1);
            *password = rlock__xmalloc(n + 1);
            memcpy(*password, colon + 1, n);
            (*password)[n] = 0;
        }
        p = at + 1;
    }
    size_t hl = strcspn(p, ":/");
    if (hl == 0 || hl > 255) return false;
    *host = rlock__xmalloc(hl + 1);
    memcpy(*host, p, hl);
    (*host)[hl] = 0;
    p += hl;
    if (*p == ':') {
        char *end;
        long v = strtol(p + 1, &end, 10);
        if (end == p + 1 || v <= 0 || v > 65535) return false;
        *port = (int)v;
        p = end;
    }
    if (*p == '/') {
        if (p[1]) {
            char *end;
            long v = strtol(p + 1, &end, 10);
            if (end == p + 1 || *end || v < 0 || v > 1000000) return false;
            *db = (int)v;
        }
    } else if (*p) {
        return false;
    }
    return true;
}

rlock_status_t rlock_client_new(const rlock_config_t *cfg_in, rlock_client_t **out)
{
    rlock_config_t cfg;
    if (cfg_in) cfg = *cfg_in;
    else rlock_config_init(&cfg);
    rlock_config_t def;
    rlock_config_init(&def);
    if (cfg.connect_timeout_ms <= 0) cfg.connect_timeout_ms = def.connect_timeout_ms;
    if (cfg.command_timeout_ms <= 0) cfg.command_timeout_ms = def.command_timeout_ms;
    if (cfg.watchdog_lease_ms <= 0) cfg.watchdog_lease_ms = def.watchdog_lease_ms;
    if (cfg.fair_waiter_ttl_ms <= 0) cfg.fair_waiter_ttl_ms = def.fair_waiter_ttl_ms;
    if (cfg.unsubscribe_delay_ms < 0) cfg.unsubscribe_delay_ms = def.unsubscribe_delay_ms;
    if (cfg.drift_factor < 0 || cfg.drift_factor >= 0.5) return RLOCK_EINVAL;
    if (cfg.watchdog_lease_ms < 30 || cfg.fair_waiter_ttl_ms < 30) return RLOCK_EINVAL;
    if (cfg.replica_acks < 0) return RLOCK_EINVAL;
    if (cfg.replica_acks > 0) {
        if (cfg.replica_timeout_ms <= 0) cfg.replica_timeout_ms = def.replica_timeout_ms;
        /* WAIT blocks up to its timeout: the socket deadline must be longer */
        if (cfg.command_timeout_ms <= cfg.replica_timeout_ms) return RLOCK_EINVAL;
    }

    rlock_client_t *c = rlock__xcalloc(1, sizeof *c);
    if (cfg.url) {
        if (!parse_url(cfg.url, &c->host, &cfg.port, &c->password, &cfg.db, &c->unix_path)) {
            free(c->host);
            free(c->password);
            free(c->unix_path);
            free(c);
            return RLOCK_EINVAL;
        }
    } else {
        c->host = rlock__xstrdup(cfg.host ? cfg.host : "127.0.0.1");
        if (cfg.password) c->password = rlock__xstrdup(cfg.password);
        if (cfg.unix_path && *cfg.unix_path) c->unix_path = rlock__xstrdup(cfg.unix_path);
        if (cfg.port <= 0 || cfg.port > 65535) cfg.port = 6379;
    }
    cfg.url = NULL;
    cfg.host = c->host;
    cfg.password = c->password;
    cfg.unix_path = c->unix_path;
    c->cfg = cfg;

    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        /* getrandom on Linux >= 3.17 does not fail for 16 bytes; be safe. */
        uint64_t x = (uint64_t)rlock__now_us() ^ ((uint64_t)getpid() << 32);
        for (size_t i = 0; i < sizeof rnd; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            rnd[i] = (unsigned char)(x >> 56);
        }
    }
    for (size_t i = 0; i < sizeof rnd; i++) snprintf(c->id + 2 * i, 3, "%02x", rnd[i]);

    pthread_mutex_init(&c->cmd_mu, NULL);
    pthread_mutex_init(&c->sha_mu, NULL);
    for (int i = 0; i < RLOCK__NSCRIPTS; i++)
        c->script_text[i] = c->cfg.sharded_pubsub ? (c->script_own[i] = sharded_text(rlock__scripts[i]))
                                                  : rlock__scripts[i];
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->cb_mu, NULL);
    cond_init_mono(&c->wd_cond);
    c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->evfd < 0) {
        fputs("rlock: eventfd failed\n", stderr);
        abort();
    }
    if (pthread_create(&c->sub_thr, NULL, sub_main, c) != 0 ||
        pthread_create(&c->wd_thr, NULL, wd_main, c) != 0) {
        fputs("rlock: pthread_create failed\n", stderr);
        abort();
    }
    *out = c;
    return RLOCK_OK;
}

static void kick_sub(rlock_client_t *c)
{
    uint64_t one = 1;
    ssize_t n = write(c->evfd, &one, sizeof one);
    (void)n;
}

struct rlock__waiter;
static void sub_free(struct rlock__sub *s);

void rlock_client_free(rlock_client_t *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->wd_cond);
    pthread_mutex_unlock(&c->mu);
    kick_sub(c);
    pthread_join(c->sub_thr, NULL);
    pthread_join(c->wd_thr, NULL);
    for (int i = 0; i < RLOCK__SUB_BUCKETS; i++) {
        while (c->subs[i]) {
            struct rlock__sub *s = c->subs[i];
            sub_free(s);
        }
    }
    rlock__conn_close(&c->cmd);
    rlock__conn_close(&c->renew);
    close(c->evfd);
    pthread_cond_destroy(&c->wd_cond);
    pthread_mutex_destroy(&c->cmd_mu);
    pthread_mutex_destroy(&c->sha_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->cb_mu);
    for (int i = 0; i < RLOCK__NSCRIPTS; i++)
        free(c->script_own[i]);
    free(c->host);
    free(c->password);
    free(c->unix_path);
    free(c);
}

const char *rlock_client_id(const rlock_client_t *c)
{
    return c->id;
}

void rlock_client_stats(rlock_client_t *c, rlock_stats_t *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    out->watched_now = c->wd_count;
    out->commands = atomic_load(&c->ncommands);
    pthread_mutex_unlock(&c->mu);
}

void rlock__client_addr(const rlock_client_t *c, char *buf, size_t len)
{
    if (c->unix_path) snprintf(buf, len, "unix:%s/%d", c->unix_path, c->cfg.db);
    else snprintf(buf, len, "%s:%05d/%d", c->host, c->cfg.port, c->cfg.db);
}

/* ======================================================================== */
/* Pub/sub: subscriptions and waiters                                        */
/* ======================================================================== */
/*
 * One subscription per channel per client, ref-counted by local waiters.
 * States: WANT (SUBSCRIBE to be sent), PENDING (sent), ACTIVE (confirmed).
 * A waiter joins, waits until ACTIVE (bounded), then re-attempts the acquire:
 * a release after that attempt is published on a channel we are subscribed
 * to, so it cannot be missed.  Messages: "" wakes the first local waiter
 * that is not already woken (and rotates it to the tail), "*" wakes all,
 * anything else wakes the waiter whose owner matches (fair queue head).
 * After a reconnect every subscription is re-sent and, once confirmed, all
 * its waiters are woken (messages may have been lost meanwhile).
 */

enum { SUB_WANT, SUB_PENDING, SUB_ACTIVE };

typedef struct rlock__waiter {
    pthread_cond_t cond;
    bool woken;
    const char *owner;
    struct rlock__sub *sub;
    struct rlock__waiter *prev, *next;
} waiter_t;

typedef struct rlock__sub {
    rlock_client_t *c;
    char *channel;
    size_t chlen;
    unsigned bucket;
    int state;
    bool resub;                       /* wake all when (re)confirmed */
    int nwaiters;
    waiter_t *head, *tail;
    struct rlock__sub *hnext, **hpprev;
    bool queued;
    struct rlock__sub *qnext;
    bool idle;
    int64_t idle_since_us;
    struct rlock__sub *iprev, *inext;
} sub_t;

static unsigned fnv1a(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h % RLOCK__SUB_BUCKETS;
}

static sub_t *sub_find(rlock_client_t *c, const char *ch, size_t n)
{
    for (sub_t *s = c->subs[fnv1a(ch, n)]; s; s = s->hnext)
        if (s->chlen == n && memcmp(s->channel, ch, n) == 0) return s;
    return NULL;
}

static void idle_unlink(rlock_client_t *c, sub_t *s)
{
    if (!s->idle) return;
    if (s->iprev) s->iprev->inext = s->inext;
    else c->idle_head = s->inext;
    if (s->inext) s->inext->iprev = s->iprev;
    else c->idle_tail = s->iprev;
    s->idle = false;
    s->iprev = s->inext = NULL;
}

static void want_push(rlock_client_t *c, sub_t *s)
{
    if (s->queued) return;
    s->queued = true;
    s->qnext = NULL;
    if (c->want_tail) c->want_tail->qnext = s;
    else c->want_head = s;
    c->want_tail = s;
}

/* Remove from hash and idle list; must not be queued or have waiters. */
static void sub_free(sub_t *s)
{
    rlock_client_t *c = s->c;
    *s->hpprev = s->hnext;
    if (s->hnext) s->hnext->hpprev = s->hpprev;
    idle_unlink(c, s);
    if (c->stats.subscribed_now) c->stats.subscribed_now--;
    free(s->channel);
    free(s);
}

static void waiter_wake(waiter_t *w)
{
    w->woken = true;
    pthread_cond_signal(&w->cond);
}

static void waiter_to_tail(sub_t *s, waiter_t *w)
{
    if (s->tail == w) return;
    if (w->prev) w->prev->next = w->next;
    else s->head = w->next;
    w->next->prev = w->prev;
    w->prev = s->tail;
    w->next = NULL;
    s->tail->next = w;
    s->tail = w;
}

/* Called with c->mu held. */
static void dispatch_message(rlock_client_t *c, const char *ch, size_t chlen,
                             const char *msg, size_t msglen)
{
    sub_t *s = sub_find(c, ch, chlen);
    if (!s) return;
    if (msglen == 0) {
        for (waiter_t *w = s->head; w; w = w->next) {
            if (!w->woken) {
                waiter_wake(w);
                c->stats.wakeups++;
                waiter_to_tail(s, w);
                break;
            }
        }
    } else if (msglen == 1 && msg[0] == '*') {
        for (waiter_t *w = s->head; w; w = w->next) {
            waiter_wake(w);
            c->stats.wakeups++;
        }
    } else {
        for (waiter_t *w = s->head; w; w = w->next) {
            if (strlen(w->owner) == msglen && memcmp(w->owner, msg, msglen) == 0) {
                waiter_wake(w);
                c->stats.wakeups++;
            }
        }
    }
}

static void handle_sub_reply(rlock_client_t *c, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
    redisReply *kind = r->element[0], *ch = r->element[1], *msg = r->element[2];
    if (kind->type != REDIS_REPLY_STRING || ch->type != REDIS_REPLY_STRING) return;
    pthread_mutex_lock(&c->mu);
    /* s-prefixed: the sharded flavour (sharded_pubsub) */
    const char *k = kind->str[0] == 's' && strcmp(kind->str, "subscribe") != 0 ? kind->str + 1
                                                                               : kind->str;
    if (strcmp(k, "message") == 0 && msg->type == REDIS_REPLY_STRING) {
        dispatch_message(c, ch->str, ch->len, msg->str, msg->len);
    } else if (strcmp(k, "subscribe") == 0) {
        sub_t *s = sub_find(c, ch->str, ch->len);
        if (s && s->state == SUB_PENDING) {
            s->state = SUB_ACTIVE;
            for (waiter_t *w = s->head; w; w = w->next) {
                if (s->resub) w->woken = true;
                pthread_cond_signal(&w->cond);
            }
            s->resub = false;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* Connection lost: every subscription must be re-sent after reconnecting. */
static void subs_reset(rlock_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->sub_up = false;
    c->want_head = c->want_tail = NULL;
    for (int i = 0; i < RLOCK__SUB_BUCKETS; i++) {
        sub_t *s = c->subs[i];
        while (s) {
            sub_t *next = s->hnext;
            s->queued = false;
            if (s->nwaiters == 0) {
                sub_free(s);
            } else {
                s->state = SUB_WANT;
                s->resub = true;
                want_push(c, s);   /* makes the thread reconnect */
            }
            s = next;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

static void subs_requeue_all(rlock_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->sub_up = true;
    for (int i = 0; i < RLOCK__SUB_BUCKETS; i++)
        for (sub_t *s = c->subs[i]; s; s = s->hnext)
            if (s->state == SUB_WANT) want_push(c, s);
    pthread_mutex_unlock(&c->mu);
}

static void *sub_main(void *arg)
{
    rlock_client_t *c = arg;
    redisContext *ctx = NULL;
    int64_t backoff_ms = 0;

    for (;;) {
        pthread_mutex_lock(&c->mu);
        bool stop = c->stop;
        bool need = c->want_head != NULL || c->idle_head != NULL;
        pthread_mutex_unlock(&c->mu);
        if (stop) break;

        if (!ctx && need) {
            ctx = open_ctx(c);
            if (ctx) {
                backoff_ms = 0;
                subs_requeue_all(c);
            } else {
                backoff_ms = backoff_ms ? (backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2) : 50;
                struct pollfd p = { .fd = c->evfd, .events = POLLIN };
                poll(&p, 1, (int)backoff_ms);
                uint64_t v;
                ssize_t n = read(c->evfd, &v, sizeof v);
                (void)n;
                continue;
            }
        }

        int timeout_ms = 1000;
        pthread_mutex_lock(&c->mu);
        if (ctx) {
            while (c->want_head) {
                sub_t *s = c->want_head;
                c->want_head = s->qnext;
                if (!c->want_head) c->want_tail = NULL;
                s->queued = false;
                if (s->state == SUB_WANT) {
                    redisAppendCommand(ctx, c->cfg.sharded_pubsub ? "SSUBSCRIBE %b"
                                                                  : "SUBSCRIBE %b",
                                       s->channel, s->chlen);
                    s->state = SUB_PENDING;
                    c->stats.subscribes++;
                }
            }
        }
        int64_t now = rlock__now_us();
        int64_t delay = c->cfg.unsubscribe_delay_ms * 1000;
        while (c->idle_head && now - c->idle_head->idle_since_us >= delay) {
            sub_t *s = c->idle_head;
            if (ctx && s->state != SUB_WANT) {
                redisAppendCommand(ctx, c->cfg.sharded_pubsub ? "SUNSUBSCRIBE %b"
                                                              : "UNSUBSCRIBE %b",
                                   s->channel, s->chlen);
                c->stats.unsubscribes++;
            }
            if (s->queued) {
                /* unlink from the want queue */
                sub_t **pp = &c->want_head;
                sub_t *prev = NULL;
                while (*pp && *pp != s) { prev = *pp; pp = &(*pp)->qnext; }
                if (*pp) {
                    *pp = s->qnext;
                    if (c->want_tail == s) c->want_tail = prev;
                }
            }
            sub_free(s);
        }
        if (c->idle_head) {
            int64_t left = (c->idle_head->idle_since_us + delay - now) / 1000 + 1;
            if (left < timeout_ms) timeout_ms = (int)left;
        }
        pthread_mutex_unlock(&c->mu);

        if (ctx) {
            int done = 0;
            while (!done) {
                if (redisBufferWrite(ctx, &done) != REDIS_OK) break;
            }
            if (ctx->err) {
                DBG("pubsub write: %s\n", ctx->errstr);
                redisFree(ctx);
                ctx = NULL;
                subs_reset(c);
                continue;
            }
        }

        struct pollfd p[2] = { { .fd = c->evfd, .events = POLLIN },
                               { .fd = ctx ? ctx->fd : -1, .events = POLLIN } };
        int n = poll(p, ctx ? 2 : 1, timeout_ms);
        if (n < 0 && errno != EINTR) timeout_ms = 10;
        if (p[0].revents & POLLIN) {
            uint64_t v;
            ssize_t rn = read(c->evfd, &v, sizeof v);
            (void)rn;
        }
        if (ctx && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            bool bad = redisBufferRead(ctx) != REDIS_OK;
            void *reply = NULL;
            while (!bad) {
                if (redisGetReplyFromReader(ctx, &reply) != REDIS_OK) {
                    bad = true;
                    break;
                }
                if (!reply) break;
                handle_sub_reply(c, reply);
                freeReplyObject(reply);
            }
            if (bad) {
                DBG("pubsub read: %s\n", ctx->errstr);
                redisFree(ctx);
                ctx = NULL;
                subs_reset(c);
            }
        }
    }
    if (ctx) redisFree(ctx);
    return NULL;
}

/*
 * Join the waiters of l's channel and wait (bounded by until_us and the
 * command timeout) for the subscription to be confirmed.
 */
static waiter_t *waiter_join(rlock_t *l, int64_t until_us)
{
    rlock_client_t *c = l->c;
    waiter_t *w = rlock__xcalloc(1, sizeof *w);
    cond_init_mono(&w->cond);
    w->owner = l->owner;
    size_t n = strlen(l->channel);

    pthread_mutex_lock(&c->mu);
    sub_t *s = sub_find(c, l->channel, n);
    if (!s) {
        s = rlock__xcalloc(1, sizeof *s);
        s->c = c;
        s->channel = rlock__xstrdup(l->channel);
        s->chlen = n;
        s->bucket = fnv1a(l->channel, n);
        s->state = SUB_WANT;
        s->hnext = c->subs[s->bucket];
        if (s->hnext) s->hnext->hpprev = &s->hnext;
        s->hpprev = &c->subs[s->bucket];
        c->subs[s->bucket] = s;
        c->stats.subscribed_now++;
    }
    idle_unlink(c, s);
    w->sub = s;
    w->prev = s->tail;
    if (s->tail) s->tail->next = w;
    else s->head = w;
    s->tail = w;
    s->nwaiters++;
    l->waiter = w;
    bool kick = false;
    if (s->state == SUB_WANT && !s->queued) {
        want_push(c, s);
        kick = true;
    }
    int64_t limit = rlock__now_us() + c->cfg.command_timeout_ms * 1000;
    if (until_us < limit) limit = until_us;
    if (kick) {
        pthread_mutex_unlock(&c->mu);
        kick_sub(c);
        pthread_mutex_lock(&c->mu);
    }
    while (s->state != SUB_ACTIVE && !atomic_load(&l->cancel) && !c->stop &&
           rlock__now_us() < limit)
        cond_wait_until(&w->cond, &c->mu, limit);
    pthread_mutex_unlock(&c->mu);
    return w;
}

/*
 * Fast path for hot locks: if this process is already subscribed to the
 * channel (other local waiters), register before the first attempt -- a
 * release after that attempt will reach us, so no re-attempt is needed.
 */
static waiter_t *waiter_join_if_active(rlock_t *l)
{
    rlock_client_t *c = l->c;
    size_t n = strlen(l->channel);
    waiter_t *w = NULL;
    pthread_mutex_lock(&c->mu);
    sub_t *s = sub_find(c, l->channel, n);
    if (s && s->state == SUB_ACTIVE) {
        w = rlock__xcalloc(1, sizeof *w);
        cond_init_mono(&w->cond);
        w->owner = l->owner;
        idle_unlink(c, s);
        w->sub = s;
        w->prev = s->tail;
        if (s->tail) s->tail->next = w;
        else s->head = w;
        s->tail = w;
        s->nwaiters++;
        l->waiter = w;
    }
    pthread_mutex_unlock(&c->mu);
    return w;
}

/*
 * Sleep until a notification or until_us.  While the subscription is not
 * confirmed (Redis down, reconnecting) sleeps are capped at 50 ms: degraded
 * to bounded polling rather than trusting a channel we may not hear.
 */
static void waiter_wait(rlock_t *l, waiter_t *w, int64_t until_us)
{
    rlock_client_t *c = l->c;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (w->woken || atomic_load(&l->cancel) || c->stop) break;
        int64_t now = rlock__now_us();
        if (now >= until_us) break;
        int64_t u = until_us;
        if (w->sub->state != SUB_ACTIVE && u > now + 50000) u = now + 50000;
        cond_wait_until(&w->cond, &c->mu, u);
        if (w->sub->state != SUB_ACTIVE && rlock__now_us() >= u) break;
    }
    w->woken = false;
    pthread_mutex_unlock(&c->mu);
}

static void waiter_leave(rlock_t *l, waiter_t *w)
{
    rlock_client_t *c = l->c;
    pthread_mutex_lock(&c->mu);
    sub_t *s = w->sub;
    if (w->prev) w->prev->next = w->next;
    else s->head = w->next;
    if (w->next) w->next->prev = w->prev;
    else s->tail = w->prev;
    /* A wake-up we consumed but did not act on goes to the next waiter. */
    if (w->woken) {
        for (waiter_t *o = s->head; o; o = o->next) {
            if (!o->woken) {
                waiter_wake(o);
                break;
            }
        }
    }
    l->waiter = NULL;
    if (--s->nwaiters == 0) {
        s->idle = true;
        s->idle_since_us = rlock__now_us();
        s->iprev = c->idle_tail;
        s->inext = NULL;
        if (c->idle_tail) c->idle_tail->inext = s;
        else c->idle_head = s;
        c->idle_tail = s;
    }
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&w->cond);
    free(w);
}

void rlock__wake(rlock_t *l)
{
    rlock_client_t *c = l->c;
    pthread_mutex_lock(&c->mu);
    if (l->waiter) pthread_cond_signal(&l->waiter->cond);
    pthread_mutex_unlock(&c->mu);
}

/* ======================================================================== */
/* Watchdog                                                                  */
/* ======================================================================== */

static int64_t validity_us(const rlock_client_t *c, int64_t lease_ms)
{
    double v = (double)lease_ms * (1.0 - c->cfg.drift_factor) - 2.0;
    if (v < 0) v = 0;
    return (int64_t)(v * 1000.0);
}

/* With c->mu held. */
static void wd_register(rlock_t *l)
{
    rlock_client_t *c = l->c;
    if (l->registered) return;
    l->registered = true;
    l->gen = ++c->wd_gen;
    l->wd_prev = NULL;
    l->wd_next = c->wd_head;
    if (c->wd_head) c->wd_head->wd_prev = l;
    c->wd_head = l;
    /* No wake-up: the watchdog thread ticks every lease/3 even when idle,
     * so a new hold is renewed within one period (its TTL is then still
     * 2/3 of the lease).  Signalling here would cost a context switch on
     * every uncontended lock. */
    c->wd_count++;
}

static void wd_unregister(rlock_t *l)
{
    rlock_client_t *c = l->c;
    if (!l->registered) return;
    if (l->wd_prev) l->wd_prev->wd_next = l->wd_next;
    else c->wd_head = l->wd_next;
    if (l->wd_next) l->wd_next->wd_prev = l->wd_prev;
    l->wd_prev = l->wd_next = NULL;
    l->registered = false;
    c->wd_count--;
}

static void handle_free(rlock_t *l);

static const char *renew_type(const rlock_t *l)
{
    switch (l->kind) {
    case RLOCK_SIMPLE: return "s";
    case RLOCK_READ: return "r";
    case RLOCK_WRITE: return "w";
    default: return "h";
    }
}

#define RENEW_BATCH 100

static void *wd_main(void *arg)
{
    rlock_client_t *c = arg;
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRId64, c->cfg.watchdog_lease_ms);
    const int64_t period = c->cfg.watchdog_lease_ms * 1000 / 3;
    int64_t retry = period / 10;
    if (retry < 20000) retry = 20000;

    pthread_mutex_lock(&c->mu);
    c->wd_next_us = rlock__now_us() + period;
    while (!c->stop) {
        int64_t now = rlock__now_us();
        if (now < c->wd_next_us) {
            cond_wait_until(&c->wd_cond, &c->mu, c->wd_next_us);
            continue;
        }
        if (c->wd_count == 0) {   /* idle tick */
            c->wd_next_us = now + period;
            continue;
        }
        /* Snapshot the registered holds; refs keep them alive unlocked. */
        size_t n = c->wd_count;
        rlock_t **arr = rlock__xmalloc(n * sizeof *arr);
        uint64_t *gens = rlock__xmalloc(n * sizeof *gens);
        size_t i = 0;
        for (rlock_t *l = c->wd_head; l && i < n; l = l->wd_next) {
            l->refs++;
            gens[i] = l->gen;
            arr[i++] = l;
        }
        n = i;
        c->stats.renewals += (n + RENEW_BATCH - 1) / RENEW_BATCH;
        pthread_mutex_unlock(&c->mu);

        int *res = rlock__xmalloc(n * sizeof *res);
        int64_t t_sent = rlock__now_us();
        bool any_err = false;
        for (size_t b = 0; b < n; b += RENEW_BATCH) {
            size_t m = n - b < RENEW_BATCH ? n - b : RENEW_BATCH;
            const char *keys[3 * RENEW_BATCH], *args[3 * RENEW_BATCH];
            for (size_t j = 0; j < m; j++) {
                rlock_t *l = arr[b + j];
                keys[3 * j] = l->key;
                keys[3 * j + 1] = l->key2 ? l->key2 : l->key;
                keys[3 * j + 2] = l->key3 ? l->key3 : l->key;
                args[3 * j] = renew_type(l);
                args[3 * j + 1] = l->owner;
                args[3 * j + 2] = lease;
            }
            redisReply *r = NULL;
            rlock_status_t st = rlock__conn_eval(c, &c->renew, RLOCK__S_RENEW, (int)(3 * m),
                                                 keys, (int)(3 * m), args, &r);
            for (size_t j = 0; j < m; j++) {
                long long v;
                res[b + j] = (st == RLOCK_OK && reply_arr_int(r, j, &v)) ? (int)v : -1;
            }
            if (st != RLOCK_OK) any_err = true;
            if (r) freeReplyObject(r);
        }

        rlock_t **lost = rlock__xmalloc(n * sizeof *lost);
        rlock_lost_reason_t *why = rlock__xmalloc(n * sizeof *why);
        size_t nlost = 0;
        pthread_mutex_lock(&c->cb_mu);
        pthread_mutex_lock(&c->mu);
        if (any_err) c->stats.renew_failures++;
        now = rlock__now_us();
        for (i = 0; i < n; i++) {
            rlock_t *l = arr[i];
            if (l->closed || !l->registered || l->gen != gens[i]) continue;
            if (res[i] == 1) {
                int64_t d = t_sent + validity_us(c, c->cfg.watchdog_lease_ms);
                if (d > l->deadline_us) l->deadline_us = d;
            } else if (res[i] == 0 || now >= l->deadline_us) {
                l->lost = true;
                wd_unregister(l);
                c->stats.lost++;
                lost[nlost] = l;
                why[nlost++] = res[i] == 0 ? RLOCK_LOST_NOT_OWNER : RLOCK_LOST_EXPIRED;
            }
        }
        c->wd_next_us = any_err ? now + retry : t_sent + period;
        pthread_mutex_unlock(&c->mu);
        for (i = 0; i < nlost; i++) {
            DBG("lost %s (%s)\n", lost[i]->name, why[i] == RLOCK_LOST_NOT_OWNER ? "not owner" : "expired");
            if (lost[i]->cb) lost[i]->cb(lost[i], why[i], lost[i]->cb_arg);
        }
        pthread_mutex_unlock(&c->cb_mu);

        pthread_mutex_lock(&c->mu);
        for (i = 0; i < n; i++) {
            if (--arr[i]->refs == 0) handle_free(arr[i]);
        }
        free(arr);
        free(gens);
        free(res);
        free(lost);
        free(why);
    }
    pthread_mutex_unlock(&c->mu);
    rlock__conn_close(&c->renew);
    return NULL;
}

/* ======================================================================== */
/* Handles                                                                   */
/* ======================================================================== */

static bool name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n > 0 && n <= 512 && !strpbrk(name, "{}");
}

rlock_status_t rlock_open(rlock_client_t *c, const char *name, rlock_kind_t kind,
                          const char *owner, unsigned flags, rlock_t **out)
{
    if (!c || !out || !name_ok(name) || kind > RLOCK_WRITE) return RLOCK_EINVAL;
    if (owner && (!*owner || strlen(owner) > 256)) return RLOCK_EINVAL;
    rlock_t *l = rlock__xcalloc(1, sizeof *l);
    l->c = c;
    l->kind = kind;
    l->flags = flags;
    l->name = rlock__xstrdup(name);
    if (owner) l->owner = rlock__xasprintf("%s:%s", c->id, owner);
    else l->owner = rlock__xasprintf("%s:t%d", c->id, (int)gettid());
    l->fence_key = rlock__xasprintf("rlock:{%s}:fence", name);
    switch (kind) {
    case RLOCK_SIMPLE:
        l->key = rlock__xasprintf("rlock:{%s}:s", name);
        break;
    case RLOCK_REENTRANT:
        l->key = rlock__xasprintf("rlock:{%s}", name);
        break;
    case RLOCK_FAIR:
        l->key = rlock__xasprintf("rlock:{%s}:f", name);
        l->key2 = rlock__xasprintf("rlock:{%s}:f:q", name);
        l->key3 = rlock__xasprintf("rlock:{%s}:f:t", name);
        break;
    case RLOCK_READ:
    case RLOCK_WRITE:
        l->key = rlock__xasprintf("rlock:{%s}:rw", name);
        l->key2 = rlock__xasprintf("rlock:{%s}:rw:r", name);
        l->key3 = rlock__xasprintf("rlock:{%s}:rw:w", name);
        break;
    }
    l->channel = rlock__xasprintf("%s:ch", l->key);
    l->refs = 1;
    atomic_init(&l->fence, 0);
    atomic_init(&l->cancel, 0);
    *out = l;
    return RLOCK_OK;
}

static void handle_free(rlock_t *l)
{
    free(l->name);
    free(l->owner);
    free(l->key);
    free(l->key2);
    free(l->key3);
    free(l->fence_key);
    free(l->channel);
    free(l);
}

void rlock_close(rlock_t *l)
{
    if (!l) return;
    rlock_client_t *c = l->c;
    pthread_mutex_lock(&c->mu);
    wd_unregister(l);
    l->closed = true;
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (!pthread_equal(pthread_self(), c->wd_thr)) {
        /* barrier: a lost callback of this handle may be running */
        pthread_mutex_lock(&c->cb_mu);
        pthread_mutex_unlock(&c->cb_mu);
    }
    if (last) handle_free(l);
}

void rlock_set_lost_cb(rlock_t *l, rlock_lost_cb cb, void *arg)
{
    pthread_mutex_lock(&l->c->mu);
    l->cb = cb;
    l->cb_arg = arg;
    pthread_mutex_unlock(&l->c->mu);
}

bool rlock_is_valid(const rlock_t *l)
{
    rlock_t *m = (rlock_t *)l;
    pthread_mutex_lock(&m->c->mu);
    bool v = m->held && !m->lost && rlock__now_us() < m->deadline_us;
    pthread_mutex_unlock(&m->c->mu);
    return v;
}

int64_t rlock_valid_for_ms(const rlock_t *l)
{
    rlock_t *m = (rlock_t *)l;
    pthread_mutex_lock(&m->c->mu);
    int64_t left = m->deadline_us - rlock__now_us();
    bool v = m->held && !m->lost && left > 0;
    pthread_mutex_unlock(&m->c->mu);
    return v ? left / 1000 : 0;
}

uint64_t rlock_fence(const rlock_t *l)
{
    return atomic_load(&((rlock_t *)l)->fence);
}

int64_t rlock_local_holds(const rlock_t *l)
{
    return l->holds;
}

const char *rlock_name(const rlock_t *l)
{
    return l->name;
}

const char *rlock_owner(const rlock_t *l)
{
    return l->owner;
}

/* Local bookkeeping after the hold count changed to `holds`. */
static void set_holds(rlock_t *l, int64_t holds, int64_t t0_us, bool refresh_deadline)
{
    rlock_client_t *c = l->c;
    l->holds = holds;
    pthread_mutex_lock(&c->mu);
    if (holds > 0) {
        l->held = true;
        l->lost = false;
        if (refresh_deadline) l->deadline_us = t0_us + validity_us(c, l->lease_ms);
        if (l->watchdog) wd_register(l);
    } else {
        l->held = false;
        wd_unregister(l);
    }
    pthread_mutex_unlock(&c->mu);
    if (holds == 0) atomic_store(&l->fence, 0);
}

static void count_stat(rlock_client_t *c, uint64_t *field)
{
    pthread_mutex_lock(&c->mu);
    (*field)++;
    pthread_mutex_unlock(&c->mu);
}

/* ======================================================================== */
/* Acquire                                                                   */
/* ======================================================================== */

static void count_stat(rlock_client_t *c, uint64_t *field);

typedef struct attempt {
    bool got;
    bool sync_failed;  /* granted, but too few replicas acknowledged it */
    int64_t count;
    uint64_t fence;
    int64_t hint_ms;   /* see rlock_scripts.c */
} attempt_t;

static bool parse_acq(const redisReply *r, attempt_t *a)
{
    long long ok, v;
    if (!reply_arr_int(r, 0, &ok) || !reply_arr_int(r, 1, &v)) return false;
    a->got = ok == 1;
    if (a->got) {
        long long f;
        if (!reply_arr_int(r, 2, &f)) return false;
        a->count = v;
        a->fence = (uint64_t)f;
    } else {
        a->hint_ms = v;
    }
    return true;
}

/*
 * Replica sync policy for a granted acquire: fewer than replica_acks
 * replicas acknowledged it -> REDIS_ERROR; the caller's error path undoes
 * the grant (fail-and-release), so a lock that might not survive a
 * failover is never reported as held.
 */
static rlock_status_t sync_check(rlock_t *l, long long acks, attempt_t *a)
{
    rlock_client_t *c = l->c;
    if (c->cfg.replica_acks <= 0 || acks >= c->cfg.replica_acks) return RLOCK_OK;
    a->sync_failed = true;
    DBG("%s: %lld of %d replicas acknowledged the acquire\n", l->name, acks, c->cfg.replica_acks);
    count_stat(c, &c->stats.sync_failures);
    return RLOCK_REDIS_ERROR;
}

static rlock_status_t attempt(rlock_t *l, int64_t lease_ms, bool waiting, attempt_t *a)
{
    rlock_client_t *c = l->c;
    char lease[24], wttl[24];
    snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
    snprintf(wttl, sizeof wttl, "%" PRId64, c->cfg.fair_waiter_ttl_ms);
    redisReply *r = NULL;
    rlock_status_t st;
    long long acks = LLONG_MAX;
    memset(a, 0, sizeof *a);

    switch (l->kind) {
    case RLOCK_SIMPLE:
        if (l->flags & RLOCK_F_FENCED) {
            const char *keys[] = { l->key, l->fence_key };
            const char *args[] = { l->owner, lease };
            st = cmd_eval_ex(c, RLOCK__S_SACQ_FENCED, 2, keys, 2, args, &r, &acks);
            break;
        } else {
            const char *argv[] = { "SET", l->key, l->owner, "NX", "PX", lease };
            st = cmd_argv_ex(c, 6, argv, &r, &acks);
            if (st != RLOCK_OK) return st;
            if (r->type == REDIS_REPLY_STATUS) {
                a->got = true;
                a->count = 1;
                freeReplyObject(r);
                return sync_check(l, acks, a);
            }
            freeReplyObject(r);
            a->hint_ms = -3;
            if (waiting) {
                const char *pv[] = { "PTTL", l->key };
                st = cmd_argv(c, 2, pv, &r);
                if (st != RLOCK_OK) return RLOCK_OK; /* the SET failed; hint unknown */
                a->hint_ms = r->type == REDIS_REPLY_INTEGER ? r->integer : -3;
                freeReplyObject(r);
            }
            return RLOCK_OK;
        }
    case RLOCK_REENTRANT: {
        const char *keys[] = { l->key, l->fence_key };
        const char *args[] = { l->owner, lease };
        st = cmd_eval_ex(c, RLOCK__S_ACQ, 2, keys, 2, args, &r, &acks);
        break;
    }
    case RLOCK_FAIR: {
        const char *keys[] = { l->key, l->key2, l->key3, l->fence_key, l->channel };
        const char *args[] = { l->owner, lease, wttl, waiting ? "1" : "0" };
        st = cmd_eval_ex(c, RLOCK__S_FACQ, 5, keys, 4, args, &r, &acks);
        break;
    }
    default: {
        const char *keys[] = { l->key, l->key2, l->key3, l->fence_key, l->channel };
        const char *args[] = { l->owner, l->kind == RLOCK_READ ? "r" : "w", lease,
                               (l->flags & RLOCK_F_WRITER_PREF) ? "1" : "0",
                               waiting ? "1" : "0", wttl };
        st = cmd_eval_ex(c, RLOCK__S_RWACQ, 5, keys, 6, args, &r, &acks);
        break;
    }
    }
    if (st != RLOCK_OK) return st;
    bool ok = parse_acq(r, a);
    freeReplyObject(r);
    if (!ok) return RLOCK_REDIS_ERROR;
    return a->got ? sync_check(l, acks, a) : RLOCK_OK;
}

/*
 * Release one hold.  mode 'n' normal, 'r' retry, 'u' undo; expected = hold
 * count before the release ('n', 'r') or after the acquire to undo ('u').
 * *left = remaining holds, -1 = not held, -3 = undo did not apply.
 */
static rlock_status_t release(rlock_t *l, char mode, int64_t expected, int64_t *left)
{
    rlock_client_t *c = l->c;
    char m[2] = { mode, 0 }, exp[24], lease[24];
    snprintf(exp, sizeof exp, "%" PRId64, expected);
    snprintf(lease, sizeof lease, "%" PRId64, l->lease_ms > 0 ? l->lease_ms : 1);
    redisReply *r = NULL;
    rlock_status_t st;
    long long acks = 0;   /* the release happened on the master either way */
    switch (l->kind) {
    case RLOCK_SIMPLE: {
        const char *keys[] = { l->key, l->channel };
        const char *args[] = { l->owner };
        st = cmd_eval_ex(c, RLOCK__S_SREL, 2, keys, 1, args, &r, &acks);
        break;
    }
    case RLOCK_REENTRANT: {
        const char *keys[] = { l->key, l->channel };
        const char *args[] = { l->owner, m, exp, lease };
        st = cmd_eval_ex(c, RLOCK__S_REL, 2, keys, 4, args, &r, &acks);
        break;
    }
    case RLOCK_FAIR: {
        const char *keys[] = { l->key, l->key2, l->key3, l->channel };
        const char *args[] = { l->owner, m, exp, lease };
        st = cmd_eval_ex(c, RLOCK__S_FREL, 4, keys, 4, args, &r, &acks);
        break;
    }
    default: {
        const char *keys[] = { l->key, l->key2, l->key3, l->fence_key, l->channel };
        const char *args[] = { l->owner, l->kind == RLOCK_READ ? "r" : "w", m, exp };
        st = cmd_eval_ex(c, RLOCK__S_RWREL, 5, keys, 4, args, &r, &acks);
        break;
    }
    }
    if (st != RLOCK_OK) {
        DBG("release %s mode %c: %s\n", l->name, mode, rlock_status_str(st));
        return st;
    }
    long long v;
    bool ok = reply_int(r, &v);
    if (!ok) DBG("release %s: unexpected reply type %d\n", l->name, r->type);
    freeReplyObject(r);
    if (!ok) return RLOCK_REDIS_ERROR;
    if (v <= -10) {   /* replay of an unlock that had applied */
        v = -10 - v;
        count_stat(c, &c->stats.unlock_replays);
    }
    *left = v;
    return RLOCK_OK;
}

/* A waiter that gives up leaves the fair queue / writer-waiting set. */
static void cancel_wait(rlock_t *l)
{
    redisReply *r = NULL;
    const char *args[] = { l->owner };
    if (l->kind == RLOCK_FAIR) {
        const char *keys[] = { l->key, l->key2, l->key3, l->channel };
        if (cmd_eval(l->c, RLOCK__S_FCANCEL, 4, keys, 1, args, &r) == RLOCK_OK) freeReplyObject(r);
    } else if (l->kind == RLOCK_WRITE && (l->flags & RLOCK_F_WRITER_PREF)) {
        const char *keys[] = { l->key, l->key2, l->key3, l->fence_key, l->channel };
        if (cmd_eval(l->c, RLOCK__S_RWCANCEL, 5, keys, 1, args, &r) == RLOCK_OK) freeReplyObject(r);
    }
}

/*
 * The reply of an acquire was lost: we may or may not hold one more hold.
 * Drop it if it is there (the script checks the exact count), so an
 * abandoned acquire never leaves a held lock behind.
 */
static void undo_acquire(rlock_t *l, int64_t prior)
{
    int64_t left;
    if (l->kind == RLOCK_SIMPLE && prior > 0) return;
    /* Two attempts (each fences off the failed connections first, so the
     * lost acquire cannot run after a successful undo).  If Redis stays
     * unreachable this costs up to two command timeouts, and the key's own
     * lease is the backstop: it is never renewed. */
    for (int i = 0; i < 2; i++) {
        if (release(l, 'u', prior + 1, &left) == RLOCK_OK) {
            cancel_wait(l);
            break;
        }
    }
}

rlock_status_t rlock__acquire(rlock_t *l, int64_t wait_ms, int64_t lease_ms)
{
    rlock_client_t *c = l->c;
    if (lease_ms <= 0 && lease_ms != RLOCK_WATCHDOG) return RLOCK_EINVAL;
    if (wait_ms < 0 && wait_ms != RLOCK_WAIT_FOREVER) return RLOCK_EINVAL;
    if (l->kind == RLOCK_SIMPLE && l->holds > 0) return RLOCK_EINVAL;

    bool watchdog = lease_ms == RLOCK_WATCHDOG;
    int64_t eff = watchdog ? c->cfg.watchdog_lease_ms : lease_ms;
    int64_t start = rlock__now_us();
    int64_t deadline = wait_ms < 0 ? INT64_MAX : start + wait_ms * 1000;
    int64_t heartbeat_us = c->cfg.fair_waiter_ttl_ms * 1000 / 3;
    waiter_t *w = NULL;
    rlock_status_t st;
    attempt_t a;
    bool got = false;
    int64_t backoff_us = 0;
    int nattempts = 0;
    if (wait_ms != 0) w = waiter_join_if_active(l);

    for (;;) {
        int64_t t0 = rlock__now_us();
        st = attempt(l, eff, wait_ms != 0, &a);
        bool first = nattempts++ == 0;
        if (st != RLOCK_OK) {
            undo_acquire(l, l->holds);
            /* Fail fast when Redis is unusable from the start; once we are
             * waiting (Redis was reachable), ride out an outage within the
             * budget and report the error only if the budget ends on it.  A
             * replica-sync shortfall means Redis is up: retry it too. */
            int64_t now = rlock__now_us();
            if ((first && !a.sync_failed) || wait_ms == 0 || now >= deadline ||
                atomic_load(&l->cancel) || c->stop)
                break;
            if (!w) {
                w = waiter_join(l, deadline);
                continue;
            }
            backoff_us = backoff_us ? (backoff_us * 2 > 500000 ? 500000 : backoff_us * 2) : 20000;
            int64_t until = now + backoff_us < deadline ? now + backoff_us : deadline;
            waiter_wait(l, w, until);
            continue;
        }
        backoff_us = 0;
        if (a.got) {
            got = true;
            if (l->holds == 0 || a.count == 1) {
                l->watchdog = watchdog;
                l->lease_ms = eff;
            } else if (!l->watchdog) {
                l->lease_ms = eff;
            }
            atomic_store(&l->fence, a.fence);
            /* Count holds locally (two handles may share an owner, so the
             * server's count can be higher); a server count of 1 means a
             * fresh hold whatever we believed before (the old one was lost). */
            set_holds(l, a.count == 1 ? 1 : l->holds + 1, t0, true);
            break;
        }
        int64_t now = rlock__now_us();
        if (now >= deadline || atomic_load(&l->cancel) || c->stop) {
            st = RLOCK_TIMEOUT;
            break;
        }
        if (!w) {
            w = waiter_join(l, deadline);
            continue;   /* re-attempt now that we are subscribed */
        }
        int64_t until = deadline;
        int64_t hint = a.hint_ms;
        if (hint == -2) {
            until = now;                      /* gone: retry at once */
        } else if (hint >= 0) {
            /* the blocker ends in hint ms (0: expiring now); +1 ms so the
             * server's expiry has happened when we retry */
            if (now + (hint + 1) * 1000 < until) until = now + (hint + 1) * 1000;
        } else if (hint == -1) {
            if (now + 1000000 < until) until = now + 1000000;  /* no TTL */
        }
        if ((l->kind == RLOCK_FAIR || (l->kind == RLOCK_WRITE && (l->flags & RLOCK_F_WRITER_PREF))) &&
            now + heartbeat_us < until)
            until = now + heartbeat_us;       /* keep our queue entry alive */
        if (until > now) waiter_wait(l, w, until);
    }
    if (w) waiter_leave(l, w);
    if (!got && st == RLOCK_TIMEOUT && wait_ms != 0) cancel_wait(l);
    if (got) count_stat(c, &c->stats.acquired);
    else if (st == RLOCK_TIMEOUT) count_stat(c, &c->stats.timeouts);
    return st;
}

rlock_status_t rlock_try_lock(rlock_t *l, int64_t wait_ms, int64_t lease_ms)
{
    if (!l) return RLOCK_EINVAL;
    atomic_store(&l->cancel, 0);
    return rlock__acquire(l, wait_ms, lease_ms);
}

rlock_status_t rlock_lock(rlock_t *l, int64_t lease_ms)
{
    return rlock_try_lock(l, RLOCK_WAIT_FOREVER, lease_ms);
}

/* ======================================================================== */
/* Release                                                                   */
/* ======================================================================== */

rlock_status_t rlock_unlock(rlock_t *l)
{
    if (!l) return RLOCK_EINVAL;
    rlock_client_t *c = l->c;
    if (l->holds <= 0) return RLOCK_NOT_OWNER;
    int64_t t0 = rlock__now_us();
    bool valid_at_send = rlock_is_valid(l);
    int64_t left = -1;
    bool retried = false;
    rlock_status_t st = release(l, 'n', l->holds, &left);
    if (st == RLOCK_REDIS_ERROR) {
        retried = true;
        st = release(l, 'r', l->holds, &left);
    }
    if (st != RLOCK_OK) {
        /* Outcome unknown: stop renewing; the lease bounds the damage. */
        set_holds(l, 0, t0, false);
        return st;
    }
    if (left == -1) {
        /* Not held.  After a lost reply of the final release, "gone" is the
         * expected state if our hold was valid when we sent it. */
        bool ok = retried && valid_at_send && l->holds == 1;
        set_holds(l, 0, t0, false);
        if (ok) {
            count_stat(c, &c->stats.released);
            return RLOCK_OK;
        }
        count_stat(c, &c->stats.lost);
        return RLOCK_LOST;
    }
    /* Local accounting: our holds minus one.  If the server says nothing is
     * left, nothing is.  If it says more is left than we hold (a hold of
     * another handle with the same owner, or one an undo could not remove),
     * we still stop renewing at zero: that residue expires with its lease. */
    int64_t mine = left <= 0 ? 0 : l->holds - 1;
    if (mine < 0) mine = 0;
    /* reentrant/fair partial releases refresh the lease (like Redisson) */
    bool refresh = mine > 0 && (l->kind == RLOCK_REENTRANT || l->kind == RLOCK_FAIR);
    set_holds(l, mine, t0, refresh);
    count_stat(c, &c->stats.released);
    return RLOCK_OK;
}

rlock_status_t rlock_force_unlock(rlock_t *l, bool *was_locked)
{
    if (!l) return RLOCK_EINVAL;
    redisReply *r = NULL;
    rlock_status_t st;
    if (l->kind == RLOCK_READ || l->kind == RLOCK_WRITE) {
        const char *keys[] = { l->key, l->key2, l->key3, l->fence_key, l->channel };
        const char *args[] = { l->kind == RLOCK_READ ? "r" : "w" };
        st = cmd_eval(l->c, RLOCK__S_RWFORCE, 5, keys, 1, args, &r);
    } else {
        const char *keys[] = { l->key, l->channel };
        const char *args[] = { l->kind == RLOCK_FAIR ? "*" : "" };
        st = cmd_eval(l->c, RLOCK__S_FORCE, 2, keys, 1, args, &r);
    }
    if (st != RLOCK_OK) return st;
    long long v = 0;
    bool ok = reply_int(r, &v);
    freeReplyObject(r);
    if (!ok) return RLOCK_REDIS_ERROR;
    if (l->holds > 0) set_holds(l, 0, 0, false);
    if (was_locked) *was_locked = v == 1;
    return RLOCK_OK;
}

/* ======================================================================== */
/* Queries                                                                   */
/* ======================================================================== */

/* RW: {locked, mine, pttl} */
static rlock_status_t rw_info(rlock_t *l, long long out[3])
{
    redisReply *r = NULL;
    const char *keys[] = { l->key, l->key2, l->key3, l->fence_key, l->channel };
    const char *args[] = { l->owner, l->kind == RLOCK_READ ? "r" : "w" };
    rlock_status_t st = cmd_eval(l->c, RLOCK__S_RWINFO, 5, keys, 2, args, &r);
    if (st != RLOCK_OK) return st;
    bool ok = reply_arr_int(r, 0, &out[0]) && reply_arr_int(r, 1, &out[1]) &&
              reply_arr_int(r, 2, &out[2]);
    freeReplyObject(r);
    return ok ? RLOCK_OK : RLOCK_REDIS_ERROR;
}

static rlock_status_t query_int(rlock_t *l, int argc, const char **argv, long long *v)
{
    redisReply *r = NULL;
    rlock_status_t st = cmd_argv(l->c, argc, argv, &r);
    if (st != RLOCK_OK) return st;
    if (r->type == REDIS_REPLY_INTEGER) *v = r->integer;
    else if (r->type == REDIS_REPLY_NIL) *v = 0;
    else if (r->type == REDIS_REPLY_STRING) *v = strtoll(r->str, NULL, 10);
    else st = RLOCK_REDIS_ERROR;
    freeReplyObject(r);
    return st;
}

rlock_status_t rlock_is_locked(rlock_t *l, bool *out)
{
    if (!l || !out) return RLOCK_EINVAL;
    long long v[3];
    rlock_status_t st;
    if (l->kind == RLOCK_READ || l->kind == RLOCK_WRITE) {
        st = rw_info(l, v);
    } else {
        const char *argv[] = { "EXISTS", l->key };
        st = query_int(l, 2, argv, &v[0]);
    }
    if (st == RLOCK_OK) *out = v[0] > 0;
    return st;
}

rlock_status_t rlock_hold_count(rlock_t *l, int64_t *out)
{
    if (!l || !out) return RLOCK_EINVAL;
    long long v[3];
    rlock_status_t st;
    if (l->kind == RLOCK_READ || l->kind == RLOCK_WRITE) {
        st = rw_info(l, v);
        v[0] = v[1];
    } else if (l->kind == RLOCK_SIMPLE) {
        redisReply *r = NULL;
        const char *argv[] = { "GET", l->key };
        st = cmd_argv(l->c, 2, argv, &r);
        if (st == RLOCK_OK) {
            v[0] = r->type == REDIS_REPLY_STRING && strcmp(r->str, l->owner) == 0;
            freeReplyObject(r);
        }
    } else {
        const char *argv[] = { "HGET", l->key, l->owner };
        st = query_int(l, 3, argv, &v[0]);
    }
    if (st == RLOCK_OK) *out = v[0];
    return st;
}

rlock_status_t rlock_is_held(rlock_t *l, bool *out)
{
    if (!out) return RLOCK_EINVAL;
    int64_t n;
    rlock_status_t st = rlock_hold_count(l, &n);
    if (st == RLOCK_OK) *out = n > 0;
    return st;
}

rlock_status_t rlock_remaining_ttl(rlock_t *l, int64_t *out_ms)
{
    if (!l || !out_ms) return RLOCK_EINVAL;
    long long v[3];
    rlock_status_t st;
    if (l->kind == RLOCK_READ || l->kind == RLOCK_WRITE) {
        st = rw_info(l, v);
        v[0] = v[2];
    } else {
        const char *argv[] = { "PTTL", l->key };
        st = query_int(l, 2, argv, &v[0]);
    }
    if (st == RLOCK_OK) *out_ms = v[0];
    return st;
}

/* ======================================================================== */
/* Fencing helpers                                                           */
/* ======================================================================== */

int rlock_fence_sql_predicate(char *buf, size_t len, const char *col, uint64_t token)
{
    if (!buf || !col || !*col) return -1;
    for (const char *p = col; *p; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
                  ch == '.' || (p != col && ch >= '0' && ch <= '9');
        if (!ok) return -1;
    }
    int n = snprintf(buf, len, "%s <= %" PRIu64, col, token);
    if (n < 0 || (size_t)n >= len) return -1;
    return n;
}

rlock_status_t rlock_fenced_set(rlock_client_t *c, const char *data_key,
                                const char *fence_key, uint64_t token,
                                const char *value, bool *accepted)
{
    if (!c || !data_key || !fence_key || !value) return RLOCK_EINVAL;
    char t[24];
    snprintf(t, sizeof t, "%" PRIu64, token);
    const char *keys[] = { data_key, fence_key };
    const char *args[] = { t, value };
    redisReply *r = NULL;
    rlock_status_t st = cmd_eval(c, RLOCK__S_FENCE_SET, 2, keys, 2, args, &r);
    if (st != RLOCK_OK) return st;
    long long v;
    bool ok = reply_int(r, &v);
    freeReplyObject(r);
    if (!ok) return RLOCK_REDIS_ERROR;
    if (accepted) *accepted = v == 1;
    return RLOCK_OK;
}
