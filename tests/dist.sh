#!/usr/bin/env bash
# Data parallelism on the cpu backend over MPI, as arithmetic: tiny.ft as a job of 2 ranks
# (FTC_DIST_RANKS=4 for 4) at ZeRO 0, 1, 2 and 3 against one rank with the equivalent
# accumulation; the stages against each other, bit for bit (AdamW8bit too); offloaded state,
# clipping over shards, LoRA; sharded checkpoints resumed exactly; the planner's stage and
# buckets on Qwen2-72B. (The launch, the job's failures and evaluation: dist_jobs.sh.)
# Skipped (77) without mpirun or libftc_mpi.so.
# usage: dist.sh FTC SOURCE_DIR ST_DIFF
set -u
ftc=$1 src=$2 st_diff=$3
cd "$src" || exit 2
. tests/dist_lib.sh   # skips without MPI; lib.sh, R, mpi, plan, the corpus

# One micro-step a rank (micro-batch 8/R): every stage reduces the same sums in the same
# order (each element over the ranks in rank order, in fp32), so all four train bit for
# bit alike; against one rank accumulating R micro-batches (the same windows, the same
# loss scale) the sums are in another order: every loss within 1e-3, every weight matrix
# within 3e-2 in ||a - b||₂ / ||b||₂ after 20 steps (as tests/train.sh for accumulation).
for z in 0 1 2 3; do
    plan z$z --ranks "$R" --zero $z --micro-batch $((8 / R)) --remat keep --offload none ||
        bad compile-z$z "$(cat "$tmp/z$z.compile")"
    mpi "$R" run "$tmp/z$z.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/s$z" \
        > "$tmp/z$z.out" 2> "$tmp/z$z.err" || bad "run-z$z" "$(tail -5 "$tmp/z$z.err")"
done
grep -q "^ftc run: tiny on cpu, $R ranks (ZeRO-3" "$tmp/z3.out" && ok "rank-0-prints-the-job" ||
    bad rank-0-prints-the-job "$(head -2 "$tmp/z3.out")"
[ "$(grep -c '^step 1/20 ' "$tmp/z0.out")" = 1 ] && ok one-line-a-step || bad one-line-a-step "$(grep -c '^step 1/' "$tmp/z0.out")"
for z in 1 2 3; do
    if same_losses "$tmp/z$z.out" "$tmp/z0.out" && cmp -s "$tmp/s$z/model.safetensors" "$tmp/s0/model.safetensors"; then
        ok "zero-$z-bitwise-zero-0"
    else
        bad "zero-$z-bitwise-zero-0" "$(diff <(losses < "$tmp/z$z.out") <(losses < "$tmp/z0.out") | head -3)"
    fi
done
plan ref --micro-batch $((8 / R)) --remat keep --offload none
"$ftc" run "$tmp/ref.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/sref" > "$tmp/ref.out"
for z in 0 3; do
    if close_losses "$tmp/z$z.out" "$tmp/ref.out" 20 &&
       "$st_diff" "$tmp/s$z/model.safetensors" "$tmp/sref/model.safetensors" 3e-2 1024 > "$tmp/d"; then
        ok "zero-$z-$R-ranks-trains-as-one-rank-accumulating-$R ($(sed 's/.*worst //' "$tmp/d"))"
    else
        bad "zero-$z-$R-ranks-trains-as-one-rank-accumulating-$R" "$(cat "$tmp/d") $(paste <(losses < "$tmp/z$z.out") <(losses < "$tmp/ref.out") | head -3)"
    fi
done

# Accumulation on each rank (micro-batch 8/(2R), two micro-steps): stages 0 and 1 sum the
# micro-steps locally and reduce on the last only, stages 2 and 3 reduce every micro-step;
# each pair bit for bit alike, both against one rank accumulating 2R. Stages 2 and 3 round
# the bf16 gradient twice a micro-step (the reduced slice, then the shard it is added to)
# where one rank rounds once a contribution: their losses agree within 5e-3 (4 ranks:
# 2.2e-3 at worst over these 20 steps), the weights within 3e-2 (2 ranks: 0.0163 at stage
# 0, 0.0242 at stage 2; 4 ranks, eight micro-steps of one sequence each: 0.0236 at worst,
# AdamW turning the rounding of the smallest gradients into whole steps). In fp32 (below) the same paths agree within
# 2e-5.
for z in 0 1 2 3; do
    plan a$z --ranks "$R" --zero $z --micro-batch $((4 / R)) --remat keep --offload none
    mpi "$R" run "$tmp/a$z.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/sa$z" \
        > "$tmp/a$z.out" 2> "$tmp/a$z.err" || bad "run-accum-z$z" "$(tail -5 "$tmp/a$z.err")"
done
grep -q ' last=1 ' "$tmp/a0.plan/plan" && ! grep -q ' last=1 ' "$tmp/a2.plan/plan" &&
    ok last-micro-step-reductions || bad last-micro-step-reductions "no last=1 in ZeRO-0, or one in ZeRO-2"
cmp -s "$tmp/sa0/model.safetensors" "$tmp/sa1/model.safetensors" && same_losses "$tmp/a0.out" "$tmp/a1.out" &&
    ok accum-zero-1-bitwise-zero-0 || bad accum-zero-1-bitwise-zero-0 "weights or losses differ"
cmp -s "$tmp/sa2/model.safetensors" "$tmp/sa3/model.safetensors" && same_losses "$tmp/a2.out" "$tmp/a3.out" &&
    ok accum-zero-3-bitwise-zero-2 || bad accum-zero-3-bitwise-zero-2 "weights or losses differ"
plan aref --micro-batch $((4 / R)) --remat keep --offload none
"$ftc" run "$tmp/aref.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/saref" > "$tmp/aref.out"
for z in 0 2; do
    if close_losses "$tmp/a$z.out" "$tmp/aref.out" 20 $([ $z = 2 ] && echo 5e-3) &&
       "$st_diff" "$tmp/sa$z/model.safetensors" "$tmp/saref/model.safetensors" 3e-2 1024 > "$tmp/d"; then
        ok "accum-zero-$z-trains-as-one-rank ($(sed 's/.*worst //' "$tmp/d"))"
    else
        bad "accum-zero-$z-trains-as-one-rank" "$(cat "$tmp/d")"
    fi
done

# AdamW8bit: its 8-bit tensors stay whole on every rank at every stage (their gradients
# all-reduced, their sums of squares counted once, after the sum over the ranks: every
# stage prints ZeRO-0's gradient norm), the 32-bit ones sharded; ZeRO 0-3 bit for bit
# alike; with grads on the host refused.
sed 's/optimizer = adamw(.*/optimizer = adamw8bit(lr = 3e-3, weight_decay = 0.01)/' models/tiny.ft > "$tmp/a8.ft"
for z in 0 1 2 3; do
    "$ftc" compile "$tmp/a8.ft" -o "$tmp/q$z.plan" --ranks "$R" --zero $z --micro-batch $((8 / R)) --remat keep \
        --offload none > "$tmp/q$z.compile" 2>&1 || bad "compile-adamw8bit-z$z" "$(tail -3 "$tmp/q$z.compile")"
    mpi "$R" run "$tmp/q$z.plan" --data "$tmp/c.bin" --steps 3 --seed 7 --poison --save "$tmp/sq$z" \
        > "$tmp/q$z.out" 2> "$tmp/q$z.err" || bad "run-adamw8bit-z$z" "$(tail -5 "$tmp/q$z.err")"
done
norms() { grep '^step ' "$1" | sed 's/.*gnorm \([^ ]*\) .*/\1/'; }
for z in 1 2 3; do
    if same_losses "$tmp/q$z.out" "$tmp/q0.out" && [ "$(norms "$tmp/q$z.out")" = "$(norms "$tmp/q0.out")" ] &&
       cmp -s "$tmp/sq$z/model.safetensors" "$tmp/sq0/model.safetensors" &&
       grep -q '^buffer [0-9]* adam_q8.decoder.0.wg optimizer device [0-9]* 22528 u8 2x11264 ' "$tmp/q$z.plan/plan"; then
        ok "adamw8bit-zero-$z-bitwise-zero-0"
    else
        bad "adamw8bit-zero-$z-bitwise-zero-0" "$(diff <(norms "$tmp/q$z.out") <(norms "$tmp/q0.out") | head -3)"
    fi
done
"$ftc" compile "$tmp/a8.ft" -o "$tmp/qx.plan" --ranks "$R" --zero 2 --offload grads > /dev/null 2> "$tmp/e"
[ $? = 1 ] && [ ! -e "$tmp/qx.plan" ] && grep -q "adamw8bit's 8-bit state keeps its tensors whole on every rank" "$tmp/e" &&
    ok adamw8bit-grads-on-host-refused || bad adamw8bit-grads-on-host-refused "$(cat "$tmp/e")"

# In fp32 no bf16 rounding stands between the ranks' sums and one rank's accumulation: two
# micro-steps a rank at ZeRO-1 and ZeRO-3 against one rank accumulating 2R, every printed
# loss within a unit of its last digit (2e-6: the sums' order can round one across, as
# OpenBLAS's AVX-512 kernels did at step 6) and every weight matrix within 2e-5 after 20
# steps (measured on 2 ranks: 2.4e-6; the GEMM adds a micro-step's product into the
# gradient in its own order where the ranks' sums add whole products).
sed 's|^  precision = bf16|  precision = fp32|' models/tiny.ft > "$tmp/fp32.ft"
for z in 1 3 ref; do
    args=(--micro-batch $((4 / R)) --remat keep --offload none)
    [ $z = ref ] || args+=(--ranks "$R" --zero $z)
    "$ftc" compile "$tmp/fp32.ft" -o "$tmp/f$z.plan" "${args[@]}" > /dev/null 2>&1 || bad "compile-fp32-$z" failed
    if [ $z = ref ]; then
        "$ftc" run "$tmp/f$z.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --save "$tmp/sf$z" > "$tmp/f$z.out" 2>&1
    else
        mpi "$R" run "$tmp/f$z.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --save "$tmp/sf$z" > "$tmp/f$z.out" 2>&1
    fi || bad "run-fp32-$z" "$(tail -3 "$tmp/f$z.out")"
done
for z in 1 3; do
    if close_losses "$tmp/f$z.out" "$tmp/fref.out" 20 2e-6 &&
       "$st_diff" "$tmp/sf$z/model.safetensors" "$tmp/sfref/model.safetensors" 2e-5 1024 > "$tmp/d"; then
        ok "fp32-zero-$z-trains-as-one-rank ($(sed 's/.*worst //' "$tmp/d"))"
    else
        bad "fp32-zero-$z-trains-as-one-rank" "$("$st_diff" "$tmp/sf$z/model.safetensors" "$tmp/sfref/model.safetensors" 2e-5 1024; diff <(losses < "$tmp/f$z.out") <(losses < "$tmp/fref.out") | head -3)"
    fi
done

# The ops the imported architectures add (tests/ft/new-ops.ft: a weight's rows sliced as a
# view, parameters shared by every layer, so contributions added to a gradient by acc,
# learned positions) at ZeRO 2 and 3 against ZeRO 0, fp32, poison on: bit for bit (on 2
# ranks: its batch is 2).
sed 's|^  precision = bf16|  precision = fp32|' tests/ft/new-ops.ft > "$tmp/newops.ft"
for z in 0 2 3; do
    "$ftc" compile "$tmp/newops.ft" -o "$tmp/n$z.plan" --ranks 2 --zero $z --remat keep --offload none \
        > /dev/null 2>&1 || bad "compile-new-ops-z$z" failed
    mpi 2 run "$tmp/n$z.plan" --data "$tmp/c.bin" --steps 5 --seed 7 --poison --save "$tmp/sn$z" \
        > "$tmp/n$z.out" 2>&1 || bad "run-new-ops-z$z" "$(tail -3 "$tmp/n$z.out")"
done
for z in 2 3; do
    same_losses "$tmp/n$z.out" "$tmp/n0.out" && cmp -s "$tmp/sn$z/model.safetensors" "$tmp/sn0/model.safetensors" &&
        ok "new-ops-zero-$z-bitwise-zero-0" || bad "new-ops-zero-$z-bitwise-zero-0" "weights or losses differ"
done

# The state on the host: CPU AdamW over each rank's shard (ZeRO-1), gradient shards summed
# on the host (ZeRO-3, ZeRO-Offload's way): the same arithmetic as on the device.
plan o1 --ranks "$R" --zero 1 --micro-batch $((4 / R)) --remat keep --offload optimizer
plan o3 --ranks "$R" --zero 3 --micro-batch $((4 / R)) --remat swap --offload grads
for x in o1 o3; do
    mpi "$R" run "$tmp/$x.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/s$x" \
        > "$tmp/$x.out" 2> "$tmp/$x.err" || bad "run-$x" "$(tail -3 "$tmp/$x.err")"
done
grep -q ' stream=host' "$tmp/o1.plan/plan" && cmp -s "$tmp/so1/model.safetensors" "$tmp/sa1/model.safetensors" &&
    ok offload-optimizer-zero-1-bitwise || bad offload-optimizer-zero-1-bitwise "weights differ"
cmp -s "$tmp/so3/model.safetensors" "$tmp/sa3/model.safetensors" && ok offload-grads-zero-3-bitwise ||
    bad offload-grads-zero-3-bitwise "$("$st_diff" "$tmp/so3/model.safetensors" "$tmp/sa3/model.safetensors" 0 2>&1)"

# Clipping: each rank's gradient shards' sum of squares, summed over the ranks (a gradient
# kept whole counted once), is the whole gradients' norm: every step's loss within 1e-3 of
# one rank's, its norm within 5e-3 relative (1.3e-3 at worst over these 20 steps, the
# weights drifting apart as above), the weights within 2e-2 (the sums in another order).
sed 's|^  optimizer = .*|&\n  clip = 0.5|' models/tiny.ft > "$tmp/clip.ft"
"$ftc" compile "$tmp/clip.ft" -o "$tmp/c3.plan" --ranks "$R" --zero 3 --micro-batch $((8 / R)) --remat keep \
    --offload none > /dev/null 2>&1
"$ftc" compile "$tmp/clip.ft" -o "$tmp/cref.plan" --micro-batch $((8 / R)) --remat keep --offload none > /dev/null 2>&1
mpi "$R" run "$tmp/c3.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --save "$tmp/sc3" > "$tmp/c3.out" 2>&1
"$ftc" run "$tmp/cref.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --save "$tmp/scref" > "$tmp/cref.out" 2>&1
if grep -q 'clipped to a global norm of 0.5' "$tmp/c3.out" && close_losses "$tmp/c3.out" "$tmp/cref.out" 20 &&
   paste <(grep '^step ' "$tmp/c3.out" | awk '{print $10}') <(grep '^step ' "$tmp/cref.out" | awk '{print $10}') |
       awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 5e-3 * $2) bad = 1; n++ } END { exit bad || n != 20 }' &&
   "$st_diff" "$tmp/sc3/model.safetensors" "$tmp/scref/model.safetensors" 2e-2 1024 > "$tmp/d"; then
    ok "clipping-over-shards ($(sed 's/.*worst //' "$tmp/d"))"
else
    bad clipping-over-shards "$(paste <(grep '^step ' "$tmp/c3.out" | awk '{print $4, $10}') <(grep '^step ' "$tmp/cref.out" | awk '{print $4, $10}') | head -3)"
fi

# LoRA with dropout (the masks follow the global micro-batch) at ZeRO-3 against ZeRO-0: the
# adapters, gathered from the ranks into PEFT's files, and the merged weights, bit for bit.
sed 's|^  optimizer = .*|&\n  lora(r = 4, alpha = 8, dropout = 0.1, targets = [wq, wv])|' models/tiny.ft > "$tmp/lora.ft"
for z in 0 3; do
    "$ftc" compile "$tmp/lora.ft" -o "$tmp/l$z.plan" --ranks "$R" --zero $z --micro-batch $((8 / R)) \
        --remat keep --offload none > /dev/null 2>&1 || bad compile-lora-z$z "failed"
    mpi "$R" run "$tmp/l$z.plan" --data "$tmp/c.bin" --steps 10 --seed 3 --save "$tmp/sl$z" --merge \
        > "$tmp/l$z.out" 2> "$tmp/l$z.err" || bad "run-lora-z$z" "$(tail -3 "$tmp/l$z.err")"
done
cmp -s "$tmp/sl0/adapter_model.safetensors" "$tmp/sl3/adapter_model.safetensors" && [ -s "$tmp/sl3/adapter_config.json" ] &&
    cmp -s "$tmp/sl0/merged/model.safetensors" "$tmp/sl3/merged/model.safetensors" &&
    ok lora-zero-3-adapters-and-merged-bitwise || bad lora-zero-3-adapters-and-merged-bitwise "adapters or merged weights differ or are missing"

# The planner's choice is no slower than any plan it could have chosen: Qwen2-72B on 8
# ranks at a global batch of 256, where micro-batch 1 with selective recompute is slow at
# the default buckets and the fastest plan at 512 MiB ones (the planner once tried other
# bucket sizes on its fastest plan alone, and answered 46.7 s where this is 44.7 s).
sed 's/^  batch     = 32/  batch     = 256/' models/qwen2-72b.ft > "$tmp/q72b.ft"
step_s() { grep -o 'estimated step [0-9.]* s' "$1" | awk '{print $3}'; }
"$ftc" compile "$tmp/q72b.ft" --ranks 8 --gpu h100-80g --budget 80G --host-mem 256G -o "$tmp/q72b.plan" > "$tmp/q72b.out" 2>&1
"$ftc" compile "$tmp/q72b.ft" --ranks 8 --zero 3 --gpu h100-80g --budget 80G --host-mem 256G --micro-batch 1 \
    --remat selective --offload optimizer -o "$tmp/q72s.plan" > "$tmp/q72s.out" 2>&1
a=$(step_s "$tmp/q72b.out") b=$(step_s "$tmp/q72s.out")
awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b > 0 && a <= b) }' &&
    ok "planner-no-slower-than-a-fixed-plan ($a s against $b s)" ||
    bad planner-no-slower-than-a-fixed-plan "chosen $a s, fixed $b s: $(grep '^plan' "$tmp/q72b.out" "$tmp/q72s.out")"

# Qwen2-72B on 8 H100s at ZeRO-3: a plan that fits, reported for one rank; the host memory
# is the training node's (a DGX H100's 2 TiB over 8 ranks), not this machine's.
"$ftc" compile models/qwen2-72b.ft --ranks 8 --zero 3 --gpu h100-80g --budget 80G --host-mem 256G \
    -o "$tmp/q72.plan" > "$tmp/q72.out" 2>&1
if grep -q '^plan: .*ZeRO-3, buckets ' "$tmp/q72.out" && grep -q 'x 8 ranks, seq 2048' "$tmp/q72.out" &&
   grep -qE '^  per rank: device [0-9.]+ GiB of 79.65 GiB budget' "$tmp/q72.out" &&
   grep -q '^  collectives .* ms a step over nvlink' "$tmp/q72.out" && [ -s "$tmp/q72.plan/plan" ]; then
    ok "qwen2-72b-8-ranks-zero-3-fits ($(grep -oE 'device [0-9.]+ GiB' "$tmp/q72.out" | head -1) a rank)"
else
    bad qwen2-72b-8-ranks-zero-3-fits "$(grep -E '^(plan|nothing|  per rank)' "$tmp/q72.out")"
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
