/* cmd_args.h -- the options of the commands beside serve (bench, audit, lab, tokens,
 * redis rebuild, redis lock-check), parsed from one table per command.
 *
 * A row names an option (--name, without the dashes), the field of the command's options
 * struct it fills (by offset), the field's type and range, and its --help line. The parser
 * takes `--name value` and `--name=value`; --help or -h where an option may stand asks for
 * the help. A mistake is refused with a message naming the option: an argument that is not
 * an option, an unknown option, a missing value, a value that is not a number or out of
 * range, a string empty or too long for its field. Defaults are whatever the command put
 * into the struct before parsing. `seckill serve`'s settings have their own table
 * (config.c): they also come from a file and from the environment. */
#ifndef SECKILL_CMD_ARGS_H
#define SECKILL_CMD_ARGS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    CMD_ARG_STR,    /* copied into char[size] */
    CMD_ARG_PTR,    /* const char *: argv's own string */
    CMD_ARG_INT,    /* int: a whole number in [min, max] */
    CMD_ARG_I64,    /* int64_t: a whole number in [min, max] */
    CMD_ARG_DBL,    /* double in [min, max] */
    CMD_ARG_SET,    /* no value: the int field becomes `size` */
    CMD_ARG_I64S,   /* repeatable: int64_t[] of size bytes, its size_t count at count_off */
} cmd_arg_type_t;

typedef struct cmd_arg {
    const char *name;
    cmd_arg_type_t type;
    size_t off;                 /* offsetof(the options struct, field) */
    size_t size;                /* sizeof the field; CMD_ARG_SET: the value to store */
    double min, max;            /* numbers (CMD_ARG_INT, _I64, _DBL, _I64S) */
    const char *arg;            /* the value's name in --help ("URL"); NULL for a flag */
    const char *help;           /* NULL: not listed; a "\n" goes on under the text's start */
    size_t count_off;           /* CMD_ARG_I64S: offsetof its count */
} cmd_arg_t;

typedef struct cmd_args {
    const cmd_arg_t *opt;
    size_t n;
    int width;                  /* --help: the width of the column of options */
} cmd_args_t;

/* A row's off and size: CMD_ARGS_FIELD(bench_opts_t, users). */
#define CMD_ARGS_FIELD(type, field) offsetof(type, field), sizeof(((type *)0)->field)
/* A flag's off and the value it stores: CMD_ARGS_SET(bench_opts_t, audit, 0). */
#define CMD_ARGS_SET(type, field, value) offsetof(type, field), (size_t)(value)

/* Fills the struct at dst from argv (argv[0] is the command's name). Returns 0, 1 for
 * --help, or -1 with the reason in err. */
int cmd_args_parse(const cmd_args_t *spec, int argc, char **argv, void *dst, char *err,
                   size_t errlen);

/* cmd_args_parse as a command's main uses it: after --help, usage(stdout); after a mistake,
 * "<prog>: <reason>" on stderr. Returns -1 to go on, else the exit status to return: 0
 * after --help, 2 after a mistake. */
int cmd_args_main(const cmd_args_t *spec, const char *prog, void (*usage)(FILE *f), int argc,
                  char **argv, void *dst);

/* The options' lines of --help: "  --name ARG" in a column of spec->width, then the help. */
void cmd_args_help(FILE *f, const cmd_args_t *spec);

#endif
