# Flowstate's entry points. Everything installs what it needs first.
#   make test    install deps, configure, build, run every test (CI runs this)
#   make bench   also install the reference libraries, build, run bench/
#   make serve   install deps, build, run `flowstate serve` in the foreground (embedded defaults)
#   make asan    every test under AddressSanitizer + UBSan (build-asan/)
#   make tsan    the engine's, server's, jobs' and distributed tests under ThreadSanitizer (build-tsan/)
#   make fuzz    the libFuzzer targets of fuzz/ (clang-14, build-fuzz/), each run
#                for FUZZ_SECONDS (default 60); fails if any finds a crash
BUILD ?= build
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
CMAKE_FLAGS ?=

# ccache: share hits between checkouts in different folders (CI clones anew).
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all deps configure build test bench serve asan tsan fuzz clean

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench:
	@scripts/install-deps --bench
	@cmake -S . -B $(BUILD) -G Ninja -DFLOWSTATE_BUILD_BENCH=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target bench

# The server with the embedded config/flowstate.json: REST on 127.0.0.1:8080,
# gRPC on 127.0.0.1:50051, data under ./var/flowstate. Ctrl-C stops it.
serve: configure
	@cmake --build $(BUILD) -j $(JOBS) --target flowstate
	@exec $(BUILD)/flowstate serve

asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)
	@ctest --preset asan

tsan:
	@scripts/install-deps --tsan
	@scripts/tsan-abseil
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS)
	@ctest --preset tsan

fuzz:
	@scripts/install-deps --fuzz
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz -j $(JOBS)
	@FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
