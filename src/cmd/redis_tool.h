/* redis_tool.h -- `seckill redis`: operator commands on the service's Redis state. */
#ifndef SECKILL_REDIS_TOOL_H
#define SECKILL_REDIS_TOOL_H

/* argv[0] is "redis". Returns the process exit status. */
int redis_tool_main(int argc, char **argv);

#endif
