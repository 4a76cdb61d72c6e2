/* runcmd.c -- a time-limited shell command watched from a worker's loop (runcmd.h).
 *
 * posix_spawn (vfork-like, cheap even from a large process) with closefrom(3) as a file
 * action, so listening sockets and Redis connections never leak into the child; the
 * pidfd (pidfd_open(2), Linux >= 5.3) becomes readable when the child exits, which is
 * one libevent event with the deadline as its timeout. The child is reaped with
 * waitpid(pid) only: other children (the embedded redis-server) are not disturbed.
 * One process-wide counter of slots (runcmd_reserve) bounds the commands running at
 * once: a slot is taken before the spawn and given back when the command is reaped. */
#include "core/runcmd.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "server/worker.h"
#include "core/xmem.h"

extern char **environ;

static atomic_int slots;   /* taken: commands starting or running, every worker */

typedef struct runcmd_job {
    pid_t pid;
    int pidfd;
    struct event *ev;
    runcmd_cb cb;
    void *priv;
} runcmd_job_t;

/* Our environment without SECKILL_*, then env_add; NULL-terminated, strings borrowed. */
static char **child_env(const char *const *env_add)
{
    size_t n = 0, k = 0;
    for (char **e = environ; e && *e; e++)
        n++;
    for (const char *const *a = env_add; a && *a; a++)
        n++;
    char **env = xcalloc(n + 1, sizeof *env);
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, "SECKILL_", 8) != 0)
            env[k++] = *e;
    for (const char *const *a = env_add; a && *a; a++)
        env[k++] = (char *)*a;
    env[k] = NULL;
    return env;
}

static void finish(runcmd_job_t *j, int ok, const char *why)
{
    runcmd_cb cb = j->cb;
    void *priv = j->priv;
    event_free(j->ev);
    close(j->pidfd);
    free(j);
    runcmd_release();
    cb(priv, ok, why);
}

static void on_child(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    runcmd_job_t *j = arg;
    int st = 0;
    if (what & EV_TIMEOUT) {
        kill(-j->pid, SIGKILL);   /* the shell and whatever it started */
        while (waitpid(j->pid, &st, 0) < 0 && errno == EINTR) {
        }
        finish(j, 0, "timed out");
        return;
    }
    pid_t r;
    while ((r = waitpid(j->pid, &st, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (r == 0) {
        return;   /* not yet (a spurious wake-up): the event stays armed */
    }
    char why[64];
    if (r < 0)
        snprintf(why, sizeof why, "waitpid: %s", strerror(errno));
    else if (WIFEXITED(st))
        snprintf(why, sizeof why, "exit status %d", WEXITSTATUS(st));
    else
        snprintf(why, sizeof why, "killed by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    finish(j, r > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, why);
}

int runcmd_reserve(int max_running)
{
    /* the check and the count are one step, whichever workers race */
    if (atomic_fetch_add(&slots, 1) >= max_running) {
        atomic_fetch_sub(&slots, 1);
        return 0;
    }
    return 1;
}

void runcmd_release(void)
{
    atomic_fetch_sub(&slots, 1);
}

int runcmd_spawn(const char *cmd, const char *const *env_add, pid_t *pid)
{
    char **env = child_env(env_add);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int fa_ok = 0, at_ok = 0, rc = -1;
    fa_ok = posix_spawn_file_actions_init(&fa) == 0;
    at_ok = posix_spawnattr_init(&at) == 0;
    if (!fa_ok || !at_ok ||
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) != 0 ||
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0) != 0 ||
        posix_spawn_file_actions_addclosefrom_np(&fa, 3) != 0 ||
        posix_spawnattr_setpgroup(&at, 0) != 0 ||
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP) != 0)
        goto out;
    char *argv[] = { "/bin/sh", "-c", (char *)cmd, NULL };
    int err = posix_spawn(pid, "/bin/sh", &fa, &at, argv, env);
    if (err != 0) {
        log_error("command: cannot start /bin/sh: %s", strerror(err));
        goto out;
    }
    rc = 0;
out:
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (at_ok)
        posix_spawnattr_destroy(&at);
    free(env);
    return rc;
}

int runcmd_start(worker_t *w, const char *cmd, const char *const *env_add, int timeout_ms,
                 runcmd_cb cb, void *priv)
{
    runcmd_job_t *j = xcalloc(1, sizeof *j);
    int rc = -1;
    j->pidfd = -1;
    if (runcmd_spawn(cmd, env_add, &j->pid) != 0)
        goto out;
    j->pidfd = (int)syscall(SYS_pidfd_open, j->pid, 0);
    if (j->pidfd < 0) {
        log_error("code command: pidfd_open: %s", strerror(errno));
        kill(-j->pid, SIGKILL);
        waitpid(j->pid, NULL, 0);
        goto out;
    }
    j->cb = cb;
    j->priv = priv;
    j->ev = event_new(w->base, j->pidfd, EV_READ | EV_PERSIST, on_child, j);
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    if (j->ev == NULL || event_add(j->ev, &tv) != 0) {
        if (j->ev)
            event_free(j->ev);
        kill(-j->pid, SIGKILL);
        waitpid(j->pid, NULL, 0);
        close(j->pidfd);
        goto out;
    }
    j = NULL;   /* owned by the event now */
    rc = 0;
out:
    free(j);
    if (rc != 0)
        runcmd_release();
    return rc;
}
