/* rnd.h -- random text from the kernel's RNG (getrandom(2)): login codes, nicknames,
 * tokens. No state, no ownership: callers pass their own buffers. */
#ifndef SECKILL_RND_H
#define SECKILL_RND_H

#include <stddef.h>

/* Fills out[0..n-1] with characters drawn uniformly from alphabet (k <= 256 symbols) by
 * rejection sampling; no NUL is added. Returns 0, or -1 if the kernel RNG failed. */
int rnd_chars(char *out, size_t n, const char *alphabet, unsigned k);

/* Writes nbytes random bytes (at most 64) as 2*nbytes lowercase hex digits and a NUL into
 * out (2*nbytes+1 bytes). Returns 0, or -1 if the kernel RNG failed. */
int rnd_hex(char *out, size_t nbytes);

#endif
