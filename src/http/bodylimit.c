/* bodylimit.c -- request body limits per route (see bodylimit.h). A few length-and-memcmp
 * tests per request head: nothing measurable beside parsing it. */
#include "http/bodylimit.h"

#include <string.h>

#include "http/http_req.h"

static int is(const char *path, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n == l && memcmp(path, lit, l) == 0;
}

static int starts(const char *path, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n > l && memcmp(path, lit, l) == 0;
}

size_t bodylimit_for(int method, const char *path, size_t path_len, size_t max_body)
{
    size_t lim = BODYLIMIT_NONE;
    if (method == HM_PUT && is(path, path_len, "/shop"))
        lim = max_body;
    if (method != HM_POST)
        return lim < max_body ? lim : max_body;
    if (is(path, path_len, "/user/login"))
        lim = BODYLIMIT_LOGIN;
    else if (is(path, path_len, "/voucher") || is(path, path_len, "/voucher/seckill") ||
             is(path, path_len, "/shop"))
        lim = max_body;
    else if (starts(path, path_len, "/admin/api/sale/") || is(path, path_len, "/pay/notify"))
        lim = BODYLIMIT_SMALL;
    else if (path_len > 15 && memcmp(path, "/seckill/queue/", 15) == 0)
        lim = BODYLIMIT_LOGIN;   /* a join: the bot gate's challenge and solution */
    return lim < max_body ? lim : max_body;
}
