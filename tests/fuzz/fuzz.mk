# libFuzzer targets (tests/fuzz/fuzz_*.c), built with clang into $(FB).
# A makefile of its own, so its rules and variables never meet the main
# Makefile's: run it as `make -f tests/fuzz/fuzz.mk <goal>` from the top.
#
#   fuzz-build   every target in $(FB)/bin
#   fuzz         each target for FUZZ_SECONDS (600) of new inputs, started
#                from its seed corpus; prints executions and findings
#   fuzz-check   each target over its corpus, then FUZZ_CHECK_SECONDS (10)
#                of new inputs; fails on any finding
#
# The project's sources are compiled again here with the fuzzer's coverage
# instrumentation and ASan+UBSan (the main build's objects have neither),
# into one archive, so each target pulls in only what it calls.

FB                 ?= build/fuzz
FUZZ_CC            ?= clang
FUZZ_SECONDS       ?= 600
FUZZ_CHECK_SECONDS ?= 10

FUZZ_PKGS       := grpc libprotobuf-c json-c libcurl yaml-0.1 libmicrohttpd libcrypto
FUZZ_PKG_CFLAGS := $(shell pkg-config --cflags $(FUZZ_PKGS))
FUZZ_PKG_LIBS   := $(shell pkg-config --libs $(FUZZ_PKGS)) -lpthread
FUZZ_SAN        := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS     := -O1 -g -std=gnu11 -D_GNU_SOURCE -fno-strict-aliasing $(FUZZ_SAN)
FUZZ_CPPFLAGS   := -I. -Icommon -Itests/lib -Ihack -I$(FB)/gen -DSIDECAR_VERSION='"fuzz"'
# Project code: the main build holds it to -Werror with gcc; clang's
# warnings are not a reason to stop fuzzing it.
FUZZ_PROJ_WARN  := -Wall -Wno-unused-parameter
FUZZ_WARN       := -Wall -Wextra -Wshadow -Wformat=2 -Werror

Q ?= @

# ---- generated protocol code (own copy: the build dirs of others are theirs) ----

FUZZ_GEN   := $(FB)/gen
FUZZ_GEN_C := $(FUZZ_GEN)/csi.pb-c.c $(FUZZ_GEN)/pluginregistration.pb-c.c $(FUZZ_GEN)/cosi.pb-c.c \
              $(patsubst %,$(FUZZ_GEN)/google/protobuf/%.pb-c.c,timestamp wrappers descriptor)
FUZZ_GEN_H := $(FUZZ_GEN_C:.c=.h)

$(FUZZ_GEN)/%.pb-c.c $(FUZZ_GEN)/%.pb-c.h: proto/%.proto
	@mkdir -p $(@D)
	$(Q)protoc-c -Iproto --c_out=$(FUZZ_GEN) $<

$(FUZZ_GEN)/google/protobuf/%.pb-c.c $(FUZZ_GEN)/google/protobuf/%.pb-c.h: /usr/include/google/protobuf/%.proto
	@mkdir -p $(@D)
	$(Q)protoc-c -I/usr/include --c_out=$(FUZZ_GEN) google/protobuf/$*.proto

# ---- the project's code, instrumented ------------------------------------------

FUZZ_SRC_DIRS := common/* provisioner resizer snapshotter attacher registrar cosi/controller cosi/sidecar hack/kube-lite hack/snapshot-controller-sim
FUZZ_ALL_SRCS := $(wildcard $(addsuffix /*.c,$(FUZZ_SRC_DIRS)))
FUZZ_MAINS    := $(shell grep -l '^int main' $(FUZZ_ALL_SRCS) 2>/dev/null)
FUZZ_SRCS     := $(filter-out $(FUZZ_MAINS),$(FUZZ_ALL_SRCS))
FUZZ_OBJS     := $(FUZZ_SRCS:%.c=$(FB)/obj/%.o) $(FUZZ_GEN_C:$(FUZZ_GEN)/%.c=$(FB)/obj/gen/%.o)
FUZZ_LIB      := $(FB)/lib/libfuzzproj.a

$(FB)/obj/gen/%.o: $(FUZZ_GEN)/%.c | $(FUZZ_GEN_H)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -w $(FUZZ_PKG_CFLAGS) -c $< -o $@

$(FB)/obj/%.o: %.c | $(FUZZ_GEN_H)
	@mkdir -p $(@D)
	@echo "  FUZZCC	$<"
	$(Q)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_PROJ_WARN) \
		$(FUZZ_PKG_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJS)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

# ---- targets -----------------------------------------------------------------------

FUZZ_TARGET_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_TARGETS     := $(notdir $(FUZZ_TARGET_SRCS:.c=))
FUZZ_BINS        := $(FUZZ_TARGETS:%=$(FB)/bin/%)

$(FB)/tobj/%.o: tests/fuzz/%.c tests/fuzz/fuzz.h | $(FUZZ_GEN_H)
	@mkdir -p $(@D)
	@echo "  FUZZCC	$<"
	$(Q)$(FUZZ_CC) $(FUZZ_CPPFLAGS) -DFUZZ_LIBFUZZER $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link \
		$(FUZZ_WARN) $(FUZZ_PKG_CFLAGS) -c $< -o $@

$(FB)/bin/%: $(FB)/tobj/%.o $(FUZZ_LIB)
	@mkdir -p $(@D)
	@echo "  FUZZLD	$@"
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer $^ $(FUZZ_PKG_LIBS) -o $@

.PHONY: fuzz-build fuzz fuzz-check
.SECONDARY:
.DEFAULT_GOAL := fuzz-build

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	tests/fuzz/run.sh fuzz $(FUZZ_SECONDS) $(FB) $(FUZZ_TARGETS)

fuzz-check: fuzz-build
	tests/fuzz/run.sh check $(FUZZ_CHECK_SECONDS) $(FB) $(FUZZ_TARGETS)

-include $(shell find $(FB)/obj -name '*.d' 2>/dev/null)
