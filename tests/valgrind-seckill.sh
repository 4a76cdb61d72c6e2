#!/bin/sh
# valgrind-seckill.sh -- runs seckill under valgrind memcheck, for tests/run.py's valgrind
# stage (tests/reliability.py): the harness starts this script as if it were the binary.
#   VALGRIND_SECKILL_BIN  the seckill binary (an -O1 build without sanitizers)
#   VALGRIND_LOG_DIR      where the reports go, one per process (default: stderr)
# Any error, and any leak other than "still reachable" (memory a global still points to at
# exit), makes the process exit 99 instead of its own status, which fails the test.
set -eu
: "${VALGRIND_SECKILL_BIN:?set VALGRIND_SECKILL_BIN to the seckill binary}"
log=""
if [ -n "${VALGRIND_LOG_DIR:-}" ]; then
    log="--log-file=$VALGRIND_LOG_DIR/seckill.%p.log"
fi
# shellcheck disable=SC2086
exec valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
    --show-leak-kinds=${VALGRIND_SHOW_LEAKS:-definite,indirect,possible} --errors-for-leak-kinds=definite,indirect,possible \
    --num-callers=30 --child-silent-after-fork=yes $log \
    "$VALGRIND_SECKILL_BIN" "$@"
