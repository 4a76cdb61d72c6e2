/* test_secret.c -- the secret-file reader's checks (core/secret.h). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/secret.h"

static char dir[] = "/tmp/test_secret_XXXXXX";

static void put(const char *name, const char *text, mode_t mode)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
}

/* secret_read of name in dir: its return, the text in buf, the reason in err. */
static int rd(const char *name, int flags, char *buf, size_t cap, char *err)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    err[0] = '\0';
    return secret_read(AT_FDCWD, path, path, flags, 8, buf, cap, NULL, err, 512);
}

static void test_checks(void **state)
{
    (void)state;
    char buf[64], err[512];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(rd("absent", 0, buf, sizeof buf, err), 0);
    put("ok", "a good key 0123\n", 0600);
    assert_int_equal(rd("ok", SECRET_KEY, buf, sizeof buf, err), 1);
    assert_string_equal(buf, "a good key 0123");
    put("open", "a good key 0123\n", 0644);
    assert_int_equal(rd("open", 0, buf, sizeof buf, err), -1);
    assert_non_null(strstr(err, "by others"));
    put("group", "a good key 0123\n", 0640);
    assert_int_equal(rd("group", SECRET_OURS, buf, sizeof buf, err), -1);
    assert_non_null(strstr(err, "by its group"));
    char target[128], link[128];
    snprintf(target, sizeof target, "%s/ok", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(rd("link", 0, buf, sizeof buf, err), -1);
    assert_non_null(strstr(err, "symlink"));
    put("flat", "AAAAAAAAAAAAAAAA\n", 0600);
    assert_int_equal(rd("flat", SECRET_KEY, buf, sizeof buf, err), -1);
    assert_non_null(strstr(err, "variety"));
    assert_int_equal(rd("flat", 0, buf, sizeof buf, err), 1);      /* a password may be */
    put("short", "abcdef\n", 0600);
    assert_int_equal(rd("short", 0, buf, sizeof buf, err), -1);
    assert_non_null(strstr(err, "too short"));
    put("long", "0123456789abcdef0123456789abcdef\nsecond line\n", 0600);
    assert_int_equal(rd("long", SECRET_LINE, buf, 40, err), 1);
    assert_string_equal(buf, "0123456789abcdef0123456789abcdef");
    assert_int_equal(rd("long", 0, buf, 40, err), -1);
    assert_non_null(strstr(err, "too long"));
    assert_non_null(secret_weak("abababababababab", 16));
    assert_null(secret_weak("0f3a9c71e2b4d85a", 16));
    const char *names[] = {"ok", "open", "group", "link", "flat", "short", "long"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
