#!/usr/bin/env bash
# ftc data / compile / run end to end on tiny.ft: determinism, layouts, checkpoints,
# and the error for every malformed input the runtime reads.
# usage: train.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail+1)); }
# The losses of a run, one per line (times and rates vary, losses must not).
losses() { grep '^step ' | awk '{print $2, $4}'; }

"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null || bad data "ftc data failed"
"$ftc" compile models/tiny.ft -o "$tmp/tiny.plan" >/dev/null || bad compile "ftc compile failed"

out=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --seed 7 2>&1)
if grep -qE '^step 1/6  loss [0-9.]+  tok/s [0-9]+  lr [0-9.e+-]+  elapsed [0-9.]+s  mem [0-9.]+ MiB$' <<<"$out"; then
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

# Save, then start from the saved weights.
if "$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 3 --poison --save "$tmp/ck" >/dev/null &&
   [ -s "$tmp/ck/model.safetensors" ] &&
   "$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/ck" >/dev/null; then
    ok save-and-reload
else
    bad save-and-reload "failed"
fi

# fails NAME WANT_TEXT ftc-args...: exits 1, nothing on stdout but the header, WANT_TEXT on stderr.
fails() {
    local name=$1 want=$2; shift 2
    "$ftc" "$@" >"$tmp/o" 2>"$tmp/e"; local rc=$?
    if [ $rc = 1 ] && grep -qF -- "$want" "$tmp/e"; then ok "$name"; else
        bad "$name" "exit $rc, stderr: $(cat "$tmp/e")"; fi
}
# A checkpoint that lacks a tensor of the model.
sed -e 's|^  param lm_head .*|&\n  param extra      [dim]        as "model.extra.weight"|' \
    -e 's|return linear(rmsnorm(x, final_norm, eps), lm_head)|return linear(rmsnorm(x, final_norm, eps) * extra, lm_head)|' \
    models/tiny.ft > "$tmp/extra.ft"
"$ftc" compile "$tmp/extra.ft" -o "$tmp/extra.plan" >/dev/null
fails missing-tensor "no tensor 'model.extra.weight'" run "$tmp/extra.plan" --data "$tmp/c.bin" --weights "$tmp/ck"
# A checkpoint whose tensor has another shape than the .ft says.
sed 's/^  dim      = 64/  dim      = 32/' models/tiny.ft > "$tmp/narrow.ft"
"$ftc" compile "$tmp/narrow.ft" -o "$tmp/narrow.plan" >/dev/null
fails shape-mismatch "model.safetensors: tensor 'model.embed_tokens.weight' has shape [256, 64], the model expects [256, 32]" \
    run "$tmp/narrow.plan" --data "$tmp/c.bin" --weights "$tmp/ck"
# A checkpoint with a broken header.
printf '\xff\xff\xff\xff\xff\xff\xff\x7fgarbage' > "$tmp/bad.safetensors"
fails bad-safetensors "bad.safetensors" run "$tmp/tiny.plan" --data "$tmp/c.bin" --weights "$tmp/bad.safetensors"
# A token file that is not one.
head -c 100 tests/data/corpus.txt > "$tmp/notokens.bin"
fails bad-token-file "notokens.bin" run "$tmp/tiny.plan" --data "$tmp/notokens.bin"
# Tokens beyond the model's vocabulary.
printf '\x01\x00\x02\x00' > "$tmp/raw16"
for i in $(seq 1 80); do printf '\x10\x27'; done >> "$tmp/raw16"
"$ftc" data --u16 "$tmp/raw16" -o "$tmp/big.bin" >/dev/null
fails token-beyond-vocab "is 10000, not below the vocabulary size 256" run "$tmp/tiny.plan" --data "$tmp/big.bin" --steps 1
# A missing plan.
fails missing-plan "cannot open" run "$tmp/nothing.plan" --data "$tmp/c.bin"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
