/* bodylimit.h -- how large a request body each route may send, decided from the head.
 *
 * Most routes read no body (every GET, the flash-sale order, /user/code, /user/logout):
 * for them a body over BODYLIMIT_NONE bytes is refused with 413 as soon as the head says
 * it comes (Content-Length) or its first chunk does, before a byte of it is buffered.
 * Login, the board's sale calls, a payment notice and a waiting-room join get a small
 * limit (a phone and a code; an end time; an order, a payment id and an amount; a
 * challenge and its solution), voucher and shop writes --max-body-bytes. So a client
 * cannot park 64 KiB per connection on a route that never reads it.
 *
 * The table mirrors the router's routes (api.c) that read r->body; the path is the one
 * the router sees (after http.c removes "/api"). Keep the two in step when a route that
 * reads a body is added: otherwise its bodies get 413. */
#ifndef SECKILL_BODYLIMIT_H
#define SECKILL_BODYLIMIT_H

#include <stddef.h>

/* A route that reads no body still takes a tiny one (a client library's "{}", a GET with
 * a few bytes of body, which RFC 9110 allows and proxies forward): that is framed, read
 * and dropped as before, so framing errors in it are still told as such (400). POST
 * /user/login's body at most: {"phone":"...","code":"..."} with room to spare. */
enum { BODYLIMIT_NONE = 64, BODYLIMIT_LOGIN = 4096, BODYLIMIT_SMALL = 4096 };

/* The largest body method (HM_*) on path (path_len bytes, no query) may send:
 * BODYLIMIT_NONE for a route that reads none, max_body for voucher and shop writes; never more
 * than max_body. */
size_t bodylimit_for(int method, const char *path, size_t path_len, size_t max_body);

#endif
