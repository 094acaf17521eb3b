#!/usr/bin/env bash
# Checkpoints and exact resume: a run killed with SIGKILL at random points (during saves
# too) and resumed each time from its latest checkpoint ends with the same weights, bit
# for bit, and prints the same loss at every step, as a run never stopped. Full
# fine-tuning, LoRA with dropout and the optimizer state on the host, fp16 with its
# dynamic loss scale under a schedule and clipping, and AdamW8bit (8-bit moments).
# usage: resume.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses
losses() { grep -h '^step ' "$@" | awk '{print $2, $4}' | LC_ALL=C sort -u; }
# The step a saved safetensors file records in its metadata ("-" when it cannot be read).
st_step() { head -c 65536 "$1" 2>/dev/null | grep -ao '"step":"[0-9]*"' | head -1 | tr -dc 0-9 || echo -; }
# Whether the saved files of DIR are one set: the files people load (model and adapter)
# record one step, the one DIR/latest names where it exists, and no link leads nowhere.
set_whole() {
    local want="" f s
    [ -L "$1/latest" ] && want=$(readlink "$1/latest" | sed 's/^saved-0*//; s/-b$//')
    for f in "$1"/model.safetensors "$1"/adapter_model.safetensors "$1"/merged/model.safetensors; do
        [ -L "$f" ] && [ ! -e "$f" ] && return 1
        [ -e "$f" ] || continue
        s=$(st_step "$f")
        [ -z "$want" ] && want=$s
        [ "$s" = "$want" ] || return 1
    done
    return 0
}

"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null
sed 's/^train {/train {\n  lora(r = 4, alpha = 8, dropout = 0.1, targets = [q_proj, v_proj])/' models/tiny.ft > "$tmp/lora.ft"
"$ftc" compile models/tiny.ft -o "$tmp/full.plan" >/dev/null
"$ftc" compile "$tmp/lora.ft" --offload optimizer -o "$tmp/lora.plan" >/dev/null
# fp16 whose loss scale overflows, backs off and grows within the run, under a cosine
# schedule with warm-up and clipping: the scale, its growth tracker and the updates
# taken (the schedule's position) go into each checkpoint.
sed 's/precision = bf16/precision = fp16\n  grad_scaler(init_scale = 524288, growth_interval = 3)\n  lr_schedule = cosine\n  warmup_steps = 4\n  steps = 30\n  clip = 1.0/' \
    models/tiny.ft > "$tmp/fp16.ft"
"$ftc" compile "$tmp/fp16.ft" -o "$tmp/fp16.plan" >/dev/null
# AdamW8bit with weight decay: its moments' codes and absmaxes go into each checkpoint
# as raw bytes (u8 and f32).
sed 's/optimizer = adamw(.*/optimizer = adamw8bit(lr = 3e-3, weight_decay = 0.01)/' models/tiny.ft > "$tmp/adamw8bit.ft"
"$ftc" compile "$tmp/adamw8bit.ft" -o "$tmp/adamw8bit.plan" >/dev/null
RANDOM=7
for kind in full lora fp16 adamw8bit; do
    args=(run "$tmp/$kind.plan" --data "$tmp/c.bin" --steps 30 --save-every 3 --seed 5)
    [ "$kind" = lora ] && args+=(--merge)
    "$ftc" "${args[@]}" --save "$tmp/$kind-ref" > "$tmp/$kind-ref.out" || bad "$kind-reference" "failed"
    k=$tmp/$kind-k
    runs=0 kills=0 finished=0 torn=0
    while [ $runs -lt 60 ] && [ $finished = 0 ]; do
        resume=()
        ls -d "$k"/checkpoint-* >/dev/null 2>&1 && resume=(--resume "$k")
        out=$tmp/$kind-run$runs.out
        "$ftc" "${args[@]}" --save "$k" "${resume[@]}" > "$out" 2>&1 &
        pid=$!
        # Killed once it has printed 1 to 5 steps, 0 to 20 ms later: right after a step
        # that saves, that is inside the save. Progress does not depend on the speed of
        # the build (a sanitized one is many times slower).
        want=$((RANDOM % 5 + 1))
        while kill -0 $pid 2>/dev/null && [ "$(cat "$out" 2>/dev/null | grep -c '^step ')" -lt $want ]; do sleep 0.01; done
        sleep "0.0$((RANDOM % 3))"
        if kill -9 $pid 2>/dev/null; then
            kills=$((kills + 1))
            wait $pid 2>/dev/null
            set_whole "$k" || torn=$((torn + 1))
        else
            wait $pid && finished=1
        fi
        runs=$((runs + 1))
    done
    [ $finished = 1 ] && [ $kills -gt 0 ] && ok "$kind-killed-$kills-times-finished" ||
        bad "$kind-killed-and-resumed" "$runs runs, $kills kills, finished $finished"
    # after every kill the saved files were one set from one step (adapter and merged
    # model alike)
    [ $torn = 0 ] && ok "$kind-saved-set-whole-after-every-kill" ||
        bad "$kind-saved-set-whole-after-every-kill" "$torn of $kills kills left a torn set"
    outs=(model.safetensors)
    [ "$kind" = lora ] && outs=(adapter_model.safetensors merged/model.safetensors)
    for out in "${outs[@]}"; do
        cmp -s "$tmp/$kind-ref/$out" "$k/$out" && ok "$kind-${out//\//-}-bitwise" ||
            bad "$kind-${out//\//-}-bitwise" "the resumed run's $out differs"
    done
    # every loss any run printed is the reference's for that step
    extra=$(LC_ALL=C comm -13 <(losses "$tmp/$kind-ref.out") <(losses "$tmp"/$kind-run*.out))
    [ -z "$extra" ] && ok "$kind-losses-as-uninterrupted" || bad "$kind-losses-as-uninterrupted" "$extra"
    # the resumed run's last checkpoint is the uninterrupted run's, byte for byte (the
    # 8-bit state with it)
    last=$(ls -d "$tmp/$kind-ref"/checkpoint-* | tail -1)
    if cmp -s "$last/state.safetensors" "$k/${last##*/}/state.safetensors" &&
       { [ "$kind" != adamw8bit ] || head -c 65536 "$last/state.safetensors" | grep -aq '"adam_q8.decoder.0.wg":{"dtype":"U8","shape":\[2,11264\]'; }; then
        ok "$kind-last-checkpoint-bitwise (${last##*/})"
    else
        bad "$kind-last-checkpoint-bitwise" "$last differs"
    fi
    # at most --keep (2) checkpoints, no temporary left behind by the finished run
    n=$(ls -d "$k"/checkpoint-* | wc -l)
    [ "$n" -le 2 ] && ok "$kind-keeps-2-checkpoints" || bad "$kind-keeps-2-checkpoints" "$n"
done

# A run killed between a checkpoint and its pruning leaves one too many, and the run
# that resumes may be stopped before it saves one: it prunes before its first step.
k=$tmp/full-k
last=$(ls -d "$k"/checkpoint-* | tail -1)
cp -r "$last" "$k/checkpoint-000001"
"$ftc" run "$tmp/full.plan" --data "$tmp/c.bin" --steps $(( 10#${last##*-} + 1 )) --save-every 3 --seed 5 \
    --save "$k" --resume "$k" >/dev/null 2>&1 || bad "prune-on-start" "the resumed run failed"
n=$(ls -d "$k"/checkpoint-* | wc -l)
[ "$n" -eq 2 ] && [ ! -e "$k/checkpoint-000001" ] && ok "prune-on-start" || bad "prune-on-start" "$n checkpoints"

# A full disk during a save (a file size limit: writes fail with EFBIG): a clear error and
# exit 1, no temporary file left, and the checkpoint before it still resumes to the same
# weights as a run never stopped.
d=$tmp/full-disk
"$ftc" run "$tmp/full.plan" --data "$tmp/c.bin" --steps 30 --save-every 3 --seed 5 --save "$d" --steps 4 >/dev/null
( trap '' XFSZ; ulimit -f 300
  "$ftc" run "$tmp/full.plan" --data "$tmp/c.bin" --steps 30 --save-every 3 --seed 5 --save "$d" --resume "$d" ) \
    >/dev/null 2>"$tmp/e"
rc=$?
if [ $rc = 1 ] && grep -q "cannot write: File too large" "$tmp/e" && ! ls -A "$d" | grep -q '\.tmp\.' &&
   grep -q "^ftc run: error: $d holds what it held before this run (no save of this run completed)$" "$tmp/e"; then
    ok disk-full-clean-error
else
    bad disk-full-clean-error "exit $rc: $(cat "$tmp/e"); $(ls -a "$d")"
fi
# its report says how it ended and what the directory holds (run.jsonl's last line,
# run.html's head), and the run that resumes writes it afresh
if tail -n 1 "$d/run.jsonl" | grep -q '^{"error": ".*File too large.* holds what it held before this run (no save of this run completed)"}$' &&
   grep -q "The run ended with an error:</b> .*File too large" "$d/run.html"; then
    ok disk-full-said-in-the-report
else
    bad disk-full-said-in-the-report "$(tail -n 1 "$d/run.jsonl")"
fi
"$ftc" run "$tmp/full.plan" --data "$tmp/c.bin" --steps 30 --save-every 3 --seed 5 --save "$d" --resume "$d" >/dev/null &&
    ! grep -q '"error"' "$d/run.jsonl" && ! grep -q "ended with an error" "$d/run.html" &&
    cmp -s "$d/model.safetensors" "$tmp/full-ref/model.safetensors" && ok disk-full-then-resume ||
    bad disk-full-then-resume "the run after the full disk did not end as the reference"

# A disk that is full (ENOSPC): a tmpfs of 256 KiB, where mounting one is allowed (root
# with the capability; skipped elsewhere). The weights do not fit: a clear error naming
# it, no temporary left, what the directory holds said, in the report too.
m=$tmp/small-disk
mkdir -p "$m"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=256k tmpfs "$m" 2>/dev/null; then
    "$ftc" run "$tmp/full.plan" --data "$tmp/c.bin" --steps 1 --save "$m/out" > /dev/null 2> "$tmp/e"
    rc=$?
    if [ $rc = 1 ] && grep -q "cannot write: No space left on device" "$tmp/e" &&
       grep -q "^ftc run: error: $m/out holds what it held before this run (no save of this run completed)$" "$tmp/e" &&
       ! ls -A "$m/out" | grep -q '\.tmp\.' && tail -n 1 "$m/out/run.jsonl" | grep -q '^{"error": ".*No space left on device'; then
        ok enospc-on-a-small-tmpfs
    else
        bad enospc-on-a-small-tmpfs "exit $rc: $(cat "$tmp/e"); $(ls -a "$m/out")"
    fi
    umount "$m"
else
    echo "skip enospc-on-a-small-tmpfs: no tmpfs can be mounted here"
fi

# A save that fails half-way (the merged model does not fit under a file size limit, the
# adapter did) leaves the set before it whole: adapter and merged model from one step.
d=$tmp/half-saved
"$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 3 --seed 5 --save "$d" --merge >/dev/null
( trap '' XFSZ; ulimit -f 100
  "$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 6 --seed 5 --save "$d" --merge ) >/dev/null 2>"$tmp/e"
rc=$?
if [ $rc = 1 ] && set_whole "$d" && [ "$(st_step "$d/adapter_model.safetensors")" = 3 ] &&
   [ "$(st_step "$d/merged/model.safetensors")" = 3 ] && [ ! -e "$d/model.safetensors" ] &&
   ! ls -A "$d" | grep -q '\.tmp\.'; then
    ok failed-save-keeps-set-whole
else
    bad failed-save-keeps-set-whole "exit $rc: adapter step $(st_step "$d/adapter_model.safetensors"), model step $(st_step "$d/merged/model.safetensors"); $(ls -a "$d")"
fi

# Errors: nothing to resume from, a checkpoint of another plan, a finished run.
"$ftc" run "$tmp/full.plan" --data "$tmp/c.bin" --steps 3 --resume "$tmp" >/dev/null 2>"$tmp/e"
[ $? = 1 ] && grep -q "no checkpoint in it" "$tmp/e" && ok resume-nothing || bad resume-nothing "$(cat "$tmp/e")"
"$ftc" run "$tmp/lora.plan" --data "$tmp/c.bin" --steps 30 --resume "$tmp/full-k" >/dev/null 2>"$tmp/e"
[ $? = 1 ] && grep -q "the state of another plan" "$tmp/e" && ok resume-other-plan || bad resume-other-plan "$(cat "$tmp/e")"
"$ftc" run "$tmp/full.plan" --data "$tmp/c.bin" --steps 3 --resume "$tmp/full-k" >/dev/null 2>"$tmp/e"
[ $? = 1 ] && grep -q "leaves nothing to run" "$tmp/e" && ok resume-past-steps || bad resume-past-steps "$(cat "$tmp/e")"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
