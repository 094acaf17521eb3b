#!/usr/bin/env bash
# The command line end to end: exact parameter counts for every shipped model and
# for the imported configs, the memory figures the issues pin, and usage errors.
# usage: cli.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses

# expect NAME FILE LINE: `ftc compile FILE` prints LINE exactly. It may exit 1: the
# counts and the step with no technique applied come before the planner's verdict, and
# on this machine's RAM (the default --host-mem) the 7B plans that offload do not fit.
expect() {
    local name=$1 file=$2 line=$3 out rc
    out=$("$ftc" compile "$file" -o "$tmp/out.plan" 2>&1); rc=$?
    if [ $rc -gt 1 ]; then bad "$name" "compile failed ($rc): $out"; return; fi
    if grep -qxF -- "$line" <<<"$out"; then ok "$name"; else bad "$name" "no line '$line' in:
$out"; fi
}
counts() { echo "trainable params: $1 || all params: $1 || trainable%: 100.0000"; }

expect qwen2-7b     models/qwen2.ft      "$(counts 7,615,616,512)"
expect qwen2-0.5b   models/qwen2-0.5b.ft "$(counts 494,032,768)"
expect qwen2-1.5b   models/qwen2-1.5b.ft "$(counts 1,543,714,304)"
expect qwen2-72b    models/qwen2-72b.ft  "$(counts 72,706,203,648)"
expect llama2-7b    models/llama2-7b.ft  "$(counts 6,738,415,616)"
expect tiny         models/tiny.ft       "$(counts 125,504)"

# LoRA r=8 on q_proj, v_proj of Qwen2-7B, reported as PEFT does.
sed 's/^  optimizer = .*/&\n  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])/' \
    models/qwen2.ft > "$tmp/qwen2-lora.ft"
expect qwen2-lora "$tmp/qwen2-lora.ft" \
    "trainable params: 2,523,136 || all params: 7,618,139,648 || trainable%: 0.0331"

# bf16 mixed-precision AdamW: 16 bytes per parameter of model states.
expect qwen2-16-bytes models/qwen2.ft \
    "model states (weights + grads + optimizer + master): 121,849,864,192 bytes = 121.85 GB, 16.00 bytes/param"
# The field report's 7B fp16 + fp32 Adam state, 14 + 14 + 56 = 84 GB, and the fp32
# master copy fp16 AdamW needs (its regime without one is refused: tests/errors).
expect seed-84gb-and-master tests/ft/seed-7b.ft \
    "model states (weights + grads + optimizer + master): 112,000,000,000 bytes = 112.00 GB, 16.00 bytes/param"
sed 's/^  precision = bf16/  precision = bf16\n  master_weights = false/' models/qwen2.ft > "$tmp/qwen2-nomaster.ft"
expect qwen2-bf16-no-master-12-bytes "$tmp/qwen2-nomaster.ft" \
    "model states (weights + grads + optimizer + master): 91,387,398,144 bytes = 91.39 GB, 12.00 bytes/param"

# ftc import of the official configs gives the same counts; Qwen2-7B's is models/qwen2.ft.
for pair in qwen2-7b:7,615,616,512 qwen2-0.5b:494,032,768 llama2-7b:6,738,415,616 mistral-7b:7,241,732,096; do
    n=${pair%%:*} c=${pair#*:}
    if "$ftc" import "tests/fixtures/$n.config.json" > "$tmp/$n.ft" 2>"$tmp/err"; then
        expect "import-$n" "$tmp/$n.ft" "$(counts "$c")"
    else
        bad "import-$n" "$(cat "$tmp/err")"
    fi
done
# A model directory, as Hugging Face saves one, in place of its config.json.
mkdir -p "$tmp/Qwen2-7B" && cp tests/fixtures/qwen2-7b.config.json "$tmp/Qwen2-7B/config.json"
"$ftc" import "$tmp/Qwen2-7B" > "$tmp/dir.ft" 2>"$tmp/err" &&
    diff <(tail -n +2 "$tmp/dir.ft") <(tail -n +2 "$tmp/qwen2-7b.ft") >/dev/null &&
    ok import-model-directory || bad import-model-directory "$(cat "$tmp/err"; diff "$tmp/dir.ft" "$tmp/qwen2-7b.ft" | head -5)"
# (the model section: models/qwen2.ft's train section is the planning reference's)
if diff <(sed '1,2d; /^train {/,$d' "$tmp/qwen2-7b.ft") <(sed '1d; /^train {/,$d' models/qwen2.ft) >/dev/null; then
    ok import-qwen2-is-model
else
    bad import-qwen2-is-model "$(diff <(sed '1,2d; /^train {/,$d' "$tmp/qwen2-7b.ft") <(sed '1d; /^train {/,$d' models/qwen2.ft))"
fi

# The bound-first search against --exhaustive (every candidate placed, no search skipped by
# its bound): its plan as fast or faster, with fewer candidates placed. Full fine-tuning
# at 40G and 24G (levels skipped, mixed searches started where the budget falls), LoRA at
# 16G, a small model, eight ranks (the bucket finalists), tiny.ft near its floor.
sed 's/^  optimizer = .*/&\n  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])/' \
    models/qwen2.ft > "$tmp/search-lora.ft"
search_case() {   # NAME ARGS...
    local name=$1 a b sa sb pa pb
    shift
    a=$("$ftc" compile "$@" -o "$tmp/search-a.plan" 2>&1)
    b=$("$ftc" compile "$@" --exhaustive -o "$tmp/search-b.plan" 2>&1)
    sa=$(grep -m1 -o 'estimated step [0-9.]* s' <<<"$a" | awk '{print $3}')
    sb=$(grep -m1 -o 'estimated step [0-9.]* s' <<<"$b" | awk '{print $3}')
    pa=$(grep -m1 -o '[0-9]* placed' <<<"$a" | awk '{print $1}')
    pb=$(grep -m1 -o '[0-9]* placed' <<<"$b" | awk '{print $1}')
    if [ -n "$sa" ] && [ -n "$sb" ] && awk -v x="$sa" -v y="$sb" 'BEGIN { exit !(x <= y) }' &&
        [ "${pa:-0}" -lt "${pb:-0}" ]; then
        ok "search-$name"
    else
        bad "search-$name" "bound first: step ${sa:-none}, ${pa:-?} placed; exhaustive: step ${sb:-none}, ${pb:-?} placed"
    fi
}
search_case 7b-40g models/qwen2.ft --budget 40G --host-mem 256G
search_case 7b-24g models/qwen2.ft --budget 24G --host-mem 256G
search_case lora-16g "$tmp/search-lora.ft" --budget 16G --host-mem 256G
search_case 0.5b-16g models/qwen2-0.5b.ft --budget 16G --host-mem 64G
search_case 7b-8-ranks models/qwen2.ft --ranks 8 --gpu a100-80g --host-mem 256G
search_case tiny-1500m models/tiny.ft --budget 1500M

# Budgets: preset memory by default, sizes in both unit systems.
expect budget-default models/tiny.ft "budget 42,949,672,960 bytes = 40.00 GiB (a100-40g): fits, 38.83 GiB to spare"
out=$("$ftc" compile models/tiny.ft --budget 40GB --gpu h100-80g -o "$tmp/out.plan")
grep -q "^budget 40,000,000,000 bytes = 37.25 GiB (h100-80g): fits" <<<"$out" && ok budget-gb || bad budget-gb "$out"
# A budget past the card's memory is the card's, as it reports it (an RTX 4090 has 24564
# MiB, less than "24G"): the plan fits the real card.
out=$("$ftc" compile models/qwen2.ft --budget 24G --gpu rtx4090 --host-mem 256G -o "$tmp/r.plan")
dev=$(grep -o '^device arena  [^,]*, plus .* = [0-9.]* GiB' "$tmp/r.plan/memory.txt" | awk '{print $NF}')
if grep -q '^the rtx4090 reports 24564 MiB (23.99 GiB) of memory, less than the 24.00 GiB asked: planned for the card.s$' <<<"$out" &&
   grep -q '^budget        23.99 GiB (25757220864 bytes)$' "$tmp/r.plan/memory.txt" &&
   awk -v d="$dev" 'BEGIN { exit !(d * 1024 <= 24564) }'; then
    ok "budget-is-the-card's ($dev GiB on a 24564 MiB card)"
else
    bad budget-is-the-card\'s "$dev: $(grep 'reports\|^plan: micro' <<<"$out")"
fi
# The host the cost model assumes is the training server's, from flags: the same plan
# on every compiling machine, recorded in the plan.
out=$("$ftc" compile models/tiny.ft --offload optimizer --host-cores 8 --host-adamw 1.5G --host-link 12.5 -o "$tmp/h.plan")
if grep -q '^planner: .*(host: 8 cores x 1500 M AdamW parameters/s, link 12.5 GB/s)$' <<<"$out" &&
   grep -q '^host cores=8 adamw_per_core=1.5e+09 link=1.25e+10 ' "$tmp/h.plan/plan"; then
    ok host-flags-recorded
else
    bad host-flags-recorded "$(grep '^planner' <<<"$out"; grep '^host' "$tmp/h.plan/plan")"
fi
for flag in "--host-cores 0" "--host-adamw fast" "--host-adamw -1" "--host-link 0" "--reserve -1M"; do
    "$ftc" compile models/tiny.ft $flag -o "$tmp/x.plan" >/dev/null 2>&1; rc=$?
    [ $rc = 2 ] && [ ! -e "$tmp/x.plan" ] || { bad "usage-$flag" "exit $rc"; continue; }
done
ok host-flag-usage-errors
out=$("$ftc" compile models/qwen2.ft --budget 40G --host-mem 256G -o "$tmp/q.plan")
grep -q "does not fit with no technique applied" <<<"$out" && ok qwen2-40g-no-technique || bad qwen2-40g-no-technique "$out"
# Full fine-tuning of Qwen2-7B fits 40G: weights on the device, the rest offloaded.
if grep -q '^plan: micro-batch [0-9]*, .*offload optimizer+master' <<<"$out" && [ -f "$tmp/q.plan/report.txt" ] &&
   grep -q 'DOES NOT FIT' "$tmp/q.plan/memory.txt"; then
    bad qwen2-full-ft-fits-40g "memory.txt says it does not fit"
elif grep -q '^plan: micro-batch' <<<"$out"; then
    ok "qwen2-full-ft-fits-40g ($(grep '^plan: micro' <<<"$out" | sed 's/^plan: //'))"
else
    bad qwen2-full-ft-fits-40g "$out"
fi
# AdamW8bit: Qwen2-7B's AdamW state, 56.74 GiB of fp32 moments, falls to 14.41 GiB of 8-bit
# codes and fp32 absmaxes (2 + 8/256 bytes an element, whose tensors are multiples of 256;
# 32-bit moments for the 28 x 5 + 1 norm weights and biases below 4096 elements): by hand,
# 7,615,283,200 x (2 + 1/32) + 333,312 x 8 = 15,471,210,496 bytes, in the naive table and in
# the plan's buffers (they add the gradients' reduction, 16 bytes); 10.03 bytes a parameter.
sed 's/optimizer = adamw(/optimizer = adamw8bit(/' models/qwen2.ft > "$tmp/q8.ft"
out8=$("$ftc" compile "$tmp/q8.ft" --budget 40G --host-mem 256G -o "$tmp/q8.plan" 2>&1)
sum() { awk '$1 == "buffer" && $4 == "optimizer" { s += $7 } END { printf "%.0f", s }' "$1/plan"; }
if grep -qxF '  optimizer            60,924,932,096        56.74        60.92' <<<"$out" &&
   grep -qxF '  optimizer            15,471,210,496        14.41        15.47' <<<"$out8" &&
   grep -qxF 'model states (weights + grads + optimizer + master): 76,396,142,592 bytes = 76.40 GB, 10.03 bytes/param' <<<"$out8" &&
   grep -q '^  bf16 mixed (fp32 master), adamw8bit  *10.03 = 2.00 + 2.00 + 2.03 + 4.00 ' <<<"$out" &&
   [ "$(sum "$tmp/q.plan")" = 60924932112 ] && [ "$(sum "$tmp/q8.plan")" = 15471210512 ]; then
    host() { grep -o '; host [0-9.]* GiB' | head -1 | cut -d' ' -f3-; }
    ok "qwen2-adamw8bit-state (AdamW 56.74 GiB -> 14.41 GiB; the plan's host $(host <<<"$out") -> $(host <<<"$out8"))"
else
    bad qwen2-adamw8bit-state "$(grep 'optimizer  \|bytes/param\|adamw8bit' <<<"$out8"; sum "$tmp/q8.plan")"
fi
# Nothing fits: exit 1, the smallest plan and what would fit, nothing written. With the
# weights kept on the device (--offload grads at most), 14G is too little for Qwen2-7B's
# full fine-tuning; the analysis says what streaming them, or QLoRA, would need.
"$ftc" compile models/qwen2.ft --budget 14G --host-mem 256G --offload grads -o "$tmp/none.plan" > "$tmp/o" 2>&1; rc=$?
if [ $rc = 1 ] && [ ! -e "$tmp/none.plan" ] && grep -q '^nothing fits 14.00 GiB: the smallest plan needs' "$tmp/o" &&
   grep -q 'with the weights streamed from the host (--offload weights): [0-9.]* GiB on the device (fits)' "$tmp/o" &&
   grep -q 'and quantize(nf4, double_quant = true): [0-9.]* GiB on the device (fits)' "$tmp/o"; then
    ok nothing-fits-14g-weights-kept
else
    bad nothing-fits-14g-weights-kept "exit $rc: $(tail -8 "$tmp/o")"
fi
# Full fine-tuning with AdamW where the host is too small for its state: AdamW8bit's is
# offered, with the planner's choice when it fits (64G of host memory) and what it still
# needs when not (23G).
for hm in 64G 23G; do
    "$ftc" compile models/qwen2.ft --budget 40G --host-mem $hm -o "$tmp/n8.plan" > "$tmp/o" 2>&1; rc=$?
    want='the optimizer state 56.74 GiB -> 14.41 GiB): the planner.s choice is micro-batch [0-9]*, .*, [0-9.]* GiB on the device and [0-9.]* GiB on the host (fits)$'
    [ $hm = 23G ] && want='the optimizer state 56.74 GiB -> 14.41 GiB): the model states still need 42.78 GiB of host memory where they go (still too much)$'
    # (a shorter sequence shrinks no model state: none is offered where the host is short)
    if [ $rc = 1 ] && [ ! -e "$tmp/n8.plan" ] && grep -q '^nothing fits 40.00 GiB: the model states need 85.11 GiB of host memory' "$tmp/o" &&
       grep -q "^  with optimizer = adamw8bit(...) (its moments 8-bit: $want" "$tmp/o" &&
       ! grep -q '^  with seq = ' "$tmp/o"; then
        ok "nothing-fits-offers-adamw8bit-host-$hm"
    else
        bad "nothing-fits-offers-adamw8bit-host-$hm" "exit $rc: $(tail -8 "$tmp/o")"
    fi
done
# Each change is judged against both budgets: streaming Qwen2-1.5B's weights leaves room on
# the device but needs more host memory than 8G, and says so; LoRA fits both.
"$ftc" compile models/qwen2-1.5b.ft --budget 4385M --host-mem 8G --offload grads -o "$tmp/n.plan" > "$tmp/o" 2>&1; rc=$?
if [ $rc = 1 ] && [ ! -e "$tmp/n.plan" ] &&
   grep -q '^  with the weights streamed from the host (--offload weights): [0-9.]* GiB on the device and [0-9.]* GiB on the host (more than --host-mem)$' "$tmp/o" &&
   grep -q '^  with lora(r = 8, targets = \[wq, wv\]): [0-9.]* GiB on the device (fits)$' "$tmp/o"; then
    ok nothing-fits-host-too-small-for-a-change
else
    bad nothing-fits-host-too-small-for-a-change "exit $rc: $(tail -8 "$tmp/o")"
fi
# bf16_pure's Kahan buffer is a choice: on by default (the report's table marks it), what
# the what-if offers to drop when nothing fits; kahan = false plans without it (4 bytes a
# parameter of optimizer state, not 6); kahan = true where a master copy takes the updates
# is refused at its place.
sed 's/  precision = bf16$/  precision = bf16_pure/' models/qwen2-0.5b.ft > "$tmp/pure.ft"
"$ftc" compile "$tmp/pure.ft" --budget 5G --offload none -o "$tmp/pure.plan" > "$tmp/o" 2>&1; rc=$?
sed 's/weight_decay = 0.0)/weight_decay = 0.0, kahan = false)/' "$tmp/pure.ft" > "$tmp/nok.ft"
"$ftc" compile "$tmp/nok.ft" --budget 5G --offload none -o "$tmp/nok.plan" > "$tmp/o2" 2>&1; rc2=$?
if [ $rc = 1 ] && grep -q '^  bf16_pure (Kahan-compensated) .* 6.00 .*<- this train section$' "$tmp/o" &&
   grep -q "^  without Kahan summation (adamw(..., kahan = false): .*the optimizer state 2.76 GiB -> 1.84 GiB): the planner's choice is .* (fits)$" "$tmp/o" &&
   [ $rc2 = 0 ] && grep -q '^  bf16_pure, kahan = false .* 4.00 .*<- this train section$' "$tmp/o2" &&
   ! grep -q '^buffer [0-9]* kahan\.' "$tmp/nok.plan/plan" &&
   "$ftc" compile "$tmp/pure.ft" --budget 8G --offload none -o "$tmp/pk.plan" >/dev/null 2>&1 &&
   grep -q '^buffer [0-9]* kahan\.embed optimizer ' "$tmp/pk.plan/plan"; then
    ok kahan-a-choice
else
    bad kahan-a-choice "exit $rc, $rc2: $(grep -i 'kahan\|^plan\|nothing' "$tmp/o" "$tmp/o2" | head -8)"
fi
sed 's/weight_decay = 0.0)/weight_decay = 0.0, kahan = true)/' models/qwen2-0.5b.ft > "$tmp/k.ft"
"$ftc" compile "$tmp/k.ft" -o "$tmp/k.plan" > "$tmp/o" 2>&1; rc=$?
if [ $rc = 1 ] && [ ! -e "$tmp/k.plan" ] &&
   grep -q "k.ft:[0-9]*:[0-9]*: error: kahan compensates bf16 weights that AdamW updates in place (precision = bf16_pure, no master weights); here the fp32 master copy takes every update whole" "$tmp/o"; then
    ok kahan-refused-with-a-master
else
    bad kahan-refused-with-a-master "exit $rc: $(head -3 "$tmp/o")"
fi
# Gradients that die young: Qwen2-7B's full fine-tuning in bf16_pure at micro-batch 1
# (seq 2048, no clipping, a100-80g), Kahan off. With each update inside backward the
# gradients never live the whole step, and the plan fits --budget 46G --offload none, its
# peak live bytes at most 45 GiB; with every update after backward (--update step) nothing
# fits. With Kahan on, nothing fits either, and the what-if names the figure without it
# (and the updates inside backward). --update backward is refused where clipping needs
# every gradient first; a bad --update is a usage error.
sed -e 's/^  batch     = 32/  batch     = 1/' -e 's/^  precision = bf16$/  precision = bf16_pure/' models/qwen2.ft > "$tmp/q7k.ft"
sed 's/weight_decay = 0.0)/weight_decay = 0.0, kahan = false)/' "$tmp/q7k.ft" > "$tmp/q7.ft"
"$ftc" compile "$tmp/q7.ft" --budget 46G --offload none --gpu a100-80g -o "$tmp/q7.plan" > "$tmp/o" 2>&1; rc=$?
"$ftc" compile "$tmp/q7.ft" --budget 46G --offload none --gpu a100-80g --update step -o "$tmp/q7s.plan" > "$tmp/o2" 2>&1; rc2=$?
"$ftc" compile "$tmp/q7k.ft" --budget 46G --offload none --gpu a100-80g -o "$tmp/q7k.plan" > "$tmp/o3" 2>&1; rc3=$?
peak=$(awk '/^peak live/ { print $3; exit }' "$tmp/q7.plan/memory.txt" 2>/dev/null)
if [ $rc = 0 ] && grep -q '^plan: micro-batch 1, .*offload none, updates in backward$' "$tmp/o" &&
   grep -q '^  updates inside backward: each parameter.s adamw update runs as soon as its gradient is complete' "$tmp/o" &&
   grep -q '^ftc: .*pure bf16, updates not Kahan-compensated (kahan = false)' "$tmp/o" &&
   awk -v p="$peak" 'BEGIN { exit !(p > 40 && p <= 45) }' && [ $rc2 = 1 ] && [ ! -e "$tmp/q7s.plan" ] &&
   [ $rc3 = 1 ] && grep -q '^ftc: .*pure bf16, Kahan-compensated updates (kahan = true: 2 bytes a parameter)' "$tmp/o3" &&
   grep -q "^  without Kahan summation (adamw(..., kahan = false): .*the optimizer state 42.56 GiB -> 28.37 GiB): the planner's choice is .*, updates in backward, [0-9.]* GiB on the device .*(fits)$" "$tmp/o3"; then
    ok "qwen2-bf16-pure-updates-in-backward-46g (peak $peak GiB; $(grep '^  device' "$tmp/o" | sed 's/^  //; s/ (.*//'))"
else
    bad qwen2-bf16-pure-updates-in-backward-46g "exit $rc, $rc2, $rc3, peak $peak: $(grep '^plan\|^nothing\|Kahan summation' "$tmp/o" "$tmp/o2" "$tmp/o3")"
fi
sed 's/^  optimizer = .*/&\n  clip      = 1.0/' models/tiny.ft > "$tmp/clip.ft"
"$ftc" compile "$tmp/clip.ft" --update backward -o "$tmp/x.plan" > "$tmp/o" 2>&1; rc=$?
"$ftc" compile models/tiny.ft --update sideways -o "$tmp/x.plan" > "$tmp/o2" 2>&1; rc2=$?
if [ $rc = 1 ] && [ $rc2 = 2 ] && [ ! -e "$tmp/x.plan" ] &&
   grep -q '^<command line>:1:[0-9]*: error: --update backward: clipping (clip) scales every update by the norm of all the gradients$' "$tmp/o" &&
   grep -q "error: --update takes step" "$tmp/o2" &&
   "$ftc" compile "$tmp/clip.ft" --micro-batch 8 --offload none -o "$tmp/cl.plan" | grep -q '^  the gradients (.*) live the whole step: clipping (clip = 1) scales every update'; then
    ok update-in-backward-refused-where-clipping
else
    bad update-in-backward-refused-where-clipping "exit $rc, $rc2: $(head -2 "$tmp/o" "$tmp/o2")"
fi
# Recompute chosen per block: Phi-3-mini on an L4 at 12 GiB keeps tensor by tensor, the later
# blocks more than the first (their saved tensors wait less of backward), and the plan
# it chose is the one --remat tensors:KxN+J asks for (byte for byte, but the range of host
# rates over which the choice holds, which depends on what else was tried).
out=$("$ftc" compile models/phi-3-mini-4k.ft --gpu l4 --budget 12G --host-mem 256G -o "$tmp/pb.plan" 2>&1)
spec=$(sed -n 's/^  kept block by block as --remat tensors:\([0-9^,x+]*\) asks .*/\1/p' <<<"$out")
if [ -n "$spec" ] && grep -q '^plan: micro-batch 2, recompute tensors (.*), offload optimizer+master+grads+weights$' <<<"$out" &&
   "$ftc" compile models/phi-3-mini-4k.ft --gpu l4 --budget 12G --host-mem 256G --micro-batch 2 --offload weights \
       --remat "tensors:$spec" -o "$tmp/pb2.plan" >/dev/null 2>&1 &&
   diff <(grep -v '^host ' "$tmp/pb.plan/plan") <(grep -v '^host ' "$tmp/pb2.plan/plan") >/dev/null; then
    ok "recompute-per-block-reproduced (tensors:$spec)"
else
    bad recompute-per-block-reproduced "spec '$spec': $(grep '^plan: micro' <<<"$out")"
fi
# A plan whose blocks the three greedy orders leave 22 KB (0.36%) above the liveness bound
# (a 4 MiB GEMM workspace at each instruction, a recompute's stats living across them):
# the repaired lifetime order places it at the bound.
out=$("$ftc" compile models/tiny.ft --micro-batch 1 --offload none --no-fusion --remat tensors:8x1+11 \
      -o "$tmp/frag.plan" 2>&1)
grep -q "^device arena .*(0.00% above it)" <<<"$out" && ok arena-at-the-bound ||
    bad arena-at-the-bound "$(grep '^device arena' <<<"$out")"
# A block's re-runs run at their readers, in its own backward: not hoisted into a later
# block's backward, where they frees nothing and only hold their copies (by score alone,
# the list scheduler ran block 0's norm and v projection again as backward started).
"$ftc" compile models/tiny.ft --micro-batch 1 --offload none --no-fusion --remat tensors:8x1+11 \
    -o "$tmp/rr.plan" >/dev/null 2>&1
read -r first last < <(awk '/^phase backward/ {b = 1} /^phase optimizer/ {b = 0}
    b && /^[0-9]+ / && / layer=0 / && /recompute=1/ && !f {f = $1}
    b && /^[0-9]+ / && / layer=1 / {l = $1} END {print f + 0, l + 0}' "$tmp/rr.plan/plan")
[ "$first" -gt "$last" ] && ok rerun-at-its-block ||
    bad rerun-at-its-block "block 0's first re-run at instruction $first, block 1's backward ends at $last"
# A mask per block chosen off the chain (keep_masks.c): on a 3-block copy of tiny.ft at a
# budget between full recompute's and keep's, the plan keeps a mask no chain position
# names (a ^ in the spec the report prints), fits, is faster than every plan of two chain
# masks (the first blocks one, the rest one keeping as much or more; the chain's first
# five masks are alike: nothing reads the four tensors they differ by), and the spec
# reproduces it.
sed -E 's/^( *layers *= *)[0-9]+/\13/' models/tiny.ft > "$tmp/tiny3.ft"
fixed="--micro-batch 1 --offload none --no-fusion"
# shellcheck disable=SC2086
"$ftc" compile "$tmp/tiny3.ft" $fixed --remat full -o "$tmp/full3.plan" >/dev/null 2>&1
# shellcheck disable=SC2086
"$ftc" compile "$tmp/tiny3.ft" $fixed --remat keep -o "$tmp/keep3.plan" >/dev/null 2>&1
arena() { awk '$1 == "arena" && $2 == "device" {print $3}' "$1/plan"; }
budget=$(awk -v r="$(awk '$1 == "reserve" {print $2}' "$tmp/full3.plan/plan")" -v f="$(arena "$tmp/full3.plan")" \
    -v k="$(arena "$tmp/keep3.plan")" 'BEGIN {printf "%d", r + f + (k - f) * 0.065}')
# shellcheck disable=SC2086
out=$("$ftc" compile "$tmp/tiny3.ft" $fixed --budget "$budget" -o "$tmp/m3.plan" 2>&1)
spec=$(sed -n 's/^  kept block by block as --remat tensors:\([0-9^,x+]*\) asks .*/\1/p' <<<"$out")
step() { grep -o 'step_us=[0-9.]*' "$1/plan" | head -1 | cut -d= -f2; }
best2=""
for p in $(seq 4 18); do for q in $(seq "$p" 18); do for g in "${p}x2+$q" "${p}x1+$q"; do
    # shellcheck disable=SC2086
    "$ftc" compile "$tmp/tiny3.ft" $fixed --budget "$budget" --remat "tensors:$g" -o "$tmp/p3.plan" \
        >/dev/null 2>&1 && ! grep -q 'DOES NOT FIT' "$tmp/p3.plan/memory.txt" || continue
    s=$(step "$tmp/p3.plan")
    [ -z "$best2" ] || awk -v a="$s" -v b="$best2" 'BEGIN {exit !(a < b)}' && best2=$s
done; done; done
# shellcheck disable=SC2086
if [[ "$spec" == *^* ]] && ! grep -q 'DOES NOT FIT' "$tmp/m3.plan/memory.txt" && [ -n "$best2" ] &&
   awk -v a="$(step "$tmp/m3.plan")" -v b="$best2" 'BEGIN {exit !(a < b)}' &&
   "$ftc" compile "$tmp/tiny3.ft" $fixed --budget "$budget" --remat "tensors:$spec" -o "$tmp/m3b.plan" >/dev/null 2>&1 &&
   diff <(grep -v '^budget ' "$tmp/m3.plan/plan") <(grep -v '^budget ' "$tmp/m3b.plan/plan") >/dev/null; then
    ok "masks-off-the-chain (tensors:$spec, step $(step "$tmp/m3.plan") us, two chain masks at best $best2 us)"
else
    bad masks-off-the-chain "budget $budget: spec '$spec', step $(step "$tmp/m3.plan"), two masks $best2"
fi
# At the budget full recompute needs, on a 4-block copy of tiny.ft, per-block recompute
# (the last block keeping more, the first ones less) fits in the same bytes and is faster:
# the planner's per-block search starts from full recompute too.
sed -E 's/^( *layers *= *)[0-9]+/\14/' models/tiny.ft > "$tmp/tiny4.ft"
# shellcheck disable=SC2086
"$ftc" compile "$tmp/tiny4.ft" $fixed --remat full -o "$tmp/full4.plan" >/dev/null 2>&1
budget=$(awk '$1 == "reserve" {r = $2} $1 == "arena" && $2 == "device" {a = $3} END {print r + a}' "$tmp/full4.plan/plan")
# shellcheck disable=SC2086
out=$("$ftc" compile "$tmp/tiny4.ft" $fixed --budget "$budget" -o "$tmp/pb4.plan" 2>&1)
if grep -q '^plan: micro-batch 1, recompute tensors (.* x[0-9]* + [0-9]* x[0-9]*)' <<<"$out" &&
   awk -v a="$(step "$tmp/pb4.plan")" -v b="$(step "$tmp/full4.plan")" 'BEGIN {exit !(a < b)}'; then
    ok "per-block-from-full ($(grep '^plan: micro' <<<"$out" | sed 's/^plan: //'))"
else
    bad per-block-from-full "budget $budget: $(grep '^plan: micro' <<<"$out")"
fi
# A mask per block: groups of blocks, each its count, the last the blocks left.
out=$("$ftc" compile "$tmp/tiny4.ft" --remat tensors:2x1+1x1+3x1+8 -o "$tmp/g4.plan" 2>&1)
"$ftc" compile models/tiny.ft --remat tensors:3x1+5x1+2 -o "$tmp/g2.plan" > "$tmp/o" 2>&1; rc=$?
if grep -q '^plan: micro-batch [0-9]*, recompute tensors (2 of 18 kept a block x1 + 1 x1 + 3 x1 + 8 x1)' <<<"$out" &&
   [ $rc = 1 ] && [ ! -e "$tmp/g2.plan" ] &&
   grep -q "error: --remat tensors:KxN+J: the groups' 2 blocks of 2 must leave one for J" "$tmp/o"; then
    ok remat-tensors-groups
else
    bad remat-tensors-groups "$(grep '^plan: micro' <<<"$out"); exit $rc: $(head -1 "$tmp/o")"
fi
"$ftc" compile models/tiny.ft --remat tensors:99 -o "$tmp/rt.plan" > "$tmp/o" 2>&1; rc=$?
"$ftc" compile models/tiny.ft --remat tensors -o "$tmp/rt.plan" > "$tmp/o2" 2>&1; rc2=$?
[ $rc = 1 ] && [ $rc2 = 2 ] && [ ! -e "$tmp/rt.plan" ] &&
    grep -q "error: --remat tensors: a block has 18 tensors to keep or recompute, not 99" "$tmp/o" &&
    grep -q "error: --remat takes keep, selective, full, swap, or tensors:K" "$tmp/o2" &&
    ok remat-tensors-errors || bad remat-tensors-errors "exit $rc, $rc2: $(head -1 "$tmp/o" "$tmp/o2")"
# Streaming the weights from the host, Qwen2-7B's full fine-tuning fits 12G of an RTX 4090.
out=$("$ftc" compile models/qwen2.ft --budget 12G --gpu rtx4090 --host-mem 256G -o "$tmp/s.plan" 2>&1)
if grep -q '^plan: micro-batch [0-9]*, .*offload optimizer+master+grads+weights' <<<"$out" &&
   ! grep -q 'DOES NOT FIT' "$tmp/s.plan/memory.txt" && grep -q '^buffer [0-9]* decoder.0.wq.dev0 weights device ' "$tmp/s.plan/plan"; then
    ok "qwen2-full-ft-fits-12g-streamed ($(grep '^plan: micro' <<<"$out" | sed 's/^plan: //'))"
else
    bad qwen2-full-ft-fits-12g-streamed "$(grep '^plan\|nothing' <<<"$out")"
fi

# --dump-ir shows the graph, every node with the line it came from.
out=$("$ftc" compile models/tiny.ft --dump-ir -o "$tmp/out.plan")
grep -q "= attention .*causal=1 .*@36:9" <<<"$out" && ok dump-ir || bad dump-ir "$(head -20 <<<"$out")"

# --dump-after PASS: the IR after that pass alone (remat runs for every plan, doing
# nothing when every block keeps its tensors).
out=$("$ftc" compile models/tiny.ft --dump-after remat -o "$tmp/out.plan")
if [ "$(grep -c '^# after ' <<<"$out")" = 1 ] && grep -q '^# after remat$' <<<"$out" &&
   grep -q "= attention_bwd " <<<"$out"; then
    ok dump-after-remat
else
    bad dump-after-remat "$(grep '^# after' <<<"$out")"
fi
# ... and after streams, the copies and host work of an offloaded plan with their events.
out=$("$ftc" compile models/tiny.ft --offload grads --remat swap --dump-after streams -o "$tmp/out.plan")
if grep -q "= copy .*\[d2h\]" <<<"$out" && grep -q "= adamw .*\[host\]" <<<"$out" &&
   grep -q "stream=d2h" "$tmp/out.plan/plan" && grep -q " wait=" "$tmp/out.plan/plan"; then
    ok dump-after-streams
else
    bad dump-after-streams "$(grep -m3 'copy\|adamw' <<<"$out")"
fi

# Fusion: the fused kernels' intermediates are virtual buffers (no bytes) in the plan and
# absent from memory.json; with --no-fusion they are ordinary buffers (but for the values
# fusion recomputes inside backward kernels, NAME.re, which only fusion makes).
"$ftc" compile models/tiny.ft -o "$tmp/fused.plan" >/dev/null
"$ftc" compile models/tiny.ft --no-fusion -o "$tmp/unfused.plan" >/dev/null
virtual=$(awk '/^buffer .* virtual=1/ {print $3}' "$tmp/fused.plan/plan")
leaked=0
for v in $virtual; do grep -q "\"name\": \"$v\"" "$tmp/fused.plan/memory.json" && leaked=$((leaked+1)); done
kept=0 plain=0
for v in $virtual; do
    case $v in *.re) continue ;; esac
    plain=$((plain+1))
    grep -q "\"name\": \"$v\"" "$tmp/unfused.plan/memory.json" && kept=$((kept+1))
done
n=$(wc -w <<<"$virtual")
if [ "$n" -gt 0 ] && [ $leaked = 0 ] && [ $kept = $plain ] && grep -q " fused steps=" "$tmp/fused.plan/plan" &&
   ! grep -q " fused " "$tmp/unfused.plan/plan"; then
    ok "fusion-removes-intermediates ($n virtual buffers)"
else
    bad fusion-removes-intermediates "$n virtual, $leaked in memory.json, $kept unfused"
fi

# The residual's add taken into the RMSNorm after it (one kernel, add_rmsnorm): every norm
# that reads an add's sum, and the same bits as the unfused plan's add then norm.
"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null
"$ftc" run "$tmp/fused.plan" --data "$tmp/c.bin" --steps 3 --seed 7 --poison --save "$tmp/fused.w" >/dev/null &&
    "$ftc" run "$tmp/unfused.plan" --data "$tmp/c.bin" --steps 3 --seed 7 --poison --save "$tmp/unfused.w" >/dev/null
merged=$(grep -c '^[0-9]* add_rmsnorm ' "$tmp/fused.plan/plan")
if [ "$merged" -gt 0 ] && ! grep -q ' add_rmsnorm ' "$tmp/unfused.plan/plan" &&
   [ "$(grep -c '^[0-9]* rmsnorm ' "$tmp/unfused.plan/plan")" = $((merged + $(grep -c '^[0-9]* rmsnorm ' "$tmp/fused.plan/plan"))) ] &&
   cmp -s "$tmp/fused.w/model.safetensors" "$tmp/unfused.w/model.safetensors"; then
    ok "add-into-rmsnorm-bitwise ($merged norms take their add)"
else
    bad add-into-rmsnorm-bitwise "$merged merged; weights $(cmp "$tmp/fused.w/model.safetensors" "$tmp/unfused.w/model.safetensors" 2>&1)"
fi

# A budget sweep across the edge where plans start to fit: every plan compile writes is
# verified, so any budget whose plan breaks an invariant (a lifetime, a hazard, an arena
# overlap) surfaces as an internal error. Full fine-tuning, LoRA and QLoRA.
lora='  lora(r = 8, alpha = 16, dropout = 0.1, targets = [wq, wv])'
sed "s/^  optimizer = .*/&\n$lora/" models/tiny.ft > "$tmp/lora.ft"
sed "s/^  optimizer = .*/&\n$lora\n  quantize(nf4, double_quant = true)/" models/tiny.ft > "$tmp/qlora.ft"
swept=0 fitted=0 broke=""
for src in models/tiny.ft "$tmp/lora.ft" "$tmp/qlora.ft"; do
    for k in $(seq 0 4 88); do
        b=$(( (1197 << 20) + k * 131072 ))
        out=$("$ftc" compile "$src" --budget "$b" -o "$tmp/sweep.plan" 2>&1); rc=$?
        swept=$((swept+1))
        [ $rc = 0 ] && fitted=$((fitted+1))
        if [ $rc -gt 1 ] || grep -q "internal error" <<<"$out"; then
            broke="$broke $(basename "$src")@$b"
        fi
    done
done
if [ -z "$broke" ] && [ $fitted -gt 0 ] && [ $fitted -lt $swept ]; then
    ok "budget-sweep ($fitted of $swept budgets fit, every plan verified)"
else
    bad budget-sweep "broke at:$broke ($fitted of $swept fit)"
fi

# --emit-graph: the training graph for external solvers.
if "$ftc" compile models/tiny.ft --emit-graph "$tmp/g.json" -o "$tmp/g.plan" >/dev/null &&
   grep -q '"op": "attention_bwd", "phase": "backward"' "$tmp/g.json" && grep -q '"edges": \[' "$tmp/g.json" &&
   [ "$(grep -c '"op":' "$tmp/g.json")" -gt 100 ]; then
    ok emit-graph
else
    bad emit-graph "$(head -c 300 "$tmp/g.json" 2>&1)"
fi

# Usage: help succeeds for every command, no command is a usage error (2), a bad
# micro-batch too.
"$ftc" help >/dev/null && ok help || bad help "exit $?"
for c in compile run eval inspect data import; do
    out=$("$ftc" help $c) && grep -q "^usage: ftc $c" <<<"$out" && ok "help-$c" || bad "help-$c" "exit $?: $out"
    out=$("$ftc" $c --help) && grep -q "^usage: ftc $c" <<<"$out" && ok "$c-help" || bad "$c-help" "exit $?: $out"
done
out=$("$ftc" help)
grep -q '^  eval DIR --data FILE  *evaluate: the loss and perplexity of weights on a token file$' <<<"$out" &&
    "$ftc" help eval | grep -q '^  --adapter DIR  *with LoRA: the adapters over the weights' && ok help-lists-eval ||
    bad help-lists-eval "$out"
# ftc help ft: the train section's reference as frontend/README.md has it (fences dropped).
out=$("$ftc" help ft) && grep -q "^  lora(r = " <<<"$out" && grep -q "^  optimizer = adamw(" <<<"$out" &&
    grep -q "^  quantize(nf4" <<<"$out" && grep -q "^  lr_schedule = " <<<"$out" && ! grep -q '```' <<<"$out" &&
    ok help-ft || bad help-ft "exit $?: $(head -5 <<<"$out")"
"$ftc" >/dev/null 2>&1; [ $? = 2 ] && ok no-command || bad no-command "exit not 2"
"$ftc" compile models/tiny.ft --micro-batch 3 -o "$tmp/out.plan" >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc = 1 ] && [ ! -s "$tmp/o" ] && grep -q "does not divide the global batch 8" "$tmp/e" \
    && ok micro-batch-divides || bad micro-batch-divides "exit $rc: $(cat "$tmp/e")"

# -o never deletes what is not ftc's: a directory of other files is refused before any
# planning (its files intact), a plan directory is replaced keeping the user's files and
# folders in it, and what an ftc killed while writing left beside it is cleaned up.
mkdir -p "$tmp/mm" && cp models/tiny.ft models/qwen2.ft "$tmp/mm/"
"$ftc" compile "$tmp/mm/tiny.ft" -o "$tmp/mm" >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc = 1 ] && [ ! -s "$tmp/o" ] && grep -q "is a directory that is not empty and holds no plan" "$tmp/e" &&
   cmp -s "$tmp/mm/tiny.ft" models/tiny.ft && cmp -s "$tmp/mm/qwen2.ft" models/qwen2.ft &&
   [ "$(ls "$tmp/mm" | wc -l)" = 2 ]; then ok o-refuses-foreign-dir; else
    bad o-refuses-foreign-dir "exit $rc: $(cat "$tmp/e"); $(ls "$tmp/mm")"; fi
: > "$tmp/afile"
"$ftc" compile models/tiny.ft -o "$tmp/afile" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 1 ] && grep -q "it is a file, not a directory" "$tmp/e" && [ -f "$tmp/afile" ] && ok o-refuses-file ||
    bad o-refuses-file "exit $rc: $(cat "$tmp/e")"
"$ftc" compile models/tiny.ft -o "$tmp/pd" >/dev/null
echo "mine" > "$tmp/pd/notes.txt" && mkdir "$tmp/pd/ckpt" && echo w > "$tmp/pd/ckpt/model.safetensors"
dead=$(sh -c 'echo $$')   # a process that has exited
mkdir "$tmp/pd.tmp.$dead" "$tmp/pd.old.$dead" "$tmp/pd.tmp.$$" &&
    touch "$tmp/pd.tmp.$dead/plan" "$tmp/pd.old.$dead/kernels.cu" "$tmp/pd.tmp.$$/plan"
if "$ftc" compile models/tiny.ft -o "$tmp/pd" >/dev/null && [ "$(cat "$tmp/pd/notes.txt")" = mine ] &&
   [ -s "$tmp/pd/ckpt/model.safetensors" ] && [ -s "$tmp/pd/plan" ]; then ok o-keeps-user-files; else
    bad o-keeps-user-files "$(ls "$tmp/pd")"; fi
# the dead process's leftovers gone, a live one's (this shell's) kept
[ ! -e "$tmp/pd.tmp.$dead" ] && [ ! -e "$tmp/pd.old.$dead" ] && [ -e "$tmp/pd.tmp.$$" ] && ok o-cleans-leftovers ||
    bad o-cleans-leftovers "$(ls -d "$tmp"/pd.*)"
mkdir "$tmp/empty" && "$ftc" compile models/tiny.ft -o "$tmp/empty" >/dev/null && [ -s "$tmp/empty/plan" ] &&
    ok o-fills-empty-dir || bad o-fills-empty-dir "$(ls "$tmp/empty")"

# "-o DIR/" names DIR; compiles into one DIR at once take turns at the swap: each
# succeeds, the plan there reads back, nothing is left beside it.
"$ftc" compile models/tiny.ft -o "$tmp/slash.plan/" >/dev/null && [ -s "$tmp/slash.plan/plan" ] &&
    ok o-trailing-slash || bad o-trailing-slash "$(ls "$tmp" | grep slash)"
pids=()
for i in 1 2 3; do "$ftc" compile models/tiny.ft -o "$tmp/same.plan" >/dev/null 2>"$tmp/same$i.err" & pids+=($!); done
allok=1
for p in "${pids[@]}"; do wait "$p" || allok=0; done
if [ $allok = 1 ] && "$ftc" inspect "$tmp/same.plan" >/dev/null && [ -z "$(ls -d "$tmp"/same.plan.* 2>/dev/null)" ]; then
    ok o-concurrent-compiles
else
    bad o-concurrent-compiles "$(cat "$tmp"/same*.err; ls -d "$tmp"/same.plan*)"
fi

# A UTF-8 byte-order mark before the source is not a stray character, and columns after
# it are the editor's.
{ printf '\xef\xbb\xbf'; cat models/tiny.ft; } > "$tmp/bom.ft"
"$ftc" compile "$tmp/bom.ft" -o "$tmp/bom.plan" >/dev/null 2>"$tmp/e" && ok bom-accepted ||
    bad bom-accepted "$(cat "$tmp/e")"
printf '\xef\xbb\xbfmodel @\n' > "$tmp/bom-bad.ft"
"$ftc" compile "$tmp/bom-bad.ft" -o "$tmp/bom2.plan" >/dev/null 2>"$tmp/e"
grep -q "bom-bad.ft:1:7: error" "$tmp/e" && ok bom-columns || bad bom-columns "$(cat "$tmp/e")"

# The CUBIN: ftc compile compiles kernels.cu with NVRTC for the preset's SM and keeps its
# resource report (ftc inspect --kernels); with $FTC_NO_CUBIN (the suite's default: the
# tests' plans run on the CPU, and cuda-plans compiles every kernel) it writes the report's
# reason instead and leaves the compile to ftc run. Where NVRTC is missing, the first half
# is the second's with NVRTC's reason.
FTC_NO_CUBIN=1 "$ftc" compile models/tiny.ft -o "$tmp/nocubin.plan" >/dev/null
grep -q '^kernels.cu: [0-9]* kernels; not compiled here (\$FTC_NO_CUBIN is set); ftc run compiles it on the GPU' \
    "$tmp/nocubin.plan/kernels.txt" && ! ls "$tmp/nocubin.plan"/*.cubin >/dev/null 2>&1 &&
    ok no-cubin-report || bad no-cubin-report "$(cat "$tmp/nocubin.plan/kernels.txt")"
env -u FTC_NO_CUBIN "$ftc" compile models/tiny.ft --gpu h100-80g -o "$tmp/cubin.plan" >/dev/null
if grep -q 'not compiled here (NVRTC not found' "$tmp/cubin.plan/kernels.txt"; then
    ok "cubin-compiled (skipped: no NVRTC)"
elif "$ftc" inspect "$tmp/cubin.plan" --kernels > "$tmp/k" && [ -s "$tmp/cubin.plan/kernels.sm_90.cubin" ] &&
     grep -q '^kernels.cu: [0-9]* kernels, compiled for sm_90 by NVRTC ' "$tmp/k" && grep -q '^no kernel spills$' "$tmp/k"; then
    ok cubin-compiled
else
    bad cubin-compiled "$(head -3 "$tmp/cubin.plan/kernels.txt")"
fi
# What the PTX says (kernels.txt's last lines), Qwen2-7B full fine-tuning and LoRA at 40G:
# both attention kernels on tensor cores fed by cp.async and ldmatrix, and at least 80% of
# the per-element kernels with vector loads.
if ! grep -q 'not compiled here (NVRTC not found' "$tmp/cubin.plan/kernels.txt"; then
    sed 's/^train {/train {\n  lora(r = 8, alpha = 16, targets = [q_proj, v_proj])/' models/qwen2.ft > "$tmp/q7lora.ft"
    for m in models/qwen2.ft "$tmp/q7lora.ft"; do
        env -u FTC_NO_CUBIN "$ftc" compile "$m" --budget 40G --host-mem 256G -o "$tmp/facts.plan" >/dev/null
        line=$(grep '^[0-9]* kernels: ' "$tmp/facts.plan/kernels.txt")
        if awk -v l="$line" 'BEGIN { n = split(l, w, " ")
                 for (i = 1; i <= n; i++) { if (w[i] == "(2" && w[i + 1] == "of") fed = 1
                                            if (w[i] == "per-element") { v = w[i - 4]; t = w[i - 1] } }
                 exit !(fed && t > 0 && v >= 0.8 * t) }'; then
            ok "ptx-facts-$(basename "$m" .ft) (${line#*kernels: })"
        else
            bad "ptx-facts-$(basename "$m" .ft)" "$line"
        fi
    done
fi

# The largest model through the whole search: Qwen2-72B's full fine-tuning on the default
# 40 GB card, whose host is too small for its offloaded model states, is answered with
# exit 1, the reason and nothing written. The time is printed, not checked (a timing
# says nothing on a shared or sanitized machine; tests/bench/compile_scaling.sh measures
# compile times against a baseline).
start=$(date +%s%N)
"$ftc" compile models/qwen2-72b.ft --budget 80G --host-mem 64G -o "$tmp/72.plan" > "$tmp/o" 2>&1; rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ $rc = 1 ] && [ ! -e "$tmp/72.plan" ] &&
   grep -q '^nothing fits 40.00 GiB: the model states need [0-9.]* GiB of host memory where they go, more than the 64.00 GiB of --host-mem' "$tmp/o"; then
    ok "qwen2-72b-compiles (${ms} ms)"
else
    bad qwen2-72b-compiles "exit $rc: $(tail -4 "$tmp/o")"
fi

# Standard output that cannot be written (a full disk: /dev/full) fails the command, saying
# so, whichever command wrote it.
if [ -w /dev/full ]; then
    "$ftc" compile models/tiny.ft -o "$tmp/full.plan" >/dev/null 2>&1
    "$ftc" data --bytes tests/data/corpus.txt -o "$tmp/full-e.bin" >/dev/null 2>&1
    for args in "import tests/fixtures/qwen2-7b.config.json" "inspect $tmp/full.plan --json" "help" \
                "compile models/tiny.ft -o $tmp/full2.plan" "data --bytes tests/data/corpus.txt -o $tmp/full.bin" \
                "eval $tmp/full.plan --data $tmp/full-e.bin --batches 1"; do
        # shellcheck disable=SC2086
        "$ftc" $args > /dev/full 2> "$tmp/o"; rc=$?
        if [ $rc != 0 ] && grep -q '^ftc: error: cannot write standard output: No space left on device$' "$tmp/o"; then
            ok "stdout-full-fails (${args%% *})"
        else
            bad "stdout-full-fails (${args%% *})" "exit $rc: $(head -2 "$tmp/o")"
        fi
    done
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
