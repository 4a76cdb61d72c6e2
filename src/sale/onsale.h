/* onsale.h -- which vouchers are sold at all: the one rule that publishing (api_voucher.c)
 * and rebuilding from SQL (rebuild.c, rebuild_watch.c) share.
 *
 * A flash-sale voucher (it has a tb_seckill_voucher row) of type 1 (flash sale) and
 * status 1 (on shelf). Any other -- off shelf (2), expired (3), type 0 -- stays in SQL
 * only: never published, never rebuilt into Redis, so a grab finds no voucher. No state. */
#ifndef SECKILL_ONSALE_H
#define SECKILL_ONSALE_H

int onsale_voucher(int is_seckill, int type, int status);

#endif
