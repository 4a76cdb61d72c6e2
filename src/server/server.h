/* server.h -- `seckill serve`: start every part in order, run, stop cleanly.
 *
 * Start order: data dir -> Redis (embedded child or configured) -> schema -> instance
 * slot lease -> job pool -> order writer -> workers (listen) -> "ready" lines with curl
 * examples. SIGINT/SIGTERM: stop accepting, finish in-flight requests, let the writer
 * commit and ack what it has, stop the embedded redis-server, exit 0. */
#ifndef SECKILL_SERVER_H
#define SECKILL_SERVER_H

#include "core/config.h"

/* Returns the process exit status. */
int server_run(const config_t *cfg);

#endif
