/* runcmd.h -- run a shell command from a worker's loop without blocking it.
 *
 * For --code-command (logincode.c): `/bin/sh -c CMD` in a process group of its own, with
 * stdin from /dev/null, stdout to /dev/null, stderr to ours (the log), no file
 * descriptor of ours but those three, and an environment that is ours without any
 * SECKILL_* variable (they may hold secrets) plus the given NAME=VALUE strings. Secrets
 * for the command go in the environment, never in argv (/proc/PID/cmdline is public).
 *
 * The child's exit is watched through a pidfd on the worker's loop; after timeout_ms the
 * whole process group is killed. cb runs exactly once on the worker's thread, never
 * before runcmd_start returns: ok 1 when the command exited 0, else 0 with why set.
 *
 * Commands are bounded: each needs a slot taken with runcmd_reserve (at most max_running
 * slots in this process, all workers together), so a flood of requests that each want a
 * command cannot fork a shell per request; a caller takes its slot before any work that
 * should not be done for nothing (logincode.c: before the phone's allowance). */
#ifndef SECKILL_RUNCMD_H
#define SECKILL_RUNCMD_H

#include <sys/types.h>

struct worker;

typedef void (*runcmd_cb)(void *priv, int ok, const char *why);

/* Takes a slot for one command: 1, or 0 when max_running slots are taken. */
int runcmd_reserve(int max_running);
/* Gives back a slot taken and not used by runcmd_start. */
void runcmd_release(void);

/* Starts cmd in a slot the caller took; the slot is given back when the command has
 * been reaped, or at once when it cannot start. Returns 0 (cb will run), or -1 if the
 * command could not be started (cb never runs). */
int runcmd_start(struct worker *w, const char *cmd, const char *const *env_add, int timeout_ms,
                 runcmd_cb cb, void *priv);

/* The spawn alone, for a caller that watches the child itself (the order writer's
 * refunds, src/writer/writer_refund.c: waitpid(*pid, WNOHANG) on its own loop, kill(-*pid)
 * at its deadline): `/bin/sh -c cmd` as above, in a process group of its own. 0 with
 * *pid, or -1 (logged). Any thread; no slot is taken. */
int runcmd_spawn(const char *cmd, const char *const *env_add, pid_t *pid);

#endif
