#!/usr/bin/env bash
# The Hugging Face round trip, ftc's side, for each family's model directory
# (tests/fixtures/hf/: Qwen2 with Qwen2.5's chat template; tests/fixtures/hf-llama/: Llama 3,
# GQA and an untied lm_head, with Llama 3.1's; tests/fixtures/hf-gemma2/: Gemma 2, softcaps and
# a sliding window on alternate layers, with gemma-2-2b-it's; tests/fixtures/hf-mistral/:
# Mistral, a sliding window on every layer, with Mistral 7B Instruct v0.3's; tests/fixtures/hf-phi3/:
# Phi-3, fused qkv and gate_up weights, partial rotary, a window, a vocabulary padded past the
# tokenizer, with Phi-3 mini's; tests/fixtures/hf-qwen3/: Qwen3, q and k norms, head_dim not
# dim / heads, with Qwen3's): its config, generation config, fp32 weights,
# a byte-level BPE and the published chat template, imported, its chat records tokenized
# through its own template, fine-tuned in full and with LoRA (ftc run --save), then ftc
# eval's loss and ftc generate's greedy reply of the base model, the full save and the
# adapter against transformers' on the same saves (FIXTURE/expected.txt, made by
# tests/fixtures/make_hf_roundtrip.py: from_pretrained(save), PeftModel.from_pretrained(base,
# adapter), generate): the losses within 1e-5 relative (fp32), the replies the same ids, each
# ending where transformers' ends (an end id of the generation config, or the length). And
# the token ids of a save: a source's config files kept as they are; a source whose end token
# only its tokenizer_config.json names saved with that id (and its bos id, where it names a bos
# token) in config.json and a
# generation_config.json made for it, transformers' reply from that save ending where ftc's
# does. Each check's name starts with its fixture directory's.
# usage: hf_roundtrip.sh FTC SOURCE_DIR [--keep DIR FIXTURE]   (--keep: run FIXTURE's ftc side
# only, leave it in DIR for make_hf_roundtrip.py, compare nothing; FAMS="FIXTURE ...": only
# these fixture directories)
set -u
ftc=$1 src=$2 keep=${4:-}
cd "$src" || exit 2
. tests/lib.sh
export FTC_NO_CUBIN=1
seq=192 steps=60

# roundtrip FIXTURE: the whole round trip of one model directory, in $tmp/NAME.
roundtrip() {
    local fx=$1 tmp=$tmp/${1##*/} fam=${1##*/}
    mkdir "$tmp"
    # lib.sh's ok and bad, each check's name after its fixture's
    ok() { echo "ok   $fam/$1"; pass=$((pass+1)); }
    bad() { echo "FAIL $fam/$1: $2"; fail=$((fail+1)); }

    # The imported recipe for this data: windows of 192 tokens, fp32 (transformers' loss to
    # 1e-5 relative), a higher rate for 60 steps, LoRA on its commented line.
    "$ftc" import "$fx" > "$tmp/full.ft" 2>"$tmp/err" || bad import "$(cat "$tmp/err")"
    sed -i "s/^  seq *= .*/  seq = $seq/; s/^  batch *= .*/  batch = 4/; s/precision *= bf16/precision = fp32/;
            s/^  steps *= .*/  steps = $steps/; s/^  warmup_steps *= .*/  warmup_steps = 2/; s/lr = 2e-5/lr = 1e-2/" \
        "$tmp/full.ft"
    sed 's/^  # lora(/  lora(/; s/lr = 1e-2/lr = 2e-2/' "$tmp/full.ft" > "$tmp/lora.ft"
    grep -q '^  lora(r = 16' "$tmp/lora.ft" && grep -q '^  seq = 192' "$tmp/full.ft" && ok import-recipe ||
        bad import-recipe "$(grep -n 'seq\|lora' "$tmp/full.ft")"
    for m in full lora; do
        "$ftc" compile "$tmp/$m.ft" -o "$tmp/$m.plan" >"$tmp/err" 2>&1 || bad "compile-$m" "$(tail -3 "$tmp/err")"
    done
    for f in train eval; do
        "$ftc" data --tokenizer "$fx" "$fx/$f.jsonl" -o "$tmp/$f.bin" --pack $seq >"$tmp/err" 2>&1 ||
            bad "data-$f" "$(tail -3 "$tmp/err")"
    done
    "$ftc" run "$tmp/full.plan" --data "$tmp/train.bin" --weights "$fx" --save "$tmp/full" >"$tmp/full.out" 2>&1 ||
        bad train-full "$(tail -3 "$tmp/full.out")"
    "$ftc" run "$tmp/lora.plan" --data "$tmp/train.bin" --weights "$fx" --save "$tmp/lora" >"$tmp/lora.out" 2>&1 ||
        bad train-lora "$(tail -3 "$tmp/lora.out")"
    # A source that names its end token only in tokenizer_config.json: no generation_config.json,
    # no bos or eos id in config.json. The save's config.json and the generation_config.json it
    # gets carry the eos id, so from_pretrained(save).generate stops where ftc generate does.
    mkdir "$tmp/bare-src" && cp "$fx"/model.safetensors "$fx"/tokenizer*.json "$tmp/bare-src/"
    sed '/"bos_token_id"/d; /"eos_token_id"/d' "$fx/config.json" > "$tmp/bare-src/config.json"
    "$ftc" run "$tmp/full.plan" --data "$tmp/train.bin" --weights "$tmp/bare-src" --save "$tmp/bare" >"$tmp/bare.out" 2>&1 ||
        bad train-bare "$(tail -3 "$tmp/bare.out")"
    # (the bos id too where tokenizer_config.json names a bos token, as Llama 3's does)
    local eos bos pad ids
    eos=$(sed -n 's/^ *"eos_token_id": \([0-9]*\),*$/\1/p' "$fx/config.json")
    bos=$(sed -n 's/^ *"bos_token_id": \([0-9]*\),*$/\1/p' "$fx/config.json")
    grep -q '"bos_token": "' "$fx/tokenizer_config.json" && ids="\"bos_token_id\":$bos,\"eos_token_id\":$eos" ||
        bos= ids="\"eos_token_id\":$eos"
    # (and config.json's pad id, as GenerationConfig.from_model_config carries it: Gemma's 0)
    pad=$(sed -n 's/^ *"pad_token_id": \([0-9]*\),*$/\1/p' "$fx/config.json")
    [ -z "$pad" ] || ids="$ids,\"pad_token_id\":$pad"
    grep -Eq "\"eos_token_id\": $eos,?$" "$tmp/bare/config.json" &&
        { [ -n "$bos" ] && grep -Eq "\"bos_token_id\": $bos,?$" "$tmp/bare/config.json" ||
          { [ -z "$bos" ] && ! grep -q bos_token_id "$tmp/bare/config.json"; }; } &&
        [ "$(tr -d ' \n' < "$tmp/bare/generation_config.json")" = "{$ids}" ] &&
        grep -q 'generation_config.json' "$tmp/bare.out" && ok "save-eos-id ($ids)" ||
        bad save-eos-id "want $ids from tokenizer_config.json: $(cat "$tmp/bare/config.json" "$tmp/bare/generation_config.json")"
    cmp -s "$tmp/full/generation_config.json" "$fx/generation_config.json" && cmp -s "$tmp/full/config.json" "$fx/config.json" &&
        ok save-configs-kept || bad save-configs-kept "$(diff "$fx/config.json" "$tmp/full/config.json")"

    if [ -n "$keep" ]; then   # (for make_hf_roundtrip.py: the saves and token files it reads)
        cp -rL "$tmp/full" "$tmp/lora" "$tmp/bare" "$tmp/train.bin" "$tmp/eval.bin" "$keep/" && echo $seq > "$keep/seq"
        [ "$fail" = 0 ]; return
    fi

    # name PLAN ARGS...: ftc eval's loss and ftc generate's reply (ids, then "eos" where an end
    # id stopped it) of one model.
    measure() {
        local name=$1 plan=$2 tokdir=$3; shift 3
        "$ftc" eval "$tmp/$plan.plan" --data "$tmp/eval.bin" --json "$@" >"$tmp/$name.eval" 2>"$tmp/err" ||
            bad "eval-$name" "$(tail -3 "$tmp/err")"
        "$ftc" generate "$tmp/$plan.plan" --tokenizer "$tokdir" --messages "$fx/chat.json" --ids --max-new-tokens 24 \
            "$@" >"$tmp/$name.ids" 2>"$tmp/$name.gen" || bad "generate-$name" "$(tail -3 "$tmp/$name.gen")"
        grep -q 'stopped by the end-of-sequence' "$tmp/$name.gen" && sed -i 's/$/ eos/; s/^ //' "$tmp/$name.ids"
    }
    measure base full "$fx" --weights "$fx"
    measure full full "$tmp/full" --weights "$tmp/full"
    measure lora lora "$fx" --weights "$fx" --adapter "$tmp/lora"
    measure bare full "$tmp/bare" --weights "$tmp/bare"

    for name in base full lora bare; do
        want=$(sed -n "s/^$name loss //p" "$fx/expected.txt")
        got=$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$tmp/$name.eval")
        if [ -z "$want" ] || [ -z "$got" ]; then bad "$name-loss" "ftc '$got', transformers '$want'"
        elif awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }'; then
            ok "$name-loss ($got, transformers $want)"
        else bad "$name-loss" "ftc $got, transformers $want: more than 1e-5 apart"; fi
        want=$(sed -n "s/^$name reply //p" "$fx/expected.txt")
        got=$(cat "$tmp/$name.ids")
        [ -n "$want" ] && [ "$got" = "$want" ] && ok "$name-reply ($got)" ||
            bad "$name-reply" "ftc '$got', transformers '$want'"
    done
}

if [ -n "$keep" ]; then
    roundtrip "${5:?usage: hf_roundtrip.sh FTC SOURCE_DIR --keep DIR FIXTURE}"
    exit
fi
for fx in ${FAMS:-tests/fixtures/hf tests/fixtures/hf-llama tests/fixtures/hf-gemma2 tests/fixtures/hf-mistral tests/fixtures/hf-phi3 \
          tests/fixtures/hf-qwen3}; do roundtrip "$fx"; done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
