# lib.sh — what the test scripts share, sourced from the source tree's root: a temporary
# directory ($tmp, removed at exit), the counts of passed and failed checks, `ok NAME` and
# `bad NAME WHY` (a line each), and `losses` (a run's step and loss columns from its output:
# times and rates vary between runs, losses must not).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail+1)); }
losses() { grep '^step ' | awk '{print $2, $4}'; }
