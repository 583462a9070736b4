# Reliability targets. libFuzzer targets (fuzz/*.c), built with clang into $(FUZZ_BUILD) from the library's own
# sources under ASan+UBSan. `make fuzz` runs each target FUZZ_SECONDS seconds (default 60);
# `make test` runs a short pass (FUZZ_TEST_SECONDS per target) as its fuzz tier.
FUZZ_CC ?= clang
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS := -O1 -g -std=c11 -fPIC -pthread $(WARN) $(FUZZ_SANITIZE)
FUZZ_TARGETS := $(patsubst fuzz/%.c,%,$(wildcard fuzz/*.c))
FUZZ_BINS := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/bin/%)
FUZZ_LIB_OBJS := $(LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o) $(DIAGLIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o)

.PHONY: fuzz fuzz-build
.SECONDARY: $(FUZZ_LIB_OBJS)
$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -Itools/diaglib $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/bin/%: fuzz/%.c $(FUZZ_LIB_OBJS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -Itools/diaglib $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(LDLIBS)

fuzz-build: $(FUZZ_BINS)
-include $(wildcard $(addsuffix /*.d,$(FUZZ_BUILD)/bin $(FUZZ_BUILD)/obj/* $(FUZZ_BUILD)/obj/*/* $(FUZZ_BUILD)/obj/*/*/*))

fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# valgrind memcheck of the Socket transport and socket layer unit tests: no errors, no
# definite leaks (the make test tier "memcheck" runs the same).
MEMCHECK_FILTER ?= NetSocket*:Socket*
.PHONY: memcheck
memcheck: $(BUILD)/test/unit_tests
	@BUILD=$(BUILD) MEMCHECK_FILTER='$(MEMCHECK_FILTER)' test/memcheck.sh
