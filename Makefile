# m3 — reference interpreter and conformance kit for MiniMax-M3.
#
#   make            build bin/m3-ref and bin/m3-conform
#   make run        generate text with the embedded default model (no download)
#   make check      the quick tier (well under a minute once built): build,
#                   unit tests (cmocka), CLI tests, the committed vectors
#   make test       every test: the above, vector regeneration, big vectors,
#                   upstream agreement, demo, Eagle3, fuzz smoke, sanitizers,
#                   valgrind, GPU compile check and emulation
#   make deps       check the Debian packages the build and tests need
#   make bench      benchmarks (numbers printed, ratios against an in-run baseline)
#   make vectors    regenerate the published vectors with tools/ (numpy)
#   make gpu        build bin/m3-gpu with hipcc or nvcc, whichever is present
#   make install    install under PREFIX (/usr/local), staged under DESTDIR
#
# Missing Debian packages are installed with apt-get when run as root;
# otherwise the exact apt-get line is printed and make stops (nothing is
# installed for a non-root user).

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -ffp-contract=off -Wall -Wextra -Werror -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 -Iref -I/usr/include/cjson
LDLIBS  += -lcjson -lpng -ljpeg -lm
# the numeric kernels: vectorised for the build machine. Exact all the same:
# no -ffast-math, and -ffp-contract=off (above) forbids fused multiply-adds, so
# every product and sum is the one the source writes (docs/performance.md)
KERNEL_CFLAGS ?= -O3 $(shell $(CC) -march=native -E -x c /dev/null >/dev/null 2>&1 && echo -march=native)
KERNEL_SRC    := linear attention msa
PYTHON  ?= /usr/bin/python3
BUILD   ?= build


REF_SRC   := $(sort $(wildcard ref/*.c))
REF_OBJ   := $(patsubst ref/%.c,$(BUILD)/ref/%.o,$(REF_SRC))
CONF_SRC  := $(sort $(wildcard conformance/*.c))
CONF_OBJ  := $(patsubst conformance/%.c,$(BUILD)/conformance/%.o,$(CONF_SRC))
TEST_SRC  := $(sort $(wildcard tests/test_*.c))
TEST_BIN  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
LIB       := $(BUILD)/libm3.a

.PHONY: all deps run check test unit-test cli-test bench vectors vectors-big vectors-check vectors-real synth-test synth-sums conform-real port-bugs-check coverage coverage-check gpu clean
.DEFAULT_GOAL := all

all: deps bin/m3-ref $(if $(CONF_SRC),bin/m3-conform)

# ---- dependencies --------------------------------------------------------
$(BUILD)/.deps-ok:
	@missing=""; \
	test -f /usr/include/cjson/cJSON.h || missing="$$missing libcjson-dev"; \
	test -f /usr/include/cmocka.h || missing="$$missing libcmocka-dev"; \
	test -f /usr/include/png.h || missing="$$missing libpng-dev"; \
	test -f /usr/include/jpeglib.h || missing="$$missing libjpeg62-turbo-dev"; \
	$(PYTHON) -c 'import numpy' 2>/dev/null || missing="$$missing python3-numpy"; \
	$(PYTHON) -c 'import PIL' 2>/dev/null || missing="$$missing python3-pil"; \
	command -v tmux >/dev/null || missing="$$missing tmux"; \
	command -v pkg-config >/dev/null || missing="$$missing pkgconf"; \
	$(PYTHON) -c 'import jinja2' 2>/dev/null || missing="$$missing python3-jinja2"; \
	command -v valgrind >/dev/null || missing="$$missing valgrind"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "m3: installing Debian packages:$$missing"; \
	    (apt-get install -y --no-install-recommends $$missing || \
	     (apt-get update && apt-get install -y --no-install-recommends $$missing)) || exit 1; \
	  else \
	    echo "m3: missing Debian packages. Run:"; \
	    echo "  sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi
	@mkdir -p $(@D) && touch $@

deps: $(BUILD)/.deps-ok

# ---- library and programs ------------------------------------------------
$(BUILD)/ref/%.o: ref/%.c $(wildcard ref/*.h) | $(BUILD)/.deps-ok
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(patsubst %,$(BUILD)/ref/%.o,$(KERNEL_SRC)): CFLAGS += $(KERNEL_CFLAGS)

$(LIB): $(REF_OBJ)
	@rm -f $@
	ar rcs $@ $^

bin/m3-ref: ref/cli/m3-ref.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/conformance/%.o: conformance/%.c $(wildcard conformance/*.h ref/*.h) | $(BUILD)/.deps-ok
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iconformance -c -o $@ $<

bin/m3-conform: $(CONF_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $(CONF_OBJ) $(LIB) $(LDLIBS)

# ---- tests -----------------------------------------------------------------
$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(LIB) $(LDLIBS) -lcmocka

unit-test: $(TEST_BIN)
	@set -e; for t in $(TEST_BIN); do echo "== $$t"; $$t; done

# CLI end to end on tiny fixtures (tests/cli_helper.c writes them)
cli-test: bin/m3-ref $(BUILD)/tests/cli_helper
	sh tests/cli_test.sh bin/m3-ref $(BUILD)/tests/cli_helper

# quick tier: the committed vectors (layer by layer too), not regenerated; no
# big vectors, upstream agreement, fuzzing, sanitizers or GPU checks
check: all unit-test cli-test coverage-check
	bin/m3-conform run vectors/manifest.json --teacher-forced --quiet
	@echo "m3: quick checks passed (make test runs everything)"

test: all unit-test cli-test synth-test progress-test install-test coverage-check vectors-check conform-test port-bugs-check hf-check demo-check eagle-check tour-check fuzz-smoke asan-test valgrind-test gpu-check gpu-emu-test gpu-test-emu
	@echo "m3: all tests passed"

# progress and summary lines in a real terminal (a tmux pane), in a log, under
# --quiet and with stdout through head (tests/progress_test.sh)
.PHONY: progress-test
progress-test: bin/m3-ref deps
	sh tests/progress_test.sh bin/m3-ref models/demo

# upstream agreement: bin/m3-ref against the committed HF transformers outputs
# (vectors/hf, written on a GPU machine by tools/hf_crosscheck.py); numpy only
.PHONY: hf-check
hf-check: bin/m3-ref
	$(PYTHON) tools/hf_compare.py --impl ref

# demo model (models/demo, trained by tools/train_demo.py): greedy ids and fp32
# logits of bin/m3-ref against HF transformers' recorded outputs; numpy only
.PHONY: demo-check
demo-check: bin/m3-ref
	$(PYTHON) tools/check_demo.py --bin bin/m3-ref --model models/demo

# Eagle3 speculative decoding on the demo model with models/demo-drafter
# (trained by tools/train_demo_drafter.py): output identical to plain greedy
# for 4 prompts x K in {1,3,5}, and a minimum acceptance at K = 3; stdlib only
.PHONY: eagle-check
eagle-check: bin/m3-ref
	$(PYTHON) tools/check_eagle3.py --bin bin/m3-ref --model models/demo --draft models/demo-drafter

# ---- install -----------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=STAGE]: the programs into bin/
# (m3-gpu only when it was built), libm3.a into lib/ and its headers into
# include/m3/, lib/pkgconfig/m3.pc (cflags and the static link line), man
# pages written from the programs' --help (tools/mkman.sh) into
# share/man/man1/, and spec/tolerances.json as share/m3/tolerances.json,
# where an installed m3-conform looks (relative to its own directory, so the
# tree may be staged or moved). make uninstall removes the same files.
PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL ?= install
M3_VERSION ?= 0+g$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
MAN_PAGES := $(BUILD)/man/m3-ref.1 $(BUILD)/man/m3-conform.1
I_BIN := $(DESTDIR)$(PREFIX)/bin
I_LIB := $(DESTDIR)$(PREFIX)/lib
I_INC := $(DESTDIR)$(PREFIX)/include/m3
I_MAN := $(DESTDIR)$(PREFIX)/share/man/man1
I_DAT := $(DESTDIR)$(PREFIX)/share/m3
.PHONY: man install uninstall install-test

$(BUILD)/man/m3-ref.1: bin/m3-ref tools/mkman.sh
	@mkdir -p $(@D)
	sh tools/mkman.sh m3-ref "the m3 reference interpreter for MiniMax-M3 text models" \
	  bin/m3-ref forward generate inspect >$@.tmp && mv $@.tmp $@
$(BUILD)/man/m3-conform.1: bin/m3-conform tools/mkman.sh
	@mkdir -p $(@D)
	sh tools/mkman.sh m3-conform "the MiniMax-M3 conformance kit: judge a port's activation dumps" \
	  bin/m3-conform >$@.tmp && mv $@.tmp $@
man: $(MAN_PAGES)

install: all man
	$(INSTALL) -d $(I_BIN) $(I_LIB)/pkgconfig $(I_INC) $(I_MAN) $(I_DAT)
	$(INSTALL) -m 755 bin/m3-ref bin/m3-conform $(I_BIN)/
	$(INSTALL) -m 644 $(LIB) $(I_LIB)/
	$(INSTALL) -m 644 $(wildcard ref/*.h) $(I_INC)/
	$(INSTALL) -m 644 $(MAN_PAGES) $(I_MAN)/
	$(INSTALL) -m 644 spec/tolerances.json $(I_DAT)/
	printf 'prefix=%s\nexec_prefix=$${prefix}\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: m3\nDescription: MiniMax-M3 reference interpreter library\nVersion: %s\nCflags: -I$${includedir}/m3\nLibs: -L$${libdir} -lm3 -lcjson -lpng -ljpeg -lm\n' \
	  '$(PREFIX)' '$(M3_VERSION)' >$(I_LIB)/pkgconfig/m3.pc
	@if [ -x bin/m3-gpu ]; then \
	  sh tools/mkman.sh m3-gpu "the M3 text forward on the GPU, with the CLI of m3-ref" bin/m3-gpu \
	    >$(BUILD)/man/m3-gpu.1 && \
	  $(INSTALL) -m 755 bin/m3-gpu $(I_BIN)/ && $(INSTALL) -m 644 $(BUILD)/man/m3-gpu.1 $(I_MAN)/ && \
	  echo "install: bin/m3-gpu and its man page installed"; \
	else echo "install: bin/m3-gpu was not built (make gpu): not installed"; fi

uninstall:
	rm -f $(I_BIN)/m3-ref $(I_BIN)/m3-conform $(I_BIN)/m3-gpu $(I_LIB)/libm3.a \
	  $(I_LIB)/pkgconfig/m3.pc $(addprefix $(I_INC)/,$(notdir $(wildcard ref/*.h))) \
	  $(I_MAN)/m3-ref.1 $(I_MAN)/m3-conform.1 $(I_MAN)/m3-gpu.1 $(I_DAT)/tolerances.json
	-rmdir $(I_INC) $(I_DAT) 2>/dev/null

# install into a temporary prefix and a DESTDIR stage; the installed programs,
# library and pkg-config file used from another directory (tests/install_test.sh)
install-test: all man
	sh tests/install_test.sh "$(MAKE)" $(CC)

# ---- docs/tour.md pictures ------------------------------------------------------
# tour-plots: one forward of the demo model over docs/img/tour-prompt.txt,
# dumped, then m3-conform plot draws docs/img/msa_selection.png and
# moe_routing.png; tour-check redraws them in a temp dir and compares bytes.
TOUR_TITLE := models/demo, Genesis 1:1-10
.PHONY: tour-plots tour-check
tour-plots: bin/m3-ref bin/m3-conform
	@mkdir -p $(BUILD)/tour
	bin/m3-ref forward --model models/demo --prompt "$$(cat docs/img/tour-prompt.txt)" --dump $(BUILD)/tour/demo.safetensors
	bin/m3-conform plot --dump $(BUILD)/tour/demo.safetensors --out docs/img --title "$(TOUR_TITLE)"

tour-check: bin/m3-ref bin/m3-conform
	@set -e; tmp=$$(mktemp -d /tmp/m3_tour.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	bin/m3-ref forward --model models/demo --prompt "$$(cat docs/img/tour-prompt.txt)" --dump "$$tmp/demo.safetensors" >/dev/null; \
	bin/m3-conform plot --dump "$$tmp/demo.safetensors" --out "$$tmp" --title "$(TOUR_TITLE)" >/dev/null; \
	for f in msa_selection.png moe_routing.png; do cmp "$$tmp/$$f" docs/img/$$f || \
	  { echo "tour-check: docs/img/$$f is not what make tour-plots draws now"; exit 1; }; done; \
	echo "tour-check: docs/img/ pictures up to date"; \
	bin/m3-ref forward --model vectors/model/layer_dense_fp32 --tokens 1,2,3 --dump "$$tmp/dense.safetensors" >/dev/null; \
	for bad in "--dump $$tmp/demo.safetensors" "--dump $$tmp/demo.safetensors --out $$tmp/none" \
	           "--dump $$tmp/missing.safetensors --out $$tmp" "--dump $$tmp/dense.safetensors --out $$tmp" \
	           "--dump fuzz/regressions/fuzz_plot/expert_id_int_max.safetensors --out $$tmp"; do \
	  rc=0; bin/m3-conform plot $$bad >/dev/null 2>"$$tmp/err" || rc=$$?; \
	  [ $$rc = 2 ] && [ -s "$$tmp/err" ] || { echo "tour-check: m3-conform plot $$bad: exit $$rc, want 2 and a message"; exit 1; }; done; \
	echo "tour-check: m3-conform plot rejects a missing --out, a missing dir, a missing dump, a dump without MSA or MoE layers and an expert id past 65535"

# ---- run, bench, vectors ---------------------------------------------------
run: all
	bin/m3-ref generate --model models/demo --prompt "And God said" --max-new-tokens 48 --greedy

$(BUILD)/bench/bench: bench/bench.c tests/fixture.h $(wildcard ref/*.h) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(LIB) $(LDLIBS)

# the real-shape forward: a 2-layer checkpoint at the released shapes (1 dense +
# 1 MSA/MoE layer, vocab 16,384; about 16 GB) written by m3-conform synth into
# $(BENCH_REAL) when missing; synth checks the disk first and refuses when it has
# no room, and the bench then says the case is absent
BENCH_REAL ?= $(BUILD)/real-2l
bench: all $(BUILD)/bench/bench
	@test -f $(BENCH_REAL)/model.safetensors.index.json || bin/m3-conform synth --layers 2 --dense-layers 1 \
	  --seed 1 --vocab 16384 --out $(BENCH_REAL) || echo "m3: no real-shape checkpoint"
	$(BUILD)/bench/bench --real $(BENCH_REAL)

vectors: deps
	$(PYTHON) tools/make_tiny_model.py --out models/tiny
	$(PYTHON) tools/gen_vectors.py --out vectors

# the big cases (8,192-token block selection, 2,200-token bf16 model) are not
# committed: generated here on demand and run by conform-test
vectors-big: deps
	$(PYTHON) tools/gen_vectors.py --out $(BUILD)/vectors-big --big-only

# synthetic checkpoints at the released shapes (spec/synth.md, m3-conform synth):
# refusals, the numpy re-implementation (tools/synth_check.py) on a tiny checkpoint,
# the published sums of the tiny and a 1.2 GB released-shape checkpoint
# (vectors/real/checkpoints.sha256), and the real-shape suite's pipeline on tiny shapes
synth-test: bin/m3-conform bin/m3-ref
	sh tests/synth_test.sh bin/m3-conform bin/m3-ref $(PYTHON) $(BUILD)

# the real-shape suite (vectors/real/manifest.json), generated on demand, never
# committed: the 16.4 GB checkpoint (its sha256 checked against
# vectors/real/checkpoints.sha256), every case, and its golden computed by the
# reference, under $(BUILD)/vectors-real; prints the sha256 of every golden and
# compares them with vectors/real/goldens.sha256 when that file exists.
# conform-real then runs the reference on the suite (chunked variants included).
vectors-real: bin/m3-conform
	$(PYTHON) tools/real_suite.py --out $(BUILD)/vectors-real

conform-real: vectors-real
	bin/m3-conform run $(BUILD)/vectors-real/manifest.json

# the documented synthetic checkpoint of the suite against its published sums (no goldens)
synth-sums: bin/m3-conform
	$(PYTHON) tools/real_suite.py --out $(BUILD)/vectors-real --no-golden

# regenerate every non-big vector (and models/tiny) in a temp dir, compare bytes;
# the chat vectors too, re-rendered with jinja2 when CHAT_TEMPLATE names the
# published M3 template (docs/tokenizer.md: it is not committed)
CHAT_TEMPLATE ?=
vectors-check: deps
	$(PYTHON) tools/gen_vectors.py --check vectors
	$(PYTHON) tools/chat_vectors.py --check vectors/chat $(if $(CHAT_TEMPLATE),--template $(CHAT_TEMPLATE))

# spec clause coverage: docs/coverage.md; coverage-check fails on ids spec/ does not define
coverage:
	$(PYTHON) tools/coverage.py

coverage-check:
	$(PYTHON) tools/coverage.py --check

clean:
	rm -rf $(BUILD) bin

# ---- hardening (fuzz/, docs/fuzzing.md): fuzz smoke, ASan+UBSan, valgrind --
# fuzz-smoke: every fuzz/fuzz_*.c target, built with $(CC) + fuzz/driver.c, runs
# over fuzz/corpus/<t> and fuzz/regressions/<t>; with clang, each libFuzzer build
# (build-fuzz/) also fuzzes for FUZZ_SECONDS from the corpus (new inputs go to a
# temporary dir, never into the committed corpus).
FUZZ_SRC     := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_NAMES   := $(patsubst fuzz/%.c,%,$(FUZZ_SRC))
FUZZ_BIN     := $(patsubst %,$(BUILD)/fuzz/%,$(FUZZ_NAMES))
CONF_LIBOBJ   = $(filter-out %/conformance/main.o,$(CONF_OBJ))
FUZZ_SECONDS ?= 2
CLANG        ?= $(shell command -v clang 2>/dev/null)
SAN_FLAGS    := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
export ASAN_OPTIONS  ?= halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1

.PHONY: fuzz-build fuzz-smoke fuzz-libfuzzer asan-test valgrind-test

$(BUILD)/fuzz/%: fuzz/%.c fuzz/driver.c fuzz/common.c fuzz/common.h $(wildcard ref/*.h conformance/*.h) $(CONF_LIBOBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iconformance -Ifuzz -o $@ $< fuzz/driver.c fuzz/common.c $(CONF_LIBOBJ) $(LIB) $(LDLIBS)

fuzz-build: $(FUZZ_BIN)

fuzz-smoke: $(FUZZ_BIN)
	@set -e; for t in $(FUZZ_NAMES); do \
	  d="fuzz/corpus/$$t"; r="fuzz/regressions/$$t"; set --; \
	  [ -d "$$d" ] && set -- "$$@" "$$d"; [ -d "$$r" ] && set -- "$$@" "$$r"; \
	  [ $$# -gt 0 ] || { echo "fuzz-smoke: no corpus for $$t"; exit 1; }; \
	  $(BUILD)/fuzz/$$t "$$@"; done
	@if [ -n "$(CLANG)" ] && [ "$(FUZZ_SECONDS)" != 0 ]; then $(MAKE) --no-print-directory fuzz-libfuzzer; \
	 else echo "fuzz-smoke: no clang or FUZZ_SECONDS=0; libFuzzer runs skipped"; fi

# libFuzzer builds (clang -fsanitize=fuzzer,address,undefined) and a short run each
fuzz-libfuzzer:
	@CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" \
	  $(MAKE) --no-print-directory BUILD=build-fuzz CC="$(CLANG)" build-fuzz/libm3.a \
	  $(patsubst $(BUILD)/%,build-fuzz/%,$(CONF_LIBOBJ)) >/dev/null
	@mkdir -p build-fuzz/fuzz
	@set -e; for t in $(FUZZ_NAMES); do \
	  $(CLANG) -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    -std=c11 -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 -Wall -Wextra -Werror \
	    -Iref -Iconformance -Ifuzz -I/usr/include/cjson -o build-fuzz/fuzz/$$t fuzz/$$t.c fuzz/common.c \
	    $(patsubst $(BUILD)/%,build-fuzz/%,$(CONF_LIBOBJ)) build-fuzz/libm3.a $(LDLIBS); \
	done
	@set -e; tmp=$$(mktemp -d /tmp/m3_fuzz_smoke.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	for t in $(FUZZ_NAMES); do \
	  mkdir -p "$$tmp/$$t"; set -- "$$tmp/$$t" fuzz/corpus/$$t; \
	  [ -d fuzz/regressions/$$t ] && set -- "$$@" fuzz/regressions/$$t; \
	  build-fuzz/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -max_len=65536 \
	    -artifact_prefix="$$tmp/" "$$@" >"$$tmp/$$t.log" 2>&1 || \
	    { tail -40 "$$tmp/$$t.log"; mkdir -p build-fuzz/artifacts; \
	      cp "$$tmp"/crash-* "$$tmp"/leak-* "$$tmp"/oom-* "$$tmp"/timeout-* build-fuzz/artifacts/ 2>/dev/null; \
	      echo "fuzz-smoke: $$t FAILED (inputs copied to build-fuzz/artifacts/)"; exit 1; }; \
	  echo "libfuzzer $$t: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$$tmp/$$t.log")"; \
	done

# The unit tests and the CLI tests under AddressSanitizer + UBSan (build-asan/);
# any report is fatal (ASAN_OPTIONS / UBSAN_OPTIONS above).
# Also bin/m3-conform under the same sanitizers: a short suite run (a text and a
# vision model case, teacher-forced too) and the hostile-input tests of
# tests/conform_cli.sh.
asan-test:
	CFLAGS="$(SAN_FLAGS)" $(MAKE) --no-print-directory BUILD=build-asan \
	  $(patsubst $(BUILD)/%,build-asan/%,$(TEST_BIN)) build-asan/tests/cli_helper \
	  $(patsubst $(BUILD)/%,build-asan/%,$(CONF_OBJ))
	@mkdir -p build-asan/bin
	$(CC) $(SAN_FLAGS) $(filter-out -O2,$(CFLAGS)) -o build-asan/bin/m3-ref ref/cli/m3-ref.c build-asan/libm3.a $(LDLIBS)
	$(CC) $(SAN_FLAGS) $(filter-out -O2,$(CFLAGS)) -o build-asan/bin/m3-conform \
	  $(patsubst $(BUILD)/%,build-asan/%,$(CONF_OBJ)) build-asan/libm3.a $(LDLIBS)
	@set -e; for t in $(patsubst $(BUILD)/%,build-asan/%,$(TEST_BIN)); do echo "== $$t (asan)"; $$t; done
	sh tests/cli_test.sh build-asan/bin/m3-ref build-asan/tests/cli_helper
	build-asan/bin/m3-conform run vectors/model/tiny_fp32 vectors/model/vision_tiny_fp32 --teacher-forced --quiet
	CONFORM_CLI_ASAN=1 sh tests/conform_cli.sh build-asan/bin/m3-conform build-asan/bin/m3-ref $(PYTHON)

# The CLI under valgrind on the embedded model: forward, generate, inspect.
# Built in build-vg/ with the kernels for the baseline ISA (valgrind does not
# decode AVX-512, which -march=native may choose); the same source and bits.
VALGRIND := valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
valgrind-test:
	@command -v valgrind >/dev/null || { echo "valgrind-test: valgrind not installed (apt-get install valgrind)"; exit 1; }
	$(MAKE) --no-print-directory BUILD=build-vg KERNEL_CFLAGS=-O3 build-vg/libm3.a
	@mkdir -p build-vg/bin
	$(CC) $(CFLAGS) -o build-vg/bin/m3-ref ref/cli/m3-ref.c build-vg/libm3.a $(LDLIBS)
	$(VALGRIND) build-vg/bin/m3-ref forward --model models/tiny --tokens 1,2,3,4 >/dev/null
	$(VALGRIND) build-vg/bin/m3-ref generate --model models/tiny --tokens 1,2,3 --max-new-tokens 4 --greedy >/dev/null
	$(VALGRIND) build-vg/bin/m3-ref inspect --model models/tiny >/dev/null
	@echo "valgrind-test: clean"

# ---- conformance kit (conformance/, docs/validating-a-port.md) ---------------
.PHONY: conform-test

# test_conform links the kit's objects (all but main.o) as well as libm3.a
$(BUILD)/tests/test_conform $(BUILD)/tests/test_conform_tie $(BUILD)/tests/test_conform_greedy $(BUILD)/tests/test_chat_check: $(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h conformance/*.h ref/*.h) $(CONF_LIBOBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -Iconformance -o $@ $< $(CONF_LIBOBJ) $(LIB) $(LDLIBS) -lcmocka

# The reference passes every committed vector (also teacher-forced, layer by
# layer), every mutant fails at its declared first divergence, and the
# faithful bf16 dump passes the bf16 profile; tests/conform_port.sh: partial
# dumps, row subsets (a 16,384-token case generated into build/vectors-long,
# its golden computed by the reference), checkpoint teacher forcing in slices.
conform-test: bin/m3-conform bin/m3-ref vectors-big $(BUILD)/tests/cli_helper
	bin/m3-conform run vectors/manifest.json --teacher-forced --quiet
	bin/m3-conform run $(BUILD)/vectors-big/manifest.json --teacher-forced --quiet
	sh tests/conform_settle.sh bin/m3-conform $(BUILD)/tests/cli_helper $(PYTHON)
	sh tests/conform_cli.sh bin/m3-conform bin/m3-ref $(PYTHON)
	sh tests/chat_check.sh bin/m3-conform
	sh tests/conform_port.sh bin/m3-conform bin/m3-ref $(BUILD)/tests/cli_helper $(PYTHON) $(BUILD)/vectors-long

# the kit's JSON results on every vector and mutant with BEFORE (an older
# bin/m3-conform) and with this one, and their difference (tools/verdicts.py):
# fails when a result or an exit status changed
BEFORE ?=
.PHONY: verdicts-diff
verdicts-diff: bin/m3-conform
	@test -n "$(BEFORE)" || { echo "verdicts-diff: name the older kit: make verdicts-diff BEFORE=PATH/m3-conform"; exit 2; }
	$(PYTHON) tools/verdicts.py collect --conform $(BEFORE) --out $(BUILD)/verdicts/before
	$(PYTHON) tools/verdicts.py collect --conform bin/m3-conform --out $(BUILD)/verdicts/after
	$(PYTHON) tools/verdicts.py diff $(BUILD)/verdicts/before $(BUILD)/verdicts/after

# docs/port-bugs.md: its "flagged first" column is the kit's verdict on each
# published port-bug mutant (tools/port_bugs.py runs m3-conform check on each)
port-bugs-check: bin/m3-conform
	$(PYTHON) tools/port_bugs.py --check docs/port-bugs.md

# ---- GPU path (gpu/) --------------------------------------------------------
# make gpu        bin/m3-gpu with nvcc (CUDA, cuBLAS; gpu/hip_compat.h maps HIP)
#                 when nvcc is found, else hipcc (ROCm, hand-written GEMM)
# make gpu-check  compile every gpu/ source, no GPU needed: sm_90 with nvcc and
#                 gfx90a/gfx940 with hipcc (Debian's clang 14 has no gfx942);
#                 says plainly which compiler was absent and so not checked
# make bench-gpu  gpu/bench.cu on the device (needs a GPU), clocks first
# make gpu-test   gpu/tests/test_ops.cu on the device: every kernel launcher
#                 against its ref/ function, guarded buffers (needs a GPU)
# make gpu-test-emu  the same cases built against the CPU emulation (no GPU;
#                 part of make test: the portable kernel paths)
NVCC  ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
HIPCC ?= $(shell command -v hipcc 2>/dev/null)
GPU_BUILD   := gpu/build
GPU_KSRC    := $(sort $(wildcard gpu/kernels/*.cu))
GPU_HDR     := gpu/hip_compat.h $(wildcard gpu/kernels/*.h gpu/kernels/*.cuh)
GPU_HOST    := m3-gpu forward_run generate_run forward batch_context weight_upload weight_stream vision_host drafter
GPU_ALLSRC  := $(GPU_KSRC) $(patsubst %,gpu/%.cu,$(GPU_HOST)) gpu/bench.cu gpu/tests/test_ops.cu
HIP_ARCHS   ?= gfx90a gfx940
# --fmad=false / -ffp-contract=off: no fused multiply-add, as the reference (-ffp-contract=off).
# nvcc: sm_90a code (the warpgroup kernels use wgmma and TMA) and compute_90 PTX,
# which later GPUs compile at load time (without those kernels).
NVCC_FLAGS  := -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 --fmad=false -DM3_HAVE_BLAS \
               -Xcompiler -Wall,-Wextra,-Werror -Igpu -Iref -I/usr/include/cjson
HIPCC_FLAGS := -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -Werror -x hip \
               $(addprefix --offload-arch=,$(HIP_ARCHS)) -Igpu -Iref -I/usr/include/cjson

# One toolchain per build: nv (nvcc) when present, else hip (hipcc). Objects
# go to $(GPU_BUILD)/<toolchain>/, kernels and host files by one pattern each
# (gpu/ and gpu/kernels/ hold no two .cu files of one name).
ifneq ($(NVCC),)
GPU_TC   := nv
GPU_CXX  := $(NVCC) $(NVCC_FLAGS)
GPU_LINK := $(NVCC) -arch=sm_90
GPU_LIBS := -lcublas -lcublasLt -lpthread
else ifneq ($(HIPCC),)
GPU_TC   := hip
GPU_CXX  := $(HIPCC) $(HIPCC_FLAGS)
GPU_LINK := $(HIPCC) $(addprefix --offload-arch=,$(HIP_ARCHS))
GPU_LIBS := -lpthread
endif
GPU_KOBJ    := $(patsubst gpu/kernels/%.cu,$(GPU_BUILD)/$(GPU_TC)/%.o,$(GPU_KSRC))
GPU_HOSTOBJ := $(patsubst %,$(GPU_BUILD)/$(GPU_TC)/%.o,$(GPU_HOST))

.PHONY: gpu gpu-check bench-gpu gpu-test gpu-test-emu

ifneq ($(GPU_TC),)
$(GPU_BUILD)/$(GPU_TC)/%.o: gpu/kernels/%.cu $(GPU_HDR)
	@mkdir -p $(@D)
	$(GPU_CXX) -c -o $@ $<
$(GPU_BUILD)/$(GPU_TC)/%.o: gpu/%.cu $(wildcard gpu/*.h) $(GPU_HDR) $(wildcard ref/*.h)
	@mkdir -p $(@D)
	$(GPU_CXX) -c -o $@ $<
gpu: $(GPU_KOBJ) $(GPU_HOSTOBJ) $(LIB)
	@mkdir -p bin
	$(GPU_LINK) -o bin/m3-gpu $(GPU_HOSTOBJ) $(GPU_KOBJ) $(LIB) $(GPU_LIBS) $(LDLIBS)
$(GPU_BUILD)/bench-gpu: $(GPU_KOBJ) $(GPU_BUILD)/$(GPU_TC)/bench.o
	$(GPU_LINK) -o $@ $^ $(GPU_LIBS) -lm
$(GPU_BUILD)/test-ops: $(GPU_KOBJ) $(GPU_BUILD)/$(GPU_TC)/tests/test_ops.o $(GPU_BUILD)/$(GPU_TC)/weight_stream.o $(LIB)
	$(GPU_LINK) -o $@ $(GPU_KOBJ) $(GPU_BUILD)/$(GPU_TC)/tests/test_ops.o $(GPU_BUILD)/$(GPU_TC)/weight_stream.o $(LIB) $(GPU_LIBS) $(LDLIBS)
else
gpu $(GPU_BUILD)/bench-gpu $(GPU_BUILD)/test-ops:
	@echo "make gpu: neither nvcc nor hipcc found; install the CUDA toolkit or 'apt-get install hipcc'"; exit 1
endif

# Compile only (objects under gpu/build/check/); links nothing, needs no GPU.
gpu-check:
	@set -e; ok=0; \
	if [ -n "$(NVCC)" ]; then mkdir -p $(GPU_BUILD)/check/nv; \
	  for f in $(GPU_ALLSRC); do $(NVCC) $(NVCC_FLAGS) -c -o $(GPU_BUILD)/check/nv/$$(basename $$f .cu).o $$f; done; \
	  echo "gpu-check: nvcc sm_90a + compute_90: $(words $(GPU_ALLSRC)) files compiled"; ok=1; \
	else echo "gpu-check: SKIPPED the NVIDIA build: nvcc not found (not checked)"; fi; \
	if [ -n "$(HIPCC)" ]; then mkdir -p $(GPU_BUILD)/check/hip; \
	  for f in $(GPU_ALLSRC); do $(HIPCC) $(HIPCC_FLAGS) -c -o $(GPU_BUILD)/check/hip/$$(basename $$f .cu).o $$f \
	    2> $(GPU_BUILD)/check/hip/log || { cat $(GPU_BUILD)/check/hip/log; exit 1; }; done; \
	  echo "gpu-check: hipcc $(HIP_ARCHS): $(words $(GPU_ALLSRC)) files compiled"; ok=1; \
	else echo "gpu-check: SKIPPED the AMD build: hipcc not found (not checked)"; fi; \
	[ $$ok = 1 ] || echo "gpu-check: SKIPPED entirely: neither nvcc nor hipcc is installed; nothing was compiled"

gpu-test: $(GPU_BUILD)/test-ops
	$(GPU_BUILD)/test-ops

bench-gpu: $(GPU_BUILD)/bench-gpu
	-nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit --format=csv
	-rocm-smi --showclocks 2>/dev/null
	$(GPU_BUILD)/bench-gpu --reps 20

# gpu-emu-test: bin/m3-gpu built against a CPU emulation of the HIP subset
# (gpu/emu/hip_emu.h, g++ -std=c++20, threads), judged by bin/m3-conform on
# small model vectors. Checks kernel logic without a GPU (not speed).
GPU_EMU_CASES ?= vectors/model/tiny_fp32 vectors/model/tiny_decode_bf16 vectors/model/layer_sparse_moe_bf16 vectors/model/layer_dense_bf16 \
                 vectors/model/vision_tiny_fp32 vectors/vision/layer_fp32 vectors/vision/tower_video_fp32 \
                 vectors/vision/tower_2img_bf16 vectors/vision/projector_bf16
CXX ?= g++
GPU_HOSTSRC := $(patsubst %,gpu/%.cu,$(GPU_HOST))
$(GPU_BUILD)/emu/m3-gpu-emu: $(GPU_KSRC) $(GPU_HOSTSRC) $(wildcard gpu/*.h) gpu/emu/hip_emu.h $(GPU_HDR) $(LIB)
	@mkdir -p $(@D)
	$(CXX) -std=c++20 -O2 -ffp-contract=off -DM3_EMU -Wall -Wextra -Werror -Igpu -Iref -I/usr/include/cjson \
	  -x c++ $(GPU_KSRC) $(GPU_HOSTSRC) -x none $(LIB) $(LDLIBS) -pthread -o $@

$(GPU_BUILD)/emu/test-ops: $(GPU_KSRC) gpu/tests/test_ops.cu gpu/weight_stream.cu gpu/weight_stream.h gpu/emu/hip_emu.h $(GPU_HDR) $(LIB)
	@mkdir -p $(@D)
	$(CXX) -std=c++20 -O2 -ffp-contract=off -DM3_EMU -Wall -Wextra -Werror -Igpu -Iref -I/usr/include/cjson \
	  -x c++ $(GPU_KSRC) gpu/tests/test_ops.cu gpu/weight_stream.cu -x none $(LIB) $(LDLIBS) -pthread -o $@

gpu-test-emu: $(GPU_BUILD)/emu/test-ops
	$(GPU_BUILD)/emu/test-ops

.PHONY: gpu-emu-test
gpu-emu-test: $(GPU_BUILD)/emu/m3-gpu-emu bin/m3-conform bin/m3-ref
	sh tests/usage_check.sh $(GPU_BUILD)/emu/m3-gpu-emu "forward generate vision-case" \
	  ref/cli_opts.c gpu/m3-gpu.cu
	sh gpu/emu/emu_test.sh $(GPU_BUILD)/emu/m3-gpu-emu bin/m3-conform $(PYTHON) $(GPU_EMU_CASES)
	sh gpu/emu/emu_generate.sh $(GPU_BUILD)/emu/m3-gpu-emu bin/m3-ref models/demo
