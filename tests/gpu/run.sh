#!/usr/bin/env bash
# tests/gpu/run.sh — ftc on a GPU, in one table, in a few minutes:
#   - every kernel on the GPU against the cpu backend on random inputs (test_kernels);
#   - tiny.ft, 20 steps, on the GPU against the cpu backend (losses); and with each update
#     inside backward against the updates after it (the same weights, bitwise);
#   - Qwen2-0.5B full fine-tuning (seq 2048, global batch 8) and Qwen2-7B LoRA r = 8 on
#     q, v (micro-batch 1, seq 2048, global batch 4), random weights, planned for the
#     h200 preset: the device memory measured after step one against the plan's, the
#     steady step time, tokens/s and MFU (the plan's model FLOPs over the measured time);
#   - the same two steps in transformers + PEFT (tests/gpu/torch_step.py): step time and
#     memory, beside ftc's;
#   - each ftc run's GPU as its driver reports it (version, compute capability, memory after
#     set-up against the plan's, where the kernels came from, cuBLASLt's algorithm a product)
#   - each big run's step with each phase launched as a CUDA graph (as ftc runs by default)
#     and launch by launch (--no-graphs);
#   - each ftc run's device work kernel by kernel (ftc run --profile: CUDA events, beside the
#     cost model's estimates), and its attention kernels against torch's flash SDPA forward
#     and backward at Qwen2-7B's shapes (tests/gpu/torch_attention.py).
# Exit status 1 when a correctness check fails (report.py says which), 2 on bad usage.
#
# usage: bash tests/gpu/run.sh [--dry-run] [--steps N] [--work DIR] [--build DIR] [--kernels CASES]
#   --dry-run  no GPU: the same script on the CPU; the kernels on the cuda backend over
#              the simulated driver (test_kernels --device sim), the runs on the emu
#              backend, the two big plans compiled but trained as tiny.ft of the same kind,
#              torch_step.py checking its arguments only
#   --steps N  optimizer steps of each big run, the first being warm-up (default 6)
#   --work DIR keep the logs and plans in DIR (default: a temporary directory, removed)
#   --build DIR  take ftc and tests/test_kernels from this build directory
#   --kernels CASES  only these cases of test_kernels (comma-separated; default all)
#
# Otherwise ftc comes from gpu-bundle/ when it is there (tests/gpu/bundle.sh makes it on a machine
# that can build, to travel with the tree to one that cannot), else from build/, else it
# is built here (which needs setup.sh's packages).
set -u
cd "$(dirname "$0")/../.."
root=$PWD
dry=0 steps=6 work="" build="" kcases=""
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1 ;;
        --steps) steps=${2:-}; shift ;;
        --work) work=${2:-}; shift ;;
        --build) build=${2:-}; shift ;;
        --kernels) kcases=${2:-}; shift ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if ! [[ $steps =~ ^[0-9]+$ ]] || [ "$steps" -lt 2 ]; then
    echo "run.sh: --steps needs a number of at least 2 (the first step is warm-up)" >&2
    exit 2
fi
if [ -z "$work" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
elif ! mkdir -p "$work"; then
    echo "run.sh: cannot make $work" >&2
    exit 2
fi
work=$(cd "$work" && pwd)
log() { echo "run.sh: $*" >&2; }

# --- ftc and test_kernels ---------------------------------------------------------------
if [ -n "$build" ]; then
    build=$(cd "$build" 2>/dev/null && pwd) || { echo "run.sh: no build directory '$build'" >&2; exit 2; }
    ftc=$build/ftc tk=$build/tests/test_kernels
elif [ -x gpu-bundle/bin/ftc ] && [ -x gpu-bundle/bin/test_kernels ]; then
    ftc=$root/gpu-bundle/bin/ftc tk=$root/gpu-bundle/bin/test_kernels
    export LD_LIBRARY_PATH="$root/gpu-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
elif [ -x build/ftc ] && [ -x build/tests/test_kernels ]; then
    ftc=$root/build/ftc tk=$root/build/tests/test_kernels
else
    log "no gpu-bundle/ or build/: building into build/"
    [ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
    if ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
           cmake --build build -j "$(nproc)" --target ftc test_kernels >/dev/null; }; then
        log "cannot build ftc here (setup.sh's packages missing?); make gpu-bundle/ with" \
            "tests/gpu/bundle.sh on a machine that can, and bring it along"
        exit 1
    fi
    ftc=$root/build/ftc tk=$root/build/tests/test_kernels
fi
if ! "$ftc" help >/dev/null 2>"$work/ftc.err"; then
    log "$ftc does not start here: $(head -3 "$work/ftc.err")"
    exit 1
fi
log "ftc: $ftc; work: $work"
export FTC_CACHE_DIR=$work/kernel-cache
# Each step's limit: on the GPU a hang's; a dry run emulates every kernel on the CPU
# (under a sanitizer on a shared machine, many minutes).
if [ $dry = 1 ]; then dev=emu kdev=sim limit=1200; else dev=cuda kdev=cuda limit=300; fi

# --- every kernel against the cpu backend -------------------------------------------------
log "kernels on $kdev"
# shellcheck disable=SC2086
timeout "$limit" "$tk" "$root" --device "$kdev" ${kcases//,/ } > "$work/kernels.log" 2>&1
echo $? > "$work/kernels.rc"

# --- tiny.ft, 20 steps ---------------------------------------------------------------------
log "tiny.ft, 20 steps on cpu and $dev"
"$ftc" data --bytes tests/data/corpus.txt -o "$work/corpus.bin" >/dev/null
"$ftc" compile models/tiny.ft --gpu h200 -o "$work/tiny.plan" > "$work/tiny-compile.log" 2>&1
for d in cpu $dev; do
    name=$([ $d = cpu ] && echo cpu || echo dev)
    timeout "$limit" "$ftc" run "$work/tiny.plan" --data "$work/corpus.bin" --steps 20 --seed 1 \
        --device "$d" > "$work/tiny-$name.log" 2>&1
done

# tiny.ft with each update inside backward (captured in the backward's CUDA graph, their
# step scalars set anew each step) against the updates after backward: the same weights.
for u in step backward; do
    "$ftc" compile models/tiny.ft --gpu h200 --micro-batch 8 --offload none --update $u \
        -o "$work/tiny-$u.plan" > "$work/tiny-$u-compile.log" 2>&1
    timeout "$limit" "$ftc" run "$work/tiny-$u.plan" --data "$work/corpus.bin" --steps 4 --seed 1 \
        --device "$dev" --save "$work/tiny-$u" > "$work/tiny-$u.log" 2>&1
done

# --- Qwen2-0.5B full and Qwen2-7B LoRA: ftc and transformers ----------------------------
# random token ids below 65536 (both vocabularies are larger), enough windows for a run
head -c $((2 * 2049 * 8 * (steps + 2))) /dev/urandom > "$work/random.u16"
"$ftc" data --u16 "$work/random.u16" -o "$work/random.bin" >/dev/null
lora_line='  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])'
: > "$work/workloads"
# name  model  config  global-batch  compile-flags  lora
while read -r name model config batch flags lora; do
    echo "$name" >> "$work/workloads"
    sed "s/^  batch *= *[0-9]*/  batch     = $batch/" "models/$model.ft" > "$work/$name.ft"
    if [ "$lora" = lora ]; then
        sed -i "s/^train {/train {\n$lora_line/" "$work/$name.ft"
    fi
    [ "$flags" = - ] && flags="" || flags=${flags//,/ }
    log "$name: compile"
    # shellcheck disable=SC2086
    if ! "$ftc" compile "$work/$name.ft" --gpu h200 $flags -o "$work/$name.plan" \
        > "$work/$name-compile.log" 2>&1; then
        log "$name: ftc compile failed: $(tail -3 "$work/$name-compile.log")"
        continue
    fi
    micro=$(awk '$1 == "micro_batch" {print $2}' "$work/$name.plan/plan")
    accum=$(awk '$1 == "accum" {print $2}' "$work/$name.plan/plan")
    remat=$(sed -n 's/^plan: .*recompute \([a-z]*\).*/\1/p' "$work/$name.plan/report.txt")
    ckpt=$([ "$remat" = keep ] && echo 0 || echo 1)
    largs=()
    [ "$lora" = lora ] && largs=(--lora-r 8 --lora-alpha 16 --lora-dropout 0.05 --lora-targets q_proj,v_proj)
    if [ $dry = 1 ]; then
        # the plan is real; the run is tiny.ft of the same kind on the CPU
        cp models/tiny.ft "$work/$name-tiny.ft"
        [ "$lora" = lora ] && sed -i "s/^train {/train {\n$lora_line/" "$work/$name-tiny.ft"
        "$ftc" compile "$work/$name-tiny.ft" -o "$work/$name-tiny.plan" >/dev/null 2>&1
        echo "$work/$name-tiny.plan" > "$work/$name.ran"
        log "$name: run (tiny.ft of the same kind on $dev)"
        timeout "$limit" "$ftc" run "$work/$name-tiny.plan" --data "$work/corpus.bin" --steps "$steps" \
            --device "$dev" --profile "$work/$name-profile.txt" > "$work/$name-ftc.log" 2>&1
        python3 tests/gpu/torch_step.py --dry-run --config "$config" --seq 2048 --micro "$micro" \
            --accum "$accum" --steps "$steps" --checkpointing "$ckpt" "${largs[@]}" \
            > "$work/$name-torch.json" 2> "$work/$name-torch.err"
    else
        # as a user runs it (each phase a CUDA graph); launch by launch; and profiled (launch
        # by launch, CUDA events between the kernels), three steps
        log "$name: ftc run (micro-batch $micro x $accum, recompute $remat)"
        timeout "$limit" "$ftc" run "$work/$name.plan" --data "$work/random.bin" --steps "$steps" \
            --device cuda > "$work/$name-ftc.log" 2>&1
        log "$name: ftc run --no-graphs"
        timeout "$limit" "$ftc" run "$work/$name.plan" --data "$work/random.bin" --steps "$steps" \
            --device cuda --no-graphs > "$work/$name-eager.log" 2>&1
        log "$name: ftc run --profile"
        timeout "$limit" "$ftc" run "$work/$name.plan" --data "$work/random.bin" --steps 3 \
            --device cuda --profile "$work/$name-profile.txt" > "$work/$name-profile.log" 2>&1
        log "$name: transformers (checkpointing $ckpt)"
        timeout "$limit" python3 tests/gpu/torch_step.py --config "$config" --seq 2048 --micro "$micro" \
            --accum "$accum" --steps "$steps" --checkpointing "$ckpt" "${largs[@]}" \
            > "$work/$name-torch.json" 2> "$work/$name-torch.err"
    fi
done <<EOF
qwen2-0.5b-full qwen2-0.5b tests/fixtures/qwen2-0.5b.config.json 8 - full
qwen2-7b-lora qwen2 tests/fixtures/qwen2-7b.config.json 4 --micro-batch,1 lora
EOF

# --- attention: torch's flash SDPA at Qwen2-7B's shapes (B 1, S 2048, 28 heads, 4 KV heads,
# head dim 128), beside the qwen2-7b-lora run's profile of ftc's kernels ----------------------
log "attention: torch SDPA"
sdpa_args=(--shape 1,2048,28,4,128)
[ $dry = 1 ] && sdpa_args+=(--dry-run)
timeout "$limit" python3 tests/gpu/torch_attention.py "${sdpa_args[@]}" > "$work/sdpa.json" 2> "$work/sdpa.err"

# --- the table ------------------------------------------------------------------------------
echo
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# what the driver said to each run: its version, the compute capability, where the kernels
# came from, the memory it reports after set-up against the plan's, cuBLASLt's algorithm a
# product
for f in "$work"/*-ftc.log; do
    grep -qE '^(device:|gemm:? |ftc run: note)' "$f" 2>/dev/null || continue
    echo "--- $(basename "$f" -ftc.log)"
    grep -E '^(device:|gemm:? |ftc run: note)' "$f"
done
python3 tests/gpu/report.py "$work" "$kdev" "$dev"
rc=$?
if [ $rc != 0 ]; then
    for f in "$work"/*.log "$work"/*.err; do
        [ -s "$f" ] && grep -qiE "error|FAIL|Traceback" "$f" &&
            { echo "--- $(basename "$f")"; grep -iE -m5 -A2 "error|FAIL|Traceback" "$f"; }
    done
fi
exit $rc
