# Thin wrapper over CMake.  `make run` and `make test` are the README's two
# commands; they configure and build as needed.
BUILD ?= build
PREFIX ?= /usr/local
CMAKE ?= cmake
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# One rank per GPU where there are several GPUs, else 4 CPU ranks.
RANKS ?= $(shell n=$$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); \
	if [ "$${n:-0}" -ge 2 ]; then echo $$n; else echo 4; fi)

.PHONY: all build run test test-sanitize install test-gpu bench-gpu clean deps

all: build

$(BUILD)/CMakeCache.txt:
	@command -v $(CMAKE) >/dev/null || sh .ci/install-deps
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# The main job: symmem-bench's all-reduce table on the default backend.
run: build
	$(BUILD)/tools/symmem-run -n $(RANKS) -- $(BUILD)/tools/symmem-bench -b 4 -e 4M -f 4 -c 1

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer (CPU
# code only), in its own build folder.
SAN_BUILD ?= build-asan
test-sanitize:
	@test -f $(SAN_BUILD)/CMakeCache.txt || $(CMAKE) -S . -B $(SAN_BUILD) \
	  -DCMAKE_BUILD_TYPE=Debug -DSYMM_WITH_CUDA=OFF -DSYMM_SANITIZE=address,undefined
	$(CMAKE) --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600

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
