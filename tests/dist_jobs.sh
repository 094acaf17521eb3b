#!/usr/bin/env bash
# Data parallelism on the cpu backend over MPI, as a job: tiny.ft on 2 ranks (FTC_DIST_RANKS=4
# for 4) started the wrong ways, the stage the planner chooses, evaluation on ranks, and a
# rank killed or stopped ending the job with an error in bounded time. (The ranks'
# arithmetic: dist.sh.) Skipped (77) without mpirun or libftc_mpi.so.
# usage: dist_jobs.sh FTC SOURCE_DIR ST_DIFF
set -u
ftc=$1 src=$2 st_diff=$3
cd "$src" || exit 2
. tests/dist_lib.sh   # skips without MPI; lib.sh, R, mpi, plan, the corpus

# The launch: a plan of R ranks alone, or on another number of ranks; a plan of one on R.
plan z0 --ranks "$R" --zero 0 --micro-batch $((8 / R)) --remat keep --offload none || bad compile "$(cat "$tmp/z0.compile")"
"$ftc" run "$tmp/z0.plan" --data "$tmp/c.bin" --steps 1 > "$tmp/o" 2> "$tmp/e"
[ $? = 1 ] && grep -q "the plan is for $R ranks: start it with mpirun -np $R" "$tmp/e" && ok launch-needs-mpirun ||
    bad launch-needs-mpirun "$(cat "$tmp/e")"
mpi $((R + 1)) run "$tmp/z0.plan" --data "$tmp/c.bin" --steps 1 > "$tmp/o" 2> "$tmp/e"
[ $? != 0 ] && grep -q "mpirun started $((R + 1)) ranks, but the plan is for $R" "$tmp/e" && ok launch-rank-count ||
    bad launch-rank-count "$(cat "$tmp/e")"
plan one --micro-batch 4 --remat keep --offload none
mpi "$R" run "$tmp/one.plan" --data "$tmp/c.bin" --steps 1 > "$tmp/o" 2> "$tmp/e"
[ $? != 0 ] && grep -q "mpirun started $R ranks, but the plan is for 1" "$tmp/e" && ok launch-one-rank-plan ||
    bad launch-one-rank-plan "$(cat "$tmp/e")"

plan z1 --ranks "$R" --zero 1 --micro-batch $((8 / R)) --remat keep --offload none || bad compile-z1 "$(cat "$tmp/z1.compile")"
plan z2 --ranks "$R" --zero 2 --micro-batch $((8 / R)) --remat keep --offload none || bad compile-z2 "$(cat "$tmp/z2.compile")"
plan z3 --ranks "$R" --zero 3 --micro-batch $((8 / R)) --remat keep --offload none || bad compile-z3 "$(cat "$tmp/z3.compile")"
plan ref --micro-batch $((8 / R)) --remat keep --offload none

# Sharded checkpoints: a file a rank; the finished run's last step (6) resumed on as many
# ranks, the run ends with the weights and losses of one never stopped.
mpi "$R" run "$tmp/z3.plan" --data "$tmp/c.bin" --steps 8 --seed 7 --poison --save "$tmp/s3" > "$tmp/z3.out" 2>&1
mpi "$R" run "$tmp/z3.plan" --data "$tmp/c.bin" --steps 6 --seed 7 --save "$tmp/ck" --save-every 3 > "$tmp/ck1.out" 2>&1
mpi "$R" run "$tmp/z3.plan" --data "$tmp/c.bin" --steps 8 --seed 7 --poison --save "$tmp/ck" --resume "$tmp/ck" > "$tmp/ck2.out" 2>&1
n=$(ls "$tmp/ck/checkpoint-000006" 2>/dev/null | grep -c "^state-rank000[0-9][0-9]-of-0000$R.safetensors")
if [ "$n" = "$R" ] && cmp -s "$tmp/ck/model.safetensors" "$tmp/s3/model.safetensors" &&
   grep -q "^resuming from $tmp/ck/checkpoint-000006 " "$tmp/ck2.out" &&
   [ "$(losses < "$tmp/ck2.out")" = "$(losses < "$tmp/z3.out" | tail -n 2)" ]; then
    ok "sharded-checkpoint-resumes-bitwise ($n state files)"
else
    bad sharded-checkpoint-resumes-bitwise "$n state files; $(grep -i error "$tmp/ck2.out" | head -2)"
fi
plan z3b --ranks $((R * 2)) --zero 3 --micro-batch $((4 / R)) --remat keep --offload none
mpi $((R * 2)) run "$tmp/z3b.plan" --data "$tmp/c.bin" --steps 20 --resume "$tmp/ck" > "$tmp/o" 2> "$tmp/e"
grep -q "a checkpoint of a job of $R ranks; this one has $((R * 2)) (resume on as many ranks as saved it)" "$tmp/e" &&
    ok resume-on-another-rank-count || bad resume-on-another-rank-count "$(grep error "$tmp/e" | head -2)"

# The planner chooses the stage when none is given, and says what it shards.
"$ftc" compile models/tiny.ft --ranks "$R" -o "$tmp/auto.plan" > "$tmp/auto.out" 2>&1
grep -q '^plan: .*ZeRO-[0-3], buckets ' "$tmp/auto.out" && grep -q "x $R ranks, seq 64" "$tmp/auto.out" &&
    grep -q '^  collectives .* ms a step over nvlink' "$tmp/auto.out" && ok planner-chooses-the-stage ||
    bad planner-chooses-the-stage "$(grep '^plan' "$tmp/auto.out")"

# A rank that dies: the launcher ends the job, the survivors say why; a rank that hangs
# (stopped): the others' collectives time out and end the job. Within bounded time.
# kills NAME SIGNAL WANT: a long run, one rank signalled after 3 steps; the job must end
# within 30 s with WANT in its output.
kills() {
    local name=$1 sig=$2 want=$3 t0 pid
    mpi "$R" run "$tmp/z1.plan" --data "$tmp/c.bin" --steps 1000000 --comm-timeout 5 > "$tmp/k.out" 2>&1 &
    local job=$!
    for _ in $(seq 1 300); do grep -q '^step 3/' "$tmp/k.out" 2>/dev/null && break; sleep 0.1; done
    pid=$(pgrep -f "^$ftc run $tmp/z1.plan" | tail -n 1)
    t0=$(date +%s)
    [ -n "$pid" ] && kill -"$sig" "$pid"
    local waited=0
    while kill -0 "$job" 2>/dev/null && [ $waited -lt 300 ]; do sleep 0.1; waited=$((waited + 1)); done
    if kill -0 "$job" 2>/dev/null; then
        bad "$name" "the job still runs 30 s later"
        pkill -KILL -f "^$ftc run $tmp/z1.plan"
        wait "$job" 2>/dev/null
        return
    fi
    wait "$job"
    local rc=$? took=$(( $(date +%s) - t0 ))
    if [ -n "$pid" ] && [ $rc != 0 ] && grep -q "$want" "$tmp/k.out"; then
        ok "$name (ended in ${took}s, exit $rc)"
    else
        bad "$name" "exit $rc: $(grep -i 'error' "$tmp/k.out" | head -3)"
    fi
}
# Evaluation on a job: at ZeRO 0-2 every rank holds the whole parameters after a step and
# evaluates the same windows (rank 0 prints): the eval losses those of one rank trained
# alike, within 1e-3; a rank of ZeRO 3 holds shards and has no eval phase, which
# --eval-data names.
"$ftc" data --bytes <(head -c 4000 tests/data/corpus.txt) -o "$tmp/e.bin" >/dev/null
mpi "$R" run "$tmp/z2.plan" --data "$tmp/c.bin" --steps 4 --seed 7 --eval-data "$tmp/e.bin" \
    --eval-every 2 --eval-batches 2 > "$tmp/ez.out" 2> "$tmp/ez.err"
"$ftc" run "$tmp/ref.plan" --data "$tmp/c.bin" --steps 4 --seed 7 --eval-data "$tmp/e.bin" \
    --eval-every 2 --eval-batches 2 > "$tmp/eref.out" 2>&1
if [ "$(grep -c '^eval [0-9]' "$tmp/ez.out")" = 2 ] &&
   paste <(grep '^eval [0-9]' "$tmp/ez.out" | awk '{print $4}') <(grep '^eval [0-9]' "$tmp/eref.out" | awk '{print $4}') |
       awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-3 || $2 == "") bad = 1; k++ } END { exit bad || k != 2 }'; then
    ok "eval-on-ranks ($(grep '^eval [0-9]' "$tmp/ez.out" | awk '{print $4}' | tr '\n' ' '))"
else
    bad eval-on-ranks "$(grep '^eval' "$tmp/ez.out" "$tmp/eref.out"; tail -3 "$tmp/ez.err")"
fi
mpi "$R" run "$tmp/z3.plan" --data "$tmp/c.bin" --steps 1 --eval-data "$tmp/e.bin" > "$tmp/o" 2> "$tmp/e"
[ $? != 0 ] && grep -q "has no eval phase (a rank of ZeRO 3 holds shards of the parameters: compile it with --zero 2 or below to evaluate)" "$tmp/e" &&
    ok eval-zero-3-refused || bad eval-zero-3-refused "$(head -3 "$tmp/e")"

kills killed-rank-ends-the-job KILL "ftc run: rank [0-9]* of $R: stopped by SIGTERM from mpirun: the job was ended"
# The job stopped from outside (SIGTERM to mpirun, as scancel or a user would): each rank
# says it was stopped, and none that another failed.
mpi "$R" run "$tmp/z1.plan" --data "$tmp/c.bin" --steps 1000000 > "$tmp/k.out" 2>&1 &
job=$!
for _ in $(seq 1 300); do grep -q '^step 3/' "$tmp/k.out" 2>/dev/null && break; sleep 0.1; done
kill -TERM "$(pgrep -P $job mpirun)"   # (the job's mpirun, under the shell that runs mpi)
wait $job; rc=$?
pkill -KILL -f "^$ftc run $tmp/z1.plan" 2>/dev/null   # (nothing, unless the job outlived its mpirun)
n=$(grep -c "^ftc run: rank [0-9]* of $R: stopped by SIGTERM from mpirun: the job was ended, from outside or after another rank failed (whose error would come first)$" "$tmp/k.out")
if [ $rc != 0 ] && [ "$n" -ge 1 ] && ! grep -q "error:" "$tmp/k.out"; then
    ok "job-stopped-from-outside-said ($n ranks said so, exit $rc)"
else
    bad job-stopped-from-outside-said "exit $rc: $(grep -v '^step' "$tmp/k.out" | head -4)"
fi
kills stopped-rank-times-out STOP "no answer from the other ranks in 5 s (a rank died or hangs; the job ends)"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
