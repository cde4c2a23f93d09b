#!/usr/bin/env bash
# bench/gpt_train_step's report: --profile adds the step's time by family of work, every family
# there, the products' share above zero, and together no more than the step; without it there
# is no profile; the page faults per step are counted; bad counts are refused, named.
# Usage: gpt_train_step_test.sh GPT_TRAIN_STEP
set -euo pipefail
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "$1"; cat "$dir/out" "$dir/err" 2> /dev/null || true; exit 1; }

run=(--config tiny --steps 3 --warmup 1 --threads 2 --precision fp32)
"$bench" "${run[@]}" --profile > "$dir/out" 2> "$dir/err" || fail "--profile: exit status $?"
tail -n 1 "$dir/out" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
p = d["profile_ms"]
families = ["products", "elementwise", "normalisation", "softmax_attention", "rounding", "reductions_copies",
            "optimizer", "engine", "allocation", "pool"]
missing = [f for f in families + ["step", "outside"] if f not in p]
assert not missing, f"missing from profile_ms: {missing}"
assert all(p[f] >= 0 for f in families), p
covered = sum(p[f] for f in families)
assert p["products"] > 0 and p["normalisation"] > 0 and p["optimizer"] > 0 and p["engine"] > 0, p
step = p["step"]
assert covered <= step + 1e-3, f"the families add up to {covered} ms, more than the step, {step} ms"
assert abs(covered + p["outside"] - p["step"]) < 1e-2, p
assert d["page_faults_per_step_median"] >= 0, d
' || fail "--profile: the report is wrong"

"$bench" "${run[@]}" > "$dir/out" 2> "$dir/err" || fail "without --profile: exit status $?"
! grep -q profile_ms "$dir/out" || fail "without --profile, a profile was printed"

for bad in "--steps 0" "--warmup -1" "--threads 0"; do
  code=0
  # shellcheck disable=SC2086
  "$bench" --config tiny $bad > "$dir/out" 2> "$dir/err" || code=$?
  [ $code -eq 1 ] || fail "$bad: exit status $code, expected 1"
  grep -qF -- "--steps must be at least 1" "$dir/err" || fail "$bad: the message does not say what is wrong"
done
echo "gpt_train_step: profile and refusals as expected"
