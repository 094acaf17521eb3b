#!/usr/bin/env bash
# The generated kernels train like the reference kernels: tiny.ft for 20 steps on the emu
# backend (kernels.cu compiled for the CPU: every kernel but the GEMMs is generated code)
# and on the cpu backend, full fine-tuning, LoRA with dropout (the same masks on both),
# QLoRA and full fine-tuning with AdamW8bit on the device; every step's loss agrees within
# 2^-8 of itself (one bf16 ulp: bf16 storage,
# reductions summed in another order, attention's probabilities rounded to bf16 for the
# tensor cores), as do the eval losses of the eval phase after steps 10 and 20;
# same-seed emu runs agree bitwise; and so do the updates inside backward and after it.
# usage: train_emu.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses
evals() { grep '^eval [0-9]' | awk '{print $2, $4}'; }

"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null || bad data "ftc data failed"
head -c 2000 tests/data/corpus.txt > "$tmp/e.txt"
"$ftc" data --bytes "$tmp/e.txt" -o "$tmp/e.bin" >/dev/null || bad data "ftc data failed"
lora='  lora(r = 8, alpha = 16, dropout = 0.1, targets = [wq, wv])'
qlora='  lora(r = 8, alpha = 16, dropout = 0.1, targets = [wq, wv])\n  quantize(nf4, double_quant = true)'
for kind in full lora qlora adamw8bit; do
    ft=models/tiny.ft flags=
    if [ $kind = adamw8bit ]; then   # (its update on the device: the generated kernels)
        sed "s/optimizer = adamw(/optimizer = adamw8bit(/" models/tiny.ft > "$tmp/$kind.ft"
        ft="$tmp/$kind.ft" flags="--offload none"
    elif [ $kind != full ]; then
        extra=$lora; [ $kind = qlora ] && extra=$qlora
        sed "s/^  optimizer = .*/&\n$extra/" models/tiny.ft > "$tmp/$kind.ft"
        ft="$tmp/$kind.ft"
    fi
    # shellcheck disable=SC2086
    if ! "$ftc" compile "$ft" -o "$tmp/$kind.plan" $flags >/dev/null 2>"$tmp/err"; then
        bad "$kind-compiles" "$(cat "$tmp/err")"
        continue
    fi
    for dev in cpu emu; do
        "$ftc" run "$tmp/$kind.plan" --data "$tmp/c.bin" --steps 20 --seed 3 --device $dev \
            --eval-data "$tmp/e.bin" --eval-every 10 > "$tmp/$kind.$dev" 2>&1
    done
    worst=$(paste <(losses < "$tmp/$kind.cpu") <(losses < "$tmp/$kind.emu") |
        awk '{ d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > w) w = d; if ($1 != $3) w = 1e9; n++ }
             END { if (n != 20) w = 1e9; printf "%.2g", w }')
    eworst=$(paste <(evals < "$tmp/$kind.cpu") <(evals < "$tmp/$kind.emu") |
        awk '{ d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > w) w = d; if ($1 != $3) w = 1e9; n++ }
             END { if (n != 2) w = 1e9; printf "%.2g", w }')
    if grep -q '^ftc run: .* on emu,' "$tmp/$kind.emu" && awk -v w="$worst" -v e="$eworst" 'BEGIN { exit !(w <= 2^-8 && e <= 2^-8) }'; then
        ok "emu-trains-as-cpu-$kind (worst relative loss difference $worst over 20 steps, eval $eworst)"
    else
        bad "emu-trains-as-cpu-$kind" "worst $worst, eval $eworst: $(tail -3 "$tmp/$kind.emu")"
    fi
done
# Same seed, same losses, bitwise, on the emu backend too (LoRA: dropout masks included).
a=$("$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 4 --seed 5 --device emu | losses)
b=$("$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 4 --seed 5 --device emu | losses)
[ -n "$a" ] && [ "$a" = "$b" ] && ok emu-deterministic || bad emu-deterministic "$a / $b"
# The updates inside backward (the generated AdamW and its factor in the backward phase)
# give the weights the updates after backward give, bitwise, on emu too.
for u in step backward; do
    "$ftc" compile models/tiny.ft --micro-batch 8 --offload none --update $u -o "$tmp/early.$u.plan" >/dev/null &&
        "$ftc" run "$tmp/early.$u.plan" --data "$tmp/c.bin" --steps 4 --seed 5 --device emu --poison \
            --save "$tmp/early.$u" > "$tmp/early.$u.out" 2>&1
done
if [ "$(losses < "$tmp/early.step.out" | wc -l)" = 4 ] &&
   [ "$(losses < "$tmp/early.step.out")" = "$(losses < "$tmp/early.backward.out")" ] &&
   cmp -s "$tmp/early.step/model.safetensors" "$tmp/early.backward/model.safetensors"; then
    ok emu-updates-in-backward-bitwise
else
    bad emu-updates-in-backward-bitwise "$(tail -2 "$tmp/early.backward.out")"
fi
# A plan without kernels.cu cannot run on emu: a clear error.
cp -r "$tmp/full.plan" "$tmp/nokernels.plan" && rm "$tmp/nokernels.plan/kernels.cu"
out=$("$ftc" run "$tmp/nokernels.plan" --data "$tmp/c.bin" --steps 1 --device emu 2>&1); rc=$?
[ $rc = 1 ] && grep -q "cannot read kernels.cu" <<<"$out" && ok emu-needs-kernels || bad emu-needs-kernels "exit $rc: $out"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
