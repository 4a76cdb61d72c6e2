/* test_store.c -- the store contract (store.h), one suite run on every backend.
 *
 * The same tests run against SQLite (a temporary file) and, when MYSQL_URL names a server
 * (tests/run.py sets it when MariaDB is part of the run), against MariaDB (a fresh
 * database ut_<pid>_<n> per test, dropped afterwards); a backend is a few hooks below
 * (a fresh database, hold the orders table's lock, set the schema version, run SQL). Covered:
 * schema creation is idempotent and starts ids where the course's do, a newer schema is
 * refused; users (a duplicate phone returns the existing user); vouchers (normal vs flash
 * sale, NULL columns, long texts, status filter); the order batch (replay-safe, one order
 * per user and voucher, id collisions counted, stock decremented only by what was
 * inserted, generations fence stale orders, paging by voucher); lookups; the per-call
 * deadline under a held lock; a query that fails (its step named, no rows handed out, the
 * connection usable after); the sync order mode. What only one backend has is at the
 * end: SQLite URL forms; MariaDB URL forms, passwords, reconnects, engine and charset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <mysql.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "lab/lab_store.h"
#include "store/store.h"

typedef struct fx {
    char dir[64];   /* sqlite: the temp directory */
    char path[128]; /* sqlite: the file */
    char db[64];    /* mysql: the database */
    char url[640];
    store_t *s;
    sqlite3 *lock_db; /* sqlite: the session holding the lock */
    MYSQL *lock_my;   /* mysql: the session holding the lock */
} fx_t;

typedef struct backend {
    const char *name;
    int lock_timeout_ms;   /* store timeout for the deadline test */
    int (*fresh)(fx_t *f); /* f->url of a new empty database; 0 or -1 */
    void (*drop)(fx_t *f);
    void (*lock_orders)(fx_t *f); /* another session holds tb_voucher_order */
    void (*unlock_orders)(fx_t *f);
    void (*set_schema_version)(fx_t *f, int v);
    void (*exec)(fx_t *f, const char *q); /* q in another session of the database */
} backend_t;

static const backend_t *B; /* the backend of the group running */

static store_t *open_ok(const char *url, int timeout_ms)
{
    char err[512] = "";
    store_t *s = store_open(url, timeout_ms, err, sizeof err);
    if (!s)
        fail_msg("store_open(%s): %s", url, err);
    return s;
}

/* ---------------------------------------------------------------- SQLite */

static void sq_exec(const char *path, const char *q)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, q, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

static int sq_fresh(fx_t *f)
{
    snprintf(f->dir, sizeof f->dir, "/tmp/test_store.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/t.db", f->dir);
    snprintf(f->url, sizeof f->url, "sqlite:%s", f->path);
    return 0;
}

static void sq_drop(fx_t *f)
{
    char p[160];
    const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        snprintf(p, sizeof p, "%s%s", f->path, sfx[i]);
        unlink(p);
    }
    rmdir(f->dir);
}

static void sq_lock(fx_t *f)
{
    assert_int_equal(sqlite3_open(f->path, &f->lock_db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(f->lock_db, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
}

static void sq_unlock(fx_t *f)
{
    assert_int_equal(sqlite3_exec(f->lock_db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(f->lock_db);
    f->lock_db = NULL;
}

static void sq_set_version(fx_t *f, int v)
{
    char q[64];
    snprintf(q, sizeof q, "PRAGMA user_version = %d", v);
    sq_exec(f->path, q);
}

static void sq_exec_fx(fx_t *f, const char *q)
{
    sq_exec(f->path, q);
}

static const backend_t sqlite_backend = {"sqlite", 200,       sq_fresh,       sq_drop,
                                         sq_lock,  sq_unlock, sq_set_version, sq_exec_fx};

/* ---------------------------------------------------------------- MariaDB */

static struct {
    int ok;
    char user[128], pass[128], host[128];
    unsigned port;
    char base[512]; /* mysql://user:pass@host:port */
} srv;

static int seq;

/* An admin session of our own (plain libmariadb), for what the store does not offer. */
static MYSQL *admin(const char *db)
{
    MYSQL *m = mysql_init(NULL);
    assert_non_null(m);
    if (!mysql_real_connect(m, srv.host, srv.user, srv.pass, db, srv.port, NULL, 0))
        fail_msg("admin connect: %s", mysql_error(m));
    return m;
}

static void sql(MYSQL *m, const char *q)
{
    if (mysql_query(m, q) != 0)
        fail_msg("%s: %s", q, mysql_error(m));
    MYSQL_RES *r = mysql_store_result(m);
    if (r)
        mysql_free_result(r);
}

static long long sql_int(MYSQL *m, const char *q)
{
    if (mysql_query(m, q) != 0)
        fail_msg("%s: %s", q, mysql_error(m));
    MYSQL_RES *r = mysql_store_result(m);
    assert_non_null(r);
    MYSQL_ROW row = mysql_fetch_row(r);
    long long v = row && row[0] ? atoll(row[0]) : -1;
    mysql_free_result(r);
    return v;
}

static int my_fresh(fx_t *f)
{
    if (!srv.ok)
        return -1;
    snprintf(f->db, sizeof f->db, "ut_%d_%d", (int)getpid(), ++seq);
    snprintf(f->url, sizeof f->url, "%s/%s", srv.base, f->db);
    return 0;
}

static void my_drop(fx_t *f)
{
    MYSQL *m = admin(NULL);
    char q[128];
    snprintf(q, sizeof q, "DROP DATABASE IF EXISTS `%s`", f->db);
    sql(m, q);
    mysql_close(m);
}

static void my_lock(fx_t *f)
{
    f->lock_my = admin(f->db);
    sql(f->lock_my, "LOCK TABLES tb_voucher_order WRITE");
}

static void my_unlock(fx_t *f)
{
    sql(f->lock_my, "UNLOCK TABLES");
    mysql_close(f->lock_my);
    f->lock_my = NULL;
}

static void my_set_version(fx_t *f, int v)
{
    MYSQL *m = admin(f->db);
    char q[96];
    snprintf(q, sizeof q, "UPDATE schema_version SET version = %d", v);
    sql(m, q);
    mysql_close(m);
}

static void my_exec_fx(fx_t *f, const char *q)
{
    MYSQL *m = admin(f->db);
    sql(m, q);
    mysql_close(m);
}

static const backend_t mysql_backend = {"mysql", 1000,      my_fresh,       my_drop,
                                        my_lock, my_unlock, my_set_version, my_exec_fx};

/* MYSQL_URL = mysql://user:pass@host:port/anything; without it the MariaDB group skips. */
static int mysql_server(void)
{
    const char *u = getenv("MYSQL_URL");
    if (!u || !*u)
        return 0;
    char db[64];
    if (sscanf(u, "mysql://%127[^:]:%127[^@]@%127[^:]:%u/%63s", srv.user, srv.pass, srv.host,
               &srv.port, db) != 5) {
        fprintf(stderr, "MYSQL_URL not of the form mysql://user:pass@host:port/db: %s\n", u);
        return -1;
    }
    snprintf(srv.base, sizeof srv.base, "mysql://%s:%s@%s:%u", srv.user, srv.pass, srv.host,
             srv.port);
    srv.ok = 1;
    return 0;
}

/* ---------------------------------------------------------------- fixture */

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (B->fresh(f) < 0) {
        free(f);
        *state = NULL;
        return 0;
    }
    f->s = open_ok(f->url, 2000);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    if (!f)
        return 0;
    store_close(f->s);
    B->drop(f);
    free(f);
    return 0;
}

static int group_sqlite(void **state)
{
    (void)state;
    B = &sqlite_backend;
    return 0;
}

static int group_mysql(void **state)
{
    (void)state;
    B = &mysql_backend;
    return 0;
}

/* A test whose backend is not there (MariaDB without MYSQL_URL) is skipped. */
#define FX(f)                                                                                      \
    fx_t *f = *state;                                                                              \
    if (!(f))                                                                                      \
    skip()

static int64_t create_seckill_at(store_t *s, int64_t shop, int64_t stock, int64_t begin,
                                 int64_t end)
{
    store_voucher_t v = {0};
    v.shop_id = shop;
    v.title = "100元代金券";
    v.sub_title = "周一至周五均可使用";
    v.rules = "全场通用\\n无需预约";
    v.pay_value = 8000;
    v.actual_value = 10000;
    v.type = 1;
    v.status = 1;
    v.is_seckill = 1;
    v.stock = stock;
    v.begin_time = begin;
    v.end_time = end;
    assert_int_equal(store_voucher_create(s, &v), STORE_OK);
    assert_true(v.id > 0);
    return v.id;
}

static int64_t create_seckill(store_t *s, int64_t shop, int64_t stock)
{
    return create_seckill_at(s, shop, stock, 1700000000, 1700086400);
}

static store_order_t mk(int64_t id, int64_t user, int64_t voucher, int64_t t)
{
    store_order_t o = {0};
    o.id = id;
    o.user_id = user;
    o.voucher_id = voucher;
    o.create_time = t;
    return o;
}

static void test_schema_idempotent(void **state)
{
    FX(f);
    /* A second and third open of the same database (schema already there) work, and the
     * first ids are the course's: user 1010, voucher 10. */
    store_t *s2 = open_ok(f->url, 2000);
    store_close(s2);
    s2 = open_ok(f->url, 2000);
    store_user_t u;
    assert_int_equal(store_user_create(s2, "13800000001", "user_a", &u), STORE_OK);
    assert_int_equal(u.id, 1010);
    assert_int_equal(create_seckill(s2, 1, 5), 10);
    store_close(s2);
    assert_int_equal(store_ping(f->s), STORE_OK);

    /* The schema run again (version reset by hand): nothing changes, nothing fails. */
    B->set_schema_version(f, 0);
    s2 = open_ok(f->url, 2000);
    assert_int_equal(store_user_by_phone(s2, "13800000001", &u), STORE_OK);
    assert_int_equal(u.id, 1010);
    assert_int_equal(store_user_create(s2, "13800000002", "user_b", &u), STORE_OK);
    assert_int_equal(u.id, 1011);
    store_close(s2);

    /* A version-7 database holds either side table (two development builds): both reach
     * 8 with both tables (a read of each table works, not STORE_ERR). */
    static const char *const drops[2] = {"DROP TABLE tb_voucher_payment",
                                         "DROP TABLE tb_voucher_order_cancelled"};
    for (int i = 0; i < 2; i++) {
        B->exec(f, drops[i]);
        B->set_schema_version(f, 7);
        s2 = open_ok(f->url, 2000);
        store_payment_t p;
        store_order_t o;
        assert_int_equal(store_payment_get(s2, "pay-none", &p), STORE_NOTFOUND);
        assert_int_equal(store_order_get(s2, 987654321, &o), STORE_NOTFOUND);
        store_close(s2);
    }

    /* A version-8 database reaches 9 with tb_refund_lease. */
    B->exec(f, "DROP TABLE tb_refund_lease");
    B->set_schema_version(f, 8);
    s2 = open_ok(f->url, 2000);
    store_refund_t *due = NULL;
    size_t ndue = 0;
    assert_int_equal(store_refunds_due(s2, 1700000000, 10, &due, &ndue), STORE_OK);
    assert_int_equal(ndue, 0);
    store_close(s2);

    /* A database from a newer build is refused. */
    B->set_schema_version(f, 99);
    char err[512] = "";
    assert_null(store_open(f->url, 2000, err, sizeof err));
    assert_non_null(strstr(err, "newer"));
}

/* A flash-sale voucher of stock 60 to create, with the side settings left to the caller. */
static store_voucher_t side_voucher(const char *title)
{
    store_voucher_t v = {0};
    v.shop_id = 1;
    v.title = (char *)title;
    v.type = 1;
    v.status = 1;
    v.is_seckill = 1;
    v.stock = 60;
    v.begin_time = 1700000000;
    v.end_time = 1700086400;
    return v;
}

/* A voucher's stock bucket count survives in SQL (tb_seckill_buckets), written in the
 * create's transaction; no row reads as 1. */
static void test_voucher_buckets(void **state)
{
    FX(f);
    store_voucher_t v = side_voucher("hot");
    v.buckets = 6;
    assert_int_equal(store_voucher_create(f->s, &v), STORE_OK);
    int64_t plain = create_seckill(f->s, 1, 5);
    int k = 0;
    assert_int_equal(store_voucher_buckets(f->s, v.id, &k), STORE_OK);
    assert_int_equal(k, 6);
    assert_int_equal(store_voucher_buckets(f->s, plain, &k), STORE_OK);
    assert_int_equal(k, 1);
    assert_int_equal(store_voucher_buckets(f->s, 999999, &k), STORE_OK);
    assert_int_equal(k, 1);
    assert_int_equal(store_voucher_buckets(f->s, v.id, NULL), STORE_ERR);
}

/* A voucher's waiting room survives in SQL (tb_seckill_room), written in the create's
 * transaction; no row reads as none. */
static void test_voucher_room(void **state)
{
    FX(f);
    store_voucher_t v = side_voucher("queued");
    v.room = (store_room_t){.admit_per_s = 1000, .pass_ttl_s = 90, .bot_gate = 1};
    assert_int_equal(store_voucher_create(f->s, &v), STORE_OK);
    int64_t plain = create_seckill(f->s, 1, 5);
    store_room_t room;
    assert_int_equal(store_voucher_room(f->s, v.id, &room), STORE_OK);
    assert_int_equal(room.admit_per_s, 1000);
    assert_int_equal(room.pass_ttl_s, 90);
    assert_int_equal(room.bot_gate, 1);
    assert_int_equal(store_voucher_room(f->s, plain, &room), STORE_OK);
    assert_int_equal(room.admit_per_s, 0);
    assert_int_equal(store_voucher_room(f->s, 999999, &room), STORE_OK);
    assert_int_equal(room.admit_per_s, 0);
    assert_int_equal(store_voucher_room(f->s, v.id, NULL), STORE_ERR);
}

static void test_users(void **state)
{
    FX(f);
    store_user_t u, u2;
    assert_int_equal(store_user_by_phone(f->s, "13912345678", &u), STORE_NOTFOUND);
    assert_int_equal(store_user_create(f->s, "13912345678", "user_abcdefghij", &u), STORE_OK);
    assert_int_equal(u.id, 1010);
    assert_string_equal(u.phone, "13912345678");
    assert_string_equal(u.nick_name, "user_abcdefghij");
    assert_string_equal(u.icon, "");
    assert_int_equal(store_user_by_phone(f->s, "13912345678", &u2), STORE_OK);
    assert_int_equal(u2.id, u.id);
    assert_int_equal(store_user_create(f->s, "13912345678", "user_other", &u2), STORE_OK);
    assert_int_equal(u2.id, 1010);
    assert_string_equal(u2.nick_name, "user_abcdefghij");
    assert_int_equal(store_user_create(f->s, "13912345679", "user_2", &u2), STORE_OK);
    assert_int_equal(u2.id, 1011);
}

static void test_vouchers(void **state)
{
    FX(f);
    store_voucher_t v = {0};
    v.shop_id = 1;
    v.title = "50元代金券";
    v.sub_title = NULL; /* a NULL column stays NULL */
    v.rules = "全场通用";
    v.pay_value = 4750;
    v.actual_value = 5000;
    v.type = 0;
    v.status = 1;
    assert_int_equal(store_voucher_create(f->s, &v), STORE_OK);
    assert_int_equal(v.id, 10);
    int64_t sk = create_seckill(f->s, 1, 100);
    assert_int_equal(sk, 11);
    store_voucher_t off = v;
    off.title = "off shelf";
    off.status = 2;
    assert_int_equal(store_voucher_create(f->s, &off), STORE_OK);
    assert_int_equal(off.id, 12);
    store_voucher_t other = v;
    other.shop_id = 2;
    assert_int_equal(store_voucher_create(f->s, &other), STORE_OK);

    store_voucher_t *list;
    size_t n;
    assert_int_equal(store_voucher_list(f->s, 1, &list, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, 10);
    assert_int_equal(list[0].is_seckill, 0);
    assert_string_equal(list[0].title, "50元代金券");
    assert_null(list[0].sub_title);
    assert_string_equal(list[0].rules, "全场通用");
    assert_int_equal(list[0].pay_value, 4750);
    assert_int_equal(list[1].id, 11);
    assert_int_equal(list[1].is_seckill, 1);
    assert_int_equal(list[1].type, 1);
    assert_int_equal(list[1].stock, 100);
    assert_int_equal(list[1].begin_time, 1700000000);
    assert_int_equal(list[1].end_time, 1700086400);
    assert_string_equal(list[1].sub_title, "周一至周五均可使用");
    assert_string_equal(list[1].rules, "全场通用\\n无需预约");
    store_voucher_list_free(list, n);

    assert_int_equal(store_voucher_list(f->s, 999, &list, &n), STORE_OK);
    assert_int_equal(n, 0);
    store_voucher_list_free(list, n);

    store_voucher_t g;
    assert_int_equal(store_voucher_get(f->s, 12, &g), STORE_OK);
    assert_int_equal(g.status, 2);
    assert_string_equal(g.title, "off shelf");
    assert_int_equal(g.is_seckill, 0);
    store_voucher_clear(&g);
    assert_int_equal(store_voucher_get(f->s, 11, &g), STORE_OK);
    assert_int_equal(g.is_seckill, 1);
    assert_int_equal(g.stock, 100);
    store_voucher_clear(&g);
    assert_int_equal(store_voucher_get(f->s, 4242, &g), STORE_NOTFOUND);

    /* The longest texts the columns take (utf8mb4, 3-byte characters). */
    char title[255 * 3 + 1] = "", rules[1024 * 3 + 1] = "";
    for (int i = 0; i < 255; i++)
        strcat(title, "券");
    for (int i = 0; i < 1024; i++)
        strcat(rules, "规");
    store_voucher_t big = v;
    big.title = title;
    big.rules = rules;
    assert_int_equal(store_voucher_create(f->s, &big), STORE_OK);
    assert_int_equal(store_voucher_get(f->s, big.id, &g), STORE_OK);
    assert_string_equal(g.title, title);
    assert_string_equal(g.rules, rules);
    store_voucher_clear(&g);

    int64_t *ids;
    assert_int_equal(store_seckill_ids(f->s, &ids, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 11);
    free(ids);

    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, 11, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 0);
    assert_int_equal(stock, 100);
    assert_int_equal(store_voucher_counts(f->s, 10, &orders, &stock), STORE_NOTFOUND);
}

/* A batch of runs: orders of one voucher admitted in one second come in runs, which the
 * SQLite backend inserts as statements sharing the voucher and the time; every row must
 * still get its own voucher and time, across a run's end inside a statement's span. */
static void test_orders_runs(void **state)
{
    FX(f);
    int64_t a = create_seckill(f->s, 1, 1000);
    int64_t b = create_seckill(f->s, 1, 1000);
    enum { N = 700 };
    static const struct { int n; int voucher_b; int dt; } runs[] = {
        {300, 0, 0}, {1, 0, 1}, {130, 0, 2}, {5, 1, 2}, {128, 1, 2}, {1, 0, 2}, {135, 0, 3}};
    store_order_t batch[N];
    int i = 0;
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++)
        for (int j = 0; j < runs[r].n; j++, i++)
            batch[i] = mk(7000000 + i, 60000 + i, runs[r].voucher_b ? b : a,
                          1700000100 + runs[r].dt);
    assert_int_equal(i, N);
    size_t ins = 0, conf = 99;
    assert_int_equal(store_orders_write(f->s, batch, N, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, N);
    assert_int_equal(conf, 0);
    for (i = 0; i < N; i++) {
        store_order_t o;
        assert_int_equal(store_order_get(f->s, batch[i].id, &o), STORE_OK);
        assert_int_equal(o.user_id, batch[i].user_id);
        assert_int_equal(o.voucher_id, batch[i].voucher_id);
        assert_int_equal(o.create_time, batch[i].create_time);
    }
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, b, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 133);
    assert_int_equal(stock, 1000 - 133);
    assert_int_equal(store_voucher_counts(f->s, a, &orders, &stock), STORE_OK);
    assert_int_equal(orders, N - 133);
    assert_int_equal(stock, 1000 - (N - 133));
}

static void test_orders_idempotent(void **state)
{
    FX(f);
    int64_t a = create_seckill(f->s, 1, 1000);
    int64_t b = create_seckill(f->s, 1, 10);
    /* 1000 = 512 + 256 + 128 + 64 + 32 + 8: six multi-row statements. */
    enum { N = 1000 };
    store_order_t *batch = calloc(N, sizeof *batch);
    int64_t t0 = 1700000100;
    for (int i = 0; i < N; i++) /* ids not in order: the backend sorts them */
        batch[i] = mk(1000000 + (i * 7919) % N, 5000 + i, i % 3 == 0 ? b : a, t0 + i % 7);
    size_t ins = 99, conf = 99;
    assert_int_equal(store_orders_write(f->s, batch, N, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, N);
    assert_int_equal(conf, 0);
    /* The same batch again: a replay, nothing inserted, stock untouched. */
    assert_int_equal(store_orders_write(f->s, batch, N, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 0);
    assert_int_equal(conf, 0);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, a, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 666);
    assert_int_equal(stock, 334);
    /* 334 orders for b, which has stock 10: SQL stock goes negative (logged), the orders
     * are never refused. */
    assert_int_equal(store_voucher_counts(f->s, b, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 334);
    assert_int_equal(stock, -324);

    /* Half old, half new: only the new ones count. */
    store_order_t mixed[4] = {batch[0], batch[1], mk(3000001, 8001, a, t0),
                              mk(3000002, 8002, a, t0)};
    assert_int_equal(store_orders_write(f->s, mixed, 4, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 2);
    assert_int_equal(conf, 0);

    /* A batch that repeats an order inside itself counts it once. */
    store_order_t twice[3] = {mk(2000001, 9001, a, t0), mk(2000001, 9001, a, t0),
                              mk(2000002, 9002, a, t0)};
    assert_int_equal(store_orders_write(f->s, twice, 3, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 2);
    assert_int_equal(conf, 0);
    assert_int_equal(store_voucher_counts(f->s, a, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 670);
    assert_int_equal(stock, 330);

    assert_int_equal(store_orders_write(f->s, batch, 0, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 0);

    store_order_t o;
    assert_int_equal(store_order_get(f->s, batch[1].id, &o), STORE_OK);
    assert_int_equal(o.user_id, batch[1].user_id);
    assert_int_equal(o.voucher_id, a);
    assert_int_equal(o.status, 1);
    assert_int_equal(o.create_time, batch[1].create_time);
    assert_int_equal(store_order_get(f->s, 42, &o), STORE_NOTFOUND);
    free(batch);

    /* Paging through a voucher's orders in id order. */
    int64_t after = 0, last = 0;
    size_t total = 0, n;
    store_order_t *page;
    for (;;) {
        assert_int_equal(store_voucher_orders(f->s, b, after, 100, &page, &n), STORE_OK);
        for (size_t i = 0; i < n; i++) {
            assert_true(page[i].id > last);
            assert_int_equal(page[i].voucher_id, b);
            last = page[i].id;
        }
        total += n;
        if (n)
            after = page[n - 1].id;
        free(page);
        if (n < 100)
            break;
    }
    assert_int_equal(total, 334);
}

static void test_orders_fenced_by_epoch(void **state)
{
    FX(f);
    int64_t a = create_seckill(f->s, 1, 100);
    int64_t ep = -1;
    assert_int_equal(store_redis_epoch(f->s, a, 0, &ep), STORE_OK);
    assert_int_equal(ep, 0);
    assert_int_equal(store_redis_epoch(f->s, 999999, 1, &ep), STORE_NOTFOUND);
    int64_t t0 = 1700000100;
    store_order_t o0 = mk(3000001, 7001, a, t0);
    size_t ins = 9, conf = 9, fen = 9;
    assert_int_equal(store_orders_write(f->s, &o0, 1, &ins, &conf, &fen), STORE_OK);
    assert_int_equal(ins, 1);
    assert_int_equal(fen, 0);
    assert_int_equal(store_redis_epoch(f->s, a, 1, &ep), STORE_OK);
    assert_int_equal(ep, 1);
    assert_int_equal(store_redis_epoch(f->s, a, 0, &ep), STORE_OK);
    assert_int_equal(ep, 1);
    /* generation 0 after the bump: refused, stock untouched */
    store_order_t batch[3] = {mk(3000002, 7002, a, t0), mk(3000003, 7003, a, t0),
                              mk(3000004, 7004, a, t0)};
    batch[1].epoch = 1;
    batch[2].epoch = STORE_EPOCH_ANY;
    assert_int_equal(store_orders_write(f->s, batch, 3, &ins, &conf, &fen), STORE_OK);
    assert_int_equal(ins, 2);
    assert_int_equal(conf, 0);
    assert_int_equal(fen, 1);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, a, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 3);
    assert_int_equal(stock, 97);
    store_order_t got;
    assert_int_equal(store_order_get(f->s, 3000002, &got), STORE_NOTFOUND);
}

static void test_orders_dup_and_conflict(void **state)
{
    FX(f);
    int64_t v = create_seckill(f->s, 1, 100);
    int64_t t = clock_wall_s();
    store_order_t first[2] = {mk(7001, 1010, v, t), mk(7002, 1011, v, t)};
    size_t ins, conf;
    assert_int_equal(store_orders_write(f->s, first, 2, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 2);

    store_order_t dup = mk(7003, 1010, v, t);
    assert_int_equal(store_orders_write(f->s, &dup, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 0);
    assert_int_equal(conf, 0);
    store_order_t o;
    assert_int_equal(store_order_get(f->s, 7003, &o), STORE_NOTFOUND);

    store_order_t coll[2] = {mk(7001, 2222, v, t), mk(7004, 1012, v, t)};
    assert_int_equal(store_orders_write(f->s, coll, 2, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
    assert_int_equal(conf, 1);
    assert_int_equal(store_order_get(f->s, 7001, &o), STORE_OK);
    assert_int_equal(o.user_id, 1010);

    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 3);
    assert_int_equal(stock, 97);

    store_order_t lone = mk(7100, 1010, 987654, t);
    assert_int_equal(store_orders_write(f->s, &lone, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
}

static void test_orders_of_user(void **state)
{
    FX(f);
    int64_t v1 = create_seckill(f->s, 1, 10);
    int64_t v2 = create_seckill(f->s, 1, 10);
    int64_t v3 = create_seckill(f->s, 1, 10);
    store_order_t b[4] = {mk(300, 1010, v1, 1700000000), mk(301, 1010, v2, 1700000500),
                          mk(302, 1010, v3, 1700000200), mk(303, 1099, v1, 1700000900)};
    size_t ins, conf;
    assert_int_equal(store_orders_write(f->s, b, 4, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 4);
    store_order_t *out;
    size_t n;
    assert_int_equal(store_orders_of_user(f->s, 1010, 10, &out, &n), STORE_OK);
    assert_int_equal(n, 3);
    assert_int_equal(out[0].id, 301);
    assert_int_equal(out[1].id, 302);
    assert_int_equal(out[2].id, 300);
    assert_int_equal(out[0].create_time, 1700000500);
    free(out);
    assert_int_equal(store_orders_of_user(f->s, 1010, 2, &out, &n), STORE_OK);
    assert_int_equal(n, 2);
    free(out);
    assert_int_equal(store_orders_of_user(f->s, 5555, 10, &out, &n), STORE_OK);
    assert_int_equal(n, 0);
    free(out);
}

static void test_sync_order(void **state)
{
    FX(f);
    int64_t now = clock_wall_s();
    int64_t v = create_seckill_at(f->s, 1, 2, now - 3600, now + 3600);
    int64_t later = create_seckill_at(f->s, 1, 2, now + 3600, now + 7200);
    int64_t over = create_seckill_at(f->s, 1, 2, now - 7200, now - 3600);
    int r = -1;
    store_order_t o = mk(100, 2001, v, now);
    assert_int_equal(store_order_sync(f->s, &o, &r), STORE_OK);
    assert_int_equal(r, STORE_SYNC_OK);
    o = mk(101, 2001, v, now);
    assert_int_equal(store_order_sync(f->s, &o, &r), STORE_OK);
    assert_int_equal(r, STORE_SYNC_DUPLICATE);
    o = mk(102, 2002, v, now);
    assert_int_equal(store_order_sync(f->s, &o, &r), STORE_OK);
    assert_int_equal(r, STORE_SYNC_OK);
    o = mk(103, 2003, v, now);
    assert_int_equal(store_order_sync(f->s, &o, &r), STORE_OK);
    assert_int_equal(r, STORE_SYNC_SOLD_OUT);
    o = mk(104, 2003, later, now);
    assert_int_equal(store_order_sync(f->s, &o, &r), STORE_OK);
    assert_int_equal(r, STORE_SYNC_NOT_STARTED);
    o = mk(105, 2003, over, now);
    assert_int_equal(store_order_sync(f->s, &o, &r), STORE_OK);
    assert_int_equal(r, STORE_SYNC_ENDED);
    o = mk(106, 2003, 999999, now);
    assert_int_equal(store_order_sync(f->s, &o, &r), STORE_OK);
    assert_int_equal(r, STORE_SYNC_NO_VOUCHER);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 2);
    assert_int_equal(stock, 0);
}

static int order_status(store_t *s, int64_t id)
{
    store_order_t o;
    assert_int_equal(store_order_get(s, id, &o), STORE_OK);
    return o.status;
}

/* The lifecycle's moves of a batch in one transaction (the order writer's events): in
 * array order, each a CAS -- a cancel replayed in the same batch gives no second unit, a
 * refund after its cancel in the same batch sees status 4 (and makes it 5), an unknown order is
 * NOTFOUND without failing the others; the same batch again changes nothing; a bad kind
 * fails the whole batch before anything is applied. */
static void test_orders_move_batch(void **state)
{
    FX(f);
    int64_t v = create_seckill(f->s, 1, 5);
    store_order_t batch[3] = {mk(8100, 9001, v, 1700000100), mk(8101, 9002, v, 1700000100),
                              mk(8102, 9003, v, 1700000100)};
    size_t ins = 0, conf = 0;
    assert_int_equal(store_orders_write(f->s, batch, 3, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 3);
    store_move_t mv[6] = {{8100, 1700000200, 'c', 0, 0}, {8100, 1700000200, 'c', 0, 0},
                          {8101, 1700000200, 'p', 0, 0}, {8100, 1700000300, 'r', 0, 0},
                          {424242, 1700000200, 'c', 0, 0}, {8102, 1700000200, 'r', 0, 0}};
    static const int rc1[6] = {STORE_OK, STORE_OK, STORE_OK, STORE_OK, STORE_NOTFOUND,
                               STORE_OK};
    static const int was1[6] = {1, 4, 1, 4, 0, 1};
    assert_int_equal(store_orders_move(f->s, mv, 6), STORE_OK);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(mv[i].rc, rc1[i]);
        assert_int_equal(mv[i].was, was1[i]);
    }
    assert_int_equal(order_status(f->s, 8100), 5);   /* 退款中: 6 once the refund is sent */
    assert_int_equal(order_status(f->s, 8101), 2);
    assert_int_equal(order_status(f->s, 8102), 1);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 2);
    assert_int_equal(stock, 5 - 2);
    /* replayed whole (a writer's batch after a crash): nothing moves */
    static const int was2[6] = {5, 5, 2, 5, 0, 1};
    assert_int_equal(store_orders_move(f->s, mv, 6), STORE_OK);
    for (int i = 0; i < 6; i++)
        assert_int_equal(mv[i].was, was2[i]);
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(stock, 5 - 2);
    /* a bad kind: nothing of the batch applied */
    store_move_t bad[2] = {{8102, 1700000400, 'c', 0, 0}, {8102, 1700000400, 'x', 0, 0}};
    assert_int_equal(store_orders_move(f->s, bad, 2), STORE_ERR);
    assert_int_equal(bad[0].rc, STORE_ERR);
    assert_int_equal(order_status(f->s, 8102), 1);
    assert_int_equal(store_orders_move(f->s, bad, 1), STORE_OK);
    assert_int_equal(order_status(f->s, 8102), 4);
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 1);
    assert_int_equal(stock, 5 - 1);
}

/* --cancel-frees-buyer's move ('f', store_order_cancel_free): the cancel's CAS and unit,
 * and the row moved to tb_voucher_order_cancelled in the same transaction; the same move
 * again changes nothing; the buyer's next order fits in UNIQUE(user, voucher) while a
 * replay of the moved order in the same batch is not written again; reads see both
 * tables; a late payment's refund moves 4 -> 5 and, sent, 5 -> 6 where the order is,
 * with its payment row. */
static void test_orders_move_frees(void **state)
{
    FX(f);
    int64_t v = create_seckill(f->s, 1, 5);
    store_order_t first = mk(8200, 9101, v, 1700000100);
    size_t ins = 0, conf = 0;
    assert_int_equal(store_orders_write(f->s, &first, 1, &ins, &conf, NULL), STORE_OK);
    int was = 0;
    assert_int_equal(store_order_cancel_free(f->s, 8200, 1700000200, &was), STORE_OK);
    assert_int_equal(was, 1);
    assert_int_equal(order_status(f->s, 8200), 4);
    assert_int_equal(store_order_cancel_free(f->s, 8200, 1700000200, &was), STORE_OK);
    assert_int_equal(was, 4);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 0);
    assert_int_equal(stock, 5);
    store_order_t batch[2] = {mk(8200, 9101, v, 1700000100), mk(8201, 9101, v, 1700000300)};
    assert_int_equal(store_orders_write(f->s, batch, 2, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
    assert_int_equal(conf, 0);
    assert_int_equal(order_status(f->s, 8200), 4);
    assert_int_equal(order_status(f->s, 8201), 1);
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 1);
    assert_int_equal(stock, 4);
    store_order_t *list = NULL;
    size_t n = 0;
    assert_int_equal(store_orders_of_user(f->s, 9101, 10, &list, &n), STORE_OK);
    assert_int_equal(n, 2);
    free(list);
    assert_int_equal(store_voucher_orders(f->s, v, 0, 10, &list, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, 8200);
    assert_int_equal(list[0].status, 4);
    assert_int_equal(list[1].id, 8201);
    free(list);
    /* a late payment of the order moved aside: refund due (4 -> 5) with its payment row,
     * then sent (5 -> 6), both where the order is */
    store_move_t r = {.order_id = 8200, .now = 1700000400, .kind = 'r', .amount = 5000,
                      .pay_status = 5};
    snprintf(r.payment_id, sizeof r.payment_id, "pay-8200");
    assert_int_equal(store_orders_move(f->s, &r, 1), STORE_OK);
    assert_int_equal(r.rc, STORE_OK);
    assert_int_equal(r.was, 4);
    assert_int_equal(r.pay_new, 1);
    assert_int_equal(order_status(f->s, 8200), 5);
    store_move_t sent = {.order_id = 8200, .now = 1700000450, .kind = 's'};
    snprintf(sent.payment_id, sizeof sent.payment_id, "pay-8200");
    assert_int_equal(store_orders_move(f->s, &sent, 1), STORE_OK);
    assert_int_equal(sent.rc, STORE_OK);
    assert_int_equal(sent.pay_status, 6);
    assert_int_equal(order_status(f->s, 8200), 6);
    store_payment_t p;
    assert_int_equal(store_payment_get(f->s, "pay-8200", &p), STORE_OK);
    assert_int_equal(p.order_id, 8200);
    assert_int_equal(p.status, 6);
    assert_int_equal(p.refund_time, 1700000450);
    /* the same payment again (a replay) changes nothing and says what its row holds */
    assert_int_equal(store_orders_move(f->s, &r, 1), STORE_OK);
    assert_int_equal(r.pay_new, 0);
    assert_int_equal(r.pay_status, 6);
    assert_int_equal(r.was, 6);
    /* a refund without a payment row, of an order aside: 4 -> 5 there too */
    store_order_t third = mk(8202, 9102, v, 1700000100);
    assert_int_equal(store_orders_write(f->s, &third, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(store_order_cancel_free(f->s, 8202, 1700000200, &was), STORE_OK);
    assert_int_equal(store_order_refund(f->s, 8202, 1700000400, &was), STORE_OK);
    assert_int_equal(was, 4);
    assert_int_equal(order_status(f->s, 8202), 5);
    /* a cancel that does not free stays in the course's table (the default) */
    assert_int_equal(store_order_cancel(f->s, 8201, 1700000500, &was), STORE_OK);
    assert_int_equal(was, 1);
    assert_int_equal(store_orders_of_user(f->s, 9101, 10, &list, &n), STORE_OK);
    assert_int_equal(n, 2);
    free(list);
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 0);
    assert_int_equal(stock, 5);
}

/* Sync mode's refund sender's reads and lease (store_refunds_due, store_refund_lease): a
 * payment at 5 is due until a claim takes it; a second claim at the same tries loses; the
 * holder's back-off makes it due again at its end, and a claim then takes it as tries + 1;
 * once sent (6) it is neither due nor claimed. The rebuild's store_voucher_payments pages
 * a voucher's payments of both order tables by (order, payment). */
static void test_refund_lease(void **state)
{
    FX(f);
    int64_t v = create_seckill(f->s, 1, 5);
    store_order_t o[2] = {mk(8300, 9201, v, 1700000100), mk(8301, 9202, v, 1700000100)};
    size_t ins = 0, conf = 0;
    assert_int_equal(store_orders_write(f->s, o, 2, &ins, &conf, NULL), STORE_OK);
    int was = 0;
    assert_int_equal(store_order_cancel(f->s, 8300, 1700000150, &was), STORE_OK);
    assert_int_equal(store_order_cancel_free(f->s, 8301, 1700000150, &was), STORE_OK);
    /* sync mode's payments of the two cancelled orders, and a second one of 8300: 5 */
    static const char *const pids[3] = {"pay-b", "pay-a", "pay-c"};
    static const int64_t of[3] = {8300, 8300, 8301};
    for (int i = 0; i < 3; i++) {
        store_move_t y = {.order_id = of[i], .now = 1700000200, .kind = 'y', .amount = 500};
        snprintf(y.payment_id, sizeof y.payment_id, "%s", pids[i]);
        assert_int_equal(store_orders_move(f->s, &y, 1), STORE_OK);
        assert_int_equal(y.pay_status, 5);
    }
    store_refund_t *d = NULL;
    size_t n = 0;
    assert_int_equal(store_refunds_due(f->s, 1700000300, 10, &d, &n), STORE_OK);
    assert_int_equal(n, 3);
    assert_int_equal(d[0].tries, 0);
    assert_int_equal(d[0].status, 5);
    free(d);
    assert_int_equal(store_refund_lease(f->s, "pay-a", 0, 1700000300, 1700000315, 1), STORE_OK);
    assert_int_equal(store_refund_lease(f->s, "pay-a", 0, 1700000300, 1700000315, 1),
                     STORE_NOTFOUND);   /* another sender: too late */
    assert_int_equal(store_refunds_due(f->s, 1700000300, 10, &d, &n), STORE_OK);
    assert_int_equal(n, 2);   /* pay-a is leased */
    free(d);
    /* its send failed: due again after the back-off, taken as tries 2 once */
    assert_int_equal(store_refund_lease(f->s, "pay-a", 1, 1700000301, 1700000302, 0), STORE_OK);
    assert_int_equal(store_refunds_due(f->s, 1700000301, 10, &d, &n), STORE_OK);
    assert_int_equal(n, 2);
    free(d);
    assert_int_equal(store_refund_lease(f->s, "pay-a", 1, 1700000301, 1700000320, 1),
                     STORE_NOTFOUND);   /* not yet */
    assert_int_equal(store_refunds_due(f->s, 1700000302, 10, &d, &n), STORE_OK);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        if (strcmp(d[i].payment_id, "pay-a") == 0)
            assert_int_equal(d[i].tries, 1);
    free(d);
    assert_int_equal(store_refund_lease(f->s, "pay-a", 1, 1700000302, 1700000320, 1), STORE_OK);
    assert_int_equal(store_refund_lease(f->s, "pay-a", 1, 1700000302, 1700000320, 1),
                     STORE_NOTFOUND);
    /* sent: 6, not due, not claimed even with its lease over */
    store_move_t sent = {.order_id = 8300, .now = 1700000310, .kind = 's'};
    snprintf(sent.payment_id, sizeof sent.payment_id, "pay-a");
    assert_int_equal(store_orders_move(f->s, &sent, 1), STORE_OK);
    assert_int_equal(store_refund_lease(f->s, "pay-a", 2, 1700000400, 1700000420, 1),
                     STORE_NOTFOUND);
    assert_int_equal(store_refund_lease(f->s, "pay-c", 0, 1700000400, 1700000420, 1), STORE_OK);
    assert_int_equal(store_refunds_due(f->s, 1700000400, 10, &d, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].payment_id, "pay-b");
    free(d);
    /* the voucher's payments, both tables, by (order, payment), in pages of 2 */
    assert_int_equal(store_voucher_payments(f->s, v, 0, "", 2, &d, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].payment_id, "pay-a");
    assert_int_equal(d[0].status, 6);
    assert_int_equal(d[0].amount, 500);
    assert_string_equal(d[1].payment_id, "pay-b");
    assert_int_equal(d[1].order_id, 8300);
    free(d);
    assert_int_equal(store_voucher_payments(f->s, v, 8300, "pay-b", 2, &d, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].payment_id, "pay-c");
    assert_int_equal(d[0].order_id, 8301);
    assert_int_equal(d[0].status, 5);
    free(d);
    assert_int_equal(store_voucher_payments(f->s, v + 1, 0, "", 2, &d, &n), STORE_OK);
    assert_int_equal(n, 0);
}

/* The lab's course steps (lab_store.c, through store_exec and store_exec_orders): made by
 * the lab, not the schema; one autocommit statement each, the stock guards as the course
 * writes them, and lab_voucher_order without UNIQUE(user, voucher) -- counted and listed in
 * id order for the audit by the lab's calls, never by the store's, which know only
 * tb_voucher_order. */
static void test_lab_calls(void **state)
{
    FX(f);
    int64_t now = clock_wall_s();
    int64_t v = create_seckill_at(f->s, 1, 2, now - 3600, now + 3600);
    int64_t n = -1;
    assert_int_equal(lab_store_user_orders(f->s, 2001, v, &n), STORE_ERR);   /* no table yet */
    assert_int_equal(lab_store_order_count(f->s, v, &n), STORE_OK);           /* ... none */
    assert_int_equal(n, 0);
    store_order_t *out = (store_order_t *)&n;
    size_t k = 7;
    assert_int_equal(lab_store_voucher_orders(f->s, v, 0, 10, &out, &k), STORE_OK);
    assert_null(out);
    assert_int_equal(k, 0);
    assert_int_equal(lab_store_ensure(f->s), STORE_OK);
    assert_int_equal(lab_store_ensure(f->s), STORE_OK);   /* a database that has it is fine */
    int taken = -1;
    assert_int_equal(lab_store_take_stock(f->s, v, LAB_TAKE_IF_EQ, 5, &taken), STORE_OK);
    assert_int_equal(taken, 0);   /* stock = old: someone else moved it */
    assert_int_equal(lab_store_take_stock(f->s, v, LAB_TAKE_IF_EQ, 2, &taken), STORE_OK);
    assert_int_equal(taken, 1);
    assert_int_equal(lab_store_take_stock(f->s, v, LAB_TAKE_IF_POSITIVE, 0, &taken),
                     STORE_OK);
    assert_int_equal(taken, 1);
    assert_int_equal(lab_store_take_stock(f->s, v, LAB_TAKE_IF_POSITIVE, 0, &taken),
                     STORE_OK);
    assert_int_equal(taken, 0);   /* stock > 0 guards the last unit */
    assert_int_equal(lab_store_take_stock(f->s, v, LAB_TAKE_ANY, 0, &taken), STORE_OK);
    assert_int_equal(taken, 1);   /* the naive step: nothing stops it going below zero */
    assert_int_equal(lab_store_take_stock(f->s, 999999, LAB_TAKE_ANY, 0, &taken),
                     STORE_OK);
    assert_int_equal(taken, 0);
    assert_int_equal(lab_store_take_stock(f->s, v, 7, 0, &taken), STORE_ERR);

    assert_int_equal(lab_store_user_orders(f->s, 2001, v, &n), STORE_OK);
    assert_int_equal(n, 0);
    store_order_t o = mk(500, 2001, v, now);
    assert_int_equal(lab_store_insert(f->s, &o), STORE_OK);
    o = mk(501, 2001, v, now);
    assert_int_equal(lab_store_insert(f->s, &o), STORE_OK);   /* the course's duplicate */
    assert_int_equal(lab_store_insert(f->s, &o), STORE_ERR);  /* the id is still a key */
    assert_int_equal(lab_store_user_orders(f->s, 2001, v, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(lab_store_user_orders(f->s, 2002, v, &n), STORE_OK);
    assert_int_equal(n, 0);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 0);   /* the product's table only */
    assert_int_equal(stock, -1);
    assert_int_equal(lab_store_order_count(f->s, v, &n), STORE_OK);
    assert_int_equal(n, 2);

    /* Each table on its own, paged in id order. */
    int64_t v2 = create_seckill(f->s, 1, 10);
    store_order_t b[2] = {mk(450, 3001, v2, 1700000000), mk(550, 3002, v2, 1700000000)};
    size_t ins, conf;
    assert_int_equal(store_orders_write(f->s, b, 2, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 2);
    o = mk(520, 3003, v2, now);
    assert_int_equal(lab_store_insert(f->s, &o), STORE_OK);
    o = mk(600, 3003, v2, now);
    assert_int_equal(lab_store_insert(f->s, &o), STORE_OK);
    assert_int_equal(store_voucher_counts(f->s, v2, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 2);
    assert_int_equal(lab_store_order_count(f->s, v2, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(store_voucher_orders(f->s, v2, 0, 10, &out, &k), STORE_OK);
    assert_int_equal(k, 2);
    assert_int_equal(out[0].id, 450);
    assert_int_equal(out[1].id, 550);
    free(out);
    assert_int_equal(lab_store_voucher_orders(f->s, v2, 0, 1, &out, &k), STORE_OK);
    assert_int_equal(k, 1);
    assert_int_equal(out[0].id, 520);
    assert_int_equal(out[0].user_id, 3003);
    assert_int_equal(out[0].voucher_id, v2);
    assert_int_equal(out[0].status, 1);
    assert_int_equal(out[0].create_time, now);
    free(out);
    assert_int_equal(lab_store_voucher_orders(f->s, v2, 520, 10, &out, &k), STORE_OK);
    assert_int_equal(k, 1);
    assert_int_equal(out[0].id, 600);
    free(out);
}

/* store_exec_orders: a caller's read whose rows are orders, any table; a statement whose
 * rows are not an order's five columns is refused, and so are bad arguments. */
static void test_exec_orders(void **state)
{
    FX(f);
    int64_t v = create_seckill(f->s, 1, 10);
    store_order_t b[3] = {mk(701, 4001, v, 1700000000), mk(702, 4002, v, 1700000100),
                          mk(703, 4003, v, 1700000200)};
    assert_int_equal(store_orders_write(f->s, b, 3, NULL, NULL, NULL), STORE_OK);
    const store_arg_t args[] = {{v, 0}, {1700000100, 1}};
    store_order_t *out = NULL;
    size_t n = 7;
    assert_int_equal(store_exec_orders(f->s, "SELECT id, user_id, voucher_id, status, "
                                             "create_time FROM tb_voucher_order WHERE "
                                             "voucher_id = ? AND create_time >= ? "
                                             "ORDER BY id DESC", args, 2, &out, &n),
                     STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(out[0].id, 703);   /* the statement's order */
    assert_int_equal(out[0].user_id, 4003);
    assert_int_equal(out[0].voucher_id, v);
    assert_int_equal(out[0].status, 1);
    assert_int_equal(out[0].create_time, 1700000200);
    assert_int_equal(out[1].id, 702);
    assert_int_equal(out[1].create_time, 1700000100);
    free(out);
    assert_int_equal(store_exec_orders(f->s, "SELECT id FROM tb_voucher_order WHERE voucher_id = ?",
                                       args, 1, &out, &n), STORE_ERR);
    assert_non_null(strstr(store_errmsg(f->s), "exec orders: 1 columns"));
    assert_null(out);
    assert_int_equal(n, 0);
    assert_int_equal(store_exec_orders(f->s, "SELECT id, user_id, voucher_id, status, "
                                             "create_time FROM no_such_table", NULL, 0, &out,
                                       &n), STORE_ERR);
    assert_non_null(strstr(store_errmsg(f->s), "no_such_table"));
    assert_int_equal(store_exec_orders(f->s, NULL, NULL, 0, &out, &n), STORE_ERR);
    assert_int_equal(store_exec_orders(f->s, "SELECT 1", args, 9, &out, &n), STORE_ERR);
    assert_int_equal(store_exec_orders(f->s, "SELECT 1", NULL, 0, NULL, &n), STORE_ERR);
}

static void test_deadline_under_lock(void **state)
{
    FX(f);
    int64_t v = create_seckill(f->s, 1, 10);
    int timeout_ms = B->lock_timeout_ms;
    store_t *s = open_ok(f->url, timeout_ms);
    B->lock_orders(f);
    store_order_t o = mk(1, 2, v, 1700000000);
    size_t ins = 7, conf = 7;
    uint64_t t0 = clock_mono_ms();
    assert_int_equal(store_orders_write(s, &o, 1, &ins, &conf, NULL), STORE_ERR);
    uint64_t took = clock_mono_ms() - t0;
    print_message("%s: orders_write under a held lock failed after %llu ms: %s\n", B->name,
                  (unsigned long long)took, store_errmsg(s));
    assert_true(took >= (uint64_t)timeout_ms * 3 / 4 && took < (uint64_t)timeout_ms + 1500);
    assert_int_equal(ins, 0);
    assert_non_null(strstr(store_errmsg(s), "deadline"));
    /* Reads are not held up by the writer's lock. */
    store_user_t u;
    assert_int_equal(store_user_by_phone(s, "13800000000", &u), STORE_NOTFOUND);
    B->unlock_orders(f);
    /* The lock is gone: the same batch goes through. */
    assert_int_equal(store_orders_write(s, &o, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(s, v, &orders, &stock), STORE_OK);
    assert_int_equal(stock, 9);
    store_close(s);
}

/* A query that fails (its table gone from under the connection's prepared statements)
 * returns STORE_ERR naming its step, hands out no rows, and leaves the connection and its
 * statements usable once the table is back. */
static void test_failed_query(void **state)
{
    FX(f);
    int64_t v = create_seckill(f->s, 1, 10);
    store_order_t o = mk(501, 3001, v, 1700000000);
    size_t ins, conf;
    assert_int_equal(store_orders_write(f->s, &o, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
    store_order_t *list, got;
    size_t n;
    int64_t orders, stock;
    /* prepared and used once before the table goes */
    assert_int_equal(store_orders_of_user(f->s, 3001, 10, &list, &n), STORE_OK);
    assert_int_equal(n, 1);
    free(list);
    assert_int_equal(store_order_get(f->s, 501, &got), STORE_OK);
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);

    B->exec(f, "ALTER TABLE tb_voucher_order RENAME TO tb_voucher_order_away");
    list = (store_order_t *)&got;
    n = 7;
    assert_int_equal(store_orders_of_user(f->s, 3001, 10, &list, &n), STORE_ERR);
    print_message("%s: %s\n", B->name, store_errmsg(f->s));
    assert_non_null(strstr(store_errmsg(f->s), ": orders of user: "));
    assert_null(list);
    assert_int_equal(n, 0);
    assert_int_equal(store_order_get(f->s, 501, &got), STORE_ERR);
    assert_non_null(strstr(store_errmsg(f->s), ": order get: "));
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_ERR);
    assert_non_null(strstr(store_errmsg(f->s), ": count"));

    B->exec(f, "ALTER TABLE tb_voucher_order_away RENAME TO tb_voucher_order");
    assert_int_equal(store_orders_of_user(f->s, 3001, 10, &list, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].id, 501);
    free(list);
    assert_int_equal(store_order_get(f->s, 501, &got), STORE_OK);
    assert_int_equal(got.user_id, 3001);
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 1);
    assert_int_equal(stock, 9);
}

/* ---------------------------------------------------------------- one backend only */

/* Two connections of one process creating users, as two job-pool threads do in a login
 * burst: one with a steady stream of inserts must not keep the other's from SQLite's one
 * write lock past its deadline. (A TSan sale in CI answered a login 503 after "user
 * insert: deadline of 2000 ms passed (database is locked)" while the other pool thread
 * created 497 users back to back: a busy handler that polls never finds the lock free.) */
struct user_stream {
    const char *url;
    int stop;          /* atomics only */
    int created;       /* atomics only */
};

static void *user_stream_main(void *p)
{
    struct user_stream *a = p;
    store_t *s = open_ok(a->url, 5000);
    for (int i = 0; !__atomic_load_n(&a->stop, __ATOMIC_SEQ_CST); i++) {
        char phone[16];
        snprintf(phone, sizeof phone, "139%08d", i);
        store_user_t u;
        if (store_user_create(s, phone, "stream", &u) == STORE_OK)
            __atomic_add_fetch(&a->created, 1, __ATOMIC_SEQ_CST);
    }
    store_close(s);
    return NULL;
}

static void test_sqlite_user_inserts_take_turns(void **state)
{
    FX(f);
    struct user_stream a = {.url = f->url};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, user_stream_main, &a), 0);
    uint64_t until = clock_mono_ms() + 10000;
    while (__atomic_load_n(&a.created, __ATOMIC_SEQ_CST) < 20 && clock_mono_ms() < until)
        usleep(1000);
    store_t *s = open_ok(f->url, 1000);
    int failed = 0;
    for (int k = 0; k < 10; k++) {   /* without turns, 1-2 of 5 starved in 3 of 4 runs */
        char phone[16];
        snprintf(phone, sizeof phone, "137%08d", k);
        store_user_t u;
        if (store_user_create(s, phone, "other", &u) != STORE_OK) {
            print_message("user %s: %s\n", phone, store_errmsg(s));
            failed++;
        }
    }
    __atomic_store_n(&a.stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(t, NULL);
    print_message("the stream created %d users meanwhile\n",
                  __atomic_load_n(&a.created, __ATOMIC_SEQ_CST));
    store_close(s);
    assert_int_equal(failed, 0);
}

static void test_sqlite_urls(void **state)
{
    (void)state;
    char err[256] = "";
    /* nothing listens on port 1 */
    assert_null(store_open("mysql://u:p@127.0.0.1:1/hmdp", 1000, err, sizeof err));
    assert_non_null(strstr(err, "cannot connect"));
    assert_null(store_open("postgres://x", 1000, err, sizeof err));
    assert_non_null(strstr(err, "unknown"));
    assert_null(store_open("sqlite:", 1000, err, sizeof err));
    assert_null(store_open("/no/scheme", 1000, err, sizeof err));
    assert_null(store_open("sqlite:/nonexistent-dir/x/y.db", 1000, err, sizeof err));
    assert_true(err[0] != '\0');
    store_t *m = open_ok("sqlite::memory:", 1000);
    assert_int_equal(store_ping(m), STORE_OK);
    store_close(m);
    store_close(NULL);
    assert_non_null(store_errmsg(NULL));
}

static void test_mysql_engine_and_version(void **state)
{
    FX(f);
    MYSQL *m = admin(f->db);
    assert_int_equal(sql_int(m, "SELECT version FROM schema_version WHERE id = 1"), 9);
    assert_int_equal(sql_int(m, "SELECT COUNT(*) FROM information_schema.tables WHERE "
                                "table_schema = DATABASE() AND engine = 'InnoDB' AND "
                                "table_collation LIKE 'utf8mb4%'"),
                     13);   /* with tb_voucher_order_cancelled (7), tb_voucher_payment (8) and
                               tb_refund_lease (9) */
    mysql_close(m);
}

static void test_mysql_urls(void **state)
{
    FX(f);
    char err[512] = "", url[700];
    assert_null(store_open("mysql:host/db", 1000, err, sizeof err));
    assert_non_null(strstr(err, "mysql://"));
    assert_null(store_open("mysql://u:p@127.0.0.1:3306", 1000, err, sizeof err));
    assert_non_null(strstr(err, "no database"));
    assert_null(store_open("mysql://u:p@127.0.0.1:99999/db", 1000, err, sizeof err));
    assert_non_null(strstr(err, "port"));
    assert_null(store_open("mysql://u:p@127.0.0.1:3306/d-b", 1000, err, sizeof err));
    assert_non_null(strstr(err, "database name"));
    assert_null(store_open("mysql://u:p@127.0.0.1:3306/db?sslmode=1", 1000, err, sizeof err));
    assert_non_null(strstr(err, "unknown option"));
    assert_null(store_open("mysql://u:p%zz@127.0.0.1:3306/db", 1000, err, sizeof err));
    /* Nothing listens on port 1: a clear error, quickly, without the password. */
    uint64_t t0 = clock_mono_ms();
    assert_null(store_open("mysql://u:secretpw@127.0.0.1:1/db", 1000, err, sizeof err));
    assert_true(clock_mono_ms() - t0 < 3000);
    assert_non_null(strstr(err, "cannot connect"));
    assert_null(strstr(err, "secretpw"));
    /* Wrong password. */
    snprintf(url, sizeof url, "mysql://%s:wrong@%s:%u/%s", srv.user, srv.host, srv.port, f->db);
    assert_null(store_open(url, 1000, err, sizeof err));
    assert_non_null(strstr(err, "denied"));

    /* mariadb:// is the same backend. */
    snprintf(url, sizeof url, "mariadb://%s:%s@%s:%u/%s", srv.user, srv.pass, srv.host, srv.port,
             f->db);
    store_t *s = open_ok(url, 1000);
    assert_int_equal(store_ping(s), STORE_OK);
    store_close(s);

    /* A password with URL characters, percent-encoded. */
    MYSQL *m = admin(NULL);
    char q[256];
    snprintf(q, sizeof q, "CREATE USER IF NOT EXISTS 'ut_enc_%d'@'%%' IDENTIFIED BY 'p@ss:w/rd%%'",
             (int)getpid());
    sql(m, q);
    snprintf(q, sizeof q, "GRANT ALL ON `%s`.* TO 'ut_enc_%d'@'%%'", f->db, (int)getpid());
    sql(m, q);
    snprintf(url, sizeof url, "mysql://ut_enc_%d:p%%40ss%%3Aw%%2Frd%%25@%s:%u/%s", (int)getpid(),
             srv.host, srv.port, f->db);
    s = open_ok(url, 1000);
    assert_int_equal(store_ping(s), STORE_OK);
    store_close(s);
    snprintf(q, sizeof q, "DROP USER 'ut_enc_%d'@'%%'", (int)getpid());
    sql(m, q);
    mysql_close(m);
}

/* Kills every server connection of our user to this test's database. */
static int kill_store_connections(const char *db)
{
    MYSQL *m = admin(NULL);
    char q[256];
    snprintf(q, sizeof q,
             "SELECT id FROM information_schema.processlist WHERE db = '%s' "
             "AND id <> CONNECTION_ID()",
             db);
    if (mysql_query(m, q) != 0)
        fail_msg("%s: %s", q, mysql_error(m));
    MYSQL_RES *r = mysql_store_result(m);
    MYSQL_ROW row;
    long long ids[64];
    int n = 0;
    while ((row = mysql_fetch_row(r)) && n < 64)
        ids[n++] = atoll(row[0]);
    mysql_free_result(r);
    for (int i = 0; i < n; i++) {
        snprintf(q, sizeof q, "KILL %lld", ids[i]);
        mysql_query(m, q);
    }
    mysql_close(m);
    return n;
}

static void test_mysql_reconnect(void **state)
{
    FX(f);
    int64_t v = create_seckill(f->s, 1, 10);
    store_user_t u;
    assert_int_equal(store_user_create(f->s, "13800000009", "user_r", &u), STORE_OK);

    /* Idempotent calls: the dead connection is noticed, replaced, the call retried. */
    assert_true(kill_store_connections(f->db) >= 1);
    assert_int_equal(store_ping(f->s), STORE_OK);
    assert_true(kill_store_connections(f->db) >= 1);
    assert_int_equal(store_user_by_phone(f->s, "13800000009", &u), STORE_OK);
    assert_int_equal(u.id, 1010);
    assert_true(kill_store_connections(f->db) >= 1);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(stock, 10);
    /* Voucher create: the connection broke before its COMMIT, so it is retried. */
    assert_true(kill_store_connections(f->db) >= 1);
    assert_true(create_seckill(f->s, 1, 3) > v);

    /* The order batch is not retried here: STORE_ERR, and the writer's next attempt (a
     * new connection) goes through. */
    assert_true(kill_store_connections(f->db) >= 1);
    store_order_t o = mk(5, 6, v, 1700000000);
    size_t ins = 7, conf = 7;
    assert_int_equal(store_orders_write(f->s, &o, 1, &ins, &conf, NULL), STORE_ERR);
    print_message("order batch on a killed connection: %s\n", store_errmsg(f->s));
    assert_int_equal(ins, 0);
    assert_int_equal(store_orders_write(f->s, &o, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 1);
    assert_int_equal(stock, 9);
}

/* The course's shop tables: the seeded shop 1 and ten types, a created shop read back
 * member for member (a NULL avgPrice and area stay absent), pages by type and by name,
 * an unknown id. */
static void test_shops(void **state)
{
    FX(f);
    store_shop_t *p = calloc(1, sizeof *p);
    assert_non_null(p);
    assert_int_equal(store_shop_get(f->s, 1, p), STORE_OK);
    assert_string_equal(p->name, "103茶餐厅");
    assert_int_equal(p->type_id, 1);
    assert_int_equal(p->score, 37);
    assert_true(p->x > 120.14 && p->x < 120.15 && p->y > 30.31 && p->y < 30.32);
    assert_true(p->create_time > 0);
    assert_int_equal(store_shop_get(f->s, 999, p), STORE_NOTFOUND);

    store_shop_type_t *t;
    size_t n;
    assert_int_equal(store_shop_types(f->s, &t, &n), STORE_OK);
    assert_int_equal(n, 10);
    for (size_t i = 1; i < n; i++)
        assert_true(t[i - 1].sort <= t[i].sort);
    assert_string_equal(t[0].name, "美食");
    free(t);

    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", "新茶馆");
    p->type_id = 2;
    snprintf(p->address, sizeof p->address, "%s", "文一西路1号");
    p->x = 120.5;
    p->y = 30.25;
    p->avg_price = -1;
    p->sold = 3;
    int64_t ids[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(store_shop_create(f->s, p), STORE_OK);
        ids[i] = p->id;
        assert_true(i == 0 ? ids[0] > 1 : ids[i] > ids[i - 1]);
    }
    assert_int_equal(store_shop_get(f->s, ids[1], p), STORE_OK);
    assert_string_equal(p->name, "新茶馆");
    assert_int_equal(p->avg_price, -1);
    assert_string_equal(p->area, "");
    assert_true(p->x == 120.5 && p->y == 30.25);
    assert_int_equal(p->sold, 3);

    /* An update overwrites every member; the same values twice are still found. */
    snprintf(p->name, sizeof p->name, "%s", "老茶馆");
    p->avg_price = 66;
    snprintf(p->area, sizeof p->area, "%s", "西湖");
    assert_int_equal(store_shop_update(f->s, p), STORE_OK);
    assert_int_equal(store_shop_update(f->s, p), STORE_OK);
    memset(p, 0, sizeof *p);
    assert_int_equal(store_shop_get(f->s, ids[1], p), STORE_OK);
    assert_string_equal(p->name, "老茶馆");
    assert_int_equal(p->avg_price, 66);
    assert_string_equal(p->area, "西湖");
    p->id = 99999;
    assert_int_equal(store_shop_update(f->s, p), STORE_NOTFOUND);
    snprintf(p->name, sizeof p->name, "%s", "新茶馆");
    p->id = ids[1];
    assert_int_equal(store_shop_update(f->s, p), STORE_OK);
    free(p);

    store_shop_t *list;
    store_shop_query_t q = { .type_id = 2, .offset = 1, .limit = 5 };
    assert_int_equal(store_shop_list(f->s, &q, &list, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, ids[1]);
    free(list);
    store_shop_query_t by_name = { .name = "茶", .limit = 10 };
    assert_int_equal(store_shop_list(f->s, &by_name, &list, &n), STORE_OK);
    assert_int_equal(n, 4);   /* 103茶餐厅 and the three */
    assert_int_equal(list[0].id, 1);
    free(list);
    store_shop_query_t none = { .type_id = 7, .limit = 5 };
    assert_int_equal(store_shop_list(f->s, &none, &list, &n), STORE_OK);
    assert_int_equal(n, 0);
    assert_null(list);
}

#define CONTRACT(t) cmocka_unit_test_setup_teardown(t, setup, teardown)

int main(void)
{
    const struct CMUnitTest contract[] = {
        CONTRACT(test_schema_idempotent),
        CONTRACT(test_users),
        CONTRACT(test_voucher_buckets),
        CONTRACT(test_voucher_room),
        CONTRACT(test_vouchers),
        CONTRACT(test_orders_idempotent),
        CONTRACT(test_orders_runs),
        CONTRACT(test_orders_dup_and_conflict),
        CONTRACT(test_orders_fenced_by_epoch),
        CONTRACT(test_orders_of_user),
        CONTRACT(test_deadline_under_lock),
        CONTRACT(test_failed_query),
        CONTRACT(test_sync_order),
        CONTRACT(test_orders_move_batch),
        CONTRACT(test_orders_move_frees),
        CONTRACT(test_refund_lease),
        CONTRACT(test_lab_calls),
        CONTRACT(test_exec_orders),
        CONTRACT(test_shops),
    };
    const struct CMUnitTest sqlite_only[] = {
        cmocka_unit_test(test_sqlite_urls),
        CONTRACT(test_sqlite_user_inserts_take_turns),
    };
    const struct CMUnitTest mysql_only[] = {
        CONTRACT(test_mysql_engine_and_version),
        CONTRACT(test_mysql_urls),
        CONTRACT(test_mysql_reconnect),
    };
    if (mysql_server() < 0)
        return 1;
    if (!srv.ok)
        fprintf(stderr, "MYSQL_URL is not set: the MariaDB runs are skipped\n");
    int failed =
        cmocka_run_group_tests_name("store contract on sqlite", contract, group_sqlite, NULL);
    failed += cmocka_run_group_tests_name("sqlite only", sqlite_only, group_sqlite, NULL);
    failed += cmocka_run_group_tests_name("store contract on mysql", contract, group_mysql, NULL);
    failed += cmocka_run_group_tests_name("mysql only", mysql_only, group_mysql, NULL);
    return failed;
}
