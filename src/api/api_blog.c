/* api_blog.c -- the blog and follow calls of the course's pages, answered as "nothing
 * there": this service has no blogs and no follows (hmdp-spec section 2.5 is outside the
 * flash-sale chapter), but the index, info, other-info and blog-detail pages call them,
 * and a 404 shows as 服务器异常 on every one of those pages.
 *
 * Reads answer what an empty database answers in the course: empty lists, false for "do
 * I follow", 笔记不存在！ for one blog, an empty ScrollResult for the feed. Writes (like,
 * follow) answer the course's own placeholder for a missing feature, 功能未完成, rather
 * than a success that stored nothing. Which of them need a login is the course's
 * interceptor table (only /blog/hot is public); api.c's route table enforces it. No
 * Redis, no SQL: each answer is a constant. */
#include <string.h>

#include "api/api.h"

static void ok_const(http_req_t *r, const char *data)
{
    api_ok(r, data, strlen(data));
}

void api_blog_empty_list(http_req_t *r)
{
    ok_const(r, "[]");
}

void api_blog_feed(http_req_t *r)
{
    ok_const(r, "{\"list\":[],\"minTime\":0,\"offset\":0}");
}

void api_blog_get(http_req_t *r)
{
    api_fail(r, "笔记不存在！", "NOT_FOUND");
}

void api_blog_follows(http_req_t *r)
{
    ok_const(r, "false");
}

void api_blog_unsupported(http_req_t *r)
{
    api_fail(r, "功能未完成", "NOT_IMPLEMENTED");
}
