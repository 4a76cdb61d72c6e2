/* lab.h -- the course's flash-sale steps as order modes, so each one's failure can be run
 * and measured (`seckill lab`, docs/lab.md). Not for production: they are here to break.
 *
 * A plug-in. The lab adds its steps as rows of the table of order modes
 * (sale/order_mode.h) with lab_register -- the one call main.c makes -- and the service
 * knows the table, not the lab: in src/, only src/lab/, main.c, `seckill lab`
 * (src/cmd/lab_tool.c: this header, for the keys) and `seckill audit` (src/cmd/audit.c:
 * lab_store.h, for the lab's orders) include a lab header.
 * Each row gives the step's order handler (api_order.c calls it), the job-pool size, and
 * start/stop (server.c runs them). Everything a step needs is here: its Redis script
 * (lab_mq.lua, embedded like the service's: Makefile EMBED), its Redis keys (below), its
 * SQL (lab_store.h, run through store_exec), and its table lab_voucher_order, which a SQL
 * step's start creates (lab_store_ensure), never the service's schema.
 *
 * SQL steps (lab_sql.c), each as the hm-dianping course writes it, on the job pool:
 *   naive          read the voucher, check stock, `stock = stock - 1`, insert
 *   cas-stock-eq   ... `WHERE stock = <the stock read>` (optimistic lock, version style)
 *   cas-stock-gt0  ... `WHERE stock > 0` (optimistic lock, CAS style)
 *   local-lock     one order per user under an in-process lock per user (`synchronized`)
 *   setnx          SET lock:order:<user> <thread> NX PX lease; unlock = DEL
 *   setnx-owner    value = process UUID + thread; unlock = GET, compare, DEL
 *   lua-unlock     unlock = one script: compare and DEL atomically
 *   reentrant      rlock (the Redisson model: hash + owner, watchdog lease)
 * Orders of the SQL steps go to lab_voucher_order, the course's order table without our
 * UNIQUE key: what a step lets through shows in the audit as oversold stock or a second
 * order (the audit adds that table's orders to the product's: lab_store.h). The product's
 * Redis rebuild (src/rebuild/) reads tb_voucher_order only: the SQL steps sell from SQL
 * and never read Redis stock, and the transports' orders are in tb_voucher_order.
 *
 * Transports (lab_mq.c): lab_mq.lua admits the order as admit.lua does for one buyer
 * (window, stock, one per user) and hands it to
 *   list           LPUSH by the script, BRPOP by a consumer thread: no ack
 *   pubsub         PUBLISH by the script, SUBSCRIBE by a consumer thread: no storage
 * and the consumer writes it to tb_voucher_order like the order writer.
 *
 * Delay injection (--lab-pause POINT:MS[,POINT:MS]) makes each race happen on demand:
 *   check-write    SQL steps: between the checks and the stock update
 *   get-del        setnx-owner: between GET and DEL (lua-unlock: the same time, before
 *                  its script, where nothing can go wrong)
 *   unlock         lock steps: after the order, before the unlock
 *   pop-write      list, pubsub: between taking a message and writing it to SQL
 *   subscribe      pubsub: the consumer subscribes this long after start
 * --lab-lease-ms sets the setnx locks' lease, so a pause can outlast it. Both are
 * refused outside the lab modes (lab_config_check, the plug-in's check that
 * order_mode_pick runs on every configuration). */
#ifndef SECKILL_LAB_H
#define SECKILL_LAB_H

#include <stddef.h>
#include <stdint.h>
#include "core/config.h"
#include "sale/admission.h"

struct app;
struct http_req;

/* The steps, in the table's order. */
typedef enum {
    LAB_NAIVE = 0, LAB_CAS_EQ, LAB_CAS_GT0, LAB_LOCAL_LOCK, LAB_SETNX, LAB_SETNX_OWNER,
    LAB_LUA_UNLOCK, LAB_REENTRANT, LAB_LIST, LAB_PUBSUB, LAB__COUNT
} lab_step_t;

/* Adds the steps to the table of order modes (order_mode_plugin). Once, before the
 * configuration is read (main.c). 0, or -1 if the table is full. */
int lab_register(void);

/* The step a mode is, or -1 when it is not the lab's. */
int lab_step(order_mode_t m);
int lab_step_is_sql(int step);   /* naive .. reentrant */
int lab_step_is_mq(int step);    /* list, pubsub */

/* Parses spec ("" = none) into ms[LAB_P__COUNT] and checks that every point exists in
 * mode. 0, or -1 with a reason in err. */
int lab_pause_parse(const char *spec, order_mode_t mode, int ms[LAB_P__COUNT], char *err,
                    size_t errlen);
const char *lab_point_name(int point);
/* The plug-in's check (order_mode_pick runs it after config_load, whatever the mode):
 * parses cfg->lab_pause into cfg->lab_pause_ms and refuses the lab flags outside the lab
 * modes. 0, or -1 with a reason in err. */
int lab_config_check(config_t *cfg, char *err, size_t errlen);
/* Sleeps for the configured pause at point (a no-op when none). Blocking: call it from
 * a job-pool or consumer thread, never from an event loop. */
void lab_pause(const struct app *app, int point);

/* Job-pool threads in the SQL steps: each request holds one for its whole course-style
 * blocking run (pauses included), like a servlet thread. */
#define LAB_JOB_THREADS 32

/* SQL steps (lab_sql.c): the rows' start/stop around the job pool's life; order has
 * admission_try's contract. */
int lab_sql_start(struct app *app, char *err, size_t errlen);
void lab_sql_stop(struct app *app);
void lab_sql_order(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb);

/* Transports (lab_mq.c): start runs the consumer thread, stop joins it; order admits on
 * the worker's loop with lab_mq.lua. */
int lab_mq_start(struct app *app, char *err, size_t errlen);
void lab_mq_stop(struct app *app);
void lab_mq_order(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb);

/* Redis keys of the steps: the course's lock key prefix (SimpleRedisLock's "lock:" +
 * "order:" + userId), and one order list / channel for all vouchers, like the course's
 * single queue. */
#define KEY_LAB_LOCK_PREFIX "lock:order:"
#define KEY_LAB_LIST "seckill:lab:orders"
#define KEY_LAB_CHANNEL "seckill:lab:orders"

#endif
