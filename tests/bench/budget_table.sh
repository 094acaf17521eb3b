#!/usr/bin/env bash
# The budget table of passes/README.md: Qwen2-7B, seq 2048, global batch 32, host memory 256G, at
# budgets 80G (--gpu a100-80g), 40G, 24G and 16G (--gpu a100-40g: a budget is at most the
# card's memory), for full fine-tuning (bf16 mixed AdamW),
# LoRA (r = 8 on q_proj, v_proj) and QLoRA (the same on an NF4 base, double quantisation).
# Then the plans that stream the weights from the host: Qwen2-7B full fine-tuning on a
# 12G RTX 4090 budget and LoRA at micro-batch 1 in 8G, Qwen2-72B QLoRA on an RTX 4090 and
# full fine-tuning on one 80G card (h100-80g) with 2T of host memory.
# Prints markdown rows.
#     tests/bench/budget_table.sh [FTC]
set -u
ftc=${1:-build/ftc}
cd "$(dirname "$0")/../.." || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed 's/^  optimizer = .*/&\n  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])/' models/qwen2.ft > "$tmp/lora.ft"
sed 's/^  optimizer = .*/&\n  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])\n  quantize(nf4, double_quant = true)/' models/qwen2.ft > "$tmp/qlora.ft"
sed 's/^  optimizer = .*/&\n  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])\n  quantize(nf4, double_quant = true)/' models/qwen2-72b.ft > "$tmp/qlora72.ft"
# One row from a compile's output: the plan, device and host bytes, step, tokens/s, MFU.
row() {   # LABEL... then the compile's output on stdin
    out=$(cat)
    if grep -q '^plan: micro' <<<"$out"; then
        plan=$(grep '^plan: micro' <<<"$out" | sed 's/^plan: //')
        dev=$(grep -o 'device [0-9.]* [GM]iB of' <<<"$out" | head -1 | awk '{print $2" "$3}')
        hostb=$(grep -o 'context reserve included); host [0-9.]* [GMTK]*i*B' <<<"$out" | head -1 | awk '{print $5" "$6}')
        step=$(grep -o 'estimated step [0-9.]* s' <<<"$out" | awk '{print $3" s"}')
        tps=$(grep -o '[0-9]* tokens/s' <<<"$out" | head -1 | awk '{print $1}')
        mfu=$(grep -o 'MFU [0-9.]*%' <<<"$out" | head -1 | awk '{print $2}')
        echo "| $* | yes | $plan | $dev | $hostb | $step | $tps | $mfu |"
    else
        need=$(grep -o 'the smallest plan needs [0-9.]* GiB' <<<"$out" | awk '{print $5" GiB"}')
        echo "| $* | no | smallest plan needs $need | | | | | |"
    fi
}
echo "| fine-tuning | budget | fits | plan | device peak | est. step | tokens/s | MFU |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for kind in full lora qlora; do
    ft=models/qwen2.ft
    [ $kind = lora ] && ft="$tmp/lora.ft"
    [ $kind = qlora ] && ft="$tmp/qlora.ft"
    for b in 80G 40G 24G 16G; do
        gpu=a100-40g
        [ $b = 80G ] && gpu=a100-80g
        out=$("$ftc" compile "$ft" --budget $b --gpu $gpu --host-mem 256G -o "$tmp/p.plan" 2>&1)
        if grep -q '^plan: micro' <<<"$out"; then
            plan=$(grep '^plan: micro' <<<"$out" | sed 's/^plan: //')
            dev=$(grep -o 'device [0-9.]* GiB of' <<<"$out" | head -1 | awk '{print $2" GiB"}')
            step=$(grep -o 'estimated step [0-9.]* s' <<<"$out" | awk '{print $3" s"}')
            tps=$(grep -o '[0-9]* tokens/s' <<<"$out" | head -1 | awk '{print $1}')
            mfu=$(grep -o 'MFU [0-9.]*%' <<<"$out" | head -1 | awk '{print $2}')
            echo "| $kind | $b | yes | $plan | $dev | $step | $tps | $mfu |"
        else
            need=$(grep -o 'the smallest plan needs [0-9.]* GiB' <<<"$out" | awk '{print $5" GiB"}')
            echo "| $kind | $b | no | smallest plan needs $need | | | | |"
        fi
    done
done
echo
echo "| model | fine-tuning | budget | fits | plan | device peak | host | est. step | tokens/s | MFU |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
"$ftc" compile models/qwen2.ft --budget 12G --gpu rtx4090 --host-mem 256G -o "$tmp/p.plan" 2>&1 |
    row "Qwen2-7B | full | 12G rtx4090, 256G host"
"$ftc" compile "$tmp/lora.ft" --budget 8G --micro-batch 1 --host-mem 256G -o "$tmp/p.plan" 2>&1 |
    row "Qwen2-7B | lora, micro-batch 1 | 8G a100-40g, 256G host"
"$ftc" compile "$tmp/qlora72.ft" --budget 24G --gpu rtx4090 --host-mem 256G -o "$tmp/p.plan" 2>&1 |
    row "Qwen2-72B | qlora | 24G rtx4090, 256G host"
"$ftc" compile models/qwen2-72b.ft --budget 80G --gpu h100-80g --host-mem 2T -o "$tmp/p.plan" 2>&1 |
    row "Qwen2-72B | full | 80G h100-80g, 2T host"
