/* xmem.h -- allocation that cannot fail: out of memory logs one line and aborts.
 *
 * This is the service's OOM policy (docs/design.md, "Failure policy"): a worker that
 * cannot allocate is better restarted than limping, and admitted orders live in Redis,
 * not in our memory. One copy here, used by every module that follows the policy. */
#ifndef SECKILL_XMEM_H
#define SECKILL_XMEM_H

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* realloc that never returns NULL (a size of 0 still returns a unique pointer). */
static inline void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        log_error("out of memory (%zu bytes)", n);
        abort();
    }
    return q;
}

/* strdup that never returns NULL; free() the result. */
static inline char *xstrdup(const char *z)
{
    size_t n = strlen(z) + 1;
    char *p = xrealloc(NULL, n);
    memcpy(p, z, n);
    return p;
}

#endif
