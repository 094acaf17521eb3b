#!/usr/bin/env bash
# Preference fine-tuning end to end on the small Qwen2 model of tests/fixtures/hf: a
# preference set through ftc data (pairs), dpo/ipo/orpo/simpo in the train section, the
# reference each way (lora_off, copy, precomputed) and ftc compile's choice among them, the
# runs' step lines (the loss and TRL's rewards), a precomputed reference kept for a resumed
# run, and the user's errors: their message and location, their exit status.
# (The losses and gradients against PyTorch: test_reference; the kernels: test_kernels,
# test_grad.)
# usage: pref.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
. tests/lib.sh
export FTC_NO_CUBIN=1
hf=tests/fixtures/hf

# expect_fail NAME PATTERN ARGS...: ftc ARGS fails (exit 1), says PATTERN on stderr, nothing on stdout.
expect_fail() {
    local name=$1 pat=$2 out rc; shift 2
    out=$("$ftc" "$@" 2>"$tmp/err"); rc=$?
    if [ "$rc" = 0 ]; then bad "$name" "exit 0"
    elif [ -n "$out" ]; then bad "$name" "wrote to stdout: $out"
    elif ! grep -qF -- "$pat" "$tmp/err"; then bad "$name" "no '$pat' in: $(cat "$tmp/err")"
    else ok "$name"; fi
}

# The preference set: four pairs in TRL's conversational shape.
m() { printf '{"role": "%s", "content": "%s"}' "$1" "$2"; }
pair() { printf '{"prompt": [%s], "chosen": [%s], "rejected": [%s]}\n' "$(m user "$1")" "$(m assistant "$2")" "$(m assistant "$3")"; }
{ pair "What colour is the sky?" "The sky is blue." "The sky is green."
  pair "Name a fruit." "An apple is a fruit." "A chair."
  pair "How many legs has a cat?" "A cat has four legs." "Two."
  pair "Say hello." "Hello there!" "No."; } > "$tmp/pref.jsonl"
"$ftc" data --tokenizer $hf "$tmp/pref.jsonl" --pack 128 -o "$tmp/pref.tok" > "$tmp/data.txt" 2>&1 &&
    grep -q "from 4 of 4 pairs" "$tmp/data.txt" && ok data-pairs || bad data-pairs "$(cat "$tmp/data.txt")"

# The imported recipe made a preference one: LOSS in place of cross entropy, EXTRA after the
# optimizer line (lora(...), ...).
"$ftc" import $hf > "$tmp/q.ft" || bad import "ftc import failed"
recipe() {   # recipe FILE LOSS [EXTRA]
    sed -e 's/^  seq  *= .*/  seq          = 128/' -e 's/^  batch  *= .*/  batch        = 4/' \
        -e 's/^  packing  *= .*/  packing      = false/' -e 's/^  precision  *= .*/  precision    = fp32/' \
        -e "s/cross_entropy(forward(tokens), next(tokens))/$2/" -e 's/^  lr_schedule .*//' -e 's/^  warmup_steps .*//' \
        -e "s/^  optimizer .*/&\n${3:-}/" "$tmp/q.ft" > "$1"
}
lora='  lora(r = 4, alpha = 8, targets = [q_proj, v_proj])'
dpo='dpo(forward(tokens), next(tokens), beta = 0.1)'

# 1. reference = auto: each way planned, a table, one chosen.
recipe "$tmp/auto.ft" "$dpo" "$lora"
"$ftc" compile "$tmp/auto.ft" -o "$tmp/auto" > "$tmp/auto.txt" 2>&1 || bad compile-auto "$(tail -5 "$tmp/auto.txt")"
table=$(sed -n '/^reference: each way/,/^  chosen:/p' "$tmp/auto.txt")
[ "$(grep -cE '^  (lora_off|copy|precomputed) ' <<<"$table")" = 3 ] && [ "$(grep -c '<- chosen' <<<"$table")" = 1 ] &&
    grep -q '^  chosen: ' <<<"$table" && ok auto-table || bad auto-table "$table"
recipe "$tmp/autofull.ft" "$dpo"   # full fine-tuning: no base to run without adapters
"$ftc" compile "$tmp/autofull.ft" -o "$tmp/autofull" > "$tmp/autofull.txt" 2>&1
table=$(sed -n '/^reference: each way/,/^  chosen:/p' "$tmp/autofull.txt")
! grep -q '^  lora_off ' <<<"$table" && grep -qE '^  (copy|precomputed) .*<- chosen' <<<"$table" &&
    ok auto-full-no-lora-off || bad auto-full-no-lora-off "$table"

# 2. Each way forced, LoRA: lora_off and copy compute the same reference, so the same steps.
run() {   # run NAME PLAN [ARGS...]: 3 steps on the cpu, the step lines into $tmp/NAME.steps
    local name=$1 plan=$2; shift 2
    "$ftc" run "$plan" --data "$tmp/pref.tok" --weights $hf --steps 3 --device cpu "$@" > "$tmp/$name.out" 2>&1 ||
        { bad "$name" "$(tail -3 "$tmp/$name.out")"; return 1; }
    grep '^step' "$tmp/$name.out" | sed 's/  tok\/s [0-9]*//; s/  elapsed .*  mem [^ ]* [^ ]*//' > "$tmp/$name.steps"
}
for r in lora_off copy precomputed; do
    recipe "$tmp/$r.ft" "dpo(forward(tokens), next(tokens), beta = 0.1, reference = $r)" "$lora"
    "$ftc" compile "$tmp/$r.ft" -o "$tmp/$r" > "$tmp/$r.txt" 2>&1 || bad "compile-$r" "$(tail -3 "$tmp/$r.txt")"
    run "run-$r" "$tmp/$r" --save "$tmp/save-$r" --save-every 2 && ok "run-$r"
done
grep -q '^reference: precomputed, as the train section asks: a pass over the data before the first step' \
    "$tmp/precomputed.txt" && ok forced-reference-said || bad forced-reference-said "$(grep reference "$tmp/precomputed.txt")"
# the policy starts as its reference: log 2, rewards 0
grep -q '^step 1/3  loss 0.693147  .*rewards/chosen 0  rewards/rejected 0  rewards/margins 0  rewards/accuracies 0.000' \
    "$tmp/run-lora_off.steps" && ok dpo-starts-at-log2 || bad dpo-starts-at-log2 "$(cat "$tmp/run-lora_off.steps")"
# (every step alike: the copy's weights take no random stream of the adapters'; precomputed's
# loss alike at step one, its sums rounded to floats)
first() { sed -n '1s/  gnorm [^ ]*//p' "$tmp/$1.steps"; }
[ -s "$tmp/run-lora_off.steps" ] && cmp -s "$tmp/run-lora_off.steps" "$tmp/run-copy.steps" &&
    [ "$(first run-lora_off | cut -d' ' -f1-5)" = "$(first run-precomputed | cut -d' ' -f1-5)" ] &&
    ok references-agree || bad references-agree "$(diff "$tmp/run-lora_off.steps" "$tmp/run-copy.steps"; first run-precomputed)"
# step 3 moved the policy away from its reference: the chosen rewarded over the rejected
grep -q '^step 3/3 .*rewards/accuracies 1.000' "$tmp/run-copy.steps" && ok rewards-move ||
    bad rewards-move "$(cat "$tmp/run-copy.steps")"
# NVRTC compiles the plan's kernels (the log-probabilities', the pairs' loss) where it is here
FTC_NO_CUBIN= "$ftc" compile "$tmp/copy.ft" -o "$tmp/cubin" > /dev/null 2>&1
if grep -q 'not compiled here' "$tmp/cubin/kernels.txt" 2>/dev/null; then ok nvrtc-absent
else ls "$tmp"/cubin/kernels.sm_*.cubin > /dev/null 2>&1 && grep -q 'pref_grad' "$tmp/cubin/kernels.cu" &&
    ok nvrtc-compiles || bad nvrtc-compiles "$(cat "$tmp/cubin/kernels.txt" 2>/dev/null | head -3)"; fi
# planned against unplanned (every buffer its own bytes) and poisoned on free: the same steps
run copy-unplanned "$tmp/copy" --unplanned && run copy-poison "$tmp/copy" --poison &&
    cmp -s "$tmp/copy-unplanned.steps" "$tmp/copy-poison.steps" && grep -q '^step 3/3' "$tmp/copy-poison.steps" &&
    [ "$(losses < "$tmp/copy-poison.steps")" = "$(losses < "$tmp/run-copy.steps")" ] &&
    ok planned-unplanned-poison || bad planned-unplanned-poison "$(diff "$tmp/copy-unplanned.steps" "$tmp/copy-poison.steps")"
# the report's records, TRL's names
grep -q '"rewards/chosen": .*"rewards/rejected": .*"rewards/margins": .*"rewards/accuracies": 1' \
    "$tmp/save-copy/run.jsonl" && ok rewards-in-report || bad rewards-in-report "$(tail -1 "$tmp/save-copy/run.jsonl")"
# the frozen copy: its weights a category of their own; the buffers named ref.*
grep -q '^buffer [0-9]* ref\.decoder\.0\.wq reference ' "$tmp/copy/plan" && grep -q 'reference' "$tmp/copy/memory.txt" &&
    ok copy-in-dumps || bad copy-in-dumps "$(grep -m3 'ref\.' "$tmp/copy/plan")"

# a reply from a preference plan: its decode phase the policy's alone (no reference, no loss)
a=$("$ftc" generate "$tmp/lora_off" --weights $hf --tokenizer $hf --prompt "Say hello." --max-new-tokens 8 --ids \
    --device cpu 2>/dev/null) && b=$("$ftc" generate $hf --prompt "Say hello." --max-new-tokens 8 --ids 2>/dev/null) &&
    [ -n "$a" ] && [ "$a" = "$b" ] && ok generate-from-pref-plan || bad generate-from-pref-plan "'$a' against '$b'"

# 3. precomputed: the reference's pass before step one, its sums kept for a resumed run
grep -q '^reference: the log-probabilities of 8 windows computed in .*kept in .*/reference_logps.bin' \
    "$tmp/run-precomputed.out" && [ -s "$tmp/save-precomputed/reference_logps.bin" ] && ok precomputed-pass ||
    bad precomputed-pass "$(grep reference "$tmp/run-precomputed.out")"
grep -q '^phase reference ' "$tmp/precomputed/plan" && grep -q 'role=ref_logps' "$tmp/precomputed/plan" &&
    ok precomputed-phase || bad precomputed-phase "$(grep '^phase' "$tmp/precomputed/plan")"
"$ftc" run "$tmp/precomputed" --data "$tmp/pref.tok" --resume "$tmp/save-precomputed" --steps 4 --device cpu \
    > "$tmp/resume.out" 2>&1 && grep -q '^reference: the log-probabilities of 8 windows read from' "$tmp/resume.out" &&
    ok precomputed-resume || bad precomputed-resume "$(tail -3 "$tmp/resume.out")"
# evaluation: a mean over pairs (the eval file's own reference sums, precomputed too)
"$ftc" eval "$tmp/lora_off" --data "$tmp/pref.tok" --weights $hf --device cpu 2>/dev/null |
    grep -q '^loss 0.693147  over 4 pairs' && ok eval-pairs || bad eval-pairs "$("$ftc" eval "$tmp/lora_off" --data "$tmp/pref.tok" --weights $hf --device cpu 2>&1 | tail -2)"
"$ftc" run "$tmp/precomputed" --data "$tmp/pref.tok" --eval-data "$tmp/pref.tok" --eval-every 1 --steps 1 \
    --weights $hf --device cpu > "$tmp/pe.out" 2>&1 && grep -q '^reference: the log-probabilities of 16 windows computed' "$tmp/pe.out" &&
    grep -qE '^eval 1/1  loss 0\.69[0-9]*  pairs 4 ' "$tmp/pe.out" && ok eval-precomputed || bad eval-precomputed "$(cat "$tmp/pe.out")"
# a full fine-tune's resume without the sums: its weights have moved, refused
recipe "$tmp/fullpre.ft" "dpo(forward(tokens), next(tokens), reference = precomputed)"
"$ftc" compile "$tmp/fullpre.ft" -o "$tmp/fullpre" > /dev/null 2>&1
"$ftc" run "$tmp/fullpre" --data "$tmp/pref.tok" --weights $hf --steps 2 --device cpu --save "$tmp/save-fp" \
    --save-every 1 > /dev/null 2>&1
rm -f "$tmp/save-fp/reference_logps.bin"
expect_fail precomputed-full-resume "a resumed full fine-tune cannot compute them again" \
    run "$tmp/fullpre" --data "$tmp/pref.tok" --resume "$tmp/save-fp" --steps 3 --device cpu

# 4. The other losses: they run, their loss finite and moving.
for l in "ipo(forward(tokens), next(tokens), beta = 0.5)" "orpo(forward(tokens), next(tokens), beta = 0.2)" \
         "simpo(forward(tokens), next(tokens), beta = 2.0, gamma = 0.5, label_smoothing = 0.1)"; do
    name=${l%%(*}
    recipe "$tmp/$name.ft" "$l" "$lora"
    "$ftc" compile "$tmp/$name.ft" -o "$tmp/$name" > /dev/null 2>&1 && run "run-$name" "$tmp/$name" &&
        [ "$(awk '{print $4}' "$tmp/run-$name.steps" | sort -u | wc -l)" -ge 2 ] &&
        ! grep -qi nan "$tmp/run-$name.steps" && ok "run-$name" || bad "run-$name" "$(cat "$tmp/run-$name.steps" 2>/dev/null)"
done

# 5. The user's errors, at their place in the .ft.
bad_ft() {   # bad_ft NAME PATTERN LOSS [EXTRA]
    recipe "$tmp/bad.ft" "$3" "${4:-}"
    expect_fail "$1" "$2" compile "$tmp/bad.ft" -o "$tmp/badplan"
}
bad_ft lora-off-without-lora "reference = lora_off runs the base without its adapters" \
    "dpo(forward(tokens), next(tokens), reference = lora_off)"
bad_ft orpo-has-no-reference "orpo takes beta, not 'reference'" "orpo(forward(tokens), next(tokens), reference = copy)"
bad_ft ipo-no-smoothing "ipo takes beta, reference, not 'label_smoothing'" \
    "ipo(forward(tokens), next(tokens), label_smoothing = 0.1)"
bad_ft beta-positive "beta must be positive" "dpo(forward(tokens), next(tokens), beta = 0.0)"
bad_ft smoothing-range "label_smoothing must be in [0, 0.5]" "dpo(forward(tokens), next(tokens), label_smoothing = 0.7)"
bad_ft reference-word "reference must be auto" "dpo(forward(tokens), next(tokens), reference = frozen)"
bad_ft unknown-loss "unknown loss 'kto'" "kto(forward(tokens), next(tokens))"
bad_ft loss-shape "loss must be dpo(forward(tokens), next(tokens), ...)" "dpo(forward(tokens))"
recipe "$tmp/bad.ft" "$dpo"
sed -i 's/^  batch  *= .*/  batch        = 3/' "$tmp/bad.ft"
expect_fail odd-batch "dpo trains on pairs, a chosen and a rejected row in the same micro-batch" \
    compile "$tmp/bad.ft" -o "$tmp/badplan"
grep -qE "bad.ft:[0-9]+:[0-9]+: error" "$tmp/err" && ok error-located || bad error-located "$(cat "$tmp/err")"
# a file of records for a plan that reads pairs
echo '{"text": "hello there"}' > "$tmp/text.jsonl"
"$ftc" data --tokenizer $hf "$tmp/text.jsonl" --pack 128 -o "$tmp/text.tok" > /dev/null 2>&1
expect_fail unpaired-for-pairs "holds no preference pairs" run "$tmp/copy" --data "$tmp/text.tok" --steps 1 --device cpu

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
