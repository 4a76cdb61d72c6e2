/* cmd_args.c -- the commands' table-driven option parser and --help lines (cmd_args.h). */
#include "cmd/cmd_args.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The size a row's type needs of its field; 0 when any size goes. */
static size_t field_size(cmd_arg_type_t t)
{
    switch (t) {
    case CMD_ARG_PTR: return sizeof(const char *);
    case CMD_ARG_INT: return sizeof(int);
    case CMD_ARG_I64: return sizeof(int64_t);
    case CMD_ARG_DBL: return sizeof(double);
    default: return 0;
    }
}

static const cmd_arg_t *find(const cmd_args_t *spec, const char *name, size_t n)
{
    for (size_t k = 0; k < spec->n; k++)
        if (strlen(spec->opt[k].name) == n && memcmp(spec->opt[k].name, name, n) == 0)
            return &spec->opt[k];
    return NULL;
}

/* A whole number of the row's range into *out; -1 with the message otherwise. strtoll,
 * not strtod: ids beyond 2^53 keep every digit. */
static int whole(const cmd_arg_t *b, const char *v, long long *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || (double)x < b->min || (double)x > b->max) {
        snprintf(err, errlen, "--%s must be a whole number from %g to %g, not \"%s\"", b->name,
                 b->min, b->max, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* Stores value v of row b into its field. */
static int store(const cmd_arg_t *b, const char *v, char *field, void *dst, char *err,
                 size_t errlen)
{
    long long x;
    switch (b->type) {
    case CMD_ARG_STR:
    case CMD_ARG_PTR:
        if (!*v || (b->type == CMD_ARG_STR && strlen(v) >= b->size)) {
            snprintf(err, errlen, "--%s: value empty or too long", b->name);
            return -1;
        }
        if (b->type == CMD_ARG_STR)
            memcpy(field, v, strlen(v) + 1);
        else
            *(const char **)field = v;
        return 0;
    case CMD_ARG_INT:
        if (whole(b, v, &x, err, errlen) < 0)
            return -1;
        *(int *)field = (int)x;
        return 0;
    case CMD_ARG_I64:
        if (whole(b, v, &x, err, errlen) < 0)
            return -1;
        *(int64_t *)field = x;
        return 0;
    case CMD_ARG_I64S: {
        size_t *count = (size_t *)((char *)dst + b->count_off);
        if (*count >= b->size / sizeof(int64_t)) {
            snprintf(err, errlen, "--%s: at most %zu of them", b->name, b->size / sizeof(int64_t));
            return -1;
        }
        if (whole(b, v, &x, err, errlen) < 0)
            return -1;
        ((int64_t *)field)[(*count)++] = x;
        return 0;
    }
    case CMD_ARG_DBL: {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(d) || d < b->min || d > b->max) {
            snprintf(err, errlen, "--%s must be a number from %g to %g, not \"%s\"", b->name,
                     b->min, b->max, v);
            return -1;
        }
        *(double *)field = d;
        return 0;
    }
    case CMD_ARG_SET:
        break;
    }
    return -1;
}

int cmd_args_parse(const cmd_args_t *spec, int argc, char **argv, void *dst, char *err,
                   size_t errlen)
{
    for (size_t k = 0; k < spec->n; k++) {   /* a mistake in the command's table */
        size_t need = field_size(spec->opt[k].type);
        if (need && spec->opt[k].size != need) {
            fprintf(stderr, "cmd_args: --%s: its field does not fit its type\n",
                    spec->opt[k].name);
            abort();
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", a);
            return -1;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        const cmd_arg_t *b = find(spec, name, eq ? (size_t)(eq - name) : strlen(name));
        if (!b) {
            snprintf(err, errlen, "unknown option \"%s\" (see --help)", a);
            return -1;
        }
        char *field = (char *)dst + b->off;
        if (b->type == CMD_ARG_SET) {
            if (eq) {
                snprintf(err, errlen, "--%s takes no value", b->name);
                return -1;
            }
            *(int *)field = (int)b->size;
            continue;
        }
        const char *v;
        if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            snprintf(err, errlen, "--%s needs a value (see --help)", b->name);
            return -1;
        }
        if (store(b, v, field, dst, err, errlen) < 0)
            return -1;
    }
    return 0;
}

int cmd_args_main(const cmd_args_t *spec, const char *prog, void (*usage)(FILE *f), int argc,
                  char **argv, void *dst)
{
    char err[512];
    int rc = cmd_args_parse(spec, argc, argv, dst, err, sizeof err);
    if (rc == 1)
        usage(stdout);
    else if (rc < 0)
        fprintf(stderr, "%s: %s\n", prog, err);
    return rc == 0 ? -1 : rc == 1 ? 0 : 2;
}

void cmd_args_help(FILE *f, const cmd_args_t *spec)
{
    for (size_t k = 0; k < spec->n; k++) {
        const cmd_arg_t *b = &spec->opt[k];
        if (!b->help)
            continue;
        char flag[64];
        int len = snprintf(flag, sizeof flag, "--%s%s%s", b->name, b->arg ? " " : "",
                           b->arg ? b->arg : "");
        /* one space after the column, two after an option that fills it */
        fprintf(f, "  %s%*s", flag, len < spec->width ? spec->width - len + 1 : 2, "");
        for (const char *p = b->help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n')
                fprintf(f, "%*s", spec->width + 3, "");
        }
        fputc('\n', f);
    }
}
