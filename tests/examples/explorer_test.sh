#!/usr/bin/env bash
# minigpt explore writes one self-contained HTML page with a panel per layer and head. In
# headless Chromium (Debian's chromium; the browser part is skipped, exit 77, without it) the
# page draws every panel, and a pointer event on a character makes it the query of every panel:
# the shown weights then sum to 1 over that character and those before it, and are 0 after it
# (the model is causal).
# Usage: explorer_test.sh MINIGPT
set -euo pipefail
minigpt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for i in $(seq 1 40); do printf 'the cat sat on the mat. <b>&"\n'; done > "$dir/corpus.txt"
"$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/out" --steps 20 --eval-interval 20 --eval-batches 1 \
  --batch 4 --block 16 --layers 2 --heads 3 --embd 12 --sample-tokens 5 > "$dir/train.log"
"$minigpt" explore --checkpoint "$dir/out/minigpt.safetensors" --prompt 'the <b>&"mat' --out "$dir/page" \
  > "$dir/explore.log"
html="$dir/page/attention.html"
grep -q "2 layers x 3 heads over 12 characters" "$dir/explore.log" || { cat "$dir/explore.log"; exit 1; }

# Self-contained: no address to fetch, no external script or style.
if grep -Eq 'https?://|src=|<link' "$html"; then echo "the page refers to something outside itself"; exit 1; fi
grep -q 'id="attention-data"' "$html" || { echo "no embedded data"; exit 1; }
# The prompt's '<' is escaped inside the JSON, so it cannot end the script element.
grep -qF '"\u003c"' "$html" || { echo "'<' in the prompt is not escaped in the data"; exit 1; }

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "static checks passed; Chromium is not installed, so the page was not rendered"
  exit 77
fi
query=4
# No sandbox (it cannot start as root or in most containers), no GPU, and none of the
# connections Chromium makes on its own (updates, sync, first-run pages): the page needs no
# network, and on a machine without one they only fill the log with errors. A fresh profile,
# removed with the rest, so no earlier run's state is read.
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$dir/chromium-profile" --dump-dom "file://$html#query=$query" \
  > "$dir/dom.html" 2> "$dir/chromium.log" || { echo "chromium failed"; tail "$dir/chromium.log"; exit 1; }

panels=$(grep -o 'class="panel"' "$dir/dom.html" | wc -l)
[ "$panels" = 6 ] || { echo "expected 6 panels (2 layers x 3 heads), found $panels"; exit 1; }
queried=$(grep -o "class=\"panel\" id=\"panel-[0-9]-[0-9]\" data-layer=\"[0-9]\" data-head=\"[0-9]\" data-query=\"$query\"" \
  "$dir/dom.html" | wc -l)
[ "$queried" = 6 ] || { echo "the pointer event reached $queried of 6 panels"; exit 1; }
grep -q "class=\"tok query\" data-i=\"$query\"" "$dir/dom.html" || { echo "the pointed-at character is not marked"; exit 1; }

# Per panel: the weights of keys 0..query sum to 1, later keys have weight 0.
grep -o 'id="panel-[0-9]-[0-9]"\|data-j="[0-9]*" data-weight="[0-9.e-]*"' "$dir/dom.html" |
  awk -v q="$query" '
    /^id=/ { if (name != "") check(); name = $0; sum = 0; later = 0; n = 0; next }
    { split($0, a, "\""); j = a[2] + 0; w = a[4] + 0; n++; if (j <= q) sum += w; else later += w }
    function check() {
      if (n != 12) { print name ": " n " weights, expected 12"; bad = 1 }
      if (sum < 0.9999 || sum > 1.0001) { print name ": weights up to the query sum to " sum; bad = 1 }
      if (later != 0) { print name ": weight " later " on later characters"; bad = 1 }
    }
    END { check(); exit bad }' || exit 1
echo "explorer: 6 panels, each answering the pointer with causal weights summing to 1"
