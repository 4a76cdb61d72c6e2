/* test_cmd_args.c -- the commands' option parser (cmd_args.h): every type of row, both
 * spellings of a value, each refusal and its message, the --help lines' layout, and what a
 * command's main makes of the outcome. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd_args.h"

typedef struct opts {
    char name[8];
    const char *url;
    int n;
    int64_t big;
    double rate;
    int flag;
    int64_t ids[2];
    size_t nids;
} opts_t;

#define F(field) CMD_ARGS_FIELD(opts_t, field)

static const cmd_arg_t rows[] = {
    {"name", CMD_ARG_STR, F(name), 0, 0, "S", "a name"},
    {"url", CMD_ARG_PTR, F(url), 0, 0, "URL", "an address,\nsaid on two lines"},
    {"n", CMD_ARG_INT, F(n), 1, 10, "N", "a count [3]"},
    {"big", CMD_ARG_I64, F(big), 0, 9e18, "N", NULL},
    {"rate", CMD_ARG_DBL, F(rate), 0, 1e6, "R", "a rate"},
    {"flag", CMD_ARG_SET, CMD_ARGS_SET(opts_t, flag, 7), 0, 0, NULL, "a flag"},
    {"id", CMD_ARG_I64S, F(ids), 1, 100, "ID", "repeatable", offsetof(opts_t, nids)},
    {"a-very-long-option", CMD_ARG_SET, CMD_ARGS_SET(opts_t, flag, 1), 0, 0, NULL, "long"},
};
static const cmd_args_t spec = {rows, sizeof rows / sizeof rows[0], 10};

static char err[256];

/* Parses the NULL-terminated arguments into a fresh *o (n = 3 by default). */
static int parse(opts_t *o, ...)
{
    char *argv[32] = {"test"};
    int argc = 1;
    va_list ap;
    va_start(ap, o);
    char *a;
    while ((a = va_arg(ap, char *)) != NULL && argc < 31)
        argv[argc++] = a;
    va_end(ap);
    memset(o, 0, sizeof *o);
    o->n = 3;
    err[0] = '\0';
    return cmd_args_parse(&spec, argc, argv, o, err, sizeof err);
}

static void test_values(void **state)
{
    (void)state;
    opts_t o;
    assert_int_equal(parse(&o, NULL), 0);
    assert_int_equal(o.n, 3);   /* untouched: the default */
    assert_null(o.url);
    assert_int_equal(parse(&o, "--name", "abc", "--url=unix:/x", "--n", "10", "--big",
                           "9007199254740993", "--rate", "2.5e3", "--flag", "--id", "4", "--id=5",
                           NULL),
                     0);
    assert_string_equal(o.name, "abc");
    assert_string_equal(o.url, "unix:/x");
    assert_int_equal(o.n, 10);
    assert_int_equal(o.big, 9007199254740993LL);   /* beyond 2^53: every digit */
    assert_true(o.rate == 2500);
    assert_int_equal(o.flag, 7);
    assert_int_equal(o.nids, 2);
    assert_int_equal(o.ids[0], 4);
    assert_int_equal(o.ids[1], 5);
    /* a value may start with dashes: it is the option's */
    assert_int_equal(parse(&o, "--url", "--n", NULL), 0);
    assert_string_equal(o.url, "--n");
    assert_int_equal(parse(&o, "--help", NULL), 1);
    assert_int_equal(parse(&o, "--n", "2", "-h", "--nope", NULL), 1);
}

static void test_refusals(void **state)
{
    (void)state;
    struct {
        const char *a, *b, *msg;
    } bad[] = {
        {"x", NULL, "unexpected argument \"x\" (see --help)"},
        {"-n", "3", "unexpected argument \"-n\" (see --help)"},
        {"--nope", NULL, "unknown option \"--nope\" (see --help)"},
        {"--nope=1", NULL, "unknown option \"--nope=1\" (see --help)"},
        {"--n", NULL, "--n needs a value (see --help)"},
        {"--flag=1", NULL, "--flag takes no value"},
        {"--n", "0", "--n must be a whole number from 1 to 10, not \"0\""},
        {"--n", "11", "--n must be a whole number from 1 to 10, not \"11\""},
        {"--n", "2.5", "--n must be a whole number from 1 to 10, not \"2.5\""},
        {"--n", "2x", "--n must be a whole number from 1 to 10, not \"2x\""},
        {"--n", "", "--n must be a whole number from 1 to 10, not \"\""},
        {"--big", "99999999999999999999", "--big must be a whole number"},
        {"--rate", "nan", "--rate must be a number from 0 to 1e+06, not \"nan\""},
        {"--rate", "-1", "--rate must be a number from 0 to 1e+06"},
        {"--name", "", "--name: value empty or too long"},
        {"--name", "12345678", "--name: value empty or too long"},   /* 8 bytes + NUL > 8 */
        {"--url", "", "--url: value empty or too long"},
        {"--id", "0", "--id must be a whole number from 1 to 100, not \"0\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        opts_t o;
        int rc = bad[i].b ? parse(&o, bad[i].a, bad[i].b, NULL) : parse(&o, bad[i].a, NULL);
        if (rc != -1 || strncmp(err, bad[i].msg, strlen(bad[i].msg)) != 0) {
            fprintf(stderr, "case %zu (%s %s): rc %d, err \"%s\"\n", i, bad[i].a,
                    bad[i].b ? bad[i].b : "", rc, err);
            fail();
        }
    }
    opts_t o;
    assert_int_equal(parse(&o, "--name", "1234567", NULL), 0);   /* fits with its NUL */
    assert_int_equal(parse(&o, "--id", "1", "--id", "2", "--id", "3", NULL), -1);
    assert_string_equal(err, "--id: at most 2 of them");
    assert_int_equal(o.nids, 2);
}

static void test_help(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cmd_args_help(f, &spec);
    fclose(f);
    assert_string_equal(text, "  --name S   a name\n"   /* the column: 2 + 10 + 1 */
                              "  --url URL  an address,\n"
                              "             said on two lines\n"
                              "  --n N      a count [3]\n"
                              "  --rate R   a rate\n"
                              "  --flag     a flag\n"
                              "  --id ID    repeatable\n"
                              "  --a-very-long-option  long\n");
    free(text);
}

static int usage_calls;
static void usage(FILE *f)
{
    (void)f;
    usage_calls++;
}

/* What a command's main does with the outcome: go on, exit 0 after the usage, exit 2. */
static void test_main(void **state)
{
    (void)state;
    opts_t o = {0};
    char *ok[] = {"test", "--n", "4"}, *help[] = {"test", "-h"}, *bad[] = {"test", "--n"};
    assert_int_equal(cmd_args_main(&spec, "test", usage, 3, ok, &o), -1);
    assert_int_equal(o.n, 4);
    assert_int_equal(usage_calls, 0);
    assert_int_equal(cmd_args_main(&spec, "test", usage, 2, help, &o), 0);
    assert_int_equal(usage_calls, 1);
    assert_int_equal(cmd_args_main(&spec, "test", usage, 2, bad, &o), 2);   /* and a message */
    assert_int_equal(usage_calls, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_main),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
