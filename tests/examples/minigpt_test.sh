#!/usr/bin/env bash
# minigpt end to end at a tiny size: train on a small text, then sample and evaluate from the
# checkpoint it wrote, and check what each prints and writes.
# Usage: minigpt_test.sh MINIGPT
set -euo pipefail
minigpt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# A corpus with English and Chinese, repeated so the validation split holds whole windows.
for i in $(seq 1 40); do printf 'the cat sat on the mat. 床前明月光，疑是地上霜。\n'; done > "$dir/corpus.txt"

"$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/out" --steps 60 --eval-interval 30 --eval-batches 2 \
  --batch 8 --block 16 --layers 1 --heads 2 --embd 16 --sample-tokens 40 > "$dir/train.log"
for f in minigpt.safetensors minigpt.train.safetensors loss.png attention_layer0_head0.png attention_layer0_head1.png; do
  [ -s "$dir/out/$f" ] || { echo "train did not write $f"; cat "$dir/train.log"; exit 1; }
done
grep -q "final validation loss" "$dir/train.log" || { echo "no validation loss reported"; exit 1; }
# Its throughput line: 60 steps of 8 windows of 16 tokens in the seconds it names.
line=$(grep -E '^trained 60 steps in [0-9:]+ \([0-9.]+ s, [0-9]+ tokens a second' "$dir/train.log") ||
  { echo "no throughput line"; cat "$dir/train.log"; exit 1; }
read -r seconds rate < <(sed -E 's/.*\(([0-9.]+) s, ([0-9]+) tokens a second.*/\1 \2/' <<< "$line")
# The seconds are shown to 0.01 s, so the rate lies between 7680 / (s + 0.005) and 7680 / (s - 0.005).
/usr/bin/env awk -v s="$seconds" -v r="$rate" 'BEGIN { t = 60 * 8 * 16; exit !(r >= t / (s + 0.005) - 1 && (s < 0.01 || r <= t / (s - 0.005) + 1)) }' ||
  { echo "tokens a second $rate does not match 7680 tokens in $seconds s: $line"; exit 1; }

# --resume continues from the last checkpoint (step 60) to the new --steps.
"$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/out" --steps 70 --eval-interval 30 --eval-batches 2 \
  --batch 8 --block 16 --layers 1 --heads 2 --embd 16 --sample-tokens 10 --resume > "$dir/resume.log"
grep -q "resuming from step 60" "$dir/resume.log" || { echo "resume did not start at step 60"; cat "$dir/resume.log"; exit 1; }
grep -q "step    70: train loss" "$dir/resume.log" || { echo "resume did not reach step 70"; cat "$dir/resume.log"; exit 1; }

out=$("$minigpt" sample --checkpoint "$dir/out/minigpt.safetensors" --prompt "the " --tokens 20)
[ "${out:0:4}" = "the " ] || { echo "sample does not start with its prompt: $out"; exit 1; }

# eval prints 'loss: <value>' with at least 6 significant digits, in f32 and f64, and the two
# agree to float32 precision; its perplexity line is e^loss.
"$minigpt" eval --checkpoint "$dir/out/minigpt.safetensors" --file "$dir/corpus.txt" --precision fp32 > "$dir/eval.log"
l32=$(grep '^loss: ' "$dir/eval.log")
"$minigpt" eval --checkpoint "$dir/out/minigpt.safetensors" --file "$dir/corpus.txt" --dtype f64 > "$dir/eval64.log"
l64=$(grep '^loss: ' "$dir/eval64.log")
# f64 says why it takes no bf16 path, not that --precision asked for fp32 (nobody did).
grep -q '^precision: f64 OpenBLAS (.*): --dtype f64 never autocasts$' "$dir/eval64.log" ||
  { echo "eval --dtype f64 gives the wrong reason:"; cat "$dir/eval64.log"; exit 1; }
p32=$(grep '^perplexity: ' "$dir/eval.log" | cut -d' ' -f2)
/usr/bin/env awk -v l="${l32#loss: }" -v p="$p32" 'BEGIN { d = exp(l) / p - 1; if (d < 0) d = -d; exit !(d < 1e-8) }' ||
  { echo "eval's perplexity $p32 is not e^${l32#loss: }"; exit 1; }
# train prints each validation loss with its perplexity, e^loss to the two decimals shown.
grep -o 'validation loss [0-9.]*, perplexity [0-9.]*' "$dir/train.log" | while read -r _ _ l _ p; do
  /usr/bin/env awk -v l="${l%,}" -v p="$p" 'BEGIN { d = exp(l) - p; if (d < 0) d = -d; exit !(d <= 0.006 * exp(l) / 100 + 0.005) }' ||
    { echo "train's perplexity $p is not e^${l%,}"; exit 1; }
done
grep -q 'validation loss [0-9.]*, perplexity' "$dir/train.log" || { echo "train prints no perplexity"; exit 1; }
[[ $l32 =~ ^loss:\ [0-9]+\.[0-9]{5,} ]] || { echo "bad eval line: $l32"; exit 1; }
/usr/bin/env awk -v a="${l32#loss: }" -v b="${l64#loss: }" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-4) }' ||
  { echo "f32 and f64 losses differ: $l32 vs $l64"; exit 1; }

# --precision: the run above trained with --precision auto; its checkpoint is float32 and loads in
# either mode. Where bf16 runs, its loss is within bf16's tolerance of float64's (products with
# 8-bit mantissas: about 2^-8 of the logits) and not float32's to the digit; where it cannot,
# --precision bf16 is refused before any work, with the reason.
if "$minigpt" eval --checkpoint "$dir/out/minigpt.safetensors" --file "$dir/corpus.txt" --precision bf16 \
    > "$dir/eval16.log" 2> "$dir/err16"; then
  grep -q '^precision: matmul: bf16 on ' "$dir/eval16.log" || { echo "eval did not say it ran bf16"; cat "$dir/eval16.log"; exit 1; }
  l16=$(grep '^loss: ' "$dir/eval16.log")
  /usr/bin/env awk -v a="${l16#loss: }" -v b="${l64#loss: }" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.02 && d > 1e-6) }' ||
    { echo "bf16 loss not within bf16's tolerance of f64's (or identical to it): $l16 vs $l64"; exit 1; }
  grep -q '^precision: fp32 OpenBLAS' "$dir/eval.log" || { echo "eval --precision fp32 did not say so"; exit 1; }
else
  [ $? -eq 2 ] && grep -q -- '--precision bf16: ' "$dir/err16" || { echo "bf16 refusal unclear:"; cat "$dir/err16"; exit 1; }
fi
if "$minigpt" eval --checkpoint "$dir/out/minigpt.safetensors" --text abc --precision fp16 2> "$dir/err"; then
  echo "--precision fp16 accepted"; exit 1
fi
grep -q -- "--precision must be fp32, bf16 or auto, got 'fp16'" "$dir/err" || { echo "bad --precision message:"; cat "$dir/err"; exit 1; }

# The reference kernels (--kernels reference) give the same float64 loss to 1e-12, relative.
r64=$("$minigpt" eval --checkpoint "$dir/out/minigpt.safetensors" --file "$dir/corpus.txt" --dtype f64 \
  --kernels reference | grep '^loss: ')
/usr/bin/env awk -v a="${l64#loss: }" -v b="${r64#loss: }" \
  'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d <= 1e-12) }' ||
  { echo "fast and reference f64 losses differ: $l64 vs $r64"; exit 1; }
# and train and sample run on them.
"$minigpt" train --corpus "$dir/corpus.txt" --out "$dir/ref" --steps 4 --eval-interval 4 --eval-batches 1 \
  --batch 2 --block 16 --layers 1 --heads 2 --embd 16 --sample-tokens 5 --kernels reference > "$dir/ref.log"
grep -q "^kernels: reference" "$dir/ref.log" || { echo "train did not report the reference kernels"; exit 1; }
out=$("$minigpt" sample --checkpoint "$dir/ref/minigpt.safetensors" --prompt "the " --tokens 5 --kernels reference)
[ "${out:0:4}" = "the " ] || { echo "reference sample does not start with its prompt: $out"; exit 1; }
if "$minigpt" eval --checkpoint "$dir/out/minigpt.safetensors" --text abc --kernels slow 2> "$dir/err"; then
  echo "--kernels slow accepted"; exit 1
fi
grep -q "kernels" "$dir/err" || { echo "unclear --kernels error: $(cat "$dir/err")"; exit 1; }

# A float64 checkpoint with its tied head stored (as PyTorch's state_dict has it) samples: the
# head equals wte as stored, not wte rounded to float32.
/usr/bin/python3 - "$dir/out/minigpt.safetensors" "$dir/f64.safetensors" <<'PY'
import array, json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
body = data[8 + n:]
meta = header.pop("__metadata__")
tensors = {}
for name, info in header.items():
    assert info["dtype"] == "F32", info
    begin, end = info["data_offsets"]
    values = array.array("f")
    values.frombytes(body[begin:end])
    # Nudged off the float32 grid, as weights trained in float64 are.
    tensors[name] = (info["shape"], array.array("d", (v * (1 + 1e-9) for v in values)).tobytes())
tensors["lm_head.weight"] = tensors["transformer.wte.weight"]
out_header, blobs, offset = {"__metadata__": meta}, [], 0
for name, (shape, blob) in tensors.items():
    out_header[name] = {"dtype": "F64", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
    blobs.append(blob)
    offset += len(blob)
text = json.dumps(out_header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
PY
out=$("$minigpt" sample --checkpoint "$dir/f64.safetensors" --prompt "the " --tokens 10) ||
  { echo "the float64 checkpoint with a tied head was refused"; exit 1; }
[ "${out:0:4}" = "the " ] || { echo "float64 sample does not start with its prompt: $out"; exit 1; }
# Temperature inf with top-k samples uniformly among the top k (text/generate.cpp has the
# statistics); here: it runs, and the same seed gives the same text.
a=$("$minigpt" sample --checkpoint "$dir/out/minigpt.safetensors" --temperature inf --top-k 5 --tokens 30 --seed 4)
b=$("$minigpt" sample --checkpoint "$dir/out/minigpt.safetensors" --temperature inf --top-k 5 --tokens 30 --seed 4)
[ "$a" = "$b" ] && [ ${#a} -ge 30 ] || { echo "temperature inf: '$a' vs '$b'"; exit 1; }

# Errors are clear and non-zero.
if "$minigpt" sample --checkpoint "$dir/missing.safetensors" 2> "$dir/err"; then echo "missing checkpoint accepted"; exit 1; fi
grep -q -- "--checkpoint $dir/missing.safetensors: no such file" "$dir/err" || { echo "unclear error: $(cat "$dir/err")"; exit 1; }
echo "minigpt: train, sample and eval all work ($l32 / $l64)"
