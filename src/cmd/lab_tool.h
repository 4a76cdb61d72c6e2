/* lab_tool.h -- `seckill lab`: the course's flash-sale chapter, every step run under the
 * same load and audited, in one table (docs/lab.md).
 *
 * For each step it starts the step's instances (`seckill serve --mode STEP`, with the
 * step's --lab-pause), sells one fresh voucher with `seckill bench` (the same open-loop
 * load every time: repeat clicks and double clicks included), applies the step's fault
 * (kill -9, a consumer that dies holding an order, no subscriber), stops the instances,
 * runs `seckill audit` on what is left and reads its lab figures. Children are this same
 * binary; Redis is a private redis-server (or --redis), SQL one SQLite file in --dir.
 *
 * Output: a table on stdout; --json FILE and --html FILE (html_report.h) for machines and
 * for people. */
#ifndef SECKILL_LAB_TOOL_H
#define SECKILL_LAB_TOOL_H

/* `seckill lab ...` (argv[0] is "lab"). 0 = every step ran, 2 = could not run. */
int lab_tool_main(int argc, char **argv);

#endif
