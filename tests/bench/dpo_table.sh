#!/usr/bin/env bash
# The preference table of README.md: Qwen2-7B DPO (beta 0.1) with LoRA r 16 on the seven
# linears, seq 1024 (a prompt of 512 and its completion, each pair a chosen and a rejected
# row), a global batch of 16 rows (8 pairs), bf16, a host of 256G, planned for a 24G and a
# 40G budget with reference = auto: each way of having the reference (the base without
# its adapters, a frozen copy, a pass over the data before training), its plan's device
# and host bytes and estimated step, as ftc compile prints them, the chosen one marked.
#     tests/bench/dpo_table.sh [FTC]
set -u
ftc=${1:-build/ftc}
cd "$(dirname "$0")/../.." || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -e 's/^  seq  *= .*/  seq       = 1024/' -e 's/^  batch  *= .*/  batch     = 16/' \
    -e 's/cross_entropy(forward(tokens), next(tokens))/dpo(forward(tokens), next(tokens), beta = 0.1)/' \
    -e 's/^  optimizer = .*/&\n  lora(r = 16, alpha = 32, dropout = 0.05, targets = [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj])/' \
    models/qwen2.ft > "$tmp/dpo.ft"
echo "| budget | reference | micro-batch | device | host | est. step | + pass / step | fits |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for budget in 24G 40G; do
    "$ftc" compile "$tmp/dpo.ft" --budget $budget --host-mem 256G -o "$tmp/plan" > "$tmp/out.txt" 2>&1 ||
        { echo "ftc compile failed: $(tail -3 "$tmp/out.txt")" >&2; exit 1; }
    sed -n '/^reference: each way/,/^  chosen:/p' "$tmp/out.txt" | grep -E '^  (lora_off|copy|precomputed) ' |
        while read -r ref micro dev du host hu step pass fits mark; do
            echo "| $budget | $ref${mark:+ (chosen)} | $micro | $dev $du | $host $hu | $step | $pass | $fits |"
        done
done
