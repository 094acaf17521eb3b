#!/usr/bin/env bash
# memory.html and a run's run.html in headless Chromium: each renders with no console
# output (so no errors) and asks for nothing over the network (one self-contained file:
# nothing to fetch, and the run has no route out anyway); memory.html draws one rectangle
# per buffer that owns bytes and yields a screenshot, run.html a point per step on each
# curve. Skips (77) where Chromium is missing.
# usage: html.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "skip: no chromium"; exit 77; }
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses

"$ftc" compile models/tiny.ft -o "$tmp/tiny.plan" >/dev/null || { echo "FAIL compile"; exit 1; }
html="$tmp/tiny.plan/memory.html"

# Self-contained: no script or style or image fetched, no URL but the SVG namespace.
if grep -qiE '(src|href)=|url\(|@import|fetch\(|XMLHttpRequest|<link|<iframe' "$html" ||
   [ -n "$(grep -oE 'https?://[^"]*' "$html" | grep -v '^http://www.w3.org/2000/svg$')" ]; then
    bad self-contained "the page refers to something outside itself"
else
    ok self-contained
fi

run() {   # chromium headless, no network (proxy to a closed port), logs to stderr
    HOME="$tmp" timeout 120 "$browser" --headless --no-sandbox --disable-gpu \
        --no-first-run --disable-extensions --disable-background-networking \
        --proxy-server=127.0.0.1:9 --proxy-bypass-list='<-loopback>' \
        --enable-logging=stderr --v=0 --window-size=1300,1000 "$@" 2>"$tmp/log"
}
run --dump-dom "file://$html" > "$tmp/dom.html"
[ -s "$tmp/dom.html" ] && ok renders || bad renders "no DOM"
if grep -E 'CONSOLE|Uncaught|net::ERR' "$tmp/log" >/dev/null; then
    bad no-console-errors "$(grep -E 'CONSOLE|Uncaught|net::ERR' "$tmp/log" | head -3)"
else
    ok no-console-errors
fi
# One rectangle per buffer owning bytes (a view owns none; the host arena is empty here).
want=$(grep -c '"bytes": [1-9]' "$tmp/tiny.plan/memory.json")
got=$(grep -o 'class="buf"' "$tmp/dom.html" | wc -l)
[ "$want" -gt 0 ] && [ "$got" = "$want" ] && ok "one-rect-per-buffer ($got)" || bad one-rect-per-buffer "$got rects, $want buffers"
run --screenshot="$tmp/shot.png" "file://$html" >/dev/null
if [ "$(head -c 8 "$tmp/shot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
   [ "$(stat -c %s "$tmp/shot.png")" -gt 10000 ]; then
    ok screenshot
    [ -n "${FTC_KEEP_SHOT:-}" ] && cp "$tmp/shot.png" "$FTC_KEEP_SHOT"
else
    bad screenshot "no PNG"
fi

# run.html, the run report's page: self-contained as well, no console errors, a point a
# step on the loss, throughput, learning-rate and gradient-norm curves, an eval point
# after every --eval-every steps.
"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/c.bin" >/dev/null
head -c 3000 tests/data/corpus.txt > "$tmp/e.txt"
"$ftc" data --bytes "$tmp/e.txt" -o "$tmp/e.bin" >/dev/null
"$ftc" run "$tmp/tiny.plan" --data "$tmp/c.bin" --steps 12 --eval-data "$tmp/e.bin" --eval-every 4 \
    --report "$tmp/report" >/dev/null 2>&1 || bad run-report "ftc run failed"
page="$tmp/report/run.html"
if [ -s "$page" ] && ! grep -qiE '(src|href)=|url\(|@import|fetch\(|XMLHttpRequest|<link|<iframe|<script' "$page" &&
   [ -z "$(grep -oE 'https?://[^"]*' "$page" | grep -v '^http://www.w3.org/2000/svg$')" ]; then
    ok run-html-self-contained
else
    bad run-html-self-contained "the page refers to something outside itself"
fi
run --dump-dom "file://$page" > "$tmp/run-dom.html"
if [ -s "$tmp/run-dom.html" ] && ! grep -E 'CONSOLE|Uncaught|net::ERR' "$tmp/log" >/dev/null; then
    ok run-html-renders-no-console-errors
else
    bad run-html-renders-no-console-errors "$(grep -E 'CONSOLE|Uncaught|net::ERR' "$tmp/log" | head -3)"
fi
counts=""
for cls in pt tp lr gn ev; do counts="$counts $cls=$(grep -o "class=\"$cls\" data-step" "$tmp/run-dom.html" | wc -l)"; done
steps=$(grep -o 'class="pt" data-step="[0-9]*"' "$tmp/run-dom.html" | grep -o '[0-9]*' | tr '\n' ' ')
[ "$counts" = " pt=12 tp=12 lr=12 gn=12 ev=3" ] && [ "$steps" = "1 2 3 4 5 6 7 8 9 10 11 12 " ] &&
    grep -q 'planned' "$tmp/run-dom.html" && grep -q 'measured: ' "$tmp/run-dom.html" &&
    ok "run-html-plots-every-step ($counts)" || bad run-html-plots-every-step "$counts / $steps"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
