/*
 * harness.h -- test support for rlock: private redis-servers, child
 * processes, clocks.
 *
 * th_server_start() runs redis-server on a free loopback port (never 6379)
 * in a temp dir, without persistence; the server gets PR_SET_PDEATHSIG so it
 * dies with the test process, and th_cleanup() (atexit) stops the rest.
 * th_url() returns $REDIS_URL when set, else the URL of one private server
 * started on first use.
 */
#ifndef RLOCK_TEST_HARNESS_H
#define RLOCK_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

#include "rlock.h"

/* Timing on a loaded host. CI runs on 2 cores shared with other builds and tests, under
 * ASan: a test thread, a watchdog thread or the redis-server can be kept off the CPU for
 * hundreds of milliseconds (seen at load 14-19: a hand-off 186 ms late, a 300 ms watchdog
 * lease lapsing). TH_LATE_MS is how much later than its mechanism's own time a test lets
 * something happen; an upper bound that must tell two mechanisms apart needs them more
 * than TH_LATE_MS apart, or counts (wake-ups, commands) instead of timing.
 * TH_WD_LEASE_MS is the watchdog lease of the tests' short-lease clients: renewed every
 * lease/3, a hold survives a stall of 2/3 of it, TH_LATE_MS. */
#define TH_LATE_MS 1000
#define TH_WD_LEASE_MS 1500

typedef struct th_server {
    pid_t pid;
    int port;
    char dir[64];
    char url[64];
    int master_port;   /* > 0: started as a replica of 127.0.0.1:master_port;
                          -1: also listens on <dir>/redis.sock */
} th_server_t;

bool th_server_start(th_server_t *s);
/* Start with a Unix socket at <dir>/redis.sock as well. */
bool th_server_start_unix(th_server_t *s);
/* Start a replica of `master` and wait until its link is up. */
bool th_server_start_replica(th_server_t *s, const th_server_t *master);
/* Start again on the same port (after th_server_kill or stop). */
bool th_server_restart(th_server_t *s);
void th_server_stop(th_server_t *s);          /* SIGTERM + wait */
void th_server_kill(th_server_t *s, int sig);  /* SIGKILL: waits; SIGSTOP/CONT: not */

const char *th_url(void);
/* host/port of a redis:// URL */
bool th_parse_url(const char *url, char *host, size_t hlen, int *port);
redisContext *th_connect(const char *url);
/* Subscribers of a lock's release channel (PUBSUB NUMSUB rlock:{name}[suffix]:ch; suffix
 * "" for reentrant, ":f" fair, ":rw" read-write, ":s" simple); -1 on error. A waiter
 * subscribes after its first attempt failed: a test waits for this instead of sleeping. */
long long th_subscribers(const char *url, const char *name, const char *suffix);
/* A client for url with the given watchdog lease (0 = default). */
rlock_client_t *th_client(const char *url, int64_t watchdog_ms);
/* A unique lock name with prefix. */
void th_name(char *buf, size_t len, const char *prefix);

int64_t th_now_ms(void);
int64_t th_now_us(void);
void th_sleep_ms(int64_t ms);

/* fork+exec this binary with argv[1..] = args (NULL-terminated); the child's
 * stdin/stdout are pipes returned in *to_child / *from_child (may be NULL). */
pid_t th_spawn_self(char *const args[], int *to_child, int *from_child);
/* Read one line from fd into buf with a timeout; false on EOF/timeout. */
bool th_read_line(int fd, char *buf, size_t len, int64_t timeout_ms);
int th_wait_exit(pid_t pid, int64_t timeout_ms);  /* exit code, or -1 */

#endif
