#!/usr/bin/env bash
# attention_graph writes the DOT graph of one causal attention head: every op of the head is a
# box, each weight an ellipse with its gradient's norm, and (when Graphviz is installed) an SVG;
# symbolic links planted under those two names are replaced, never followed.
# Usage: attention_graph_test.sh ATTENTION_GRAPH
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$1" --tokens 3 --d-model 5 --d-k 2 --out "$dir" > "$dir/log"
dot_file="$dir/attention_head.dot"
[ -s "$dot_file" ] || { echo "no attention_head.dot"; cat "$dir/log"; exit 1; }

# Q, K, V, Q K^T and P V are five matmuls; then K^T, the 1/sqrt(d_k) scale, the mask, the
# softmax, and the loss's pow and mean.
expect_ops() {
  local n
  n=$(grep -c "shape=box, .*label=\"$1\\\\n" "$dot_file" || true)
  [ "$n" = "$2" ] || { echo "expected $2 '$1' boxes, found $n"; cat "$dot_file"; exit 1; }
}
expect_ops matmul 5
for op in permute mul masked_fill softmax pow mean; do expect_ops "$op" 1; done
[ "$(grep -c 'shape=box' "$dot_file")" = 11 ] || { echo "expected 11 ops"; exit 1; }
for w in Wq Wk Wv; do
  grep -q "shape=ellipse.*label=\"$w\\\\n\\[5, 2\\] float32\\\\n|grad| = " "$dot_file" ||
    { echo "no leaf $w with its gradient norm"; cat "$dot_file"; exit 1; }
done
# The attention weights are [T, T] = [3, 3]; the loss's gradient norm is exactly 1.
grep -q 'label="softmax\\n\[3, 3\] float32' "$dot_file" || { echo "softmax is not [3, 3]"; exit 1; }
grep -q 'label="mean\\n\[\] float32\\n|grad| = 1"' "$dot_file" || { echo "loss gradient norm is not 1"; exit 1; }
[ "$(grep -c ' -> ' "$dot_file")" = 13 ] || { echo "expected 13 arrows"; cat "$dot_file"; exit 1; }

# A second run into the same --out replaces the files it wrote.
"$1" --tokens 4 --d-model 5 --d-k 2 --out "$dir" > "$dir/log2" || { echo "a second run failed"; cat "$dir/log2"; exit 1; }
grep -q 'label="softmax\\n\[4, 4\] float32' "$dot_file" || { echo "the second run did not replace the graph"; exit 1; }

if command -v dot > /dev/null; then
  head -c 200 "$dir/attention_head.svg" | grep -q "<svg\|<?xml" || { echo "no SVG from dot"; exit 1; }
else
  grep -q "Graphviz's dot is not installed" "$dir/log" || { echo "no hint about Graphviz"; exit 1; }
fi

# Symbolic links planted under both names it writes are replaced by the files, not followed.
# Graphviz's dot is played by a stand-in that, like dot, writes to the file after -o if given
# (through a link there, as dot would) and to standard output otherwise.
mkdir "$dir/bin" "$dir/links"
cat > "$dir/bin/dot" << 'EOF'
#!/bin/sh
svg='<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"></svg>'
out=
while [ $# -gt 0 ]; do
  [ "$1" = -o ] && out=$2
  shift
done
if [ -n "$out" ]; then printf '%s\n' "$svg" > "$out"; else printf '%s\n' "$svg"; fi
EOF
chmod +x "$dir/bin/dot"
printf 'precious bytes\n' > "$dir/precious"
ln -s "$dir/precious" "$dir/links/attention_head.dot"
ln -s "$dir/precious" "$dir/links/attention_head.svg"
PATH="$dir/bin:$PATH" "$1" --tokens 3 --d-model 5 --d-k 2 --out "$dir/links" > "$dir/log3" 2>&1 ||
  { echo "the run with planted links failed"; cat "$dir/log3"; exit 1; }
[ "$(cat "$dir/precious")" = "precious bytes" ] || { echo "a planted link was followed"; exit 1; }
for f in attention_head.dot attention_head.svg; do
  [ -f "$dir/links/$f" ] && [ ! -L "$dir/links/$f" ] || { echo "$f is not a regular file: $(ls -l "$dir/links")"; exit 1; }
done
grep -q "<svg" "$dir/links/attention_head.svg" || { echo "the SVG is not dot's output"; exit 1; }
echo "attention graph: 11 ops, 3 weights, 13 arrows; planted links replaced, not followed"
