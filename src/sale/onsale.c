/* onsale.c -- which vouchers are sold at all (onsale.h). */
#include "sale/onsale.h"

int onsale_voucher(int is_seckill, int type, int status)
{
    return is_seckill && type == 1 && status == 1;
}
