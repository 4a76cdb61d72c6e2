/* lab_store.h -- the lab's SQL (lab_store.c): its order table lab_voucher_order and the
 * course's statements, for the SQL steps (lab_sql.c), and that table's orders for
 * `seckill audit` (src/cmd/audit.c), which adds them to the product's so that its figures
 * show what a course step let through. The store (store.h) knows only the product's
 * tables; everything here runs through its store_exec / store_exec_orders.
 *
 * One autocommit statement each, the way the course's MyBatis-Plus calls run: no
 * transaction holds what a check read until its write, which is exactly the race the lab
 * shows. STORE_* codes, the reason in store_errmsg. */
#ifndef SECKILL_LAB_STORE_H
#define SECKILL_LAB_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "store/store.h"

enum { LAB_TAKE_ANY = 0,          /* stock = stock - 1 (naive) */
       LAB_TAKE_IF_EQ = 1,        /* ... WHERE stock = old (cas-stock-eq) */
       LAB_TAKE_IF_POSITIVE = 2   /* ... WHERE stock > 0 (everything after) */
};
/* Creates lab_voucher_order and its index if missing (a database that has them is fine). */
int lab_store_ensure(store_t *s);
/* Takes one stock with the guard; *taken = 1 if a row changed. */
int lab_store_take_stock(store_t *s, int64_t voucher_id, int guard, int64_t old, int *taken);
/* The course's count(): orders of this user for this voucher in lab_voucher_order. */
int lab_store_user_orders(store_t *s, int64_t user_id, int64_t voucher_id, int64_t *n);
int lab_store_insert(store_t *s, const store_order_t *o);

/* For the audit: a voucher's orders in lab_voucher_order -- none in a database where no
 * SQL step has run (no table) -- counted, and paged as store_voucher_orders pages the
 * product's (id > after_id, ascending id, at most max; *out malloc'ed, free()). */
int lab_store_order_count(store_t *s, int64_t voucher_id, int64_t *n);
/* store_voucher_counts with the lab's orders added: (orders, stock) of a voucher sold by a
 * SQL step or sync mode (order_mode.h's sql_counts), STORE_* as store_voucher_counts. */
int lab_store_voucher_counts(store_t *s, int64_t voucher_id, int64_t *orders, int64_t *stock);
int lab_store_voucher_orders(store_t *s, int64_t voucher_id, int64_t after_id, size_t max,
                             store_order_t **out, size_t *n);

#endif
