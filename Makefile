# railnet build. `make` builds the libraries and tools; `make test` runs every test tier
# that can run here; `make demo` loads the plugin the way NCCL does and moves data.
CC ?= gcc
CXX ?= g++
PREFIX ?= /usr/local
SANITIZE ?=
comma := ,
# A sanitized build lives in its own tree (build-address-undefined for SANITIZE=address,undefined).
BUILD ?= $(if $(SANITIZE),build-$(subst $(comma),-,$(SANITIZE)),build)
SOFTROCE ?= 1

WARN := -Wall -Wextra -Werror
CPPFLAGS += -D_GNU_SOURCE -Iinclude -Iext-net/include -Isrc/include
# Every compile writes the headers it read to $@.d (-MMD; -MP adds a target per header, so
# that a deleted header does not stop the build); the .d files are included at the end.
DEPFLAGS = -MMD -MP -MF $@.d -MT $@
CPPFLAGS += $(DEPFLAGS)
CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -fPIC -fvisibility=hidden -pthread $(WARN)
CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++17 -pthread $(WARN)
LDLIBS += -ldl -pthread
ifneq ($(SANITIZE),)
  # every report is fatal, so that a test fails on it; gcc's -Wmaybe-uninitialized gives
  # false positives under -fsanitize=address (in libstdc++'s <regex> among others)
  SAN_WNO = $(shell $(1) -Werror -Wno-maybe-uninitialized -x $(2) -fsyntax-only /dev/null >/dev/null 2>&1 \
              && echo -Wno-maybe-uninitialized)
  CFLAGS += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer $(call SAN_WNO,$(CC),c)
  CXXFLAGS += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer $(call SAN_WNO,$(CXX),c++)
  LDFLAGS += -fsanitize=$(SANITIZE)
endif

LIB_SRCS := $(wildcard src/misc/*.c) $(wildcard src/transport/*.c) $(wildcard src/transport/net_ib/*.c src/transport/net_ib/*/*.c)
PLUGIN_SRCS := $(wildcard ext-net/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
PLUGIN_OBJS := $(PLUGIN_SRCS:%.c=$(BUILD)/obj/%.o)
HEADERS := $(wildcard include/*.h ext-net/include/railnet_net/*.h src/include/*.h src/transport/*.h src/transport/net_ib/*.h src/transport/net_ib/*/*.h)

LIBDIR := $(BUILD)/lib
PLUGIN := $(LIBDIR)/libnccl-net-railnet.so
STATIC := $(LIBDIR)/librailnet.a
SHARED := $(LIBDIR)/librailnet.so

# Tools: railnet-demo is one file; railnet-diag and railnet-perf are made of the files of
# tools/diag/ and tools/perf/; all three link tools/common/ (the --json writer, the
# command-line conventions). railnet-diag's checks between nodes (the pair protocol, its TCP
# and RDMA probes, the ethtool reader) are a library of their own, tools/diaglib/ built into
# librailnet-diag.a, which the unit and netns tests and the fuzz targets link too: none of
# it is in the plugin.
TOOLS := $(BUILD)/bin/railnet-demo $(BUILD)/bin/railnet-diag $(BUILD)/bin/railnet-perf

TOOL_COMMON_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/common/*.c))
# tools/common/plugin_load.c (a net plugin opened as NCCL opens it, its logger, devices by
# name) is linked into the benchmarks and the test binaries too.
PLUGIN_LOAD_OBJ := $(BUILD)/obj/tools/common/plugin_load.o
DIAG_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/diag/*.c))
DIAGLIB_SRCS := $(wildcard tools/diaglib/*.c)
DIAGLIB_OBJS := $(DIAGLIB_SRCS:%.c=$(BUILD)/obj/%.o)
DIAGLIB := $(LIBDIR)/librailnet-diag.a
PERF_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/perf/*.c))

.PHONY: sanitize-softroce-build all lib tools examples test check demo install clean deps-build deps-test bench bench-build
all: lib tools examples

lib: $(PLUGIN) $(STATIC) $(SHARED)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(STATIC): $(LIB_OBJS) $(PLUGIN_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SHARED): $(LIB_OBJS) $(PLUGIN_OBJS) src/librailnet.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,--no-undefined -Wl,-soname,librailnet.so -Wl,--version-script=src/librailnet.map $(LDFLAGS) \
	  -o $@ $(LIB_OBJS) $(PLUGIN_OBJS) $(LDLIBS)

$(PLUGIN): $(LIB_OBJS) $(PLUGIN_OBJS) ext-net/plugin.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,--no-undefined -Wl,-soname,libnccl-net-railnet.so -Wl,--version-script=ext-net/plugin.map $(LDFLAGS) \
	  -o $@ $(LIB_OBJS) $(PLUGIN_OBJS) $(LDLIBS)
	ln -sf libnccl-net-railnet.so $(LIBDIR)/libnccl-net.so

tools: $(TOOLS)
$(BUILD)/obj/tools/%.o: tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itools/common -Itools/diaglib $(CFLAGS) -c $< -o $@
$(DIAGLIB): $(DIAGLIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/bin/railnet-demo: tools/railnet-demo.c $(TOOL_COMMON_OBJS) $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itools/common $(CFLAGS) $(LDFLAGS) -o $@ $< $(TOOL_COMMON_OBJS) \
	  -Wl,--whole-archive $(STATIC) -Wl,--no-whole-archive $(LDLIBS)
$(BUILD)/bin/railnet-diag: $(DIAG_OBJS) $(TOOL_COMMON_OBJS) $(DIAGLIB) $(STATIC)
$(BUILD)/bin/railnet-perf: $(PERF_OBJS) $(TOOL_COMMON_OBJS) $(STATIC)
$(BUILD)/bin/railnet-diag $(BUILD)/bin/railnet-perf:
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter $(DIAGLIB),$^) \
	  -Wl,--whole-archive $(STATIC) -Wl,--no-whole-archive $(LDLIBS)

# Examples (examples/*.c) use the public headers only, as a user of librailnet would.
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
examples: $(EXAMPLES)
$(BUILD)/examples/%: examples/%.c $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) -D_GNU_SOURCE -Iinclude -Iext-net/include $(DEPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC) $(LDLIBS)

# Benchmarks (bench/*.c): programs that bench/*.sh run next to their references.
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
bench-build: lib $(BENCHES)
# (the plugin through dlopen, as NCCL; rma_bench links librailnet's public API instead)
$(BUILD)/bench/%: bench/%.c $(PLUGIN_LOAD_OBJ) $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itools/common $(CFLAGS) $(LDFLAGS) -o $@ $< $(PLUGIN_LOAD_OBJ) $(STATIC) $(LDLIBS)

bench: deps-test bench-build
	bench/socket.sh

# ---------------------------------------------------------------- tests
GTEST_LIBS := -lgtest -lgtest_main
UNIT_SRCS := $(wildcard test/unit/*.cc)
NETNS_SRCS := $(wildcard test/netns/*.cc)
TEST_COMMON := $(wildcard test/common/*.cc)
TEST_BINS := $(BUILD)/test/unit_tests
ifneq ($(NETNS_SRCS),)
TEST_BINS += $(BUILD)/test/netns_tests
endif

# Each test source compiles to its own object, so that a change rebuilds one file.
$(BUILD)/obj/test/%.o: test/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) -Itest/common -Itools/diaglib $(CXXFLAGS) -c $< -o $@
UNIT_OBJS := $(UNIT_SRCS:test/%.cc=$(BUILD)/obj/test/%.o)
NETNS_OBJS := $(NETNS_SRCS:test/%.cc=$(BUILD)/obj/test/%.o)
TEST_COMMON_OBJS := $(TEST_COMMON:test/%.cc=$(BUILD)/obj/test/%.o) $(PLUGIN_LOAD_OBJ)

$(BUILD)/test/unit_tests: $(UNIT_OBJS) $(TEST_COMMON_OBJS) $(DIAGLIB) $(STATIC)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $(UNIT_OBJS) $(TEST_COMMON_OBJS) $(DIAGLIB) \
	  -Wl,--whole-archive $(STATIC) -Wl,--no-whole-archive $(GTEST_LIBS) $(LDLIBS)

$(BUILD)/test/netns_tests: $(NETNS_OBJS) $(TEST_COMMON_OBJS) $(DIAGLIB) $(STATIC)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $(NETNS_OBJS) $(TEST_COMMON_OBJS) $(DIAGLIB) \
	  -Wl,--whole-archive $(STATIC) -Wl,--no-whole-archive $(GTEST_LIBS) $(LDLIBS)

# Tiers may add their own rules and binaries (e.g. the soft-RoCE VM).
-include test/softroce/softroce.mk
-include fuzz/fuzz.mk

# What each object and program was built from, as the compiler saw it (see DEPFLAGS).
-include $(wildcard $(addsuffix /*.d,$(BUILD)/obj $(BUILD)/obj/* $(BUILD)/obj/*/* $(BUILD)/obj/*/*/* $(BUILD)/obj/*/*/*/* \
                                      $(BUILD)/bin $(BUILD)/bench $(BUILD)/examples $(BUILD)/test $(BUILD)/test/*))

# A client of the RMA plugin built on NCCL 2.30's own headers (test/nccl/), only when NCCL's
# sources are given: make test-build NCCL_SRC=DIR (DIR holds src/include/plugin/rma/rma_v14.h and
# plugins/net/example/nccl/net.h). The soft-RoCE test that runs it skips without it.
NCCL_SRC ?=
ifneq ($(wildcard $(NCCL_SRC)/src/include/plugin/rma/rma_v14.h),)
TEST_BINS += $(BUILD)/test/rma_nccl_client
endif
$(BUILD)/test/rma_nccl_client: test/nccl/rma_client.c test/nccl/include/nccl_net.h
	@mkdir -p $(dir $@)
	$(CC) -D_GNU_SOURCE -Itest/nccl/include -I$(NCCL_SRC)/plugins/net/example/nccl -I$(NCCL_SRC)/src/include/plugin \
	  $(CFLAGS) $(LDFLAGS) -o $@ $< -ldl

test-build: lib tools examples $(TEST_BINS) $(SOFTROCE_BINS)

# What the sanitizer tier of test/run-tests.sh builds (with SANITIZE=... BUILD=...), and the
# soft-RoCE tier's binaries it runs in the VM too.
sanitize-build: lib tools examples $(TEST_BINS)
sanitize-softroce-build: $(SOFTROCE_BINS)

# make test TIERS=unit,netns,...: only those tiers of test/run-tests.sh (default: all).
TIERS ?= all
test: deps-test
	@$(MAKE) --no-print-directory test-build
	@BUILD=$(BUILD) SOFTROCE=$(SOFTROCE) SANITIZE=$(SANITIZE) TIERS=$(TIERS) test/run-tests.sh

# make check: the unit tier only (no root, no VM, no packages installed; what the unit tests
# run: the libraries, tools and examples, and build/test/unit_tests), as UNIT_SHARDS
# GoogleTest shards at once (its tests mostly wait: for sockets, child processes, intervals).
UNIT_SHARDS ?= 4
check: lib tools examples $(BUILD)/test/unit_tests
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) TIERS=unit UNIT_SHARDS=$(UNIT_SHARDS) test/run-tests.sh

demo: deps-build
	@$(MAKE) --no-print-directory lib tools
	LD_LIBRARY_PATH=$(CURDIR)/$(LIBDIR) $(BUILD)/bin/railnet-demo

deps-build:
	@scripts/deps.sh build
deps-test:
	@SOFTROCE=$(SOFTROCE) scripts/deps.sh test

# ---------------------------------------------------------------- install
# INSTALL_LIBDIR: where the libraries, the plugin and railnet.pc go (the Debian package
# gives /usr/lib/<multiarch>, a directory the dynamic loader searches, as NCCL's dlopen of
# the plugin by its bare name needs). MANDIR: the man pages (make man).
INSTALL_LIBDIR ?= $(PREFIX)/lib
# The version, from include/railnet.h (the one place it is written).
RAILNET_VERSION := $(shell scripts/version.sh)
MANDIR ?= $(PREFIX)/share/man
install: lib tools examples man
	install -d $(DESTDIR)$(INSTALL_LIBDIR) $(DESTDIR)$(PREFIX)/include/railnet_net \
	  $(DESTDIR)$(INSTALL_LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(PLUGIN) $(SHARED) $(DESTDIR)$(INSTALL_LIBDIR)/
	install -m 0644 $(STATIC) $(DESTDIR)$(INSTALL_LIBDIR)/
	ln -sf libnccl-net-railnet.so $(DESTDIR)$(INSTALL_LIBDIR)/libnccl-net.so
	install -m 0644 include/railnet.h $(DESTDIR)$(PREFIX)/include/
	install -m 0644 ext-net/include/railnet_net/*.h $(DESTDIR)$(PREFIX)/include/railnet_net/
	install -m 0755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(INSTALL_LIBDIR)|' -e 's|@VERSION@|$(RAILNET_VERSION)|' railnet.pc.in > $(DESTDIR)$(INSTALL_LIBDIR)/pkgconfig/railnet.pc
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7
	install -m 0644 $(filter %.1,$(MANPAGES)) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(filter %.7,$(MANPAGES)) $(DESTDIR)$(MANDIR)/man7/

# ---------------------------------------------------------------- man pages, Debian package
# make man: $(BUILD)/man/* from man/*.in. railnet(7)'s ENVIRONMENT section is made from the
# param tables (railnet-diag --params --json | man-params), so it lists what the code
# declares. The pages' date is the last commit's (SOURCE_DATE_EPOCH, as reproducible builds
# set it), else today.
MANPAGES := $(patsubst man/%.in,$(BUILD)/man/%,$(wildcard man/*.in))
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
.PHONY: man deb
man: $(MANPAGES)
$(BUILD)/man/man-params: man/man-params.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $<
$(BUILD)/man/%: man/%.in $(BUILD)/man/man-params $(BUILD)/bin/railnet-diag
	env -u NCCL_DEBUG -u NCCL_DEBUG_FILE $(BUILD)/bin/railnet-diag --params --json \
	  | SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(BUILD)/man/man-params $< >$@.tmp
	mv $@.tmp $@

# make deb: the Debian binary package, built by dpkg-buildpackage from debian/ in a copy of
# this tree ($(BUILD)/deb/railnet-VERSION; the .deb lands in $(BUILD)/deb), then lintian.
deb:
	@scripts/deps.sh deb
	scripts/make-deb.sh $(BUILD)/deb

clean:
	rm -rf $(BUILD)/obj $(BUILD)/lib $(BUILD)/bin $(BUILD)/test
