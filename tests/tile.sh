#!/usr/bin/env bash
# Sequence tiling (passes/tile.c): tiny.ft at 8x its sequence (512 tokens), its blocks'
# per-token tails in 4 tiles, trains as the untiled plan does, on the cpu and emu
# backends, with swap (each tile recomputed just before its backward) and without:
#   - the first step's loss bitwise (every row's arithmetic is the untiled row's);
#   - later steps within 2^-10 of the loss: a weight's gradient, a norm weight's and a
#     LoRA factor's are sums over the tokens, which the tiles add in turn, each part
#     rounded to the gradient's bf16 (the untiled GEMM rounds the whole sum once);
#   - the tiled plan's device peak below the untiled one's under swap;
# a plan tiled block by block (--tile 4x1+1: the first block in 4 tiles, the second
# whole) trains as the untiled one too, with swap, on cpu and emu; then the planner
# choosing tiles by itself where the untiled plans do not fit (tiny at 8192 tokens, a
# budget between the two), and counts that differ block by block where the last block's
# backward, with every earlier block's tensors live, is what a budget does not hold;
# and the refusals of --tile.
# usage: tile.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses

"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null || bad data "ftc data failed"
sed -e 's/^  seq *= .*/  seq = 512/' -e 's/^  batch *= .*/  batch = 1/' models/tiny.ft > "$tmp/t.ft"
sed 's/^  optimizer = .*/&\n  lora(r = 8, alpha = 16, targets = [wq, wv, wo, wg, wu, wd])/' "$tmp/t.ft" > "$tmp/l.ft"

# close A B: every loss of run B within 2^-10 of run A's (relative), the first bitwise.
close() {
    paste "$1" "$2" | awk 'NR == 1 && $2 != $4 { exit 1 }
        { d = $2 - $4; if (d < 0) d = -d; if (d > $2 / 1024) exit 1 } END { if (NR < 2) exit 1 }'
}
peak() { grep -o '^  "peak_bytes": [0-9]*' "$1/memory.json" | grep -o '[0-9]*$'; }

for kind in full lora; do
    ft=$tmp/t.ft; [ $kind = lora ] && ft=$tmp/l.ft
    for remat in keep swap; do
        ts="1 4"
        [ $remat = swap ] && ts="1 4 4x1+1"
        for t in $ts; do
            p=$tmp/$kind.$remat.$t
            if ! "$ftc" compile "$ft" --micro-batch 1 --remat $remat --offload none --tile $t -o "$p.plan" \
                > "$p.out" 2>&1; then
                bad "$kind-$remat-$t-compiles" "$(tail -3 "$p.out")"
                continue
            fi
            steps=3 devs=cpu
            [ $remat = swap ] && steps=2 devs="cpu emu"
            for dev in $devs; do
                "$ftc" run "$p.plan" --data "$tmp/c.bin" --steps $steps --seed 5 --device $dev 2>&1 |
                    losses > "$p.$dev"
            done
        done
        a=$tmp/$kind.$remat.1 b=$tmp/$kind.$remat.4
        grep -q '^plan: .*, 4 sequence tiles' "$b.out" && ok "$kind-$remat-reported" ||
            bad "$kind-$remat-reported" "$(grep '^plan:' "$b.out")"
        close "$a.cpu" "$b.cpu" && ok "$kind-$remat-cpu" ||
            bad "$kind-$remat-cpu" "untiled $(tr '\n' ' ' < "$a.cpu"), tiled $(tr '\n' ' ' < "$b.cpu")"
        if [ $remat = swap ]; then
            close "$a.emu" "$b.emu" && ok "$kind-swap-emu" ||
                bad "$kind-swap-emu" "untiled $(tr '\n' ' ' < "$a.emu"), tiled $(tr '\n' ' ' < "$b.emu")"
            pa=$(peak "$a.plan") pb=$(peak "$b.plan")
            [ -n "$pa" ] && [ -n "$pb" ] && [ "$pb" -lt "$pa" ] && ok "$kind-swap-peak ($pa -> $pb bytes)" ||
                bad "$kind-swap-peak" "untiled $pa, tiled $pb bytes"
            m=$tmp/$kind.$remat.4x1+1
            grep -q '^plan: .*, sequence tiles 4 x1 + 1 x1' "$m.out" && grep -q -- '--tile 4x1+1:' "$m.out" &&
                ok "$kind-per-block-reported" || bad "$kind-per-block-reported" "$(grep -E '^plan:|tiles:' "$m.out")"
            for dev in cpu emu; do
                close "$a.$dev" "$m.$dev" && ok "$kind-per-block-$dev" ||
                    bad "$kind-per-block-$dev" "untiled $(tr '\n' ' ' < "$a.$dev"), per block $(tr '\n' ' ' < "$m.$dev")"
            done
        fi
    done
done

# The planner's own choice: at 8192 tokens (two tiles of 4096, TILE_MIN_ROWS) and a 25 MiB
# card, no untiled plan fits (26.8 MiB at the least) and a tiled one does.
sed -e 's/^  seq *= .*/  seq = 8192/' -e 's/^  batch *= .*/  batch = 1/' models/tiny.ft > "$tmp/long.ft"
out=$("$ftc" compile "$tmp/long.ft" --reserve 0 --budget 25M --micro-batch 1 -o "$tmp/long.plan" 2>&1)
grep -q '^plan: .*, 2 sequence tiles' <<<"$out" && [ -s "$tmp/long.plan/plan" ] &&
    ok planner-tiles || bad planner-tiles "$(grep -E '^(plan|nothing)' <<<"$out")"
out=$("$ftc" compile "$tmp/long.ft" --reserve 0 --budget 25M --micro-batch 1 --tile 1 -o "$tmp/no.plan" 2>&1)
[ $? = 1 ] && grep -q '^nothing fits' <<<"$out" && ok untiled-does-not-fit || bad untiled-does-not-fit "$out"

# Counts block by block: tiny with 6 blocks at 8192 tokens, selective recompute (each
# block keeps its GEMM outputs, so block l's backward runs with l blocks' tensors live).
# At 77 MiB the untiled plan does not fit (79.2 MiB: the last block's backward), 2 tiles
# in every block fit (76.0 MiB), and so does tiling the last block alone, which runs the
# other five blocks' GEMMs whole and is faster: the planner takes it and prints its spec.
sed 's/^  layers *= .*/  layers   = 6/' "$tmp/long.ft" > "$tmp/six.ft"
out=$("$ftc" compile "$tmp/six.ft" --reserve 0 --budget 77M --micro-batch 1 --remat selective --offload grads \
    -o "$tmp/six.plan" 2>&1)
mfu() { grep -E "^  micro-batch 1, .*$1 " <<<"$out" | grep -o '[0-9.]*% ' | tr -d '% '; }
uni=$(mfu ', 2 sequence tiles') mix=$(mfu ', sequence tiles 1 x5 \+ 2 x1')
grep -q '^plan: .*, sequence tiles 1 x5 + 2 x1$' <<<"$out" && grep -q -- '--tile 1x5+2:' <<<"$out" &&
    [ -n "$uni" ] && [ -n "$mix" ] && awk -v u="$uni" -v m="$mix" 'BEGIN { exit !(m > u) }' &&
    ok "planner-per-block (MFU $uni% uniform, $mix% per block)" ||
    bad planner-per-block "$(grep -E '^(plan|nothing)|tiles' <<<"$out")"
out=$("$ftc" compile "$tmp/six.ft" --reserve 0 --budget 77M --micro-batch 1 --remat selective --offload grads \
    --tile 1x5+2 -o "$tmp/six2.plan" 2>&1)
grep -q '^plan: .*, sequence tiles 1 x5 + 2 x1$' <<<"$out" && cmp -s "$tmp/six.plan/plan" "$tmp/six2.plan/plan" &&
    ok per-block-spec-reproduces || bad per-block-spec-reproduces "$(grep -E '^(plan|nothing)' <<<"$out")"

# Refusals: a count that does not divide the sequence; masks of an untiled block.
out=$("$ftc" compile "$tmp/t.ft" --tile 3 -o "$tmp/x.plan" 2>&1)
[ $? = 1 ] && grep -q "tile 3: the sequence of 512 tokens does not split into 3 equal tiles" <<<"$out" &&
    [ ! -e "$tmp/x.plan" ] && ok tile-divides || bad tile-divides "$out"
out=$("$ftc" compile "$tmp/t.ft" --tile 2 --remat tensors:3 -o "$tmp/x.plan" 2>&1)
[ $? = 1 ] && grep -q "tile with --remat tensors" <<<"$out" && ok tile-tensors || bad tile-tensors "$out"
for spec in 0 4x+1 4x1 x2+1 4x0+1 4x1+; do
    out=$("$ftc" compile "$tmp/t.ft" --tile $spec -o "$tmp/x.plan" 2>&1)
    [ $? = 2 ] && grep -q "tile takes a positive tile count N (every block's) or TxN+T2" <<<"$out" &&
        ok "tile-spec $spec" || bad "tile-spec $spec" "$out"
done
out=$("$ftc" compile "$tmp/t.ft" --tile 4x1+3 -o "$tmp/x.plan" 2>&1)
[ $? = 1 ] && grep -q "tile 4x1+3: the sequence of 512 tokens does not split into 3 equal tiles" <<<"$out" &&
    ok tile-spec-divides || bad tile-spec-divides "$out"
out=$("$ftc" compile "$tmp/t.ft" --tile 4x2+1 -o "$tmp/x.plan" 2>&1)
[ $? = 1 ] && grep -q "tile 4x2+1: the groups' 2 blocks of 2 must leave one for the last count" <<<"$out" &&
    [ ! -e "$tmp/x.plan" ] && ok tile-spec-blocks || bad tile-spec-blocks "$out"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
