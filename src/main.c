/* main.c -- the `seckill` command: one binary, one subcommand per job.
 *
 *   seckill serve   the flash-sale service (server.c)
 *   seckill bench   flash-sale rehearsal and load generator (bench.c)
 *   seckill audit   invariant checker (audit.c)
 *   seckill tokens  login tokens for load tools (tools/seed.c)
 *   seckill redis   operator commands on the Redis state: rebuild (redis_tool.c)
 */
#include <stdio.h>
#include <string.h>

#include "cmd/audit.h"
#include "cmd/bench.h"
#include "cmd/lab_tool.h"
#include "cmd/seed.h"
#include "core/config.h"
#include "lab/lab.h"
#include "cmd/redis_tool.h"
#include "sale/order_mode.h"
#include "server/server.h"

#define SECKILL_VERSION "0.3.0"

static void usage(FILE *f)
{
    fprintf(f,
            "seckill %s -- a flash-sale (秒杀) voucher service\n\n"
            "usage: seckill <command> [options]\n\n"
            "commands:\n"
            "  serve     run the service (with no options: embedded Redis + SQLite under ./var)\n"
            "  bench     rehearse a flash sale against a running service, then audit it\n"
            "  audit     check Redis and SQL for oversell, duplicates, lost orders\n"
            "  lab       run every step of the course's flash-sale chapter, audit each, one table\n"
            "  tokens    mint users' login tokens (signed with the service's key) for load tools\n"
            "  redis rebuild   republish vouchers whose keys Redis lost, from SQL\n"
            "  redis lock-check  check that sync mode's locks exclude each other on a Redis (Cluster)\n"
            "  version   print the version\n\n"
            "`seckill <command> --help` lists its options.\n",
            SECKILL_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* The lab's steps are rows of the table of order modes, added here: the one place
     * outside src/lab/ that knows the lab (lab.h). Every command sees the same table
     * (`seckill audit --mode` reads it too). */
    lab_register();
    if (strcmp(cmd, "serve") == 0) {
        config_t cfg;
        char err[1024];
        int rc = config_load(&cfg, argc - 1, argv + 1, err, sizeof err);
        /* --mode picks a row of the table, then the plug-ins check their own flags. */
        if (rc == 0 && order_mode_pick(&cfg, err, sizeof err) < 0)
            rc = -1;
        if (rc == 1) {
            config_usage("serve");
            return 0;
        }
        if (rc < 0) {
            fprintf(stderr, "seckill: %s\n", err);
            return 2;
        }
        return server_run(&cfg);
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("seckill %s\n", SECKILL_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "bench") == 0)
        return bench_main(argc - 1, argv + 1);
    if (strcmp(cmd, "audit") == 0)
        return audit_main(argc - 1, argv + 1);
    if (strcmp(cmd, "lab") == 0)
        return lab_tool_main(argc - 1, argv + 1);
    if (strcmp(cmd, "tokens") == 0)
        return seed_tokens_main(argc - 1, argv + 1);
    if (strcmp(cmd, "redis") == 0)
        return redis_tool_main(argc - 1, argv + 1);
    fprintf(stderr, "seckill: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}
