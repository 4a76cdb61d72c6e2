/* html_report.h -- one self-contained HTML page of charts for the tools' reports
 * (`seckill lab --html`; reusable by any tool that has figures to draw).
 *
 * The charts are drawn by dygraphs, read from Debian's libjs-dygraphs
 * (/usr/share/javascript/dygraphs/dygraph.min.js, `sh tools/deps.sh test` installs it) and inlined
 * into the page: no CDN, no second file, the page opens offline anywhere.
 *
 * Use: html_report_begin, then any number of html_report_* blocks, then html_report_end.
 * Strings given are escaped here. Returns -1 with a reason in err when the script cannot
 * be read (the page is then not written). */
#ifndef SECKILL_HTML_REPORT_H
#define SECKILL_HTML_REPORT_H

#include <stddef.h>
#include <stdio.h>

#define HTML_REPORT_DYGRAPHS "/usr/share/javascript/dygraphs/dygraph.min.js"
#define HTML_REPORT_DYGRAPHS_CSS "/usr/share/javascript/dygraphs/dygraph.min.css"

int html_report_begin(FILE *f, const char *title, char *err, size_t errlen);
/* A paragraph of text. */
void html_report_text(FILE *f, const char *text);
/* A table: ncols header cells, then nrows * ncols cells, row by row. */
void html_report_table(FILE *f, const char *const *head, int ncols, const char *const *cells,
                       int nrows);
/* A bar chart: one bar per name (x axis), value on the y axis labelled ylabel. */
void html_report_bars(FILE *f, const char *title, const char *ylabel, const char *const *names,
                      const double *values, int n);
/* A line chart from CSV text (first row: the labels; first column: x), for time series. */
void html_report_csv_chart(FILE *f, const char *title, const char *ylabel, const char *csv);
/* The same with options: HR_* flags or'ed together. */
enum {
    HR_STACKED = 1,         /* stack the series, filled (outcomes over time) */
    HR_LOGX = 2,            /* log scale on x */
    HR_LOGY = 4,            /* log scale on y */
    HR_PERCENTILE_X = 8     /* x is 1/(1-p): labelled p50, p99, p99.9 ... (with HR_LOGX) */
};
void html_report_csv_chart_opts(FILE *f, const char *title, const char *ylabel, const char *csv,
                                int flags);
/* Preformatted text (a text report as printed). */
void html_report_pre(FILE *f, const char *text);
void html_report_end(FILE *f);

#endif
