/* bench_html.c -- `seckill bench --html FILE`: the run as a page (html_report.h).
 *
 * Charts: answers per second by outcome over the sale (from the cumulative samples taken
 * while it ran, bench.c), the latency percentile curve p50 .. p99.99 on log scales (from
 * the run's histogram), stock left over time, and with the lifecycle rehearsal (bench_life.c)
 * the orders paid, cancelled and expired over its time. Stock left is the initial stock minus
 * the successes answered so far: what buyers were told; the audit underneath checks that
 * Redis and SQL agree with those answers. Then the audit's verdict and both texts.
 *
 * The time slot follows the sale's length: the answers' own times (the load's log) are cut
 * into 80 to 200 slots of 1, 2 or 5 x 10^k us, so a 20 ms sale and a one-minute one both
 * get a curve of their own (the x axis in ms below 2 s). When the log filled up, the
 * samples taken every 100 ms while the sale ran are drawn instead. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/bench.h"
#include "cmd/bench_hist.h"
#include "cmd/bench_timeline.h"
#include "cmd/html_report.h"
#include "core/xmem.h"

void bench_html_series_add(bench_series_t *sr, double t, const uint64_t out[BO__COUNT])
{
    if (sr->n == sr->cap) {
        sr->cap = sr->cap ? sr->cap * 2 : 256;
        sr->s = xrealloc(sr->s, sr->cap * sizeof *sr->s);
    }
    sr->s[sr->n].t = t;
    memcpy(sr->s[sr->n].out, out, sizeof sr->s[sr->n].out);
    sr->n++;
}

void bench_html_series_free(bench_series_t *sr)
{
    free(sr->s);
    memset(sr, 0, sizeof *sr);
}

/* The x axis: its name and how many of its units make a second. */
typedef struct xaxis {
    const char *name;
    double per_s;
} xaxis_t;

/* The slot for a sale whose last answer came span_us after the start: the smallest
 * 1-2-5 step giving at most 200 slots (so at least 80). */
static uint32_t slot_for(uint32_t span_us)
{
    static const uint32_t mant[3] = {1, 2, 5};
    for (uint32_t dec = 1; dec <= 100000000; dec *= 10)
        for (int i = 0; i < 3; i++)
            if ((uint64_t)mant[i] * dec * 200 >= span_us)
                return mant[i] * dec;
    return 1000000000;
}

/* The cumulative answers at every slot's end, from the log of answers: into *out (the
 * caller frees it with bench_html_series_free). */
static void series_from_log(const bench_rec_t *recs, size_t n, bench_series_t *out)
{
    uint32_t span = 0;
    for (size_t i = 0; i < n; i++)
        if (recs[i].done_us > span)
            span = recs[i].done_us;
    uint32_t slot = slot_for(span);
    size_t nslots = span / slot + 1;
    uint64_t (*per)[BO__COUNT] = xcalloc(nslots, sizeof *per);
    for (size_t i = 0; i < n; i++)
        if (recs[i].outcome < BO__COUNT)
            per[recs[i].done_us / slot][recs[i].outcome]++;
    uint64_t sum[BO__COUNT] = {0};
    memset(out, 0, sizeof *out);
    bench_html_series_add(out, 0, sum);
    for (size_t k = 0; k < nslots; k++) {
        for (int o = 0; o < BO__COUNT; o++)
            sum[o] += per[k][o];
        bench_html_series_add(out, (double)(k + 1) * slot / 1e6, sum);
    }
    free(per);
}

/* Outcome groups drawn over time (errors = every failure that is not a verdict). */
enum { G_OK, G_SOLD_OUT, G_DUP, G_WINDOW, G_ERR, G__N };
static const char *const group_label[G__N] = {
    "success", "sold out", "duplicate", "not started / ended", "errors",
};

static int group_of(int o)
{
    switch (o) {
    case BO_SUCCESS: return G_OK;
    case BO_SOLD_OUT: return G_SOLD_OUT;
    case BO_DUPLICATE: return G_DUP;
    case BO_NOT_STARTED:
    case BO_ENDED: return G_WINDOW;
    default: return G_ERR;
    }
}

/* Builds a chart's CSV text in memory; the caller frees *buf. */
static FILE *csv_open(char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *c = open_memstream(buf, len);
    if (c == NULL)
        abort();   /* out of memory, like xmem.h */
    return c;
}

static void throughput_chart(FILE *f, const bench_series_t *sr, const xaxis_t *x)
{
    char *csv;
    size_t len;
    FILE *c = csv_open(&csv, &len);
    fputs(x->name, c);
    for (int g = 0; g < G__N; g++)
        fprintf(c, ",%s", group_label[g]);
    fputc('\n', c);
    for (size_t i = 0; i + 1 < sr->n; i++) {
        const bench_sample_t *a = &sr->s[i], *b = &sr->s[i + 1];
        double dt = b->t - a->t, rate[G__N] = { 0 };
        for (int o = 0; o < BO__COUNT; o++)
            rate[group_of(o)] += dt > 0 ? (double)(b->out[o] - a->out[o]) / dt : 0;
        fprintf(c, "%.3f", b->t * x->per_s);
        for (int g = 0; g < G__N; g++)
            fprintf(c, ",%.1f", rate[g]);
        fputc('\n', c);
    }
    fclose(c);
    html_report_csv_chart_opts(f, "Answers per second by outcome, over the sale (stacked)",
                               "answers / s", csv, HR_STACKED);
    free(csv);
}

static void stock_chart(FILE *f, const bench_series_t *sr, int64_t stock, const xaxis_t *x)
{
    char *csv;
    size_t len;
    FILE *c = csv_open(&csv, &len);
    fprintf(c, "%s,stock left\n", x->name);
    for (size_t i = 0; i < sr->n; i++) {
        double left = (double)stock - (double)sr->s[i].out[BO_SUCCESS];
        fprintf(c, "%.3f,%.0f\n", sr->s[i].t * x->per_s, left < 0 ? 0 : left);
    }
    fclose(c);
    html_report_csv_chart(f, "Stock left over the sale (initial stock minus successes answered)",
                          "vouchers", csv);
    free(csv);
}

/* The lifecycle rehearsal (bench_life.c): orders paid, cancelled and timed out, cumulative,
 * from its start (the pays and cancels, then Redis's timeouts as bench polled them). */
static void life_chart(FILE *f, const bench_life_t *l)
{
    char *csv, line[256];
    size_t len;
    FILE *c = csv_open(&csv, &len);
    fputs("seconds,paid,cancelled,expired\n", c);
    for (size_t i = 0; i < l->ns; i++)
        fprintf(c, "%.3f,%lld,%lld,%lld\n", l->t[i], (long long)l->n[i][0],
                (long long)l->n[i][1], (long long)l->n[i][2]);
    fclose(c);
    snprintf(line, sizeof line, "Lifecycle: %lld paid, %lld cancelled, %lld expired (of %lld "
             "left unpaid); %s %s.", (long long)l->paid, (long long)l->cancelled,
             (long long)l->r_timedout, (long long)l->to_expire, l->in_sql ? "SQL" : "Redis",
             l->ok ? "agrees with every fate" : "does NOT agree (see the report)");
    html_report_text(f, line);
    html_report_csv_chart(f, "Orders paid, cancelled and expired, from the end of the sale",
                          "orders", csv);
    free(csv);
}

/* x = 1/(1-p): p50 at 2, p99 at 100, p99.99 at 10,000 -- the tail gets the room. */
static void latency_chart(FILE *f, const bench_hist_t *h)
{
    static const double ps[] = { 50, 60, 70, 75, 80, 85, 90, 92.5, 95, 96, 97, 98, 99, 99.25,
                                 99.5, 99.75, 99.9, 99.95, 99.97, 99.99 };
    char *csv;
    size_t len;
    FILE *c = csv_open(&csv, &len);
    fputs("percentile,latency ms\n", c);
    for (size_t i = 0; h->count > 0 && i < sizeof ps / sizeof ps[0]; i++)
        fprintf(c, "%.6g,%.4f\n", 1.0 / (1.0 - ps[i] / 100.0),
                (double)bench_hist_percentile(h, ps[i]) / 1000.0);
    fclose(c);
    html_report_csv_chart_opts(f, "Latency by percentile, p50 to p99.99 (log scales)", "ms", csv,
                               HR_LOGX | HR_LOGY | HR_PERCENTILE_X);
    free(csv);
}

void bench_html_verdict(FILE *f, int audit_status)
{
    switch (audit_status) {
    case 0: html_report_text(f, "Verdict: audit clean -- no oversell, no duplicate, no lost order."); break;
    case 1: html_report_text(f, "Verdict: the audit found a VIOLATION (see the audit below)."); break;
    case 2: html_report_text(f, "Verdict: the audit could not run (see below)."); break;
    default: html_report_text(f, "Verdict: no audit (--no-audit, or no --redis and --db)."); break;
    }
}

int bench_html_write(const char *path, const bench_html_t *h, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char title[512];
    snprintf(title, sizeof title, "seckill bench: %s, voucher %lld, stock %lld", h->target,
             (long long)h->voucher, (long long)h->stock);
    if (html_report_begin(f, title, err, errlen) < 0) {
        fclose(f);
        remove(path);
        return -1;
    }
    bench_html_verdict(f, h->audit_status);
    bench_series_t fine = {0};
    const bench_series_t *sr = h->series;
    if (h->recs != NULL && h->nrecs > 0) {
        series_from_log(h->recs, h->nrecs, &fine);
        sr = &fine;
    }
    double span = sr->n > 0 ? sr->s[sr->n - 1].t : 0;
    xaxis_t x = span < 2.0 ? (xaxis_t){"milliseconds", 1000} : (xaxis_t){"seconds", 1};
    throughput_chart(f, sr, &x);
    latency_chart(f, h->lat);
    if (h->stock >= 0)
        stock_chart(f, sr, h->stock, &x);
    bench_html_series_free(&fine);
    if (h->life != NULL && h->life->ns > 0)
        life_chart(f, h->life);
    html_report_text(f, "Report, as printed:");
    html_report_pre(f, h->report_text != NULL ? h->report_text : "");
    if (h->audit_text != NULL && *h->audit_text) {
        html_report_text(f, "Audit, as printed:");
        html_report_pre(f, h->audit_text);
    }
    html_report_end(f);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
