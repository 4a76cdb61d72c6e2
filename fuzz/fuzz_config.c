/* fuzz_config.c -- config_load() on a fuzzed config file plus fuzzed flags.
 *
 * Input: the config file's bytes up to the first NUL byte; after it, NUL-separated
 * command-line arguments (at most 24). The file lives in a memfd and is named to
 * config_load by its /proc/self/fd path, as `--config PATH` would be. Arguments that
 * name another config file are dropped (they would read arbitrary files; /dev/zero
 * never ends), as is --help.
 * Checks: config_load returns 0, 1 or -1; on -1 the error message is a non-empty,
 * NUL-terminated line; on 0 every field is within the range its table row allows
 * and every string is NUL-terminated within its buffer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/config.h"
#include "lab/lab.h"

static int memfd = -1;
static char path[64];

static void check_str(const char *z, size_t cap, const char *what)
{
    if (strnlen(z, cap) >= cap) {
        fprintf(stderr, "fuzz_config: %s is not NUL-terminated\n", what);
        abort();
    }
}

static void check_rate(const config_rate_t *r, const char *what)
{
    if (!(r->per_s >= 0) || !(r->burst >= 0) || (r->per_s > 0 && !(r->burst >= 1)) ||
        r->per_s > 1e6 || r->burst > 1e6) {
        fprintf(stderr, "fuzz_config: %s out of range (%g/s:%g)\n", what, r->per_s, r->burst);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create("fuzz-config", MFD_CLOEXEC);
        if (memfd < 0) {
            abort();
        }
        snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
        /* the environment must not add settings of its own */
        clearenv();
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t flen = nul != NULL ? (size_t)(nul - data) : size;
    if (ftruncate(memfd, 0) != 0 || (flen > 0 && pwrite(memfd, data, flen, 0) != (ssize_t)flen)) {
        abort();
    }

    /* argv: "serve" --config PATH, then the fuzzed arguments */
    char *copy = NULL;
    char *argv[32];
    int argc = 0;
    argv[argc++] = "serve";
    argv[argc++] = "--config";
    argv[argc++] = path;
    if (nul != NULL) {
        size_t rest = size - flen - 1;
        copy = malloc(rest + 1);
        if (copy == NULL) {
            return 0;
        }
        memcpy(copy, nul + 1, rest);
        copy[rest] = '\0';
        for (char *p = copy; p < copy + rest + 1 && argc < 27;) {
            size_t n = strlen(p);
            if (strstr(p, "config") == NULL && strcmp(p, "--help") != 0 && strcmp(p, "-h") != 0) {
                argv[argc++] = p;
            }
            p += n + 1;
            if (p > copy + rest) {
                break;
            }
        }
    }
    argv[argc] = NULL;

    config_t cfg;
    char err[512];
    memset(err, 'x', sizeof(err));
    err[sizeof(err) - 1] = '\0';
    err[0] = '\0';
    int rc = config_load(&cfg, argc, argv, err, sizeof(err));
    if (rc == 0 && lab_config_check(&cfg, err, sizeof(err)) < 0)   /* as main.c runs it */
        rc = -1;
    if (rc == -1) {
        if (err[0] == '\0' || strnlen(err, sizeof(err)) >= sizeof(err)) {
            fprintf(stderr, "fuzz_config: failure without a message\n");
            abort();
        }
    } else if (rc == 0) {
        check_str(cfg.listen_host, sizeof(cfg.listen_host), "listen_host");
        check_str(cfg.redis_url, sizeof(cfg.redis_url), "redis_url");
        check_str(cfg.db_url, sizeof(cfg.db_url), "db_url");
        check_str(cfg.data_dir, sizeof(cfg.data_dir), "data_dir");
        check_str(cfg.admin_token, sizeof(cfg.admin_token), "admin_token");
        check_str(cfg.name, sizeof(cfg.name), "name");
        check_str(cfg.config_file, sizeof(cfg.config_file), "config_file");
        check_str(cfg.redis_server_bin, sizeof(cfg.redis_server_bin), "redis_server_bin");
        check_str(cfg.code_command, sizeof(cfg.code_command), "code_command");
        check_str(cfg.trusted_proxy, sizeof(cfg.trusted_proxy), "trusted_proxy");
        if (cfg.listen_port < 1 || cfg.listen_port > 65535 || cfg.threads < 1 ||
            cfg.threads > 256 || (unsigned)cfg.mode >= MODE__SERVICE || cfg.log_level < 0 ||
            cfg.log_level > 3 || cfg.max_header_bytes < 1024 || cfg.max_body_bytes < 1024 ||
            cfg.redis_timeout_ms < 10 || cfg.max_conns < 0 || cfg.writer_batch < 1 ||
            cfg.code_command_timeout_ms < 100) {
            fprintf(stderr, "fuzz_config: a setting outside its range was accepted\n");
            abort();
        }
        check_rate(&cfg.rate_user_seckill, "rate-user-seckill");
        check_rate(&cfg.rate_ip_seckill, "rate-ip-seckill");
        check_rate(&cfg.rate_ip_code, "rate-ip-code");
        check_rate(&cfg.rate_phone_code, "rate-phone-code");
        check_rate(&cfg.rate_phone_login, "rate-phone-login");
        check_rate(&cfg.rate_ip_login, "rate-ip-login");
    } else if (rc != 1) {
        fprintf(stderr, "fuzz_config: config_load returned %d\n", rc);
        abort();
    }
    free(copy);
    return 0;
}
