# tests/reliability.mk -- the fuzzing, TSan and valgrind parts of `make check`
# (docs/reliability.md). Included by the Makefile.
#
#   make check                 ... ends with: every fuzz target for FUZZ_CI_SECONDS (20),
#                              the unit tests and one sale under TSan, one sale under
#                              valgrind -- all in tests/run.py's one closing count
#   make check RELIABILITY=0   without them
#   make check-tsan            only the TSan part;  make check-valgrind  only valgrind
#   make check-fuzz            only the fuzzing (FUZZ_CI_SECONDS each)

ifeq ($(.DEFAULT_GOAL),)
.DEFAULT_GOAL := all
endif

RELIABILITY ?= 1
FUZZ_CI_SECONDS ?= 20
REL_JOBS ?= $(shell nproc 2>/dev/null || echo 2)

TSAN_ARGS = --tsan-bin build/tsan/seckill --tsan-unit-dir build/tsan/tests
VALGRIND_ARGS = --valgrind-bin build/valgrind/seckill
FUZZ_CI_ARGS = --fuzz-dir build/fuzz/fuzz --fuzz-seconds $(FUZZ_CI_SECONDS)

ifeq ($(RELIABILITY),1)
RELIABILITY_ARGS = $(FUZZ_CI_ARGS) $(TSAN_ARGS) $(VALGRIND_ARGS)
else
RELIABILITY_ARGS =
endif

.PHONY: reliability-builds tsan-build valgrind-build check-tsan check-valgrind check-fuzz
reliability-builds:
ifeq ($(RELIABILITY),1)
	$(MAKE) tsan-build valgrind-build fuzz-build
endif

tsan-build:
	$(MAKE) -j$(REL_JOBS) SAN=thread all unit-bins
valgrind-build:
	$(MAKE) -j$(REL_JOBS) SAN=valgrind all

check-tsan: tsan-build
	python3 tests/run.py --no-unit --no-it $(TSAN_ARGS)
check-valgrind: valgrind-build
	python3 tests/run.py --no-unit --no-it $(VALGRIND_ARGS)
check-fuzz: fuzz-build
	python3 tests/run.py --no-unit --no-it $(FUZZ_CI_ARGS)
