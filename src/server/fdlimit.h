/* fdlimit.h -- RLIMIT_NOFILE sized for the connections the workers may hold.
 *
 * Every worker may hold --max-conns connections, so the process needs max-conns x workers
 * descriptors plus its own (Redis and SQL connections, listeners, event loops, the
 * embedded redis-server's pipes). Without that, accept() fails with EMFILE long before
 * --max-conns is reached, and other parts (a Redis reconnect, a SQLite file) fail with it. */
#ifndef SECKILL_FDLIMIT_H
#define SECKILL_FDLIMIT_H

#include <stddef.h>

#include "core/config.h"

enum { FDLIMIT_DEFAULT_CONNS = 10000 };   /* per worker, when --max-conns is 0 */

/* Raises the soft limit (and the hard one when allowed, as root) to
 * cfg->max_conns x cfg->threads + the process's own (the descriptors open now + own_extra).
 * cfg->max_conns 0 means FDLIMIT_DEFAULT_CONNS, lowered to fit a limit that cannot be
 * raised far enough (with a warning); an explicit value that cannot fit is an error.
 * Sets cfg->max_conns to the value in force and logs what was set. Returns 0, or -1 with
 * a message in err. */
int fdlimit_raise(config_t *cfg, int own_extra, char *err, size_t errlen);

#endif
