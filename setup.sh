#!/usr/bin/env bash
# setup.sh — installs what ftc needs on Debian (when missing), configures and builds.
#   bash setup.sh          set up and build into build/
#   bash setup.sh test     set up, build, run the whole suite with ctest, build a Release
#                          ftc, then run the suite again under AddressSanitizer +
#                          UndefinedBehaviorSanitizer (build-asan/)
# The CUDA Toolkit is optional here: when /usr/local/cuda (or nvcc on PATH) exists,
# CMake finds NVRTC, cuBLAS and cuBLASLt; nothing needs a GPU to build or to start.
set -euo pipefail
cd "$(dirname "$0")"

packages=(gcc make cmake flex bison pkg-config libopenblas-dev libjansson-dev libpcre2-dev libutf8proc-dev
          openmpi-bin libopenmpi-dev)
# the test suite also opens memory.html in a headless browser and dry-runs tests/gpu/run.sh
# (python3 for its report)
[ "${1:-}" = test ] && packages+=(chromium python3)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ -d /usr/local/cuda/bin ] && ! command -v nvcc >/dev/null; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFTC_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

if [ "${1:-}" = test ]; then
    ctest --test-dir build --output-on-failure -j "$jobs"
    # A user's Release build (the system's flags, -O3) must build without a warning too.
    cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DFTC_WERROR=ON >/dev/null
    cmake --build build-release -j "$jobs" --target ftc
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFTC_SANITIZE=ON -DFTC_WERROR=ON >/dev/null
    cmake --build build-asan -j "$jobs"
    # LeakSanitizer's own stop-the-world tracer now and then dies at a process's exit
    # ("Tracer caught signal 11"), after the test has passed and before any leak is
    # looked for. Tests that failed only that way run once more; any other failure,
    # or that one twice, fails the suite.
    export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
    log=build-asan/ctest.log
    if ! ctest --test-dir build-asan --output-on-failure -j "$jobs" 2>&1 | tee "$log"; then
        if grep -q "LeakSanitizer has encountered a fatal error" "$log" &&
           ! grep -qE "ERROR: (AddressSanitizer|LeakSanitizer: detected)|runtime error:|^FAIL " "$log"; then
            echo "setup: LeakSanitizer's tracer crashed; running the tests that failed that way again"
            ctest --test-dir build-asan --output-on-failure --rerun-failed
        else
            exit 1
        fi
    fi
fi
