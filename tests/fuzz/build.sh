#!/usr/bin/env bash
# build.sh — builds the libFuzzer harnesses (the .ft frontend, plan files) and runs one.
#
# usage: [TARGET=ft|plan|st|tokens|import|tok|jsonl|ckpt] tests/fuzz/build.sh [SECONDS] [LIBFUZZER_FLAG...]
#   SECONDS   how long to fuzz (default 60); 0 only builds.
#   flags     passed to the fuzzer as they are, e.g. -jobs=4 -workers=4, -fork=2.
#
# Builds, from the sources directly (not through CMake):
#   tests/fuzz/fuzz_ft    the .ft fuzzer: clang -fsanitize=fuzzer,address,undefined
#   tests/fuzz/replay     the same harness with a plain main(), ASan+UBSan, no libFuzzer
#   tests/fuzz/fuzz_plan  the plan fuzzer (reader, verifier, one step on the cpu backend)
#   tests/fuzz/fuzz_{st,tokens,import,tok,jsonl,ckpt}  the other readers' (fuzz_readers.c)
# then fuzzes TARGET (default ft) with its seed corpus, tests/fuzz/corpus, tests/fuzz/plans
# or tests/fuzz/readers/TARGET (read-only), writing new inputs to tests/fuzz/out/TARGET/corpus
# and crashes, timeouts and leaks to tests/fuzz/out/TARGET/artifacts/.
#
# Environment:
#   CC                clang to use (default clang; needs libFuzzer: on Debian/Ubuntu
#                     `apt-get install -y clang libclang-rt-14-dev`)
#   BUILD_DIR         where CMake generated lexer.c/parser.c (default build); when they
#                     are missing or older than lexer.l/parser.y this runs
#                     `cmake -S . -B $BUILD_DIR && make -C $BUILD_DIR ftc` first
#   FTC_FUZZ_VERBOSE  set to show the frontend's diagnostics (normally silenced)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

secs=${1:-60}
[ $# -gt 0 ] && shift
case $secs in
    '' | *[!0-9]*) echo "build.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2 ;;
esac

CC=${CC:-clang}
BUILD_DIR=${BUILD_DIR:-build}
TARGET=${TARGET:-ft}
case $TARGET in
    ft|plan|st|tokens|import|tok|jsonl|ckpt) ;;
    *) echo "build.sh: TARGET is ft, plan, st, tokens, import, tok, jsonl or ckpt, got '$TARGET'" >&2; exit 2 ;;
esac
out=tests/fuzz/out/$TARGET

# The lexer and parser come from flex and bison through CMake.
if [ ! -f "$BUILD_DIR/lexer.c" ] || [ ! -f "$BUILD_DIR/parser.c" ] ||
   [ frontend/lexer.l -nt "$BUILD_DIR/lexer.c" ] || [ frontend/parser.y -nt "$BUILD_DIR/parser.c" ]; then
    echo "build.sh: generating the lexer and parser in $BUILD_DIR"
    cmake -S . -B "$BUILD_DIR" >/dev/null
    make -C "$BUILD_DIR" ftc >/dev/null
fi

# Does this clang have libFuzzer?
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
    > "$probe/p.c"
if ! "$CC" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
    cat "$probe/err" >&2
    echo "build.sh: $CC cannot build a libFuzzer target; install clang and its runtime," >&2
    echo "          e.g. apt-get install -y clang libclang-rt-14-dev" >&2
    exit 1
fi

srcs=(frontend/*.c ir/*.c passes/*.c)   # (the language part of frontend/: not its cli/ room)
srcs+=(runtime/ops.c runtime/op_check.c runtime/op_gemm.c runtime/op_roots.c runtime/overlap.c "$BUILD_DIR/lexer.c" "$BUILD_DIR/parser.c")

jansson_cflags=$(pkg-config --cflags jansson 2>/dev/null || true)
jansson_libs="$(pkg-config --libs jansson 2>/dev/null || echo -ljansson) $(pkg-config --libs libpcre2-8 libutf8proc 2>/dev/null || echo -lpcre2-8 -lutf8proc)"
cflags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
        -Wall -Wextra -Wno-sign-compare -Wno-unused-parameter -Wno-unused-function
        -Ifrontend -Iir -Ipasses -Iruntime -I"$BUILD_DIR" $jansson_cflags)
san=(-fsanitize=address,undefined -fno-sanitize-recover=all)

echo "build.sh: building tests/fuzz/fuzz_ft and tests/fuzz/replay with $CC"
"$CC" "${cflags[@]}" "${san[@]}" -fsanitize=fuzzer \
    tests/fuzz/fuzz_ft.c "${srcs[@]}" $jansson_libs -lm -o tests/fuzz/fuzz_ft
"$CC" "${cflags[@]}" "${san[@]}" \
    tests/fuzz/replay.c tests/fuzz/fuzz_ft.c "${srcs[@]}" $jansson_libs -lm -o tests/fuzz/replay
# The plan fuzzer: the runtime without the training loop and the GPU backends.
rsrcs=()
for f in runtime/*.c runtime/cpu/*.c; do
    [ "$f" = runtime/train.c ] || rsrcs+=("$f")
done
"$CC" "${cflags[@]}" -Iruntime/cpu "${san[@]}" -fsanitize=fuzzer \
    tests/fuzz/fuzz_plan.c "${rsrcs[@]}" $jansson_libs -lopenblas -lpthread -ldl -lm -o tests/fuzz/fuzz_plan
# The readers' fuzzers: safetensors and token files (the runtime), config.json (import),
# tokenizer.json, JSONL datasets and checkpoints of the plan in ckpt-plan/ (the runtime).
for r in st:1 tokens:2 import:3 tok:4 jsonl:5 ckpt:6; do
    extra=("${rsrcs[@]}")
    [ "${r%%:*}" = import ] && extra=("${srcs[@]}")
    "$CC" "${cflags[@]}" -Iruntime/cpu "${san[@]}" -fsanitize=fuzzer -DFUZZ_READER="${r##*:}" \
        -DFUZZ_TOKENIZER="\"$root/tests/fixtures/tok/qwen2.json\"" \
        -DFUZZ_CKPT_PLAN="\"$root/tests/fuzz/ckpt-plan/plan\"" \
        tests/fuzz/fuzz_readers.c "${extra[@]}" $jansson_libs -lopenblas -lpthread -ldl -lm \
        -o "tests/fuzz/fuzz_${r%%:*}"
done

[ "$secs" -gt 0 ] || exit 0

mkdir -p "$out/corpus" "$out/artifacts"
echo "build.sh: fuzzing $TARGET for ${secs}s (new inputs in $out/corpus, findings in $out/artifacts/)"
case $TARGET in
    st|tokens|import|tok|jsonl|ckpt)
        max_len=16384
        # the tokenizer seeds are 13-22 KB; a checkpoint's state (in the st seeds too) 36 KB
        case $TARGET in tok|st|ckpt) max_len=65536 ;; esac
        exec "tests/fuzz/fuzz_$TARGET" "$out/corpus" "tests/fuzz/readers/$TARGET" \
            -max_len=$max_len -timeout=10 -max_total_time="$secs" -rss_limit_mb=4096 \
            -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@" ;;
esac
if [ "$TARGET" = plan ]; then
    exec tests/fuzz/fuzz_plan "$out/corpus" tests/fuzz/plans \
        -max_len=65536 -timeout=10 -max_total_time="$secs" -rss_limit_mb=4096 \
        -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@"
fi
exec tests/fuzz/fuzz_ft "$out/corpus" tests/fuzz/corpus \
    -dict=tests/fuzz/ft.dict -max_len=8192 -timeout=5 -max_total_time="$secs" \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@"
