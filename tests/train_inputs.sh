#!/usr/bin/env bash
# ftc run on tiny.ft as a program: what it reads (checkpoints, token files, plans edited by
# hand, the host's rate), the error for every malformed input, non-finite values stopped or
# skipped, --save and its lock, the schedule, evaluation, the run report and the console;
# ftc eval on the weights a run saved.
# (Its arithmetic over many steps: train.sh.)
# usage: train_inputs.sh FTC SOURCE_DIR ST_DIFF
set -u
ftc=$1 src=$2 st_diff=$3
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses

"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null || bad data "ftc data failed"
"$ftc" compile models/tiny.ft -o "$tmp/tiny.plan" >/dev/null || bad compile "ftc compile failed"
# The host: a plan running AdamW on the CPU says what this machine's rate is against the
# rate it assumed; outside the range over which the plan's choice holds, a warning.
"$ftc" compile models/tiny.ft --offload optimizer -o "$tmp/host.plan" >/dev/null
out=$("$ftc" run "$tmp/host.plan" --data "$tmp/c.bin" --steps 1 2>&1)
grep -q '^host: CPU AdamW at [0-9]* M parameters/s on [0-9]* threads (the plan assumed 6400 M: 32 cores x 200 M)$' <<<"$out" &&
    ! grep -q warning <<<"$out" && ok host-rate-reported || bad host-rate-reported "$out"
sed -i 's/^host \(.*\) adamw_holds=[^ ]*/host \1 adamw_holds=1e+15,inf/' "$tmp/host.plan/plan"
out=$("$ftc" run "$tmp/host.plan" --data "$tmp/c.bin" --steps 1 2>&1)
grep -q "^ftc run: warning: the plan's choice is the fastest only for a host AdamW of at least 1000000000 M parameters/s; on this machine another plan is faster: re-plan with ftc compile ... --host-cores [0-9]* --host-adamw [0-9]*M$" <<<"$out" &&
    ok host-rate-warns || bad host-rate-warns "$out"

# Save, then start from the saved weights.
if "$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 3 --poison --save "$tmp/ck" >/dev/null &&
   [ -s "$tmp/ck/model.safetensors" ] &&
   "$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/ck" >/dev/null; then
    ok save-and-reload
else
    bad save-and-reload "failed"
fi

# A head named as another version of transformers writes it: GPT-NeoX's embed_out.weight
# is lm_head.weight in checkpoints from transformers 5 on; either loads (the same losses).
sed 's/as "lm_head.weight"/as "embed_out.weight"/' models/tiny.ft > "$tmp/neox.ft"
"$ftc" compile "$tmp/neox.ft" -o "$tmp/neox.plan" >/dev/null
"$ftc" run "$tmp/neox.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/nx" >/dev/null
cp "$tmp/nx/model.safetensors" "$tmp/nx5.safetensors"
python3 tests/st_meta.py "$tmp/nx5.safetensors" --rename embed_out.weight lm_head.weight
a=$("$ftc" run "$tmp/neox.plan" --data "$tmp/c.bin" --steps 2 --weights "$tmp/nx/model.safetensors" 2>&1 | grep '^step')
b=$("$ftc" run "$tmp/neox.plan" --data "$tmp/c.bin" --steps 2 --weights "$tmp/nx5.safetensors" 2>&1 | grep '^step')
[ -n "$a" ] && [ "$(awk '{print $4}' <<<"$a")" = "$(awk '{print $4}' <<<"$b")" ] &&
    ok "head-by-either-name ($(awk '{print $4}' <<<"$b" | tr '\n' ' '))" || bad head-by-either-name "$a / $b"

# The fp32 master copies start from the checkpoint's own values: a bf16-mixed run from
# the fp32 weights another run saved, at a learning rate of 1e-30 (no step moves a
# weight), saves them back bit for bit, low bits included, not their bf16 rounding.
sed 's/^  optimizer = .*/  optimizer = adamw(lr = 1e-30)/' models/tiny.ft > "$tmp/still.ft"
"$ftc" compile "$tmp/still.ft" -o "$tmp/still.plan" >/dev/null
"$ftc" run "$tmp/still.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/ck/model.safetensors" \
    --save "$tmp/still" >/dev/null
"$st_diff" "$tmp/still/model.safetensors" "$tmp/ck/model.safetensors" 0 >/dev/null &&
    ok master-from-fp32-checkpoint || bad master-from-fp32-checkpoint \
    "$("$st_diff" "$tmp/still/model.safetensors" "$tmp/ck/model.safetensors" 0)"
# LoRA adapters a base checkpoint lacks start from their initialisation (A random, B
# zero), so they train: the gradients' norm is not zero and the loss moves.
sed 's/^  optimizer = .*/&\n  lora(r = 4, alpha = 8, targets = [wq, wv])/' models/tiny.ft > "$tmp/lora.ft"
"$ftc" compile "$tmp/lora.ft" -o "$tmp/lora.plan" >/dev/null
out=$("$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 3 --weights "$tmp/ck/model.safetensors")
gn=$(grep '^step 1/' <<<"$out" | awk '{print $10}')
awk -v g="$gn" 'BEGIN { exit !(g > 0) }' && ok "lora-from-base-checkpoint-trains (gnorm $gn)" ||
    bad lora-from-base-checkpoint-trains "$out"
# Where the weights came from is always said: a forgotten --weights would train from noise.
a=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --seed 3 | grep '^weights:')
b=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/ck" | grep '^weights:')
c=$(grep '^weights:' <<<"$out")
[ "$a" = "weights: none given (--weights): every parameter initialised at random (seed 3)" ] &&
    [ "$b" = "weights: 27 tensors from $tmp/ck" ] &&
    [ "$c" = "weights: 27 tensors from $tmp/ck/model.safetensors; 8 LoRA adapter tensors it lacks initialised (seed 1234)" ] &&
    ok weights-origin-said || bad weights-origin-said "$a / $b / $c"

# --merge writes the merged weights in DIR/merged/, not beside the adapter files: a loader
# finding model.safetensors and an adapter in one directory applies the adapter again.
"$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 2 --save "$tmp/lm" --merge > "$tmp/o"
[ -s "$tmp/lm/adapter_model.safetensors" ] && [ -s "$tmp/lm/merged/model.safetensors" ] &&
    [ ! -e "$tmp/lm/model.safetensors" ] &&
    grep -q "^saved $tmp/lm: adapter_model.safetensors, adapter_config.json, merged/model.safetensors (step 2" "$tmp/o" &&
    ok merged-in-its-own-directory || bad merged-in-its-own-directory "$(cat "$tmp/o"; ls "$tmp/lm")"
# The adapter names its base: the directory of --weights, absolute (PEFT's
# AutoPeftModelForCausalLM loads it from there); without --weights, the model's name.
"$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/ck/model.safetensors" --save "$tmp/lb" >/dev/null
a=$(grep -o '"base_model_name_or_path": "[^"]*"' "$tmp/lb/adapter_config.json")
b=$(grep -o '"base_model_name_or_path": "[^"]*"' "$tmp/lm/adapter_config.json")
[ "$a" = "\"base_model_name_or_path\": \"$(realpath "$tmp/ck")\"" ] && [ "$b" = '"base_model_name_or_path": "tiny"' ] &&
    ok adapter-names-its-base || bad adapter-names-its-base "$a / $b"

# A save from a model directory carries its config and tokenizer files, so that it loads as
# that directory did: beside the weights of a full model (and in merged/); beside an adapter
# the tokenizer's only (a config.json there would make a loader take it for a model).
mkdir -p "$tmp/hf" && cp "$tmp/ck/model.safetensors" "$tmp/hf/" &&
    printf '{"model_type": "qwen2"}\n' > "$tmp/hf/config.json" && printf '{"max_new_tokens": 8}\n' > "$tmp/hf/generation_config.json" &&
    cp tests/fixtures/tok/qwen2.json "$tmp/hf/tokenizer.json"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/hf" --save "$tmp/hfs" >/dev/null
"$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/hf" --save "$tmp/hfl" --merge >/dev/null
side=yes
for f in config.json generation_config.json tokenizer.json; do
    cmp -s "$tmp/hf/$f" "$tmp/hfs/$f" && cmp -s "$tmp/hf/$f" "$tmp/hfl/merged/$f" || side="no $f"
done
cmp -s "$tmp/hf/tokenizer.json" "$tmp/hfl/tokenizer.json" || side="no adapter tokenizer.json"
[ -e "$tmp/hfl/config.json" ] && side="a config.json beside the adapter"
[ "$side" = yes ] && ok save-carries-model-files || bad save-carries-model-files "$side: $(ls "$tmp/hfs" "$tmp/hfl" "$tmp/hfl/merged")"

# A save keeps the precision of the checkpoint it started from: from bf16 weights, bf16
# (the fp32 master's rounding), half the bytes of fp32.
python3 tests/st_bf16.py "$tmp/ck/model.safetensors" "$tmp/bf16.safetensors"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/bf16.safetensors" --save "$tmp/bfs" >/dev/null
d=$(python3 tests/st_bf16.py --dtypes "$tmp/bfs/model.safetensors" | awk '{print $2}' | sort -u | tr '\n' ' ')
[ "$d" = "BF16 " ] && [ "$(python3 tests/st_bf16.py --dtypes "$tmp/ck/model.safetensors" | awk '{print $2}' | sort -u)" = F32 ] &&
    ok "save-in-source-dtype ($(stat -L -c %s "$tmp/bfs/model.safetensors") bytes, fp32 $(stat -L -c %s "$tmp/ck/model.safetensors"))" ||
    bad save-in-source-dtype "dtypes $d"

# A run from random initialisation, or from a bare .safetensors file, saves a config.json
# too (the plan's: ftc compile writes it for a family ftc import knows), its torch_dtype the
# saved weights': each fixture's config shrunk to a few layers of width 64, imported,
# trained a step and saved; the saved config.json imports back to the same model section.
# With LoRA the config goes into merged/ only. A model of no known family (tiny) saves its
# weights alone and says so before step one.
for f in qwen2-0.5b qwen2-7b llama2-7b mistral-7b; do
    python3 - "tests/fixtures/$f.config.json" "$tmp/small-$f.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
gqa = c.get("num_key_value_heads", c["num_attention_heads"]) != c["num_attention_heads"]
c.update(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2 if gqa else 4)
c.update({k: 255 for k in ("bos_token_id", "eos_token_id", "pad_token_id") if isinstance(c.get(k), int)})
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
    "$ftc" import "$tmp/small-$f.json" | sed 's/^  seq .*/  seq = 32/; s/^  batch .*/  batch = 2/; /^  packing /d' > "$tmp/small-$f.ft"
    "$ftc" compile "$tmp/small-$f.ft" -o "$tmp/small-$f.plan" >/dev/null &&
        "$ftc" run "$tmp/small-$f.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/sv-$f" >/dev/null
    "$ftc" import "$tmp/sv-$f/config.json" > "$tmp/back-$f.ft" 2>"$tmp/err"
    cmp -s <(sed '1d; /^train {/,$d' "$tmp/small-$f.ft") <(sed '1d; /^train {/,$d' "$tmp/back-$f.ft") &&
        grep -q '"torch_dtype": "float32"' "$tmp/sv-$f/config.json" && ok "saved-config-$f" ||
        bad "saved-config-$f" "$(cat "$tmp/err"; diff "$tmp/small-$f.ft" "$tmp/back-$f.ft" | head -5)"
done
python3 tests/st_bf16.py "$tmp/sv-qwen2-0.5b/model.safetensors" "$tmp/small-bf16.safetensors"
"$ftc" run "$tmp/small-qwen2-0.5b.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/small-bf16.safetensors" \
    --save "$tmp/sv-bf16" >/dev/null
sed 's/^  # lora(/  lora(/' "$tmp/small-qwen2-0.5b.ft" > "$tmp/small-lora.ft"   # the recipe's LoRA line
"$ftc" compile "$tmp/small-lora.ft" -o "$tmp/small-lora.plan" >/dev/null
"$ftc" run "$tmp/small-lora.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/sv-lora" --merge >/dev/null
grep -q '"torch_dtype": "bfloat16"' "$tmp/sv-bf16/config.json" && [ ! -e "$tmp/sv-lora/config.json" ] &&
    grep -q '"model_type": "qwen2"' "$tmp/sv-lora/merged/config.json" && ok saved-config-dtype-and-lora ||
    bad saved-config-dtype-and-lora "$(ls "$tmp/sv-bf16" "$tmp/sv-lora" "$tmp/sv-lora/merged")"
out=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/noconf")
grep -q "^ftc run: warning: --save $tmp/noconf: no config.json to save beside the weights (the weights came with none, and the plan has none: model tiny is of no family ftc import writes); from_pretrained needs one$" <<<"$out" &&
    [ -f "$tmp/noconf/model.safetensors" ] && [ ! -e "$tmp/noconf/config.json" ] && ok saved-config-unknown-family ||
    bad saved-config-unknown-family "$out"

# A resumed run saves as the run it continues would have: the checkpoint records the model
# directory and the weights' dtypes, so without --weights again the save still carries the
# config and tokenizer files and keeps bf16.
mkdir -p "$tmp/hfb" && cp "$tmp/bf16.safetensors" "$tmp/hfb/model.safetensors" &&
    cp "$tmp/hf/config.json" "$tmp/hf/tokenizer.json" "$tmp/hfb/"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/hfb" --save "$tmp/rb" --save-every 1 >/dev/null
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 2 --resume "$tmp/rb" --save "$tmp/rb2" >/dev/null
d=$(python3 tests/st_bf16.py --dtypes "$tmp/rb2/model.safetensors" | awk '{print $2}' | sort -u | tr '\n' ' ')
[ "$d" = "BF16 " ] && cmp -s "$tmp/hfb/config.json" "$tmp/rb2/config.json" &&
    cmp -s "$tmp/hfb/tokenizer.json" "$tmp/rb2/tokenizer.json" && ok resume-saves-as-its-start ||
    bad resume-saves-as-its-start "dtypes $d; $(ls "$tmp/rb2")"
# A checkpoint is a model directory too: the weights saved at its step (hard links, no bytes
# twice) and the side files beside its training state, so checkpoint-N loads in transformers.
c1="$tmp/rb/checkpoint-000001"
cmp -s "$c1/model.safetensors" "$tmp/rb/model.safetensors" && cmp -s "$c1/config.json" "$tmp/hfb/config.json" &&
    [ -f "$c1/state.safetensors" ] && [ "$(stat -c %i "$c1/model.safetensors")" = "$(stat -L -c %i "$tmp/rb/model.safetensors")" ] &&
    ok checkpoint-is-a-model-dir || bad checkpoint-is-a-model-dir "$(ls -l "$c1")"
# Weights over --save-shard-size are saved as save_pretrained shards them: files of at
# most that size, model-0000K-of-0000N.safetensors, and model.safetensors.index.json (the
# total and each tensor's file), in the checkpoint too (tests/fixtures/check_sharded.py,
# by hand: huggingface_hub's splitter makes the same shards). They load as --weights with
# the unsharded save's losses bit for bit; a later unsharded save leaves no shard behind.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 2 --save "$tmp/un" >/dev/null
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 2 --save "$tmp/sh" --save-shard-size 40K \
    --save-every 2 >"$tmp/sh.out"
index=$(python3 - "$tmp/sh" "$tmp/un/model.safetensors" <<'PY'
import json, os, struct, sys
def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return {k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}
index = json.load(open(os.path.join(sys.argv[1], "model.safetensors.index.json")))
files = sorted(set(index["weight_map"].values()))
sizes = [sum(e - b for b, e in (t["data_offsets"] for t in header(os.path.join(sys.argv[1], f)).values()))
         for f in files]
good = (files == ["model-%05d-of-%05d.safetensors" % (k, len(files)) for k in range(1, len(files) + 1)] and
        all(index["weight_map"][n] == f for f in files for n in header(os.path.join(sys.argv[1], f))) and
        sorted(index["weight_map"]) == sorted(header(sys.argv[2])) and
        index["metadata"]["total_size"] == sum(sizes) and all(s <= 40960 or len(header(os.path.join(sys.argv[1], f))) == 1
                                                               for f, s in zip(files, sizes)))
print(len(files) if good else "bad")
PY
)
a=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 2 --weights "$tmp/un" 2>&1 | losses)
b=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 2 --weights "$tmp/sh" 2>&1 | losses)
c=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 2 --weights "$tmp/sh/checkpoint-000002" 2>&1 | losses)
grep -q "^saved $tmp/sh: model.safetensors.index.json ($index shards) (step 2, saved-000002)" "$tmp/sh.out" &&
    [ "$index" -gt 2 ] && [ ! -e "$tmp/sh/model.safetensors" ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] &&
    "$st_diff" "$tmp/sh" "$tmp/un/model.safetensors" 0 >/dev/null &&
    ok "sharded-save ($index shards)" || bad sharded-save "index $index; $(cat "$tmp/sh.out"); $a / $b / $c"
# merged/ is sharded too, and loads.
"$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/un" --save "$tmp/shm" --merge \
    --save-shard-size 100K >"$tmp/shm.out"
grep -q "^saved $tmp/shm: adapter_model.safetensors, adapter_config.json, merged/model.safetensors.index.json ([0-9]* shards) (step 1" \
    "$tmp/shm.out" && [ -n "$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --weights "$tmp/shm/merged" | losses)" ] &&
    ok sharded-merged || bad sharded-merged "$(cat "$tmp/shm.out"; ls "$tmp/shm/merged")"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/sh" >/dev/null
[ -f "$tmp/sh/model.safetensors" ] && ! ls "$tmp/sh" | grep -q '^model-\|index' &&
    ok sharded-then-whole || bad sharded-then-whole "$(ls "$tmp/sh")"

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
# One bad token at position 20000 of a corpus of good ones: found before step one (not
# when its window is drawn), nothing printed on stdout but the header.
{ printf 'A\0%.0s' $(seq 1 20000); printf '\x10\x27'; printf 'B\0%.0s' $(seq 1 2000); } > "$tmp/late16"
"$ftc" data --u16 "$tmp/late16" -o "$tmp/late.bin" >/dev/null
fails late-token-beyond-vocab "token 20000 is 10000, not below the vocabulary size 256" \
    run "$tmp/tiny.plan" --data "$tmp/late.bin" --steps 1
grep -q '^step' "$tmp/o" && bad late-token-before-step-one "a step ran: $(cat "$tmp/o")" || ok late-token-before-step-one
# A loss that is not finite stops the run at that step, naming the first value that is
# not and where in the .ft it comes from; the optimizer never takes the step.
sed 's|    return linear(rmsnorm(x, final_norm, eps), lm_head)|    return linear(rmsnorm(x * 1e30 * 1e30, final_norm, eps), lm_head)|' \
    models/tiny.ft > "$tmp/inf.ft"
"$ftc" compile "$tmp/inf.ft" -o "$tmp/inf.plan" >/dev/null
fails nonfinite-loss "step 1, micro-step 1: the loss is nan; the first non-finite value is in" \
    run "$tmp/inf.plan" --data "$tmp/c.bin" --steps 3 --save "$tmp/inf-out"
grep -q "inf.ft:44:.*stopped before the optimizer step" "$tmp/e" && [ ! -e "$tmp/inf-out/model.safetensors" ] &&
    ! grep -q '^step\|^done' "$tmp/o" && ok nonfinite-loss-where || bad nonfinite-loss-where "$(cat "$tmp/e" "$tmp/o")"
# --skip-nonfinite: a step whose loss is not finite is skipped and counted, its update
# not taken (the weights after it are bitwise those before it), and training goes on.
# Token 255's embedding row is made infinite (rmsnorm makes it NaN), and one byte
# of the corpus, in window 100 only, is 255.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/w0" >/dev/null
python3 - "$tmp/w0/model.safetensors" "$tmp/huge.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8:8 + n])["model.embed_tokens.weight"]
dim = t["shape"][1]
row = 8 + n + t["data_offsets"][0] + 255 * dim * 4
b[row:row + dim * 4] = struct.pack("<%df" % dim, *([float("inf")] * dim))
open(sys.argv[2], "wb").write(b)
PY
python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[6410] = 255; open(sys.argv[2], 'wb').write(b)" \
    tests/data/corpus.txt "$tmp/c255"
"$ftc" data --bytes "$tmp/c255" -o "$tmp/c255.bin" >/dev/null
skiprun() { "$ftc" run "$tmp/tiny.plan" --data "$tmp/c255.bin" --weights "$tmp/huge.safetensors" --seed 3 --skip-nonfinite "$@"; }
skiprun --steps 70 > "$tmp/sk.out" 2>&1
k=$(grep -m1 'skipped 1' "$tmp/sk.out" | sed 's|^step \([0-9]*\)/.*|\1|')
if [ $? = 0 ] && [ -n "$k" ] && [ "$(grep -c '  skipped ' "$tmp/sk.out")" = 1 ] &&
   ! grep -v '  skipped ' "$tmp/sk.out" | grep '^step' | grep -qiE 'loss (-?nan|-?inf)' &&
   grep -q '^done: 70 steps, 1 skipped (a non-finite loss' "$tmp/sk.out"; then
    ok "skip-nonfinite-counts-and-goes-on (step $k of 70)"
else
    bad skip-nonfinite-counts-and-goes-on "$(grep -E 'skipped|^done|error' "$tmp/sk.out")"
fi
if [ -n "$k" ] && [ "$k" -gt 1 ]; then
    skiprun --steps $((k - 1)) --save "$tmp/sk-before" >/dev/null 2>&1
    skiprun --steps "$k" --save "$tmp/sk-at" >/dev/null 2>&1
    skiprun --steps $((k + 1)) --save "$tmp/sk-after" >/dev/null 2>&1
    "$st_diff" "$tmp/sk-at/model.safetensors" "$tmp/sk-before/model.safetensors" 0 >/dev/null &&
        ! "$st_diff" "$tmp/sk-after/model.safetensors" "$tmp/sk-at/model.safetensors" 0 >/dev/null &&
        ok skip-nonfinite-update-not-taken || bad skip-nonfinite-update-not-taken "the weights moved at step $k or not at $((k + 1))"
fi
# A checkpoint after the skip carries it: resumed, AdamW's bias correction counts the
# updates taken, and the run ends as one never stopped.
if [ -n "$k" ]; then
    skiprun --steps $((k + 2)) --save-every $((k + 1)) --save "$tmp/sk-r" >/dev/null 2>&1
    skiprun --steps $((k + 2)) --resume "$tmp/sk-r" --save "$tmp/sk-r2" >/dev/null 2>&1
    "$st_diff" "$tmp/sk-r2/model.safetensors" "$tmp/sk-r/model.safetensors" 0 >/dev/null &&
        ok skip-nonfinite-resumes-exactly || bad skip-nonfinite-resumes-exactly "the resumed run's weights differ"
fi
# Without it the same run stops at that step.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c255.bin" --weights "$tmp/huge.safetensors" --seed 3 --steps 70 >/dev/null 2>"$tmp/e"
[ $? = 1 ] && grep -q "step $k, micro-step 1: the loss is nan; the first non-finite value is in" "$tmp/e" &&
    ok nonfinite-stops-without-skip || bad nonfinite-stops-without-skip "$(cat "$tmp/e")"
# A gradient that is not finite while the loss is: (x·b)/b with b = 1e-25 is x forward,
# but backward's b² underflows to 0. The run stops naming the first value backward made
# that is not finite and its .ft line, the update not taken; --skip-nonfinite counts it.
# With accumulation the micro-step is named too.
sed 's|    return linear(rmsnorm(x, final_norm, eps), lm_head)|    return linear(rmsnorm((x * (exp(x * 0.0) * 1e-25)) / (exp(x * 0.0) * 1e-25), final_norm, eps), lm_head)|' \
    models/tiny.ft > "$tmp/gradinf.ft"
"$ftc" compile "$tmp/gradinf.ft" -o "$tmp/gradinf.plan" >/dev/null
"$ftc" compile "$tmp/gradinf.ft" --micro-batch 4 -o "$tmp/gradinf4.plan" >/dev/null
fails nonfinite-gradient "step 1: a gradient is not finite (their norm is nan); the first non-finite value is in" \
    run "$tmp/gradinf.plan" --data "$tmp/c.bin" --steps 3 --save "$tmp/gi-out"
grep -q "gradinf.ft:44:[0-9]*; the step's update was not taken, the weights are those of step 0" "$tmp/e" &&
    [ ! -e "$tmp/gi-out/model.safetensors" ] && ! grep -q '^step\|^done' "$tmp/o" &&
    ok nonfinite-gradient-where || bad nonfinite-gradient-where "$(cat "$tmp/e" "$tmp/o")"
fails nonfinite-gradient-micro-step "(in micro-step 1's backward)" run "$tmp/gradinf4.plan" --data "$tmp/c.bin" --steps 1
# With each update inside backward (--update backward) the loss is checked before backward
# runs: a loss that is not finite stops the run as before, no update taken. A gradient
# that is not finite is found after the updates, which cannot be taken back: the run stops
# and says so; and --skip-nonfinite, which would skip the step whole, is refused.
"$ftc" compile "$tmp/inf.ft" --micro-batch 8 --offload none --update backward -o "$tmp/inf-early.plan" >/dev/null
"$ftc" compile "$tmp/gradinf.ft" --micro-batch 8 --offload none --update backward -o "$tmp/gradinf-early.plan" >/dev/null
fails nonfinite-loss-early "step 1, micro-step 1: the loss is nan; the first non-finite value is in" \
    run "$tmp/inf-early.plan" --data "$tmp/c.bin" --steps 3
grep -q "inf.ft:44:.*stopped before the optimizer step" "$tmp/e" && ok nonfinite-loss-early-where ||
    bad nonfinite-loss-early-where "$(cat "$tmp/e")"
fails nonfinite-gradient-early "step 1: a gradient is not finite (their norm is nan); the plan updates each parameter inside backward, so those whose gradients were complete before it were updated" \
    run "$tmp/gradinf-early.plan" --data "$tmp/c.bin" --steps 3 --save "$tmp/gie-out"
[ ! -e "$tmp/gie-out/model.safetensors" ] && ok nonfinite-gradient-early-nothing-saved ||
    bad nonfinite-gradient-early-nothing-saved "weights were saved"
fails skip-nonfinite-refused-early "--skip-nonfinite: $tmp/gradinf-early.plan updates each parameter inside backward" \
    run "$tmp/gradinf-early.plan" --data "$tmp/c.bin" --steps 3 --skip-nonfinite
# Skipped, every update leaves its weights as they were (bitwise, from the weights it
# started with), the optimizer on the host (its weights reach the device through a
# staging copy) or on the device, on the cpu and emu backends; every loss stays finite.
"$ftc" compile "$tmp/gradinf.ft" --offload none --update step -o "$tmp/gradinf-dev.plan" >/dev/null
for v in gradinf:cpu gradinf-dev:cpu gradinf:emu; do
    "$ftc" run "$tmp/${v%%:*}.plan" --data "$tmp/c.bin" --steps 3 --skip-nonfinite --weights "$tmp/w0/model.safetensors" \
        --device "${v##*:}" --save "$tmp/gi-$v" > "$tmp/o" 2>&1
    if [ $? = 0 ] && [ "$(grep -c '  skipped ' "$tmp/o")" = 3 ] && grep -q '^done: 3 steps, 3 skipped' "$tmp/o" &&
       ! grep '^step' "$tmp/o" | grep -qiE 'loss (-?nan|-?inf)' &&
       "$st_diff" "$tmp/gi-$v/model.safetensors" "$tmp/w0/model.safetensors" 0 >/dev/null; then
        ok "skip-nonfinite-gradient-weights-kept ($v)"
    else
        bad "skip-nonfinite-gradient-weights-kept ($v)" "$(grep -E '^step|^done|error' "$tmp/o")"
    fi
done
# Gradients all finite whose norm's fp32 sum of squares overflows (the logits x 1e20) are
# told apart from a non-finite gradient.
sed 's|    return linear(rmsnorm(x, final_norm, eps), lm_head)|    return linear(rmsnorm(x, final_norm, eps), lm_head) * 1e20|' models/tiny.ft > "$tmp/gbig.ft"
"$ftc" compile "$tmp/gbig.ft" -o "$tmp/gbig.plan" >/dev/null
fails gradient-norm-overflow "step 1: the gradients' norm overflowed (their norm is inf); every value backward wrote is finite" \
    run "$tmp/gbig.plan" --data "$tmp/c.bin" --steps 1
# --save that cannot be written is refused before step one, not after training.
fails save-no-parent "--save $tmp/no/such: there is no directory $tmp/no to create it in" \
    run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/no/such"
! grep -q '^step' "$tmp/o" && ok save-no-parent-before-step-one || bad save-no-parent-before-step-one "$(cat "$tmp/o")"
fails save-is-file "it is a file, not a directory" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/c.bin"
# A plan that is a device or a FIFO is refused, never read forever or waited on.
mkdir "$tmp/zero.plan" "$tmp/fifo.plan" && ln -s /dev/zero "$tmp/zero.plan/plan" && mkfifo "$tmp/fifo.plan/plan"
fails plan-is-device "zero.plan/plan: not a regular file" run "$tmp/zero.plan" --data "$tmp/c.bin"
fails plan-is-fifo "fifo.plan/plan: not a regular file" run "$tmp/fifo.plan" --data "$tmp/c.bin"
# Plans edited by hand that passed the reader and crashed the runtime: each refused with
# what is wrong, before anything runs. (mutate NAME SED_EXPR WANT)
mutate() {
    rm -rf "$tmp/m.plan" && cp -r "$tmp/tiny.plan" "$tmp/m.plan" && sed -i "$2" "$tmp/m.plan/plan"
    fails "plan-$1" "$3" run "$tmp/m.plan" --data "$tmp/c.bin" --steps 1
}
lm=$(grep -n '^buffer [0-9]* lm_head ' "$tmp/tiny.plan/plan" | cut -d: -f1)
tg=$(grep -n ' role=targets' "$tmp/tiny.plan/plan" | cut -d: -f1)
first=$(grep -n '^phase forward' "$tmp/tiny.plan/plan" | cut -d: -f1)
mutate input-minus-one "0,/ in=[0-9][0-9]*,/s// in=-1,/" "names buffer -1"
mutate micro-batch '/^micro_batch/s/ .*/ 16/' "the header's micro_batch x seq is 1024 i32"
mutate seq '/^seq /s/ .*/ 128/' "the header's micro_batch x seq is 1024 i32"
mutate nf4 "${lm}s/ bf16 / nf4 /" "an NF4 parameter without its scales"
mutate offset "${lm}s/ device [0-9]* / device 9223372036854775000 /" "lies past the end of the device arena"
mutate shape "${lm}s/ 256x64 / 4294967296x4294967296 /" "bad shape '4294967296x4294967296'"
mutate targets "${tg}s/ i32 8x64 / i32 8x32 /" "the header's micro_batch x seq is 512 i32"
mutate vocab '/^vocab /s/ .*/ 100000/' "the header's vocab is 100000"
mutate other-version '1s/.*/ftc-plan 3/' "plan version 3; this runtime reads version 2"
# A launch's dynamic shared memory: none (0 is not written), past any GPU's, not a number.
mutate launch-smem-zero '0,/ launch=[^ ]*/s// &:0/' "bad launch"
mutate launch-smem-huge '0,/ launch=[^ ]*/s// &:232449/' "bad launch"
mutate launch-smem-junk '0,/ launch=[^ ]*/s// &:12k/' "bad launch"
# Ctrl-C: the step under way finishes, the weights are saved (--save), the summary printed,
# exit 130; what was said before step one was out before it, whatever stdout is.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 100000 --save "$tmp/int" > "$tmp/int.out" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q '^step ' "$tmp/int.out" && break; sleep 0.05; done
kill -INT $job
for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -KILL $job 2>/dev/null   # (still running 30 s later: a failure below)
wait $job; rc=$?
n=$(sed -n 's/^ftc run: stopped by SIGINT (Ctrl-C) after step \([0-9]*\) of 100000; saving it$/\1/p' "$tmp/int.out")
[ $rc = 130 ] && [ -n "$n" ] && grep -q "^done: $n steps" "$tmp/int.out" &&
    grep -q "^saved $tmp/int: model.safetensors (step $n," "$tmp/int.out" &&
    ok "ctrl-c-saves-and-summarises (step $n)" || bad ctrl-c-saves-and-summarises "exit $rc: $(tail -4 "$tmp/int.out")"
sed 's/^  seq       = 64/  seq       = 1024/' models/tiny.ft > "$tmp/slow.ft"   # (a step of seconds)
"$ftc" compile "$tmp/slow.ft" --micro-batch 8 -o "$tmp/slow.plan" >/dev/null
"$ftc" run "$tmp/slow.plan" --data "$tmp/c.bin" --steps 100000 > "$tmp/slow.out" 2>&1 &
job=$!
for _ in $(seq 100); do [ -s "$tmp/slow.out" ] && break; sleep 0.05; done
grep -q '^weights: ' "$tmp/slow.out" && ! grep -q '^step ' "$tmp/slow.out" && ok said-before-step-one ||
    bad said-before-step-one "$(cat "$tmp/slow.out")"
kill -KILL $job; wait $job 2>/dev/null

# One ftc at a time saves into a directory: a second is refused, naming the first; once
# the first is gone, the next saves. Temporary files of a killed save are removed by the
# next save into the directory; a live process's are not.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 100000 --save "$tmp/busy" >/dev/null 2>&1 &
busy=$!
for _ in $(seq 100); do [ -s "$tmp/busy/.ftc-lock" ] && break; sleep 0.1; done
fails save-dir-locked "--save $tmp/busy: another ftc (pid $busy) is writing it" \
    run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/busy"
kill $busy; wait $busy 2>/dev/null
dead=$(sh -c 'echo $$')
: > "$tmp/busy/model.safetensors.tmp.$dead.AbCdEf" && : > "$tmp/busy/model.safetensors.tmp.$$.AbCdEf"
if "$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/busy" >/dev/null &&
   [ ! -e "$tmp/busy/model.safetensors.tmp.$dead.AbCdEf" ] && [ -e "$tmp/busy/model.safetensors.tmp.$$.AbCdEf" ]; then
    ok save-after-lock-and-stale-tmp
else
    bad save-after-lock-and-stale-tmp "$(ls -a "$tmp/busy")"
fi
# A plan whose arenas exceed the host's available memory is refused on the CPU before
# anything is allocated (Qwen2-72B planned for 2T: 1127 GiB of arena).
"$ftc" compile models/qwen2-72b.ft --gpu h200 --budget 2T --host-mem 4T --micro-batch 1 \
    -o "$tmp/huge.plan" >/dev/null
fails host-memory "of memory on the cpu backend, where they are host memory, but this machine has" \
    run "$tmp/huge.plan" --data "$tmp/c.bin" --steps 1
# A missing plan.
fails missing-plan "cannot open" run "$tmp/nothing.plan" --data "$tmp/c.bin"
# The schedule: without --steps the train section's steps run; the warm-up starts at 0
# and the cosine falls toward min_lr (HF's cosine_with_min_lr, computed by hand); the
# banner says it all, the clip too.
sed 's/^  optimizer = .*/  optimizer = adamw(lr = 3e-3, weight_decay = 0.1)\n  lr_schedule = cosine\n  warmup_steps = 2\n  steps = 7\n  min_lr = 3e-4\n  clip = 0.5/' \
    models/tiny.ft > "$tmp/sched.ft"
"$ftc" compile "$tmp/sched.ft" -o "$tmp/sched.plan" >/dev/null
out=$("$ftc" run "$tmp/sched.plan" --data "$tmp/c.bin" 2>&1)
lrs=$(grep '^step ' <<<"$out" | awk '{print $8}' | tr '\n' ' ')
if [ "$(grep -c '^step ' <<<"$out")" = 7 ] && [ "$lrs" = "0.000e+00 1.500e-03 3.000e-03 2.742e-03 2.067e-03 1.233e-03 5.578e-04 " ] &&
   grep -q '^schedule: lr cosine after 2 warm-up steps from 0, peak 3.000e-03, 3.000e-04 at step 7; gradients clipped to a global norm of 0.5$' <<<"$out"; then
    ok "schedule-from-plan ($lrs)"
else
    bad schedule-from-plan "$out"
fi
# --steps past the schedule's end: said before step one, the lr it stays at named.
out=$("$ftc" run "$tmp/sched.plan" --data "$tmp/c.bin" --steps 9 2>&1)
grep -q "^ftc run: note: the cosine schedule ends at step 7 (the train section's steps); steps 8 to 9 run at lr 0.0003$" <<<"$out" &&
    ! "$ftc" run "$tmp/sched.plan" --data "$tmp/c.bin" --steps 7 2>&1 | grep -q 'schedule ends' &&
    ok steps-past-the-schedule-said || bad steps-past-the-schedule-said "$(grep note <<<"$out")"

# Evaluation: --eval-data runs the plan's eval phase (forward only) every --eval-every
# steps and after the last, printing the eval loss and its perplexity; it changes nothing
# of the training (losses and weights bitwise those of a run without it, poison on).
head -c 6000 tests/data/corpus.txt > "$tmp/e.txt"
"$ftc" data --bytes "$tmp/e.txt" -o "$tmp/e.bin" >/dev/null
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 5 --seed 7 --poison --save "$tmp/noeval" > "$tmp/ne.out"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 5 --seed 7 --poison --save "$tmp/witheval" \
    --eval-data "$tmp/e.bin" --eval-every 2 > "$tmp/we.out"
evals=$(grep '^eval [0-9]' "$tmp/we.out" | awk '{print $2}' | tr '\n' ' ')
if [ "$(losses < "$tmp/ne.out")" = "$(losses < "$tmp/we.out")" ] && [ "$evals" = "2/5 4/5 5/5 " ] &&
   cmp -s "$tmp/noeval/model.safetensors" "$tmp/witheval/model.safetensors" &&
   grep -q '^eval: .*e.bin, 12 batches of 8 x 64 tokens (93 windows in the file), every --eval-every steps and after the last$' "$tmp/we.out" &&
   grep '^eval [0-9]' "$tmp/we.out" | awk '{ if ($3 != "loss" || $5 != "ppl" || $7 != "targets" || $8 != 5952) exit 1
        r = exp($4) / $6; if (r < 0.9995 || r > 1.0005) exit 1 } END { exit NR != 3 }'; then
    ok "eval-every-changes-nothing ($(grep '^eval [0-9]' "$tmp/we.out" | awk '{print $4}' | tr '\n' ' '))"
else
    bad eval-every-changes-nothing "$(cat "$tmp/we.out")"
fi
# The eval loss is the mean over the eval file's trained targets, computed apart: a plan at
# learning rate 0 trains one step on exactly one micro-batch of windows (the same eight
# windows in another order) and evaluates on them; the step's loss and the eval loss agree.
head -c 513 tests/data/corpus.txt > "$tmp/e8.txt"
"$ftc" data --bytes "$tmp/e8.txt" -o "$tmp/e8.bin" >/dev/null
sed 's/lr = 3e-3/lr = 0.0/' models/tiny.ft > "$tmp/lr0.ft"
"$ftc" compile "$tmp/lr0.ft" -o "$tmp/lr0.plan" >/dev/null
out=$("$ftc" run "$tmp/lr0.plan" --data "$tmp/e8.bin" --steps 1 --eval-data "$tmp/e8.bin" --eval-batches 5 2>&1)
tl=$(grep '^step 1/1' <<<"$out" | awk '{print $4}') el=$(grep '^eval 1/1' <<<"$out" | awk '{print $4}')
awk -v a="$tl" -v b="$el" 'BEGIN { d = a - b; exit !(a > 5 && d < 2e-6 && d > -2e-6) }' &&
    grep -q '^eval: .*e8.bin, 1 batches of 8 x 64 tokens (8 windows in the file), after the last step$' <<<"$out" &&
    ok "eval-loss-is-the-forward-loss (step $tl, eval $el)" || bad eval-loss-is-the-forward-loss "$out"
# The eval phase of other plans of the same model: the loss unfused (the logits whole),
# and the weights streamed from the host (the eval phase's reads of them streamed as the
# forward's), each training and evaluating as the default plan (fused loss, weights kept)
# does: the same losses and eval losses.
"$ftc" compile models/tiny.ft --unfused-loss -o "$tmp/unfused.plan" >/dev/null
"$ftc" compile models/tiny.ft --offload weights -o "$tmp/streamed.plan" >/dev/null
for v in tiny unfused streamed; do
    "$ftc" run "$tmp/$v.plan" --data "$tmp/c.bin" --steps 4 --seed 7 --eval-data "$tmp/e.bin" \
        --eval-every 2 --eval-batches 3 > "$tmp/ev-$v.out" 2>&1
    grep '^eval [0-9]\|^step [0-9]' "$tmp/ev-$v.out" | awk '{print $1, $2, $4}' > "$tmp/ev-$v.losses"
done
if [ "$(grep -c '^eval' "$tmp/ev-tiny.losses")" = 2 ] && grep -q '^phase eval' "$tmp/streamed.plan/plan" &&
   awk 'NR == FNR { a[FNR] = $3; next } { d = a[FNR] - $3; if (d > 1e-5 || d < -1e-5) exit 1 }' \
       "$tmp/ev-tiny.losses" "$tmp/ev-unfused.losses" &&
   cmp -s "$tmp/ev-tiny.losses" "$tmp/ev-streamed.losses"; then
    ok "eval-other-plans ($(grep '^eval' "$tmp/ev-tiny.losses" | awk '{print $3}' | tr '\n' ' '))"
else
    bad eval-other-plans "$(paste "$tmp/ev-tiny.losses" "$tmp/ev-unfused.losses" "$tmp/ev-streamed.losses"; tail -3 "$tmp/ev-streamed.out")"
fi
# --eval-batches K: the first K micro-batches only.
out=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --eval-data "$tmp/e.bin" --eval-batches 2 2>&1)
grep -q '^eval: .*, 2 batches of 8 x 64 tokens (93 windows in the file) from its first window, after the last step$' <<<"$out" &&
    grep -q '^eval 1/1  loss [0-9.]*  ppl [0-9.]*  targets 1024 ' <<<"$out" && ok eval-batches ||
    bad eval-batches "$out"
# Usage and input errors.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --eval-every 2 >/dev/null 2>"$tmp/e"
[ $? = 2 ] && grep -q 'ftc run: error: --eval-every needs --eval-data FILE' "$tmp/e" && ok eval-every-needs-data ||
    bad eval-every-needs-data "$(cat "$tmp/e")"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --eval-data "$tmp/e.bin" --eval-batches 0 >/dev/null 2>"$tmp/e"
[ $? = 2 ] && grep -q -- '--eval-batches must be at least 1' "$tmp/e" && ok eval-batches-positive ||
    bad eval-batches-positive "$(cat "$tmp/e")"
head -c 20 tests/data/corpus.txt > "$tmp/short.txt"
"$ftc" data --bytes "$tmp/short.txt" -o "$tmp/short.bin" >/dev/null
fails eval-data-too-short "short.bin" run "$tmp/tiny.plan" --data "$tmp/c.bin" --eval-data "$tmp/short.bin"
fails eval-data-missing "nothing.bin" run "$tmp/tiny.plan" --data "$tmp/c.bin" --eval-data "$tmp/nothing.bin"

# The run report: --save DIR gets DIR/run.jsonl, a record a step (the eval loss on the
# steps that evaluated, the same figures as the console), and DIR/run.html.
# (the record's figure has more digits than the console's: they agree to the console's 1e-6)
same_figures() {
    paste "$1" "$2" | awk -v n="$3" '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6) bad = 1; k++ } END { exit bad || k != n }'
}
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --seed 7 --save "$tmp/rep" --save-every 3 \
    --eval-data "$tmp/e8.bin" --eval-every 3 > "$tmp/rep.out"
j="$tmp/rep/run.jsonl"
if [ "$(wc -l < "$j")" = 6 ] && [ -s "$tmp/rep/run.html" ] &&
   [ "$(grep -o '"step": [0-9]*' "$j" | awk '{print $2}' | tr '\n' ' ')" = "1 2 3 4 5 6 " ] &&
   same_figures <(grep -o '"eval_loss": [0-9][0-9.]*' "$j" | awk '{print $2}') <(grep '^eval [0-9]' "$tmp/rep.out" | awk '{print $4}') 2 &&
   same_figures <(grep -o '"loss": [0-9][0-9.]*' "$j" | awk '{print $2}') <(grep '^step ' "$tmp/rep.out" | awk '{print $4}') 6 &&
   grep -q '^{"step": 1, "loss": [0-9.]*, "eval_loss": null, "eval_ppl": null, "grad_norm": [0-9.]*, "lr": 0.003, "tokens_per_s": [0-9.]*, "loss_scale": null, "skipped": false, "skipped_total": 0, "tokens": 512, "elapsed_s": [0-9.]*}$' "$j" &&
   grep -q "^report: $tmp/rep/run.jsonl (a record a step) and $tmp/rep/run.html$" "$tmp/rep.out"; then
    ok run-jsonl-a-record-a-step
else
    bad run-jsonl-a-record-a-step "$(cat "$j")"
fi
# Resumed from the checkpoint at step 3 after a longer run had written records to step 6:
# the records after 3 are dropped, the resumed steps written again, one a step.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --resume "$tmp/rep/checkpoint-000003" --save "$tmp/rep" \
    --eval-data "$tmp/e8.bin" --eval-every 3 > "$tmp/rep2.out" 2>&1
steps=$(grep -o '"step": [0-9]*' "$j" | awk '{print $2}' | tr '\n' ' ')
[ "$steps" = "1 2 3 4 5 6 " ] && grep -q "resuming from .*checkpoint-000003" "$tmp/rep2.out" &&
    [ "$(grep -o '"loss": [0-9][0-9.]*' "$j" | awk '{printf "%.6f ", $2}')" = "$(grep '^step ' "$tmp/rep.out" | awk '{printf "%s ", $4}')" ] &&
    ok "run-jsonl-after-resume ($steps)" || bad run-jsonl-after-resume "$steps: $(cat "$tmp/rep2.out")"
# --report DIR elsewhere; a file there is refused before step one.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 2 --report "$tmp/only-report" >/dev/null &&
    [ "$(wc -l < "$tmp/only-report/run.jsonl")" = 2 ] && [ -s "$tmp/only-report/run.html" ] &&
    ok report-dir || bad report-dir "$(ls "$tmp/only-report")"
touch "$tmp/afile"
fails report-is-a-file "--report $tmp/afile: it is a file, not a directory" run "$tmp/tiny.plan" --data "$tmp/c.bin" --report "$tmp/afile"
# --profile: the device's work of every step after the first, kernel by kernel and GEMM by
# shape, each beside the cost model's estimate the plan carries (us=); a run of one step is
# refused before it starts.
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 3 --profile "$tmp/prof.txt" > "$tmp/prof.out" 2>&1
if grep -q "^profile: $tmp/prof.txt (the device's work of steps 2 to 3, kernel by kernel)$" "$tmp/prof.out" &&
   grep -q '^# ftc run --profile: plan tiny on the cpu backend, 2 steps timed (after one untimed)$' "$tmp/prof.txt" &&
   grep -q '^ *2.0 .* attention_bwd k[0-9]*_attention_bwd_pre+k[0-9]*_attention_bwd_main+k[0-9]*_attention_bwd_post$' "$tmp/prof.txt" &&
   grep -q ' linear_dw [0-9x]* <- ' "$tmp/prof.txt" &&
   awk 'NR > 3 { if ($4 <= 0) bad = 1; n++ } END { exit bad || n < 10 }' "$tmp/prof.txt"; then
    ok "profile ($(sed -n 2p "$tmp/prof.txt" | sed 's/^# //'))"
else
    bad profile "$(cat "$tmp/prof.out" "$tmp/prof.txt" | head -12)"
fi
fails profile-one-step "--profile times the steps after the first: this run takes 1" \
    run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --profile "$tmp/prof1.txt"
# The console: not on a terminal, a line every --log-every steps (and the first and last);
# on one (script gives a pty), the line rewritten in place with the time left.
out=$("$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 7 --log-every 3)
[ "$(grep '^step ' <<<"$out" | awk '{print $2}' | tr '\n' ' ')" = "1/7 3/7 6/7 7/7 " ] && ok log-every ||
    bad log-every "$out"
if command -v script >/dev/null; then
    out=$(script -qec "$ftc run $tmp/tiny.plan --data $tmp/c.bin --steps 3" /dev/null | tr '\r' '\n')
    if grep -q $'^step 2/3  loss [0-9.]*  tok/s [0-9]*  lr .*  eta [0-9.]*s\e\\[K$' <<<"$out" &&
       grep -q $'^step 3/3  .*  eta 0s\e\\[K$' <<<"$out" && grep -q '^done: 3 steps' <<<"$out"; then
        ok progress-in-place-on-a-terminal
    else
        bad progress-in-place-on-a-terminal "$(cat -A <<<"$out" | head)"
    fi
fi
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --log-every 0 >/dev/null 2>"$tmp/e"
[ $? = 2 ] && grep -q -- '--log-every must be at least 1' "$tmp/e" && ok log-every-positive || bad log-every-positive "$(cat "$tmp/e")"

# A checkpoint read as strictly as weights: a step, seed or plan fingerprint that is not
# what ftc writes (a sign, a number past the range, step 0), or a tensor declared with
# another shape or dtype than its buffer's, is refused by name before anything runs
# (tests/st_meta.py rewrites one field of the header).
if command -v python3 >/dev/null; then
    "$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 2 --save "$tmp/meta" --save-every 1 >/dev/null 2>&1
    # refused NAME WANT ST_META_ARGS...: the step-1 checkpoint edited by st_meta.py, then
    # resumed: exit 1 before any step, WANT in what it says
    refused() {
        local name=$1 want=$2
        shift 2
        rm -rf "$tmp/mm" && cp -r "$tmp/meta/checkpoint-000001" "$tmp/mm"
        python3 tests/st_meta.py "$tmp/mm/state.safetensors" "$@"
        "$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 3 --resume "$tmp/mm" > "$tmp/o" 2>&1; rc=$?
        [ $rc = 1 ] && ! grep -q '^step' "$tmp/o" && grep -q "$want" "$tmp/o" && ok "$name" ||
            bad "$name" "exit $rc: $(head -3 "$tmp/o")"
    }
    for kv in "step:-1" "step:9223372036854775808" "step:0" "seed:-1" "seed:+5" "plan:xyz"; do
        refused "checkpoint-metadata-refused (${kv})" \
            "state.safetensors: \"${kv%%:*}\" is \"${kv#*:}\" in its metadata, not a" "${kv%%:*}" "${kv#*:}"
    done
    for kv in "shape:64,256:BF16 \[64, 256\]" "shape:256,64,1:BF16 \[256, 64, 1\]" "dtype:F16:F16 \[256, 64\]"; do
        IFS=: read -r key value said <<<"$kv"
        refused "checkpoint-tensor-refused ($key $value)" \
            "state.safetensors: 'embed' is $said, this plan's buffer BF16 \[256, 64\]: not a state of this plan" \
            --tensor embed "$key" "$value"
    done
fi

# The last step is checkpointed with --save-every, whether a multiple of it or not: a
# finished run goes on with more --steps as one never stopped, and started again with the
# same --steps has nothing to train, says so and saves the same weights (a restarted job).
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --save "$tmp/last6" >/dev/null 2>&1
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 4 --save-every 3 --save "$tmp/last" >/dev/null 2>&1
cp "$tmp/last/model.safetensors" "$tmp/last4.st"
ls -d "$tmp/last/checkpoint-000004" >/dev/null 2>&1 && ls -d "$tmp/last/checkpoint-000003" >/dev/null 2>&1 &&
    ok last-step-checkpointed || bad last-step-checkpointed "$(ls "$tmp/last")"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 4 --save-every 3 --save "$tmp/last" --resume "$tmp/last" > "$tmp/o" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "^ftc run: note: .*checkpoint-000004 is step 4, the last of --steps 4: nothing left to train; its weights saved again$" "$tmp/o" &&
   ! grep -q '^step ' "$tmp/o" && cmp -s "$tmp/last/model.safetensors" "$tmp/last4.st"; then
    ok finished-run-restarted-trains-nothing
else
    bad finished-run-restarted-trains-nothing "exit $rc: $(head -3 "$tmp/o")"
fi
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 6 --save-every 3 --save "$tmp/last" --resume "$tmp/last" > "$tmp/o" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "^resuming from .*checkpoint-000004 (step 4" "$tmp/o" && grep -q '^step 5/6 ' "$tmp/o" &&
   cmp -s "$tmp/last/model.safetensors" "$tmp/last6/model.safetensors"; then
    ok finished-run-continues-bitwise
else
    bad finished-run-continues-bitwise "exit $rc: $(grep -v '^step' "$tmp/o" | head -4)"
fi

# What a checkpoint decides over the command line is said by name: another --seed, a
# --weights that is not read, a --data file other than the one it trained on (the
# checkpoint records a fingerprint of it); the same command line says nothing.
tac tests/data/corpus.txt > "$tmp/other.txt"   # (the same size, other contents)
"$ftc" data --bytes "$tmp/other.txt" -o "$tmp/other.bin" >/dev/null
for case in none seed weights data; do
    rm -rf "$tmp/cl"; mkdir -p "$tmp/cl"; cp -r "$tmp/last/checkpoint-000004" "$tmp/cl/"
    args=(--data "$tmp/c.bin")
    case $case in
        seed) args+=(--seed 99) ;;
        weights) args+=(--weights "$tmp/last4.st") ;;
        data) args=(--data "$tmp/other.bin") ;;
    esac
    "$ftc" run "$tmp/tiny.plan" "${args[@]}" --steps 5 --resume "$tmp/cl" > "$tmp/o" 2>&1; rc=$?
    want=""
    case $case in
        seed) want="^ftc run: warning: --seed 99 not used: the checkpoint's seed 1234 goes on (the data order and dropout follow it)$" ;;
        weights) want="^ftc run: warning: --weights $tmp/last4.st not read: the checkpoint's weights go on$" ;;
        data) want="^ftc run: warning: --data $tmp/other.bin is not the file $tmp/cl/checkpoint-000004 trained on (its size or contents differ): the run goes on over this one$" ;;
    esac
    if [ -z "$want" ]; then
        said=$(! grep -q "warning: --" "$tmp/o" && echo yes)
    else
        said=$([ "$(grep -c "warning: --" "$tmp/o")" = 1 ] && grep -q "$want" "$tmp/o" && echo yes)
    fi
    if [ $rc = 0 ] && [ "$said" = yes ]; then
        ok "resume-overrides-said ($case)"
    else
        bad "resume-overrides-said ($case)" "exit $rc: $(grep -v '^step' "$tmp/o" | head -4)"
    fi
done

# A lock that cannot be written (a file size limit of 0: writes fail with EFBIG) is said
# with the reason and leaves no empty lock behind; --merge without LoRA is refused by name.
rm -rf "$tmp/lk"
# (its messages through a pipe, which no file size limit stops)
( trap '' XFSZ; ulimit -f 0; "$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --save "$tmp/lk" 2>&1 ) | cat > "$tmp/o"
rc=${PIPESTATUS[0]}
[ $rc = 1 ] && grep -q "^ftc run: error: --save $tmp/lk: cannot write $tmp/lk/.ftc-lock: File too large$" "$tmp/o" &&
    [ ! -e "$tmp/lk/.ftc-lock" ] && ok lock-unwritable-said || bad lock-unwritable-said "exit $rc: $(cat "$tmp/o"); $(ls -a "$tmp/lk")"
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 1 --merge > "$tmp/o" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "^ftc run: error: --merge: $tmp/tiny.plan trains no LoRA adapters, so there is nothing to merge" "$tmp/o" &&
    ! grep -q '^step' "$tmp/o" && ok merge-without-lora-refused || bad merge-without-lora-refused "exit $rc: $(head -3 "$tmp/o")"

# A QLoRA state carries the NF4 base as its bytes (u8, one dimension): it loads back,
# and a run resumed from it ends where the uninterrupted one does, bit for bit.
sed "s/^  optimizer = .*/&\n  lora(r = 4, alpha = 8, targets = [wq, wv])\n  quantize(nf4, double_quant = true)/" models/tiny.ft > "$tmp/qlora.ft"
"$ftc" compile "$tmp/qlora.ft" -o "$tmp/qlora.plan" >/dev/null
"$ftc" run "$tmp/qlora.plan" --data "$tmp/c.bin" --steps 4 --save-every 2 --keep 2 --save "$tmp/q-ref" >/dev/null 2>&1
rm -rf "$tmp/q-res"; mkdir -p "$tmp/q-res"; cp -r "$tmp/q-ref/checkpoint-000002" "$tmp/q-res/"
"$ftc" run "$tmp/qlora.plan" --data "$tmp/c.bin" --steps 4 --save-every 2 --save "$tmp/q-res" --resume "$tmp/q-res" > "$tmp/o" 2>&1
if head -c 65536 "$tmp/q-ref/checkpoint-000002/state.safetensors" | grep -aq '"dtype":"U8","shape":\[[0-9]*\]' &&
   cmp -s "$tmp/q-ref/adapter_model.safetensors" "$tmp/q-res/adapter_model.safetensors"; then
    ok qlora-state-resumes-bitwise
else
    bad qlora-state-resumes-bitwise "$(head -3 "$tmp/o")"
fi

# A run continued past its schedule's end says at what learning rate the steps run (from
# the finished run's last step, which --save-every checkpoints).
sed 's/^train {/train {\n  lr_schedule = linear\n  steps = 4/' models/tiny.ft > "$tmp/sched.ft"
"$ftc" compile "$tmp/sched.ft" -o "$tmp/sched.plan" >/dev/null
"$ftc" run "$tmp/sched.plan" --data "$tmp/c.bin" --steps 6 --save "$tmp/sched" --save-every 5 >/dev/null 2>&1
"$ftc" run "$tmp/sched.plan" --data "$tmp/c.bin" --steps 7 --resume "$tmp/sched" > "$tmp/o" 2>&1
grep -q '^ftc run: note: the linear schedule ended at step 4 (the train section.s steps); steps 7 to 7 run at lr 0$' "$tmp/o" &&
    ok schedule-ended-said || bad schedule-ended-said "$(head -3 "$tmp/o")"

# ftc eval: the plan's eval phase alone on saved weights gives the loss ftc run --eval-data
# printed at those weights, to the last digit (the same arithmetic on the same values):
# the console's figure, run.jsonl's (--json prints it to as many digits), a checkpoint's.
"$ftc" eval "$tmp/tiny.plan" --data "$tmp/e.bin" --weights "$tmp/witheval" > "$tmp/ev.out" 2>&1
"$ftc" eval "$tmp/tiny.plan" --data "$tmp/e.bin" --weights "$tmp/witheval" --json > "$tmp/evj.out" 2> "$tmp/evj.err"
a=$(grep '^eval 5/5' "$tmp/we.out" | awk '{print $4, $6}') b=$(grep '^loss ' "$tmp/ev.out" | awk '{print $2, $4}')
c=$(tail -1 "$tmp/witheval/run.jsonl" | grep -o '"eval_loss": [^,]*' | awk '{print $2}')
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(wc -l < "$tmp/evj.out")" = 1 ] &&
   grep -q "^{\"loss\": $c, \"ppl\": [0-9.]*, \"targets\": 5952, \"tokens\": 5952, \"batches\": 12, \"windows\": 93, \"time_s\": [0-9.]*}$" "$tmp/evj.out" &&
   grep -q "^ftc eval: tiny on cpu, 12 batches of 8 x 64 tokens from $tmp/e.bin (93 windows in the file)$" "$tmp/ev.out" &&
   grep -q "^weights: 27 tensors from $tmp/witheval$" "$tmp/evj.err"; then
    ok "eval-is-the-runs-eval-loss ($b; $c)"
else
    bad eval-is-the-runs-eval-loss "run: $a / $c; eval: $(cat "$tmp/ev.out" "$tmp/evj.out")"
fi
a=$(grep '"step": 3,' "$tmp/rep/run.jsonl" | grep -o '"eval_loss": [^,]*' | awk '{print $2}')
b=$("$ftc" eval "$tmp/tiny.plan" --data "$tmp/e8.bin" --weights "$tmp/rep/checkpoint-000003" --json 2>/dev/null |
    grep -o '"loss": [^,]*' | awk '{print $2}')
[ -n "$a" ] && [ "$a" = "$b" ] && ok "eval-a-checkpoint ($b)" || bad eval-a-checkpoint "run $a, eval $b"
out=$("$ftc" eval "$tmp/tiny.plan" --data "$tmp/e.bin" --weights "$tmp/witheval" --batches 2)
grep -q "^ftc eval: tiny on cpu, the first 2 batches of 8 x 64 tokens from" <<<"$out" &&
    grep -q '^loss [0-9.]*  ppl [0-9.]*  over 1024 trained targets (2 batches, 1024 tokens) in ' <<<"$out" &&
    ok eval-batches-k || bad eval-batches-k "$out"
# A LoRA plan: its saved adapter over the base gives the run's eval loss; without it the
# adapters add nothing (B = 0), which is warned of: the loss is the base model's, bitwise
# the plain plan's on the same base; the merged weights agree with the adapter applied
# within 1e-3 (merged, W + alpha/r BA is rounded to bf16 once; the adapter adds in fp32).
"$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 2 --save "$tmp/le" --merge --eval-data "$tmp/e8.bin" > "$tmp/le.out"
a=$(grep '^eval 2/2' "$tmp/le.out" | awk '{print $4}')
b=$("$ftc" eval "$tmp/lora.plan" --data "$tmp/e8.bin" --adapter "$tmp/le" 2>&1 | tee "$tmp/ea.out" | grep '^loss ' | awk '{print $2}')
"$ftc" eval "$tmp/lora.plan" --data "$tmp/e8.bin" > "$tmp/en.out" 2>&1
n=$(grep '^loss ' "$tmp/en.out" | awk '{print $2}')
c=$("$ftc" eval "$tmp/lora.plan" --data "$tmp/e8.bin" --weights "$tmp/ck" 2>&1 | grep '^loss ' | awk '{print $2}')
d=$("$ftc" eval "$tmp/tiny.plan" --data "$tmp/e8.bin" --weights "$tmp/ck" | grep '^loss ' | awk '{print $2}')
m=$("$ftc" eval "$tmp/tiny.plan" --data "$tmp/e8.bin" --weights "$tmp/le/merged" | grep '^loss ' | awk '{print $2}')
if [ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$n" ] && [ "$n" != "$b" ] && [ -n "$c" ] && [ "$c" = "$d" ] &&
   grep -q "^adapter: 8 tensors from $tmp/le (LoRA r 4, alpha 8)$" "$tmp/ea.out" && ! grep -q warning "$tmp/ea.out" &&
   grep -q '^ftc eval: warning: no --adapter: the LoRA adapters are at their initialisation (B = 0, adding nothing), so this is the loss of the base model alone$' "$tmp/en.out" &&
   awk -v a="$b" -v m="$m" 'BEGIN { d = a - m; exit !(d < 1e-3 && d > -1e-3) }'; then
    ok "eval-lora-adapter (run $a, adapter $b, merged $m, none $n; on another base none $c, the plain plan $d)"
else
    bad eval-lora-adapter "run $a, adapter $b, merged $m, none $n; none $c, the plain plan $d: $(cat "$tmp/ea.out" "$tmp/en.out")"
fi
# Its errors: exit 1 (2 for usage), the file and tensor named, nothing on stdout.
eval_fails() {
    local name=$1 rc=$2 want=$3; shift 3
    "$ftc" eval "$@" >"$tmp/o" 2>"$tmp/e"; local got=$?
    if [ $got = "$rc" ] && [ ! -s "$tmp/o" ] && grep -qF -- "$want" "$tmp/e"; then ok "$name"; else
        bad "$name" "exit $got, stdout $(head -c 200 "$tmp/o"), stderr: $(cat "$tmp/e")"; fi
}
cp "$tmp/ck/model.safetensors" "$tmp/ev-shape.safetensors"
python3 tests/st_meta.py "$tmp/ev-shape.safetensors" --tensor model.norm.weight shape 64,1
sed 's/^  optimizer = .*/&\n  lora(r = 8, alpha = 16, targets = [wq, wv])/' models/tiny.ft > "$tmp/lora8.ft"
"$ftc" compile "$tmp/lora8.ft" -o "$tmp/lora8.plan" >/dev/null
mkdir -p "$tmp/le-bare" && cp "$tmp/le/adapter_model.safetensors" "$tmp/le-bare/"
eval_fails eval-needs-data 2 "ftc eval: error: no --data FILE: the token file to evaluate on" "$tmp/tiny.plan" --weights "$tmp/ck"
eval_fails eval-not-a-plan 1 "ftc eval: error: $tmp/c.bin/plan: cannot open: Not a directory" "$tmp/c.bin" --data "$tmp/e.bin"
eval_fails eval-weights-of-another-model 1 "ftc eval: error: $tmp/le/adapter_model.safetensors: no tensor 'model.embed_tokens.weight' (parameter embed of the plan)" \
    "$tmp/tiny.plan" --data "$tmp/e.bin" --weights "$tmp/le/adapter_model.safetensors"
eval_fails eval-weights-shape 1 "ftc eval: error: $tmp/ev-shape.safetensors: tensor 'model.norm.weight' has shape [64, 1], the model expects [64]" \
    "$tmp/tiny.plan" --data "$tmp/e.bin" --weights "$tmp/ev-shape.safetensors"
eval_fails eval-adapter-config 1 "ftc eval: error: $tmp/le/adapter_config.json: an adapter of r 4, lora_alpha 8; the plan's LoRA has r 8, alpha 16" \
    "$tmp/lora8.plan" --data "$tmp/e.bin" --adapter "$tmp/le"
eval_fails eval-adapter-shape 1 "tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' has shape [4, 64], the model expects [8, 64]" \
    "$tmp/lora8.plan" --data "$tmp/e.bin" --adapter "$tmp/le-bare"
eval_fails eval-adapter-without-lora 1 "ftc eval: error: --adapter: $tmp/tiny.plan has no LoRA adapters to load it into" \
    "$tmp/tiny.plan" --data "$tmp/e.bin" --adapter "$tmp/le"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
