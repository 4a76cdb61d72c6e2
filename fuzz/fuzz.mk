# fuzz/fuzz.mk -- libFuzzer targets (docs/reliability.md). Included by the
# Makefile.
#
#   make fuzz                 build, then run every target for FUZZ_SECONDS (30) each
#   make fuzz FUZZ_TARGETS=fuzz_http FUZZ_SECONDS=600
#   make fuzz-build           build/fuzz/fuzz/<target> (clang, coverage + ASan+UBSan)
#   make fuzz-regress         run each target once over its corpus only (no fuzzing)
#   make fuzz-merge           fold the new inputs of the last `make fuzz` into fuzz/corpus/
#                             (only those that add coverage: libFuzzer's -merge=1)
#
# The service's objects are compiled again by clang with -fsanitize=fuzzer-no-link into
# build/fuzz/obj and archived in build/fuzz/libseckill.a, so a target links only what it
# uses. Redis, the SQL job pool, logging and (for some targets) http_reply are replaced
# at link time with -Wl,--wrap (fuzz/fuzz_common.h): no test hooks in src/.

ifeq ($(.DEFAULT_GOAL),)
.DEFAULT_GOAL := all
endif

FUZZ_ALL := fuzz_http fuzz_json fuzz_config fuzz_redis_reply
FUZZ_TARGETS ?= $(FUZZ_ALL)
FUZZ_SECONDS ?= 30
FUZZ_DIR := build/fuzz/fuzz
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 2)

FUZZ_WRAP := -Wl,--wrap=rds_command,--wrap=rds_evalsha,--wrap=jobs_submit,--wrap=log_msg
FUZZ_WRAP_fuzz_json := -Wl,--wrap=http_reply
FUZZ_WRAP_fuzz_redis_reply := -Wl,--wrap=http_reply,--wrap=redisAppendCommandArgv,--wrap=redisAppendFormattedCommand

.PHONY: fuzz fuzz-build fuzz-bins fuzz-regress fuzz-merge
fuzz-build:
	$(MAKE) -j$(FUZZ_JOBS) SAN=fuzz fuzz-bins

fuzz: fuzz-build
	python3 tests/run.py --no-unit --no-it --fuzz-dir $(FUZZ_DIR) \
	  --fuzz-seconds $(FUZZ_SECONDS) $(foreach t,$(FUZZ_TARGETS),--fuzz-target $(t)) \
	  --fuzz-keep build/fuzz/new

fuzz-regress: fuzz-build
	python3 tests/run.py --no-unit --no-it --fuzz-dir $(FUZZ_DIR) --fuzz-seconds 0 \
	  $(foreach t,$(FUZZ_TARGETS),--fuzz-target $(t))

fuzz-merge:
	@for t in $(FUZZ_TARGETS); do \
	  if [ -d build/fuzz/new/$$t ]; then \
	    echo "== $$t"; mkdir -p fuzz/corpus/$$t; \
	    $(FUZZ_DIR)/$$t -merge=1 -max_len=16384 fuzz/corpus/$$t build/fuzz/new/$$t 2>&1 | tail -2; \
	  fi; done

ifeq ($(SAN),fuzz)
# clang warns about other things than gcc; gcc's -Werror build is the gate for those.
CFLAGS += -Wno-error
FUZZ_LIB := $(BUILD)/libseckill.a

$(FUZZ_LIB): $(LIBOBJS)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/fuzz:
	mkdir -p $@

$(BUILD)/fuzz/fuzz_common.o: fuzz/fuzz_common.c | $(BUILD)/fuzz $(BUILD)/gen/embedded.h
	$(CC) $(CFLAGS) -Ifuzz -c -o $@ $<

$(BUILD)/fuzz/%: fuzz/%.c $(BUILD)/fuzz/fuzz_common.o $(FUZZ_LIB) $(RLOCK_LIB) | $(BUILD)/fuzz
	$(CC) $(CFLAGS) -Ifuzz -fsanitize=fuzzer -o $@ $< $(BUILD)/fuzz/fuzz_common.o \
	  $(FUZZ_LIB) $(RLOCK_LIB) $(LDFLAGS) $(FUZZ_WRAP) $(FUZZ_WRAP_$*) $(LIBS)

fuzz-bins: $(addprefix $(BUILD)/fuzz/,$(FUZZ_ALL))

-include $(wildcard $(BUILD)/fuzz/*.d)
endif
