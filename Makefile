# Thin wrapper over CMake.  `make run` and `make test` are the README's two
# commands; they configure and build as needed.
BUILD ?= build
PREFIX ?= /usr/local
CMAKE ?= cmake
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTHON ?= python3
# One rank per GPU where there are several GPUs, else 4 CPU ranks.
RANKS ?= $(shell n=$$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); \
	if [ "$${n:-0}" -ge 2 ]; then echo $$n; else echo 4; fi)

.PHONY: all build run test test-python test-sanitize test-tsan test-valgrind fuzz install test-gpu bench-gpu clean deps

all: build

$(BUILD)/CMakeCache.txt:
	@command -v $(CMAKE) >/dev/null || sh .ci/install-deps
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# The main job: symmem-bench's all-reduce table on the default backend.
run: build
	$(BUILD)/tools/symmem-run -n $(RANKS) -- $(BUILD)/tools/symmem-bench -b 4 -e 4M -f 4 -c 1

# ctest's summary, then the reason of every skipped test (ctest shows none).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300; rc=$$?; \
	  sh $(CURDIR)/tests/print-skips.sh .; exit $$rc
	@$(MAKE) --no-print-directory test-python

# The Python package (python/tests, pytest) against this build's library,
# with pytest's summary; one test installs the package into a fresh venv.
test-python: build
	@$(PYTHON) -c 'import pytest, numpy' 2>/dev/null || sh .ci/install-deps
	SYMMEM_LIBRARY=$(abspath $(BUILD))/libsymmem.so PYTHONPATH=$(abspath python) \
	  $(PYTHON) -m pytest -ra -p no:cacheprovider python/tests

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer (CPU
# code only), in its own build folder.
SAN_BUILD ?= build-asan
test-sanitize:
	@test -f $(SAN_BUILD)/CMakeCache.txt || $(CMAKE) -S . -B $(SAN_BUILD) \
	  -DCMAKE_BUILD_TYPE=Debug -DSYMM_WITH_CUDA=OFF -DSYMM_SANITIZE=address,undefined
	$(CMAKE) --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600; rc=$$?; \
	  sh $(CURDIR)/tests/print-skips.sh .; exit $$rc

# The tests that run threads in one process (the store server, the fd
# exchange, the registry under concurrent lookups) under ThreadSanitizer.
# The multi-process tests share memory between processes, which TSan does
# not see, and run 5-15 times slower under it: they stay with test-sanitize.
TSAN_BUILD ?= build-tsan
test-tsan:
	@test -f $(TSAN_BUILD)/CMakeCache.txt || $(CMAKE) -S . -B $(TSAN_BUILD) \
	  -DCMAKE_BUILD_TYPE=Debug -DSYMM_WITH_CUDA=OFF -DSYMM_SANITIZE=thread
	$(CMAKE) --build $(TSAN_BUILD) -j $(JOBS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600 -R 'threads|store_|fdx_'

# A representative subset of the CPU tests under valgrind memcheck.
test-valgrind: build
	sh tests/run-valgrind.sh $(BUILD)

# The libFuzzer targets of tests/fuzz (clang, ASan + UBSan, coverage), in
# their own build folder, each run FUZZ_SECONDS on a copy of its corpus;
# fails on any finding.  FUZZ_TARGETS: a subset (store fdx settings
# bench-options).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
FUZZ_CC ?= clang
fuzz:
	@test -f "$$($(FUZZ_CC) -print-file-name=libclang_rt.fuzzer-$$(uname -m).a 2>/dev/null)" || \
	  sh .ci/install-deps
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || CC=$(FUZZ_CC) $(CMAKE) -S . -B $(FUZZ_BUILD) \
	  -DCMAKE_BUILD_TYPE=Debug -DSYMM_WITH_CUDA=OFF -DSYMM_FUZZ=ON -DBUILD_TESTING=OFF
	$(CMAKE) --build $(FUZZ_BUILD) -j $(JOBS) --target symm-fuzzers
	sh tests/fuzz/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

install: build
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

test-gpu: build
	sh tests/gpu/run-gpu-tests.sh $(BUILD)

bench-gpu: build
	sh bench/run-gpu-bench.sh $(BUILD)

deps:
	sh .ci/install-deps

clean:
	rm -rf $(BUILD)
