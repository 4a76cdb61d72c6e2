/* connlimit.h -- open connections and buffered request bytes per client address,
 * counted across every worker.
 *
 * The kernel spreads connections over the workers' SO_REUSEPORT listeners, so one client's
 * connections land on every worker: the count must be process-wide. One mutex guards a
 * small hash table; it is taken once per accept and once per close, never per request.
 *
 * An IPv6 client is counted by its /64, as the rate limits key it (clientip.h): one host
 * is routinely given a whole /64, so counting each /128 would let it open per_ip
 * connections per address it picks. Its /48 (a site) is capped too, at
 * CONNLIMIT_V6_48_FACTOR x per_ip, so a client cannot multiply its cap by rotating /64s
 * of its site either.
 *
 * Each counted address also carries the request bytes its connections hold (http.c
 * charges it beside the process-wide budget), so one address cannot take more than its
 * share of --max-buffered-bytes. That counter is an atomic in the entry: no lock, and the
 * entry lives as long as the address has a counted connection.
 *
 * Ownership: server.c creates the table before the workers and frees it after they have
 * stopped (app->connlimit); http.c acquires and releases. Its entries are bounded
 * by the connection caps, so they allocate through xmem.h (docs/design.md). */
#ifndef SECKILL_CONNLIMIT_H
#define SECKILL_CONNLIMIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* An IPv6 /48 may hold this many times per_ip connections (all its /64s together). */
enum { CONNLIMIT_V6_48_FACTOR = 4 };

typedef struct connlimit connlimit_t;
typedef struct connlimit_entry connlimit_entry_t;

/* The key of one client: an IPv4 address (v4-mapped IPv6 counts as IPv4), or the /64
 * of an IPv6 address. */
typedef struct connlimit_key {
    uint8_t b[16];
    uint8_t len;               /* 4 (IPv4) or 8 (IPv6 /64); 0 = not counted (never capped) */
} connlimit_key_t;

/* per_ip > 0. Never NULL. */
connlimit_t *connlimit_new(int per_ip);
void connlimit_free(connlimit_t *cl);

void connlimit_key(const struct sockaddr_storage *ss, connlimit_key_t *key);

/* Counts one more connection from key (and, for IPv6, from its /48). Returns 0 and sets
 * *entry (when entry is not NULL) to the key's entry, NULL for a key not counted; or -1
 * if the address (or its /48) is at its cap: then nothing was counted. */
int connlimit_acquire(connlimit_t *cl, const connlimit_key_t *key, connlimit_entry_t **entry);

/* Counts one connection of an acquired key as closed. Its entry's bytes must have been
 * given back first. */
void connlimit_release(connlimit_t *cl, const connlimit_key_t *key);

/* Charges n buffered bytes to an acquired entry unless that brings it above cap: 0, or
 * -1 (nothing charged). A NULL entry is never over. */
int connlimit_charge(connlimit_entry_t *e, size_t n, size_t cap);
void connlimit_uncharge(connlimit_entry_t *e, size_t n);

#endif
