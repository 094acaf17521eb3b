#!/usr/bin/env bash
# Published configs (tests/configs/*.json, written from the model cards): each that ftc
# import writes gives the parameter count transformers gives it (counts.txt, made by
# count_params.py on the meta device), and models/NAME.ft, where there is one, is exactly
# what it writes; each that asks for what ftc does not model fails with one located error;
# the hand-written models/gpt2.ft counts as transformers' GPT-2 does.
# usage: configs.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses

# The configs ftc import refuses, and the key each one's error is at (line:col).
declare -A refused=([gpt2]="6:3")

# "parameters: 8,030,261,248 in 291 tensors" -> 8030261248 (the count comes first; one plan,
# fixed, instead of the search)
count_of() { "$ftc" compile "$1" -o "$tmp/out.plan" --budget 8T --host-mem 8T --micro-batch 1 --remat keep --offload none 2>&1 |
             sed -n 's/^parameters: \([0-9,]*\) in .*/\1/p' | tr -d ,; }

while read -r name want; do
    case $name in '#'*|'') continue ;; esac
    cfg=tests/configs/$name.json
    if [ -n "${refused[$name]:-}" ]; then
        if "$ftc" import "$cfg" > "$tmp/out.ft" 2> "$tmp/err"; then
            bad "$name-refused" "imported"
        elif [ "$(grep -c ': error: ' "$tmp/err")" = 1 ] && [ ! -s "$tmp/out.ft" ] &&
             grep -q "^$cfg:${refused[$name]}: error: " "$tmp/err"; then
            ok "$name-refused"
        else
            bad "$name-refused" "$(cat "$tmp/err")"
        fi
        continue
    fi
    if ! "$ftc" import "$cfg" > "$tmp/$name.ft" 2> "$tmp/err"; then
        bad "$name" "$(cat "$tmp/err")"
        continue
    fi
    got=$(count_of "$tmp/$name.ft")
    if [ "$got" = "$want" ]; then ok "$name-count"; else bad "$name-count" "ftc $got, transformers $want"; fi
    if [ -f "models/$name.ft" ]; then
        if cmp -s "$tmp/$name.ft" "models/$name.ft"; then ok "$name-is-model"; else
            bad "$name-is-model" "$(diff "$tmp/$name.ft" "models/$name.ft" | head -5)"; fi
    fi
done < tests/configs/counts.txt

want=$(sed -n 's/^gpt2 //p' tests/configs/counts.txt)
got=$(count_of models/gpt2.ft)
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok gpt2-model-count; else bad gpt2-model-count "ftc $got, transformers $want"; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
