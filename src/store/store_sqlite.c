/* store_sqlite.c -- the SQLite backend of store.h (the embedded default).
 *
 * One sqlite3 connection per store_t, opened SQLITE_OPEN_NOMUTEX: the store.h contract is
 * one thread at a time per store_t, so SQLite's own per-connection mutex is not needed.
 *
 * Durability: WAL with synchronous=FULL. The order writer XACKs a stream entry only after
 * the commit that wrote it returns; with synchronous=NORMAL a WAL commit is not fsynced,
 * so a power loss or OS crash could roll back a transaction whose entries are already
 * acked -- orders lost with no copy left anywhere. FULL costs one fsync per commit, i.e.
 * per writer batch (up to writer_batch orders), which the measured drain rate absorbs
 * (docs/store.md).
 *
 * Deadlines: each store call sets deadline = now + timeout_ms. A busy handler (instead of
 * a fixed busy_timeout, so waiting on locks counts against the same call deadline) sleeps
 * in short steps while the deadline allows; a progress handler aborts any statement
 * running past it. Either way the call returns STORE_ERR and says why.
 *
 * Times: tables hold TEXT 'YYYY-MM-DD HH:MM:SS' in local time (sql/schema.sqlite.sql);
 * this file converts from and to the epoch seconds of store.h (localtime_r / mktime).
 *
 * Statements are prepared once per connection (SQLITE_PREPARE_PERSISTENT) on first use
 * and reset after every use, so no read transaction stays open between calls. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "core/xmem.h"
#include "core/clock.h"
#include "embedded.h"
#include "core/log.h"
#include "store/store_int.h"
#include "core/url.h"

/* Must equal the PRAGMA user_version that sql/schema.sqlite.sql sets. */
#define SQLITE_SCHEMA_VERSION 9

/* How many VM instructions between deadline checks. */
#define PROGRESS_OPS 1000
#define ORDER_CHUNK_LOG2 7
#define ORDER_CHUNK (1 << ORDER_CHUNK_LOG2)   /* orders per INSERT (orders_write_chunked) */

enum {
    ST_BEGIN_IMMEDIATE,
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_PING,
    ST_USER_BY_PHONE,
    ST_USER_INSERT,
    ST_VOUCHER_INSERT,
    ST_SECKILL_INSERT,
    ST_BUCKETS_INSERT,
    ST_BUCKETS_GET,
    ST_ROOM_INSERT,
    ST_ROOM_GET,
    ST_VOUCHER_GET,
    ST_VOUCHER_LIST,
    ST_SECKILL_IDS,
    ST_ORDER_INSERT,
    ST_ORDER_BY_ID,
    ST_ORDER_BY_USER_VOUCHER,
    ST_STOCK_DEC,
    ST_STOCK_TAKE,
    ST_ORDERS_OF_USER,
    ST_COUNT_ORDERS,
    ST_STOCK_GET,
    ST_EPOCH_GET,
    ST_EPOCH_BUMP,
    ST_SHOP_GET,
    ST_SHOP_LIST,
    ST_SHOP_INSERT,
    ST_SHOP_UPDATE,
    ST_SHOP_TYPES,
    ST_ASIDE_ANY,
    ST__COUNT
};

#define VOUCHER_COLS                                                                    \
    "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value, " \
    "v.type, v.status, sv.voucher_id IS NOT NULL, sv.stock, sv.begin_time, sv.end_time "   \
    "FROM tb_voucher v LEFT JOIN tb_seckill_voucher sv ON sv.voucher_id = v.id "

#define SHOP_COLS                                                                       \
    "SELECT id, name, type_id, images, area, address, x, y, avg_price, sold, comments, "   \
    "score, open_hours, create_time, update_time FROM tb_shop "

static const char *const stmt_sql[ST__COUNT] = {
    [ST_BEGIN_IMMEDIATE] = "BEGIN IMMEDIATE",
    [ST_BEGIN] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PING] = "SELECT 1",
    [ST_USER_BY_PHONE] = "SELECT id, phone, nick_name, icon FROM tb_user WHERE phone = ?1",
    [ST_USER_INSERT] = "INSERT INTO tb_user (phone, password, nick_name, icon, create_time, "
                       "update_time) VALUES (?1, '', ?2, '', ?3, ?3) "
                       "ON CONFLICT (phone) DO NOTHING",
    [ST_VOUCHER_INSERT] = "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, "
                          "actual_value, type, status, create_time, update_time) "
                          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)",
    [ST_BUCKETS_INSERT] = "INSERT INTO tb_seckill_buckets (voucher_id, buckets) VALUES (?1, ?2)",
    [ST_BUCKETS_GET] = "SELECT buckets FROM tb_seckill_buckets WHERE voucher_id = ?1",
    [ST_ROOM_INSERT] = "INSERT INTO tb_seckill_room (voucher_id, admit_per_s, pass_ttl_s, "
                       "bot_gate) VALUES (?1, ?2, ?3, ?4)",
    [ST_ROOM_GET] = "SELECT admit_per_s, pass_ttl_s, bot_gate FROM tb_seckill_room "
                    "WHERE voucher_id = ?1",
    [ST_SECKILL_INSERT] = "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, "
                          "end_time, create_time, update_time) VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
    [ST_VOUCHER_GET] = VOUCHER_COLS "WHERE v.id = ?1",
    [ST_VOUCHER_LIST] = VOUCHER_COLS "WHERE v.shop_id = ?1 AND v.status = 1 ORDER BY v.id",
    [ST_SECKILL_IDS] = "SELECT voucher_id FROM tb_seckill_voucher ORDER BY voucher_id",
    [ST_ORDER_INSERT] = "INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time, "
                        "update_time) VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT DO NOTHING",
    [ST_ORDER_BY_ID] = "SELECT user_id, voucher_id FROM tb_voucher_order WHERE id = ?1",
    [ST_ORDER_BY_USER_VOUCHER] = "SELECT id FROM tb_voucher_order "
                                 "WHERE user_id = ?1 AND voucher_id = ?2",
    [ST_STOCK_DEC] = "UPDATE tb_seckill_voucher SET stock = stock - ?1, update_time = ?2 "
                     "WHERE voucher_id = ?3 RETURNING stock",
    [ST_STOCK_TAKE] = "UPDATE tb_seckill_voucher SET stock = stock - ?1, update_time = ?2 "
                      "WHERE voucher_id = ?3 AND stock >= ?1",
    [ST_ORDERS_OF_USER] = "SELECT id, user_id, voucher_id, status, create_time "
                          "FROM tb_voucher_order WHERE user_id = ?1 UNION ALL "
                          "SELECT id, user_id, voucher_id, status, create_time "
                          "FROM tb_voucher_order_cancelled WHERE user_id = ?1 "
                          "ORDER BY create_time DESC, id DESC LIMIT ?2",
    [ST_COUNT_ORDERS] = "SELECT count(*) FROM tb_voucher_order WHERE voucher_id = ?1 "
                       "AND status IN (1, 2, 3)",
    [ST_STOCK_GET] = "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?1",
    [ST_EPOCH_GET] = "SELECT coalesce((SELECT epoch FROM tb_seckill_epoch WHERE voucher_id = "
                     "?1), 0) FROM tb_seckill_voucher WHERE voucher_id = ?1",
    [ST_EPOCH_BUMP] = "INSERT INTO tb_seckill_epoch (voucher_id, epoch, update_time) "
                      "VALUES (?1, 1, ?2) ON CONFLICT (voucher_id) DO UPDATE SET "
                      "epoch = epoch + 1, update_time = ?2",
    [ST_SHOP_GET] = SHOP_COLS "WHERE id = ?1",
    [ST_SHOP_LIST] = SHOP_COLS "WHERE (?1 = 0 OR type_id = ?1) AND (?2 IS NULL OR name LIKE ?2) "
                     "ORDER BY id LIMIT ?3 OFFSET ?4",
    [ST_SHOP_INSERT] = "INSERT INTO tb_shop (name, type_id, images, area, address, x, y, "
                       "avg_price, sold, comments, score, open_hours, create_time, update_time) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13)",
    [ST_SHOP_UPDATE] = "UPDATE tb_shop SET name = ?1, type_id = ?2, images = ?3, area = ?4, "
                       "address = ?5, x = ?6, y = ?7, avg_price = ?8, sold = ?9, comments = ?10, "
                       "score = ?11, open_hours = ?12, update_time = ?13 WHERE id = ?14",
    [ST_SHOP_TYPES] = "SELECT id, name, icon, sort, create_time, update_time FROM tb_shop_type "
                      "ORDER BY sort, id",
    [ST_ASIDE_ANY] = "SELECT 1 FROM tb_voucher_order_cancelled WHERE id BETWEEN ?1 AND ?2 "
                     "LIMIT 1",
};

/* store_order_get shares the row shape of ST_ORDERS_OF_USER; an order is in one of the two
 * tables (a cancel under --cancel-frees-buyer moves it). */
static const char order_get_sql[] = "SELECT id, user_id, voucher_id, status, create_time "
                                    "FROM tb_voucher_order WHERE id = ?1 UNION ALL "
                                    "SELECT id, user_id, voucher_id, status, create_time "
                                    "FROM tb_voucher_order_cancelled WHERE id = ?1";

/* The lifecycle's distinct statements are a few dozen (each CAS's table, status and column
 * spelled out): kept prepared, a timeout wave's thousands of moves a second do not parse
 * SQL for each. One past the slots is prepared for its call. */
#define LIFE_STMTS 48

typedef struct sq {
    struct store base;               /* first: a store_t * is an sq_t * */
    sqlite3 *db;
    int timeout_ms;
    uint64_t deadline_ms;            /* of the call in progress (monotonic) */
    int timed_out;                   /* the busy or progress handler gave up */
    sqlite3_stmt *st[ST__COUNT];
    sqlite3_stmt *st_order_get;
    sqlite3_stmt *st_sync[4];        /* sync order mode (sq_order_sync) */
    sqlite3_stmt *st_rows[ORDER_CHUNK_LOG2 + 1]; /* 2^i-row order inserts (insert_rows_stmt) */
    struct {                         /* the lifecycle's statements (once_row), by their text */
        char *sql;
        sqlite3_stmt *st;
    } life[LIFE_STMTS];
    int64_t tcache_t;                /* last epoch -> text conversion */
    char tcache_s[32];
} sq_t;

/* ---------------------------------------------------------------- small helpers */

static void call_begin(sq_t *q)
{
    q->deadline_ms = clock_mono_ms() + (uint64_t)q->timeout_ms;
    q->timed_out = 0;
}

/* Records why the current call failed. what names the step. */
static int sq_fail(sq_t *q, const char *what)
{
    if (q->timed_out)
        return store__fail(&q->base, "sqlite: %s: deadline of %d ms passed (%s)", what,
                           q->timeout_ms, sqlite3_errmsg(q->db));
    return store__fail(&q->base, "sqlite: %s: %s (code %d)", what, sqlite3_errmsg(q->db),
                       sqlite3_extended_errcode(q->db));
}

static int on_progress(void *arg)
{
    sq_t *q = arg;
    if (clock_mono_ms() > q->deadline_ms) {
        q->timed_out = 1;
        return 1;
    }
    return 0;
}

/* Waits for a lock in growing steps, but never past the call's deadline. */
static int on_busy(void *arg, int count)
{
    static const int steps_ms[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50};
    sq_t *q = arg;
    uint64_t now = clock_mono_ms();
    if (now >= q->deadline_ms) {
        q->timed_out = 1;
        return 0;
    }
    int n = (int)(sizeof steps_ms / sizeof steps_ms[0]);
    uint64_t ms = (uint64_t)steps_ms[count < n ? count : n - 1];
    if (ms > q->deadline_ms - now)
        ms = q->deadline_ms - now;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return 1;
}

static sqlite3_stmt *stmt_prepare(sq_t *q, sqlite3_stmt **slot, const char *sql)
{
    if (*slot)
        return *slot;
    if (sqlite3_prepare_v3(q->db, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, NULL) != SQLITE_OK) {
        sq_fail(q, "prepare");
        *slot = NULL;
    }
    return *slot;
}

static sqlite3_stmt *stmt(sq_t *q, int id)
{
    return stmt_prepare(q, &q->st[id], stmt_sql[id]);
}

/* A statement's parameter, bound in order from ?1 by one_row: A_INT(v); A_TEXT(z), which
 * stays put until the step is over (NULL binds NULL); A_COPY(z), copied when bound (for a
 * buffer that changes meanwhile). */
typedef struct sq_arg {
    enum { ARG_INT, ARG_TEXT, ARG_COPY } kind;
    int64_t i;
    const char *z;
} sq_arg_t;

#define A_INT(v) ((sq_arg_t){.kind = ARG_INT, .i = (v)})
#define A_TEXT(s_) ((sq_arg_t){.kind = ARG_TEXT, .z = (s_)})
#define A_COPY(s_) ((sq_arg_t){.kind = ARG_COPY, .z = (s_)})
/* one_row's last two arguments: ARGS(A_INT(id), A_TEXT(phone)) or NO_ARGS */
#define ARGS(...)                                                                       \
    (const sq_arg_t[]){__VA_ARGS__},                                                    \
        (int)(sizeof((const sq_arg_t[]){__VA_ARGS__}) / sizeof(sq_arg_t))
#define NO_ARGS NULL, 0

/* Reads the row a statement stands on into out. */
typedef void row_reader_t(sqlite3_stmt *st, void *out);

/* Every column as an integer, into out[0 .. column count). */
static void read_ints(sqlite3_stmt *st, void *out)
{
    int64_t *v = out;
    for (int i = 0, n = sqlite3_column_count(st); i < n; i++)
        v[i] = sqlite3_column_int64(st, i);
}

static void bind_args(sqlite3_stmt *st, const sq_arg_t *args, int nargs)
{
    for (int i = 0; i < nargs; i++) {
        if (args[i].kind == ARG_INT)
            sqlite3_bind_int64(st, i + 1, args[i].i);
        else
            sqlite3_bind_text(st, i + 1, args[i].z, -1,
                              args[i].kind == ARG_COPY ? SQLITE_TRANSIENT : SQLITE_STATIC);
    }
}

/* The one-row query: binds args to st (from stmt(), or NULL if preparing it failed, which
 * said why), steps it once, hands a row to read (NULL: nothing to read) and resets it, so
 * no read transaction stays open. STORE_OK with a row; STORE_NOTFOUND without one (which
 * is how a write succeeds: run()); STORE_ERR with the error recorded as `what`. */
static int one_row(sq_t *q, sqlite3_stmt *st, const char *what, row_reader_t *read, void *out,
                   const sq_arg_t *args, int nargs)
{
    if (!st)
        return STORE_ERR;
    bind_args(st, args, nargs);
    int rc = sqlite3_step(st), ret;
    if (rc == SQLITE_ROW) {
        if (read)
            read(st, out);
        ret = STORE_OK;
    } else if (rc == SQLITE_DONE) {
        ret = STORE_NOTFOUND;
    } else {
        ret = sq_fail(q, what);
    }
    sqlite3_reset(st);
    return ret;
}

/* A statement without result rows (INSERT, UPDATE, BEGIN): STORE_OK or STORE_ERR. */
static int run(sq_t *q, sqlite3_stmt *st, const char *what, const sq_arg_t *args, int nargs)
{
    return one_row(q, st, what, NULL, NULL, args, nargs) == STORE_ERR ? STORE_ERR : STORE_OK;
}

/* The many-row query: as one_row, but every row is read, each into the next element
 * (`size` bytes) of an array grown from first_cap elements. STORE_OK or STORE_ERR; either
 * way *out (NULL without rows) and *n are what was read, for the caller to keep or free. */
static int all_rows(sq_t *q, sqlite3_stmt *st, const char *what, row_reader_t *read,
                    size_t size, size_t first_cap, void **out, size_t *n, const sq_arg_t *args,
                    int nargs)
{
    *out = NULL;
    *n = 0;
    if (!st)
        return STORE_ERR;
    bind_args(st, args, nargs);
    char *a = NULL;
    size_t len = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            cap = cap ? cap * 2 : first_cap;
            a = xrealloc(a, cap * size);
        }
        read(st, a + len++ * size);
    }
    int ret = rc == SQLITE_DONE ? STORE_OK : sq_fail(q, what);
    sqlite3_reset(st);
    *out = a;
    *n = len;
    return ret;
}

/* Runs a statement without results (BEGIN, COMMIT, ...). */
static int exec_stmt(sq_t *q, int id, const char *what)
{
    return run(q, stmt(q, id), what, NO_ARGS);
}

/* Rolls back whatever transaction is open. Keeps the current error message. */
static void rollback(sq_t *q)
{
    if (sqlite3_get_autocommit(q->db))
        return;   /* SQLite already rolled it back (e.g. after an interrupt) */
    /* The deadline may be what failed: give the rollback its own. */
    q->deadline_ms = clock_mono_ms() + (uint64_t)q->timeout_ms;
    sqlite3_stmt *st = stmt(q, ST_ROLLBACK);
    if (st) {
        sqlite3_step(st);
        sqlite3_reset(st);
    }
    if (!sqlite3_get_autocommit(q->db))
        log_error("sqlite: ROLLBACK failed: %s", sqlite3_errmsg(q->db));
}

/* ---------------------------------------------------------------- time */

static const char *time_text(sq_t *q, int64_t t)
{
    if (t != q->tcache_t || !q->tcache_s[0]) {
        time_t tt = (time_t)t;
        struct tm tm;
        if (!localtime_r(&tt, &tm) ||
            strftime(q->tcache_s, sizeof q->tcache_s, "%Y-%m-%d %H:%M:%S", &tm) == 0)
            snprintf(q->tcache_s, sizeof q->tcache_s, "1970-01-01 00:00:00");
        q->tcache_t = t;
    }
    return q->tcache_s;
}

/* Reads a time column: TEXT 'YYYY-MM-DD HH:MM:SS' (or with 'T', optional fraction) in
 * local time, or a number of epoch seconds. NULL or unreadable -> 0. */
static int64_t col_time(sqlite3_stmt *st, int col)
{
    switch (sqlite3_column_type(st, col)) {
    case SQLITE_INTEGER:
    case SQLITE_FLOAT:
        return sqlite3_column_int64(st, col);
    case SQLITE_TEXT: {
        const char *z = (const char *)sqlite3_column_text(st, col);
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        int n = 0;
        if (!z || sscanf(z, "%4d-%2d-%2d%*1[ T]%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
                         &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
            return 0;
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        tm.tm_isdst = -1;
        time_t t = mktime(&tm);
        return t == (time_t)-1 ? 0 : (int64_t)t;
    }
    default:
        return 0;
    }
}

static void col_copy(sqlite3_stmt *st, int col, char *dst, size_t len)
{
    const char *z = (const char *)sqlite3_column_text(st, col);
    snprintf(dst, len, "%s", z ? z : "");
}

/* A NULL column stays NULL, so the API can omit the member as the course does. */
static char *col_dup(sqlite3_stmt *st, int col)
{
    const char *z = (const char *)sqlite3_column_text(st, col);
    return z ? xstrdup(z) : NULL;
}

/* ---------------------------------------------------------------- open / close */

static int exec_sql(sq_t *q, const char *sql, const char *what)
{
    char *msg = NULL;
    if (sqlite3_exec(q->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        if (q->timed_out)
            store__fail(&q->base, "sqlite: %s: deadline of %d ms passed (%s)", what,
                        q->timeout_ms, msg ? msg : "?");
        else
            store__fail(&q->base, "sqlite: %s: %s", what, msg ? msg : sqlite3_errmsg(q->db));
        sqlite3_free(msg);
        return STORE_ERR;
    }
    return STORE_OK;
}

static int pragma_int(sq_t *q, const char *sql, int *out)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK)
        return sq_fail(q, sql);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return sq_fail(q, sql);
    return STORE_OK;
}

static int journal_wal(sq_t *q)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(q->db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK)
        return sq_fail(q, "PRAGMA journal_mode");
    int rc = sqlite3_step(st);
    char mode[16] = "";
    if (rc == SQLITE_ROW)
        col_copy(st, 0, mode, sizeof mode);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return sq_fail(q, "PRAGMA journal_mode = WAL");
    /* An in-memory database reports "memory"; anything else on a file is a problem. */
    if (strcasecmp(mode, "wal") != 0 && strcasecmp(mode, "memory") != 0)
        return store__fail(&q->base, "sqlite: could not switch to WAL (journal_mode is %s)",
                           mode);
    return STORE_OK;
}

/* Creates or upgrades the schema. Runs the whole schema file in one IMMEDIATE
 * transaction, re-checking the version inside it, so concurrent first opens are safe. */
static int schema_ensure(sq_t *q)
{
    int v = 0;
    if (pragma_int(q, "PRAGMA user_version", &v) != STORE_OK)
        return STORE_ERR;
    if (v == SQLITE_SCHEMA_VERSION)
        return STORE_OK;
    if (v > SQLITE_SCHEMA_VERSION)
        return store__fail(&q->base,
                           "sqlite: database schema version %d is newer than this build (%d); "
                           "use a newer seckill",
                           v, SQLITE_SCHEMA_VERSION);
    if (exec_sql(q, "BEGIN IMMEDIATE", "schema: BEGIN") != STORE_OK)
        return STORE_ERR;
    if (pragma_int(q, "PRAGMA user_version", &v) != STORE_OK)
        goto fail;
    if (v < SQLITE_SCHEMA_VERSION) {
        if (exec_sql(q, schema_sqlite_sql, "schema") != STORE_OK)
            goto fail;
        if (pragma_int(q, "PRAGMA user_version", &v) != STORE_OK)
            goto fail;
        if (v != SQLITE_SCHEMA_VERSION) {
            store__fail(&q->base, "sqlite: schema file set version %d, this build expects %d",
                        v, SQLITE_SCHEMA_VERSION);
            goto fail;
        }
        log_info("sqlite: schema version %d ready", v);
    }
    if (exec_sql(q, "COMMIT", "schema: COMMIT") != STORE_OK)
        goto fail;
    return STORE_OK;
fail:
    rollback(q);
    return STORE_ERR;
}

static void sq_close(store_t *s)
{
    sq_t *q = (sq_t *)s;
    for (int i = 0; i < ST__COUNT; i++)
        sqlite3_finalize(q->st[i]);
    sqlite3_finalize(q->st_order_get);
    for (int i = 0; i < 4; i++)
        sqlite3_finalize(q->st_sync[i]);
    for (int i = 0; i <= ORDER_CHUNK_LOG2; i++)
        sqlite3_finalize(q->st_rows[i]);
    for (int i = 0; i < LIFE_STMTS && q->life[i].sql; i++) {
        sqlite3_finalize(q->life[i].st);
        free(q->life[i].sql);
    }
    if (q->db && sqlite3_close(q->db) != SQLITE_OK)
        log_error("sqlite: close: %s", sqlite3_errmsg(q->db));
    free(q);
}

/* Process-wide, before SQLite's first use: no memory statistics. With them on (the
 * default) every sqlite3_malloc/free takes a global mutex to keep counts nobody here
 * reads; the order writer allocates per row. sqlite3_config fails harmlessly (MISUSE)
 * if something initialised SQLite first. */
static pthread_once_t sq_config_once = PTHREAD_ONCE_INIT;

static void sq_config(void)
{
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static store_t *sq_open(const char *url, int timeout_ms, char *err, size_t errlen)
{
    const char *path = url_sqlite_path(url);
    if (!path) {
        snprintf(err, errlen, "sqlite: no file name in the database URL");
        return NULL;
    }
    pthread_once(&sq_config_once, sq_config);
    sq_t *q = xrealloc(NULL, sizeof *q);
    memset(q, 0, sizeof *q);
    q->timeout_ms = timeout_ms;
    q->tcache_t = -1;
    int rc = sqlite3_open_v2(path, &q->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "sqlite: cannot open %s: %s", path,
                 q->db ? sqlite3_errmsg(q->db) : sqlite3_errstr(rc));
        sq_close(&q->base);
        return NULL;
    }
    sqlite3_extended_result_codes(q->db, 1);
    sqlite3_busy_handler(q->db, on_busy, q);
    sqlite3_progress_handler(q->db, PROGRESS_OPS, on_progress, q);
    call_begin(q);
    if (journal_wal(q) != STORE_OK ||
        exec_sql(q, "PRAGMA synchronous = FULL; PRAGMA temp_store = MEMORY; "
                    "PRAGMA cache_size = -8192; PRAGMA foreign_keys = OFF",
                 "PRAGMA") != STORE_OK ||
        schema_ensure(q) != STORE_OK) {
        snprintf(err, errlen, "%s (database %s)", q->base.err, path);
        sq_close(&q->base);
        return NULL;
    }
    return &q->base;
}

/* ---------------------------------------------------------------- writers' turns */

/* SQLite lets one connection write at a time, and a connection that finds the write lock
 * taken can only poll for it (on_busy). Two connections of this process that both write
 * in a burst -- the job pool's threads creating users in a login storm -- then do not take
 * turns: the one holding the lock commits and takes it again within microseconds, the
 * other's polls keep finding it taken until its deadline passes (seen: a login answered
 * 503 "database unavailable" after 2 s while the other pool thread created 497 users).
 * So a user insert first takes this process's turn: a FIFO of waiters, each handed the
 * turn by the one before, the wait counted against the call's deadline. Writers of other
 * processes, and this process's other write paths, are still met by on_busy alone. One
 * turn per process: it rarely has more than one database. */
typedef struct turn_waiter {
    struct turn_waiter *next;
    int granted;
    pthread_cond_t cv;            /* CLOCK_MONOTONIC */
} turn_waiter_t;

static struct {
    pthread_mutex_t mu;
    int taken;
    turn_waiter_t *head, *tail;   /* waiting, oldest first */
} turns = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* 0 with the turn (give it back with turn_give); -1 if the call's deadline passed first. */
static int turn_take(const sq_t *q)
{
    pthread_mutex_lock(&turns.mu);
    if (!turns.taken && !turns.head) {
        turns.taken = 1;
        pthread_mutex_unlock(&turns.mu);
        return 0;
    }
    turn_waiter_t w = {0};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (turns.tail)
        turns.tail->next = &w;
    else
        turns.head = &w;
    turns.tail = &w;
    while (!w.granted) {
        uint64_t now = clock_mono_ms();
        if (now >= q->deadline_ms)
            break;
        struct timespec ts = clock_mono_after((int)(q->deadline_ms - now));
        pthread_cond_timedwait(&w.cv, &turns.mu, &ts);
    }
    if (!w.granted) {   /* still queued: leave the queue */
        turn_waiter_t **pp = &turns.head, *prev = NULL;
        while (*pp != &w) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        *pp = w.next;
        if (turns.tail == &w)
            turns.tail = prev;
    }
    int granted = w.granted;
    pthread_mutex_unlock(&turns.mu);
    pthread_cond_destroy(&w.cv);
    return granted ? 0 : -1;
}

/* Hands the turn to the oldest waiter, or frees it. */
static void turn_give(void)
{
    pthread_mutex_lock(&turns.mu);
    turn_waiter_t *w = turns.head;
    if (w) {
        turns.head = w->next;
        if (!turns.head)
            turns.tail = NULL;
        w->granted = 1;   /* turns.taken stays set: handed over */
        pthread_cond_signal(&w->cv);
    } else {
        turns.taken = 0;
    }
    pthread_mutex_unlock(&turns.mu);
}

/* ---------------------------------------------------------------- users */

static int sq_ping(store_t *s)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    return exec_stmt(q, ST_PING, "ping");
}

static void user_row(sqlite3_stmt *st, void *out)
{
    store_user_t *u = out;
    memset(u, 0, sizeof *u);
    u->id = sqlite3_column_int64(st, 0);
    col_copy(st, 1, u->phone, sizeof u->phone);
    col_copy(st, 2, u->nick_name, sizeof u->nick_name);
    col_copy(st, 3, u->icon, sizeof u->icon);
}

static int user_lookup(sq_t *q, const char *phone, store_user_t *out)
{
    return one_row(q, stmt(q, ST_USER_BY_PHONE), "user by phone", user_row, out,
                   ARGS(A_TEXT(phone)));
}

static int sq_user_by_phone(store_t *s, const char *phone, store_user_t *out)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    return user_lookup(q, phone, out);
}

static int sq_user_create(store_t *s, const char *phone, const char *nick, store_user_t *out)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    /* Look first: an INSERT that hits the UNIQUE phone would still use up an
     * AUTOINCREMENT id and leave a gap. */
    int rc = user_lookup(q, phone, out);
    if (rc != STORE_NOTFOUND)
        return rc;
    sqlite3_stmt *st = stmt(q, ST_USER_INSERT);
    if (!st)
        return STORE_ERR;
    if (turn_take(q) != 0) {
        q->timed_out = 1;
        return store__fail(&q->base, "sqlite: user insert: deadline of %d ms passed (waiting "
                           "for this process's other user inserts)", q->timeout_ms);
    }
    rc = run(q, st, "user insert",
             ARGS(A_TEXT(phone), A_TEXT(nick), A_COPY(time_text(q, clock_wall_s()))));
    turn_give();
    if (rc != STORE_OK)
        return STORE_ERR;
    /* Inserted, or the phone existed (a concurrent login): either way read it back. */
    rc = user_lookup(q, phone, out);
    if (rc == STORE_NOTFOUND)
        return store__fail(s, "sqlite: user %s vanished after insert", phone);
    return rc;
}

/* ---------------------------------------------------------------- vouchers */

static int sq_voucher_create(store_t *s, store_voucher_t *v)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    if (exec_stmt(q, ST_BEGIN_IMMEDIATE, "voucher create: BEGIN") != STORE_OK)
        return STORE_ERR;
    char now[32];
    snprintf(now, sizeof now, "%s", time_text(q, clock_wall_s()));
    sqlite3_stmt *st = stmt(q, ST_VOUCHER_INSERT);
    int rc = run(q, st, "voucher insert",
                 ARGS(A_INT(v->shop_id), A_TEXT(v->title), A_TEXT(v->sub_title),
                      A_TEXT(v->rules), A_INT(v->pay_value), A_INT(v->actual_value),
                      A_INT(v->type), A_INT(v->status > 0 ? v->status : 1), A_TEXT(now)));
    if (st)
        sqlite3_clear_bindings(st);   /* the strings are the caller's, bound uncopied */
    if (rc != STORE_OK)
        goto fail;
    int64_t id = sqlite3_last_insert_rowid(q->db);
    if (v->is_seckill) {
        char b[32], e[32];
        snprintf(b, sizeof b, "%s", time_text(q, v->begin_time));
        snprintf(e, sizeof e, "%s", time_text(q, v->end_time));
        if (run(q, stmt(q, ST_SECKILL_INSERT), "seckill voucher insert",
                ARGS(A_INT(id), A_INT(v->stock), A_TEXT(b), A_TEXT(e), A_TEXT(now))) !=
            STORE_OK)
            goto fail;
        if (v->buckets > 1 && run(q, stmt(q, ST_BUCKETS_INSERT), "stock buckets insert",
                                  ARGS(A_INT(id), A_INT(v->buckets))) != STORE_OK)
            goto fail;
        if (v->room.admit_per_s > 0 &&
            run(q, stmt(q, ST_ROOM_INSERT), "waiting room insert",
                ARGS(A_INT(id), A_INT(v->room.admit_per_s), A_INT(v->room.pass_ttl_s),
                     A_INT(v->room.bot_gate))) != STORE_OK)
            goto fail;
    }
    if (exec_stmt(q, ST_COMMIT, "voucher create: COMMIT") != STORE_OK)
        goto fail;
    v->id = id;
    return STORE_OK;
fail:
    rollback(q);
    return STORE_ERR;
}

static void voucher_row(sqlite3_stmt *st, void *out)
{
    store_voucher_t *v = out;
    memset(v, 0, sizeof *v);
    v->id = sqlite3_column_int64(st, 0);
    v->shop_id = sqlite3_column_int64(st, 1);
    v->title = col_dup(st, 2);
    v->sub_title = col_dup(st, 3);
    v->rules = col_dup(st, 4);
    v->pay_value = sqlite3_column_int64(st, 5);
    v->actual_value = sqlite3_column_int64(st, 6);
    v->type = sqlite3_column_int(st, 7);
    v->status = sqlite3_column_int(st, 8);
    v->is_seckill = sqlite3_column_int(st, 9);
    if (v->is_seckill) {
        v->stock = sqlite3_column_int64(st, 10);
        v->begin_time = col_time(st, 11);
        v->end_time = col_time(st, 12);
    }
}

static int sq_voucher_get(store_t *s, int64_t id, store_voucher_t *out)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    return one_row(q, stmt(q, ST_VOUCHER_GET), "voucher get", voucher_row, out,
                   ARGS(A_INT(id)));
}

static int sq_voucher_list(store_t *s, int64_t shop_id, store_voucher_t **out, size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    void *a;
    size_t len;
    if (all_rows(q, stmt(q, ST_VOUCHER_LIST), "voucher list", voucher_row, sizeof **out, 8, &a,
                 &len, ARGS(A_INT(shop_id))) != STORE_OK) {
        store_voucher_list_free(a, len);
        return STORE_ERR;
    }
    *out = a;
    *n = len;
    return STORE_OK;
}

static int sq_seckill_ids(store_t *s, int64_t **ids, size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    void *a;
    size_t len;
    if (all_rows(q, stmt(q, ST_SECKILL_IDS), "seckill ids", read_ints, sizeof **ids, 16, &a,
                 &len, NO_ARGS) != STORE_OK) {
        free(a);
        return STORE_ERR;
    }
    *ids = a;
    *n = len;
    return STORE_OK;
}

/* ---------------------------------------------------------------- orders */

/* Per-voucher counts of the orders a batch inserted: one stock UPDATE per voucher. */
typedef struct tally {
    int64_t voucher_id;
    int64_t n;
} tally_t;

typedef struct tallies {
    tally_t small[16];
    tally_t *t;                      /* small, or allocated past 16 vouchers */
    size_t n, cap;
} tallies_t;

static void tallies_init(tallies_t *x)
{
    x->t = x->small;
    x->n = 0;
    x->cap = sizeof x->small / sizeof x->small[0];
}

static void tallies_free(tallies_t *x)
{
    if (x->t != x->small)
        free(x->t);
    tallies_init(x);
}

static void tally_add(tallies_t *x, int64_t voucher_id, int64_t n)
{
    size_t k = 0;
    while (k < x->n && x->t[k].voucher_id != voucher_id)
        k++;
    if (k == x->n) {
        if (x->n == x->cap) {
            x->cap *= 2;
            if (x->t == x->small) {
                x->t = xrealloc(NULL, x->cap * sizeof *x->t);
                memcpy(x->t, x->small, sizeof x->small);
            } else {
                x->t = xrealloc(x->t, x->cap * sizeof *x->t);
            }
        }
        x->t[k].voucher_id = voucher_id;
        x->t[k].n = 0;
        x->n++;
    }
    x->t[k].n += n;
}

/* One UPDATE per voucher per batch: the hot row is touched once, not per order. First
 * guarded (stock >= n), which is the usual case and needs no answer back; only when it
 * matches nothing, the unguarded one with RETURNING tells a missing row from a short
 * stock (and takes it anyway). RETURNING on every batch cost ~27,000 instructions per
 * commit (SQLite collects its rows in an ephemeral table): ~0.2 us per order at the
 * commit sizes of a live grab (perf/grab_ab.py splits it per thread). */
static int stock_take(sq_t *q, const tallies_t *x)
{
    if (x->n == 0)
        return STORE_OK;
    char now[32];
    snprintf(now, sizeof now, "%s", time_text(q, clock_wall_s()));
    for (size_t k = 0; k < x->n; k++) {
        if (run(q, stmt(q, ST_STOCK_TAKE), "stock update",
                ARGS(A_INT(x->t[k].n), A_TEXT(now), A_INT(x->t[k].voucher_id))) != STORE_OK)
            return STORE_ERR;
        if (sqlite3_changes(q->db) > 0)
            continue;
        /* RETURNING: stepped to its end (not one_row), so the UPDATE completes before
         * the reset */
        sqlite3_stmt *st = stmt(q, ST_STOCK_DEC);
        if (!st)
            return STORE_ERR;
        sqlite3_bind_int64(st, 1, x->t[k].n);
        sqlite3_bind_text(st, 2, now, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, x->t[k].voucher_id);
        int rc = sqlite3_step(st);
        int64_t left = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
        int row = rc == SQLITE_ROW;
        while (rc == SQLITE_ROW)
            rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            return sq_fail(q, "stock update");
        /* Neither case may stop the batch: the orders were admitted and are real. */
        if (!row)
            log_error("voucher %lld: %lld orders written but it has no "
                      "tb_seckill_voucher row to take stock from",
                      (long long)x->t[k].voucher_id, (long long)x->t[k].n);
        else if (left < 0)
            log_error("voucher %lld: SQL stock is now %lld (more orders than stock)",
                      (long long)x->t[k].voucher_id, (long long)left);
    }
    return STORE_OK;
}

/* An insert that changed nothing: tell a replay (same order, or the user already has an
 * order of this voucher) from an id collision (the id belongs to another user/voucher).
 * Returns 1 for a collision, 0 for a replay, STORE_ERR on failure. */
static int classify_skip(sq_t *q, const store_order_t *o)
{
    int64_t uv[2] = {0, 0};   /* user, voucher */
    int rc = one_row(q, stmt(q, ST_ORDER_BY_ID), "order by id", read_ints, uv,
                     ARGS(A_INT(o->id)));
    if (rc == STORE_ERR)
        return STORE_ERR;
    if (rc == STORE_OK) {
        if (uv[0] == o->user_id && uv[1] == o->voucher_id)
            return 0;
        log_error("order id collision: order %lld (user %lld, voucher %lld) not written: "
                  "id already belongs to user %lld, voucher %lld",
                  (long long)o->id, (long long)o->user_id, (long long)o->voucher_id,
                  (long long)uv[0], (long long)uv[1]);
        return 1;
    }
    /* Not the id: so (user, voucher) has an order under another id. */
    int64_t other = 0;
    rc = one_row(q, stmt(q, ST_ORDER_BY_USER_VOUCHER), "order by user and voucher", read_ints,
                 &other, ARGS(A_INT(o->user_id), A_INT(o->voucher_id)));
    if (rc == STORE_ERR)
        return STORE_ERR;
    if (rc == STORE_OK)
        log_warn("order %lld not written: user %lld already has order %lld of voucher %lld",
                 (long long)o->id, (long long)o->user_id, (long long)other,
                 (long long)o->voucher_id);
    return 0;
}

/* Whether tb_voucher_order_cancelled holds an id of orders[0..n) (with n == 1, exactly
 * that one; else any id between the batch's least and greatest, one range read per batch):
 * such an order was written, cancelled and moved aside (--cancel-frees-buyer), and a replay
 * of its entry must not write it again. 1 yes, 0 no, STORE_ERR. */
static int moved_aside(sq_t *q, const store_order_t *orders, size_t n)
{
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        lo = orders[i].id < lo ? orders[i].id : lo;
        hi = orders[i].id > hi ? orders[i].id : hi;
    }
    int rc = one_row(q, stmt(q, ST_ASIDE_ANY), "cancelled orders", NULL, NULL,
                     ARGS(A_INT(lo), A_INT(hi)));
    return rc == STORE_ERR ? STORE_ERR : rc == STORE_OK;
}

/* The voucher's Redis generation (0 without a row; -1 if not a flash-sale voucher), inside
 * the caller's transaction. The last voucher asked is remembered: batches are runs of one
 * voucher's stream. */
static int epoch_of(sq_t *q, int64_t voucher_id, int64_t *cache_vid, int64_t *cache_ep)
{
    if (*cache_vid == voucher_id)
        return STORE_OK;
    int64_t ep = -1;
    if (one_row(q, stmt(q, ST_EPOCH_GET), "epoch get", read_ints, &ep,
                ARGS(A_INT(voucher_id))) == STORE_ERR)
        return STORE_ERR;
    *cache_vid = voucher_id;
    *cache_ep = ep;
    return STORE_OK;
}

/* Is o fenced: admitted under a Redis generation of its voucher that a rebuild from SQL
 * has replaced? 1 yes, 0 no, STORE_ERR. (ep_vid, ep) cache the last voucher's epoch. */
static int order_fenced(sq_t *q, const store_order_t *o, int64_t *ep_vid, int64_t *ep)
{
    if (o->epoch == STORE_EPOCH_ANY)
        return 0;
    if (epoch_of(q, o->voucher_id, ep_vid, ep) != STORE_OK)
        return STORE_ERR;
    return *ep >= 0 && o->epoch != *ep;
}

/* The end of a batch's transaction: the stock taken, then COMMIT. On STORE_ERR the
 * caller rolls back. */
static int orders_commit(sq_t *q, const tallies_t *tl)
{
    if (stock_take(q, tl) != STORE_OK)
        return STORE_ERR;
    return exec_stmt(q, ST_COMMIT, "orders: COMMIT");
}

/* The row-by-row batch: each order is checked against its voucher's generation, inserted
 * alone, and an insert that changes nothing is told apart (replay or id collision). */
static int orders_write_rows(sq_t *q, const store_order_t *orders, size_t n, size_t *inserted,
                             size_t *conflicts, size_t *fenced)
{
    size_t ins = 0, conf = 0, fen = 0;
    tallies_t tl;
    int64_t ep_vid = 0, ep = 0;

    tallies_init(&tl);
    /* IMMEDIATE: the write lock is held from here, so the epoch read below cannot be
     * overtaken by a rebuild's bump before this batch commits. */
    if (exec_stmt(q, ST_BEGIN_IMMEDIATE, "orders: BEGIN IMMEDIATE") != STORE_OK)
        return STORE_ERR;
    sqlite3_stmt *st = stmt(q, ST_ORDER_INSERT);
    if (!st)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const store_order_t *o = &orders[i];
        int f = order_fenced(q, o, &ep_vid, &ep);
        if (f == STORE_ERR)
            goto fail;
        if (f) {
            log_warn("order %lld (user %lld, voucher %lld) not written: admitted under "
                     "Redis generation %lld, which a rebuild from SQL replaced with %lld "
                     "(the order was lost with Redis)",
                     (long long)o->id, (long long)o->user_id, (long long)o->voucher_id,
                     (long long)o->epoch, (long long)ep);
            fen++;
            continue;
        }
        int aside = moved_aside(q, o, 1);
        if (aside == STORE_ERR)
            goto fail;
        if (aside) {
            log_warn("order %lld not written again: it was cancelled and moved to "
                     "tb_voucher_order_cancelled (a replay)", (long long)o->id);
            continue;
        }
        if (run(q, st, "order insert",
                ARGS(A_INT(o->id), A_INT(o->user_id), A_INT(o->voucher_id),
                     A_TEXT(time_text(q, o->create_time)))) != STORE_OK)
            goto fail;
        if (sqlite3_changes(q->db) > 0) {
            ins++;
            tally_add(&tl, o->voucher_id, 1);
        } else {
            int c = classify_skip(q, o);
            if (c == STORE_ERR)
                goto fail;
            conf += (size_t)c;
        }
    }
    if (orders_commit(q, &tl) != STORE_OK)
        goto fail;
    tallies_free(&tl);
    *inserted = ins;
    *conflicts = conf;
    *fenced = fen;
    return STORE_OK;
fail:
    rollback(q);
    tallies_free(&tl);
    return STORE_ERR;
}

/* The insert of k rows at once (k a power of two up to ORDER_CHUNK), prepared on first
 * use. OR ROLLBACK, not ON CONFLICT DO NOTHING: a conflict of any row (a replay, a
 * duplicate buyer, an id collision) ends the whole transaction, which is what the caller
 * does with it anyway (it takes the row-by-row path, which tells the cases apart). So the
 * statement never has to undo itself alone, and SQLite keeps no statement journal for it:
 * with DO NOTHING (or the default ABORT of its NOT NULL checks) every statement opened a
 * savepoint and copied each page it touched first into the sub-journal, ~10 % of the
 * instructions per order. The unique index still decides: the rows are checked against
 * it as before.
 *
 * The k rows share one voucher and one time: row j binds only its id and user (?2j+1,
 * ?2j+2), the voucher is ?2k+1 and create_time = update_time ?2k+2 for all of them. A
 * batch is runs of one voucher's stream, admitted within a second or two, so the chunks
 * split there cost a statement or two per batch, while two binds fewer per row (a text
 * one among them) saved ~300 instructions per order (perf/grab_ab.py
 * splits it per thread). */
static sqlite3_stmt *insert_rows_stmt(sq_t *q, int k)
{
    int slot = __builtin_ctz((unsigned)k);
    if (q->st_rows[slot])
        return q->st_rows[slot];
    char sql[160 + ORDER_CHUNK * 40];
    size_t p = (size_t)snprintf(sql, sizeof sql, "INSERT OR ROLLBACK INTO tb_voucher_order "
                                "(id, user_id, voucher_id, create_time, update_time) VALUES ");
    for (int j = 0; j < k; j++)
        p += (size_t)snprintf(sql + p, sizeof sql - p, "%s(?%d, ?%d, ?%d, ?%d, ?%d)",
                              j ? ", " : "", 2 * j + 1, 2 * j + 2, 2 * k + 1, 2 * k + 2,
                              2 * k + 2);
    return stmt_prepare(q, &q->st_rows[slot], sql);
}

/* Inserts rows[0..k) (k <= ORDER_CHUNK, all of one voucher and one create_time:
 * insert_rows_stmt) with as few statements as the prepared sizes allow. Returns how many
 * rows were inserted; INSERT_CONFLICT when a row met a constraint (SQLite has rolled the
 * transaction back); -1 on an error. */
#define INSERT_CONFLICT (-2)

static int insert_rows(sq_t *q, const store_order_t *const *rows, int k)
{
    int done = 0;
    while (k > 0) {
        int m = 1 << (31 - __builtin_clz((unsigned)k));   /* largest power of two <= k */
        sqlite3_stmt *st = insert_rows_stmt(q, m);
        if (!st)
            return -1;
        for (int j = 0; j < m; j++) {
            sqlite3_bind_int64(st, 2 * j + 1, rows[j]->id);
            sqlite3_bind_int64(st, 2 * j + 2, rows[j]->user_id);
        }
        sqlite3_bind_int64(st, 2 * m + 1, rows[0]->voucher_id);
        /* time_text's buffer holds still until the step: nothing else converts meanwhile */
        sqlite3_bind_text(st, 2 * m + 2, time_text(q, rows[0]->create_time), -1,
                          SQLITE_STATIC);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if ((rc & 0xff) == SQLITE_CONSTRAINT && sqlite3_get_autocommit(q->db))
            return INSERT_CONFLICT;
        if (rc != SQLITE_DONE) {
            sq_fail(q, "order insert");
            return -1;
        }
        done += sqlite3_changes(q->db);
        rows += m;
        k -= m;
    }
    return done;
}

/* The usual batch: every order is of its voucher's current generation and new to SQL.
 * Inserted up to ORDER_CHUNK rows of one voucher and time per statement: row by row,
 * SQLite's per-statement work (VDBE set-up, the statement journal an upsert opens, halt)
 * cost about as much as the insert itself. Returns STORE_OK (committed), STORE_ERR, or ORDERS_UNUSUAL when an order
 * is fenced or a row conflicts (insert_rows_stmt): then the transaction is rolled
 * back, nothing is written, and the caller takes the row-by-row path, which tells each case
 * apart. */
#define ORDERS_UNUSUAL 1

static int orders_write_chunked(sq_t *q, const store_order_t *orders, size_t n,
                                size_t *inserted)
{
    const store_order_t *chunk[ORDER_CHUNK];
    int k = 0;
    tallies_t tl;
    int64_t ep_vid = 0, ep = 0;
    int rc = STORE_ERR;

    tallies_init(&tl);
    /* IMMEDIATE: as in orders_write_rows. */
    if (exec_stmt(q, ST_BEGIN_IMMEDIATE, "orders: BEGIN IMMEDIATE") != STORE_OK)
        return STORE_ERR;
    int aside = moved_aside(q, orders, n);
    if (aside != 0) {
        rc = aside == STORE_ERR ? STORE_ERR : ORDERS_UNUSUAL;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const store_order_t *o = &orders[i];
        int f = order_fenced(q, o, &ep_vid, &ep);
        if (f == STORE_ERR)
            goto fail;
        if (f) {
            rc = ORDERS_UNUSUAL;
            goto fail;
        }
        chunk[k++] = o;
        const store_order_t *next = i + 1 < n ? &orders[i + 1] : NULL;
        if (k < ORDER_CHUNK && next && next->voucher_id == o->voucher_id &&
            next->create_time == o->create_time)
            continue;   /* one voucher and one time per chunk (insert_rows_stmt) */
        tally_add(&tl, o->voucher_id, k);
        int done = insert_rows(q, chunk, k);
        if (done == INSERT_CONFLICT) {
            rc = ORDERS_UNUSUAL;   /* rolled back already: rollback() below sees that */
            goto fail;
        }
        if (done < 0)
            goto fail;
        if (done != k) {
            rc = ORDERS_UNUSUAL;
            goto fail;
        }
        k = 0;
    }
    if (orders_commit(q, &tl) != STORE_OK)
        goto fail;
    tallies_free(&tl);
    *inserted = n;
    return STORE_OK;
fail:
    rollback(q);
    tallies_free(&tl);
    return rc;
}

static int sq_orders_write(store_t *s, const store_order_t *orders, size_t n, size_t *inserted,
                           size_t *conflicts, size_t *fenced)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    int rc = orders_write_chunked(q, orders, n, inserted);
    if (rc != ORDERS_UNUSUAL) {
        *conflicts = 0;
        *fenced = 0;
        return rc;
    }
    return orders_write_rows(q, orders, n, inserted, conflicts, fenced);
}

static int sq_redis_epoch(store_t *s, int64_t voucher_id, int bump, int64_t *epoch)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    if (exec_stmt(q, bump ? ST_BEGIN_IMMEDIATE : ST_BEGIN, "epoch: BEGIN") != STORE_OK)
        return STORE_ERR;
    int64_t vid = 0, ep = -1;
    if (epoch_of(q, voucher_id, &vid, &ep) != STORE_OK)
        goto fail;
    if (ep >= 0 && bump) {
        if (run(q, stmt(q, ST_EPOCH_BUMP), "epoch bump",
                ARGS(A_INT(voucher_id), A_COPY(time_text(q, clock_wall_s())))) != STORE_OK)
            goto fail;
        ep++;
    }
    if (exec_stmt(q, ST_COMMIT, "epoch: COMMIT") != STORE_OK)
        goto fail;
    if (ep < 0)
        return STORE_NOTFOUND;
    *epoch = ep;
    return STORE_OK;
fail:
    rollback(q);
    return STORE_ERR;
}

static void order_row(sqlite3_stmt *st, void *out)
{
    store_order_t *o = out;
    o->id = sqlite3_column_int64(st, 0);
    o->user_id = sqlite3_column_int64(st, 1);
    o->voucher_id = sqlite3_column_int64(st, 2);
    o->status = sqlite3_column_int(st, 3);
    o->create_time = col_time(st, 4);
}

static int sq_order_get(store_t *s, int64_t id, store_order_t *out)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    return one_row(q, stmt_prepare(q, &q->st_order_get, order_get_sql), "order get", order_row,
                   out, ARGS(A_INT(id)));
}

static int sq_orders_of_user(store_t *s, int64_t user_id, size_t max, store_order_t **out,
                             size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    void *a;
    size_t len;
    if (all_rows(q, stmt(q, ST_ORDERS_OF_USER), "orders of user", order_row, sizeof **out, 8, &a,
                 &len,
                 ARGS(A_INT(user_id),
                      A_INT(max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max))) != STORE_OK) {
        free(a);
        return STORE_ERR;
    }
    *out = a;
    *n = len;
    return STORE_OK;
}

static int sq_voucher_buckets(store_t *s, int64_t voucher_id, int *buckets)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    int64_t k = 0;
    int rc = one_row(q, stmt(q, ST_BUCKETS_GET), "stock buckets", read_ints, &k,
                     ARGS(A_INT(voucher_id)));
    if (rc == STORE_ERR)
        return STORE_ERR;
    if (rc == STORE_OK)
        *buckets = k > 1 && k <= 1024 ? (int)k : 1;
    return STORE_OK;
}

static int sq_voucher_room(store_t *s, int64_t voucher_id, store_room_t *room)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    int64_t v[3] = {0, 0, 0};
    int rc = one_row(q, stmt(q, ST_ROOM_GET), "waiting room", read_ints, v,
                     ARGS(A_INT(voucher_id)));
    if (rc == STORE_ERR)
        return STORE_ERR;
    if (rc == STORE_OK && v[0] > 0) {
        room->admit_per_s = v[0];
        room->pass_ttl_s = (int)v[1];
        room->bot_gate = v[2] != 0;
    }
    return STORE_OK;
}

static int sq_voucher_counts(store_t *s, int64_t voucher_id, int64_t *orders, int64_t *stock)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    *orders = 0;
    *stock = 0;
    /* One read transaction, so the count and the stock are from the same moment. */
    if (exec_stmt(q, ST_BEGIN, "counts: BEGIN") != STORE_OK)
        return STORE_ERR;
    int ret = one_row(q, stmt(q, ST_COUNT_ORDERS), "count orders", read_ints, orders,
                      ARGS(A_INT(voucher_id)));
    if (ret == STORE_NOTFOUND)
        ret = sq_fail(q, "count orders");
    /* Without a stock row, STORE_NOTFOUND: not a flash-sale voucher; *orders is still valid. */
    if (ret == STORE_OK)
        ret = one_row(q, stmt(q, ST_STOCK_GET), "stock get", read_ints, stock,
                      ARGS(A_INT(voucher_id)));
    if (ret == STORE_ERR) {
        rollback(q);
        return STORE_ERR;
    }
    if (exec_stmt(q, ST_COMMIT, "counts: COMMIT") != STORE_OK) {
        rollback(q);
        return STORE_ERR;
    }
    return ret;
}

/* ---------------------------------------------------------------- sync order mode */

/* The course's DB-only order, in one IMMEDIATE transaction (the write lock is taken up
 * front, so the checks and the writes see one state). Statements are prepared once per
 * connection like the others, kept apart so the main table stays the writer's. */
enum { SY_VOUCHER, SY_HAS_ORDER, SY_TAKE, SY_INSERT, SY__COUNT };
static const char *const sync_sql[SY__COUNT] = {
    [SY_VOUCHER] = "SELECT stock, begin_time, end_time FROM tb_seckill_voucher "
                   "WHERE voucher_id = ?1",
    [SY_HAS_ORDER] = "SELECT count(*) FROM tb_voucher_order WHERE user_id = ?1 AND voucher_id = ?2",
    [SY_TAKE] = "UPDATE tb_seckill_voucher SET stock = stock - 1, update_time = ?2 "
                "WHERE voucher_id = ?1 AND stock > 0",
    [SY_INSERT] = "INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time, "
                  "update_time) VALUES (?1, ?2, ?3, ?4, ?4)",
};

/* SY_VOUCHER's row: stock, begin, end (epoch seconds). */
static void window_row(sqlite3_stmt *st, void *out)
{
    int64_t *v = out;
    v[0] = sqlite3_column_int64(st, 0);
    v[1] = col_time(st, 1);
    v[2] = col_time(st, 2);
}

static int sq_order_sync(store_t *s, const store_order_t *o, int *result)
{
    sq_t *q = (sq_t *)s;
    int rc;
    call_begin(q);
    if (exec_stmt(q, ST_BEGIN_IMMEDIATE, "sync order: BEGIN IMMEDIATE") != STORE_OK)
        return STORE_ERR;
    for (int i = 0; i < SY__COUNT; i++)
        if (!stmt_prepare(q, &q->st_sync[i], sync_sql[i]))
            goto fail;

    int64_t win[3] = {0, 0, 0};   /* stock, begin, end */
    rc = one_row(q, q->st_sync[SY_VOUCHER], "sync order: voucher", window_row, win,
                 ARGS(A_INT(o->voucher_id)));
    if (rc == STORE_ERR)
        goto fail;
    if (rc == STORE_NOTFOUND) {
        *result = STORE_SYNC_NO_VOUCHER;
        goto done;
    }
    if (o->create_time < win[1]) {
        *result = STORE_SYNC_NOT_STARTED;
        goto done;
    }
    if (o->create_time >= win[2]) {
        *result = STORE_SYNC_ENDED;
        goto done;
    }
    if (win[0] < 1) {
        *result = STORE_SYNC_SOLD_OUT;
        goto done;
    }

    int64_t has = 0;
    rc = one_row(q, q->st_sync[SY_HAS_ORDER], "sync order: count", read_ints, &has,
                 ARGS(A_INT(o->user_id), A_INT(o->voucher_id)));
    if (rc == STORE_NOTFOUND)
        sq_fail(q, "sync order: count");
    if (rc != STORE_OK)
        goto fail;
    if (has > 0) {
        *result = STORE_SYNC_DUPLICATE;
        goto done;
    }

    char now[32];
    snprintf(now, sizeof now, "%s", time_text(q, o->create_time));
    if (run(q, q->st_sync[SY_TAKE], "sync order: take stock",
            ARGS(A_INT(o->voucher_id), A_COPY(now))) != STORE_OK)
        goto fail;
    if (sqlite3_changes(q->db) == 0) {   /* the guard: nobody can take the last one twice */
        *result = STORE_SYNC_SOLD_OUT;
        goto done;
    }

    if (run(q, q->st_sync[SY_INSERT], "sync order: insert",
            ARGS(A_INT(o->id), A_INT(o->user_id), A_INT(o->voucher_id), A_COPY(now))) !=
        STORE_OK) {
        if (sqlite3_extended_errcode(q->db) == SQLITE_CONSTRAINT) {
            /* UNIQUE(user_id, voucher_id): a concurrent order of this user won. Undo. */
            rollback(q);
            *result = STORE_SYNC_DUPLICATE;
            return STORE_OK;
        }
        goto fail;
    }
    *result = STORE_SYNC_OK;
done:
    if (exec_stmt(q, ST_COMMIT, "sync order: COMMIT") != STORE_OK)
        goto fail;
    return STORE_OK;
fail:
    rollback(q);
    return STORE_ERR;
}

/* ---------------------------------------------------------------- the order lifecycle */

/* One statement of the lifecycle run by one_row with args: kept prepared in q->life by
 * its text (a wave of timeouts runs two an order), or -- every slot taken -- prepared for
 * this call and finalized. */
static int once_row(sq_t *q, const char *sql, const char *what, row_reader_t *read, void *out,
                    const sq_arg_t *args, int nargs)
{
    size_t i = 0;
    while (i < LIFE_STMTS && q->life[i].sql && strcmp(q->life[i].sql, sql) != 0)
        i++;
    if (i < LIFE_STMTS && q->life[i].sql)
        return one_row(q, q->life[i].st, what, read, out, args, nargs);
    sqlite3_stmt *st = NULL;
    int keep = i < LIFE_STMTS;
    if (sqlite3_prepare_v3(q->db, sql, -1, keep ? SQLITE_PREPARE_PERSISTENT : 0, &st, NULL) !=
        SQLITE_OK)
        return sq_fail(q, what);
    if (keep) {
        q->life[i].sql = xstrdup(sql);
        q->life[i].st = st;
        return one_row(q, st, what, read, out, args, nargs);
    }
    int rc = one_row(q, st, what, read, out, args, nargs);
    sqlite3_finalize(st);
    return rc;
}

static void payment_row(sqlite3_stmt *st, void *out)
{
    store_payment_t *p = out;
    p->order_id = sqlite3_column_int64(st, 0);
    p->amount = sqlite3_column_int64(st, 1);
    p->status = sqlite3_column_int(st, 2);
    p->create_time = col_time(st, 3);
    p->refund_time = col_time(st, 4);
}

static void int_row(sqlite3_stmt *st, void *out)
{
    *(int *)out = sqlite3_column_int(st, 0);
}

static int sq_payment_get(store_t *s, const char *payment_id, store_payment_t *out)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    return once_row(q, STORE_PAY_GET_SQL, "payment", payment_row, out, ARGS(A_TEXT(payment_id)));
}

static void refund_row(sqlite3_stmt *st, void *out)
{
    store_refund_t *r = out;
    col_copy(st, 0, r->payment_id, sizeof r->payment_id);
    r->order_id = sqlite3_column_int64(st, 1);
    r->amount = sqlite3_column_int64(st, 2);
    r->status = sqlite3_column_int(st, 3);
    r->tries = sqlite3_column_int(st, 4);
}

/* Every row of sql (prepared for this call) as a payment (store_refund_t). */
static int refunds_once(sq_t *q, const char *sql, const char *what, store_refund_t **out,
                        size_t *n, const sq_arg_t *args, int nargs)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK)
        return sq_fail(q, what);
    void *a = NULL;
    int rc = all_rows(q, st, what, refund_row, sizeof **out, 16, &a, n, args, nargs);
    sqlite3_finalize(st);
    if (rc != STORE_OK) {
        free(a);
        a = NULL;
        *n = 0;
    }
    *out = a;
    return rc;
}

static int64_t limit_of(size_t max)
{
    return max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max;
}

static int sq_refunds_due(store_t *s, int64_t now, size_t max, store_refund_t **out, size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    return refunds_once(q, STORE_REFUNDS_DUE_SQL, "refunds due", out, n,
                        ARGS(A_INT(now), A_INT(limit_of(max))));
}

static int sq_voucher_payments(store_t *s, int64_t voucher_id, int64_t after_order,
                               const char *after_payment, size_t max, store_refund_t **out,
                               size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    return refunds_once(q, STORE_VOUCHER_PAYMENTS_SQL, "voucher payments", out, n,
                        ARGS(A_INT(voucher_id), A_INT(voucher_id), A_INT(after_order),
                             A_INT(after_order), A_TEXT(after_payment), A_INT(limit_of(max))));
}

static int sq_refund_lease(store_t *s, const char *payment_id, int tries, int64_t now,
                           int64_t until, int claim)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    int rc;
    if (!claim)
        rc = once_row(q, STORE_LEASE_AGAIN_SQL, "refund lease", NULL, NULL,
                      ARGS(A_INT(until), A_TEXT(payment_id), A_INT(tries)));
    else if (tries == 0)
        rc = once_row(q, STORE_LEASE_FIRST_SQL("OR IGNORE"), "refund lease", NULL, NULL,
                      ARGS(A_INT(until), A_TEXT(payment_id)));
    else
        rc = once_row(q, STORE_LEASE_NEXT_SQL, "refund lease", NULL, NULL,
                      ARGS(A_INT(until), A_TEXT(payment_id), A_INT(tries), A_INT(now),
                           A_TEXT(payment_id)));
    if (rc == STORE_ERR)
        return STORE_ERR;
    return sqlite3_changes(q->db) > 0 ? STORE_OK : STORE_NOTFOUND;
}

/* A 'f' move's row, cancelled (by this move, or by one that was not moved aside), goes
 * to tb_voucher_order_cancelled (OR REPLACE: a row put there again after a replay is the
 * same order) and leaves tb_voucher_order. */
static int move_aside(sq_t *q, int64_t order_id)
{
    static const char copy_sql[] =
        "INSERT OR REPLACE INTO tb_voucher_order_cancelled (id, user_id, voucher_id, pay_type, "
        "status, create_time, pay_time, use_time, refund_time, update_time) SELECT id, "
        "user_id, voucher_id, pay_type, status, create_time, pay_time, use_time, refund_time, "
        "update_time FROM tb_voucher_order WHERE id = ?1 AND status IN (4, 5, 6)";
    static const char del_sql[] = "DELETE FROM tb_voucher_order WHERE id = ?1";
    if (once_row(q, copy_sql, "order status: move aside", NULL, NULL, ARGS(A_INT(order_id))) ==
        STORE_ERR)
        return STORE_ERR;
    if (sqlite3_changes(q->db) > 0 &&
        once_row(q, del_sql, "order status: move aside", NULL, NULL, ARGS(A_INT(order_id))) ==
            STORE_ERR)
        return STORE_ERR;
    return STORE_OK;
}

/* A move's CAS of spec sp, with give_unit the voucher's unit back and with frees the row
 * moved aside: 1 changed, 0 not, or STORE_ERR. A CAS from 4 that finds nothing in
 * tb_voucher_order runs in tb_voucher_order_cancelled (the refund of an order cancelled
 * under --cancel-frees-buyer). */
static int sq_cas(sq_t *q, const store_move_t *m, const store_move_spec_t *sp)
{
    static const char give_sql[] =
        "UPDATE tb_seckill_voucher SET stock = stock + 1, update_time = ?2 WHERE voucher_id = "
        "(SELECT voucher_id FROM tb_voucher_order WHERE id = ?1)";
    static const char *const tables[2] = {"tb_voucher_order", "tb_voucher_order_cancelled"};
    char now[32];
    snprintf(now, sizeof now, "%s", time_text(q, m->now));
    int changed = 0;
    for (int t = 0; t < 2 && !changed && (t == 0 || sp->from == 4); t++) {
        char cas_sql[256];
        snprintf(cas_sql, sizeof cas_sql,
                 "UPDATE %s SET status = %d, %s = ?2, update_time = ?2 WHERE id = ?1 AND "
                 "status = %d", tables[t], sp->to, sp->col, sp->from);
        if (once_row(q, cas_sql, "order status", NULL, NULL,
                     ARGS(A_INT(m->order_id), A_TEXT(now))) == STORE_ERR)
            return STORE_ERR;
        changed = sqlite3_changes(q->db) > 0;
        if (changed && t == 0 && sp->give_unit &&
            once_row(q, give_sql, "order status: the unit", NULL, NULL,
                     ARGS(A_INT(m->order_id), A_TEXT(now))) == STORE_ERR)
            return STORE_ERR;
    }
    if (sp->frees && move_aside(q, m->order_id) != STORE_OK)
        return STORE_ERR;
    return changed;
}

/* The 's' move (store.h): the payment's row 5 -> 6 and its order 5 -> 6, in whichever
 * table holds it, once none of its payments is left to refund. */
static int sq_refund_sent(sq_t *q, store_move_t *m)
{
    store_payment_t p = {0};
    int rc = once_row(q, STORE_PAY_GET_SQL, "payment", payment_row, &p, ARGS(A_TEXT(m->payment_id)));
    if (rc != STORE_OK)
        return rc;
    m->pay_order = p.order_id;
    m->was = p.status;
    m->pay_status = p.status;
    if (p.status != 5)
        return STORE_OK;
    char now[32];
    snprintf(now, sizeof now, "%s", time_text(q, m->now));
    if (once_row(q, STORE_PAY_SENT_SQL, "refund sent", NULL, NULL,
                 ARGS(A_TEXT(now), A_TEXT(m->payment_id))) == STORE_ERR ||
        once_row(q, STORE_PAY_ORDER_SENT_SQL("tb_voucher_order"), "refund sent: the order", NULL,
                 NULL, ARGS(A_TEXT(now), A_TEXT(now), A_INT(p.order_id), A_INT(p.order_id))) ==
            STORE_ERR ||
        once_row(q, STORE_PAY_ORDER_SENT_SQL("tb_voucher_order_cancelled"),
                 "refund sent: the order", NULL, NULL,
                 ARGS(A_TEXT(now), A_TEXT(now), A_INT(p.order_id), A_INT(p.order_id))) ==
            STORE_ERR)
        return STORE_ERR;
    m->pay_status = 6;
    return STORE_OK;
}

/* One move (store.h store_move_t) inside the caller's transaction: STORE_OK or
 * STORE_NOTFOUND (m->was set), STORE_ERR. Its statements are kept prepared (once_row). */
static int sq_move_one(sq_t *q, store_move_t *m)
{
    static const char status_sql[] =
        "SELECT status FROM tb_voucher_order WHERE id = ?1 UNION ALL "
        "SELECT status FROM tb_voucher_order_cancelled WHERE id = ?1";
    store_move_spec_t sp, alt;
    if (store__move_spec(m->kind, &sp) != 0 || store__move_spec('r', &alt) != 0)
        return STORE_ERR;
    if (m->kind == 's')
        return sq_refund_sent(q, m);
    int changed = 0, rc;
    if (m->payment_id[0]) {
        store_payment_t p = {0};
        rc = once_row(q, STORE_PAY_GET_SQL, "payment", payment_row, &p,
                      ARGS(A_TEXT(m->payment_id)));
        if (rc == STORE_ERR)
            return STORE_ERR;
        if (rc == STORE_OK) {   /* answered before: nothing changes */
            m->pay_status = p.status;
            m->pay_order = p.order_id;
            rc = once_row(q, status_sql, "order status", int_row, &m->was,
                          ARGS(A_INT(m->order_id)));
            return rc;
        }
    }
    if ((changed = sq_cas(q, m, &sp)) == STORE_ERR)
        return STORE_ERR;
    if (changed) {
        m->was = sp.from;
    } else if (m->kind == 'y' && (changed = sq_cas(q, m, &alt)) != 0) {
        if (changed == STORE_ERR)
            return STORE_ERR;
        m->was = alt.from;
    } else {
        rc = once_row(q, status_sql, "order status", int_row, &m->was, ARGS(A_INT(m->order_id)));
        if (rc != STORE_OK)
            return rc;
    }
    int row = store__pay_row(m, changed, m->was);
    if (row) {
        char now[32];
        snprintf(now, sizeof now, "%s", time_text(q, m->now));
        if (once_row(q, STORE_PAY_INSERT_SQL, "payment row", NULL, NULL,
                     ARGS(A_TEXT(m->payment_id), A_INT(m->order_id), A_INT(m->amount),
                          A_INT(row), A_TEXT(now))) == STORE_ERR)
            return STORE_ERR;
        m->pay_status = row;
        m->pay_order = m->order_id;
        m->pay_new = 1;
    }
    return STORE_OK;
}

/* The lifecycle's status CAS of each move (store_int.h orders_move), in one IMMEDIATE
 * transaction: one commit for a writer's batch of events. */
static int sq_orders_move(store_t *s, store_move_t *moves, size_t n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    if (exec_stmt(q, ST_BEGIN_IMMEDIATE, "order status: BEGIN IMMEDIATE") != STORE_OK)
        return STORE_ERR;
    for (size_t i = 0; i < n; i++) {
        moves[i].rc = sq_move_one(q, &moves[i]);
        if (moves[i].rc == STORE_ERR)
            goto fail;
    }
    if (exec_stmt(q, ST_COMMIT, "order status: COMMIT") != STORE_OK)
        goto fail;
    return STORE_OK;
fail:
    rollback(q);
    return STORE_ERR;
}

/* ==== reads for `seckill audit` ====
 * Read-only; prepared per call (the audit pages through a voucher a few times, it is not
 * a hot path), so the connection struct needs no new statement slot. */

/* Every row of st, a statement prepared for this call, as an order (order_row); st is
 * finalized. */
static int orders_once(sq_t *q, sqlite3_stmt *st, const char *what, store_order_t **out,
                       size_t *n, const sq_arg_t *args, int nargs)
{
    void *a;
    size_t len;
    int rc = all_rows(q, st, what, order_row, sizeof **out, 256, &a, &len, args, nargs);
    sqlite3_finalize(st);
    if (rc != STORE_OK) {
        free(a);
        return STORE_ERR;
    }
    *out = a;
    *n = len;
    return STORE_OK;
}

static int sq_voucher_orders(store_t *s, int64_t voucher_id, int64_t after_id, size_t max,
                             store_order_t **out, size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(q->db,
                           "SELECT id, user_id, voucher_id, status, create_time "
                           "FROM tb_voucher_order WHERE voucher_id = ?1 AND id > ?2 "
                           "UNION ALL SELECT id, user_id, voucher_id, status, create_time "
                           "FROM tb_voucher_order_cancelled WHERE voucher_id = ?1 AND id > ?2 "
                           "ORDER BY id LIMIT ?3",
                           -1, &st, NULL) != SQLITE_OK)
        return sq_fail(q, "prepare voucher orders");
    return orders_once(q, st, "voucher orders", out, n,
                       ARGS(A_INT(voucher_id), A_INT(after_id),
                            A_INT(max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max)));
}

/* ==== store_exec, store_exec_orders: one statement of the caller's, autocommit
 * (store.h); prepared per call ==== */

/* The caller's statement, prepared, its arguments bound (a time as this backend writes
 * its own: time_text). NULL, the reason recorded, if it does not prepare. */
static sqlite3_stmt *exec_prepare(sq_t *q, const char *sql, const store_arg_t *args, int nargs,
                                  const char *what)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK) {
        sq_fail(q, what);
        return NULL;
    }
    for (int i = 0; i < nargs; i++) {
        if (args[i].is_time)
            sqlite3_bind_text(st, i + 1, time_text(q, args[i].v), -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_int64(st, i + 1, args[i].v);
    }
    return st;
}

static int sq_exec(store_t *s, const char *sql, const store_arg_t *args, int nargs, int retry,
                   int64_t *out)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    sqlite3_stmt *st = exec_prepare(q, sql, args, nargs, "exec: prepare");
    if (!st)
        return STORE_ERR;
    int rc = sqlite3_step(st);
    *out = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else if (rc == SQLITE_DONE && sqlite3_column_count(st) == 0)
        *out = sqlite3_changes(q->db);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        sq_fail(q, "exec");
        sqlite3_finalize(st);
        return STORE_ERR;
    }
    sqlite3_finalize(st);
    return STORE_OK;
}

static int sq_exec_orders(store_t *s, const char *sql, const store_arg_t *args, int nargs,
                          store_order_t **out, size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    sqlite3_stmt *st = exec_prepare(q, sql, args, nargs, "exec orders: prepare");
    if (!st)
        return STORE_ERR;
    int cols = sqlite3_column_count(st);
    if (cols != STORE_ORDER_COLS) {
        sqlite3_finalize(st);
        return store__fail(s, "sqlite: exec orders: %d columns, not an order's %d", cols,
                           STORE_ORDER_COLS);
    }
    return orders_once(q, st, "exec orders", out, n, NO_ARGS);
}

/* ---------------------------------------------------------------- shops */

static void shop_row(sqlite3_stmt *st, void *out)
{
    store_shop_t *p = out;
    memset(p, 0, sizeof *p);
    p->id = sqlite3_column_int64(st, 0);
    col_copy(st, 1, p->name, sizeof p->name);
    p->type_id = sqlite3_column_int64(st, 2);
    col_copy(st, 3, p->images, sizeof p->images);
    col_copy(st, 4, p->area, sizeof p->area);
    col_copy(st, 5, p->address, sizeof p->address);
    p->x = sqlite3_column_double(st, 6);
    p->y = sqlite3_column_double(st, 7);
    p->avg_price = sqlite3_column_type(st, 8) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 8);
    p->sold = sqlite3_column_int64(st, 9);
    p->comments = sqlite3_column_int64(st, 10);
    p->score = sqlite3_column_int64(st, 11);
    col_copy(st, 12, p->open_hours, sizeof p->open_hours);
    p->create_time = col_time(st, 13);
    p->update_time = col_time(st, 14);
}

static int sq_shop_get(store_t *s, int64_t id, store_shop_t *out)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    return one_row(q, stmt(q, ST_SHOP_GET), "shop get", shop_row, out, ARGS(A_INT(id)));
}

static int sq_shop_list(store_t *s, const store_shop_query_t *sq, store_shop_t **out, size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    char like[1100];              /* the caller's name is at most a shop name's length */
    int has_name = sq->name && sq->name[0];
    if (has_name)
        snprintf(like, sizeof like, "%%%s%%", sq->name);
    void *a;
    int rc = all_rows(q, stmt(q, ST_SHOP_LIST), "shop list", shop_row, sizeof **out, 4, &a, n,
                      ARGS(A_INT(sq->type_id), A_TEXT(has_name ? like : NULL), A_INT(sq->limit),
                           A_INT(sq->offset)));
    if (rc != STORE_OK) {
        free(a);
        *n = 0;
        return STORE_ERR;
    }
    *out = a;
    return STORE_OK;
}

/* Writes p's members with statement id (an INSERT, or an UPDATE of p->id's row). */
static int shop_write(sq_t *q, int id, const store_shop_t *p, const char *what)
{
    /* REAL and INTEGER columns take these texts as numbers (SQLite's type affinity). */
    char x[40], y[40], avg[24];
    snprintf(x, sizeof x, "%.9f", p->x);
    snprintf(y, sizeof y, "%.9f", p->y);
    snprintf(avg, sizeof avg, "%lld", (long long)p->avg_price);
    const sq_arg_t args[] = {
        A_TEXT(p->name), A_INT(p->type_id), A_TEXT(p->images),
        A_TEXT(p->area[0] ? p->area : NULL), A_TEXT(p->address), A_TEXT(x), A_TEXT(y),
        A_TEXT(p->avg_price < 0 ? NULL : avg), A_INT(p->sold), A_INT(p->comments),
        A_INT(p->score), A_TEXT(p->open_hours[0] ? p->open_hours : NULL),
        A_COPY(time_text(q, clock_wall_s())), A_INT(p->id),
    };
    sqlite3_stmt *st = stmt(q, id);
    /* ?14, the id, is the UPDATE's only: the INSERT binds the first 13 */
    int rc = run(q, st, what, args, id == ST_SHOP_UPDATE ? 14 : 13);
    if (st)
        sqlite3_clear_bindings(st);   /* the strings are the caller's, bound uncopied */
    return rc;
}

static int sq_shop_create(store_t *s, store_shop_t *p)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    if (shop_write(q, ST_SHOP_INSERT, p, "shop insert") != STORE_OK)
        return STORE_ERR;
    p->id = sqlite3_last_insert_rowid(q->db);
    return STORE_OK;
}

static int sq_shop_update(store_t *s, const store_shop_t *p)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    if (shop_write(q, ST_SHOP_UPDATE, p, "shop update") != STORE_OK)
        return STORE_ERR;
    return sqlite3_changes(q->db) > 0 ? STORE_OK : STORE_NOTFOUND;
}

static void shop_type_row(sqlite3_stmt *st, void *out)
{
    store_shop_type_t *t = out;
    memset(t, 0, sizeof *t);
    t->id = sqlite3_column_int64(st, 0);
    col_copy(st, 1, t->name, sizeof t->name);
    col_copy(st, 2, t->icon, sizeof t->icon);
    t->sort = sqlite3_column_int64(st, 3);
    t->create_time = col_time(st, 4);
    t->update_time = col_time(st, 5);
}

static int sq_shop_types(store_t *s, store_shop_type_t **out, size_t *n)
{
    sq_t *q = (sq_t *)s;
    call_begin(q);
    void *a;
    if (all_rows(q, stmt(q, ST_SHOP_TYPES), "shop types", shop_type_row, sizeof **out, 16, &a,
                 n, NO_ARGS) != STORE_OK) {
        free(a);
        *n = 0;
        return STORE_ERR;
    }
    *out = a;
    return STORE_OK;
}

const store_ops_t store_sqlite_ops = {
    .scheme = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .ping = sq_ping,
    .user_by_phone = sq_user_by_phone,
    .user_create = sq_user_create,
    .voucher_create = sq_voucher_create,
    .voucher_get = sq_voucher_get,
    .voucher_list = sq_voucher_list,
    .seckill_ids = sq_seckill_ids,
    .orders_write = sq_orders_write,
    .order_get = sq_order_get,
    .orders_of_user = sq_orders_of_user,
    .voucher_counts = sq_voucher_counts,
    .redis_epoch = sq_redis_epoch,
    .voucher_buckets = sq_voucher_buckets,
    .voucher_room = sq_voucher_room,
    .order_sync = sq_order_sync,
    .orders_move = sq_orders_move,
    .payment_get = sq_payment_get,
    .refunds_due = sq_refunds_due,
    .voucher_payments = sq_voucher_payments,
    .refund_lease = sq_refund_lease,
    .voucher_orders = sq_voucher_orders,
    .exec = sq_exec,
    .exec_orders = sq_exec_orders,
    .shop_get = sq_shop_get,
    .shop_list = sq_shop_list,
    .shop_create = sq_shop_create,
    .shop_update = sq_shop_update,
    .shop_types = sq_shop_types,
};
