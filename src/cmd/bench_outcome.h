/* bench_outcome.h -- the outcome of one flash-sale request in `seckill bench`.
 *
 * Shared by the load generator, which classifies every answer (bench_load.c defines
 * bench_load_classify and bench_outcome_names), the report (bench.c) and the timeline
 * (bench_timeline.c), which counts successes and sold-out answers per slot. Its own header
 * so the timeline needs nothing else of bench.h. */
#ifndef SECKILL_BENCH_OUTCOME_H
#define SECKILL_BENCH_OUTCOME_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    BO_SUCCESS = 0,    /* success:true, data = order id */
    BO_SOLD_OUT,       /* 库存不足 / SOLD_OUT */
    BO_DUPLICATE,      /* 不能重复下单 / DUPLICATE */
    BO_NOT_STARTED,
    BO_ENDED,
    BO_NO_VOUCHER,
    BO_UNAUTHORIZED,   /* 401 */
    BO_UNAVAILABLE,    /* 503 */
    BO_OTHER,          /* any other answer */
    BO_ERROR,          /* no answer: connection failed or closed with the request in flight */
    BO__COUNT
} bench_outcome_t;

extern const char *const bench_outcome_names[BO__COUNT];

/* Classifies an HTTP answer to POST /voucher-order/seckill/{id}; *order_id gets the id on
 * success. Understands the `code` member and the course's Chinese messages. Pure. */
bench_outcome_t bench_load_classify(int status, const char *body, size_t len, int64_t *order_id);

#endif
