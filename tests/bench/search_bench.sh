#!/usr/bin/env bash
# The planner's search on a fixed list of scenarios (models x budgets x cards x full /
# LoRA / QLoRA x ranks), with two builds of ftc side by side: each one's wall time for
# the whole compile (best of RUNS), the ratio, and the chosen plan with its device peak
# and estimated step. A scenario whose new plan is slower, or as fast with a larger
# peak, is marked WORSE; one whose plan changed otherwise, "changed". The kernels are not
# compiled to a CUBIN (FTC_NO_CUBIN: NVRTC's time, cached or not, is not the planner's).
#
#     tests/bench/search_bench.sh OLD_FTC [NEW_FTC] [RUNS]
#
# OLD_FTC is typically a build of an earlier commit:
#     git worktree add /tmp/base <commit> && cmake -S /tmp/base -B /tmp/base/build && make -C /tmp/base/build ftc
set -u
old=${1:?usage: search_bench.sh OLD_FTC [NEW_FTC] [RUNS]}
new=${2:-build/ftc}
runs=${3:-1}
cd "$(dirname "$0")/../.." || exit 2
export FTC_NO_CUBIN=1
old=$(readlink -f "$old") new=$(readlink -f "$new")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Variants of the shipped models: LoRA on q and v (r 8, or r 64 on every projection),
# and the same LoRA on an NF4 base.
lora() {   # MODEL TARGETS R -> a file
    local f="$tmp/$(basename "$1" .ft)-lora$3-${2//[^a-z]/}.ft"
    sed "s/^  optimizer = .*/&\n  lora(r = $3, alpha = $(( $3 * 2 )), dropout = 0.05, targets = [$2])/" "$1" > "$f"
    echo "$f"
}
qlora() {
    local f="$tmp/$(basename "$1" .ft)-qlora.ft"
    sed 's/^  optimizer = .*/&\n  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])\n  quantize(nf4, double_quant = true)/' "$1" > "$f"
    echo "$f"
}
qv="q_proj, v_proj"
all="q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"
scenarios=(
    "models/qwen2.ft --budget 40G --host-mem 256G"
    "models/qwen2.ft --gpu a100-80g --budget 80G --host-mem 256G"
    "models/qwen2.ft --budget 24G --host-mem 256G"
    "models/qwen2.ft --gpu h200 --host-mem 256G"
    "$(lora models/qwen2.ft "$qv" 8) --budget 40G --host-mem 256G"
    "$(lora models/qwen2.ft "$qv" 8) --budget 16G --host-mem 256G"
    "$(lora models/qwen2.ft "$all" 64) --budget 40G --host-mem 256G"
    "$(qlora models/qwen2.ft) --budget 16G --host-mem 256G"
    "$(qlora models/qwen2.ft) --gpu rtx4090 --budget 8G --host-mem 64G"
    "$(qlora models/qwen2-72b.ft) --gpu h100-80g --budget 80G --host-mem 1T"
    "$(qlora models/qwen2-72b.ft) --gpu rtx4090 --host-mem 256G"
    "models/qwen2-72b.ft --gpu h100-80g --budget 80G --host-mem 2T"
    "models/qwen2-72b.ft --ranks 8 --zero 3 --gpu h100-80g --budget 80G --host-mem 1T"
    "models/qwen2.ft --ranks 8 --gpu a100-80g --host-mem 256G"
    "models/llama2-7b.ft --ranks 4 --zero 2 --gpu a100-40g --host-mem 256G"
    "$(lora models/llama-3.1-8b.ft "$qv" 8) --gpu rtx4090 --host-mem 128G"
    "models/gemma-2-9b.ft --gpu h200 --host-mem 512G"
    "models/qwen2-1.5b.ft --gpu l4 --host-mem 64G"
    "models/qwen2-0.5b.ft --budget 16G --host-mem 64G"
    "$(qlora models/mistral-7b-v0.1.ft) --gpu rtx4090 --budget 12G --host-mem 64G"
    "models/qwen3-8b.ft --gpu h100-80g --host-mem 512G"
    "$(qlora models/gemma-7b.ft) --gpu l4 --host-mem 64G"
)
now() { date +%s.%N; }
# One compile: "SECONDS|PLAN|DEVICE|STEP" (the best time of $runs).
one() {   # FTC ARGS...
    local ftc=$1 best= out t0 t1 t
    shift
    for _ in $(seq "$runs"); do
        t0=$(now)
        out=$("$ftc" compile "$@" -o "$tmp/p.plan" 2>&1)
        t1=$(now)
        t=$(echo "$t1 - $t0" | bc)
        if [ -z "$best" ] || [ "$(echo "$t < $best" | bc)" = 1 ]; then best=$t; fi
    done
    local plan dev step
    plan=$(grep -m1 '^plan: micro' <<<"$out" | sed 's/^plan: //')
    dev=$(grep -m1 -o 'device [0-9.]* [GMK]iB of' <<<"$out" | awk '{print $2" "$3}')
    step=$(grep -m1 -o 'estimated step [0-9.]* s' <<<"$out" | awk '{print $3}')
    [ -z "$plan" ] && plan="nothing fits: $(grep -m1 -o 'the smallest plan needs [0-9.]* [GMK]iB' <<<"$out")"
    printf '%.2f|%s|%s|%s\n' "$best" "$plan" "${dev:--}" "${step:--}"
}
gib() { awk -v v="$1" -v u="$2" 'BEGIN { f = u == "MiB" ? 1/1024 : u == "KiB" ? 1/1048576 : 1; printf "%.4f", v * f }'; }
printf '%-3s %8s %8s %7s  %s\n' "#" "old s" "new s" "ratio" "scenario / old plan / new plan"
tot_old=0 tot_new=0 worse=0 changed=0 i=0
for s in "${scenarios[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    IFS='|' read -r to po do so <<<"$(one "$old" $s)"
    # shellcheck disable=SC2086
    IFS='|' read -r tn pn dn sn <<<"$(one "$new" $s)"
    tot_old=$(echo "$tot_old + $to" | bc) tot_new=$(echo "$tot_new + $tn" | bc)
    mark=""
    if [ "$po|$do|$so" != "$pn|$dn|$sn" ]; then
        mark="changed"
        if [ "$so" != "-" ] && [ "$sn" != "-" ]; then
            go=$(gib $do) gn=$(gib $dn)
            if [ "$(echo "$sn > $so" | bc)" = 1 ] || { [ "$sn" = "$so" ] && [ "$(echo "$gn > $go" | bc)" = 1 ]; }; then
                mark="WORSE"
            fi
        elif [ "$sn" = "-" ] && [ "$so" != "-" ]; then
            mark="WORSE"
        fi
    fi
    [ "$mark" = WORSE ] && worse=$((worse + 1))
    [ "$mark" = changed ] && changed=$((changed + 1))
    printf '%-3s %8s %8s %6.1fx  %s %s\n' "$i" "$to" "$tn" "$(echo "$to / $tn" | bc -l)" \
        "${s//$tmp\//}" "${mark:+[$mark]}"
    printf '%29s old: %s | %s | %s s\n' "" "$po" "$do" "$so"
    printf '%29s new: %s | %s | %s s\n' "" "$pn" "$dn" "$sn"
done
printf 'total %.1f s -> %.1f s (%.1fx); %d scenarios, %d changed, %d worse\n' "$tot_old" "$tot_new" \
    "$(echo "$tot_old / $tot_new" | bc -l)" "$i" "$changed" "$worse"
[ "$worse" = 0 ]
