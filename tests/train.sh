#!/usr/bin/env bash
# ftc run on tiny.ft as arithmetic: determinism, the planned arena against every buffer on
# its own, every planning mechanism (accumulation, recompute, offload, streamed weights, the
# fused loss, gradients added in place) against the plan without it, over 20 steps each, and
# every precision and optimizer training. (Its inputs, errors and outputs: train_inputs.sh.)
# usage: train.sh FTC SOURCE_DIR ST_DIFF
set -u
ftc=$1 src=$2 st_diff=$3
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses

"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null || bad data "ftc data failed"
"$ftc" compile models/tiny.ft -o "$tmp/tiny.plan" >/dev/null || bad compile "ftc compile failed"

out=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --seed 7 2>&1)
if grep -qE '^step 1/6  loss [0-9.]+  tok/s [0-9]+  lr [0-9.e+-]+  gnorm [0-9.e+-]+  elapsed [0-9.]+s  mem [0-9.]+ MiB$' <<<"$out"; then
    ok progress-line
else
    bad progress-line "$out"
fi
first=$(grep '^step 1/' <<<"$out" | awk '{print $4}')
awk -v l="$first" 'BEGIN { exit !(l > 5.3 && l < 5.8) }' && ok "first-loss-ln256 ($first)" || bad first-loss-ln256 "$first"

# Same seed, same losses, bitwise; another seed, other losses. Poison is on in every
# run here: a buffer is NaN the moment its lifetime ends.
a=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --seed 7 --poison | losses)
b=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --seed 7 --poison | losses)
c=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --seed 8 --poison | losses)
[ -n "$a" ] && [ "$a" = "$b" ] && ok same-seed-same-losses || bad same-seed-same-losses "$a / $b"
[ "$a" != "$c" ] && ok other-seed-other-losses || bad other-seed-other-losses "$a"
np=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --seed 7 | losses)
[ "$a" = "$np" ] && ok poison-changes-nothing || bad poison-changes-nothing "$np"
# The planned arena (shared offsets, in-place reuse) against every buffer in its own
# allocation: identical losses and weights, bitwise, over 20 steps.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/planned" > "$tmp/p.out"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --unplanned --save "$tmp/unplanned" > "$tmp/u.out"
if [ "$(losses < "$tmp/p.out")" = "$(losses < "$tmp/u.out")" ] && [ "$(losses < "$tmp/p.out" | wc -l)" = 20 ] &&
   cmp -s "$tmp/planned/model.safetensors" "$tmp/unplanned/model.safetensors"; then
    ok planned-equals-unplanned-20-steps
else
    bad planned-equals-unplanned-20-steps "$(diff <(losses < "$tmp/p.out") <(losses < "$tmp/u.out") | head -4)"
fi

# Under a tight budget the planner uses every technique it has: it accumulates, chooses
# tensor by tensor what a block keeps and recomputes the rest, offloads the optimizer and
# the gradients and streams the weights from the host; the loss is fused with the lm_head
# projection, its logits formed 32 rows at a time (--loss-chunk: tiny's logits are small
# enough to form whole, so the chunks are asked for) and dying with it. The run must train
# as the plan with none of that (micro-batch 8, everything kept on the device, the loss
# unfused, every buffer its own allocation). Accumulation and host gradients add in
# another order, so this holds within a tolerance, not bitwise: every loss within 1e-3,
# and every weight matrix within 3e-2 in ||a - b||₂ / ||b||₂ after 20 steps (0.008 to 0.022
# over the seeds' initialisations: AdamW turns the rounding of the smallest gradients
# into whole steps, more so in the embedding's rarely seen rows). Vectors
# (biases, norm weights) are checked for shape only: AdamW's early steps are nearly
# sign(gradient), so where the gradient is tiny (a k_proj bias's is exactly zero: softmax
# ignores a shift shared by all keys) an element steps by its rounding noise, whose sign
# depends on the order of the additions, as in any framework.
"$ftc" compile models/tiny.ft --budget 1230360K --loss-chunk 32 -o "$tmp/tight.plan" > "$tmp/tight.out"
"$ftc" compile models/tiny.ft --micro-batch 8 --remat keep --offload none --unfused-loss -o "$tmp/none.plan" >/dev/null
if grep -q '^plan: micro-batch [124], recompute tensors ([0-9]* of [0-9]* kept a block[^)]*), offload optimizer+master+grads+weights' "$tmp/tight.out" &&
   grep -q 'logits formed 32 rows at a time ([2-9] chunks' "$tmp/tight.out" && ! grep -q 'role=logits' "$tmp/tight.plan/plan" &&
   grep -q ' recompute=1' "$tmp/tight.plan/plan" && grep -q '^buffer [0-9]* decoder.0.wq.dev0 weights device ' "$tmp/tight.plan/plan"; then
    ok "tight-budget-uses-every-mechanism ($(grep '^plan: micro' "$tmp/tight.out" | sed 's/^plan: //'))"
else
    bad tight-budget-uses-every-mechanism "$(grep '^plan\|the loss' "$tmp/tight.out")"
fi
"$ftc" run "$tmp/tight.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/tight" > "$tmp/t.out"
"$ftc" run "$tmp/none.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --unplanned --save "$tmp/none" > "$tmp/n.out"
close_losses() {   # two runs' loss columns agree within 1e-3, step by step
    paste <(losses < "$1") <(losses < "$2") |
        awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > 1e-3 || $1 != $3) bad = 1; n++ }
             END { exit bad || n != 20 }'
}
if close_losses "$tmp/t.out" "$tmp/n.out" && "$st_diff" "$tmp/tight/model.safetensors" "$tmp/none/model.safetensors" 3e-2 1024 >/dev/null; then
    ok "tight-plan-trains-as-unplanned ($("$st_diff" "$tmp/tight/model.safetensors" "$tmp/none/model.safetensors" 3e-2 1024 | sed 's/.*worst //'))"
else
    bad tight-plan-trains-as-unplanned "$("$st_diff" "$tmp/tight/model.safetensors" "$tmp/none/model.safetensors" 3e-2 1024) $(paste <(losses < "$tmp/t.out") <(losses < "$tmp/n.out") | head -3)"
fi
# Recomputing tensor by tensor changes no arithmetic: the tight plan with every block
# keeping everything instead (the same micro-batch, offload and loss chunks) trains bitwise
# the same.
"$ftc" compile models/tiny.ft --micro-batch 2 --remat keep --offload weights --loss-chunk 32 -o "$tmp/keep2.plan" >/dev/null
"$ftc" run "$tmp/keep2.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/keep2" >/dev/null
cmp -s "$tmp/tight/model.safetensors" "$tmp/keep2/model.safetensors" && ok tensors-recompute-bitwise ||
    bad tensors-recompute-bitwise "weights differ"
# Micro-batch 2 x 4 accumulation steps against micro-batch 8 x 1, in bf16: the weights
# within 3e-2 after 20 steps, as the tight plan's (0.0204 measured where OpenBLAS runs its
# AVX-512 kernels, 0.008 to 0.018 elsewhere).
"$ftc" compile models/tiny.ft --micro-batch 2 --remat keep --offload none -o "$tmp/mb2.plan" >/dev/null
"$ftc" run "$tmp/mb2.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/mb2" > "$tmp/m.out"
if close_losses "$tmp/m.out" "$tmp/p.out" && "$st_diff" "$tmp/mb2/model.safetensors" "$tmp/planned/model.safetensors" 3e-2 1024 >/dev/null; then
    ok "micro-2x4-equals-micro-8x1 ($("$st_diff" "$tmp/mb2/model.safetensors" "$tmp/planned/model.safetensors" 3e-2 1024 | sed 's/.*worst //'))"
else
    bad micro-2x4-equals-micro-8x1 "$("$st_diff" "$tmp/mb2/model.safetensors" "$tmp/planned/model.safetensors" 3e-2 1024) $(paste <(losses < "$tmp/m.out") <(losses < "$tmp/p.out") | head -3)"
fi
# The fused linear + cross entropy (logits in chunks of 64 of the 512 rows, dW added chunk
# by chunk) trains as the loss the .ft writes: the logits' and the loss's arithmetic is the
# same row for row, only the GEMMs sum in other orders (dW chunk by chunk; and BLAS may
# block a 64-row product otherwise than a 512-row one). In fp32, where such orders move a
# result by its rounding and no more: every loss within 2e-6, every weight matrix within
# 1e-4 after 20 steps (6e-6 seen; vectors for shape only, as above). (In bf16 one rounding
# apart is a bf16 ulp of a weight, and the tight plan above checks the fused loss there.)
sed 's/precision = bf16/precision = fp32/' models/tiny.ft > "$tmp/fused32.ft"
"$ftc" compile "$tmp/fused32.ft" --micro-batch 8 --offload none --loss-chunk 64 -o "$tmp/fused.plan" > "$tmp/f.log"
"$ftc" compile "$tmp/fused32.ft" --micro-batch 8 --offload none --unfused-loss -o "$tmp/unfused.plan" >/dev/null
"$ftc" run "$tmp/fused.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/fused" > "$tmp/fu.out"
"$ftc" run "$tmp/unfused.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/unfused" > "$tmp/un.out"
if grep -q 'logits formed 64 rows at a time (8 chunks of the 512 rows)' "$tmp/f.log" &&
   ! grep -q 'role=logits' "$tmp/fused.plan/plan" && grep -q 'role=logits' "$tmp/unfused.plan/plan" &&
   paste <(losses < "$tmp/fu.out") <(losses < "$tmp/un.out") |
       awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > 2e-6 || $1 != $3) bad = 1; n++ } END { exit bad || n != 20 }' &&
   "$st_diff" "$tmp/fused/model.safetensors" "$tmp/unfused/model.safetensors" 1e-4 1024 >/dev/null; then
    ok "fused-loss-trains-as-unfused ($("$st_diff" "$tmp/fused/model.safetensors" "$tmp/unfused/model.safetensors" 1e-4 1024 | sed 's/.*worst //'))"
else
    bad fused-loss-trains-as-unfused "$(grep 'the loss:' "$tmp/f.log") $("$st_diff" "$tmp/fused/model.safetensors" "$tmp/unfused/model.safetensors" 1e-4 1024) $(paste <(losses < "$tmp/fu.out") <(losses < "$tmp/un.out") | head -3)"
fi
# Weight gradients add in place: each weight gradient's GEMM adds its product into the
# gradient itself (beta = 1), with no temporary and no acc. Against the plan where each
# writes a temporary an acc adds in (--grad-temporaries), at micro-batch 2 (4 micro-steps
# a step, all but the first adding into a gradient), on tiny.ft (linear) and a GPT-2-shaped
# tiny model (its [in, out] weights through matmul, the embedding tied to the lm_head):
# in fp32 the same bits (over the 128 rows of a micro-batch BLAS adds C to the product in
# one rounding, as the acc did); in bf16 the temporary rounded the product to bf16 before
# the add, the gradient now rounds once, so the runs part by that rounding: every loss
# within 1e-3, every weight matrix within 3e-2 (measured: 4e-4 and 1.5e-2 on tiny.ft,
# 1.75e-2 where OpenBLAS runs its AVX-512 kernels,
# 1.8e-4 and 2.9e-3 on the GPT-2 shape; 8.5e-5 and 4.0e-3, every adapter, with LoRA on it;
# vectors for shape only, as above: where a gradient is near zero an element steps by its
# rounding). The in-place plan also runs planned as unplanned, bitwise.
sed -e 's/^  vocab    = 50257/  vocab    = 256/' -e 's/^  dim      = 768/  dim      = 64/' \
    -e 's/^  layers   = 12/  layers   = 2/' -e 's/^  heads    = 12/  heads    = 4/' -e 's/^  context  = 1024/  context  = 64/' \
    -e 's/^  seq       = 1024/  seq       = 64/' -e 's/^  batch     = 32/  batch     = 8/' -e 's/lr = 2e-4/lr = 1e-3/' \
    models/gpt2.ft > "$tmp/g2.ft"
sed 's/^  optimizer = .*/&\n  lora(r = 4, alpha = 8, targets = [attn_w, fc_w])/' "$tmp/g2.ft" > "$tmp/g2lora.ft"
sed 's/precision = bf16/precision = fp32/' "$tmp/g2.ft" > "$tmp/g2fp32.ft"
sed 's/precision = bf16/precision = fp32/' models/tiny.ft > "$tmp/tinyfp32.ft"
inplace_vs_temporaries() {   # NAME FT: both plans, 20 steps each; leaves $tmp/NAME.{in,tmp}.{plan,out,save}
    "$ftc" compile "$2" --micro-batch 2 --offload none -o "$tmp/$1.in.plan" >/dev/null
    "$ftc" compile "$2" --micro-batch 2 --offload none --grad-temporaries -o "$tmp/$1.tmp.plan" >/dev/null
    for v in in tmp; do
        "$ftc" run "$tmp/$1.$v.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/$1.$v" > "$tmp/$1.$v.out"
    done
    # in place: no acc, every weight gradient's GEMM updating its gradient; with temporaries, acc
    ! grep -q '^[0-9]* acc ' "$tmp/$1.in.plan/plan" && grep -q '^[0-9]* acc ' "$tmp/$1.tmp.plan/plan" &&
        ! grep -E '^[0-9]* (linear_dw|matmul_db) ' "$tmp/$1.in.plan/plan" | grep -qv ' update=1 '
}
for m in tiny:"$tmp/tinyfp32.ft" gpt2:"$tmp/g2fp32.ft"; do
    n=${m%%:*}-fp32
    if inplace_vs_temporaries "$n" "${m#*:}" && [ "$(losses < "$tmp/$n.in.out" | wc -l)" = 20 ] &&
       [ "$(losses < "$tmp/$n.in.out")" = "$(losses < "$tmp/$n.tmp.out")" ] &&
       cmp -s "$tmp/$n.in/model.safetensors" "$tmp/$n.tmp/model.safetensors"; then
        ok "grads-in-place-$n-bitwise ($(grep -c ' update=1 ' "$tmp/$n.in.plan/plan") accumulating instructions, $(grep -c '^[0-9]* acc ' "$tmp/$n.tmp.plan/plan") acc with temporaries)"
    else
        bad "grads-in-place-$n-bitwise" "$(diff <(losses < "$tmp/$n.in.out") <(losses < "$tmp/$n.tmp.out") | head -3)"
    fi
done
for m in tiny:models/tiny.ft gpt2:"$tmp/g2.ft" gpt2-lora:"$tmp/g2lora.ft"; do
    n=${m%%:*}-bf16 f=model.safetensors min=1024
    [ "${m%%:*}" = gpt2-lora ] && f=adapter_model.safetensors min=1
    if inplace_vs_temporaries "$n" "${m#*:}" && close_losses "$tmp/$n.in.out" "$tmp/$n.tmp.out" &&
       "$st_diff" "$tmp/$n.in/$f" "$tmp/$n.tmp/$f" 3e-2 $min >/dev/null; then
        ok "grads-in-place-$n ($("$st_diff" "$tmp/$n.in/$f" "$tmp/$n.tmp/$f" 3e-2 $min | sed 's/.*worst //'))"
    else
        bad "grads-in-place-$n" "$("$st_diff" "$tmp/$n.in/$f" "$tmp/$n.tmp/$f" 3e-2 $min) $(paste <(losses < "$tmp/$n.in.out") <(losses < "$tmp/$n.tmp.out") | head -3)"
    fi
done
"$ftc" run "$tmp/gpt2-bf16.in.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --unplanned --save "$tmp/g2u" > "$tmp/g2u.out"
[ "$(losses < "$tmp/g2u.out")" = "$(losses < "$tmp/gpt2-bf16.in.out")" ] &&
    cmp -s "$tmp/g2u/model.safetensors" "$tmp/gpt2-bf16.in/model.safetensors" &&
    ok grads-in-place-planned-equals-unplanned || bad grads-in-place-planned-equals-unplanned "weights or losses differ"
# Recompute and swapping change no arithmetic: bitwise the same weights.
for policy in selective full swap; do
    "$ftc" compile models/tiny.ft --remat $policy --micro-batch 8 --offload none -o "$tmp/$policy.plan" >/dev/null
    "$ftc" run "$tmp/$policy.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/$policy" >/dev/null
    cmp -s "$tmp/$policy/model.safetensors" "$tmp/planned/model.safetensors" && ok "$policy-recompute-bitwise" ||
        bad "$policy-recompute-bitwise" "weights differ"
done
grep -q ' copy out=' "$tmp/swap.plan/plan" && grep -q ' host ' "$tmp/swap.plan/plan" && ok swap-uses-host-copies ||
    bad swap-uses-host-copies "no copies to the host in the plan"
# Each update inside backward, as soon as its gradient is complete (--update backward),
# changes no arithmetic: the same gradient bits and the same factor reach each update, and
# the first contribution to a gradient assigns what the zeroed gradient added it to. Against
# --update step, 12 steps each: the same weights bitwise on tiny.ft in bf16 with master
# weights, in bf16_pure (Kahan buffers updated in backward), with full recompute (backward's
# re-run forward reads a weight before its update), with --grad-temporaries (an acc's
# gradient zeroed before it), and on the GPT-2 shape (the embedding tied to the lm_head:
# its first contribution made in the fused loss) with LoRA.
sed 's/precision = bf16/precision = bf16_pure/' models/tiny.ft > "$tmp/pure.ft"
for m in tiny:models/tiny.ft pure:"$tmp/pure.ft" full:models/tiny.ft:--remat:full \
         temps:models/tiny.ft:--grad-temporaries gpt2-lora:"$tmp/g2lora.ft"; do
    IFS=: read -r n ft f1 f2 <<<"$m"
    for u in step backward; do
        # shellcheck disable=SC2086
        "$ftc" compile "$ft" --micro-batch 8 --offload none --update $u $f1 $f2 -o "$tmp/early-$n.$u.plan" > "$tmp/early-$n.$u.log" &&
            "$ftc" run "$tmp/early-$n.$u.plan" --data "$tmp/c.bin" --steps 12 --seed 7 --poison \
                --save "$tmp/early-$n.$u" > "$tmp/early-$n.$u.out"
    done
    f=model.safetensors; [ $n = gpt2-lora ] && f=adapter_model.safetensors
    moved=$(awk '/^phase backward/ { b = 1; next } /^phase/ { b = 0 } b && / (adamw|sgd) out=/' "$tmp/early-$n.backward.plan/plan" | wc -l)
    if grep -q '^plan: .*, updates in backward$' "$tmp/early-$n.backward.log" && [ "$moved" -gt 0 ] &&
       ! grep -q '^phase optimizer [1-9]' "$tmp/early-$n.backward.plan/plan" &&
       [ "$(losses < "$tmp/early-$n.step.out" | wc -l)" = 12 ] &&
       [ "$(losses < "$tmp/early-$n.step.out")" = "$(losses < "$tmp/early-$n.backward.out")" ] &&
       cmp -s "$tmp/early-$n.step/$f" "$tmp/early-$n.backward/$f"; then
        ok "updates-in-backward-bitwise-$n ($moved updates in backward, $(grep -c ' zero out=' "$tmp/early-$n.backward.plan/plan") gradients zeroed first)"
    else
        bad "updates-in-backward-bitwise-$n" "$(grep '^plan: ' "$tmp/early-$n.backward.log") $moved moved; $(diff <(losses < "$tmp/early-$n.step.out") <(losses < "$tmp/early-$n.backward.out") | head -3)"
    fi
done
"$ftc" run "$tmp/early-tiny.backward.plan" --data "$tmp/c.bin" --steps 12 --seed 7 --poison --unplanned \
    --save "$tmp/early-u" > /dev/null
cmp -s "$tmp/early-u/model.safetensors" "$tmp/early-tiny.backward/model.safetensors" &&
    ok updates-in-backward-planned-equals-unplanned || bad updates-in-backward-planned-equals-unplanned "weights differ"
# Weights streamed from the host change no arithmetic either: every weight matrix in
# pinned host memory, a device copy of it a block ahead of each run of uses, CPU AdamW
# updating it where it lives; bitwise the plan with the gradients offloaded alone.
"$ftc" compile models/tiny.ft --remat swap --micro-batch 4 --offload weights -o "$tmp/stream.plan" > "$tmp/stream.log"
"$ftc" compile models/tiny.ft --remat swap --micro-batch 4 --offload grads -o "$tmp/grads.plan" >/dev/null
"$ftc" run "$tmp/stream.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/stream" > "$tmp/st.out"
"$ftc" run "$tmp/grads.plan" --data "$tmp/c.bin" --steps 20 --seed 7 --poison --save "$tmp/grads" > "$tmp/gr.out"
if grep -q '^plan: .*offload optimizer+master+grads+weights' "$tmp/stream.log" &&
   grep -q '^buffer [0-9]* decoder.0.wq weights host ' "$tmp/stream.plan/plan" &&
   grep -q '^buffer [0-9]* decoder.0.wq.dev0 weights device ' "$tmp/stream.plan/plan" &&
   [ "$(losses < "$tmp/st.out")" = "$(losses < "$tmp/gr.out")" ] &&
   cmp -s "$tmp/stream/model.safetensors" "$tmp/grads/model.safetensors"; then
    ok "streamed-weights-bitwise ($(grep -c ' copy .*stream=h2d' "$tmp/stream.plan/plan") copies to the device)"
else
    bad streamed-weights-bitwise "$(grep '^plan' "$tmp/stream.log") $(diff <(losses < "$tmp/st.out") <(losses < "$tmp/gr.out") | head -3)"
fi

# Every precision trains tiny.ft on the cpu backend: 30 steps bring the loss from ln 256
# well down (fp32; bf16 mixed; fp16 mixed with its dynamic loss scale; bf16_pure, its
# updates Kahan-compensated).
for prec in fp32 bf16 fp16 bf16_pure; do
    sed "s/precision = bf16/precision = $prec/" models/tiny.ft > "$tmp/p-$prec.ft"
    "$ftc" compile "$tmp/p-$prec.ft" -o "$tmp/p-$prec.plan" >/dev/null
    out=$("$ftc" run "$tmp/p-$prec.plan" --data "$tmp/c.bin" --steps 30 2>&1)
    last=$(grep '^step 30/' <<<"$out" | awk '{print $4}')
    echo "$last" > "$tmp/p-$prec.last"
    awk -v l="$last" 'BEGIN { exit !(l < 4.6) }' && ok "trains-$prec (loss 5.51 -> $last)" || bad "trains-$prec" "$out"
done
# AdamW8bit trains tiny.ft too, over the fp32 master (bf16), in place (fp32) and
# Kahan-compensated (bf16_pure): the matrices' moments 8-bit (u8 codes [2, n], fp32
# absmaxes [2, n/256]), the norms' and biases' 32-bit (fewer than 4096 elements), and the
# loss after 30 steps within 2% of AdamW's.
for prec in bf16 fp32 bf16_pure; do
    sed "s/precision = bf16/precision = $prec/; s/optimizer = adamw(/optimizer = adamw8bit(/" models/tiny.ft > "$tmp/a8-$prec.ft"
    "$ftc" compile "$tmp/a8-$prec.ft" -o "$tmp/a8-$prec.plan" >/dev/null
    out=$("$ftc" run "$tmp/a8-$prec.plan" --data "$tmp/c.bin" --steps 30 2>&1)
    last=$(grep '^step 30/' <<<"$out" | awk '{print $4}')
    ref=$(cat "$tmp/p-$prec.last")
    plan="$tmp/a8-$prec.plan/plan"
    if grep -q ' adam_q8.decoder.0.wg optimizer .* u8 2x11264 ' "$plan" &&
       grep -q ' adam_absmax.decoder.0.wg optimizer .* f32 2x44 ' "$plan" &&
       grep -q ' adam_m.decoder.0.wk optimizer .* f32 32x64 ' "$plan" && ! grep -q ' adam_m.decoder.0.wg ' "$plan" &&
       awk -v l="$last" -v r="$ref" 'BEGIN { d = (l - r) / r; if (d < 0) d = -d; exit !(l < 4.6 && d < 0.02) }'; then
        ok "adamw8bit-trains-$prec (loss 5.51 -> $last; adamw $ref)"
    else
        bad "adamw8bit-trains-$prec" "$last against $ref: $out"
    fi
done
# fp16's loss scale: from 2^40 every step overflows, is skipped (the weights bitwise
# those a learning rate of 0 leaves) and halves the scale, as GradScaler does; from
# 2^19 the first overflows, the scale falls to 2^18, where backward fits, and grows
# back after growth_interval steps without an overflow.
sed 's/precision = bf16/precision = fp16\n  grad_scaler(init_scale = 1099511627776.0, growth_interval = 2)/' models/tiny.ft > "$tmp/f16huge.ft"
sed 's/precision = bf16/precision = fp16/; s/lr = 3e-3/lr = 0.0/' models/tiny.ft > "$tmp/f16lr0.ft"
"$ftc" compile "$tmp/f16huge.ft" -o "$tmp/f16huge.plan" >/dev/null
"$ftc" compile "$tmp/f16lr0.ft" -o "$tmp/f16lr0.plan" >/dev/null
out=$("$ftc" run "$tmp/f16huge.plan" --data "$tmp/c.bin" --steps 3 --save "$tmp/f16huge")
"$ftc" run "$tmp/f16lr0.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/f16lr0" >/dev/null
scales=$(grep '^step ' <<<"$out" | sed 's/.*  scale \([^ ]*\) .*/\1/' | tr '\n' ' ')
if grep -q '^step 1/3  loss [0-9.]*  skipped 1  scale 1.09951e+12 ' <<<"$out" &&
   grep -q '^step 3/3  loss [0-9.]*  skipped 3  scale 2.74878e+11 ' <<<"$out" &&
   [ "$scales" = "1.09951e+12 5.49756e+11 2.74878e+11 " ] &&
   grep -q '^done: 3 steps, 3 skipped' <<<"$out" &&
   "$st_diff" "$tmp/f16huge/model.safetensors" "$tmp/f16lr0/model.safetensors" 0 >/dev/null; then
    ok "fp16-overflow-skipped-and-backed-off ($scales)"
else
    bad fp16-overflow-skipped-and-backed-off "$out $("$st_diff" "$tmp/f16huge/model.safetensors" "$tmp/f16lr0/model.safetensors" 0)"
fi
sed 's/precision = bf16/precision = fp16\n  grad_scaler(init_scale = 524288, growth_interval = 3)/' models/tiny.ft > "$tmp/f16edge.ft"
"$ftc" compile "$tmp/f16edge.ft" -o "$tmp/f16edge.plan" >/dev/null
out=$("$ftc" run "$tmp/f16edge.plan" --data "$tmp/c.bin" --steps 12)
# GradScaler's rule, step by step: after a skipped step the scale halves; after 3 steps
# in a row without one it doubles; otherwise it stays.
if grep '^step ' <<<"$out" | awk '{ s = $0; sub(/.*  scale /, "", s); sub(/ .*/, "", s); sk = $0 ~ /  skipped /
        if (n && s + 0 != want) bad = 1
        if (sk) { want = s / 2; run = 0; skips++ } else if (++run == 3) { want = s * 2; run = 0; grows++ } else want = s
        n++ } END { exit !(n == 12 && !bad && skips > 0 && grows > 0) }'; then
    ok "fp16-scale-backs-off-and-grows ($(grep '^step ' <<<"$out" | sed 's/.*  scale \([^ ]*\) .*/\1/' | tr '\n' ' '))"
else
    bad fp16-scale-backs-off-and-grows "$out"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
