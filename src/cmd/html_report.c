/* html_report.c -- self-contained HTML pages with dygraphs charts (html_report.h). */
#include "cmd/html_report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int chart_seq;   /* element ids within one page; the tools are single-threaded */

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A JavaScript string literal; "</" is split so no text can close the script element. */
static void js_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else if (c == '<')
            fputs("\\u003c", f);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Copies the open file in to f and closes it. */
static void copy_in(FILE *f, FILE *in)
{
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, f);
    fclose(in);
}

int html_report_begin(FILE *f, const char *title, char *err, size_t errlen)
{
    FILE *js = fopen(HTML_REPORT_DYGRAPHS, "r");
    if (!js) {
        snprintf(err, errlen, "%s: %s (apt-get install libjs-dygraphs; `sh tools/deps.sh test` does)",
                 HTML_REPORT_DYGRAPHS, strerror(errno));
        return -1;
    }
    chart_seq = 0;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>", f);
    esc(f, title);
    fputs("</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;}"
          "table{border-collapse:collapse;margin:1em 0;}td,th{border:1px solid #bbb;"
          "padding:3px 8px;text-align:right;vertical-align:top;}td:first-child,th:first-child{text-align:left;}"
          ".chart{width:1000px;height:260px;margin:0.5em 0 2.5em 0;}"
          ".legend{min-height:1.3em;font-size:13px;margin:0.3em 0 0 0;}"
          ".legend .dygraph-legend-line{display:inline-block;}"
          "pre{font-size:12px;background:#f6f6f6;padding:8px;overflow-x:auto;}</style>\n", f);
    /* dygraphs' own style sheet places the legend and turns the y label; optional. */
    FILE *css = fopen(HTML_REPORT_DYGRAPHS_CSS, "r");
    if (css) {
        fputs("<style>", f);
        copy_in(f, css);
        fputs("</style>\n", f);
    }
    fputs("<script>/* dygraphs, from Debian's libjs-dygraphs (MIT licence) */\n", f);
    copy_in(f, js);
    fputs("\n</script>\n<script>\n"
          "function barPlotter(e) {\n"
          "  var ctx = e.drawingContext, pts = e.points, y0 = e.dygraph.toDomYCoord(0);\n"
          "  var w = pts.length > 1 ? (pts[1].canvasx - pts[0].canvasx) * 0.6 : 40;\n"
          "  ctx.fillStyle = e.color;\n"
          "  for (var i = 0; i < pts.length; i++) {\n"
          "    var p = pts[i];\n"
          "    ctx.fillRect(p.canvasx - w / 2, p.canvasy, w, y0 - p.canvasy);\n"
          "  }\n"
          "}\n</script>\n</head><body>\n<h1>", f);
    esc(f, title);
    fputs("</h1>\n", f);
    return 0;
}

void html_report_text(FILE *f, const char *text)
{
    fputs("<p>", f);
    esc(f, text);
    fputs("</p>\n", f);
}

void html_report_table(FILE *f, const char *const *head, int ncols, const char *const *cells,
                       int nrows)
{
    fputs("<table><tr>", f);
    for (int c = 0; c < ncols; c++) {
        fputs("<th>", f);
        esc(f, head[c]);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int r = 0; r < nrows; r++) {
        fputs("<tr>", f);
        for (int c = 0; c < ncols; c++) {
            fputs("<td>", f);
            esc(f, cells[r * ncols + c]);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* The chart's title, its legend's line above it (a legend drawn over the plot hides the
 * data under it), and the chart's box. Every chart is kept in window.seckillCharts, so a
 * test can read what was drawn. */
static void chart_open(FILE *f, const char *title)
{
    fputs("<h2>", f);
    esc(f, title);
    ++chart_seq;
    fprintf(f, "</h2>\n<div class=\"legend\" id=\"legend%d\"></div>\n"
               "<div class=\"chart\" id=\"chart%d\"></div>\n<script>\n"
               "window.seckillCharts = window.seckillCharts || [];\n", chart_seq, chart_seq);
}

/* The options every chart shares: the legend in its own line, y ticks abbreviated (120K)
 * in a column wide enough that the turned y label never covers them. */
static void chart_common(FILE *f)
{
    fprintf(f, "legend: \"always\", labelsDiv: document.getElementById(\"legend%d\"), "
               "labelsSeparateLines: false, labelsKMB: true, yLabelWidth: 20", chart_seq);
}

void html_report_bars(FILE *f, const char *title, const char *ylabel, const char *const *names,
                      const double *values, int n)
{
    chart_open(f, title);
    fputs("(function () {\n  var names = [", f);
    for (int i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        js_str(f, names[i]);
    }
    fputs("];\n  var data = [", f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s[%d,%.6g]", i ? "," : "", i + 1, values[i]);
    fprintf(f, "];\n  window.seckillCharts.push(new Dygraph(document.getElementById("
               "\"chart%d\"), data, {\n    labels: [\"step\", ", chart_seq);
    js_str(f, ylabel);   /* the series' name, shown in the legend */
    fprintf(f, "], plotter: barPlotter, includeZero: true, dateWindow: [0.5, %d.5],\n"
               "    axes: { x: { ticker: function () {\n"
               "      return names.map(function (s, i) { return { v: i + 1, label: s }; }); },\n"
               "      valueFormatter: function (x) { return names[x - 1] || x; } },\n"
               "      y: { axisLabelWidth: 60 } },\n    ",
            n);
    chart_common(f);
    fputs("\n  }));\n})();\n</script>\n", f);
}

void html_report_csv_chart(FILE *f, const char *title, const char *ylabel, const char *csv)
{
    html_report_csv_chart_opts(f, title, ylabel, csv, 0);
}

void html_report_csv_chart_opts(FILE *f, const char *title, const char *ylabel, const char *csv,
                                int flags)
{
    chart_open(f, title);
    fprintf(f, "window.seckillCharts.push(new Dygraph(document.getElementById(\"chart%d\"), ",
            chart_seq);
    js_str(f, csv);
    fputs(", { ylabel: ", f);
    js_str(f, ylabel);
    /* the x axis is named by the CSV's first column */
    size_t xl = strcspn(csv, ",\n");
    char xname[64];
    snprintf(xname, sizeof xname, "%.*s", (int)(xl < sizeof xname ? xl : sizeof xname - 1), csv);
    fputs(", xlabel: ", f);
    js_str(f, xname);
    fputs(", ", f);
    chart_common(f);
    if (flags & HR_STACKED)
        fputs(", stackedGraph: true, fillGraph: true", f);
    if (flags & HR_LOGY)
        fputs(", logscale: true", f);
    fprintf(f, ", axes: { y: { axisLabelWidth: 60 }, x: { logscale: %s",
            flags & HR_LOGX ? "true" : "false");
    if (!(flags & HR_PERCENTILE_X))
        /* dygraphs would print a tick at 0.6 as 0.6000000000000001 */
        fputs(", axisLabelFormatter: function (x) { return +x.toFixed(3); }", f);
    else
        /* x = 1/(1-p): ticks at the usual percentiles, values shown as pNN.NN */
        fputs(",\n    valueFormatter: function (x) { return \"p\" + +(100 * (1 - 1 / x)).toFixed(3); },\n"
              "    ticker: function (a, b) { return [2, 4, 10, 20, 100, 1000, 10000, 100000]\n"
              "      .filter(function (v) { return v >= a && v <= b; })\n"
              "      .map(function (v) { return { v: v, label: \"p\" + +(100 * (1 - 1 / v)).toFixed(4) }; }); }",
              f);
    fputs(" } } }));\n</script>\n", f);
}

void html_report_pre(FILE *f, const char *text)
{
    fputs("<pre>", f);
    esc(f, text);
    fputs("</pre>\n", f);
}

void html_report_end(FILE *f)
{
    fputs("</body></html>\n", f);
}
