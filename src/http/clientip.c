/* clientip.c -- the client's address behind trusted proxies (clientip.h). */
#include "http/clientip.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* addr (text, no brackets or prefix) as 16 bytes, IPv4 mapped. Returns 0 or -1. */
static int to16(const char *addr, size_t n, unsigned char out[16])
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, addr, n);
    buf[n] = '\0';
    unsigned char a4[4];
    if (inet_pton(AF_INET, buf, a4) == 1) {
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, a4, 4);
        return 0;
    }
    return inet_pton(AF_INET6, buf, out) == 1 ? 0 : -1;
}

static int in_range(const struct clientip_range *r, const unsigned char a[16])
{
    int full = r->bits / 8, rest = r->bits % 8;
    if (memcmp(r->addr, a, (size_t)full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (r->addr[full] & mask) == (a[full] & mask);
}

static int member(const clientip_set_t *set, const unsigned char a[16])
{
    for (int i = 0; set != NULL && i < set->n; i++)
        if (in_range(&set->r[i], a))
            return 1;
    return 0;
}

int clientip_parse(const char *list, clientip_set_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *p = list ? list : "";
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, ", ");
        const char *slash = memchr(p, '/', n);
        size_t an = slash ? (size_t)(slash - p) : n;
        struct clientip_range rg = { .bits = 128 };
        int ok = out->n < CLIENTIP_MAX_RANGES && to16(p, an, rg.addr) == 0;
        int v4 = ok && memcmp(rg.addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0;
        if (ok && slash) {
            char *end;
            long b = strtol(slash + 1, &end, 10);
            ok = end == p + n && end > slash + 1 && b >= 0 && b <= (v4 ? 32 : 128);
            rg.bits = (int)(v4 ? 96 + b : b);
        }
        if (!ok) {
            snprintf(err, errlen, "trusted-proxy: \"%.*s\" is not an address or CIDR range%s",
                     (int)(n > 60 ? 60 : n), p,
                     out->n >= CLIENTIP_MAX_RANGES ? " (or one too many)" : "");
            return -1;
        }
        out->r[out->n++] = rg;
        p += n;
    }
    return 0;
}

int clientip_trusted(const clientip_set_t *set, const char *addr)
{
    unsigned char a[16];
    return addr != NULL && to16(addr, strlen(addr), a) == 0 && member(set, a);
}

const char *clientip_of(const clientip_set_t *set, const char *peer, const char *xff,
                        char *buf, size_t cap)
{
    if (set == NULL || set->n == 0 || xff == NULL || !clientip_trusted(set, peer))
        return peer;
    const char *client = peer;
    size_t end = strlen(xff);
    while (end > 0) {
        size_t b = end;
        while (b > 0 && xff[b - 1] != ',')
            b--;
        size_t s = b, e = end;
        while (s < e && (xff[s] == ' ' || xff[s] == '\t'))
            s++;
        while (e > s && (xff[e - 1] == ' ' || xff[e - 1] == '\t'))
            e--;
        unsigned char a[16];
        if (to16(xff + s, e - s, a) != 0 || e - s >= cap)
            return client;   /* malformed: stop at the last hop we trust */
        memcpy(buf, xff + s, e - s);
        buf[e - s] = '\0';
        client = buf;
        if (!member(set, a))
            return client;
        end = b > 0 ? b - 1 : 0;
    }
    return client;
}
