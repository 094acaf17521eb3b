#!/usr/bin/env bash
# tests/gpu/quick.sh — the GPU checks that fit a short lease (about three minutes), for a
# change to the kernels or the memory line, after tests/gpu/run.sh has given the whole table:
#   - every kernel on the GPU against the cpu backend (test_kernels, the cases named or all);
#   - Qwen2-7B LoRA (micro-batch 1, seq 2048) and Qwen2-0.5B full (global batch 8), planned
#     for the h200 preset as run.sh plans them: three steps each with --profile, the memory
#     line and the steady step, and the profile's largest entries;
#   - Qwen2-0.5B DPO with LoRA (seq 512, 8 pairs a step, the reference as ftc compile
#     chooses it), on pairs that tests/fixtures/hf's tokenizer makes: three steps with
#     --profile, the memory line, the steady step and TRL's rewards;
#   - torch's flash SDPA at Qwen2-7B's attention shapes (tests/gpu/torch_attention.py).
# Logs go to --work DIR (default: a temporary directory); the summary to standard output.
# Exit status 1 when test_kernels fails, 2 on bad usage.
#
# usage: bash tests/gpu/quick.sh [--work DIR] [--kernels CASES]
set -u
cd "$(dirname "$0")/../.." || exit 2
work="" kcases=""
while [ $# -gt 0 ]; do
    case $1 in
        --work) work=${2:-}; shift ;;
        --kernels) kcases=${2:-}; shift ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "quick.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$work" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work" || exit 2
if [ -x gpu-bundle/bin/ftc ]; then   # tests/gpu/bundle.sh's, as run.sh takes it
    ftc=$PWD/gpu-bundle/bin/ftc tk=$PWD/gpu-bundle/bin/test_kernels
    export LD_LIBRARY_PATH="$PWD/gpu-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
    ftc=$PWD/build/ftc tk=$PWD/build/tests/test_kernels
fi
export FTC_CACHE_DIR=$work/kernel-cache

echo "== test_kernels on cuda"
# shellcheck disable=SC2086
timeout 300 "$tk" "$PWD" --device cuda ${kcases//,/ } > "$work/kernels.log" 2>&1
krc=$?
grep -E '^(ok|FAIL)|not equal|error' "$work/kernels.log" | head -40
echo "test_kernels: exit $krc"

head -c $((2 * 2049 * 8 * 6)) /dev/urandom > "$work/random.u16"
"$ftc" data --u16 "$work/random.u16" -o "$work/random.bin" >/dev/null
lora_line='  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])'
while read -r name model batch flags lora; do
    sed "s/^  batch *= *[0-9]*/  batch     = $batch/" "models/$model.ft" > "$work/$name.ft"
    [ "$lora" = lora ] && sed -i "s/^train {/train {\n$lora_line/" "$work/$name.ft"
    [ "$flags" = - ] && flags="" || flags=${flags//,/ }
    echo "== $name"
    # shellcheck disable=SC2086
    "$ftc" compile "$work/$name.ft" --gpu h200 $flags -o "$work/$name.plan" > "$work/$name-compile.log" 2>&1 ||
        { echo "compile failed"; tail -3 "$work/$name-compile.log"; continue; }
    grep '^plan:' "$work/$name.plan/report.txt"
    timeout 300 "$ftc" run "$work/$name.plan" --data "$work/random.bin" --steps 3 --device cuda \
        --profile "$work/$name-profile.txt" > "$work/$name-ftc.log" 2>&1
    echo "ftc run: exit $?"
    grep -E '^(device|memory|steady|ftc run: error)' "$work/$name-ftc.log"
    head -14 "$work/$name-profile.txt" 2>/dev/null
done <<EOF
qwen2-7b-lora qwen2 4 --micro-batch,1 lora
qwen2-0.5b-full qwen2-0.5b 8 - full
EOF

echo "== qwen2-0.5b-dpo"
for i in $(seq 64); do
    printf '{"prompt": "Question %d: what colour is the sky?", "chosen": " The sky is blue, %d.", "rejected": " Green %d."}\n' $i $i $i
done > "$work/prefs.jsonl"
"$ftc" data --tokenizer tests/fixtures/hf "$work/prefs.jsonl" --pack 512 -o "$work/prefs.bin" > "$work/dpo-data.log" 2>&1 ||
    tail -2 "$work/dpo-data.log"
sed -e 's/^  seq *= *[0-9]*/  seq       = 512/' -e 's/^  batch *= *[0-9]*/  batch     = 16/' \
    -e 's/cross_entropy(forward(tokens), next(tokens))/dpo(forward(tokens), next(tokens), beta = 0.1)/' \
    -e "s/^train {/train {\n$lora_line/" models/qwen2-0.5b.ft > "$work/dpo.ft"
if "$ftc" compile "$work/dpo.ft" --gpu h200 -o "$work/dpo.plan" > "$work/dpo-compile.log" 2>&1; then
    grep -E '^plan:|<- chosen' "$work/dpo.plan/report.txt" | head -3
    timeout 300 "$ftc" run "$work/dpo.plan" --data "$work/prefs.bin" --steps 3 --device cuda \
        --profile "$work/dpo-profile.txt" > "$work/dpo-ftc.log" 2>&1
    echo "ftc run: exit $?"
    grep -E '^(device|memory|steady|reference|step 3|ftc run: error)' "$work/dpo-ftc.log"
    head -10 "$work/dpo-profile.txt" 2>/dev/null
else
    echo "compile failed"; tail -3 "$work/dpo-compile.log"
fi

echo "== torch SDPA at Qwen2-7B's shapes"
timeout 120 python3 tests/gpu/torch_attention.py --shape 1,2048,28,4,128 2>&1 | tail -3
[ $krc = 0 ] || exit 1
