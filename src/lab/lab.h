/* lab.h -- the course's flash-sale steps as order modes, so each one's failure can be run
 * and measured (`seckill lab`, docs/lab.md). Not for production: they are here to break.
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
 * Transports (lab_mq.c), after the same admission script as stream mode:
 *   list           LPUSH by the script, BRPOP by a consumer thread: no ack
 *   pubsub         PUBLISH by the script, SUBSCRIBE by a consumer thread: no storage
 *
 * Delay injection (--lab-pause POINT:MS[,POINT:MS]) makes each race happen on demand:
 *   check-write    SQL steps: between the checks and the stock update
 *   get-del        setnx-owner: between GET and DEL (lua-unlock: the same time, before
 *                  its script, where nothing can go wrong)
 *   unlock         lock steps: after the order, before the unlock
 *   pop-write      list, pubsub: between taking a message and writing it to SQL
 *   subscribe      pubsub: the consumer subscribes this long after start
 * --lab-lease-ms sets the setnx locks' lease, so a pause can outlast it. Both are
 * refused outside the lab modes (lab_config_check, called by main.c after config_load). */
#ifndef SECKILL_LAB_H
#define SECKILL_LAB_H

#include <stddef.h>
#include <stdint.h>
#include "sale/admission.h"
#include "core/config.h"

struct app;
struct http_req;

int lab_mode_is_lab(order_mode_t m);    /* any of the modes above */
int lab_mode_is_sql(order_mode_t m);    /* naive .. reentrant */
int lab_mode_is_mq(order_mode_t m);     /* list, pubsub */

/* Parses spec ("" = none) into ms[LAB_P__COUNT] and checks that every point exists in
 * mode. 0, or -1 with a reason in err. */
int lab_pause_parse(const char *spec, order_mode_t mode, int ms[LAB_P__COUNT], char *err,
                    size_t errlen);
const char *lab_point_name(int point);
/* After config_load (main.c): parses cfg->lab_pause into cfg->lab_pause_ms and refuses the
 * lab flags outside the lab modes. 0, or -1 with a reason in err. */
int lab_config_check(config_t *cfg, char *err, size_t errlen);
/* Sleeps for the configured pause at point (a no-op when none). Blocking: call it from
 * a job-pool or consumer thread, never from an event loop. */
void lab_pause(const struct app *app, int point);

/* Job-pool threads in the SQL steps: each request holds one for its whole course-style
 * blocking run (pauses included), like a servlet thread. */
#define LAB_JOB_THREADS 32

/* SQL steps. init/free around the job pool's life; try has admission_try's contract. */
int lab_sql_init(struct app *app, char *err, size_t errlen);
void lab_sql_free(struct app *app);
void lab_sql_try(struct http_req *r, int64_t voucher_id, int64_t user_id, admission_cb cb);

/* Transports: the consumer thread. stop joins it (NULL-safe). */
struct lab_mq;
struct lab_mq *lab_mq_start(struct app *app, char *err, size_t errlen);
void lab_mq_stop(struct lab_mq *mq);

#endif
