# rlock/rlock.mk -- the distributed lock library, its tests and benchmark.
# Included by the main Makefile after UNIT_BINS is defined (uses its CC,
# CFLAGS, LDFLAGS, BUILD, SAN settings).
#
#   make $(BUILD)/librlock.a      the library
#   make rlock-tests              build the test binaries ($(RLOCK_TEST_BINS))
#   make rlock-check              build and run them (each starts its own
#                                 redis-server unless REDIS_URL is set)
#   make rlock-bench              build and run build/rlock_bench

# The main Makefile's first target must stay its default goal.
ifeq ($(.DEFAULT_GOAL),)
.DEFAULT_GOAL := all
endif

RLOCK_SRCS := $(sort $(wildcard rlock/*.c))
RLOCK_OBJS := $(patsubst rlock/%.c,$(BUILD)/rlock/%.o,$(RLOCK_SRCS))
RLOCK_LIB := $(BUILD)/librlock.a
RLOCK_LIBS := $(RLOCK_LIB) $(shell pkg-config --libs hiredis libevent 2>/dev/null) -pthread

RLOCK_TEST_SRCS := $(sort $(wildcard tests/rlock/test_*.c))
RLOCK_TEST_BINS := $(patsubst tests/rlock/test_%.c,$(BUILD)/tests/rlock_test_%,$(RLOCK_TEST_SRCS))
RLOCK_HARNESS_OBJ := $(BUILD)/rlock/tests/harness.o
UNIT_BINS += $(RLOCK_TEST_BINS)

$(BUILD)/rlock/%.o: rlock/%.c | $(BUILD)/rlock
	$(CC) $(CFLAGS) -Irlock -c -o $@ $<

$(RLOCK_LIB): $(RLOCK_OBJS)
	rm -f $@
	ar rcs $@ $^

$(RLOCK_HARNESS_OBJ): tests/rlock/harness.c tests/rlock/harness.h | $(BUILD)/rlock/tests
	$(CC) $(CFLAGS) -Irlock -Itests/rlock -c -o $@ $<

# Dependency files go to $(BUILD)/rlock/tests, not next to the test binaries.
$(BUILD)/tests/rlock_test_%: tests/rlock/test_%.c $(RLOCK_HARNESS_OBJ) $(RLOCK_LIB) | $(BUILD)/tests $(BUILD)/rlock/tests
	$(CC) $(CFLAGS) -MF $(BUILD)/rlock/tests/test_$*.d -Irlock -Itests/rlock -o $@ $< $(RLOCK_HARNESS_OBJ) $(LDFLAGS) $(RLOCK_LIBS) -lcmocka

$(BUILD)/rlock_bench: tests/rlock/lock_bench.c $(RLOCK_HARNESS_OBJ) $(RLOCK_LIB) | $(BUILD)/rlock/tests
	$(CC) $(CFLAGS) -MF $(BUILD)/rlock/tests/lock_bench.d -Irlock -Itests/rlock -o $@ $< $(RLOCK_HARNESS_OBJ) $(LDFLAGS) $(RLOCK_LIBS) -lm

$(BUILD)/rlock $(BUILD)/rlock/tests:
	mkdir -p $@

.PHONY: rlock-lib rlock-tests rlock-check rlock-bench
rlock-lib: $(RLOCK_LIB)
rlock-tests: $(RLOCK_TEST_BINS) $(BUILD)/rlock_bench
rlock-check: $(RLOCK_TEST_BINS)
	@for t in $(RLOCK_TEST_BINS); do echo "== $$t"; ./$$t || exit 1; done
rlock-bench: $(BUILD)/rlock_bench
	./$(BUILD)/rlock_bench

-include $(RLOCK_OBJS:.o=.d) $(wildcard $(BUILD)/rlock/tests/*.d)
