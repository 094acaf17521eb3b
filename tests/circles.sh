#!/usr/bin/env bash
# No circle of files: the product's object files, each file's calls (its undefined symbols)
# resolved to the file that defines them, must form no cycle. Read with nm from the build,
# so every call counts, a static one inside a file none (a file calls itself freely).
# usage: circles.sh BUILD_DIR
set -u
cd "$1/CMakeFiles" || exit 2
objs=$(find ftc.dir ftc_ops.dir ftc_ir.dir ftc_passes.dir ftc_frontend.dir ftc_driver.dir ftc_codegen.dir \
            ftc_runtime.dir -name '*.o' 2>/dev/null | sort)
[ -n "$objs" ] || { echo "FAIL circles: no object files under $1 (build first)"; exit 1; }
for o in $objs; do
    f=${o#*.dir/}; f=${f%.o}
    nm "$o" | awk -v f="$f" '$1 == "U" { print "U", f, $2 } NF == 3 && $2 ~ /^[TDBR]$/ { print "D", f, $3 }'
done | awk '
    $1 == "D" { def[$3] = $2; next }
    { use[++n] = $2 SUBSEP $3 }
    END {
        for (i = 1; i <= n; i++) {
            split(use[i], u, SUBSEP)
            if ((u[2] in def) && def[u[2]] != u[1] && !((u[1], def[u[2]]) in edge)) {
                edge[u[1], def[u[2]]] = u[2]
                file[u[1]]; file[def[u[2]]]
            }
        }
        for (a in file) for (b in file) if ((a, b) in edge) reach[a, b] = 1
        for (k in file) for (a in file) if ((a, k) in reach) for (b in file) if ((k, b) in reach) reach[a, b] = 1
        bad = 0
        for (a in file) for (b in file)
            if (a < b && ((a, b) in reach) && ((b, a) in reach)) {
                printf "FAIL circle: %s and %s reach each other", a, b
                if ((a, b) in edge) printf " (%s calls %s", a, edge[a, b]
                if ((b, a) in edge) printf "; %s calls %s", b, edge[b, a]
                printf ")\n"; bad++
            }
        nf = 0; for (a in file) nf++
        if (!bad) printf "ok   no circle among %d files\n", nf
        exit bad > 0
    }'
