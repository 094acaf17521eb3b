# dist_lib.sh — what dist.sh and dist_jobs.sh share (sourced with $ftc and $src set): skipped
# (77) without mpirun or libftc_mpi.so; lib.sh; Open MPI's environment for a test; R, the ranks
# (FTC_DIST_RANKS, else 2); mpi N ARGS... (ftc on N ranks); close_losses and same_losses;
# plan OUT FLAGS... (tiny.ft compiled into $tmp/OUT.plan); and the corpus in $tmp/c.bin.
command -v mpirun >/dev/null || { echo "skip: no mpirun"; exit 77; }
[ -e "$(dirname "$ftc")/libftc_mpi.so" ] || { echo "skip: no libftc_mpi.so beside $ftc"; exit 77; }
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses
# Open MPI as root (CI), more ranks than this machine's cores, one BLAS thread a rank,
# no single-copy transport (containers forbid the ptrace it needs);
# Open MPI's own allocations that live to its exit are not ftc's leaks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export LSAN_OPTIONS="suppressions=$src/tests/lsan-mpi.supp:${LSAN_OPTIONS:-}"
# (the suppressions match a frame of Open MPI's only on a whole stack: Open MPI is built
# without frame pointers, which the fast unwinder follows)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
R=${FTC_DIST_RANKS:-2}
mpi() { local n=$1; shift; mpirun --oversubscribe -np "$n" "$ftc" "$@"; }
# close_losses A B N [TOL]: two runs' loss columns agree within TOL (1e-3), step by step,
# over N steps
close_losses() {
    paste <(losses < "$1") <(losses < "$2") |
        awk -v n="$3" -v tol="${4:-1e-3}" '{ d = $2 - $4; if (d < 0) d = -d; if (d > tol || $1 != $3) bad = 1; k++ }
                       END { exit bad || k != n }'
}
same_losses() { [ -n "$(losses < "$1")" ] && [ "$(losses < "$1")" = "$(losses < "$2")" ]; }
plan() { local out=$1; shift; "$ftc" compile models/tiny.ft -o "$tmp/$out.plan" "$@" > "$tmp/$out.compile" 2>&1; }

"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null || bad data "ftc data failed"
