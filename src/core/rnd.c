/* rnd.c -- random text from getrandom(2) (rnd.h). */
#include "core/rnd.h"

#include <sys/random.h>
#include <sys/types.h>

int rnd_chars(char *out, size_t n, const char *alphabet, unsigned k)
{
    if (k == 0 || k > 256) {
        return -1;
    }
    unsigned limit = 256u - 256u % k;   /* bytes >= limit would favour the first symbols */
    size_t done = 0;
    while (done < n) {
        unsigned char buf[64];
        ssize_t got = getrandom(buf, sizeof(buf), 0);
        if (got <= 0) {
            return -1;
        }
        for (ssize_t i = 0; i < got && done < n; i++) {
            if (buf[i] < limit) {
                out[done++] = alphabet[buf[i] % k];
            }
        }
    }
    return 0;
}

int rnd_hex(char *out, size_t nbytes)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    if (nbytes > sizeof(raw) || getrandom(raw, nbytes, 0) != (ssize_t)nbytes) {
        return -1;
    }
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * nbytes] = '\0';
    return 0;
}
