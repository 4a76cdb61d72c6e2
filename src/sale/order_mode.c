/* order_mode.c -- the table of order modes (order_mode.h): the service's three rows, then
 * the plug-ins' rows in the order they were added. */
#include "sale/order_mode.h"

#include <stdio.h>
#include <string.h>

#include "core/sb.h"
#include "sale/sync_order.h"
#include "store/store.h"

#define MODES_MAX 32
#define PLUGINS_MAX 4

/* stream and queue both admit in Redis (admission.c tells them apart by app->ordq); queue
 * mode's in-process queue and sync mode's locks are started by server.c. */
static const order_mode_row_t service_rows[MODE__SERVICE] = {
    [MODE_STREAM] = {.name = "stream", .order = admission_try},
    [MODE_QUEUE] = {.name = "queue", .order = admission_try},
    [MODE_SYNC] = {.name = "sync", .order = sync_order_try, .sql_counts = store_voucher_counts},
};

static const order_mode_row_t *rows[MODES_MAX] = {
    &service_rows[MODE_STREAM], &service_rows[MODE_QUEUE], &service_rows[MODE_SYNC]};
static int nrows = MODE__SERVICE;
static const order_mode_plugin_t *plugins[PLUGINS_MAX];
static int nplugins;

int order_mode_plugin(const order_mode_plugin_t *p)
{
    if (nplugins == PLUGINS_MAX || nrows + p->nrows > MODES_MAX)
        return -1;
    plugins[nplugins++] = p;
    int first = nrows;
    for (int i = 0; i < p->nrows; i++)
        rows[nrows++] = &p->rows[i];
    return first;
}

order_mode_t order_mode_find(const char *name)
{
    for (int i = 0; i < nrows; i++)
        if (strcmp(rows[i]->name, name) == 0)
            return i;
    return -1;
}

const order_mode_row_t *order_mode_row(order_mode_t m)
{
    return m >= 0 && m < nrows ? rows[m] : NULL;
}

const char *order_mode_name(order_mode_t m)
{
    const order_mode_row_t *row = order_mode_row(m);
    return row ? row->name : "?";
}

/* "mode must be stream, queue or sync, or a lab step (naive, ...), not "x"" */
static void unknown_mode(const char *name, char *err, size_t errlen)
{
    sb_t s = SB_INIT;
    sb_puts(&s, "--mode must be stream, queue or sync");
    int row = MODE__SERVICE;
    for (int p = 0; p < nplugins; p++) {
        sb_printf(&s, ", or %s (", plugins[p]->what);
        for (int i = 0; i < plugins[p]->nrows; i++)
            sb_printf(&s, "%s%s", i ? ", " : "", rows[row++]->name);
        sb_puts(&s, ")");
    }
    snprintf(err, errlen, "%s, not \"%s\"", s.buf, name);
    sb_free(&s);
}

int order_mode_pick(config_t *cfg, char *err, size_t errlen)
{
    cfg->mode = order_mode_find(cfg->mode_name);
    if (cfg->mode < 0) {
        unknown_mode(cfg->mode_name, err, errlen);
        cfg->mode = MODE_STREAM;
        return -1;
    }
    for (int p = 0; p < nplugins; p++)
        if (plugins[p]->check && plugins[p]->check(cfg, err, errlen) < 0)
            return -1;
    return 0;
}
