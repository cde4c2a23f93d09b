#!/usr/bin/env bash
# classifier trains to its held-out accuracy (its default --min-accuracy, 0.95, in 12 epochs); a run stopped after some epochs and started again
# with the same --state file prints exactly the epochs the unbroken run prints (model, optimizer
# and batch order all restored); a state file it cannot read is refused with status 2 and kept.
# Usage: classifier_test.sh CLASSIFIER
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
classifier=$1

"$classifier" > "$dir/unbroken" || { echo "the unbroken run failed"; cat "$dir/unbroken"; exit 1; }
"$classifier" --epochs 5 --state "$dir/run.safetensors" --min-accuracy 0 > "$dir/first"
"$classifier" --state "$dir/run.safetensors" > "$dir/second"
grep -qx "resumed from $dir/run.safetensors at epoch 5" "$dir/second" || { echo "no resume line"; cat "$dir/second"; exit 1; }
# Epoch lines only: the held-out accuracy after each one, to the printed digits.
cat "$dir/first" "$dir/second" | grep '^epoch' > "$dir/pieced"
grep '^epoch' "$dir/unbroken" > "$dir/whole"
[ "$(wc -l < "$dir/whole")" = 12 ] || { echo "expected 12 epochs"; cat "$dir/unbroken"; exit 1; }
diff "$dir/whole" "$dir/pieced" || { echo "the resumed run differs from the unbroken one"; exit 1; }

# A state that is no checkpoint: status 2, a line naming the file, and the file left as it was.
printf 'not a checkpoint' > "$dir/bad.safetensors"
status=0
"$classifier" --state "$dir/bad.safetensors" > "$dir/out" 2> "$dir/err" || status=$?
[ "$status" = 2 ] || { echo "expected status 2, got $status"; cat "$dir/err"; exit 1; }
grep -q "classifier: cannot resume: $dir/bad.safetensors" "$dir/err" || { echo "no refusal"; cat "$dir/err"; exit 1; }
[ "$(cat "$dir/bad.safetensors")" = "not a checkpoint" ] || { echo "the bad file was changed"; exit 1; }
echo "classifier: trains, and resumes exactly"
