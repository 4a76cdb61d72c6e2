/* fdlimit.c -- RLIMIT_NOFILE for max-conns x workers (see fdlimit.h). */
#include "server/fdlimit.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>

#include "core/log.h"

/* Descriptors open now (the process's own so far). */
static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 64;             /* no /proc: a guess, the headroom covers it */
    long n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

int fdlimit_raise(config_t *cfg, int own_extra, char *err, size_t errlen)
{
    int threads = cfg->threads > 0 ? cfg->threads : 1;
    int explicit_conns = cfg->max_conns > 0;
    long conns = explicit_conns ? cfg->max_conns : FDLIMIT_DEFAULT_CONNS;
    long own = open_fds() + own_extra;
    unsigned long long want = (unsigned long long)conns * (unsigned long long)threads +
                              (unsigned long long)own;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        snprintf(err, errlen, "getrlimit(RLIMIT_NOFILE) failed");
        return -1;
    }
    unsigned long long was = rl.rlim_cur;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        struct rlimit nr = rl;
        nr.rlim_cur = (rlim_t)want;
        if (nr.rlim_max != RLIM_INFINITY && nr.rlim_max < want)
            nr.rlim_max = (rlim_t)want;        /* allowed as root (CAP_SYS_RESOURCE) */
        if (setrlimit(RLIMIT_NOFILE, &nr) != 0) {
            /* Not allowed (or over fs.nr_open): as far as the hard limit goes. */
            nr.rlim_max = rl.rlim_max;
            nr.rlim_cur = rl.rlim_max;
            if (setrlimit(RLIMIT_NOFILE, &nr) != 0)
                nr = rl;
        }
        rl = nr;
    }
    unsigned long long have = rl.rlim_cur;
    if (rl.rlim_cur != RLIM_INFINITY && have < want) {
        if (explicit_conns) {
            snprintf(err, errlen,
                     "--max-conns %ld x %d workers needs %llu file descriptors (with %ld for the "
                     "process itself), but the limit is %llu and cannot be raised further (hard "
                     "limit %llu): lower --max-conns or --threads, or raise the hard limit "
                     "(ulimit -Hn, systemd LimitNOFILE=)",
                     conns, threads, want, own, have, (unsigned long long)rl.rlim_max);
            return -1;
        }
        conns = have > (unsigned long long)own ? (long)((have - (unsigned long long)own) / threads) : 0;
        if (conns < 16) {
            snprintf(err, errlen, "the file-descriptor limit (%llu) leaves no room for "
                     "connections: raise it (ulimit -n)", have);
            return -1;
        }
        log_warn("file descriptors: the limit is %llu (hard %llu): --max-conns lowered to %ld "
                 "per worker to fit", have, (unsigned long long)rl.rlim_max, conns);
    }
    cfg->max_conns = (int)conns;
    log_info("file descriptors: limit %llu (was %llu) for %ld connections x %d workers + %ld "
             "for the process", have, was, conns, threads, own);
    return 0;
}
