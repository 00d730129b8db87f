# Builds everything out of tree under $(B): generated protocol code in
# $(B)/gen, one static library of common/ in $(B)/lib, binaries in $(B)/bin,
# tests in $(B)/tests. `make SAN=1 B=build/asan` is the sanitizer build that
# `make test` runs as its second pass.

B       ?= build
SAN     ?= 0
CC      ?= gcc
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)

PKGS     := grpc_unsecure libprotobuf-c json-c libcurl yaml-0.1 libmicrohttpd libcrypto
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
# gRPC is linked statically, in its build without TLS (the driver's and the
# kubelet's sockets are unix sockets), with abseil and its other helpers, and
# so are the small C libraries: one object instead of some fifty shared ones
# whose relocations each dirty pages of every process (idle provisioner:
# VmRSS 20.5 -> 16.7 MiB, private dirty 3.2 -> 2.5 MiB). libcurl,
# libmicrohttpd and OpenSSL stay shared (their own dependencies do not come
# as static archives).
STATIC_LIBS = $(filter-out -latomic -lrt,$(shell pkg-config --static --libs-only-l grpc_unsecure)) \
	-lupb -laddress_sorting -lcares -lprotobuf-c -ljson-c -lyaml
# The linker name of absl::SetMutexDeadlockDetectionMode in that abseil
# (its inline namespace names the build): csi_grpc_init turns the detector
# of Debian's debug-mode abseil off through it.
ABSL_DEADLOCK_SYM := $(shell nm -g --defined-only \
	$(shell pkg-config --variable=libdir absl_synchronization)/libabsl_synchronization.a 2>/dev/null | \
	awk '$$2 == "T" && $$3 ~ /SetMutexDeadlockDetectionMode/ {print $$3; exit}')
ifneq ($(ABSL_DEADLOCK_SYM),)
CPPFLAGS += -DCSI_ABSL_DEADLOCK_MODE_SYM='"$(ABSL_DEADLOCK_SYM)"'
endif
PKG_LIBS   = -Wl,-Bstatic $(STATIC_LIBS) -Wl,-Bdynamic \
	$(shell pkg-config --libs libcurl libmicrohttpd libcrypto zlib) -lstdc++ -lm -latomic -lrt -lpthread

WARN    := -Wall -Wextra -Wshadow -Wformat=2 -Werror
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -D_GNU_SOURCE $(WARN) -fno-strict-aliasing -MMD -MP
CPPFLAGS += -I. -Icommon -Itests/lib -Ihack -I$(B)/gen -DSIDECAR_VERSION='"$(VERSION)"'
LDFLAGS ?=

# V=1 shows the full commands.
V ?= 0
ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @echo "  $(1)	$(2)"
endif

ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
CFLAGS   += $(SANFLAGS)
LDFLAGS  += $(SANFLAGS)
endif

# ---- generated protocol code ------------------------------------------------

GEN        := $(B)/gen
PROTOS     := csi pluginregistration cosi
GPB        := timestamp wrappers descriptor
GEN_C      := $(PROTOS:%=$(GEN)/%.pb-c.c) $(GPB:%=$(GEN)/google/protobuf/%.pb-c.c)
GEN_H      := $(GEN_C:.c=.h)

$(GEN)/%.pb-c.c $(GEN)/%.pb-c.h: proto/%.proto
	@mkdir -p $(GEN)
	$(call say,PROTOC,$<)
	$(Q)protoc-c -Iproto --c_out=$(GEN) $<

$(GEN)/google/protobuf/%.pb-c.c $(GEN)/google/protobuf/%.pb-c.h: /usr/include/google/protobuf/%.proto
	@mkdir -p $(GEN)
	$(call say,PROTOC,google/protobuf/$*.proto)
	$(Q)protoc-c -I/usr/include --c_out=$(GEN) google/protobuf/$*.proto

# ---- library ----------------------------------------------------------------

LIB_SRCS := $(wildcard common/*/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(B)/obj/%.o) $(GEN_C:$(GEN)/%.c=$(B)/obj/gen/%.o)
LIB      := $(B)/lib/libcsisidecar.a

$(B)/obj/%.o: %.c | $(GEN_H)
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

# Generated code is not ours to fix: same flags, minus the warnings it trips.
$(B)/obj/gen/%.o: $(GEN)/%.c | $(GEN_H)
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-unused-parameter $(PKG_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# ---- binaries -----------------------------------------------------------------
# Each program folder builds a static library of its files without main()
# (so tests can link its pure parts) and a binary from the file with main().

APP_DIRS  := $(foreach d,provisioner resizer snapshotter attacher registrar sidecars livenessprobe cosi/controller cosi/sidecar hack/example-driver hack/example-cosi-driver hack/kube-lite hack/kubelet-sim hack/snapshot-controller-sim,$(if $(wildcard $(d)/*.c),$(d)))
bin_name   = $(if $(filter hack/example-driver,$(1)),example-csi-driver,$(if $(filter cosi/%,$(1)),objectstorage-$(notdir $(1)),$(if $(filter registrar,$(1)),csi-node-driver-registrar,$(if $(filter livenessprobe,$(1)),livenessprobe,$(if $(filter hack/%,$(1)),$(notdir $(1)),csi-$(notdir $(1)))))))
app_main   = $(shell grep -l '^int main' $(1)/*.c 2>/dev/null)
app_lib    = $(B)/lib/lib$(subst /,-,$(1)).a
# A folder gets a binary only once one of its files has main().
BINS      := $(foreach d,$(APP_DIRS),$(if $(call app_main,$(d)),$(B)/bin/$(call bin_name,$(d))))
APP_LIBS  := $(foreach d,$(APP_DIRS),$(call app_lib,$(d)))

define APP_RULE
$(call app_lib,$(1)): $(patsubst %.c,$(B)/obj/%.o,$(filter-out $(call app_main,$(1)),$(wildcard $(1)/*.c)))
	@mkdir -p $$(@D)
	$$(call say,AR,$$@)
	$$(Q)rm -f $$@ && ar rcs $$@ $$^

ifneq ($(call app_main,$(1)),)
$(B)/bin/$(call bin_name,$(1)): $(patsubst %.c,$(B)/obj/%.o,$(call app_main,$(1))) $(call app_lib,$(1)) $(LIB)
	@mkdir -p $$(@D)
	$$(call say,LD,$$@)
	$$(Q)$$(CC) $$(LDFLAGS) $$(filter-out $$(LIB),$$^) $$(LIB) $$(PKG_LIBS) -o $$@
endif
endef
$(foreach d,$(APP_DIRS),$(eval $(call APP_RULE,$(d))))
# csi-sidecars hosts the controller modules of the other folders.
$(B)/bin/csi-sidecars: $(foreach d,provisioner attacher resizer snapshotter,$(call app_lib,$(d)))

# ---- tests ------------------------------------------------------------------
# tests/<suite>/test_*.c: one binary each; other tests/<suite>/*.c are helper
# programs (test servers). tests/lib/ is linked into all of them.

SUITE_SRCS  := $(filter-out tests/lib/% tests/fuzz/%,$(wildcard tests/*/*.c))
TEST_SRCS   := $(foreach f,$(SUITE_SRCS),$(if $(filter test_%,$(notdir $(f))),$(f)))
HELPER_SRCS := $(filter-out $(TEST_SRCS),$(SUITE_SRCS))
TEST_BINS   := $(patsubst tests/%.c,$(B)/tests/%,$(TEST_SRCS))
HELPER_BINS := $(patsubst tests/%.c,$(B)/tests/%,$(HELPER_SRCS))
TESTLIB_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(wildcard tests/lib/*.c))

$(B)/tests/%: $(B)/obj/tests/%.o $(TESTLIB_OBJS) $(APP_LIBS) $(LIB)
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS) $< $(TESTLIB_OBJS) $(APP_LIBS) $(LIB) $(PKG_LIBS) -lcmocka -o $@

# ---- targets ----------------------------------------------------------------

# Keep object files of tests between runs (they are intermediate to make).
.SECONDARY:

.PHONY: all lib tests test check check-san lint format clean deps valgrind demo demo-down images fuzz fuzz-check
.DEFAULT_GOAL := all

all: $(LIB) $(BINS)
lib: $(LIB)
tests: all $(TEST_BINS) $(HELPER_BINS)

deps:
	hack/install-deps.sh

# Runs every suite of this build ($(B)); one summary line at the end.
check: tests
	tests/run.sh $(B)

check-san:
	$(MAKE) SAN=1 B=build/asan check

valgrind: tests
	tests/valgrind.sh $(B)

# The local world (kube-lite, example driver, the three sidecars, kubelet-sim)
# and a storage scenario played with kubectl; it keeps running until demo-down.
# CLUSTER=kubernetes: the same on the real control plane (hack/kubernetes/).
CLUSTER ?= kube-lite
demo: deps
	$(MAKE) -j$(JOBS) all
	DEMO_BUILD_DIR=$(B) CLUSTER=$(CLUSTER) hack/demo.sh up --no-build

demo-down:
	hack/demo.sh down

# One FROM-scratch image per sidecar and the example driver (podman, vfs).
images: all
	hack/images/build.sh $(B)

# libFuzzer targets (tests/fuzz/README.md): `make fuzz` runs each for
# FUZZ_SECONDS; `make fuzz-check` runs each over its corpus plus 10 s.
FUZZ_SECONDS ?= 600
fuzz fuzz-check: deps
	$(MAKE) -f tests/fuzz/fuzz.mk -j$(JOBS) FUZZ_SECONDS=$(FUZZ_SECONDS) $@

# Everything CI checks, in one run with one summary line at the end: every
# suite plain and under ASan+UBSan, the suites that say so once more on the
# real control plane (built first into its cache: about 3 minutes the first
# time, nothing after), the client test under valgrind, lint.
test: deps
	hack/kubernetes/build.sh >/dev/null
	$(MAKE) -j$(JOBS) tests
	$(MAKE) -j$(JOBS) SAN=1 B=build/asan tests
	tests/run.sh --all $(B) build/asan

SRC_DIRS     := $(wildcard common tests hack provisioner resizer snapshotter attacher registrar livenessprobe cosi sidecars)
FORMAT_FILES  = $(shell find $(SRC_DIRS) -name '*.[ch]' -not -path '*/build/*' | sort)
LINT_SRCS     = $(filter %.c,$(FORMAT_FILES))

# clang-format check, cppcheck and clang-tidy (.clang-tidy: bug-finding checks;
# hack/lint-tidy.sh skips a file whose preprocessed input was clean before).
lint: $(GEN_H)
	$(Q)clang-format --dry-run -Werror $(FORMAT_FILES)
	$(Q)cppcheck -q --error-exitcode=1 --enable=warning,performance,portability --inline-suppr \
		--suppress=missingIncludeSystem -D__GNUC__ -I. -Icommon -Itests/lib -Ihack $(LINT_SRCS)
	@mkdir -p $(B)
	$(Q)hack/lint-tidy.sh hack/lint-tidy.cache $(LINT_SRCS) -- -I. -Icommon -Itests/lib -Ihack \
		-I$(B)/gen -std=gnu11 -D_GNU_SOURCE $(PKG_CFLAGS) | tee $(B)/lint.log
	@test ! -s $(B)/lint.log
	@echo "lint: clean"

format:
	clang-format -i $(FORMAT_FILES)

clean:
	rm -rf build

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
