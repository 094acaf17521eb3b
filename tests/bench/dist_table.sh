#!/usr/bin/env bash
# The table of data-parallel plans in runtime/README.md: Qwen2-7B and Qwen2-72B full fine-tuning, seq
# 2048, a global batch of 256 sequences (the shipped files' 32 does not split over 64
# ranks), on H100 80 GB over 1, 8 (one node, NVLink) and 64 ranks (8 nodes, InfiniBand),
# --host-mem 256G a rank (a DGX H100's 2 TiB over its 8 GPUs). The planner chooses the
# ZeRO stage, micro-batch, recompute, offload and buckets; a row gives what it chose, the
# per-rank device peak (context and NCCL reserve included) and host memory, the estimated
# step, and the collectives' time and the share of the step compute does not hide.
# usage: dist_table.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| model | ranks | link | plan | per-rank peak | host a rank | est. step | tokens/s | collectives a step | exposed |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for m in qwen2 qwen2-72b; do
    sed 's/^  batch     = 32/  batch     = 256/' "$src/models/$m.ft" > "$tmp/$m.ft"
    name=$([ $m = qwen2 ] && echo Qwen2-7B || echo Qwen2-72B)
    for r in 1 8 64; do
        args=(--gpu h100-80g --budget 80G --host-mem 256G)
        [ $r -gt 1 ] && args+=(--ranks $r)
        "$ftc" compile "$tmp/$m.ft" "${args[@]}" -o "$tmp/p.plan" > "$tmp/out" 2>&1
        link=$([ $r = 1 ] && echo - || ([ $r -le 8 ] && echo nvlink || echo ib))
        if ! grep -q '^plan: micro' "$tmp/out"; then
            need=$(grep -o 'the smallest plan needs [0-9.]* [GM]iB' "$tmp/out" | sed 's/the smallest plan needs //')
            why=$(grep -o 'the bf16 weights alone take [0-9.]* GiB\|the model states need [0-9.]* GiB of host memory' "$tmp/out" | head -1)
            echo "| $name | $r | $link | does not fit${why:+: $why}${need:+ (smallest plan $need)} | | | | | | |"
            continue
        fi
        plan=$(grep '^plan: micro' "$tmp/out" | sed 's/^plan: //')
        dev=$(grep -oE '(per rank: )?device [0-9.]+ [GM]iB' "$tmp/out" | head -1 | grep -oE '[0-9.]+ [GM]iB')
        host=$(grep -oE 'context reserve included\); host [0-9.]+ [GMK]?i?B' "$tmp/out" | head -1 | sed 's/.*host //')
        step=$(grep -oE 'estimated step [0-9.]+ s' "$tmp/out" | head -1 | sed 's/estimated step //')
        tps=$(grep -oE '[0-9]+ tokens/s' "$tmp/out" | head -1 | sed 's/ tokens\/s//')
        comm=$(grep -oE '^  collectives [0-9]+ ms' "$tmp/out" | head -1 | grep -oE '[0-9]+ ms')
        exposed=$(grep -oE 'not hidden behind compute: [0-9.]+%' "$tmp/out" | head -1 | sed 's/.*: //')
        echo "| $name | $r | $link | $plan | $dev | $host | $step | $tps | ${comm:--} | ${exposed:--} |"
    done
done
