/* h1.c -- the strict HTTP/1.1 request parser (see h1.h).
 *
 * The head is parsed only once it is complete (h1_head_len finds its end): a head is at
 * most a few KiB, so parsing it in one pass over a contiguous buffer is simpler and
 * faster than a byte-at-a-time state machine, and every rule can look at a whole line.
 * Chunked bodies arrive in pieces of any size, so they get a small state machine. */
#include "http/h1.h"

#include <string.h>

#include "core/url.h"

/* tchar (RFC 9110 5.6.2): the characters of a token: methods, field names. */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1,
    ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

/* A byte of a field value (field-vchar / SP / HTAB; obs-text allowed): no CTL, no DEL. */
static int value_byte(unsigned char ch)
{
    return ch == '\t' || (ch >= 0x20 && ch != 0x7f);
}

/* A byte of a Host value, uri-host [":" port] (RFC 3986 3.2.2): unreserved, pct-encoded,
 * sub-delims, the port's colon and an IP literal's brackets and colons. The syntax within
 * that set is not checked: nothing here routes by Host, but RFC 9112 3.2 has the server
 * refuse an invalid one (a proxy may read it differently). */
static int host_byte(unsigned char ch)
{
    return (tchar[ch] && ch != '#' && ch != '^' && ch != '`' && ch != '|') ||
           (ch != 0 && strchr("(),;=:[]", ch) != NULL);
}

/* ==== scanning eight bytes at a time ====
 * The request target and the field values are most of a head's bytes; testing them a
 * word at a time instead of a byte at a time was the larger part of the parse's cost.
 * below(w, n) sets the high bit of the bytes of w that are below n (n <= 0x80; bytes of
 * 0x80 and up are never flagged). A flag can be wrong only above a byte that is rightly
 * flagged (the borrow of its subtraction), so the lowest flag -- the first byte in
 * memory, the words being loaded little-endian -- is always exact, in either mask of an
 * OR too. */
#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

static inline uint64_t load8(const char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

static inline uint64_t below(uint64_t w, unsigned n)
{
    return (w - ONES * n) & ~w & HIGHS;
}

/* The first byte of p[0..end) that may not be in a request target (a CTL, SP or DEL:
 * anything <= 0x20 or 0x7f), or end. */
static const char *span_target(const char *p, const char *end)
{
    while (end - p >= 8) {
        uint64_t w = load8(p);
        uint64_t m = below(w, 0x21) | below(w ^ (ONES * 0x7f), 1);
        if (m)
            return p + (__builtin_ctzll(m) >> 3);
        p += 8;
    }
    while (p < end && (unsigned char)*p > 0x20 && *p != 0x7f)
        p++;
    return p;
}

/* The first byte of p[0..end) that may not be in a field value (value_byte), or end. */
static const char *span_value(const char *p, const char *end)
{
    while (end - p >= 8) {
        uint64_t w = load8(p);
        uint64_t m = below(w, 0x20) | below(w ^ (ONES * 0x7f), 1);
        if (!m) {
            p += 8;
            continue;
        }
        p += __builtin_ctzll(m) >> 3;
        if (*p != '\t')
            return p;
        p++;                       /* HTAB is allowed: go on after it */
    }
    while (p < end && value_byte((unsigned char)*p))
        p++;
    return p;
}

/* name[0..n) (tchar only: checked before) equals the lowercase literal lit of the same
 * length n >= 4, ASCII letters in any case. Compared a word at a time, the last word
 * overlapping the one before: OR-ing 0x20 into every byte maps 'A'-'Z' onto 'a'-'z',
 * and no other tchar onto a lowercase letter or '-' (the only bytes of the literals). */
static int name_is(const char *name, size_t n, const char *lit)
{
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8)
            if ((load8(name + i) | ONES * 0x20) != load8(lit + i))
                return 0;
        return (load8(name + n - 8) | ONES * 0x20) == load8(lit + n - 8);
    }
    uint32_t a, b, la, lb;
    memcpy(&a, name, 4);
    memcpy(&b, name + n - 4, 4);
    memcpy(&la, lit, 4);
    memcpy(&lb, lit + n - 4, 4);
    return ((a | 0x20202020u) == la) && ((b | 0x20202020u) == lb);
}

long h1_head_len(const char *buf, size_t len, size_t *scan, size_t max)
{
    size_t lim = len < max ? len : max;
    size_t i = *scan;
    while (i < lim) {
        const char *nl = memchr(buf + i, '\n', lim - i);
        if (!nl) {
            i = lim;
            break;
        }
        size_t k = (size_t)(nl - buf);
        if (k == 0 || buf[k - 1] != '\r')
            return -400;                   /* bare LF */
        if (k == 1)
            return -400;                   /* the request line is empty */
        if (k >= 3 && buf[k - 2] == '\n')
            return (long)(k + 1);          /* "\r\n\r\n": the empty line ends the head */
        i = k + 1;
    }
    *scan = i;
    if (len >= max)
        return memchr(buf, '\n', max) ? -431 : -414;
    return 0;
}

/* p[0..n) equals the lowercase literal lit, ASCII letters in any case (no locale). */
static int ieq(const char *p, size_t n, const char *lit, size_t litn)
{
    if (n != litn)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 'A' && ch <= 'Z')
            ch = (unsigned char)(ch + ('a' - 'A'));
        if (ch != (unsigned char)lit[i])
            return 0;
    }
    return 1;
}

/* Connection: a comma-separated list of options (OWS around each). */
static void connection_options(h1_head_t *h, const char *v, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (ieq(v + s, e - s, "close", 5))
            h->conn_close = 1;
        else if (ieq(v + s, e - s, "keep-alive", 10))
            h->conn_keep_alive = 1;
        else if (ieq(v + s, e - s, "upgrade", 7))
            h->conn_upgrade = 1;
    }
}

/* Applies one field line; returns 0 or an HTTP status. seen: bit flags of fields that
 * may appear only once. */
enum { SEEN_HOST = 1, SEEN_CL = 2, SEEN_TE = 4, SEEN_TE_OTHER = 8 };

static int apply_field(h1_head_t *h, const char *name, size_t nn, const char *v, size_t vn,
                       unsigned *seen)
{
    switch (nn) {
    case 4:
        if (name_is(name, nn, "host")) {
            if (*seen & SEEN_HOST)
                return 400;
            *seen |= SEEN_HOST;
            for (size_t i = 0; i < vn; i++)
                if (!host_byte((unsigned char)v[i]))
                    return 400;
        }
        break;
    case 6:
        if (name_is(name, nn, "expect") && ieq(v, vn, "100-continue", 12))
            h->expect_continue = 1;
        break;
    case 7:
        if (name_is(name, nn, "upgrade"))
            h->has_upgrade = 1;
        break;
    case 10:
        if (name_is(name, nn, "connection"))
            connection_options(h, v, vn);
        break;
    case 13:
        /* Two credentials in one request: a proxy may have used the other one. */
        if (name_is(name, nn, "authorization")) {
            if (h->has_auth)
                return 400;
            h->has_auth = 1;
            h->auth.p = v;
            h->auth.n = vn;
        } else if (name_is(name, nn, "x-admin-token")) {
            if (h->has_admin)
                return 400;
            h->has_admin = 1;
            h->admin.p = v;
            h->admin.n = vn;
        }
        break;
    case 14:
        if (name_is(name, nn, "x-seckill-pass")) {
            if (h->has_pass)
                return 400;
            h->has_pass = 1;
            h->pass.p = v;
            h->pass.n = vn;
        } else if (name_is(name, nn, "content-length")) {
            /* 1*DIGIT, once. A list ("5, 5") or a repeat is refused even when the values
             * agree: a proxy may have picked a different one. */
            if ((*seen & SEEN_CL) || vn == 0)
                return 400;
            *seen |= SEEN_CL;
            uint64_t x = 0;
            for (size_t i = 0; i < vn; i++) {
                if (v[i] < '0' || v[i] > '9')
                    return 400;
                unsigned d = (unsigned)(v[i] - '0');
                x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
            }
            h->has_length = 1;
            h->content_length = x;
        }
        break;
    case 15:
        /* One field line: a second one could be the client's, spliced in past a proxy
         * that appends to the first. */
        if (name_is(name, nn, "x-forwarded-for")) {
            if (h->has_xff)
                return 400;
            h->has_xff = 1;
            h->xff.p = v;
            h->xff.n = vn;
        } else if (name_is(name, nn, "x-pay-signature")) {
            if (h->has_paysig)
                return 400;
            h->has_paysig = 1;
            h->paysig.p = v;
            h->paysig.n = vn;
        }
        break;
    case 17:
        if (name_is(name, nn, "transfer-encoding")) {
            if ((*seen & SEEN_TE) || h->minor == 0)
                return 400;        /* HTTP/1.0 has no transfer codings (RFC 9112 6.1) */
            *seen |= SEEN_TE;
            if (vn == 0)
                return 400;
            if (ieq(v, vn, "chunked", 7))
                h->chunked = 1;
            else
                *seen |= SEEN_TE_OTHER;   /* a coding we do not implement: 501 below */
        }
        break;
    default:
        break;
    }
    return 0;
}

int h1_parse_head(const char *buf, size_t len, h1_head_t *h)
{
    memset(h, 0, sizeof *h);
    const char *p = buf, *end = buf + len;
    /* A head measured by h1_head_len ends with CRLF CRLF. The byte-class scans below
     * (method and field-name tchars, OWS) stop at CR and LF, so with this checked they
     * need no bound of their own: they cannot run past end. */
    if (len < 4 || memcmp(end - 4, "\r\n\r\n", 4) != 0)
        return 400;

    /* request-line = method SP request-target SP HTTP-version CRLF, single spaces */
    const char *s = p;
    while (tchar[(unsigned char)*p])
        p++;
    if (p == s || *p != ' ')
        return 400;
    h->method.p = s;
    h->method.n = (size_t)(p - s);
    s = ++p;
    p = span_target(p, end);
    if (p == s || p >= end || *p != ' ')
        return 400;
    h->target.p = s;
    h->target.n = (size_t)(p - s);
    p++;
    if (end - p < 10 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
        p[8] != '\r' || p[9] != '\n')
        return 400;
    h->minor = p[7] - '0';
    p += 10;

    unsigned seen = 0;
    for (;;) {
        if (end - p < 2)
            return 400;            /* cannot happen for a head measured by h1_head_len */
        if (p[0] == '\r' && p[1] == '\n') {
            p += 2;
            break;                 /* the empty line */
        }
        /* field-line = field-name ":" OWS field-value OWS CRLF; a line starting with
         * whitespace is obs-fold (or junk before a name): refused. */
        const char *name = p;
        while (tchar[(unsigned char)*p])
            p++;
        if (p == name || *p != ':')
            return 400;            /* includes "Name :" (whitespace before the colon) */
        size_t nn = (size_t)(p - name);
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        const char *v = p;
        p = span_value(p, end);
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return 400;            /* a CTL in the value, or a bare CR */
        const char *ve = p;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        p += 2;
        if (++h->nheaders > H1_MAX_HEADERS)
            return 431;
        int st = apply_field(h, name, nn, v, (size_t)(ve - v), &seen);
        if (st)
            return st;
    }
    if (p != end)
        return 400;
    if (h->minor == 1 && !(seen & SEEN_HOST))
        return 400;                /* RFC 9112 3.2: exactly one Host in HTTP/1.1 */
    if ((seen & SEEN_TE) && h->has_length)
        return 400;                /* RFC 9112 6.3: a smuggling attempt; refuse, close */
    if (seen & SEEN_TE_OTHER)
        return 501;
    return 0;
}

/* ==== chunked bodies ==== */

enum {
    C_SIZE0,      /* first hex digit of a chunk size */
    C_SIZE,       /* more hex digits, ';' or CR */
    C_EXT,        /* chunk extensions, up to CR */
    C_SIZE_LF,
    C_DATA,
    C_DATA_CR,
    C_DATA_LF,
    C_TLINE,      /* start of a trailer line, or CR of the final empty line */
    C_TNAME,
    C_TVALUE,
    C_TLF,
    C_END_LF,
    C_DONE,
};

void h1_chunked_init(h1_chunked_t *d, uint64_t max_body, size_t max_trailer)
{
    memset(d, 0, sizeof *d);
    d->state = C_SIZE0;
    d->max = max_body;
    d->max_trailer = max_trailer;
}

int h1_chunked_feed(h1_chunked_t *d, const char *p, size_t n, size_t *used, h1_sink_fn sink,
                    void *ctx)
{
    size_t i = 0;
    int rc = 0;
    while (i < n && d->state != C_DONE) {
        unsigned char ch = (unsigned char)p[i];
        if (d->state == C_DATA) {
            size_t take = n - i;
            if ((uint64_t)take > d->left)
                take = (size_t)d->left;
            int st = sink(ctx, p + i, take);
            if (st) {
                rc = st;
                break;
            }
            i += take;
            d->left -= take;
            if (d->left == 0)
                d->state = C_DATA_CR;
            continue;
        }
        if (d->state >= C_TLINE) {
            if (++d->trailer_bytes > d->max_trailer) {
                rc = 431;
                break;
            }
        } else if (d->state <= C_SIZE_LF && ++d->line > H1_MAX_CHUNK_LINE) {
            rc = 400;
            break;
        }
        i++;
        switch (d->state) {
        case C_SIZE0:
        case C_SIZE: {
            int v = url_hexval(ch);
            if (v >= 0) {
                /* The total is bounded by max, so the size cannot overflow either. */
                d->left = d->left * 16 + (uint64_t)v;
                if (d->left > d->max - d->total) {
                    rc = 413;
                    goto out;
                }
                d->digits++;
                d->state = C_SIZE;
            } else if (d->state == C_SIZE && ch == ';') {
                d->state = C_EXT;  /* no whitespace before ';': stricter than BWS */
            } else if (d->state == C_SIZE && ch == '\r') {
                d->state = C_SIZE_LF;
            } else {
                rc = 400;
                goto out;
            }
            break;
        }
        case C_EXT:
            if (ch == '\r')
                d->state = C_SIZE_LF;
            else if (!value_byte(ch)) {
                rc = 400;
                goto out;
            }
            break;
        case C_SIZE_LF:
            if (ch != '\n') {
                rc = 400;
                goto out;
            }
            d->line = 0;
            d->digits = 0;
            if (d->left == 0) {
                d->state = C_TLINE;           /* last-chunk: the trailer section follows */
            } else {
                d->total += d->left;
                d->state = C_DATA;
            }
            break;
        case C_DATA_CR:
            if (ch != '\r') {
                rc = 400;
                goto out;
            }
            d->state = C_DATA_LF;
            break;
        case C_DATA_LF:
            if (ch != '\n') {
                rc = 400;
                goto out;
            }
            d->state = C_SIZE0;
            break;
        case C_TLINE:
            if (ch == '\r') {
                d->state = C_END_LF;
            } else if (tchar[ch]) {
                if (++d->ntrailers > H1_MAX_HEADERS) {
                    rc = 431;
                    goto out;
                }
                d->state = C_TNAME;
            } else {
                rc = 400;                     /* obs-fold or junk */
                goto out;
            }
            break;
        case C_TNAME:
            if (ch == ':') {
                d->state = C_TVALUE;
            } else if (!tchar[ch]) {
                rc = 400;
                goto out;
            }
            break;
        case C_TVALUE:
            /* The value is checked and dropped: trailers never set a request header. */
            if (ch == '\r') {
                d->state = C_TLF;
            } else if (!value_byte(ch)) {
                rc = 400;
                goto out;
            }
            break;
        case C_TLF:
            if (ch != '\n') {
                rc = 400;
                goto out;
            }
            d->state = C_TLINE;
            break;
        case C_END_LF:
            if (ch != '\n') {
                rc = 400;
                goto out;
            }
            d->state = C_DONE;
            break;
        default:
            rc = 400;
            goto out;
        }
    }
out:
    *used = i;
    if (rc)
        return rc;
    return d->state == C_DONE ? 1 : 0;
}
