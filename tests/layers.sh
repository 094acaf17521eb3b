#!/usr/bin/env bash
# The rooms' dependencies, as the README's layout table states them: every quoted
# #include of a room's sources is resolved to the file it names (beside the includer,
# else in a room's include directory, as CMake's include paths find it) and must lie in
# the room itself or in what the room may use. The runtime uses nothing of the compiler;
# the IR only the op vocabulary it shares with plans; the passes the IR and the
# vocabulary's library (ftc_ops: ops.def, ops.h, overlap.h); codegen the IR and the
# runtime (it writes plans, then reads them back and verifies them); the language part of
# frontend/ (lexer, parser, elaboration, import) the IR and the vocabulary; only the
# command-line room, frontend/cli, reaches passes, codegen and the runtime.
# usage: layers.sh SOURCE_DIR
set -u
cd "$1" || exit 2
pass=0 fail=0

declare -A may=(
    [runtime]="runtime/"
    [ir]="ir/ runtime/ops.h runtime/ops.def"
    [passes]="passes/ ir/ runtime/ops.h runtime/ops.def runtime/overlap.h"
    [codegen]="codegen/ ir/ runtime/"
    [frontend]="frontend/ ir/ runtime/ops.h runtime/ops.def"
    [frontend/cli]="frontend/ ir/ passes/ codegen/ runtime/"
)
declare -A inner=([frontend]="frontend/cli/*")   # a room inside a room: scanned as its own
search=(ir passes codegen runtime runtime/cpu frontend)

resolve() {   # includer, name -> the repository path it names, or nothing
    local dir=${1%/*} d p
    p=$(realpath -m --relative-to=. "$dir/$2")
    [ -f "$p" ] && { echo "$p"; return; }
    for d in "${search[@]}"; do
        [ -f "$d/$2" ] && { realpath -m --relative-to=. "$d/$2"; return; }
    done
}

allowed() {   # room, path
    local a
    for a in ${may[$1]}; do
        case $a in */) [[ $2 == "$a"* ]] && return 0 ;; *) [ "$2" = "$a" ] && return 0 ;; esac
    done
    return 1
}

for room in runtime ir passes codegen frontend frontend/cli; do
    bad=0 seen=0
    while IFS= read -r f; do
        while IFS= read -r name; do
            seen=$((seen+1))
            p=$(resolve "$f" "$name")
            if [ -z "$p" ]; then
                # generated in the build tree (the embedded templates, the lexer): the room's own
                continue
            fi
            if ! allowed "$room" "$p" || { [ "$room" = frontend ] && [[ $p == frontend/cli/* ]]; }; then
                echo "FAIL $room: $f includes $p"
                bad=$((bad+1))
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done < <(find "$room" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cuh' -o -name '*.def' -o -name '*.y' -o -name '*.l' \) \
             -not -path "${inner[$room]:-/none}")
    if [ "$bad" = 0 ] && [ "$seen" -gt 0 ]; then
        echo "ok   $room ($seen includes)"
        pass=$((pass+1))
    else
        [ "$seen" = 0 ] && echo "FAIL $room: no include found (the scan reads nothing)"
        fail=$((fail+1))
    fi
done

# Meaning that crosses a boundary travels as an enum, parsed once: a buffer's role
# (PlanRole: plan.c's plan_role_parse), the optimizer (elaborate.c's table, OptimizerKind;
# plan.c's reader, PlanOptimizer), the backend (RunDevice from --device in frontend/cli/run.c;
# Backend.host_addressable and .memory, never its name). No string comparison of any of
# them anywhere else.
strings() {   # what, pattern, the one file allowed
    local hits
    hits=$(grep -rnE "$2" runtime codegen frontend passes ir --include=*.c --include=*.h | grep -v "^$3:")
    if [ -z "$hits" ]; then echo "ok   $1 compared as enums only"; pass=$((pass+1)); else
        echo "FAIL $1 compared as strings: $hits"; fail=$((fail+1)); fi
}
strings roles 'strn?cmp\([^;]*role([^_s]|$)' runtime/plan.c
strings optimizers 'strn?cmp\([^;]*"(adamw|adamw8bit|sgd)"' runtime/plan.c
strings backends 'strn?cmp\([^;]*"(cpu|emu|cuda)"|->name, "(cpu|emu|cuda)"' frontend/cli/run.c

echo "layers: $pass passed, $fail failed"
[ "$fail" = 0 ]
