/* lockcheck.h -- `seckill redis lock-check`: mutual exclusion of sync mode's locks
 * (lockmap.h) checked against a live Redis or Redis Cluster. */
#ifndef SECKILL_LOCKCHECK_H
#define SECKILL_LOCKCHECK_H

/* argv[0] is "lock-check". Returns the process exit status. */
int lockcheck_main(int argc, char **argv);

#endif
