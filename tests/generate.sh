#!/usr/bin/env bash
# ftc generate end to end on tiny.ft: the decode phase in the plan and its dumps (the KV
# cache's buffers and bytes), a reply on the cpu and emu backends (the same greedy ids),
# --eos stopping it, sampling reproducible by its seed, LoRA applied at generation (the
# adapter over the base gives the reply the merged weights give), a conversation through a
# chat template, a model directory (tests/fixtures/hf, its full save, an adapter over it) and
# a .ft named in place of the plan, and every user error: its message, its exit status,
# nothing on stdout.
# (The tokens themselves against the full forward: tests/test_generate.c.)
# usage: generate.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
. tests/lib.sh
export FTC_NO_CUBIN=1

# expect_fail NAME RC PATTERN ARGS...: ftc ARGS exits RC, says PATTERN on stderr, nothing on stdout.
expect_fail() {
    local name=$1 want=$2 pat=$3 out rc; shift 3
    out=$("$ftc" "$@" 2>"$tmp/err"); rc=$?
    if [ "$rc" != "$want" ]; then bad "$name" "exit $rc, want $want: $(cat "$tmp/err")"
    elif [ -n "$out" ]; then bad "$name" "wrote to stdout: $out"
    elif ! grep -qF -- "$pat" "$tmp/err"; then bad "$name" "no '$pat' in: $(cat "$tmp/err")"
    else ok "$name"; fi
}

sed 's/precision = bf16/precision = fp32/' models/tiny.ft > "$tmp/tiny.ft"
"$ftc" compile "$tmp/tiny.ft" -o "$tmp/t.plan" > "$tmp/compile.txt" 2>&1 || bad compile "$(cat "$tmp/compile.txt")"
grep -q '^decode phase (ftc generate): [0-9]* instructions, one token over a KV cache of 64 tokens (32.0 KiB)' \
    "$tmp/compile.txt" && ok compile-says-decode || bad compile-says-decode "$(tail -3 "$tmp/compile.txt")"
# every layer's k and v cache: 1 x 64 tokens x 2 heads x 16 dims x 4 bytes, in the plan and its dumps
[ "$(grep -c 'kv_cache device [0-9]* 8192 f32 1x64x2x16 .* kind=cache' "$tmp/t.plan/plan")" = 4 ] &&
    grep -q '^  decode ' "$tmp/t.plan/memory.txt" && grep -q '"decoder.0.k.cache"' "$tmp/t.plan/memory.json" &&
    ok kv-cache-planned || bad kv-cache-planned "$(grep cache "$tmp/t.plan/plan" | head -4)"

"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null
"$ftc" run "$tmp/t.plan" --data "$tmp/c.bin" --steps 60 --save "$tmp/w" >/dev/null 2>&1 || bad train "run failed"
gen() { "$ftc" generate "$tmp/t.plan" --weights "$tmp/w" --bytes --prompt "The " "$@" 2>"$tmp/gen.err"; }
cpu=$(gen --ids --max-new-tokens 24 --device cpu) && emu=$(gen --ids --max-new-tokens 24 --device emu)
[ -n "$cpu" ] && [ "$cpu" = "$emu" ] && [ "$(wc -w <<<"$cpu")" -le 24 ] && ok cpu-emu-same-reply ||
    bad cpu-emu-same-reply "cpu '$cpu', emu '$emu'"
text=$(gen --max-new-tokens 24)
[ "$(printf '%s' "$text" | od -An -tu1 | xargs)" = "$(sed 's/ /\n/g' <<<"$cpu" | xargs)" ] && ok ids-are-the-text ||
    bad ids-are-the-text "'$text' against $cpu"
# stopped by --eos: the byte "e" ends the reply, which holds none of it
text=$(gen --eos e --max-new-tokens 60)
! grep -q e <<<"$text" && { grep -q 'stopped by the end-of-sequence id 101' "$tmp/gen.err" ||
    grep -q 'stopped by --max-new-tokens 60' "$tmp/gen.err"; } && ok eos-stops || bad eos-stops "'$text' $(cat "$tmp/gen.err")"
a=$(gen --ids --temperature 0.9 --top-p 0.95 --seed 3) && b=$(gen --ids --temperature 0.9 --top-p 0.95 --seed 3)
[ "$a" = "$b" ] && ok sampling-seeded || bad sampling-seeded "'$a' vs '$b'"
gen --ids --max-new-tokens 4 >/dev/null && grep -q '^4 prompt tokens in .*; 4 new, stopped by --max-new-tokens 4' \
    "$tmp/gen.err" && ok summary-line || bad summary-line "$(cat "$tmp/gen.err")"

# LoRA: the adapter over the base weights gives the merged model's reply (sampled, one seed:
# the base model's differs)
sed 's/^  optimizer = .*/&\n  lora(r = 4, alpha = 8, targets = [wq, wv, wo])/; s/lr = 3e-3/lr = 3e-2/' "$tmp/tiny.ft" > "$tmp/lora.ft"
"$ftc" compile "$tmp/lora.ft" -o "$tmp/l.plan" >/dev/null 2>&1 || bad lora-compile "compile failed"
"$ftc" run "$tmp/l.plan" --data "$tmp/c.bin" --steps 30 --weights "$tmp/w" --save "$tmp/lw" --merge >/dev/null 2>&1 ||
    bad lora-train "run failed"
lgen() { "$ftc" generate "$tmp/l.plan" --bytes --prompt "The " --ids --max-new-tokens 24 --temperature 1 --seed 5 "$@" 2>>"$tmp/lgen.err"; }
with=$(lgen --weights "$tmp/w" --adapter "$tmp/lw") && merged=$(lgen --weights "$tmp/lw/merged") &&
    base=$(lgen --weights "$tmp/w")
[ -n "$with" ] && [ "$with" = "$merged" ] && [ "$with" != "$base" ] && ok lora-at-generation ||
    bad lora-at-generation "adapter '$with', merged '$merged', base '$base': $(tail -3 "$tmp/lgen.err")"
grep -q 'warning: no --adapter' "$tmp/lgen.err" && ok lora-no-adapter-warned || bad lora-no-adapter-warned "$(cat "$tmp/lgen.err")"

# a conversation through a chat template (a model of the fixture tokenizer's 903 tokens)
sed 's/vocab    = 256/vocab    = 903/' "$tmp/tiny.ft" > "$tmp/v903.ft"
"$ftc" compile "$tmp/v903.ft" -o "$tmp/v.plan" >/dev/null 2>&1 || bad v903-compile "compile failed"
printf '[{"role": "user", "content": "Hello there"}]\n' > "$tmp/m.json"
chatml='{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}'
out=$("$ftc" generate "$tmp/v.plan" --tokenizer tests/fixtures/tok/qwen2.json --messages "$tmp/m.json" \
      --template "$chatml" --max-new-tokens 5 --ids 2>"$tmp/err") && [ "$(wc -w <<<"$out")" -le 5 ] &&
    grep -q '^[1-9][0-9]* prompt tokens' "$tmp/err" && ok messages-through-template || bad messages-through-template "$(cat "$tmp/err")"

# A Hugging Face model directory, a full save of it, an adapter over it and a .ft, each named
# where a plan directory goes: imported and planned into a temporary directory (TMPDIR here,
# empty after every run, an error or a signal ending it). The greedy reply of the fixture's
# base model is transformers' (tests/fixtures/hf/expected.txt); the saves' replies are those
# of their plans with --weights, --tokenizer and --adapter.
fx=tests/fixtures/hf
mkdir "$tmp/td"
export TMPDIR=$tmp/td
hgen() { "$ftc" generate "$@" --messages "$fx/chat.json" --ids --max-new-tokens 24 2>"$tmp/hgen.err"; }
base=$(sed -n 's/^base reply //p' "$fx/expected.txt")
out=$(hgen "$fx") && [ "$out" = "$base" ] && grep -q 'a KV cache of 107 tokens' "$tmp/hgen.err" &&
    grep -q "weights: 26 tensors from $fx\$" "$tmp/hgen.err" && ok model-dir-reply ||
    bad model-dir-reply "'$out', want '$base': $(cat "$tmp/hgen.err")"
"$ftc" generate "$fx/" --prompt "Hello" --ids >/dev/null 2>"$tmp/err" &&
    grep -q 'a KV cache of 256 tokens' "$tmp/err" && ok model-dir-cache-at-max-positions ||
    bad model-dir-cache-at-max-positions "$(cat "$tmp/err")"
"$ftc" import "$fx" > "$tmp/hf.ft" && sed -i 's/^  seq *= .*/  seq = 128/; s/^  batch *= .*/  batch = 2/;
    s/precision *= bf16/precision = fp32/; s/lr = 2e-5/lr = 1e-2/' "$tmp/hf.ft"
sed 's/^  # lora(/  lora(/; s/lr = 1e-2/lr = 2e-2/' "$tmp/hf.ft" > "$tmp/hfl.ft"
out=$(hgen "$tmp/hf.ft" --weights "$fx" --tokenizer "$fx") && [ "$out" = "$base" ] &&
    grep -q 'a KV cache of 128 tokens' "$tmp/hgen.err" && ok ft-file-reply || bad ft-file-reply "'$out': $(cat "$tmp/hgen.err")"
"$ftc" compile "$tmp/hf.ft" -o "$tmp/hf.plan" >/dev/null 2>&1 && "$ftc" compile "$tmp/hfl.ft" -o "$tmp/hfl.plan" >/dev/null 2>&1 &&
    "$ftc" data --tokenizer "$fx" "$fx/train.jsonl" -o "$tmp/hf.bin" --pack 128 >/dev/null 2>&1 &&
    "$ftc" run "$tmp/hf.plan" --data "$tmp/hf.bin" --weights "$fx" --steps 3 --save "$tmp/full" >/dev/null 2>&1 &&
    "$ftc" run "$tmp/hfl.plan" --data "$tmp/hf.bin" --weights "$fx" --steps 3 --save "$tmp/lora" >/dev/null 2>&1 ||
    bad hf-saves "the fixture's compile, data or run failed"
out=$(hgen "$tmp/full") && want=$(hgen "$tmp/hf.plan" --weights "$tmp/full" --tokenizer "$tmp/full") &&
    [ -n "$out" ] && [ "$out" = "$want" ] && [ "$out" != "$base" ] && ok full-save-reply ||
    bad full-save-reply "'$out', its plan's '$want'"
out=$(hgen "$fx" --adapter "$tmp/lora") && dir=$(hgen "$tmp/lora") &&
    want=$(hgen "$tmp/hfl.plan" --weights "$fx" --tokenizer "$fx" --adapter "$tmp/lora") &&
    [ -n "$out" ] && [ "$out" = "$want" ] && [ "$dir" = "$want" ] && [ "$out" != "$base" ] && ok adapter-reply ||
    bad adapter-reply "--adapter '$out', the adapter directory '$dir', its plan's '$want'"
# errors: their messages, nothing on stdout, nothing left in TMPDIR
mkdir "$tmp/empty" "$tmp/noweights" "$tmp/bert" "$tmp/farbase"
cp "$fx"/config.json "$fx"/tokenizer*.json "$tmp/noweights/" && cp "$fx"/* "$tmp/bert/"
sed -i 's/"qwen2"/"bert"/' "$tmp/bert/config.json"
sed 's#"base_model_name_or_path": ".*"#"base_model_name_or_path": "Qwen/Qwen2.5-0.5B"#' "$tmp/lora/adapter_config.json" \
    > "$tmp/farbase/adapter_config.json"
expect_fail neither-plan-nor-model 1 "'$tmp/empty' is no plan directory (no $tmp/empty/plan), model directory (no config.json)" \
    generate "$tmp/empty" --prompt hi
expect_fail model-dir-no-weights 1 "$tmp/noweights has no weights: no model.safetensors" generate "$tmp/noweights" --prompt hi
expect_fail model-dir-not-imported 1 "$tmp/bert/config.json:19:3: error: unsupported model_type \"bert\"" \
    generate "$tmp/bert" --prompt hi
expect_fail adapter-base-not-here 1 "the adapter's base model 'Qwen/Qwen2.5-0.5B'" generate "$tmp/farbase" --prompt hi
expect_fail adapter-twice 2 "--adapter and the adapter directory" generate "$tmp/lora" --adapter "$tmp/lora" --prompt hi
expect_fail max-len-past-positions 1 "--max-len 1000 passes the model's max_position_embeddings, 256" \
    generate "$fx" --prompt hi --max-len 1000
expect_fail max-len-of-a-plan 2 "--max-len: a plan's KV cache is what ftc compile --max-len made it" \
    generate "$tmp/t.plan" --bytes --prompt hi --max-len 10
expect_fail ft-missing 1 "cannot open '$tmp/none.ft'" generate "$tmp/none.ft" --bytes --prompt hi
# a signal ends it while it generates: the temporary plan goes too
"$ftc" generate "$tmp/tiny.ft" --bytes --prompt "The " --max-len 100000 --max-new-tokens 99000 >"$tmp/sig.out" 2>"$tmp/sig.err" &
pid=$!
for _ in $(seq 100); do grep -q 'KV cache of 100000' "$tmp/sig.err" && break; sleep 0.1; done
kill -TERM $pid; wait $pid; rc=$?
[ "$rc" = 143 ] && [ ! -s "$tmp/sig.out" ] && [ -z "$(ls -A "$tmp/td")" ] && ok signal-removes-plan ||
    bad signal-removes-plan "exit $rc, left: $(ls -A "$tmp/td"), $(cat "$tmp/sig.err")"
[ -z "$(ls -A "$tmp/td")" ] && ok no-temporary-left || bad no-temporary-left "$(ls -A "$tmp/td")"
unset TMPDIR

# user errors
expect_fail no-tokenizer 2 "no --tokenizer" generate "$tmp/t.plan" --prompt hi
expect_fail no-prompt 2 "no prompt: give --prompt TEXT or --messages FILE" generate "$tmp/t.plan" --bytes
expect_fail both-prompts 2 "--prompt and --messages: give one of them" generate "$tmp/t.plan" --bytes --prompt a --messages "$tmp/m.json"
expect_fail tokenizer-missing 1 "$tmp/none.json" generate "$tmp/t.plan" --tokenizer "$tmp/none.json" --prompt hi
expect_fail too-long 1 "--max-new-tokens 100: the prompt's 4 tokens and 100 more pass the 64 the plan's KV cache holds" \
    generate "$tmp/t.plan" --bytes --prompt "The " --max-new-tokens 100
expect_fail prompt-fills-cache 1 "leaving no room for a reply" generate "$tmp/t.plan" --bytes --prompt "$(head -c 64 tests/data/corpus.txt)"
printf '[{"role": "user", "content": "Hi"},\n  {"role": oops}]\n' > "$tmp/bad.json"
expect_fail messages-bad-json 1 "$tmp/bad.json:2:" generate "$tmp/v.plan" --tokenizer tests/fixtures/tok/qwen2.json \
    --messages "$tmp/bad.json" --template "$chatml"
printf '{"text": "no messages"}\n' > "$tmp/nomsg.json"
expect_fail messages-not-a-conversation 1 "expected a list of messages" generate "$tmp/v.plan" \
    --tokenizer tests/fixtures/tok/qwen2.json --messages "$tmp/nomsg.json" --template "$chatml"
expect_fail messages-missing 1 "cannot read '$tmp/none.json'" generate "$tmp/v.plan" \
    --tokenizer tests/fixtures/tok/qwen2.json --messages "$tmp/none.json" --template "$chatml"
expect_fail top-p-alone 2 "--top-p samples: give --temperature too" generate "$tmp/t.plan" --bytes --prompt a --top-p 0.5
expect_fail temperature-bad 2 "--temperature needs a number" generate "$tmp/t.plan" --bytes --prompt a --temperature -1
expect_fail eos-unknown 1 "--eos \"ab\" is not a token of the byte vocabulary" generate "$tmp/t.plan" --bytes --prompt a --eos ab
expect_fail vocab-mismatch 1 "outside the plan's vocabulary of 256" generate "$tmp/t.plan" \
    --tokenizer tests/fixtures/tok/qwen2.json --prompt "Hello there, how are you"
"$ftc" compile "$tmp/tiny.ft" --max-len 0 -o "$tmp/n.plan" >/dev/null 2>&1
expect_fail no-decode-phase 1 "has no decode phase" generate "$tmp/n.plan" --bytes --prompt a
expect_fail no-plan 1 "$tmp/nothing/plan" generate "$tmp/nothing" --bytes --prompt a
"$ftc" help generate | grep -q -- '--max-new-tokens N' && "$ftc" help generate | grep -q 'MODEL_DIR' && ok help ||
    bad help "ftc help generate"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
