#!/usr/bin/env bash
# Whether two ftc binaries write the same plans: every model in models/ under several
# option sets (budgets, presets, ranks and ZeRO, forced remat and offload, per-block
# tensors, updates inside backward, a budget nothing fits), compiled by both; the plan
# directories, stdout, stderr and exit codes compared after masking what may differ
# between two runs (the planner's wall time, the output paths, NVRTC's cache note).
# A renovation must print "same"; prints the differences otherwise.
# usage: plan_diff.sh FTC_BEFORE FTC_AFTER [SOURCE_DIR]
set -u
[ $# -ge 2 ] || { echo "usage: plan_diff.sh FTC_BEFORE FTC_AFTER [SOURCE_DIR]" >&2; exit 2; }
before=$(realpath "$1") after=$(realpath "$2")
cd "${3:-$(dirname "$0")/..}" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sets=("--budget 40G --host-mem 256G"
      "--budget 24G --gpu rtx4090 --host-mem 64G"
      "--gpu h200"
      "--budget 80G --gpu h100-80g --ranks 8 --zero 2"
      "--budget 16G --remat full --offload optimizer --host-mem 128G"
      "--budget 40G --remat tensors:3x2+5 --update backward --loss-chunk 128"
      "--budget 1G")

compile_all() {   # ftc, out
    mkdir -p "$2"
    for i in "${!sets[@]}"; do
        for m in models/*.ft; do
            d=$2/$(basename "$m" .ft).$i
            # shellcheck disable=SC2086
            "$1" compile "$m" ${sets[$i]} -o "$d.plan" >"$d.out" 2>"$d.err"
            echo $? >"$d.rc"
        done
    done
    find "$2" -type f -exec sed -i -E "s/ in [0-9]+ ms / in N ms /; s|$2/|DIR/|g; s/ \(from the cache\)//" {} +
}

compile_all "$before" "$tmp/before"
compile_all "$after" "$tmp/after"
n=$(find "$tmp/before" -name '*.rc' | wc -l)
if diff -r "$tmp/before" "$tmp/after"; then
    echo "same: $n compiles (${#sets[@]} option sets x $(ls models/*.ft | wc -l) models), plans and output"
else
    exit 1
fi
