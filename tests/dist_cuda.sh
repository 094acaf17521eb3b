#!/usr/bin/env bash
# The cuda backend as a rank of a job over the simulated driver and NCCL (test_dist_cuda.c),
# under mpirun with 2 ranks: training as the cpu backend does; a rank whose collectives
# stop completing, and one whose NCCL reports an error, each ending the job with the
# backend's error within seconds; NCCL's own memory checked before the arena. Skipped (77) without mpirun, libftc_mpi.so or NVRTC.
# usage: dist_cuda.sh TEST_DIST_CUDA SOURCE_DIR MPI_LIB
set -u
bin=$1 src=$2 lib=$3
command -v mpirun >/dev/null || { echo "skip: no mpirun"; exit 77; }
[ -e "$lib" ] || { echo "skip: no $lib"; exit 77; }
"$bin" "$src" probe || exit $?
# Open MPI as root (CI), no single-copy transport (containers forbid the ptrace it needs)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export FTC_MPI_LIB=$lib LSAN_OPTIONS="suppressions=$src/tests/lsan-mpi.supp:${LSAN_OPTIONS:-}"
# (the suppressions match a frame of Open MPI's only on a whole stack: Open MPI is built
# without frame pointers, which the fast unwinder follows)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail+1)); }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# mpirun, again once where LeakSanitizer itself failed at a rank's exit ("Tracer caught
# signal 11": its stop-the-world tracer, under load, beside Open MPI's threads) — a failure
# of the tool, not a leak, which it reports otherwise and which fails as ever.
mpi2() {
    mpirun --oversubscribe -np 2 "$@" > "$out" 2>&1
    local rc=$?
    if grep -q "LeakSanitizer has encountered a fatal error" "$out"; then
        echo "(LeakSanitizer failed at exit; run again: $*)"
        mpirun --oversubscribe -np 2 "$@" > "$out" 2>&1
        rc=$?
    fi
    return $rc
}
mpi2 "$bin" "$src" train && grep -q '^3 passed, 0 failed' "$out" &&
    ok "cuda-ranks-train-as-cpu-ranks" || bad cuda-ranks-train-as-cpu-ranks "$(tail -20 "$out")"
grep '^  ZeRO' "$out" | head -2
for mode in hang error; do
    t0=$(date +%s)
    timeout 60 mpirun --oversubscribe -np 2 "$bin" "$src" $mode > "$out" 2>&1
    rc=$? took=$(( $(date +%s) - t0 ))
    want="a collective did not complete in 3 s"
    [ $mode = error ] && want="NCCL: remote process exited or there was a network error"
    if [ $rc != 0 ] && [ $rc != 124 ] && [ $took -lt 30 ] && grep -q "error: $want (a rank died or hangs; the job ends)" "$out" &&
       grep -q "the fault was detected and NCCL aborted" "$out"; then
        ok "nccl-$mode-ends-the-job (${took}s)"
    else
        bad "nccl-$mode-ends-the-job" "exit $rc after ${took}s: $(grep -v '^--\|^$' "$out" | head -8)"
    fi
done
# NCCL's communicator taking more than the device had left: said before the arena, by name
mpi2 "$bin" "$src" memory; rc=$?
if [ $rc = 0 ] && [ "$(grep -c "error: .*NCCL's communicator took [0-9.]* MiB of it.*re-plan with --reserve larger by" "$out")" = 2 ]; then
    ok nccl-memory-checked-before-the-arena
else
    bad nccl-memory-checked-before-the-arena "exit $rc: $(grep -v '^--\|^$' "$out" | head -6)"
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
