# soft-RoCE tier (included by the top Makefile). See test/softroce/README.md.
#
# SOFTROCE_BINS: the test binaries the tier runs against rdma_rxe, built by `make test-build`.
# softroce-vm:   the VM (Debian's kernel + initramfs), cached under $(BUILD)/softroce and
#                rebuilt only when the resolved kernel package or the scripts change.
#                test/softroce/run-vm.sh makes it on demand, so `make test` does too.

SR_SRC := test/softroce
SR_DIR := $(BUILD)/softroce

# (a) the tier's own C tests (plain libibverbs programs, GoogleTest-like output)
SR_TEST_SRCS := $(wildcard $(SR_SRC)/*_test.c)
SOFTROCE_BINS := $(SR_TEST_SRCS:$(SR_SRC)/%.c=$(BUILD)/test/softroce/%)

$(BUILD)/test/softroce/%: $(SR_SRC)/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< -libverbs

# (b) the IB transport's GoogleTest suite, once test/ib has tests. The list of its
# sources is a prerequisite too, so that deleting a test file relinks the binary.
IB_SRCS := $(wildcard test/ib/*.cc)
ifneq ($(IB_SRCS),)
SOFTROCE_BINS += $(BUILD)/test/ib_tests
$(BUILD)/test/ib_tests.sources: softroce-phony
	@mkdir -p $(dir $@)
	@echo '$(IB_SRCS) $(TEST_COMMON)' | cmp -s - $@ || echo '$(IB_SRCS) $(TEST_COMMON)' >$@
IB_OBJS := $(IB_SRCS:test/%.cc=$(BUILD)/obj/test/%.o)
$(BUILD)/test/ib_tests: $(IB_OBJS) $(TEST_COMMON_OBJS) $(STATIC) $(BUILD)/test/ib_tests.sources
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $(IB_OBJS) $(TEST_COMMON_OBJS) \
	  -Wl,--whole-archive $(STATIC) -Wl,--no-whole-archive $(GTEST_LIBS) $(LDLIBS)
endif

# ---------------------------------------------------------------- the VM
.PHONY: softroce-vm softroce-clean softroce-kernel-id softroce-phony
softroce-phony:
softroce-vm: $(SR_DIR)/vmlinux $(SR_DIR)/initramfs.cpio

# Re-resolved on every use; the file changes only when linux-image-amd64 points elsewhere.
$(SR_DIR)/kernel.id: softroce-kernel-id
	@:
softroce-kernel-id:
	@$(SR_SRC)/prepare.sh kernel-id $(SR_DIR)/kernel.id

$(SR_DIR)/kernel/stamp: $(SR_DIR)/kernel.id $(SR_SRC)/prepare.sh
	@$(SR_SRC)/prepare.sh kernel $(SR_DIR)

$(SR_DIR)/vmlinux: $(SR_DIR)/kernel/stamp $(SR_SRC)/extract-vmlinux.sh
	@$(SR_SRC)/extract-vmlinux.sh $(SR_DIR)/kernel/boot/vmlinuz-$$(cat $(SR_DIR)/kernel/version) $@

$(SR_DIR)/initramfs.cpio: $(SR_DIR)/kernel/stamp $(SR_SRC)/init $(SR_SRC)/prepare.sh $(wildcard /bin/busybox)
	@$(SR_SRC)/prepare.sh initramfs $(SR_DIR)

softroce-clean:
	rm -rf $(SR_DIR) $(BUILD)/test/softroce
