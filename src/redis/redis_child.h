/* redis_child.h -- the embedded default's private redis-server.
 *
 * With no --redis configured, `seckill serve` starts redis-server as a child: Unix socket
 * and no TCP port, AOF on (appendfsync everysec, or always), data under <data_dir>/redis.
 * The child gets PR_SET_PDEATHSIG so it cannot outlive us even after kill -9, is started
 * again from its AOF if it dies (redis_child_watch), and is stopped with SHUTDOWN (AOF
 * flushed) on a clean exit. Every function here is called from the main thread only. */
#ifndef SECKILL_REDIS_CHILD_H
#define SECKILL_REDIS_CHILD_H

#include <stddef.h>

typedef struct redis_child redis_child_t;

/* Starts the child and waits (up to 10 s) until it answers PING. On success writes its
 * URL ("unix:<path>") into url. On failure returns NULL and one line of what to do in
 * err (e.g. "redis-server not found: apt-get install redis-server"). */
redis_child_t *redis_child_start(const char *bin, const char *data_dir, int fsync_always,
                                 char *url, size_t urllen, char *err, size_t errlen);
/* Reaps the child if it died and starts it again (same socket, data and settings),
 * logging both; a failed start is retried on a later call, 2 s on. Call it from the
 * thread that started the child (PR_SET_PDEATHSIG follows that thread). Returns 0 while
 * it runs, 1 when it was restarted, -1 while it is down. NULL is fine (0). */
int redis_child_watch(redis_child_t *c);
void redis_child_stop(redis_child_t *c);   /* NULL is fine */

#endif
