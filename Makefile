# seckill -- build, run and test.
#
#   make            build/seckill (optimised, -Werror)
#   make SAN=1      build/san/seckill with ASan+UBSan (what `make check` tests)
#   make run        start the service on the embedded default
#   make check      the source rules (make lint), then unit + integration tests under
#                   ASan+UBSan, two at a time (the CI command; docs/testing.md), then
#                   (tests/reliability.mk) each fuzz target for 20 s, unit tests and a sale
#                   under TSan, a sale under valgrind
#   make lint       a file's functions carry its name (tools/check_names.py); no include
#                   cycle between modules (tools/include_cycles.py)
#   make fuzz       run the libFuzzer targets (FUZZ_SECONDS=30 each; fuzz/fuzz.mk)
#   make perf       the service beside redis-benchmark and nginx (perf/; docs/performance.md)
#   make deb        the Debian package build/deb/seckill_VERSION_ARCH.deb (tools/mkdeb.sh)
#
# Dependencies are Debian packages, installed by tools/deps.sh: `sh tools/deps.sh` what
# `make` and `make run` need, `sh tools/deps.sh test` what `make check` needs,
# `sh tools/deps.sh perf` what `make perf` needs.

SAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build/san
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
OPT = -O1
# SAN=thread: TSan; SAN=valgrind: -O1 without sanitizers, for valgrind;
# SAN=fuzz: clang with libFuzzer coverage + ASan+UBSan (fuzz/fuzz.mk). docs/reliability.md
else ifeq ($(SAN),thread)
BUILD ?= build/tsan
SANFLAGS = -fsanitize=thread -fno-omit-frame-pointer
OPT = -O1
else ifeq ($(SAN),valgrind)
BUILD ?= build/valgrind
SANFLAGS =
OPT = -O1
else ifeq ($(SAN),fuzz)
BUILD ?= build/fuzz
CC = clang
SANFLAGS = -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
OPT = -O1
else
BUILD ?= build
SANFLAGS =
OPT = -O2
endif

CC ?= cc
PKGS = libevent hiredis jansson sqlite3 libmariadb libcrypto
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
WARN = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter \
       -Wno-missing-field-initializers -Wformat=2 -Wno-format-nonliteral
CFLAGS = -std=gnu11 $(OPT) -g $(WARN) $(SANFLAGS) -D_GNU_SOURCE -pthread -MMD -MP \
         -Isrc -Irlock -I$(BUILD)/gen $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDFLAGS = $(SANFLAGS) -pthread $(EXTRA_LDFLAGS)
LIBS = $(PKG_LIBS) -lhttp_parser -lm

# src/<part>/ holds one part of the service each (README's folder map); src/cmd/ the
# commands other than serve (`seckill bench`, `audit`, `lab`, ...) linked into the same binary.
SRCS := $(sort $(wildcard src/*.c src/*/*.c))
OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRCS)) $(BUILD)/obj/embedded.o
LIBOBJS := $(filter-out $(BUILD)/obj/main.o,$(OBJS))
EMBED := src/sale/admit.lua src/auth/login_code.lua sql/schema.sqlite.sql sql/schema.mysql.sql \
         src/server/board.lua web/board.html web/board.js web/board.css \
         src/sale/transfer.lua \
         src/rebuild/rebuild.lua src/lab/lab_mq.lua src/room/room.lua src/order/life.lua

UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))

# The lock library builds beside the service: it adds its objects and tests.
include rlock/rlock.mk
# Fuzzing, TSan and valgrind runs: fuzz/fuzz.mk, tests/reliability.mk.
include fuzz/fuzz.mk
include tests/reliability.mk

.PHONY: all run reset check lint unit it perf perf-cluster clean
all: $(BUILD)/seckill

# The service links the lock library (sync mode's per-user lock); rlock/rlock.mk builds it.
$(BUILD)/seckill: $(OBJS) $(RLOCK_LIB)
	$(CC) $(LDFLAGS) -o $@ $(OBJS) $(RLOCK_LIB) $(LIBS)

$(BUILD)/obj/%.o: src/%.c | $(BUILD)/gen/embedded.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

# Lua scripts, SQL schemas and the sale board's page (web/) are files in the repo,
# compiled into the binary.
$(BUILD)/gen/embedded.c: $(EMBED) tools/embed.sh Makefile | $(BUILD)/gen
	sh tools/embed.sh $@ script_admit_lua=src/sale/admit.lua script_login_code_lua=src/auth/login_code.lua \
	  schema_sqlite_sql=sql/schema.sqlite.sql \
	  schema_mysql_sql=sql/schema.mysql.sql script_board_lua=src/server/board.lua \
	  web_board_html=web/board.html web_board_js=web/board.js web_board_css=web/board.css \
	  script_transfer_lua=src/sale/transfer.lua \
	  script_rebuild_lua=src/rebuild/rebuild.lua \
	  script_lab_mq_lua=src/lab/lab_mq.lua script_room_lua=src/room/room.lua script_life_lua=src/order/life.lua
$(BUILD)/gen/embedded.h: Makefile | $(BUILD)/gen
	printf '%s\n' '/* Generated: built-in scripts and schemas (tools/embed.sh). */' \
	  'extern const char script_admit_lua[];' 'extern const char script_login_code_lua[];' \
	  'extern const char schema_sqlite_sql[];' \
	  'extern const char schema_mysql_sql[];' 'extern const char script_board_lua[];' \
	  'extern const char web_board_html[];' 'extern const char web_board_js[];' \
	  'extern const char script_transfer_lua[];' \
	  'extern const char web_board_css[];' 'extern const char script_rebuild_lua[];' \
	  'extern const char script_lab_mq_lua[];' 'extern const char script_room_lua[];' \
	  'extern const char script_life_lua[];' > $@
$(BUILD)/obj/embedded.o: $(BUILD)/gen/embedded.c $(BUILD)/gen/embedded.h | $(BUILD)/obj
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIBOBJS) $(RLOCK_LIB) | $(BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(LIBOBJS) $(RLOCK_LIB) $(LDFLAGS) $(LIBS) -lcmocka

$(BUILD)/obj $(BUILD)/gen $(BUILD)/tests:
	mkdir -p $@

run: $(BUILD)/seckill
	./$(BUILD)/seckill serve

# Start afresh: removes ./var -- the embedded default's Redis, SQLite file, admin token and
# token key: every voucher, user and order of `make run` -- after asking (YES=1: without).
# A serving instance is refused: the Redis it started still has ./var's socket bound.
# (VAR=DIR: another --data-dir.)
VAR := var
reset:
	@if [ ! -e "$(VAR)" ]; then echo "nothing to reset: $(VAR) does not exist"; exit 0; fi; \
	dir="$$(realpath "$(VAR)")"; \
	if find /proc/[0-9]*/fd -maxdepth 1 -lname "$$dir" 2>/dev/null | grep -q .; then \
	    echo "a seckill serve is running on $(VAR) (a process holds it open): stop it first (Ctrl-C)" >&2; \
	    exit 1; \
	fi; \
	if [ "$(YES)" != 1 ]; then \
	    printf 'remove %s: every voucher, user and order of make run? [y/N] ' "$(VAR)"; \
	    read a || a=; \
	    case "$$a" in y | Y | yes) ;; *) echo "kept $(VAR)"; exit 1 ;; esac; \
	fi; \
	rm -rf -- "$(VAR)" && echo "removed $(VAR): make run starts afresh"

unit: $(UNIT_BINS)
	@for t in $(UNIT_BINS); do echo "== $$t"; ./$$t || exit 1; done

# The CI command: everything under ASan+UBSan. TEST_JOBS integration tests (and fuzz
# targets) at a time; a test file marked SERIAL runs alone (tests/run.py, docs/testing.md).
TEST_JOBS ?= 2
check: lint
	$(MAKE) -j$(REL_JOBS) SAN=1 all unit-bins
	$(MAKE) reliability-builds
	python3 tests/run.py --bin build/san/seckill --unit-dir build/san/tests --db both \
	    -j $(TEST_JOBS) --durations 15 $(RELIABILITY_ARGS)

unit-bins: $(UNIT_BINS)

# The tree's rules (README, "Folder map"): every non-static function of src/<part>/<name>.c
# is called <name>_..., and no two modules include each other, however indirectly.
lint:
	python3 tools/check_names.py
	python3 tools/include_cycles.py

# The service beside redis-benchmark and nginx (perf/run.sh; docs/performance.md).
perf: $(BUILD)/seckill
	sh perf/run.sh

# seckill on a Redis Cluster of 1, 2, 3 masters, and the cost of --redis-wait-replicas
# (perf/cluster.py; docs/redis-cluster.md).
perf-cluster: $(BUILD)/seckill
	BIN=$(BUILD)/seckill python3 perf/cluster.py

# The Debian package (tools/mkdeb.sh, deploy/deb/): build/deb/seckill_VERSION_ARCH.deb.
# Its binary is built apart (build/pkg) with Debian's hardening flags.
DEB_HARDEN = EXTRA_CFLAGS="-D_FORTIFY_SOURCE=2 -fstack-protector-strong" \
             EXTRA_LDFLAGS="-Wl,-z,relro,-z,now"
deb:
	$(MAKE) BUILD=build/pkg $(DEB_HARDEN) build/pkg/seckill
	sh tools/mkdeb.sh build/pkg/seckill build/deb

clean:
	rm -rf build

-include $(OBJS:.o=.d)
