# seckill -- build, run and test.
#
#   make            build/seckill (optimised, -Werror)
#   make SAN=1      build/san/seckill with ASan+UBSan (what `make check` tests)
#   make run        start the service on the embedded default
#   make check      unit + integration tests under ASan+UBSan (the CI command)
#   make bench      benchmarks (see docs/benchmarks.md)
#
# Dependencies are Debian packages; tools/deps.sh installs whatever is missing.

SAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build/san
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
OPT = -O1
else
BUILD ?= build
SANFLAGS =
OPT = -O2
endif

CC ?= cc
PKGS = libevent libevent_pthreads hiredis jansson sqlite3
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
WARN = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter \
       -Wno-missing-field-initializers -Wformat=2 -Wno-format-nonliteral
CFLAGS = -std=gnu11 $(OPT) -g $(WARN) $(SANFLAGS) -D_GNU_SOURCE -pthread -MMD -MP \
         -Isrc -I$(BUILD)/gen $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDFLAGS = $(SANFLAGS) -pthread
LIBS = $(PKG_LIBS) -lhttp_parser -lm

SRCS := $(sort $(wildcard src/*.c))
OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRCS)) $(BUILD)/obj/embedded.o
LIBOBJS := $(filter-out $(BUILD)/obj/main.o,$(OBJS))
EMBED := scripts/admit.lua sql/schema.sqlite.sql

UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))

# The lock library (issue 3) builds beside the service: it adds its objects and tests.
-include rlock/rlock.mk

.PHONY: all run check unit it bench clean
all: $(BUILD)/seckill

$(BUILD)/seckill: $(OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/obj/%.o: src/%.c | $(BUILD)/obj $(BUILD)/gen/embedded.h
	$(CC) $(CFLAGS) -c -o $@ $<

# Lua scripts and SQL schemas are files in the repo, compiled into the binary.
$(BUILD)/gen/embedded.c: $(EMBED) tools/embed.sh | $(BUILD)/gen
	sh tools/embed.sh $@ script_admit_lua=scripts/admit.lua schema_sqlite_sql=sql/schema.sqlite.sql
$(BUILD)/gen/embedded.h: | $(BUILD)/gen
	printf '%s\n' '/* Generated: built-in scripts and schemas (tools/embed.sh). */' \
	  'extern const char script_admit_lua[];' 'extern const char schema_sqlite_sql[];' > $@
$(BUILD)/obj/embedded.o: $(BUILD)/gen/embedded.c $(BUILD)/gen/embedded.h | $(BUILD)/obj
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIBOBJS) | $(BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(LIBOBJS) $(LDFLAGS) $(LIBS) -lcmocka

$(BUILD)/obj $(BUILD)/gen $(BUILD)/tests:
	mkdir -p $@

run: $(BUILD)/seckill
	./$(BUILD)/seckill serve

unit: $(UNIT_BINS)
	@for t in $(UNIT_BINS); do echo "== $$t"; ./$$t || exit 1; done

# The CI command: everything under ASan+UBSan.
check:
	$(MAKE) SAN=1 all unit-bins
	python3 tests/run.py --bin build/san/seckill --unit-dir build/san/tests

unit-bins: $(UNIT_BINS)

bench: $(BUILD)/seckill
	sh bench/run.sh

clean:
	rm -rf build

-include $(OBJS:.o=.d)
