/* store_mysql.c -- the MySQL/MariaDB backend of store.h (libmariadb, the MariaDB C client).
 *
 *   mysql://user:password@host:port/db[?socket=/path/to/mysqld.sock]   (also mariadb://)
 *
 * User and password may be percent-encoded (%40 for '@'). The port defaults to 3306; host
 * "localhost" means the default Unix socket (as in every MySQL client), ?socket= names one.
 * A database that does not exist yet is created (utf8mb4) if the user may; the schema
 * (sql/schema.mysql.sql, built in) is created and migrated by store_open.
 *
 * One MYSQL connection per store_t, used by one thread at a time (store.h). Every data
 * statement is a server-side prepared statement, prepared on first use and kept for the
 * life of the connection; a lost connection drops them all, and the next call reconnects
 * and prepares again.
 *
 * Deadlines. Each call sets deadline = now + timeout_ms and checks it before every round
 * trip. Underneath that:
 *   - the client's connect/read/write timeouts (MYSQL_OPT_*_TIMEOUT, whole seconds,
 *     rounded up) bound any one network wait -- a hung server cannot hold a thread;
 *   - on the server, max_statement_time (MariaDB; max_execution_time for SELECTs on MySQL),
 *     lock_wait_timeout (metadata locks, e.g. LOCK TABLES elsewhere) and
 *     innodb_lock_wait_timeout (row locks) make a statement that waits on someone else give
 *     up with an error while the connection stays usable.
 * So a call ends within about timeout_ms (at most one round trip later when the client
 * timeout's whole second is what fires), with STORE_ERR and "deadline of N ms passed".
 *
 * Reconnects. A connection error (CR_SERVER_GONE_ERROR, CR_SERVER_LOST, any other client
 * error, a killed connection, a server shutting down) closes the connection. Idempotent
 * calls (reads, ping, user create: lookup-then-insert) reconnect and retry once within the
 * same deadline; voucher create retries only when the connection was lost before its
 * COMMIT went out (the server has rolled it back); the order batch never retries here --
 * it returns STORE_ERR and the writer retries the whole transaction after its back-off.
 *
 * The order batch (store_orders_write) in one transaction:
 *   1. the orders, sorted by id (one lock order for every instance's writer), go out as
 *      multi-row INSERT IGNORE statements of 512, 256, ... 2, 1 rows (the binary
 *      decomposition of the batch size: at most 10 statements per batch, 10 prepared
 *      statements per connection). INSERT IGNORE skips a row whose id or (user, voucher)
 *      exists -- a replay;
 *   2. if any statement inserted fewer rows than it sent, the transaction is rolled back
 *      and the batch is written again one row at a time, classifying each skipped row as
 *      the SQLite backend does (same order = replay; the user already has another order
 *      of the voucher = replay, WARN; the id belongs to another user/voucher = collision,
 *      counted, ERROR). Replays only follow crashes, so the slow path is rare;
 *   3. per voucher (in id order), ONE guarded UPDATE ... SET stock = stock - n WHERE
 *      voucher_id = ? AND stock >= n. If it matches nothing, the row is missing or the
 *      stock is short: logged at ERROR and, for a short stock, taken anyway (the orders
 *      are real; the audit reports it) -- the same outcome as SQLite;
 *   4. COMMIT. Any error: ROLLBACK and STORE_ERR, all or nothing.
 * Before step 1, per voucher of the batch (in id order), SELECT ... FOR UPDATE of its
 * tb_seckill_voucher row reads its Redis generation (tb_seckill_epoch): orders admitted
 * under an older one are dropped from the batch (fenced, logged). A rebuild's bump takes
 * the same row lock, so a batch commits entirely before it or is checked after it.
 *
 * Sessions run READ COMMITTED (fewer gap locks between writers of several instances;
 * every read that needs one moment is a single statement) with a strict sql_mode.
 *
 * Times: DATETIME columns in the local time zone of the writer (sql/schema.mysql.sql),
 * bound as MYSQL_TIME in the binary protocol; epoch seconds in store.h. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include "core/xmem.h"
#include "core/clock.h"
#include "embedded.h"
#include "core/log.h"
#include "store/store_int.h"
#include "core/url.h"

/* Must equal the version the last statement of sql/schema.mysql.sql writes. */
#define MYSQL_SCHEMA_VERSION 9

/* Multi-row inserts: statements of 2^k rows, k = 0 .. INS_LEVELS-1. */
#define INS_LEVELS 10
#define INS_MAX_ROWS (1 << (INS_LEVELS - 1))
#define INS_COLS 5

/* Largest string column (rules VARCHAR(1024), utf8mb4) plus the NUL. */
#define STR_MAX 4100

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_USER_BY_PHONE,
    ST_USER_INSERT,
    ST_VOUCHER_INSERT,
    ST_SECKILL_INSERT,
    ST_VOUCHER_GET,
    ST_VOUCHER_LIST,
    ST_SECKILL_IDS,
    ST_ORDER_BY_ID,
    ST_ORDER_BY_USER_VOUCHER,
    ST_STOCK_DEC_GUARDED,
    ST_STOCK_DEC,
    ST_STOCK_GET,
    ST_ORDER_GET,
    ST_ORDERS_OF_USER,
    ST_COUNTS,
    ST_SYNC_VOUCHER,
    ST_SYNC_HAS_ORDER,
    ST_SYNC_INSERT,
    ST_SYNC_TAKE,
    ST_VOUCHER_ORDERS,
    ST_EPOCH_LOCK,
    ST_ASIDE_ANY,
    ST_EPOCH_BUMP,
    ST_BUCKETS_INSERT,
    ST_BUCKETS_GET,
    ST_ROOM_INSERT,
    ST_ROOM_GET,
    ST_SHOP_GET,
    ST_SHOP_LIST,
    ST_SHOP_INSERT,
    ST_SHOP_UPDATE,
    ST_SHOP_TYPES,
    ST__COUNT
};

#define VOUCHER_COLS                                                                    \
    "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value, " \
    "v.type, v.status, sv.voucher_id IS NOT NULL, sv.stock, sv.begin_time, sv.end_time "   \
    "FROM tb_voucher v LEFT JOIN tb_seckill_voucher sv ON sv.voucher_id = v.id "

#define SHOP_COLS                                                                       \
    "SELECT id, name, type_id, images, area, address, x, y, avg_price, sold, comments, "   \
    "score, open_hours, create_time, update_time FROM tb_shop "

#define ORDER_COLS "SELECT id, user_id, voucher_id, status, create_time FROM tb_voucher_order "
#define ASIDE_COLS                                                                      \
    "SELECT id, user_id, voucher_id, status, create_time FROM tb_voucher_order_cancelled "

static const char *const stmt_sql[ST__COUNT] = {
    [ST_BEGIN] = "START TRANSACTION",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_USER_BY_PHONE] = "SELECT id, phone, nick_name, icon FROM tb_user WHERE phone = ?",
    [ST_USER_INSERT] = "INSERT IGNORE INTO tb_user (phone, password, nick_name, icon, "
                       "create_time, update_time) VALUES (?, '', ?, '', ?, ?)",
    [ST_VOUCHER_INSERT] = "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, "
                          "actual_value, type, status, create_time, update_time) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_SECKILL_INSERT] = "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, "
                          "end_time, create_time, update_time) VALUES (?, ?, ?, ?, ?, ?)",
    [ST_VOUCHER_GET] = VOUCHER_COLS "WHERE v.id = ?",
    [ST_VOUCHER_LIST] = VOUCHER_COLS "WHERE v.shop_id = ? AND v.status = 1 ORDER BY v.id",
    [ST_SECKILL_IDS] = "SELECT voucher_id FROM tb_seckill_voucher ORDER BY voucher_id",
    [ST_ORDER_BY_ID] = "SELECT user_id, voucher_id FROM tb_voucher_order WHERE id = ?",
    [ST_ORDER_BY_USER_VOUCHER] = "SELECT id FROM tb_voucher_order "
                                 "WHERE user_id = ? AND voucher_id = ?",
    [ST_STOCK_DEC_GUARDED] = "UPDATE tb_seckill_voucher SET stock = stock - ?, update_time = ? "
                             "WHERE voucher_id = ? AND stock >= ?",
    [ST_STOCK_DEC] = "UPDATE tb_seckill_voucher SET stock = stock - ?, update_time = ? "
                     "WHERE voucher_id = ?",
    [ST_STOCK_GET] = "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?",
    /* an order is in one of the two tables (--cancel-frees-buyer moves a cancelled one) */
    [ST_ORDER_GET] = ORDER_COLS "WHERE id = ? UNION ALL " ASIDE_COLS "WHERE id = ?",
    [ST_ORDERS_OF_USER] = ORDER_COLS "WHERE user_id = ? UNION ALL " ASIDE_COLS
                                     "WHERE user_id = ? ORDER BY create_time DESC, id DESC "
                                     "LIMIT ?",
    /* one statement, so the count and the stock are from one moment (READ COMMITTED) */
    [ST_COUNTS] = "SELECT (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? "
                  "AND status IN (1, 2, 3)), "
                  "(SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?)",
    [ST_SYNC_VOUCHER] = "SELECT stock, begin_time, end_time FROM tb_seckill_voucher "
                        "WHERE voucher_id = ?",
    [ST_SYNC_HAS_ORDER] = "SELECT COUNT(*) FROM tb_voucher_order "
                          "WHERE user_id = ? AND voucher_id = ?",
    [ST_SYNC_INSERT] = "INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time, "
                       "update_time) VALUES (?, ?, ?, ?, ?)",
    [ST_SYNC_TAKE] = "UPDATE tb_seckill_voucher SET stock = stock - 1, update_time = ? "
                     "WHERE voucher_id = ? AND stock > 0",
    [ST_VOUCHER_ORDERS] = ORDER_COLS "WHERE voucher_id = ? AND id > ? UNION ALL " ASIDE_COLS
                                     "WHERE voucher_id = ? AND id > ? ORDER BY id LIMIT ?",
    /* the voucher row's lock orders a rebuild's bump and every order batch */
    /* orders moved aside by a cancel (--cancel-frees-buyer) among a batch's ids */
    [ST_ASIDE_ANY] = "SELECT 1 FROM tb_voucher_order_cancelled WHERE id BETWEEN ? AND ? LIMIT 1",
    [ST_EPOCH_LOCK] = "SELECT COALESCE(e.epoch, 0) FROM tb_seckill_voucher sv "
                      "LEFT JOIN tb_seckill_epoch e ON e.voucher_id = sv.voucher_id "
                      "WHERE sv.voucher_id = ? FOR UPDATE",
    [ST_BUCKETS_INSERT] = "INSERT INTO tb_seckill_buckets (voucher_id, buckets) VALUES (?, ?)",
    [ST_BUCKETS_GET] = "SELECT buckets FROM tb_seckill_buckets WHERE voucher_id = ?",
    [ST_ROOM_INSERT] = "INSERT INTO tb_seckill_room (voucher_id, admit_per_s, pass_ttl_s, "
                       "bot_gate) VALUES (?, ?, ?, ?)",
    [ST_ROOM_GET] = "SELECT admit_per_s, pass_ttl_s, bot_gate FROM tb_seckill_room "
                    "WHERE voucher_id = ?",
    [ST_EPOCH_BUMP] = "INSERT INTO tb_seckill_epoch (voucher_id, epoch) VALUES (?, 1) "
                      "ON DUPLICATE KEY UPDATE epoch = epoch + 1",
    [ST_SHOP_GET] = SHOP_COLS "WHERE id = ?",
    /* type_id twice, name twice: positional parameters */
    [ST_SHOP_LIST] = SHOP_COLS "WHERE (? = 0 OR type_id = ?) AND (? IS NULL OR name LIKE ?) "
                     "ORDER BY id LIMIT ? OFFSET ?",
    [ST_SHOP_INSERT] = "INSERT INTO tb_shop (name, type_id, images, area, address, x, y, "
                       "avg_price, sold, comments, score, open_hours, create_time, update_time) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_SHOP_UPDATE] = "UPDATE tb_shop SET name = ?, type_id = ?, images = ?, area = ?, "
                       "address = ?, x = ?, y = ?, avg_price = ?, sold = ?, comments = ?, "
                       "score = ?, open_hours = ?, update_time = ? WHERE id = ?",
    [ST_SHOP_TYPES] = "SELECT id, name, icon, sort, create_time, update_time FROM tb_shop_type "
                      "ORDER BY sort, id",
};

/* The lifecycle's distinct statements are a few dozen (each CAS's table, status and column
 * spelled out): kept prepared on the connection by their text, a timeout wave's thousands
 * of moves a second are not three round trips a statement (prepare, execute, close). One
 * past the slots is prepared for its call. */
#define LIFE_STMTS 48

typedef struct my {
    struct store base;               /* first: a store_t * is a my_t * */
    MYSQL *db;                       /* NULL while disconnected */
    url_mysql_t url;
    char where[1024];                /* user@host:port/db, for messages (no password) */
    int timeout_ms;
    int mariadb;                     /* server flavour, from the handshake */
    uint64_t deadline_ms;            /* of the call in progress (monotonic) */
    int broken;                      /* this call saw a connection error: drop at leave() */
    int was_lost;                    /* ... and dropped it */
    int commit_sent;                 /* this call sent COMMIT (a retry could repeat it) */
    MYSQL_STMT *st[ST__COUNT];
    MYSQL_STMT *ins[INS_LEVELS];     /* INSERT IGNORE of 2^k orders */
    struct {                         /* the lifecycle's statements (once), by their text */
        char *sql;
        MYSQL_STMT *st;
    } life[LIFE_STMTS];
    MYSQL_BIND *ibind;               /* INS_MAX_ROWS * INS_COLS, for the inserts */
    MYSQL_TIME *itime;               /* INS_MAX_ROWS */
    int64_t tcache_t;                /* last epoch -> MYSQL_TIME conversion */
    MYSQL_TIME tcache;
} my_t;

/* ---------------------------------------------------------------- small helpers */

/* Copies z into dst (cap bytes), cut short if it must be. */
static void copy_str(char *dst, size_t cap, const char *z)
{
    size_t n = strlen(z);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, z, n);
    dst[n] = '\0';
}

static unsigned secs_ceil(int64_t ms)
{
    if (ms < 1000)
        return 1;
    return (unsigned)((ms + 999) / 1000);
}

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_ok;

static void lib_init(void)
{
    /* Not thread-safe itself, so once per process before any mysql_init(). */
    lib_ok = mysql_library_init(0, NULL, NULL) == 0;
}

/* ---------------------------------------------------------------- errors */

/* Errors after which the connection cannot be trusted: drop it, reconnect next time. */
static int conn_fatal(unsigned e)
{
    if (e >= 2000 && e < 3000)       /* CR_*: client side -- gone, lost, out of sync, ... */
        return 1;
    switch (e) {
    case ER_CONNECTION_KILLED:       /* 1927 */
    case ER_SERVER_SHUTDOWN:         /* 1053 */
    case ER_NEW_ABORTING_CONNECTION: /* 1184 */
    case ER_ABORTING_CONNECTION:     /* 1152 */
    case ER_NET_PACKET_TOO_LARGE:
    case ER_NET_READ_ERROR_FROM_PIPE:
    case ER_NET_FCNTL_ERROR:
    case ER_NET_PACKETS_OUT_OF_ORDER:
    case ER_NET_UNCOMPRESS_ERROR:
    case ER_NET_READ_ERROR:
    case ER_NET_READ_INTERRUPTED:
    case ER_NET_ERROR_ON_WRITE:
    case ER_NET_WRITE_INTERRUPTED:
    case ER_UNKNOWN_STMT_HANDLER:    /* the server forgot our statements */
    case 4031:                       /* ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8) */
        return 1;
    default:
        return 0;
    }
}

/* Errors that mean "waited too long" (for the message). */
static int is_timeout(unsigned e)
{
    return e == ER_LOCK_WAIT_TIMEOUT || e == 1969 /* ER_STATEMENT_TIMEOUT (MariaDB) */ ||
           e == 3024 /* ER_QUERY_TIMEOUT (MySQL) */;
}

static int fail_code(my_t *m, const char *what, unsigned e, const char *msg)
{
    if (conn_fatal(e))
        m->broken = 1;
    int past = clock_mono_ms() >= m->deadline_ms;
    if (is_timeout(e) || (past && (e == CR_SERVER_LOST || e == CR_SERVER_GONE_ERROR)))
        return store__fail(&m->base, "mysql: %s: deadline of %d ms passed (%s, error %u)", what,
                           m->timeout_ms, msg, e);
    return store__fail(&m->base, "mysql: %s: %s (error %u)", what, msg, e);
}

static int stmt_fail(my_t *m, MYSQL_STMT *st, const char *what)
{
    return fail_code(m, what, mysql_stmt_errno(st), mysql_stmt_error(st));
}

static int conn_fail(my_t *m, const char *what)
{
    return fail_code(m, what, mysql_errno(m->db), mysql_error(m->db));
}

static int late(my_t *m, const char *what)
{
    if (clock_mono_ms() < m->deadline_ms)
        return 0;
    store__fail(&m->base, "mysql: %s: deadline of %d ms passed", what, m->timeout_ms);
    return 1;
}

/* ---------------------------------------------------------------- connection */

static void stmts_close(my_t *m)
{
    for (int i = 0; i < ST__COUNT; i++) {
        if (m->st[i])
            mysql_stmt_close(m->st[i]);
        m->st[i] = NULL;
    }
    for (int i = 0; i < INS_LEVELS; i++) {
        if (m->ins[i])
            mysql_stmt_close(m->ins[i]);
        m->ins[i] = NULL;
    }
    for (int i = 0; i < LIFE_STMTS && m->life[i].sql; i++) {
        mysql_stmt_close(m->life[i].st);
        free(m->life[i].sql);
        m->life[i].sql = NULL;
        m->life[i].st = NULL;
    }
}

static void drop(my_t *m)
{
    if (!m->db)
        return;
    stmts_close(m);
    mysql_close(m->db);
    m->db = NULL;
}

/* Prepares and runs one statement with no result rows, then closes it (set-up only). */
static int exec_once(my_t *m, const char *sql, MYSQL_BIND *par, const char *what)
{
    MYSQL_STMT *st = mysql_stmt_init(m->db);
    if (!st)
        return conn_fail(m, what);
    int rc = STORE_OK;
    if (mysql_stmt_prepare(st, sql, (unsigned long)strlen(sql)) != 0 ||
        (par && mysql_stmt_bind_param(st, par) != 0) || mysql_stmt_execute(st) != 0)
        rc = stmt_fail(m, st, what);
    mysql_stmt_close(st);
    return rc;
}

static MYSQL *raw_connect(my_t *m, const char *dbname, unsigned connect_s)
{
    MYSQL *db = mysql_init(NULL);
    if (!db) {
        log_error("mysql: mysql_init: out of memory");
        abort();
    }
    unsigned rw = secs_ceil(m->timeout_ms);
    my_bool off = 0;
    mysql_options(db, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    mysql_options(db, MYSQL_OPT_READ_TIMEOUT, &rw);
    mysql_options(db, MYSQL_OPT_WRITE_TIMEOUT, &rw);
    mysql_options(db, MYSQL_OPT_RECONNECT, &off);   /* ours: re-prepares */
    mysql_options(db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (m->url.socket[0]) {
        unsigned proto = MYSQL_PROTOCOL_SOCKET;
        mysql_options(db, MYSQL_OPT_PROTOCOL, &proto);
    }
    if (!mysql_real_connect(db, m->url.host, m->url.user[0] ? m->url.user : NULL,
                            m->url.pass, dbname, m->url.port,
                            m->url.socket[0] ? m->url.socket : NULL, 0)) {
        m->db = db;       /* for the message; closed by the caller */
        return NULL;
    }
    return db;
}

/* Connects within what is left of the call's deadline and sets the session up. */
static int my_connect(my_t *m)
{
    uint64_t now = clock_mono_ms();
    int64_t left = m->deadline_ms > now ? (int64_t)(m->deadline_ms - now) : 0;
    unsigned connect_s = secs_ceil(left < m->timeout_ms ? left : m->timeout_ms);
    MYSQL *db = raw_connect(m, m->url.dbname, connect_s);
    if (!db && mysql_errno(m->db) == ER_BAD_DB_ERROR) {
        /* The database does not exist yet: create it (if this user may), then use it. */
        mysql_close(m->db);
        m->db = NULL;
        db = raw_connect(m, NULL, connect_s);
        if (db) {
            char sql[160];
            snprintf(sql, sizeof sql,
                     "CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4 "
                     "COLLATE utf8mb4_general_ci",
                     m->url.dbname);   /* dbname is [A-Za-z0-9_$]+ (url_parse) */
            m->db = db;
            if (exec_once(m, sql, NULL, "create database") != STORE_OK) {
                drop(m);
                return STORE_ERR;
            }
            if (mysql_select_db(db, m->url.dbname) != 0) {
                conn_fail(m, "select database");
                drop(m);
                return STORE_ERR;
            }
            log_info("mysql: created database %s", m->url.dbname);
        }
    }
    if (!db) {
        store__fail(&m->base, "mysql: cannot connect to %s: %s (error %u)", m->where,
                    mysql_error(m->db), mysql_errno(m->db));
        mysql_close(m->db);
        m->db = NULL;
        return STORE_ERR;
    }
    m->db = db;
    m->mariadb = strstr(mysql_get_server_info(db), "MariaDB") != NULL;

    /* Session: server-side deadlines, isolation, strict mode. */
    int64_t lock_s = secs_ceil(m->timeout_ms);
    double stmt_s = m->timeout_ms / 1000.0;
    int64_t stmt_ms = m->timeout_ms;
    MYSQL_BIND b[3];
    memset(b, 0, sizeof b);
    b[0].buffer_type = MYSQL_TYPE_LONGLONG;
    b[0].buffer = &lock_s;
    b[1].buffer_type = MYSQL_TYPE_LONGLONG;
    b[1].buffer = &lock_s;
    if (m->mariadb) {
        b[2].buffer_type = MYSQL_TYPE_DOUBLE;
        b[2].buffer = &stmt_s;
    } else {
        b[2].buffer_type = MYSQL_TYPE_LONGLONG;
        b[2].buffer = &stmt_ms;
    }
    const char *set = m->mariadb
        ? "SET SESSION lock_wait_timeout = ?, innodb_lock_wait_timeout = ?, "
          "max_statement_time = ?, sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,"
          "NO_ENGINE_SUBSTITUTION', time_zone = 'SYSTEM'"
        : "SET SESSION lock_wait_timeout = ?, innodb_lock_wait_timeout = ?, "
          "max_execution_time = ?, sql_mode = 'STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,"
          "NO_ENGINE_SUBSTITUTION', time_zone = 'SYSTEM'";
    if (exec_once(m, set, b, "session settings") != STORE_OK ||
        exec_once(m, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", NULL,
                  "session isolation") != STORE_OK) {
        drop(m);
        return STORE_ERR;
    }
    return STORE_OK;
}

/* Start of every call (attempt 0) and of its one retry. */
static int enter(my_t *m, int attempt)
{
    if (attempt == 0)
        m->deadline_ms = clock_mono_ms() + (uint64_t)m->timeout_ms;
    else
        m->base.err[0] = '\0';
    m->broken = 0;
    m->was_lost = 0;
    m->commit_sent = 0;
    if (!m->db)
        return my_connect(m);
    return STORE_OK;
}

/* End of every call: a broken connection is closed here, once nothing refers to its
 * statements any more. */
static int leave(my_t *m, int rc)
{
    if (m->broken) {
        drop(m);
        m->broken = 0;
        m->was_lost = 1;
    }
    return rc;
}

/* Runs expr (a do_* call) once, and once more on a new connection if the first lost its
 * connection, the call is retryable (retry: 0 never, 1 idempotent, 2 only if no COMMIT
 * went out) and the deadline has time left. */
#define RETRYING(m, retry, expr)                                                        \
    do {                                                                                \
        for (int at_ = 0;; at_++) {                                                     \
            if (enter((m), at_) != STORE_OK)                                            \
                return STORE_ERR;                                                       \
            int rc_ = leave((m), (expr));                                               \
            if (rc_ != STORE_ERR || at_ > 0 || !(m)->was_lost || (retry) == 0 ||        \
                ((retry) == 2 && (m)->commit_sent) ||                                   \
                clock_mono_ms() >= (m)->deadline_ms)                                    \
                return rc_;                                                             \
            log_warn("%s; reconnecting to retry", (m)->base.err);                       \
        }                                                                               \
    } while (0)

/* ---------------------------------------------------------------- statements */

static MYSQL_STMT *prepare(my_t *m, MYSQL_STMT **slot, const char *sql)
{
    if (*slot)
        return *slot;
    if (late(m, "prepare"))
        return NULL;
    MYSQL_STMT *st = mysql_stmt_init(m->db);
    if (!st) {
        conn_fail(m, "prepare");
        return NULL;
    }
    if (mysql_stmt_prepare(st, sql, (unsigned long)strlen(sql)) != 0) {
        stmt_fail(m, st, "prepare");
        mysql_stmt_close(st);
        return NULL;
    }
    *slot = st;
    return st;
}

static MYSQL_STMT *stmt(my_t *m, int id)
{
    return prepare(m, &m->st[id], stmt_sql[id]);
}

/* INSERT IGNORE of 2^level orders. */
static MYSQL_STMT *ins_stmt(my_t *m, int level)
{
    if (m->ins[level])
        return m->ins[level];
    static const char head[] = "INSERT IGNORE INTO tb_voucher_order (id, user_id, voucher_id, "
                               "create_time, update_time) VALUES ";
    static const char row[] = "(?,?,?,?,?),";
    size_t rows = (size_t)1 << level;
    size_t len = sizeof head - 1 + rows * (sizeof row - 1);
    char *sql = xrealloc(NULL, len + 1);
    memcpy(sql, head, sizeof head - 1);
    char *p = sql + sizeof head - 1;
    for (size_t i = 0; i < rows; i++, p += sizeof row - 1)
        memcpy(p, row, sizeof row - 1);
    p[-1] = '\0';   /* the last comma */
    MYSQL_STMT *st = prepare(m, &m->ins[level], sql);
    free(sql);
    return st;
}

/* Binds params (may be NULL) and executes. */
static int run(my_t *m, MYSQL_STMT *st, MYSQL_BIND *par, const char *what)
{
    if (late(m, what))
        return STORE_ERR;
    if (par && mysql_stmt_bind_param(st, par) != 0)
        return stmt_fail(m, st, what);
    if (mysql_stmt_execute(st) != 0)
        return stmt_fail(m, st, what);
    return STORE_OK;
}

/* One row into the bound result buffers: 1 row, 0 no more rows, STORE_ERR. */
static int fetch(my_t *m, MYSQL_STMT *st, const char *what)
{
    int rc = mysql_stmt_fetch(st);
    if (rc == 0)
        return 1;
    if (rc == MYSQL_NO_DATA)
        return 0;
    if (rc == MYSQL_DATA_TRUNCATED)
        return store__fail(&m->base, "mysql: %s: a value did not fit its buffer", what);
    return stmt_fail(m, st, what);
}

/* Leaves no result rows pending on the statement (after an early stop or an error). */
static void finish(my_t *m, MYSQL_STMT *st)
{
    if (!m->broken)
        mysql_stmt_free_result(st);
}

static int bind_result(my_t *m, MYSQL_STMT *st, MYSQL_BIND *res, const char *what)
{
    if (mysql_stmt_bind_result(st, res) != 0)
        return stmt_fail(m, st, what);
    return STORE_OK;
}

/* The one-row query: runs st (from stmt(); NULL if preparing it failed, which said why)
 * with params par (may be NULL), fetches its first row into the result buffers res and
 * leaves no rows pending. STORE_OK with a row, STORE_NOTFOUND without one, STORE_ERR. */
static int one_row(my_t *m, MYSQL_STMT *st, MYSQL_BIND *par, MYSQL_BIND *res, const char *what)
{
    if (!st)
        return STORE_ERR;
    int ret = run(m, st, par, what);
    if (ret == STORE_OK)
        ret = bind_result(m, st, res, what);
    if (ret == STORE_OK) {
        int f = fetch(m, st, what);
        ret = f == 1 ? STORE_OK : f == 0 ? STORE_NOTFOUND : STORE_ERR;
    }
    finish(m, st);
    return ret;
}

/* Copies the row fetched into the result buffers (bufs) into an array element. */
typedef void row_get_t(void *bufs, void *elem);

/* The many-row query: as one_row, but up to max rows, each copied by get into the next
 * element (`size` bytes) of an array grown from first_cap elements. STORE_OK or
 * STORE_ERR; either way *out (NULL without rows) and *n are what was read, for the
 * caller to keep or free. */
static int all_rows(my_t *m, MYSQL_STMT *st, MYSQL_BIND *par, MYSQL_BIND *res, const char *what,
                    size_t max, row_get_t *get, void *bufs, size_t size, size_t first_cap,
                    void **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!st)
        return STORE_ERR;
    char *a = NULL;
    size_t len = 0, cap = 0;
    int ret = run(m, st, par, what);
    if (ret == STORE_OK)
        ret = bind_result(m, st, res, what);
    while (ret == STORE_OK && len < max) {
        int f = fetch(m, st, what);
        if (f != 1) {
            ret = f == 0 ? STORE_OK : STORE_ERR;
            break;
        }
        if (len == cap) {
            cap = cap ? cap * 2 : first_cap;
            a = xrealloc(a, cap * size);
        }
        get(bufs, a + len++ * size);
    }
    finish(m, st);
    *out = a;
    *n = len;
    return ret;
}

static int exec_simple(my_t *m, int id, const char *what)
{
    MYSQL_STMT *st = stmt(m, id);
    if (!st)
        return STORE_ERR;
    return run(m, st, NULL, what);
}

static int tx_begin(my_t *m, const char *what)
{
    return exec_simple(m, ST_BEGIN, what);
}

static int tx_commit(my_t *m, const char *what)
{
    MYSQL_STMT *st = stmt(m, ST_COMMIT);
    if (!st)
        return STORE_ERR;
    if (late(m, what))
        return STORE_ERR;
    m->commit_sent = 1;
    if (mysql_stmt_execute(st) != 0)
        return stmt_fail(m, st, what);
    return STORE_OK;
}

/* Rolls back whatever is open; keeps the current error message. On a broken connection
 * there is nothing to do: the server rolls back when it sees the connection go. */
static void tx_rollback(my_t *m)
{
    if (m->broken || !m->db)
        return;
    char keep[STORE_ERRLEN];
    snprintf(keep, sizeof keep, "%s", m->base.err);
    /* The deadline may be what failed: the rollback gets its own. */
    uint64_t saved = m->deadline_ms;
    m->deadline_ms = clock_mono_ms() + (uint64_t)m->timeout_ms;
    if (exec_simple(m, ST_ROLLBACK, "ROLLBACK") != STORE_OK) {
        log_error("%s", m->base.err);
        m->broken = 1;   /* a connection that cannot roll back is not reused */
    }
    m->deadline_ms = saved;
    snprintf(m->base.err, sizeof m->base.err, "%s", keep);
}

/* ---------------------------------------------------------------- binds and time */

static void b_i64(MYSQL_BIND *b, const int64_t *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = (void *)v;
}

static void b_str(MYSQL_BIND *b, const char *z, unsigned long *len)
{
    memset(b, 0, sizeof *b);
    if (!z) {
        b->buffer_type = MYSQL_TYPE_NULL;
        return;
    }
    *len = (unsigned long)strlen(z);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)z;
    b->buffer_length = *len;
    b->length = len;
}

static void b_time(MYSQL_BIND *b, const MYSQL_TIME *t)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = (void *)t;
}

typedef struct rstr {
    char s[STR_MAX];
    unsigned long len;
    my_bool null;
} rstr_t;

typedef struct ri64 {
    int64_t v;
    my_bool null;
} ri64_t;

typedef struct rtime {
    MYSQL_TIME t;
    my_bool null;
} rtime_t;

static void r_i64(MYSQL_BIND *b, ri64_t *v)
{
    memset(b, 0, sizeof *b);
    v->v = 0;
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = &v->v;
    b->is_null = &v->null;
}

static void r_str(MYSQL_BIND *b, rstr_t *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = v->s;
    b->buffer_length = sizeof v->s - 1;
    b->length = &v->len;
    b->is_null = &v->null;
}

static void r_time(MYSQL_BIND *b, rtime_t *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = &v->t;
    b->is_null = &v->null;
}

/* The fetched string, NUL-terminated in place ("" when NULL). */
static const char *rs(rstr_t *v)
{
    if (v->null)
        v->len = 0;
    if (v->len >= sizeof v->s)
        v->len = sizeof v->s - 1;
    v->s[v->len] = '\0';
    return v->s;
}

static void mtime_of(my_t *m, int64_t t, MYSQL_TIME *out)
{
    if (t != m->tcache_t) {
        time_t tt = (time_t)t;
        struct tm tm;
        memset(&m->tcache, 0, sizeof m->tcache);
        if (localtime_r(&tt, &tm)) {
            m->tcache.year = (unsigned)(tm.tm_year + 1900);
            m->tcache.month = (unsigned)(tm.tm_mon + 1);
            m->tcache.day = (unsigned)tm.tm_mday;
            m->tcache.hour = (unsigned)tm.tm_hour;
            m->tcache.minute = (unsigned)tm.tm_min;
            m->tcache.second = (unsigned)tm.tm_sec;
        } else {
            m->tcache.year = 1970;
            m->tcache.month = 1;
            m->tcache.day = 1;
        }
        m->tcache.time_type = MYSQL_TIMESTAMP_DATETIME;
        m->tcache_t = t;
    }
    *out = m->tcache;
}

/* Local DATETIME -> epoch seconds; NULL or a zero date -> 0. */
static int64_t epoch_of(const rtime_t *v)
{
    if (v->null || v->t.year == 0)
        return 0;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = (int)v->t.year - 1900;
    tm.tm_mon = (int)v->t.month - 1;
    tm.tm_mday = (int)v->t.day;
    tm.tm_hour = (int)v->t.hour;
    tm.tm_min = (int)v->t.minute;
    tm.tm_sec = (int)v->t.second;
    tm.tm_isdst = -1;
    time_t t = mktime(&tm);
    return t == (time_t)-1 ? 0 : (int64_t)t;
}

/* ---------------------------------------------------------------- schema */

/* Runs the built-in schema file statement by statement (see its header for the rules). */
static int run_schema_file(my_t *m)
{
    const char *p = schema_mysql_sql;
    char *buf = xrealloc(NULL, strlen(p) + 1);
    size_t n = 0;
    int rc = STORE_OK, count = 0;
    while (*p && rc == STORE_OK) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *dash = NULL;
        for (size_t i = 0; i + 1 < len; i++)
            if (p[i] == '-' && p[i + 1] == '-') {
                dash = p + i;
                break;
            }
        size_t keep = dash ? (size_t)(dash - p) : len;
        memcpy(buf + n, p, keep);
        n += keep;
        buf[n++] = '\n';
        /* a statement ends with ';' at the end of a line (comments and blanks aside) */
        size_t e = n;
        while (e > 0 && isspace((unsigned char)buf[e - 1]))
            e--;
        if (e > 0 && buf[e - 1] == ';') {
            buf[e - 1] = '\0';
            const char *s = buf;
            while (isspace((unsigned char)*s))
                s++;
            if (*s) {
                char what[64];
                snprintf(what, sizeof what, "schema statement %d", ++count);
                rc = exec_once(m, s, NULL, what);
            }
            n = 0;
        }
        p = eol ? eol + 1 : p + len;
    }
    free(buf);
    return rc;
}

/* The version the database is at: 0 when schema_version does not exist. */
static int schema_read(my_t *m, int64_t *v)
{
    *v = 0;
    MYSQL_STMT *st = mysql_stmt_init(m->db);
    if (!st)
        return conn_fail(m, "schema version");
    static const char sql[] = "SELECT version FROM schema_version WHERE id = 1";
    int rc = STORE_OK;
    if (mysql_stmt_prepare(st, sql, sizeof sql - 1) != 0) {
        if (mysql_stmt_errno(st) != ER_NO_SUCH_TABLE)
            rc = stmt_fail(m, st, "schema version");
        mysql_stmt_close(st);
        return rc;
    }
    MYSQL_BIND res[1];
    ri64_t ver;
    r_i64(&res[0], &ver);
    if (mysql_stmt_execute(st) != 0 || mysql_stmt_bind_result(st, res) != 0) {
        rc = stmt_fail(m, st, "schema version");
    } else {
        int f = fetch(m, st, "schema version");
        if (f == 1 && !ver.null)
            *v = ver.v;
        else if (f == STORE_ERR)
            rc = STORE_ERR;
        if (!m->broken)
            mysql_stmt_free_result(st);
    }
    mysql_stmt_close(st);
    return rc;
}

/* One GET_LOCK (no wait: the caller polls, so no server-side wait can outlast the client's
 * read timeout) or RELEASE_LOCK. take = 1 to take, 0 to release. *got = the result. */
static int schema_lock_once(my_t *m, int take, int *got_it)
{
    static const char lock_name[] = "seckill.schema";
    int64_t wait_s = 0;
    unsigned long nlen;
    MYSQL_BIND par[2];
    b_str(&par[0], lock_name, &nlen);
    b_i64(&par[1], &wait_s);
    const char *sql = take ? "SELECT GET_LOCK(?, ?)" : "SELECT RELEASE_LOCK(?)";
    *got_it = 0;
    MYSQL_STMT *st = mysql_stmt_init(m->db);
    if (!st)
        return conn_fail(m, "schema lock");
    MYSQL_BIND res[1];
    ri64_t got;
    r_i64(&res[0], &got);
    int rc = STORE_OK;
    if (mysql_stmt_prepare(st, sql, (unsigned long)strlen(sql)) != 0 ||
        mysql_stmt_bind_param(st, par) != 0 || mysql_stmt_execute(st) != 0 ||
        mysql_stmt_bind_result(st, res) != 0) {
        rc = stmt_fail(m, st, take ? "schema lock" : "schema unlock");
    } else {
        int f = fetch(m, st, "schema lock");
        if (f == STORE_ERR)
            rc = STORE_ERR;
        else
            *got_it = f == 1 && !got.null && got.v == 1;
        if (!m->broken)
            mysql_stmt_free_result(st);
    }
    mysql_stmt_close(st);
    return rc;
}

/* Takes the named lock that serialises schema changes between instances, polling every
 * 50 ms until the open's deadline; or releases it. */
static int schema_lock(my_t *m, int take)
{
    int got;
    if (!take)
        return schema_lock_once(m, 0, &got);
    for (;;) {
        if (schema_lock_once(m, 1, &got) != STORE_OK)
            return STORE_ERR;
        if (got)
            return STORE_OK;
        if (clock_mono_ms() + 50 >= m->deadline_ms)
            return store__fail(&m->base,
                               "mysql: schema: another instance held GET_LOCK('seckill.schema') "
                               "past the deadline (a migration still running?)");
        struct timespec ts = {0, 50 * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

static int schema_ensure(my_t *m)
{
    int64_t v = 0;
    if (schema_read(m, &v) != STORE_OK)
        return STORE_ERR;
    if (v == MYSQL_SCHEMA_VERSION)
        return STORE_OK;
    if (v > MYSQL_SCHEMA_VERSION)
        return store__fail(&m->base,
                           "mysql: database schema version %lld is newer than this build (%d); "
                           "use a newer seckill",
                           (long long)v, MYSQL_SCHEMA_VERSION);
    if (schema_lock(m, 1) != STORE_OK)
        return STORE_ERR;
    int rc = schema_read(m, &v);    /* again, under the lock */
    if (rc == STORE_OK && v < MYSQL_SCHEMA_VERSION) {
        rc = run_schema_file(m);
        if (rc == STORE_OK)
            rc = schema_read(m, &v);
        if (rc == STORE_OK && v != MYSQL_SCHEMA_VERSION)
            rc = store__fail(&m->base,
                             "mysql: schema file set version %lld, this build expects %d",
                             (long long)v, MYSQL_SCHEMA_VERSION);
        if (rc == STORE_OK)
            log_info("mysql: schema version %lld ready in %s", (long long)v, m->url.dbname);
    }
    if (!m->broken) {
        char keep[STORE_ERRLEN];
        snprintf(keep, sizeof keep, "%s", m->base.err);
        if (schema_lock(m, 0) != STORE_OK && rc == STORE_OK)
            rc = STORE_ERR;
        else
            snprintf(m->base.err, sizeof m->base.err, "%s", keep);
    }
    return rc;
}

/* ---------------------------------------------------------------- open / close */

static void my_close(store_t *s)
{
    my_t *m = (my_t *)s;
    drop(m);
    free(m->ibind);
    free(m->itime);
    free(m);
}

static store_t *my_open(const char *url, int timeout_ms, char *err, size_t errlen)
{
    pthread_once(&lib_once, lib_init);
    if (!lib_ok) {
        snprintf(err, errlen, "mysql: mysql_library_init failed");
        return NULL;
    }
    my_t *m = xrealloc(NULL, sizeof *m);
    memset(m, 0, sizeof *m);
    if (url_parse_mysql(url, &m->url, err, errlen) != 0) {
        free(m);
        return NULL;
    }
    if (m->url.socket[0])
        snprintf(m->where, sizeof m->where, "%s@%s/%s", m->url.user, m->url.socket,
                 m->url.dbname);
    else
        snprintf(m->where, sizeof m->where, "%s@%s:%u/%s", m->url.user, m->url.host,
                 m->url.port, m->url.dbname);
    m->timeout_ms = timeout_ms;
    m->tcache_t = INT64_MIN;
    m->ibind = xrealloc(NULL, sizeof *m->ibind * INS_MAX_ROWS * INS_COLS);
    m->itime = xrealloc(NULL, sizeof *m->itime * INS_MAX_ROWS);
    /* The schema may wait for another instance's migration: give open a longer budget. */
    m->deadline_ms = clock_mono_ms() + (uint64_t)timeout_ms * 10;
    if (my_connect(m) != STORE_OK || schema_ensure(m) != STORE_OK) {
        snprintf(err, errlen, "%s", m->base.err);
        my_close(&m->base);
        return NULL;
    }
    if (m->broken)
        drop(m);
    return &m->base;
}

/* ---------------------------------------------------------------- ping, users */

static int do_ping(my_t *m)
{
    if (late(m, "ping"))
        return STORE_ERR;
    if (mysql_ping(m->db) != 0)
        return conn_fail(m, "ping");
    return STORE_OK;
}

static int my_ping(store_t *s)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_ping(m));
}

static int user_lookup(my_t *m, const char *phone, store_user_t *out)
{
    unsigned long plen;
    MYSQL_BIND par[1], res[4];
    b_str(&par[0], phone, &plen);
    ri64_t id;
    rstr_t *str = xrealloc(NULL, 3 * sizeof *str);
    r_i64(&res[0], &id);
    r_str(&res[1], &str[0]);
    r_str(&res[2], &str[1]);
    r_str(&res[3], &str[2]);
    int ret = one_row(m, stmt(m, ST_USER_BY_PHONE), par, res, "user by phone");
    if (ret == STORE_OK) {
        memset(out, 0, sizeof *out);
        out->id = id.v;
        copy_str(out->phone, sizeof out->phone, rs(&str[0]));
        copy_str(out->nick_name, sizeof out->nick_name, rs(&str[1]));
        copy_str(out->icon, sizeof out->icon, rs(&str[2]));
    }
    free(str);
    return ret;
}

static int my_user_by_phone(store_t *s, const char *phone, store_user_t *out)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, user_lookup(m, phone, out));
}

static int do_user_create(my_t *m, const char *phone, const char *nick, store_user_t *out)
{
    /* Look first: an INSERT that hits the UNIQUE phone would still use up an id. */
    int rc = user_lookup(m, phone, out);
    if (rc != STORE_NOTFOUND)
        return rc;
    MYSQL_STMT *st = stmt(m, ST_USER_INSERT);
    if (!st)
        return STORE_ERR;
    unsigned long l1, l2;
    MYSQL_TIME now;
    mtime_of(m, clock_wall_s(), &now);
    MYSQL_BIND par[4];
    b_str(&par[0], phone, &l1);
    b_str(&par[1], nick, &l2);
    b_time(&par[2], &now);
    b_time(&par[3], &now);
    if (run(m, st, par, "user insert") != STORE_OK)
        return STORE_ERR;
    /* Inserted, or the phone existed (a concurrent login): either way read it back. */
    rc = user_lookup(m, phone, out);
    if (rc == STORE_NOTFOUND)
        return store__fail(&m->base, "mysql: user %s vanished after insert", phone);
    return rc;
}

static int my_user_create(store_t *s, const char *phone, const char *nick, store_user_t *out)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_user_create(m, phone, nick, out));
}

/* ---------------------------------------------------------------- vouchers */

static int do_voucher_create(my_t *m, store_voucher_t *v)
{
    if (tx_begin(m, "voucher create: BEGIN") != STORE_OK)
        return STORE_ERR;
    MYSQL_TIME now, b, e;
    mtime_of(m, clock_wall_s(), &now);
    int64_t status = v->status > 0 ? v->status : 1, type = v->type;
    unsigned long l1, l2, l3;
    MYSQL_BIND par[10];
    MYSQL_STMT *st = stmt(m, ST_VOUCHER_INSERT);
    if (!st)
        goto fail;
    b_i64(&par[0], &v->shop_id);
    b_str(&par[1], v->title, &l1);
    b_str(&par[2], v->sub_title, &l2);
    b_str(&par[3], v->rules, &l3);
    b_i64(&par[4], &v->pay_value);
    b_i64(&par[5], &v->actual_value);
    b_i64(&par[6], &type);
    b_i64(&par[7], &status);
    b_time(&par[8], &now);
    b_time(&par[9], &now);
    if (run(m, st, par, "voucher insert") != STORE_OK)
        goto fail;
    int64_t id = (int64_t)mysql_stmt_insert_id(st);
    if (v->is_seckill) {
        mtime_of(m, v->begin_time, &b);
        mtime_of(m, v->end_time, &e);
        st = stmt(m, ST_SECKILL_INSERT);
        if (!st)
            goto fail;
        b_i64(&par[0], &id);
        b_i64(&par[1], &v->stock);
        b_time(&par[2], &b);
        b_time(&par[3], &e);
        b_time(&par[4], &now);
        b_time(&par[5], &now);
        if (run(m, st, par, "seckill voucher insert") != STORE_OK)
            goto fail;
        if (v->buckets > 1) {
            int64_t k = v->buckets;
            st = stmt(m, ST_BUCKETS_INSERT);
            if (!st)
                goto fail;
            b_i64(&par[0], &id);
            b_i64(&par[1], &k);
            if (run(m, st, par, "stock buckets insert") != STORE_OK)
                goto fail;
        }
        if (v->room.admit_per_s > 0) {
            int64_t ttl = v->room.pass_ttl_s, gate = v->room.bot_gate;
            st = stmt(m, ST_ROOM_INSERT);
            if (!st)
                goto fail;
            b_i64(&par[0], &id);
            b_i64(&par[1], &v->room.admit_per_s);
            b_i64(&par[2], &ttl);
            b_i64(&par[3], &gate);
            if (run(m, st, par, "waiting room insert") != STORE_OK)
                goto fail;
        }
    }
    if (tx_commit(m, "voucher create: COMMIT") != STORE_OK)
        goto fail;
    v->id = id;
    return STORE_OK;
fail:
    tx_rollback(m);
    return STORE_ERR;
}

static int my_voucher_create(store_t *s, store_voucher_t *v)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 2, do_voucher_create(m, v));
}

typedef struct vrow {
    MYSQL_BIND res[13];
    ri64_t id, shop, pay, actual, type, status, is_sk, stock;
    rstr_t title, sub, rules;
    rtime_t begin, end;
} vrow_t;

static void vrow_bind(vrow_t *r)
{
    r_i64(&r->res[0], &r->id);
    r_i64(&r->res[1], &r->shop);
    r_str(&r->res[2], &r->title);
    r_str(&r->res[3], &r->sub);
    r_str(&r->res[4], &r->rules);
    r_i64(&r->res[5], &r->pay);
    r_i64(&r->res[6], &r->actual);
    r_i64(&r->res[7], &r->type);
    r_i64(&r->res[8], &r->status);
    r_i64(&r->res[9], &r->is_sk);
    r_i64(&r->res[10], &r->stock);
    r_time(&r->res[11], &r->begin);
    r_time(&r->res[12], &r->end);
}

/* A NULL column stays NULL, so the API can omit the member as the course does. */
static char *dup_or_null(rstr_t *v)
{
    if (v->null)
        return NULL;
    return xstrdup(rs(v));
}

static void vrow_get(void *bufs, void *out)
{
    vrow_t *r = bufs;
    store_voucher_t *v = out;
    memset(v, 0, sizeof *v);
    v->id = r->id.v;
    v->shop_id = r->shop.null ? 0 : r->shop.v;
    v->title = dup_or_null(&r->title);
    v->sub_title = dup_or_null(&r->sub);
    v->rules = dup_or_null(&r->rules);
    v->pay_value = r->pay.v;
    v->actual_value = r->actual.v;
    v->type = (int)r->type.v;
    v->status = (int)r->status.v;
    v->is_seckill = r->is_sk.v != 0;
    if (v->is_seckill) {
        v->stock = r->stock.null ? 0 : r->stock.v;
        v->begin_time = epoch_of(&r->begin);
        v->end_time = epoch_of(&r->end);
    }
}

static int do_voucher_get(my_t *m, int64_t id, store_voucher_t *out)
{
    MYSQL_BIND par[1];
    b_i64(&par[0], &id);
    vrow_t *r = xrealloc(NULL, sizeof *r);
    vrow_bind(r);
    int ret = one_row(m, stmt(m, ST_VOUCHER_GET), par, r->res, "voucher get");
    if (ret == STORE_OK)
        vrow_get(r, out);
    free(r);
    return ret;
}

static int my_voucher_get(store_t *s, int64_t id, store_voucher_t *out)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_voucher_get(m, id, out));
}

static int do_voucher_list(my_t *m, int64_t shop_id, store_voucher_t **out, size_t *n)
{
    MYSQL_BIND par[1];
    b_i64(&par[0], &shop_id);
    vrow_t *r = xrealloc(NULL, sizeof *r);
    vrow_bind(r);
    void *a;
    size_t len;
    int ret = all_rows(m, stmt(m, ST_VOUCHER_LIST), par, r->res, "voucher list", SIZE_MAX,
                       vrow_get, r, sizeof **out, 8, &a, &len);
    free(r);
    if (ret != STORE_OK) {
        store_voucher_list_free(a, len);
        return STORE_ERR;
    }
    *out = a;
    *n = len;
    return STORE_OK;
}

static int my_voucher_list(store_t *s, int64_t shop_id, store_voucher_t **out, size_t *n)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_voucher_list(m, shop_id, out, n));
}

static void id_get(void *bufs, void *out)
{
    *(int64_t *)out = ((ri64_t *)bufs)->v;
}

static int do_seckill_ids(my_t *m, int64_t **ids, size_t *n)
{
    MYSQL_BIND res[1];
    ri64_t id;
    r_i64(&res[0], &id);
    void *a;
    size_t len;
    int ret = all_rows(m, stmt(m, ST_SECKILL_IDS), NULL, res, "seckill ids", SIZE_MAX, id_get,
                       &id, sizeof **ids, 16, &a, &len);
    if (ret != STORE_OK) {
        free(a);
        return STORE_ERR;
    }
    *ids = a;
    *n = len;
    return STORE_OK;
}

static int my_seckill_ids(store_t *s, int64_t **ids, size_t *n)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_seckill_ids(m, ids, n));
}

/* ---------------------------------------------------------------- orders */

typedef struct tally {
    int64_t voucher_id;
    int64_t n;
} tally_t;

static int cmp_order_id(const void *a, const void *b)
{
    int64_t x = ((const store_order_t *)a)->id, y = ((const store_order_t *)b)->id;
    return x < y ? -1 : x > y;
}

static int cmp_tally(const void *a, const void *b)
{
    int64_t x = ((const tally_t *)a)->voucher_id, y = ((const tally_t *)b)->voucher_id;
    return x < y ? -1 : x > y;
}

static void tally_add(tally_t **tl, size_t *ntl, size_t *cap, int64_t voucher_id)
{
    size_t k = 0;
    while (k < *ntl && (*tl)[k].voucher_id != voucher_id)
        k++;
    if (k == *ntl) {
        if (*ntl == *cap) {
            *cap = *cap ? *cap * 2 : 8;
            *tl = xrealloc(*tl, *cap * sizeof **tl);
        }
        (*tl)[k].voucher_id = voucher_id;
        (*tl)[k].n = 0;
        (*ntl)++;
    }
    (*tl)[k].n++;
}

/* Binds rows [0, rows) of o into the insert buffers. */
static void bind_orders(my_t *m, const store_order_t *o, size_t rows)
{
    for (size_t i = 0; i < rows; i++) {
        MYSQL_BIND *b = &m->ibind[i * INS_COLS];
        mtime_of(m, o[i].create_time, &m->itime[i]);
        b_i64(&b[0], &o[i].id);
        b_i64(&b[1], &o[i].user_id);
        b_i64(&b[2], &o[i].voucher_id);
        b_time(&b[3], &m->itime[i]);
        b_time(&b[4], &m->itime[i]);
    }
}

/* Fast path: every order in multi-row INSERT IGNOREs. Returns 1 if all were inserted,
 * 0 if some were skipped (the caller rolls back and goes row by row), STORE_ERR. */
static int insert_all(my_t *m, const store_order_t *o, size_t n)
{
    size_t pos = 0;
    while (pos < n) {
        size_t left = n - pos;
        int level = INS_LEVELS - 1;
        while (((size_t)1 << level) > left)
            level--;
        size_t rows = (size_t)1 << level;
        MYSQL_STMT *st = ins_stmt(m, level);
        if (!st)
            return STORE_ERR;
        bind_orders(m, o + pos, rows);
        if (run(m, st, m->ibind, "order insert") != STORE_OK)
            return STORE_ERR;
        if (mysql_stmt_affected_rows(st) != (my_ulonglong)rows)
            return 0;
        pos += rows;
    }
    return 1;
}

/* An insert that changed nothing: tell a replay from an id collision (as store_sqlite.c).
 * Returns 1 for a collision, 0 for a replay, STORE_ERR on failure. */
static int classify_skip(my_t *m, const store_order_t *o)
{
    MYSQL_BIND par[2], res[2];
    ri64_t u, v;
    b_i64(&par[0], &o->id);
    r_i64(&res[0], &u);
    r_i64(&res[1], &v);
    int f = one_row(m, stmt(m, ST_ORDER_BY_ID), par, res, "order by id");
    if (f == STORE_ERR)
        return STORE_ERR;
    if (f == STORE_OK) {
        if (u.v == o->user_id && v.v == o->voucher_id)
            return 0;
        log_error("order id collision: order %lld (user %lld, voucher %lld) not written: "
                  "id already belongs to user %lld, voucher %lld",
                  (long long)o->id, (long long)o->user_id, (long long)o->voucher_id,
                  (long long)u.v, (long long)v.v);
        return 1;
    }
    /* Not the id: so (user, voucher) should have an order under another id. */
    ri64_t other;
    b_i64(&par[0], &o->user_id);
    b_i64(&par[1], &o->voucher_id);
    r_i64(&res[0], &other);
    f = one_row(m, stmt(m, ST_ORDER_BY_USER_VOUCHER), par, res, "order by user and voucher");
    if (f == STORE_ERR)
        return STORE_ERR;
    if (f == STORE_OK) {
        log_warn("order %lld not written: user %lld already has order %lld of voucher %lld",
                 (long long)o->id, (long long)o->user_id, (long long)other.v,
                 (long long)o->voucher_id);
        return 0;
    }
    /* INSERT IGNORE skipped it for another reason (a value the column refused). Never
     * block the pipeline on it: count it with the collisions, loudly. */
    log_error("order %lld (user %lld, voucher %lld) was not written and no order holds its "
              "id or its user and voucher: %u warnings",
              (long long)o->id, (long long)o->user_id, (long long)o->voucher_id,
              mysql_warning_count(m->db));
    return 1;
}

/* Slow path: one row at a time, each skipped row classified. */
static int insert_each(my_t *m, const store_order_t *o, size_t n, tally_t **tl, size_t *ntl,
                       size_t *captl, size_t *ins, size_t *conf)
{
    for (size_t i = 0; i < n; i++) {
        MYSQL_STMT *st = ins_stmt(m, 0);
        if (!st)
            return STORE_ERR;
        bind_orders(m, &o[i], 1);
        if (run(m, st, m->ibind, "order insert") != STORE_OK)
            return STORE_ERR;
        if (mysql_stmt_affected_rows(st) == 1) {
            (*ins)++;
            tally_add(tl, ntl, captl, o[i].voucher_id);
        } else {
            int c = classify_skip(m, &o[i]);
            if (c == STORE_ERR)
                return STORE_ERR;
            *conf += (size_t)c;
        }
    }
    return STORE_OK;
}

/* One guarded UPDATE per voucher; a short stock or a missing row is logged, never fatal
 * (the orders were admitted and are real). */
static int take_stock(my_t *m, const tally_t *t)
{
    MYSQL_TIME now;
    mtime_of(m, clock_wall_s(), &now);
    MYSQL_STMT *st = stmt(m, ST_STOCK_DEC_GUARDED);
    if (!st)
        return STORE_ERR;
    MYSQL_BIND par[4];
    b_i64(&par[0], &t->n);
    b_time(&par[1], &now);
    b_i64(&par[2], &t->voucher_id);
    b_i64(&par[3], &t->n);
    if (run(m, st, par, "stock update") != STORE_OK)
        return STORE_ERR;
    if (mysql_stmt_affected_rows(st) == 1)
        return STORE_OK;
    /* Missing row, or not enough stock: find out which. */
    MYSQL_BIND res[1];
    ri64_t stock;
    r_i64(&res[0], &stock);
    int f = one_row(m, stmt(m, ST_STOCK_GET), par + 2, res, "stock get");
    if (f == STORE_ERR)
        return STORE_ERR;
    if (f == STORE_NOTFOUND) {
        log_error("voucher %lld: %lld orders written but it has no tb_seckill_voucher row to "
                  "take stock from",
                  (long long)t->voucher_id, (long long)t->n);
        return STORE_OK;
    }
    log_error("voucher %lld: SQL stock is now %lld (more orders than stock)",
              (long long)t->voucher_id, (long long)(stock.v - t->n));
    st = stmt(m, ST_STOCK_DEC);
    if (!st)
        return STORE_ERR;
    return run(m, st, par, "stock update");
}

/* The voucher's Redis generation, its tb_seckill_voucher row locked until the end of the
 * transaction. *epoch = -1 when it has no row (not a flash-sale voucher). */
static int epoch_lock(my_t *m, int64_t voucher_id, int64_t *epoch)
{
    MYSQL_BIND par[1], res[1];
    ri64_t ep;
    b_i64(&par[0], &voucher_id);
    r_i64(&res[0], &ep);
    int f = one_row(m, stmt(m, ST_EPOCH_LOCK), par, res, "epoch lock");
    if (f == STORE_ERR)
        return STORE_ERR;
    *epoch = f == STORE_OK ? ep.v : -1;
    return STORE_OK;
}

static int cmp_order_voucher(const void *a, const void *b)
{
    int64_t x = ((const store_order_t *)a)->voucher_id, y = ((const store_order_t *)b)->voucher_id;
    return x < y ? -1 : x > y;
}

/* Inside the open transaction: locks the rows of the batch's vouchers (in voucher order)
 * and copies into kept (in the order of sorted) the orders admitted under their current
 * generation. */
static int fence(my_t *m, const store_order_t *sorted, size_t n, store_order_t *kept,
                 size_t *nkept, size_t *fenced)
{
    store_order_t *byv = xrealloc(NULL, n * sizeof *byv);
    memcpy(byv, sorted, n * sizeof *byv);
    qsort(byv, n, sizeof *byv, cmp_order_voucher);
    tally_t *ep = NULL;   /* (voucher, epoch), ascending voucher */
    size_t nep = 0;
    int rc = STORE_OK;
    for (size_t i = 0; i < n && rc == STORE_OK; i++) {
        if (byv[i].epoch == STORE_EPOCH_ANY || (nep && ep[nep - 1].voucher_id == byv[i].voucher_id))
            continue;
        ep = xrealloc(ep, (nep + 1) * sizeof *ep);
        ep[nep].voucher_id = byv[i].voucher_id;
        rc = epoch_lock(m, byv[i].voucher_id, &ep[nep].n);
        nep++;
    }
    free(byv);
    *nkept = 0;
    *fenced = 0;
    for (size_t i = 0; i < n && rc == STORE_OK; i++) {
        const store_order_t *o = &sorted[i];
        if (o->epoch != STORE_EPOCH_ANY) {
            size_t k = 0;
            while (k < nep && ep[k].voucher_id != o->voucher_id)
                k++;
            if (k < nep && ep[k].n >= 0 && ep[k].n != o->epoch) {
                log_warn("order %lld (user %lld, voucher %lld) not written: admitted under "
                         "Redis generation %lld, which a rebuild from SQL replaced with %lld "
                         "(the order was lost with Redis)",
                         (long long)o->id, (long long)o->user_id, (long long)o->voucher_id,
                         (long long)o->epoch, (long long)ep[k].n);
                (*fenced)++;
                continue;
            }
        }
        kept[(*nkept)++] = *o;
    }
    free(ep);
    return rc;
}

/* Whether tb_voucher_order_cancelled holds an id between lo and hi: 1, 0, STORE_ERR. */
static int aside_any(my_t *m, int64_t lo, int64_t hi)
{
    MYSQL_BIND par[2], res[1];
    ri64_t one;
    b_i64(&par[0], &lo);
    b_i64(&par[1], &hi);
    r_i64(&res[0], &one);
    int f = one_row(m, stmt(m, ST_ASIDE_ANY), par, res, "cancelled orders");
    return f == STORE_ERR ? STORE_ERR : f == STORE_OK;
}

/* Drops from sorted[0..*n) (ascending id) the orders a cancel moved to
 * tb_voucher_order_cancelled (--cancel-frees-buyer): a replay of such an order's entry
 * must not write it again. One range read per batch; one read per order only when the
 * range holds such an order. */
static int drop_aside(my_t *m, store_order_t *sorted, size_t *n)
{
    if (*n == 0)
        return STORE_OK;
    int any = aside_any(m, sorted[0].id, sorted[*n - 1].id);
    if (any != 1)
        return any;
    size_t k = 0;
    for (size_t i = 0; i < *n; i++) {
        int f = aside_any(m, sorted[i].id, sorted[i].id);
        if (f == STORE_ERR)
            return STORE_ERR;
        if (f)
            log_warn("order %lld not written again: it was cancelled and moved to "
                     "tb_voucher_order_cancelled (a replay)", (long long)sorted[i].id);
        else
            sorted[k++] = sorted[i];
    }
    *n = k;
    return STORE_OK;
}

static int do_orders_write(my_t *m, const store_order_t *all_sorted, size_t nall,
                           size_t *inserted, size_t *conflicts, size_t *fenced)
{
    size_t ins = 0, conf = 0, ntl = 0, captl = 0, n = 0;
    tally_t *tl = NULL;
    store_order_t *sorted = xrealloc(NULL, nall * sizeof *sorted);
    if (tx_begin(m, "orders: BEGIN") != STORE_OK) {
        free(sorted);
        return STORE_ERR;
    }
    if (fence(m, all_sorted, nall, sorted, &n, fenced) != STORE_OK ||
        drop_aside(m, sorted, &n) != STORE_OK)
        goto fail;
    int all = n ? insert_all(m, sorted, n) : 1;
    if (all == STORE_ERR)
        goto fail;
    if (all == 1) {
        ins = n;
        for (size_t i = 0; i < n; i++)
            tally_add(&tl, &ntl, &captl, sorted[i].voucher_id);
    } else {
        /* Some rows exist already (a replay after a crash): start over, row by row. */
        tx_rollback(m);
        if (m->broken || tx_begin(m, "orders: BEGIN") != STORE_OK)
            goto fail;
        if (fence(m, all_sorted, nall, sorted, &n, fenced) != STORE_OK ||
            drop_aside(m, sorted, &n) != STORE_OK)
            goto fail;
        if (insert_each(m, sorted, n, &tl, &ntl, &captl, &ins, &conf) != STORE_OK)
            goto fail;
    }
    /* One UPDATE per voucher per batch, in voucher order (one lock order everywhere). */
    if (ntl > 1)
        qsort(tl, ntl, sizeof *tl, cmp_tally);
    for (size_t k = 0; k < ntl; k++)
        if (take_stock(m, &tl[k]) != STORE_OK)
            goto fail;
    if (tx_commit(m, "orders: COMMIT") != STORE_OK)
        goto fail;
    free(tl);
    free(sorted);
    *inserted = ins;
    *conflicts = conf;
    return STORE_OK;
fail:
    tx_rollback(m);
    free(tl);
    free(sorted);
    *fenced = 0;
    return STORE_ERR;
}

static int do_redis_epoch(my_t *m, int64_t voucher_id, int bump, int64_t *epoch)
{
    if (tx_begin(m, "epoch: BEGIN") != STORE_OK)
        return STORE_ERR;
    int64_t ep = -1;
    if (epoch_lock(m, voucher_id, &ep) != STORE_OK)
        goto fail;
    if (ep >= 0 && bump) {
        MYSQL_STMT *st = stmt(m, ST_EPOCH_BUMP);
        MYSQL_BIND par[1];
        b_i64(&par[0], &voucher_id);
        if (!st || run(m, st, par, "epoch bump") != STORE_OK)
            goto fail;
        ep++;
    }
    if (tx_commit(m, "epoch: COMMIT") != STORE_OK)
        goto fail;
    if (ep < 0)
        return STORE_NOTFOUND;
    *epoch = ep;
    return STORE_OK;
fail:
    tx_rollback(m);
    return STORE_ERR;
}

static int my_redis_epoch(store_t *s, int64_t voucher_id, int bump, int64_t *epoch)
{
    my_t *m = (my_t *)s;
    /* A bump is retried only if the connection broke before its COMMIT went out. */
    RETRYING(m, bump ? 2 : 1, do_redis_epoch(m, voucher_id, bump, epoch));
}

static int my_orders_write(store_t *s, const store_order_t *orders, size_t n, size_t *inserted,
                           size_t *conflicts, size_t *fenced)
{
    my_t *m = (my_t *)s;
    store_order_t *sorted = xrealloc(NULL, n * sizeof *sorted);
    memcpy(sorted, orders, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_order_id);
    int rc = STORE_ERR;
    /* No retry here: the writer retries the whole batch after its back-off. */
    if (enter(m, 0) == STORE_OK)
        rc = leave(m, do_orders_write(m, sorted, n, inserted, conflicts, fenced));
    free(sorted);
    return rc;
}

typedef struct orow {
    MYSQL_BIND res[5];
    ri64_t id, user, voucher, status;
    rtime_t created;
} orow_t;

static void orow_bind(orow_t *r)
{
    r_i64(&r->res[0], &r->id);
    r_i64(&r->res[1], &r->user);
    r_i64(&r->res[2], &r->voucher);
    r_i64(&r->res[3], &r->status);
    r_time(&r->res[4], &r->created);
}

static void orow_get(void *bufs, void *out)
{
    const orow_t *r = bufs;
    store_order_t *o = out;
    memset(o, 0, sizeof *o);
    o->id = r->id.v;
    o->user_id = r->user.v;
    o->voucher_id = r->voucher.v;
    o->status = (int)r->status.v;
    o->create_time = epoch_of(&r->created);
}

/* Runs an order query st (from stmt(), or NULL: preparing it failed) with params par
 * and collects up to max rows. */
static int order_rows(my_t *m, MYSQL_STMT *st, MYSQL_BIND *par, size_t max, store_order_t **out,
                      size_t *n, const char *what)
{
    orow_t r;
    orow_bind(&r);
    void *a;
    size_t len;
    int ret = all_rows(m, st, par, r.res, what, max, orow_get, &r, sizeof **out, 8, &a, &len);
    if (ret != STORE_OK) {
        free(a);
        return STORE_ERR;
    }
    *out = a;
    *n = len;
    return STORE_OK;
}

static int do_order_get(my_t *m, int64_t id, store_order_t *out)
{
    MYSQL_BIND par[2];
    b_i64(&par[0], &id);
    b_i64(&par[1], &id);
    store_order_t *a = NULL;
    size_t n = 0;
    if (order_rows(m, stmt(m, ST_ORDER_GET), par, 1, &a, &n, "order get") != STORE_OK)
        return STORE_ERR;
    int ret = n ? STORE_OK : STORE_NOTFOUND;
    if (n)
        *out = a[0];
    free(a);
    return ret;
}

static int my_order_get(store_t *s, int64_t id, store_order_t *out)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_order_get(m, id, out));
}

static int do_orders_of_user(my_t *m, int64_t user_id, size_t max, store_order_t **out,
                             size_t *n)
{
    int64_t lim = max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max;
    MYSQL_BIND par[3];
    b_i64(&par[0], &user_id);
    b_i64(&par[1], &user_id);
    b_i64(&par[2], &lim);
    return order_rows(m, stmt(m, ST_ORDERS_OF_USER), par, max, out, n, "orders of user");
}

static int my_orders_of_user(store_t *s, int64_t user_id, size_t max, store_order_t **out,
                             size_t *n)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_orders_of_user(m, user_id, max, out, n));
}

static int do_voucher_orders(my_t *m, int64_t voucher_id, int64_t after_id, size_t max,
                             store_order_t **out, size_t *n)
{
    int64_t lim = max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max;
    MYSQL_BIND par[5];
    b_i64(&par[0], &voucher_id);
    b_i64(&par[1], &after_id);
    b_i64(&par[2], &voucher_id);
    b_i64(&par[3], &after_id);
    b_i64(&par[4], &lim);
    return order_rows(m, stmt(m, ST_VOUCHER_ORDERS), par, max, out, n, "voucher orders");
}

static int my_voucher_orders(store_t *s, int64_t voucher_id, int64_t after_id, size_t max,
                             store_order_t **out, size_t *n)
{
    my_t *m = (my_t *)s;
    *out = NULL;
    *n = 0;
    if (max == 0)
        return STORE_OK;
    RETRYING(m, 1, do_voucher_orders(m, voucher_id, after_id, max, out, n));
}

static int do_voucher_counts(my_t *m, int64_t voucher_id, int64_t *orders, int64_t *stock)
{
    *orders = 0;
    *stock = 0;
    MYSQL_STMT *st = stmt(m, ST_COUNTS);   /* params: the same id */
    if (!st)
        return STORE_ERR;
    MYSQL_BIND par[2], res[2];
    ri64_t cnt, stk;
    b_i64(&par[0], &voucher_id);
    b_i64(&par[1], &voucher_id);
    r_i64(&res[0], &cnt);
    r_i64(&res[1], &stk);
    int f = one_row(m, st, par, res, "counts");
    if (f == STORE_ERR)
        return STORE_ERR;
    if (f == STORE_NOTFOUND)
        return store__fail(&m->base, "mysql: counts: no row");
    *orders = cnt.v;
    if (stk.null)
        return STORE_NOTFOUND;   /* not a flash-sale voucher; *orders is still valid */
    *stock = stk.v;
    return STORE_OK;
}

static int do_voucher_buckets(my_t *m, int64_t voucher_id, int *buckets)
{
    MYSQL_BIND par[1], res[1];
    ri64_t k;
    b_i64(&par[0], &voucher_id);
    r_i64(&res[0], &k);
    int f = one_row(m, stmt(m, ST_BUCKETS_GET), par, res, "stock buckets");
    if (f == STORE_ERR)
        return STORE_ERR;
    if (f == STORE_OK && !k.null && k.v > 1 && k.v <= 1024)
        *buckets = (int)k.v;
    return STORE_OK;
}

static int my_voucher_buckets(store_t *s, int64_t voucher_id, int *buckets)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 2, do_voucher_buckets(m, voucher_id, buckets));
}

static int do_voucher_room(my_t *m, int64_t voucher_id, store_room_t *room)
{
    MYSQL_BIND par[1], res[3];
    ri64_t r, ttl, gate;
    b_i64(&par[0], &voucher_id);
    r_i64(&res[0], &r);
    r_i64(&res[1], &ttl);
    r_i64(&res[2], &gate);
    int f = one_row(m, stmt(m, ST_ROOM_GET), par, res, "waiting room");
    if (f == STORE_ERR)
        return STORE_ERR;
    if (f == STORE_OK && !r.null && r.v > 0) {
        room->admit_per_s = r.v;
        room->pass_ttl_s = ttl.null ? 0 : (int)ttl.v;
        room->bot_gate = !gate.null && gate.v != 0;
    }
    return STORE_OK;
}

static int my_voucher_room(store_t *s, int64_t voucher_id, store_room_t *room)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 2, do_voucher_room(m, voucher_id, room));
}

static int my_voucher_counts(store_t *s, int64_t voucher_id, int64_t *orders, int64_t *stock)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_voucher_counts(m, voucher_id, orders, stock));
}

/* ---------------------------------------------------------------- sync order mode */

/* The course's DB-only order in one transaction. The window and a first stock look are
 * plain reads; the order goes in before the stock row is touched, so the hot row's lock
 * is held only from the guarded UPDATE to the COMMIT: a duplicate (UNIQUE(user, voucher))
 * fails the insert without ever queueing on the stock row, and the guard `stock > 0`
 * decides the last unit among concurrent buyers. */
static int do_order_sync(my_t *m, const store_order_t *o, int *result)
{
    MYSQL_BIND par[5], res[3];
    MYSQL_STMT *st;
    int f;
    if (tx_begin(m, "sync order: BEGIN") != STORE_OK)
        return STORE_ERR;

    ri64_t stock;
    rtime_t begin, end;
    b_i64(&par[0], &o->voucher_id);
    r_i64(&res[0], &stock);
    r_time(&res[1], &begin);
    r_time(&res[2], &end);
    f = one_row(m, stmt(m, ST_SYNC_VOUCHER), par, res, "sync order: voucher");
    if (f == STORE_ERR)
        goto fail;
    if (f == STORE_NOTFOUND) {
        *result = STORE_SYNC_NO_VOUCHER;
        goto done;
    }
    if (o->create_time < epoch_of(&begin)) {
        *result = STORE_SYNC_NOT_STARTED;
        goto done;
    }
    if (o->create_time >= epoch_of(&end)) {
        *result = STORE_SYNC_ENDED;
        goto done;
    }
    if (stock.v < 1) {
        *result = STORE_SYNC_SOLD_OUT;
        goto done;
    }

    ri64_t has;
    b_i64(&par[0], &o->user_id);
    b_i64(&par[1], &o->voucher_id);
    r_i64(&res[0], &has);
    f = one_row(m, stmt(m, ST_SYNC_HAS_ORDER), par, res, "sync order: count");
    if (f == STORE_ERR)
        goto fail;
    if (f == STORE_OK && has.v > 0) {
        *result = STORE_SYNC_DUPLICATE;
        goto done;
    }

    MYSQL_TIME now;
    mtime_of(m, o->create_time, &now);
    st = stmt(m, ST_SYNC_INSERT);
    if (!st)
        goto fail;
    b_i64(&par[0], &o->id);
    b_i64(&par[1], &o->user_id);
    b_i64(&par[2], &o->voucher_id);
    b_time(&par[3], &now);
    b_time(&par[4], &now);
    if (run(m, st, par, "sync order: insert") != STORE_OK) {
        if (!m->broken && mysql_stmt_errno(st) == ER_DUP_ENTRY) {
            /* a concurrent order of this user won (or the id exists: never overwritten) */
            m->base.err[0] = '\0';
            tx_rollback(m);
            *result = STORE_SYNC_DUPLICATE;
            return m->broken ? STORE_ERR : STORE_OK;
        }
        goto fail;
    }

    st = stmt(m, ST_SYNC_TAKE);
    if (!st)
        goto fail;
    b_time(&par[0], &now);
    b_i64(&par[1], &o->voucher_id);
    if (run(m, st, par, "sync order: take stock") != STORE_OK)
        goto fail;
    if (mysql_stmt_affected_rows(st) != 1) {
        /* the guard: the last unit went to someone else meanwhile; undo the insert */
        tx_rollback(m);
        *result = STORE_SYNC_SOLD_OUT;
        return m->broken ? STORE_ERR : STORE_OK;
    }
    *result = STORE_SYNC_OK;
done:
    if (tx_commit(m, "sync order: COMMIT") != STORE_OK)
        goto fail;
    return STORE_OK;
fail:
    tx_rollback(m);
    return STORE_ERR;
}

static int my_order_sync(store_t *s, const store_order_t *o, int *result)
{
    my_t *m = (my_t *)s;
    /* Retried only if the connection broke before COMMIT (then nothing happened). */
    RETRYING(m, 2, do_order_sync(m, o, result));
}

/* ---------------------------------------------------------------- store_exec */

/* The caller's arguments as params par (a time through t, this backend's datetime). */
static void exec_params(my_t *m, const store_arg_t *args, int nargs, MYSQL_BIND *par,
                        MYSQL_TIME *t)
{
    for (int i = 0; i < nargs; i++) {
        if (args[i].is_time) {
            mtime_of(m, args[i].v, &t[i]);
            b_time(&par[i], &t[i]);
        } else {
            b_i64(&par[i], &args[i].v);
        }
    }
}

/* One statement of the caller's, prepared for this call and closed after (store.h). */
/* A lifecycle statement kept prepared in m->life by its text (a wave of timeouts runs one or
 * two an order), or -- every slot taken -- prepared for this call (*own 1: the caller
 * closes it). NULL when it does not prepare. */
static MYSQL_STMT *life_stmt(my_t *m, const char *sql, int *own)
{
    size_t i = 0;
    while (i < LIFE_STMTS && m->life[i].sql && strcmp(m->life[i].sql, sql) != 0)
        i++;
    MYSQL_STMT *st = NULL;
    *own = i >= LIFE_STMTS;
    if (*own)
        return prepare(m, &st, sql);
    if (!prepare(m, &m->life[i].st, sql))
        return NULL;
    if (!m->life[i].sql)
        m->life[i].sql = xstrdup(sql);
    return m->life[i].st;
}

/* keep: a lifecycle statement, kept prepared (life_stmt); else the caller's, prepared for
 * this call. */
static int do_exec(my_t *m, const char *sql, const store_arg_t *args, int nargs, int64_t *out,
                   int keep)
{
    *out = 0;
    MYSQL_BIND par[STORE_EXEC_ARGS], res[1];
    MYSQL_TIME t[STORE_EXEC_ARGS];
    exec_params(m, args, nargs, par, t);
    MYSQL_STMT *st = NULL;
    int own = 1;
    if (keep)
        st = life_stmt(m, sql, &own);
    else
        prepare(m, &st, sql);
    if (!st)
        return STORE_ERR;
    int rc = run(m, st, nargs > 0 ? par : NULL, "exec");
    if (rc == STORE_OK && mysql_stmt_field_count(st) > 0) {
        ri64_t v;
        r_i64(&res[0], &v);
        rc = bind_result(m, st, res, "exec");
        int f = rc == STORE_OK ? fetch(m, st, "exec") : STORE_ERR;
        finish(m, st);
        if (f == STORE_ERR)
            rc = STORE_ERR;
        else if (f == 1 && !v.null)
            *out = v.v;
    } else if (rc == STORE_OK) {
        *out = (int64_t)mysql_stmt_affected_rows(st);
    }
    if (own)
        mysql_stmt_close(st);
    return rc;
}

static int my_exec(store_t *s, const char *sql, const store_arg_t *args, int nargs, int retry,
                   int64_t *out)
{
    my_t *m = (my_t *)s;
    RETRYING(m, retry ? 1 : 0, do_exec(m, sql, args, nargs, out, 0));
}

/* A read of the caller's whose rows are orders (store_exec_orders), as do_exec runs one. */
static int do_exec_orders(my_t *m, const char *sql, const store_arg_t *args, int nargs,
                          store_order_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    MYSQL_BIND par[STORE_EXEC_ARGS];
    MYSQL_TIME t[STORE_EXEC_ARGS];
    exec_params(m, args, nargs, par, t);
    MYSQL_STMT *st = NULL;
    if (!prepare(m, &st, sql))
        return STORE_ERR;
    unsigned cols = mysql_stmt_field_count(st);
    int rc = cols == STORE_ORDER_COLS
                 ? order_rows(m, st, nargs > 0 ? par : NULL, SIZE_MAX, out, n, "exec orders")
                 : store__fail(&m->base, "mysql: exec orders: %u columns, not an order's %d",
                               cols, STORE_ORDER_COLS);
    mysql_stmt_close(st);
    return rc;
}

static int my_exec_orders(store_t *s, const char *sql, const store_arg_t *args, int nargs,
                          store_order_t **out, size_t *n)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_exec_orders(m, sql, args, nargs, out, n));
}

/* ---------------------------------------------------------------- shops */

/* The fetched string into dst, cut to cap - 1 bytes. */
static void str_cut(char *dst, size_t cap, rstr_t *v)
{
    const char *z = rs(v);
    size_t n = strlen(z);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, z, n);
    dst[n] = '\0';
}

/* all_rows of statement id for rows that own no memory (a failed read's rows go with one
 * free), with result buffers bufs, which it frees. *out: the rows or NULL, *n their count. */
static int flat_rows(my_t *m, int id, MYSQL_BIND *par, MYSQL_BIND *res, const char *what,
                     row_get_t *get, void *bufs, size_t size, void **out, size_t *n)
{
    int ret = all_rows(m, stmt(m, id), par, res, what, SIZE_MAX, get, bufs, size, 8, out, n);
    free(bufs);
    if (ret != STORE_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return ret;
}

typedef struct rdbl {
    double v;
    my_bool null;
} rdbl_t;

static void r_dbl(MYSQL_BIND *b, rdbl_t *v)
{
    memset(b, 0, sizeof *b);
    v->v = 0;
    b->buffer_type = MYSQL_TYPE_DOUBLE;
    b->buffer = &v->v;
    b->is_null = &v->null;
}

static void b_dbl(MYSQL_BIND *b, const double *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_DOUBLE;
    b->buffer = (void *)v;
}

typedef struct shrow {
    MYSQL_BIND res[15];
    ri64_t id, type, avg, sold, comments, score;
    rstr_t name, images, area, address, hours;
    rdbl_t x, y;
    rtime_t created, updated;
} shrow_t;

static void shrow_bind(shrow_t *r)
{
    r_i64(&r->res[0], &r->id);
    r_str(&r->res[1], &r->name);
    r_i64(&r->res[2], &r->type);
    r_str(&r->res[3], &r->images);
    r_str(&r->res[4], &r->area);
    r_str(&r->res[5], &r->address);
    r_dbl(&r->res[6], &r->x);
    r_dbl(&r->res[7], &r->y);
    r_i64(&r->res[8], &r->avg);
    r_i64(&r->res[9], &r->sold);
    r_i64(&r->res[10], &r->comments);
    r_i64(&r->res[11], &r->score);
    r_str(&r->res[12], &r->hours);
    r_time(&r->res[13], &r->created);
    r_time(&r->res[14], &r->updated);
}

static void shrow_get(void *bufs, void *out)
{
    shrow_t *r = bufs;
    store_shop_t *p = out;
    memset(p, 0, sizeof *p);
    p->id = r->id.v;
    str_cut(p->name, sizeof p->name, &r->name);
    p->type_id = r->type.v;
    str_cut(p->images, sizeof p->images, &r->images);
    str_cut(p->area, sizeof p->area, &r->area);
    str_cut(p->address, sizeof p->address, &r->address);
    p->x = r->x.v;
    p->y = r->y.v;
    p->avg_price = r->avg.null ? -1 : r->avg.v;
    p->sold = r->sold.v;
    p->comments = r->comments.v;
    p->score = r->score.v;
    str_cut(p->open_hours, sizeof p->open_hours, &r->hours);
    p->create_time = r->created.null ? 0 : epoch_of(&r->created);
    p->update_time = r->updated.null ? 0 : epoch_of(&r->updated);
}

static int do_shop_get(my_t *m, int64_t id, store_shop_t *out)
{
    MYSQL_BIND par[1];
    b_i64(&par[0], &id);
    shrow_t *r = xrealloc(NULL, sizeof *r);
    shrow_bind(r);
    int ret = one_row(m, stmt(m, ST_SHOP_GET), par, r->res, "shop get");
    if (ret == STORE_OK)
        shrow_get(r, out);
    free(r);
    return ret;
}

static int my_shop_get(store_t *s, int64_t id, store_shop_t *out)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_shop_get(m, id, out));
}

static int do_shop_list(my_t *m, const store_shop_query_t *q, store_shop_t **out, size_t *n)
{
    char like[1100];              /* the caller's name is at most a shop name's length */
    int has_name = q->name && q->name[0];
    if (has_name)
        snprintf(like, sizeof like, "%%%s%%", q->name);
    unsigned long l1, l2;
    MYSQL_BIND par[6];
    b_i64(&par[0], &q->type_id);
    b_i64(&par[1], &q->type_id);
    b_str(&par[2], has_name ? like : NULL, &l1);
    b_str(&par[3], has_name ? like : NULL, &l2);
    b_i64(&par[4], &q->limit);
    b_i64(&par[5], &q->offset);
    shrow_t *r = xrealloc(NULL, sizeof *r);
    shrow_bind(r);
    void *a;
    int ret = flat_rows(m, ST_SHOP_LIST, par, r->res, "shop list", shrow_get, r, sizeof **out,
                        &a, n);
    *out = a;
    return ret;
}

static int my_shop_list(store_t *s, const store_shop_query_t *q, store_shop_t **out, size_t *n)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_shop_list(m, q, out, n));
}

/* Binds p's members in the column order of ST_SHOP_INSERT and ST_SHOP_UPDATE (par[0..13],
 * the 14th being the INSERT's second time or the UPDATE's id). */
static void shop_bind(MYSQL_BIND *par, unsigned long *l, const store_shop_t *p,
                      const MYSQL_TIME *now)
{
    b_str(&par[0], p->name, &l[0]);
    b_i64(&par[1], &p->type_id);
    b_str(&par[2], p->images, &l[1]);
    b_str(&par[3], p->area[0] ? p->area : NULL, &l[2]);
    b_str(&par[4], p->address, &l[3]);
    b_dbl(&par[5], &p->x);
    b_dbl(&par[6], &p->y);
    b_i64(&par[7], &p->avg_price);
    if (p->avg_price < 0)
        par[7].buffer_type = MYSQL_TYPE_NULL;
    b_i64(&par[8], &p->sold);
    b_i64(&par[9], &p->comments);
    b_i64(&par[10], &p->score);
    b_str(&par[11], p->open_hours[0] ? p->open_hours : NULL, &l[4]);
    b_time(&par[12], now);
}

static int do_shop_create(my_t *m, store_shop_t *p)
{
    MYSQL_TIME now;
    mtime_of(m, clock_wall_s(), &now);
    unsigned long l[5];
    MYSQL_BIND par[14];
    MYSQL_STMT *st = stmt(m, ST_SHOP_INSERT);
    if (!st)
        return STORE_ERR;
    shop_bind(par, l, p, &now);
    b_time(&par[13], &now);
    if (run(m, st, par, "shop insert") != STORE_OK)
        return STORE_ERR;
    p->id = (int64_t)mysql_stmt_insert_id(st);
    return STORE_OK;
}

static int my_shop_create(store_t *s, store_shop_t *shop)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 0, do_shop_create(m, shop));   /* not sent twice: it could insert twice */
}

static int do_shop_update(my_t *m, const store_shop_t *p)
{
    MYSQL_TIME now;
    mtime_of(m, clock_wall_s(), &now);
    unsigned long l[5];
    MYSQL_BIND par[14];
    MYSQL_STMT *st = stmt(m, ST_SHOP_UPDATE);
    if (!st)
        return STORE_ERR;
    shop_bind(par, l, p, &now);
    b_i64(&par[13], &p->id);
    if (run(m, st, par, "shop update") != STORE_OK)
        return STORE_ERR;
    /* Affected rows are changed rows (CLIENT_FOUND_ROWS is not set): the same values in
     * the same second change nothing and say 0, so 0 asks whether the row exists. */
    if (mysql_stmt_affected_rows(st) > 0)
        return STORE_OK;
    store_shop_t *cur = xcalloc(1, sizeof *cur);
    int rc = do_shop_get(m, p->id, cur);
    free(cur);
    return rc;
}

static int my_shop_update(store_t *s, const store_shop_t *shop)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_shop_update(m, shop));   /* the same values twice: one result */
}

typedef struct strow {
    MYSQL_BIND res[6];
    ri64_t id, sort;
    rstr_t name, icon;
    rtime_t created, updated;
} strow_t;

static void strow_get(void *bufs, void *out)
{
    strow_t *r = bufs;
    store_shop_type_t *t = out;
    memset(t, 0, sizeof *t);
    t->id = r->id.v;
    str_cut(t->name, sizeof t->name, &r->name);
    str_cut(t->icon, sizeof t->icon, &r->icon);
    t->sort = r->sort.null ? 0 : r->sort.v;
    t->create_time = r->created.null ? 0 : epoch_of(&r->created);
    t->update_time = r->updated.null ? 0 : epoch_of(&r->updated);
}

static int do_shop_types(my_t *m, store_shop_type_t **out, size_t *n)
{
    strow_t *r = xrealloc(NULL, sizeof *r);
    r_i64(&r->res[0], &r->id);
    r_str(&r->res[1], &r->name);
    r_str(&r->res[2], &r->icon);
    r_i64(&r->res[3], &r->sort);
    r_time(&r->res[4], &r->created);
    r_time(&r->res[5], &r->updated);
    void *a;
    int ret = flat_rows(m, ST_SHOP_TYPES, NULL, r->res, "shop types", strow_get, r,
                        sizeof **out, &a, n);
    *out = a;
    return ret;
}

static int my_shop_types(store_t *s, store_shop_type_t **out, size_t *n)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_shop_types(m, out, n));
}

/* ---------------------------------------------------------------- the order lifecycle */

/* A lifecycle statement (life_stmt): with res, its first row into res (STORE_OK /
 * STORE_NOTFOUND); else *changed = rows it changed. */
static int once(my_t *m, const char *sql, MYSQL_BIND *par, MYSQL_BIND *res, int64_t *changed,
                const char *what)
{
    int own;
    MYSQL_STMT *st = life_stmt(m, sql, &own);
    if (!st)
        return STORE_ERR;
    int rc;
    if (res) {
        rc = one_row(m, st, par, res, what);
    } else {
        rc = run(m, st, par, what);
        if (rc == STORE_OK && changed)
            *changed = (int64_t)mysql_stmt_affected_rows(st);
    }
    if (own)
        mysql_stmt_close(st);
    return rc;
}

/* The payment row of payment_id into *p: STORE_OK, STORE_NOTFOUND or STORE_ERR. */
static int pay_get(my_t *m, const char *payment_id, store_payment_t *p)
{
    MYSQL_BIND par[1], res[5];
    unsigned long len;
    b_str(&par[0], payment_id, &len);
    ri64_t oid, amt, st;
    rtime_t ct, rt;
    r_i64(&res[0], &oid);
    r_i64(&res[1], &amt);
    r_i64(&res[2], &st);
    r_time(&res[3], &ct);
    r_time(&res[4], &rt);
    int rc = once(m, STORE_PAY_GET_SQL, par, res, NULL, "payment");
    if (rc == STORE_OK)
        *p = (store_payment_t){oid.v, amt.v, (int)st.v, epoch_of(&ct), epoch_of(&rt)};
    return rc;
}

static int do_payment_get(my_t *m, const char *payment_id, store_payment_t *out)
{
    return pay_get(m, payment_id, out);
}

static int my_payment_get(store_t *s, const char *payment_id, store_payment_t *out)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_payment_get(m, payment_id, out));
}

/* A payment row's result buffers (store_refund_t). */
typedef struct rfrow {
    MYSQL_BIND res[5];
    rstr_t pid;
    ri64_t oid, amt, st, tries;
} rfrow_t;

static void rfrow_get(void *bufs, void *out)
{
    rfrow_t *r = bufs;
    store_refund_t *x = out;
    memset(x, 0, sizeof *x);
    const char *z = rs(&r->pid);
    size_t len = strnlen(z, sizeof x->payment_id - 1);   /* the column holds 64 at most */
    memcpy(x->payment_id, z, len);
    x->order_id = r->oid.v;
    x->amount = r->amt.v;
    x->status = (int)r->st.v;
    x->tries = (int)r->tries.v;
}

/* Every row of sql (prepared for this call, params par) as a payment. */
static int refund_rows(my_t *m, const char *sql, MYSQL_BIND *par, const char *what,
                       store_refund_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    MYSQL_STMT *st = NULL;
    if (!prepare(m, &st, sql))
        return STORE_ERR;
    rfrow_t *r = xcalloc(1, sizeof *r);
    r_str(&r->res[0], &r->pid);
    r_i64(&r->res[1], &r->oid);
    r_i64(&r->res[2], &r->amt);
    r_i64(&r->res[3], &r->st);
    r_i64(&r->res[4], &r->tries);
    void *a = NULL;
    int rc = all_rows(m, st, par, r->res, what, SIZE_MAX, rfrow_get, r, sizeof **out, 16, &a, n);
    free(r);
    mysql_stmt_close(st);
    if (rc != STORE_OK) {
        free(a);
        a = NULL;
        *n = 0;
    }
    *out = a;
    return rc;
}

static int do_refunds_due(my_t *m, int64_t now, int64_t limit, store_refund_t **out, size_t *n)
{
    MYSQL_BIND par[2];
    b_i64(&par[0], &now);
    b_i64(&par[1], &limit);
    return refund_rows(m, STORE_REFUNDS_DUE_SQL, par, "refunds due", out, n);
}

static int my_refunds_due(store_t *s, int64_t now, size_t max, store_refund_t **out, size_t *n)
{
    my_t *m = (my_t *)s;
    int64_t limit = max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max;
    RETRYING(m, 1, do_refunds_due(m, now, limit, out, n));
}

static int do_voucher_payments(my_t *m, int64_t vid, int64_t after, const char *after_pay,
                               int64_t limit, store_refund_t **out, size_t *n)
{
    MYSQL_BIND par[6];
    unsigned long len;
    b_i64(&par[0], &vid);
    b_i64(&par[1], &vid);
    b_i64(&par[2], &after);
    b_i64(&par[3], &after);
    b_str(&par[4], after_pay, &len);
    b_i64(&par[5], &limit);
    return refund_rows(m, STORE_VOUCHER_PAYMENTS_SQL, par, "voucher payments", out, n);
}

static int my_voucher_payments(store_t *s, int64_t voucher_id, int64_t after_order,
                               const char *after_payment, size_t max, store_refund_t **out,
                               size_t *n)
{
    my_t *m = (my_t *)s;
    int64_t limit = max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max;
    RETRYING(m, 1, do_voucher_payments(m, voucher_id, after_order, after_payment, limit, out,
                                       n));
}

static int do_refund_lease(my_t *m, const char *pid, int64_t tries, int64_t now, int64_t until,
                           int claim)
{
    MYSQL_BIND par[5];
    unsigned long len;
    b_i64(&par[0], &until);
    b_str(&par[1], pid, &len);
    b_i64(&par[2], &tries);
    b_i64(&par[3], &now);
    b_str(&par[4], pid, &len);
    const char *sql = !claim ? STORE_LEASE_AGAIN_SQL
                      : tries == 0 ? STORE_LEASE_FIRST_SQL("IGNORE")
                                   : STORE_LEASE_NEXT_SQL;
    int64_t changed = 0;
    if (once(m, sql, par, NULL, &changed, "refund lease") != STORE_OK)
        return STORE_ERR;
    return changed > 0 ? STORE_OK : STORE_NOTFOUND;
}

/* A claim sent twice (a retry after a lost connection) finds its own tries moved on: not
 * taken, and the lease it may hold ends by itself. */
static int my_refund_lease(store_t *s, const char *payment_id, int tries, int64_t now,
                           int64_t until, int claim)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_refund_lease(m, payment_id, tries, now, until, claim));
}

/* A move's CAS of spec sp: with give_unit one multi-table UPDATE moves the status and
 * gives the voucher its unit back (it changes 2 rows or none); with frees the row moves
 * aside; a CAS from 4 that finds nothing in tb_voucher_order runs in
 * tb_voucher_order_cancelled. col is store.c's, never client input. 1 changed, 0 not, or
 * STORE_ERR. */
static int my_cas(my_t *m, const store_move_t *mv, const store_move_spec_t *sp)
{
    /* kind 'f': the cancelled row (by this move, or by one not moved aside) moves aside
     * (REPLACE: a row put there again after a replay is the same order) */
    static const char aside_sql[] =
        "REPLACE INTO tb_voucher_order_cancelled (id, user_id, voucher_id, pay_type, status, "
        "create_time, pay_time, use_time, refund_time, update_time) SELECT id, user_id, "
        "voucher_id, pay_type, status, create_time, pay_time, use_time, refund_time, "
        "update_time FROM tb_voucher_order WHERE id = ? AND status IN (4, 5, 6)";
    static const char del_sql[] = "DELETE FROM tb_voucher_order WHERE id = ?";
    char cas_sql[320];
    if (sp->give_unit)
        snprintf(cas_sql, sizeof cas_sql,
                 "UPDATE tb_voucher_order o JOIN tb_seckill_voucher v ON v.voucher_id = "
                 "o.voucher_id SET o.status = %d, o.%s = ?, v.stock = v.stock + 1, "
                 "v.update_time = ? WHERE o.id = ? AND o.status = %d", sp->to, sp->col, sp->from);
    else
        snprintf(cas_sql, sizeof cas_sql,
                 "UPDATE tb_voucher_order SET status = %d, %s = ?, update_time = ? "
                 "WHERE id = ? AND status = %d", sp->to, sp->col, sp->from);
    const store_arg_t args[3] = {{mv->now, 1}, {mv->now, 1}, {mv->order_id, 0}};
    int64_t n = 0;
    if (do_exec(m, cas_sql, args, 3, &n, 1) != STORE_OK)
        return STORE_ERR;
    int64_t copied = 0;
    if (sp->frees && do_exec(m, aside_sql, &args[2], 1, &copied, 1) != STORE_OK)
        return STORE_ERR;
    if (copied > 0 && do_exec(m, del_sql, &args[2], 1, &copied, 1) != STORE_OK)
        return STORE_ERR;
    if (n == 0 && sp->from == 4) {   /* a refund of an order moved aside */
        snprintf(cas_sql, sizeof cas_sql,
                 "UPDATE tb_voucher_order_cancelled SET status = %d, %s = ?, update_time = ? "
                 "WHERE id = ? AND status = %d", sp->to, sp->col, sp->from);
        if (do_exec(m, cas_sql, args, 3, &n, 1) != STORE_OK)
            return STORE_ERR;
    }
    return n > 0;
}

/* The 's' move (store.h): the payment's row 5 -> 6 and its order 5 -> 6, in whichever
 * table holds it, once none of its payments is left to refund. */
static int my_refund_sent(my_t *m, store_move_t *mv)
{
    store_payment_t p = {0};
    int rc = pay_get(m, mv->payment_id, &p);
    if (rc != STORE_OK)
        return rc;
    mv->pay_order = p.order_id;
    mv->was = p.status;
    mv->pay_status = p.status;
    if (p.status != 5)
        return STORE_OK;
    MYSQL_TIME t;
    mtime_of(m, mv->now, &t);
    MYSQL_BIND par[4];
    unsigned long len;
    b_time(&par[0], &t);
    b_str(&par[1], mv->payment_id, &len);
    if (once(m, STORE_PAY_SENT_SQL, par, NULL, NULL, "refund sent") != STORE_OK)
        return STORE_ERR;
    b_time(&par[1], &t);
    b_i64(&par[2], &p.order_id);
    b_i64(&par[3], &p.order_id);
    if (once(m, STORE_PAY_ORDER_SENT_SQL("tb_voucher_order"), par, NULL, NULL,
             "refund sent: the order") != STORE_OK ||
        once(m, STORE_PAY_ORDER_SENT_SQL("tb_voucher_order_cancelled"), par, NULL, NULL,
             "refund sent: the order") != STORE_OK)
        return STORE_ERR;
    mv->pay_status = 6;
    return STORE_OK;
}

/* The order's status, in whichever table holds it, into mv->was: STORE_OK, STORE_NOTFOUND
 * or STORE_ERR. */
static int my_status(my_t *m, store_move_t *mv)
{
    static const char status_sql[] = "SELECT status FROM tb_voucher_order WHERE id = ? "
                                     "UNION ALL SELECT status FROM tb_voucher_order_cancelled "
                                     "WHERE id = ?";
    const store_arg_t ids[2] = {{mv->order_id, 0}, {mv->order_id, 0}};
    int64_t n = 0;
    if (do_exec(m, status_sql, ids, 2, &n, 1) != STORE_OK)
        return STORE_ERR;
    mv->was = (int)n;
    return n > 0 ? STORE_OK : STORE_NOTFOUND;
}

/* One move (store.h store_move_t): the CAS, on none the order's status says why, and the
 * payment's row. */
static int do_move_one(my_t *m, store_move_t *mv)
{
    store_move_spec_t sp, alt;
    if (store__move_spec(mv->kind, &sp) != 0 || store__move_spec('r', &alt) != 0)
        return STORE_ERR;
    if (mv->kind == 's')
        return my_refund_sent(m, mv);
    if (mv->payment_id[0]) {
        store_payment_t p = {0};
        int rc = pay_get(m, mv->payment_id, &p);
        if (rc == STORE_ERR)
            return STORE_ERR;
        if (rc == STORE_OK) {   /* answered before: nothing changes */
            mv->pay_status = p.status;
            mv->pay_order = p.order_id;
            return my_status(m, mv);
        }
    }
    int changed = my_cas(m, mv, &sp);
    if (changed == STORE_ERR)
        return STORE_ERR;
    if (changed) {
        mv->was = sp.from;
    } else if (mv->kind == 'y' && (changed = my_cas(m, mv, &alt)) != 0) {
        if (changed == STORE_ERR)
            return STORE_ERR;
        mv->was = alt.from;
    } else {
        int rc = my_status(m, mv);
        if (rc != STORE_OK)
            return rc;
    }
    int row = store__pay_row(mv, changed, mv->was);
    if (row) {
        MYSQL_TIME t;
        mtime_of(m, mv->now, &t);
        int64_t st = row;
        MYSQL_BIND par[5];
        unsigned long len;
        b_str(&par[0], mv->payment_id, &len);
        b_i64(&par[1], &mv->order_id);
        b_i64(&par[2], &mv->amount);
        b_i64(&par[3], &st);
        b_time(&par[4], &t);
        if (once(m, STORE_PAY_INSERT_SQL, par, NULL, NULL, "payment row") != STORE_OK)
            return STORE_ERR;
        mv->pay_status = row;
        mv->pay_order = mv->order_id;
        mv->pay_new = 1;
    }
    return STORE_OK;
}

/* Every move in one transaction (a move with a payment, or one that frees its buyer, is
 * two statements or more). The whole may run twice (a retry after a lost connection): the
 * CAS and the payment row are the guard. */
static int do_orders_move(my_t *m, store_move_t *moves, size_t n)
{
    if (tx_begin(m, "order status: BEGIN") != STORE_OK)
        return STORE_ERR;
    for (size_t i = 0; i < n; i++) {
        moves[i].rc = do_move_one(m, &moves[i]);
        if (moves[i].rc == STORE_ERR)
            goto fail;
    }
    if (tx_commit(m, "order status: COMMIT") != STORE_OK)
        goto fail;
    return STORE_OK;
fail:
    tx_rollback(m);
    return STORE_ERR;
}

static int my_orders_move(store_t *s, store_move_t *moves, size_t n)
{
    my_t *m = (my_t *)s;
    RETRYING(m, 1, do_orders_move(m, moves, n));
}

#define MYSQL_OPS(name)                                                                 \
    {                                                                                   \
        .scheme = name, .open = my_open, .close = my_close, .ping = my_ping,            \
        .user_by_phone = my_user_by_phone, .user_create = my_user_create,               \
        .voucher_create = my_voucher_create, .voucher_get = my_voucher_get,             \
        .voucher_list = my_voucher_list, .seckill_ids = my_seckill_ids,                 \
        .orders_write = my_orders_write, .order_get = my_order_get,                     \
        .orders_of_user = my_orders_of_user, .voucher_counts = my_voucher_counts,       \
        .order_sync = my_order_sync, .voucher_orders = my_voucher_orders,               \
        .redis_epoch = my_redis_epoch, .exec = my_exec, .exec_orders = my_exec_orders,  \
        .voucher_buckets = my_voucher_buckets, .voucher_room = my_voucher_room,        \
        .shop_get = my_shop_get,                                                        \
        .shop_list = my_shop_list, .shop_create = my_shop_create,                       \
        .shop_update = my_shop_update,                                                  \
        .shop_types = my_shop_types,                                                    \
        .orders_move = my_orders_move, .payment_get = my_payment_get,                   \
        .refunds_due = my_refunds_due, .voucher_payments = my_voucher_payments,         \
        .refund_lease = my_refund_lease,                                                \
    }

const store_ops_t store_mysql_ops = MYSQL_OPS("mysql");
/* mariadb://... is the same backend under the other name. */
const store_ops_t store_mariadb_ops = MYSQL_OPS("mariadb");
