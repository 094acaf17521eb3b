#!/usr/bin/env bash
# Function lengths: no function of the product over 150 lines, at most 10 over 80. A
# function runs from the first line of its signature to its closing brace; braces in
# strings, characters and comments are not counted. Prints the functions over 80 lines,
# longest first, then the verdict.
# usage: funclen.sh SOURCE_DIR [--list]
set -u
cd "$1" || exit 2
MAX=150 LONG=80 MAX_LONG=10

lengths() {   # file -> "LINES FILE:LINE NAME" per function
    awk -v F="$1" -v Q="'" '
    function strip(s,   out, i, c, n, q) {   # the line without literals and comments
        out = ""; n = length(s)
        for (i = 1; i <= n; i++) {
            c = substr(s, i, 1)
            if (incomment) { if (c == "*" && substr(s, i + 1, 1) == "/") { incomment = 0; i++ } continue }
            if (c == "/" && substr(s, i + 1, 1) == "/") break
            if (c == "/" && substr(s, i + 1, 1) == "*") { incomment = 1; i++; continue }
            if (c == "\"" || c == Q) {
                q = c
                for (i++; i <= n; i++) { c = substr(s, i, 1); if (c == "\\") { i++; continue } if (c == q) break }
                continue
            }
            out = out c
        }
        return out
    }
    macro { macro = /\\$/; next }                 # a #define continued
    /^[ \t]*#/ { macro = /\\$/; next }            # the preprocessor
    {
        s = strip($0)
        if (depth == 0 && s ~ /[^ \t]/) { if (head == "") start = NR; head = head " " s }
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (c == "{") {
                if (depth == 0) {
                    fn = head ~ /\)[^=]*\{/ && head !~ /^[ \t]*(typedef|struct|enum|union)[ \t{]/ && head !~ /=[ \t]*\{/
                    name = head; sub(/\(.*/, "", name); n = split(name, w, /[ \t*]+/); name = w[n]
                }
                depth++
            } else if (c == "}") {
                depth--
                if (depth == 0) { if (fn) print NR - start + 1, F ":" start, name; fn = 0; head = "" }
            } else if (c == ";" && depth == 0) head = ""
        }
    }' "$1"
}

all=$(find frontend ir passes codegen runtime -type f \( -name '*.c' -o -name '*.cuh' -o -name '*.y' \) | sort |
      while read -r f; do lengths "$f"; done | sort -rn)
over=$(awk -v m=$MAX '$1 > m' <<<"$all")
long=$(awk -v m=$LONG '$1 > m' <<<"$all")
nlong=$(grep -c . <<<"$long")
[ "${2:-}" = --list ] && echo "$all" && exit 0
echo "functions over $LONG lines: $nlong (at most $MAX_LONG)"
[ -n "$long" ] && sed 's/^/  /' <<<"$long"
fail=0
[ -n "$over" ] && { echo "FAIL functions over $MAX lines:"; sed 's/^/  /' <<<"$over"; fail=1; }
[ "$nlong" -gt $MAX_LONG ] && { echo "FAIL $nlong functions over $LONG lines, more than $MAX_LONG"; fail=1; }
[ $fail = 0 ] && echo "funclen: ok"
exit $fail
