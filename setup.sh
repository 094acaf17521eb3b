#!/usr/bin/env bash
# setup.sh — installs what ftc needs on Debian (when missing), configures and builds.
#   bash setup.sh            set up and build into build/
#   bash setup.sh test       set up, build, run the whole suite with ctest, build a Release
#                            ftc, then run the tests labelled `sanitize` again under
#                            AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/);
#                            each test's time at the end (CI runs this)
#   bash setup.sh test-long  the same, then every test under the sanitizers and each fuzz
#                            harness for $FTC_FUZZ_SECONDS (default 600) where clang has
#                            libFuzzer: the soak, by hand, never in CI
# The CUDA Toolkit is optional here: when /usr/local/cuda (or nvcc on PATH) exists,
# CMake finds NVRTC, cuBLAS and cuBLASLt; nothing needs a GPU to build or to start.
set -euo pipefail
cd "$(dirname "$0")"

packages=(gcc make cmake flex bison pkg-config libopenblas-dev libjansson-dev libpcre2-dev libutf8proc-dev
          openmpi-bin libopenmpi-dev)
# the test suite also opens memory.html in a headless browser and dry-runs tests/gpu/run.sh
# (python3 for its report)
case ${1:-} in test|test-long) packages+=(chromium python3) ;; esac
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

case ${1:-} in test|test-long) ;; *) exit 0 ;; esac

# sanitized LABEL...: ctest in build-asan/ (ctest's arguments after it), the log kept.
sanitized() {
    # LeakSanitizer's own stop-the-world tracer now and then dies at a process's exit
    # ("Tracer caught signal 11"), after the test has passed and before any leak is
    # looked for. Tests that failed only that way run once more; any other failure,
    # or that one twice, fails the suite.
    local log=build-asan/ctest.log
    export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
    if ! ctest --test-dir build-asan --output-on-failure -j "$jobs" "$@" 2>&1 | tee "$log"; then
        if grep -q "LeakSanitizer has encountered a fatal error" "$log" &&
           ! grep -qE "ERROR: (AddressSanitizer|LeakSanitizer: detected)|runtime error:|^FAIL " "$log"; then
            echo "setup: LeakSanitizer's tracer crashed; running the tests that failed that way again"
            ctest --test-dir build-asan --output-on-failure --rerun-failed
        else
            return 1
        fi
    fi
}

ctest --test-dir build --output-on-failure -j "$jobs" 2>&1 | tee build/ctest.log   # (pipefail)
# A user's Release build (the system's flags, -O3) must build without a warning too.
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DFTC_WERROR=ON >/dev/null
cmake --build build-release -j "$jobs" --target ftc
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFTC_SANITIZE=ON -DFTC_WERROR=ON >/dev/null
cmake --build build-asan -j "$jobs"
sanitized -L sanitize
bash tests/times.sh build/ctest.log build-asan/ctest.log
[ "$1" = test ] && exit 0

# test-long: the other tests under the sanitizers too, then the fuzzers.
sanitized -LE sanitize
if command -v "${CC:-clang}" >/dev/null 2>&1; then
    for target in ft plan st tokens import tok jsonl; do
        TARGET=$target bash tests/fuzz/build.sh "${FTC_FUZZ_SECONDS:-600}"
    done
else
    echo "setup: no clang: the fuzzers did not run (tests/fuzz/README.md)"
fi
