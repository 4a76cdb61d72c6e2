/* url.c -- URL parsing, percent-decoding and redaction (url.h).
 *
 * split() cuts a URL into scheme, userinfo (user, password), host[:port], path and query
 * once; the per-scheme parsers and url_redact() all start from it, so they cannot
 * disagree on where a password is. */
#include "core/url.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

int url_hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int url_pct_decode(const char *s, size_t n, char *out, size_t cap, int mode)
{
    if (cap == 0)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '+' && mode == URL_PCT_FORM) {
            ch = ' ';
        } else if (ch == '%') {
            int hi = i + 2 < n ? url_hexval((unsigned char)s[i + 1]) : -1;
            int lo = i + 2 < n ? url_hexval((unsigned char)s[i + 2]) : -1;
            if (hi >= 0 && lo >= 0) {
                ch = hi * 16 + lo;
                i += 2;
                if (ch == 0)
                    return -1;
            } else if (mode != URL_PCT_FORM) {
                return -1;
            }
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return o > (size_t)INT_MAX ? -1 : (int)o;
}

/* ==== Splitting ==== */

typedef struct span {
    const char *b, *e; /* b == NULL: absent */
} span_t;

typedef struct parts {
    span_t scheme;     /* before the first ':' */
    int authority;     /* scheme://host form (not unix: or sqlite:) */
    span_t user, pass; /* userinfo, authority form only */
    span_t host;       /* host[:port] */
    span_t path;       /* authority form: after the '/' that ends host[:port]; else all
                          * after "scheme:" (and "//") up to '?' */
    span_t query;      /* after '?' */
} parts_t;

static size_t span_len(span_t s)
{
    return s.b ? (size_t)(s.e - s.b) : 0;
}

static int span_is(span_t s, const char *z)
{
    return s.b && span_len(s) == strlen(z) && memcmp(s.b, z, span_len(s)) == 0;
}

static int split(const char *url, parts_t *p)
{
    memset(p, 0, sizeof *p);
    const char *colon = strchr(url, ':');
    if (colon == NULL || colon == url)
        return -1;
    p->scheme = (span_t){url, colon};
    const char *s = colon + 1, *end = s + strlen(s);
    int slashes = strncmp(s, "//", 2) == 0;
    if (slashes)
        s += 2;
    if (!slashes || span_is(p->scheme, "unix") || span_is(p->scheme, "sqlite")) {
        const char *q = strchr(s, '?');
        p->path = (span_t){s, q ? q : end};
        if (q)
            p->query = (span_t){q + 1, end};
        return 0;
    }
    p->authority = 1;
    /* The userinfo ends at the LAST '@': a password may hold '@', ':', '/' or '?'. */
    const char *at = strrchr(s, '@');
    if (at) {
        const char *c = memchr(s, ':', (size_t)(at - s));
        p->user = (span_t){s, c ? c : at};
        if (c)
            p->pass = (span_t){c + 1, at};
        s = at + 1;
    }
    const char *q = strchr(s, '?');
    const char *hend = q ? q : end;
    const char *slash = memchr(s, '/', (size_t)(hend - s));
    p->host = (span_t){s, slash ? slash : hend};
    if (slash)
        p->path = (span_t){slash + 1, hend};
    if (q)
        p->query = (span_t){q + 1, end};
    return 0;
}

/* Walks "k=v&k=v": calls fn for each pair; -1 on an empty or '='-less pair or when fn
 * returns -1. */
typedef int (*param_fn)(span_t k, span_t v, void *arg);
static int each_param(span_t q, param_fn fn, void *arg)
{
    const char *p = q.b;
    if (span_len(q) == 0)
        return -1;
    for (;;) {
        const char *amp = memchr(p, '&', (size_t)(q.e - p));
        const char *pe = amp ? amp : q.e;
        const char *eq = memchr(p, '=', (size_t)(pe - p));
        if (eq == NULL || eq == p)
            return -1;
        if (fn((span_t){p, eq}, (span_t){eq + 1, pe}, arg) < 0)
            return -1;
        if (amp == NULL)
            return 0;
        p = amp + 1;
        if (p == q.e)
            return -1;
    }
}

static int decode(span_t s, char *out, size_t cap)
{
    return url_pct_decode(s.b ? s.b : "", span_len(s), out, cap, URL_PCT_STRICT) < 0 ? -1 : 0;
}

/* A decimal in [min, max]. */
static int parse_int(span_t s, long min, long max, long *out)
{
    size_t n = span_len(s);
    if (n == 0 || n > 10)
        return -1;
    long v = 0;
    for (const char *c = s.b; c < s.e; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        v = v * 10 + (*c - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* host[:port] with host a name, an IPv4 address or [IPv6]. A plain host is checked
 * against [A-Za-z0-9._-] (pct = 0) or percent-decoded (pct = 1). An empty host leaves
 * host alone, no port leaves port alone. */
static int host_port(span_t hp, int pct, char *host, size_t hcap, long *port)
{
    const char *s = hp.b, *h = s, *he;
    if (s < hp.e && *s == '[') {
        he = memchr(s, ']', (size_t)(hp.e - s));
        if (he == NULL || he == s + 1)
            return -1;
        h = s + 1;
        for (const char *c = h; c < he; c++)
            if (!(url_hexval((unsigned char)*c) >= 0 || *c == ':' || *c == '.'))
                return -1;
        s = he + 1;
    } else {
        he = memchr(s, ':', (size_t)(hp.e - s));
        if (he == NULL)
            he = hp.e;
        for (const char *c = h; c < he && !pct; c++)
            if (!(isalnum((unsigned char)*c) || *c == '.' || *c == '-' || *c == '_'))
                return -1;
        s = he;
    }
    if (he > h) {
        if (pct ? decode((span_t){h, he}, host, hcap) < 0 : (size_t)(he - h) >= hcap)
            return -1;
        if (!pct) {
            memcpy(host, h, (size_t)(he - h));
            host[he - h] = '\0';
        }
    }
    if (s == hp.e)
        return 0;
    if (*s != ':')
        return -1;
    return parse_int((span_t){s + 1, hp.e}, 1, 65535, port);
}

/* ==== Redis ==== */

static int redis_param(span_t k, span_t v, void *arg)
{
    url_redis_t *a = arg;
    long db;
    if (span_is(k, "db")) {
        if (parse_int(v, 0, INT_MAX, &db) < 0)
            return -1;
        a->db = (int)db;
        return 0;
    }
    if (span_is(k, "password"))
        return span_len(v) == 0 ? -1 : decode(v, a->password, sizeof a->password);
    return -1;
}

int url_parse_redis(const char *url, url_redis_t *out)
{
    parts_t p;
    if (url == NULL || out == NULL || split(url, &p) < 0)
        return -1;
    url_redis_t a;
    memset(&a, 0, sizeof a);
    snprintf(a.host, sizeof a.host, "127.0.0.1");
    a.port = 6379;
    if (span_is(p.scheme, "unix")) {
        size_t n = span_len(p.path);
        if (n == 0 || n >= sizeof a.unix_path)
            return -1;
        memcpy(a.unix_path, p.path.b, n);
        a.unix_path[n] = '\0';
        if (p.query.b && each_param(p.query, redis_param, &a) < 0)
            return -1;
    } else if (span_is(p.scheme, "redis") && p.authority) {
        if (p.user.b) {
            /* The user name, if any, is ignored: AUTH <password> authenticates as the
             * "default" ACL user, as redis-cli -a does. No password: nothing to AUTH. */
            if (span_len(p.pass) == 0 || decode(p.pass, a.password, sizeof a.password) < 0)
                return -1;
        }
        long port = a.port, db = 0;
        if (host_port(p.host, 0, a.host, sizeof a.host, &port) < 0 || p.query.b)
            return -1;
        if (span_len(p.path) > 0 && parse_int(p.path, 0, INT_MAX, &db) < 0)
            return -1;
        a.port = (int)port;
        a.db = (int)db;
    } else if (span_is(p.scheme, "redis+cluster") && p.authority) {
        if (p.user.b &&
            (span_len(p.pass) == 0 || decode(p.pass, a.password, sizeof a.password) < 0))
            return -1;
        if (p.query.b || (span_len(p.path) > 0 && !span_is(p.path, "0")))
            return -1; /* a cluster has db 0 only */
        a.cluster = 1;
        for (const char *s = p.host.b;;) {
            const char *comma = memchr(s, ',', (size_t)(p.host.e - s));
            const char *e = comma ? comma : p.host.e;
            if (e == s || a.nseeds >= URL_MAX_SEEDS)
                return -1;
            struct url_seed *sd = &a.seeds[a.nseeds++];
            snprintf(sd->host, sizeof sd->host, "127.0.0.1");
            long port = 6379;
            if (host_port((span_t){s, e}, 0, sd->host, sizeof sd->host, &port) < 0)
                return -1;
            sd->port = (int)port;
            if (comma == NULL)
                break;
            s = comma + 1;
        }
        snprintf(a.host, sizeof a.host, "%s", a.seeds[0].host);
        a.port = a.seeds[0].port;
    } else {
        return -1;
    }
    *out = a;
    return 0;
}

/* ==== MariaDB / MySQL ==== */

static int mysql_param(span_t k, span_t v, void *arg)
{
    url_mysql_t *u = arg;
    if (span_is(k, "socket"))
        return span_len(v) == 0 ? -1 : decode(v, u->socket, sizeof u->socket);
    return -1;
}

int url_parse_mysql(const char *url, url_mysql_t *u, char *err, size_t errlen)
{
    parts_t p;
    memset(u, 0, sizeof *u);
    u->port = 3306;
    if (url == NULL || split(url, &p) < 0 || !p.authority) {
        snprintf(err, errlen, "mysql: URL must look like mysql://user:password@host:port/db");
        return -1;
    }
    if (p.user.b && (decode(p.user, u->user, sizeof u->user) < 0 ||
                     (p.pass.b && decode(p.pass, u->pass, sizeof u->pass) < 0))) {
        snprintf(err, errlen, "mysql: bad user or password in the database URL");
        return -1;
    }
    long port = 3306;
    if (host_port(p.host, 1, u->host, sizeof u->host, &port) < 0) {
        snprintf(err, errlen, "mysql: bad host or port in the database URL");
        return -1;
    }
    u->port = (unsigned)port;
    if (!u->host[0])
        snprintf(u->host, sizeof u->host, "localhost");
    /* /db: a plain identifier, so it can be quoted for CREATE DATABASE safely */
    size_t dl = span_len(p.path);
    if (dl == 0) {
        snprintf(err, errlen, "mysql: the database URL names no database (mysql://.../DB)");
        return -1;
    }
    if (dl >= sizeof u->dbname) {
        snprintf(err, errlen, "mysql: database name longer than 64 characters");
        return -1;
    }
    for (const char *c = p.path.b; c < p.path.e; c++) {
        if (!(isalnum((unsigned char)*c) || *c == '_' || *c == '$')) {
            snprintf(err, errlen,
                     "mysql: database name may only hold letters, digits, '_' and '$'");
            return -1;
        }
    }
    memcpy(u->dbname, p.path.b, dl);
    u->dbname[dl] = '\0';
    if (p.query.b && each_param(p.query, mysql_param, u) < 0) {
        snprintf(err, errlen,
                 "mysql: unknown option or bad value in the database URL (known: socket=PATH)");
        return -1;
    }
    return 0;
}

/* ==== SQLite ==== */

const char *url_sqlite_path(const char *url)
{
    const char *path = url ? strchr(url, ':') : NULL;
    if (path == NULL)
        return NULL;
    path++;
    if (strncmp(path, "//", 2) == 0)
        path += 2;
    return *path ? path : NULL;
}

/* ==== Redaction ==== */

static void put(char *out, size_t n, size_t *o, const char *z, size_t len)
{
    if (len > n - 1 - *o)
        len = n - 1 - *o;
    memcpy(out + *o, z, len);
    *o += len;
    out[*o] = '\0';
}

typedef struct hide {
    const char *from; /* next byte of the URL not yet copied */
    char *out;
    size_t n, o;
} hide_t;

static void hide_span(hide_t *h, span_t s)
{
    if (span_len(s) == 0 || s.b < h->from)
        return;
    put(h->out, h->n, &h->o, h->from, (size_t)(s.b - h->from));
    put(h->out, h->n, &h->o, "***", 3);
    h->from = s.e;
}

static int hide_param(span_t k, span_t v, void *arg)
{
    if (span_is(k, "password"))
        hide_span(arg, v);
    return 0;
}

/* Percent-encodes z into out[*o..] (all but RFC 3986's unreserved characters). */
static void put_encoded(char *out, size_t n, size_t *o, const char *z)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)z; *p; p++) {
        char e[3] = {(char)*p, 0, 0};
        size_t len = 1;
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '.' || *p == '_' || *p == '~')) {
            e[0] = '%';
            e[1] = hex[*p >> 4];
            e[2] = hex[*p & 15];
            len = 3;
        }
        put(out, n, o, e, len);
    }
}

int url_with_password(const char *url, const char *password, char *out, size_t cap, char *err,
                      size_t errlen)
{
    parts_t p;
    size_t o = 0;
    if (cap == 0 || url == NULL || password == NULL || split(url, &p) < 0) {
        snprintf(err, errlen, "a password file needs a URL to put the password in");
        return -1;
    }
    out[0] = '\0';
    if (span_len(p.pass) > 0 || (p.query.b && strstr(p.query.b, "password=") != NULL)) {
        snprintf(err, errlen, "the URL holds a password already: give it in one place only");
        return -1;
    }
    if (p.authority) {
        /* scheme://[user[:]@]host...: the user (if any), then ":password@", then the rest */
        const char *rest = p.host.b;
        put(out, cap, &o, url, (size_t)(p.scheme.e - url) + 3);
        if (p.user.b)
            put(out, cap, &o, p.user.b, span_len(p.user));
        put(out, cap, &o, ":", 1);
        put_encoded(out, cap, &o, password);
        put(out, cap, &o, "@", 1);
        put(out, cap, &o, rest, strlen(rest));
    } else if (span_is(p.scheme, "unix")) {
        put(out, cap, &o, url, strlen(url));
        put(out, cap, &o, p.query.b ? "&password=" : "?password=", 10);
        put_encoded(out, cap, &o, password);
    } else {
        snprintf(err, errlen, "a %.*s: URL takes no password", (int)span_len(p.scheme), p.scheme.b);
        return -1;
    }
    if (o + 1 >= cap) {
        snprintf(err, errlen, "the URL with its password is too long");
        out[0] = '\0';
        return -1;
    }
    return 0;
}

const char *url_redact(const char *url, char *out, size_t n)
{
    if (n == 0)
        return "";
    out[0] = '\0';
    const char *u = url ? url : "";
    hide_t h = {u, out, n, 0};
    parts_t p;
    if (split(u, &p) == 0) {
        hide_span(&h, p.pass);
        if (p.query.b) {
            /* Every pair, also in a query that does not parse as a whole. */
            const char *s = p.query.b;
            while (s < p.query.e) {
                const char *amp = memchr(s, '&', (size_t)(p.query.e - s));
                const char *pe = amp ? amp : p.query.e;
                const char *eq = memchr(s, '=', (size_t)(pe - s));
                if (eq)
                    hide_param((span_t){s, eq}, (span_t){eq + 1, pe}, &h);
                s = amp ? amp + 1 : pe;
            }
        }
    } else if (strchr(u, '@')) {
        /* No scheme: not a URL this module reads; hide all before the last '@'. */
        hide_span(&h, (span_t){u, strrchr(u, '@')});
    }
    put(out, n, &h.o, h.from, strlen(h.from));
    return out;
}
