/* order_mode.h -- the table of order modes: `--mode NAME` picks a row, and the row is how
 * an order is made in that mode.
 *
 * The service's modes (stream, queue, sync) are its first rows, at the ids of config.h's
 * MODE_*. A plug-in adds rows of its own with order_mode_plugin before the configuration
 * is read (main.c registers the lab's: src/lab/lab.h); the service then reads the table
 * and never the plug-in: api_order.c calls the row's order, server.c sizes the job pool by
 * it and runs its start and stop. Registration happens once, before any thread starts;
 * the table is read-only afterwards. */
#ifndef SECKILL_ORDER_MODE_H
#define SECKILL_ORDER_MODE_H

#include <stddef.h>
#include <stdint.h>
#include "core/config.h"
#include "sale/admission.h"

struct app;
struct http_req;
struct store;

typedef struct order_mode_row {
    const char *name;           /* --mode NAME */
    /* One flash-sale request (POST /voucher-order/seckill/{id}), with admission_try's
     * contract: cb runs exactly once, on the worker's thread, maybe before this returns. */
    void (*order)(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb);
    int job_threads;            /* SQL job-pool threads (jobs.h); 0 = the service's number */
    /* Optional (NULL = none). start runs after the job pool and the order writer are up and
     * before the workers start, 0 or -1 with err; stop runs after the job pool has
     * stopped, also after a start that failed or never ran. */
    int (*start)(struct app *app, char *err, size_t errlen);
    void (*stop)(struct app *app);
    /* Where the mode keeps a sale. NULL: in Redis (admit.lua's stock, buyers and stream;
     * SQL follows through the writer). Set: in SQL alone -- Redis only holds the published
     * voucher, whose stock never moves -- and this reads a voucher's (orders, stock) the
     * way the mode counts them, a STORE_* code. `seckill audit` and the board then take
     * the sale's figures from SQL. Blocking: runs on the job pool or in a command. */
    int (*sql_counts)(struct store *s, int64_t voucher_id, int64_t *orders, int64_t *stock);
} order_mode_row_t;

typedef struct order_mode_plugin {
    const char *what;           /* its rows for --mode's error message, e.g. "a lab step" */
    const order_mode_row_t *rows;
    int nrows;
    /* Optional: runs on every configuration, whatever the mode, after cfg->mode is set
     * (a plug-in's own flags are parsed here, and refused outside its rows). 0, or -1
     * with the reason in err. */
    int (*check)(config_t *cfg, char *err, size_t errlen);
} order_mode_plugin_t;

/* Adds p's rows (p must outlive the process). Returns the id of its first row (the next
 * ones follow in p's order), or -1 when the table is full. */
int order_mode_plugin(const order_mode_plugin_t *p);

/* After config_load: finds cfg->mode_name's row and sets cfg->mode, then runs every
 * plug-in's check. 0, or -1 with the reason in err. */
int order_mode_pick(config_t *cfg, char *err, size_t errlen);

/* The id of the row named name, or -1 (a command that reads another process's mode). */
order_mode_t order_mode_find(const char *name);
/* m's row (m from order_mode_pick or order_mode_plugin), or NULL. */
const order_mode_row_t *order_mode_row(order_mode_t m);
/* m's name, "?" when there is no such row. */
const char *order_mode_name(order_mode_t m);

#endif
