/* clientip.h -- who the client is: the TCP peer, or, behind a trusted reverse proxy,
 * the address that proxy names in X-Forwarded-For.
 *
 * --trusted-proxy takes addresses and CIDR ranges ("127.0.0.1,10.0.0.0/8,::1"). The
 * header is believed only when the TCP peer is one of them; then its list is read from
 * the right (each proxy appends the address it got the request from) past every trusted
 * address, and the first one that is not trusted is the client. Anything to its left
 * was written by the client itself and is ignored, so a client cannot pick its own
 * address by sending the header. A malformed entry ends the walk at the last trusted
 * hop's address. With no --trusted-proxy the header is ignored: the client is the peer.
 *
 * The set is parsed once at start (server.c) and read-only afterwards (app->trusted);
 * the functions are safe from any thread. */
#ifndef SECKILL_CLIENTIP_H
#define SECKILL_CLIENTIP_H

#include <stddef.h>

#define CLIENTIP_MAX_RANGES 64

typedef struct clientip_set {
    int n;
    struct clientip_range {
        unsigned char addr[16];   /* IPv4 as ::ffff:a.b.c.d */
        int bits;                 /* prefix length over the 128-bit form */
    } r[CLIENTIP_MAX_RANGES];
} clientip_set_t;

/* Parses "A[,B...]" (each an IPv4/IPv6 address, optionally /BITS). "" is an empty set.
 * Returns 0, or -1 with the offending entry named in err. */
int clientip_parse(const char *list, clientip_set_t *out, char *err, size_t errlen);

/* 1 if the address (text) is in the set. */
int clientip_trusted(const clientip_set_t *set, const char *addr);

/* The client's address as text: peer, or the X-Forwarded-For entry as described above.
 * Returns peer itself or buf (cap bytes). set may be NULL (empty). */
const char *clientip_of(const clientip_set_t *set, const char *peer, const char *xff,
                        char *buf, size_t cap);

#endif
