#!/usr/bin/env bash
# Golden error tests: each X.ft must fail `ftc compile` with exit 1, print nothing on
# stdout, and print exactly X.err on stderr. Each X.cmd holds "RC ARGS..." for an
# ftc command line that must fail with exit RC and print exactly X.err.
# usage: run.sh FTC SOURCE_DIR [--update]
set -u
ftc=$1 src=$2 update=${3:-}
cd "$src" || exit 2
pass=0 fail=0
check() {   # name expected_rc args...
    local name=$1 want=$2; shift 2
    local out err rc
    out=$("$ftc" "$@" 2>/tmp/ftc-err.$$); rc=$?
    err=$(cat /tmp/ftc-err.$$); rm -f /tmp/ftc-err.$$
    if [ "$update" = --update ]; then printf '%s\n' "$err" > "tests/errors/$name.err"; fi
    local why=""
    [ "$rc" = "$want" ] || why="exit $rc, want $want"
    [ -z "$out" ] || why="$why; wrote to stdout"
    [ -f "tests/errors/$name.err" ] || why="$why; no tests/errors/$name.err"
    [ -f "tests/errors/$name.err" ] && [ "$err" != "$(cat "tests/errors/$name.err")" ] && why="$why; message differs:
$(diff <(printf '%s\n' "$err") "tests/errors/$name.err")"
    if [ -z "$why" ]; then echo "ok   $name"; pass=$((pass+1)); else echo "FAIL $name: $why"; fail=$((fail+1)); fi
}
for f in tests/errors/*.ft; do
    n=$(basename "$f" .ft)
    [ "$n" = ok ] && continue
    check "$n" 1 compile "$f"
done
for f in tests/errors/*.cmd; do
    n=$(basename "$f" .cmd)
    read -r rc args < "$f"
    # shellcheck disable=SC2086
    check "$n" "$rc" $args
done
# The base program itself compiles.
if "$ftc" compile tests/errors/ok.ft -o "${TMPDIR:-/tmp}/ftc-errors-ok.$$.plan" >/dev/null; then rm -rf "${TMPDIR:-/tmp}/ftc-errors-ok.$$.plan"; echo "ok   base"; pass=$((pass+1)); else echo "FAIL base"; fail=$((fail+1)); fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
