#!/usr/bin/env bash
# times.sh LOG [LOG2]: each test's time from ctest's output (LOG: the first pass; LOG2: the
# sanitized one, where it ran), the slowest first, and each pass's total, so that growth
# shows at the end of every `bash setup.sh test`.
set -u
[ $# -ge 1 ] && [ -r "$1" ] || { echo "usage: times.sh LOG [LOG2]" >&2; exit 2; }
awk '
    # "12/45 Test #13: kernels ..........   Passed   32.20 sec"
    /^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: / {
        name = $0; sub(/^.*Test +#[0-9]+: /, "", name); sub(/ .*/, "", name)
        secs = $0; sub(/ sec.*$/, "", secs); sub(/^.* /, "", secs)
        if (FILENAME == ARGV[1]) { first[name] = secs; order[++n] = name } else second[name] = secs
    }
    END {
        # the slowest first (a plain insertion sort: a few dozen tests)
        for (i = 2; i <= n; i++)
            for (j = i; j > 1 && first[order[j]] + 0 > first[order[j - 1]] + 0; j--) {
                t = order[j]; order[j] = order[j - 1]; order[j - 1] = t
            }
        printf "%-22s %10s %10s\n", "test", "first (s)", "sanitized"
        for (i = 1; i <= n; i++) {
            s = order[i] in second ? sprintf("%10.1f", second[order[i]]) : sprintf("%10s", "-")
            printf "%-22s %10.1f %s\n", order[i], first[order[i]], s
            a += first[order[i]]; b += second[order[i]]
        }
        printf "%-22s %10.1f %10.1f   (test time; ctest runs two at once)\n", "total", a, b
    }' "$@"
