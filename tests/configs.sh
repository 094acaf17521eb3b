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

# The plan's config.json (what a save from random initialisation carries) is the config
# ftc import reads back into the same model section, and it agrees with the published config
# on every key both have, and lacks none that changes the model: only token ids, the
# settings that change nothing a step computes (import.c's inert list), and aliases of what
# it writes. (The dtype is the saved weights', which a save sets; a window Qwen does not use
# is none; Gemma's legacy "gelu" is written as the tanh it means.)
roundtrip() {
    local name=$1 cfg=$2 plan=$tmp/$1.plan
    if ! "$ftc" compile "$tmp/$name.ft" -o "$plan" --gpu h200 --host-mem 8T --micro-batch 1 --remat full \
         --offload weights >/dev/null 2>"$tmp/err" || [ ! -f "$plan/config.json" ]; then
        bad "$name-config" "no config.json: $(cat "$tmp/err")"
        return
    fi
    "$ftc" import "$plan/config.json" > "$tmp/$name.back.ft" 2>"$tmp/err"
    if cmp -s <(sed '1d; /^train {/,$d' "$tmp/$name.ft") <(sed '1d; /^train {/,$d' "$tmp/$name.back.ft"); then
        ok "$name-config-roundtrip"
    else
        bad "$name-config-roundtrip" "$(cat "$tmp/err"; diff "$tmp/$name.ft" "$tmp/$name.back.ft" | head -5)"
    fi
    local why
    why=$(python3 - "$cfg" "$plan/config.json" <<'PY'
import json, sys
src, ours = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
scaling = lambda d: {("rope_type" if k == "type" else k): v for k, v in d.items()} if isinstance(d, dict) else d
unused = not src.get("use_sliding_window", True)
differ = [k for k in ours if k in src and k != "torch_dtype" and scaling(src[k]) != scaling(ours[k]) and
          not (k == "sliding_window" and unused) and not (k == "hidden_act" and src[k] == "gelu")]
inert = {"bos_token_id", "eos_token_id", "initializer_range", "transformers_version", "use_cache",
         "cache_implementation", "pretraining_tp", "_name_or_path", "auto_map", "max_window_layers",
         "rotary_emb_base", "original_max_position_embeddings", "hidden_activation", "hidden_act"}
lacks = [k for k in src if k not in ours and k not in inert]
print(" ".join(["differ: " + k for k in differ] + ["lacks: " + k for k in lacks]))
PY
)
    [ -z "$why" ] && ok "$name-config-keys" || bad "$name-config-keys" "$why"
    # The recipe's LoRA line, uncommented, names modules the family has.
    sed 's/^  # lora(/  lora(/' "$tmp/$name.ft" > "$tmp/$name.lora.ft"
    if "$ftc" compile "$tmp/$name.lora.ft" -o "$tmp/lora.plan" --gpu h200 --host-mem 8T --micro-batch 1 \
         --remat full --offload weights >/dev/null 2>"$tmp/err" && grep -q '^  lora(r = 16' "$tmp/$name.lora.ft"; then
        ok "$name-recipe-lora"
    else
        bad "$name-recipe-lora" "$(cat "$tmp/err")"
    fi
}

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
    roundtrip "$name" "$cfg"
    # models/NAME.ft is what ftc import writes, but its train section: the shipped models
    # keep the planning reference the READMEs' figures are for (seq 2048, batch 32).
    if [ -f "models/$name.ft" ]; then
        model_section() { sed '/^train {/,$d' "$1"; }
        if diff <(model_section "$tmp/$name.ft") <(model_section "models/$name.ft") >/dev/null; then
            ok "$name-is-model"
        else
            bad "$name-is-model" "$(diff <(model_section "$tmp/$name.ft") <(model_section "models/$name.ft") | head -5)"
        fi
    fi
done < tests/configs/counts.txt

want=$(sed -n 's/^gpt2 //p' tests/configs/counts.txt)
got=$(count_of models/gpt2.ft)
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok gpt2-model-count; else bad gpt2-model-count "ftc $got, transformers $want"; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
