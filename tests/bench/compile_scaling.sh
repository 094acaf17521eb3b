#!/usr/bin/env bash
# How ftc compile's time grows with the number of parameter tensors: tiny.ft's block
# repeated L times (dims cut so that the tensors, not their sizes, are the work), L
# doubling; each row the whole compile (planner search, every candidate planned, the
# plan verified and written) and its ratio to the row before (2.0 is linear). With a
# second ftc, the same models on it and the ratio of the two times.
#     tests/bench/compile_scaling.sh [FTC [BASELINE_FTC]] [--max L]
set -u
ftc=${1:-build/ftc} base=${2:-} max=2000
[ "${3:-}" = --max ] && max=${4:-2000}
cd "$(dirname "$0")/../.." || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
secs() {   # FTC FILE: seconds for one compile
    local s e
    s=$(date +%s%N)
    "$1" compile "$2" -o "$tmp/out.plan" >/dev/null 2>&1 || { echo fail; return; }
    e=$(date +%s%N)
    awk -v n=$((e - s)) 'BEGIN { printf "%.2f", n / 1e9 }'
}
echo "| layers | parameter tensors | ftc s | x previous |${base:+ baseline s | baseline / ftc |}"
echo "| --- | --- | --- | --- |${base:+ --- | --- |}"
prev=""
for ((l = 250; l <= max; l *= 2)); do
    sed -e "s/^  layers *= *[0-9]*/  layers   = $l/" -e 's/^  dim *= *[0-9]*/  dim      = 16/' \
        -e 's/^  ffn *= *[0-9]*/  ffn      = 32/' -e 's/^  seq *= *[0-9]*/  seq       = 8/' \
        -e 's/^  batch *= *[0-9]*/  batch     = 1/' models/tiny.ft > "$tmp/m.ft"
    tensors=$("$ftc" compile "$tmp/m.ft" -o "$tmp/out.plan" 2>/dev/null | sed -n 's/^parameters: .* in \([0-9]*\) tensors/\1/p')
    t=$(secs "$ftc" "$tmp/m.ft")
    ratio=$([ -n "$prev" ] && awk -v a="$t" -v b="$prev" 'BEGIN { printf "%.2f", a / b }' || echo -)
    row="| $l | $tensors | $t | $ratio |"
    if [ -n "$base" ]; then
        bt=$(secs "$base" "$tmp/m.ft")
        row="$row $bt | $(awk -v a="$bt" -v b="$t" 'BEGIN { printf "%.1f", a / b }') |"
    fi
    echo "$row"
    prev=$t
done
