/* connlimit.h -- open connections per client address, counted across every worker.
 *
 * The kernel spreads connections over the workers' SO_REUSEPORT listeners, so one client's
 * connections land on every worker: the count must be process-wide. One mutex guards a
 * small hash table; it is taken once per accept and once per close, never per request.
 *
 * Ownership: server.c creates the table before the workers and frees it after they have
 * stopped (app->connlimit); http.c acquires and releases. Its entries are bounded
 * by the connection caps, so they allocate through xmem.h (docs/design.md). */
#ifndef SECKILL_CONNLIMIT_H
#define SECKILL_CONNLIMIT_H

#include <stdint.h>
#include <sys/socket.h>

typedef struct connlimit connlimit_t;

/* The key of one client address (IPv4, or IPv6 with v4-mapped addresses as IPv4). */
typedef struct connlimit_key {
    uint8_t b[16];
    uint8_t len;               /* 4 or 16; 0 = not an IP address (never capped) */
} connlimit_key_t;

/* per_ip > 0. Never NULL. */
connlimit_t *connlimit_new(int per_ip);
void connlimit_free(connlimit_t *cl);

void connlimit_key(const struct sockaddr_storage *ss, connlimit_key_t *key);

/* Counts one more connection from key. Returns 0, or -1 if the address already has
 * per_ip connections: then nothing was counted. */
int connlimit_acquire(connlimit_t *cl, const connlimit_key_t *key);

/* Counts one connection of an acquired key as closed. */
void connlimit_release(connlimit_t *cl, const connlimit_key_t *key);

#endif
