/* lab_store.c -- the lab's SQL (lab_store.h): its order table and the course's statements,
 * run through store_exec, one autocommit statement each, as the course's MyBatis-Plus calls
 * run under MySQL's default isolation. Nothing the course's checks read stays locked
 * until its write -- exactly the race the lab shows (one SQLite transaction around the
 * whole order would serialise it away).
 *
 * lab_voucher_order is the course's tb_voucher_order as the course has it -- no
 * UNIQUE (user_id, voucher_id) -- so the steps that let a user buy twice (local-lock on two
 * instances, setnx with an expired lease) show it as a second row. It is made by
 * lab_store_ensure when a lab mode starts, never by the service's schema; the audit reads
 * it (lab_store_order_count, lab_store_voucher_orders) where it exists. */
#include "lab/lab_store.h"

#include <string.h>

static const char *const table_sqlite[] = {
    "CREATE TABLE IF NOT EXISTS lab_voucher_order ("
    "    id          INTEGER PRIMARY KEY,"
    "    user_id     INTEGER NOT NULL,"
    "    voucher_id  INTEGER NOT NULL,"
    "    pay_type    INTEGER NOT NULL DEFAULT 1,"
    "    status      INTEGER NOT NULL DEFAULT 1,"
    "    create_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),"
    "    pay_time    TEXT,"
    "    use_time    TEXT,"
    "    refund_time TEXT,"
    "    update_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')))",
    "CREATE INDEX IF NOT EXISTS idx_lab_order_voucher_user "
    "ON lab_voucher_order (voucher_id, user_id)",
};

static const char *const table_mysql[] = {
    "CREATE TABLE IF NOT EXISTS lab_voucher_order ("
    "    id          BIGINT           NOT NULL,"
    "    user_id     BIGINT UNSIGNED  NOT NULL,"
    "    voucher_id  BIGINT UNSIGNED  NOT NULL,"
    "    pay_type    TINYINT UNSIGNED NOT NULL DEFAULT 1,"
    "    status      TINYINT UNSIGNED NOT NULL DEFAULT 1,"
    "    create_time DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP,"
    "    pay_time    DATETIME         NULL DEFAULT NULL,"
    "    use_time    DATETIME         NULL DEFAULT NULL,"
    "    refund_time DATETIME         NULL DEFAULT NULL,"
    "    update_time DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP "
    "                                 ON UPDATE CURRENT_TIMESTAMP,"
    "    PRIMARY KEY (id),"
    "    KEY idx_lab_order_voucher_user (voucher_id, user_id)"
    ") ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci",
};

int lab_store_ensure(store_t *s)
{
    int sqlite = strcmp(store_scheme(s), "sqlite") == 0;
    const char *const *sql = sqlite ? table_sqlite : table_mysql;
    size_t n = sqlite ? sizeof table_sqlite / sizeof *sql : sizeof table_mysql / sizeof *sql;
    for (size_t i = 0; i < n; i++)
        if (store_exec(s, sql[i], NULL, 0, 1, NULL) != STORE_OK)
            return STORE_ERR;
    return STORE_OK;
}

int lab_store_take_stock(store_t *s, int64_t voucher_id, int guard, int64_t old, int *taken)
{
    static const char *const sql[] = {
        [LAB_TAKE_ANY] = "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ?",
        [LAB_TAKE_IF_EQ] = "UPDATE tb_seckill_voucher SET stock = stock - 1 "
                           "WHERE voucher_id = ? AND stock = ?",
        [LAB_TAKE_IF_POSITIVE] = "UPDATE tb_seckill_voucher SET stock = stock - 1 "
                                 "WHERE voucher_id = ? AND stock > 0",
    };
    *taken = 0;
    if (guard < LAB_TAKE_ANY || guard > LAB_TAKE_IF_POSITIVE)
        return STORE_ERR;
    const store_arg_t args[] = {{voucher_id, 0}, {old, 0}};
    int64_t changed = 0;
    /* Not retried: the UPDATE may have committed before the connection went. */
    int rc = store_exec(s, sql[guard], args, guard == LAB_TAKE_IF_EQ ? 2 : 1, 0, &changed);
    *taken = changed > 0;
    return rc;
}

int lab_store_user_orders(store_t *s, int64_t user_id, int64_t voucher_id, int64_t *n)
{
    const store_arg_t args[] = {{voucher_id, 0}, {user_id, 0}};
    *n = 0;
    return store_exec(s, "SELECT COUNT(*) FROM lab_voucher_order "
                         "WHERE voucher_id = ? AND user_id = ?", args, 2, 1, n);
}

int lab_store_insert(store_t *s, const store_order_t *o)
{
    const store_arg_t args[] = {{o->id, 0}, {o->user_id, 0}, {o->voucher_id, 0},
                                {o->create_time, 1}, {o->create_time, 1}};
    /* Not retried: the INSERT may have committed before the connection went. */
    return store_exec(s, "INSERT INTO lab_voucher_order (id, user_id, voucher_id, "
                         "create_time, update_time) VALUES (?, ?, ?, ?, ?)", args, 5, 0, NULL);
}

/* *has = 1 if lab_voucher_order exists: some SQL step has run in this database. */
static int has_table(store_t *s, int *has)
{
    int sqlite = strcmp(store_scheme(s), "sqlite") == 0;
    int64_t n = 0;
    int rc = store_exec(s,
                        sqlite ? "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                                 "AND name = 'lab_voucher_order'"
                               : "SELECT COUNT(*) FROM information_schema.tables WHERE "
                                 "table_schema = DATABASE() AND table_name = 'lab_voucher_order'",
                        NULL, 0, 1, &n);
    *has = rc == STORE_OK && n > 0;
    return rc;
}

int lab_store_order_count(store_t *s, int64_t voucher_id, int64_t *n)
{
    int has;
    *n = 0;
    int rc = has_table(s, &has);
    if (rc != STORE_OK || !has)
        return rc;
    const store_arg_t args[] = {{voucher_id, 0}};
    return store_exec(s, "SELECT COUNT(*) FROM lab_voucher_order WHERE voucher_id = ?", args, 1,
                      1, n);
}

int lab_store_voucher_counts(store_t *s, int64_t voucher_id, int64_t *orders, int64_t *stock)
{
    int rc = store_voucher_counts(s, voucher_id, orders, stock);
    int64_t lab = 0;
    if (rc == STORE_ERR || lab_store_order_count(s, voucher_id, &lab) != STORE_OK)
        return STORE_ERR;
    *orders += lab;
    return rc;
}

int lab_store_voucher_orders(store_t *s, int64_t voucher_id, int64_t after_id, size_t max,
                             store_order_t **out, size_t *n)
{
    int has;
    *out = NULL;
    *n = 0;
    int rc = has_table(s, &has);
    if (rc != STORE_OK || !has || max == 0)
        return rc;
    const store_arg_t args[] = {{voucher_id, 0},
                                {after_id, 0},
                                {max > (size_t)INT64_MAX ? INT64_MAX : (int64_t)max, 0}};
    return store_exec_orders(s, "SELECT id, user_id, voucher_id, status, create_time "
                                "FROM lab_voucher_order WHERE voucher_id = ? AND id > ? "
                                "ORDER BY id LIMIT ?", args, 3, out, n);
}
