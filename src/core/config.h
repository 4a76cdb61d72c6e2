/* config.h -- the service's settings: defaults, then a config file, then the environment
 * (SECKILL_*), then command-line flags; later sources win.
 *
 * Every setting has one row in the table in config.c (name, env var, flag, default, help),
 * so the file keys, the variables, the flags and `seckill serve --help` cannot disagree.
 * The struct is filled once at start and read-only afterwards (shared by all threads). */
#ifndef SECKILL_CONFIG_H
#define SECKILL_CONFIG_H

#include <stddef.h>

/* An order mode: a row of the table of order modes (sale/order_mode.h), which `--mode NAME`
 * picks. The service's own modes are its first rows, with these ids; a plug-in's rows
 * (the lab's) come after them. */
typedef int order_mode_t;
enum { MODE_STREAM = 0, MODE_QUEUE, MODE_SYNC, MODE__SERVICE };

/* Lab delay injection points (--lab-pause POINT:MS; lab.h says where each one is). */
enum { LAB_P_CHECK_WRITE = 0, LAB_P_GET_DEL, LAB_P_UNLOCK, LAB_P_POP_WRITE, LAB_P_SUBSCRIBE,
       LAB_P__COUNT };

/* A rate limit (ratelimit.h): per_s tokens per second, burst at most; per_s 0 = off.
 * Written "N[/s|/m|/h][:BURST]", e.g. 20/s:40, 1/m:3, 0. */
typedef struct config_rate {
    double per_s;
    double burst;
} config_rate_t;

typedef struct config {
    char listen_host[256];      /* listen: HOST:PORT, default 127.0.0.1:8081 */
    int listen_port;
    int threads;                /* worker threads; default = online cores */
    int steer_connections;      /* steer connections by CPU (steer.h) without pinning;
                                   on by default */
    char redis_url[512];        /* redis://[:pass@]host:port[/db] or unix:PATH; "" = embedded */
    char db_url[1024];          /* sqlite:PATH; default sqlite:<data_dir>/seckill.db */
    char data_dir[512];         /* default ./var */
    char mode_name[32];         /* --mode as given, default "stream" */
    order_mode_t mode;          /* its row: set by order_mode_pick (sale/order_mode.h) after
                                   config_load, which leaves MODE_STREAM */
    char admin_token[128];      /* "" = none configured (generated on the embedded default) */
    char name[128];             /* instance/consumer name; "" = host:pid (or "local" embedded) */
    char config_file[512];
    int log_level;              /* LOG_* from log.h */
    char redis_server_bin[256]; /* redis-server binary for the embedded default */

    /* deadlines and tuning */
    int redis_timeout_ms;       /* per Redis command deadline, default 1000 */
    int redis_wait_replicas;    /* WAIT for this many replicas before answering success; 0 = off */
    int sql_timeout_ms;         /* per SQL call deadline, default 2000 */
    int token_ttl_s;            /* login token sliding TTL, default 1800 */
    int token_cache_ms;         /* how long a worker trusts a cached token, default 1000 */
    char token_format[16];      /* "signed" (default) or "opaque" (token.h) */
    char token_key_file[512];   /* "" = <data_dir>/token-key, created on first start */
    int token_refresh_s;        /* EXPIRE a used token at most this often per worker, default 60 */
    int token_max_age_s;        /* absolute lifetime of a signed token, default 86400; 0 = none */
    int token_accept_opaque;    /* signed format: look up tokens that do not verify (auth.h) */
    int pow_min_bits;           /* bot gate (pow.h): difficulty at a quiet join rate, default 16 */
    int pow_max_bits;           /* its cap, default 20 */
    int pow_rate;               /* right solutions/s per voucher and instance before it rises, 50 */
    char code_gate[16];         /* POST /user/code needs a solved challenge: off, sale, always */
    config_rate_t rate_ip_token_lookup;  /* unknown-token lookups per client IP, default 5/s:20 */
    config_rate_t token_lookup_budget;   /* unknown-token lookups, all clients, default 500/s:1000 */
    config_rate_t rate_ip_admin;         /* wrong x-admin-token guesses per client IP, default 5/m:5 */
    int soldout_cache_ms;       /* how long a worker answers sold-out from memory, default 500 */
    int writer_batch;           /* orders per SQL transaction at most, default 512 */
    int writer_block_ms;        /* XREADGROUP BLOCK, default 1000 */
    int writer_nice;            /* the writer thread's nice above the workers', default 10 */
    int writer_drain_sweep_ms;  /* the drained streams' safety net: a sweep this often */
    int claim_idle_ms;          /* adopt entries idle longer than this, default 30000 */
    int max_conns;              /* per worker; 0 = 10000 or what the fd limit allows (fdlimit.h) */
    int idle_timeout_s;         /* keep-alive idle close, default 60 */
    int header_timeout_s;       /* a started request must complete within, default 10 */
    size_t max_header_bytes;    /* default 8192 */
    size_t max_body_bytes;      /* default 65536 */
    int max_conns_per_ip;       /* connections per client address, all workers; 0 = no cap */
    size_t max_buffered_bytes;  /* request bytes held by all connections; default 256 MiB */
    int max_buffered_ip_pct;    /* of it, the share one client address (IPv6: its /64) may
                                   hold, in percent; default 10 */
    int min_body_rate;          /* bytes/s a request body must keep up after a 2 s grace;
                                   0 = off; default 1024 */
    size_t sndbuf_bytes;        /* SO_SNDBUF of accepted sockets; 0 = the kernel's autotuning */
    int write_timeout_s;        /* replies not drained for this long: close; default 10 */
    int metrics_public;         /* /metrics on --listen without a token (a private network) */
    char metrics_listen[280];   /* HOST:PORT of a separate /metrics listener; "" = none */
    size_t queue_capacity;      /* queue mode: orders the in-process queue holds, default 1048576 */
    int appendfsync_always;     /* embedded redis: appendfsync always instead of everysec */
    char lab_pause[256];        /* lab modes: POINT:MS[,POINT:MS...] as given */
    int lab_pause_ms[LAB_P__COUNT];   /* parsed from lab_pause; 0 = no pause there */
    int lab_lease_ms;           /* lab lock modes: the lock's lease (setnx's EX) */

    /* abuse limits (ratelimit.h) */
    config_rate_t rate_user_seckill;  /* flash-sale orders per user, default 20/s:40 */
    config_rate_t rate_ip_seckill;    /* flash-sale orders per client IP, default off */
    config_rate_t rate_ip_code;       /* /user/code per client IP, default 10/m:20 */
    config_rate_t rate_phone_code;    /* /user/code per phone (in Redis), default 1/m:3 */
    int code_day_cap;                 /* codes per phone per 24 h (in Redis), default 10 */
    config_rate_t code_budget;        /* codes per instance, default 1200/m:1200 */
    config_rate_t rate_phone_login;   /* /user/login per phone and client, default 10/m:10 */
    config_rate_t rate_ip_login;      /* /user/login requests per client IP, default 10/s:100 */
    config_rate_t rate_user_lookup;   /* order lookups per user, default 10/s:20 */

    /* secrets off the command line (config_read_secrets) and the operations surface */
    char admin_token_file[512];       /* file holding the admin token */
    char redis_password_file[512];    /* file holding the Redis password (into redis_url) */
    char db_password_file[512];       /* file holding the database password (into db_url) */
    char config_refused[800];         /* why the --config file may not hold its secret, or "" */
    int log_login_codes;              /* write login codes to the log (embedded: always) */
    char code_command[1024];          /* delivers login codes: sh -c CMD, env SECKILL_PHONE/CODE */
    int code_command_timeout_ms;      /* its deadline, default 5000 */
    int code_command_max;             /* of them running at once, default 16 */
    char pay_key_file[512];           /* file holding the payment notices' HMAC key */
    char pay_key[256];                /* ... read from it ("" = none: src/order/paykey.h) */
    char refund_command[1024];        /* sends a refund: sh -c CMD, env SECKILL_ORDER_ID/... */
    int refund_command_timeout_ms;    /* its deadline, default 5000 */
    int refund_command_max;           /* of them running at once per writer, default 4 */
    int pay_timeout_s;                /* an unpaid order is cancelled this long after its
                                       * creation (0 = never) */
    int timeout_rate;                 /* orders a second the deadline sweep times out per
                                       * writer, at most (0 = unpaced) */
    int cancel_frees_buyer;           /* a cancel or timeout lets its buyer buy again */
    char metrics_token[128];          /* required as "authorization: Bearer T" on /metrics */
    char trusted_proxy[1024];         /* addresses whose X-Forwarded-For is believed */
} config_t;

/* Fills cfg from defaults, file, environment and argv (argv[0] is the subcommand name,
 * e.g. "serve"). On a bad value or an unknown flag writes one line to err and returns -1.
 * "--help" prints the table and returns 1. */
int config_load(config_t *cfg, int argc, char **argv, char *err, size_t errlen);

/* Reads the secret files named by cfg (admin-token-file, redis-password-file,
 * db-password-file) into cfg: the token into admin_token, the passwords into redis_url
 * and db_url (url_with_password), every one through secret.h's checks. A --config file
 * holding a token or a password is refused here too unless it passes the same checks
 * (made by config_load on the file it read). For `serve`, after config_load. Returns 0,
 * or -1 with the reason in err (never a secret). */
int config_read_secrets(config_t *cfg, char *err, size_t errlen);

/* Prints the settings table (flag, env, default, help) to stdout. */
void config_usage(const char *subcommand);

/* Splits "HOST:PORT" ("[::1]:8081" gives ::1) into host (hostsz bytes) and port 1..65535.
 * Returns 0, or -1 if v is not of that form. */
int config_split_hostport(const char *v, char *host, size_t hostsz, int *port);

#endif
