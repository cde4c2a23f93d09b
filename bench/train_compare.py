#!/usr/bin/python3
"""train_compare: a whole Mini-GPT training run in attograd against the same run in PyTorch.

Where compare_pytorch.py times single steps, this runs `minigpt train` end to end (the
benchmark's small GPT, which is minigpt's default model: block 64, 4 layers, 4 heads, width
128, batches of 16) for --steps steps, and the same training written in PyTorch, in each
precision asked for:

    fp32   float32 everywhere
    bf16   attograd's --precision bf16 (matrix products with bf16 inputs and float32 sums),
           against PyTorch with model and loss under torch.autocast("cpu", torch.bfloat16)

Both sides read the same text: the files minigpt reads by default (the English fortunes of
Debian's `fortunes`, or --corpus), with its rules (a fortune's '%' line becomes a blank line,
terminal colour codes are dropped), the same character vocabulary (every character of the text
in code-point order) and the same split (the first 90 % trains, the rest validates). Both run
the same schedule: AdamW (betas 0.9 and 0.99, weight decay 0.1 on matrices and embeddings
only), a linear warm-up over 100 steps to 2e-3, a cosine to 2e-4 at the last step, the gradient
norm clipped to 1, and one validation estimate of 20 batches and a checkpoint at the end, as
minigpt does. The batches are drawn by each side's own generator, so the two runs see
different windows of the same training text.

PyTorch runs three times in each precision: at 1 thread and at --threads (torch's and OpenBLAS's
pools both set, as compare_pytorch.py sets them), and in its default setting (nothing set), and
the ratio is taken against its fastest run: on a 2-core machine its two pools can crowd each
other out (its float32 step at 2 threads has been measured 2.4 times slower than at 1).

Reported per side and precision:
  - train s and tokens/s: the training loop (steps, the final estimate and the checkpoint),
    as minigpt reports it and as the PyTorch worker times the same span;
  - process s: the whole process, start-up and the end-of-run extras included (minigpt's
    pictures and sample; PyTorch's import);
  - val loss: the mean next-token cross-entropy over every consecutive window of 64 characters
    of the validation text, computed in float32 by `minigpt eval` for attograd's checkpoint and
    by the same windows in PyTorch for its model; the two should agree within 0.02.

    /usr/bin/python3 bench/train_compare.py [--steps 2000] [--threads 2] [--precision both]
        [--minigpt build/examples/minigpt] [--corpus FILE ...] [--seed 1337]

Needs a python3 with PyTorch; without it the script prints a notice and exits 0 (77 with
--check, which the test suite passes and meson reports as a skip). It exits 1 when a pair of
validation losses differs by more than 0.02.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_pytorch  # noqa: E402  (the PyTorch twin of the benchmark GPT, and the CPU's name)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MINIGPT = REPO_ROOT / "build" / "examples" / "minigpt"
FORTUNES = Path("/usr/share/games/fortunes")
CHINESE = {"chinese", "tang300", "song100"}
BLOCK, N_LAYER, N_HEAD, N_EMBD, BATCH = compare_pytorch.CONFIGS["small"]
LR, MIN_LR, WARMUP, WEIGHT_DECAY, BETAS, CLIP = 2e-3, 2e-4, 100, 0.1, (0.9, 0.99), 1.0
VAL_FRACTION, EVAL_BATCHES = 0.1, 20
ANSI = re.compile(r"\x1b\[[^m]*m")


# ----------------------------------------------------------------------------------------------
# The text, as examples/common/corpus.cpp and text/data.cpp read it


def default_corpus():
    if not FORTUNES.is_dir():
        sys.exit(f"{FORTUNES} does not exist: install Debian's `fortunes` package, or pass --corpus FILE")
    return sorted(str(p) for p in FORTUNES.iterdir()
                  if p.is_file() and "." not in p.name and p.name not in CHINESE)


def read_corpus(files):
    text = []
    for path in files:
        content = Path(path).read_bytes().decode("utf-8")
        for line in content.split("\n")[:-1] if content.endswith("\n") else content.split("\n"):
            text.append("\n" if line == "%" else ANSI.sub("", line) + "\n")
    return "".join(text)


def lr_at(step, total):
    """minigpt's schedule (nn/optim.cpp, WarmupCosine): step counts from 0."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    if step >= total:
        return MIN_LR
    progress = (step - WARMUP) / max(total - WARMUP, 1)
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * progress)) * (LR - MIN_LR)


# ----------------------------------------------------------------------------------------------
# The PyTorch side, in a fresh process of its own


def pytorch_worker(args):
    import torch
    import torch.nn.functional as F

    blas, _ = compare_pytorch.openblas_handle()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        if blas is not None:  # torch.set_num_threads leaves OpenBLAS's own pool alone (compare_pytorch.py)
            blas.openblas_set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    text = read_corpus(args.corpus)
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    n_train = int(len(ids) * (1 - VAL_FRACTION))
    train, val = ids[:n_train], ids[n_train:]

    model = compare_pytorch.build_model(torch, BLOCK, N_LAYER, N_HEAD, N_EMBD, vocab=len(vocab))
    decayed = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": WEIGHT_DECAY},
                             {"params": plain, "weight_decay": 0.0}], lr=LR, betas=BETAS)
    gen = torch.Generator().manual_seed(args.seed)
    autocast = args.precision == "bf16"

    def batch(split):
        starts = torch.randint(0, len(split) - BLOCK, (BATCH,), generator=gen)
        x = torch.stack([split[s:s + BLOCK] for s in starts.tolist()])
        y = torch.stack([split[s + 1:s + BLOCK + 1] for s in starts.tolist()])
        return x, y

    def loss_of(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    began = time.perf_counter()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps)
        x, y = batch(train)
        loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    model.eval()
    with torch.no_grad():
        estimate = sum(loss_of(*batch(val)).item() for _ in range(EVAL_BATCHES)) / EVAL_BATCHES
    with tempfile.TemporaryDirectory() as d:
        torch.save(model.state_dict(), os.path.join(d, "model.pt"))
    train_s = time.perf_counter() - began

    # Every consecutive window of the validation text in float32, as `minigpt eval` reads it.
    starts = list(range(0, len(val) - BLOCK, BLOCK))
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(starts), 256):
            chunk = starts[i:i + 256]
            x = torch.stack([val[s:s + BLOCK] for s in chunk])
            y = torch.stack([val[s + 1:s + BLOCK + 1] for s in chunk])
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
            count += y.numel()
    setting = str(args.threads) if args.threads > 0 else (
        f"default (torch {torch.get_num_threads()}, OpenBLAS {blas.openblas_get_num_threads() if blas else '?'})")
    print(json.dumps({"train_s": train_s, "estimate": estimate, "val_loss": total / count, "windows": len(starts),
                      "torch": torch.__version__, "setting": setting}))


# ----------------------------------------------------------------------------------------------
# The driver


def run(cmd, env=None):
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(map(str, cmd))}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout, wall


def attograd_run(args, precision, out_dir, val_file):
    env = dict(os.environ, AG_NUM_THREADS=str(args.threads))
    cmd = [str(args.minigpt), "train", "--steps", str(args.steps), "--out", out_dir, "--overwrite",
           "--precision", precision, "--seed", str(args.seed), "--eval-interval", str(args.steps),
           "--checkpoint-interval", str(args.steps), "--corpus", *args.corpus]
    stdout, wall = run(cmd, env)
    m = re.search(r"\(([0-9.]+) s, ([0-9]+) tokens a second", stdout)
    estimate = re.search(r"final validation loss: ([0-9.]+)", stdout)
    if not m or not estimate:
        sys.exit(f"minigpt train's output lacks its timing or its validation loss:\n{stdout[-2000:]}")
    ev, _ = run([str(args.minigpt), "eval", "--checkpoint", os.path.join(out_dir, "minigpt.safetensors"),
                 "--file", val_file, "--precision", "fp32"], env)
    return {"train_s": float(m.group(1)), "process_s": wall, "estimate": float(estimate.group(1)),
            "val_loss": float(re.search(r"^loss: ([0-9.]+)", ev, re.M).group(1)),
            "windows": int(re.search(r"^windows: ([0-9]+)", ev, re.M).group(1))}


def pytorch_run(args, precision, threads):
    """threads 0: PyTorch's default setting (no thread count set anywhere)."""
    cmd = [sys.executable, __file__, "--pytorch-worker", "--precision", precision, "--steps", str(args.steps),
           "--threads", str(threads), "--seed", str(args.seed), "--corpus", *args.corpus]
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        if threads > 0:
            env[name] = str(threads)
        else:
            env.pop(name, None)
    stdout, wall = run(cmd, env)
    result = json.loads(stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    return result


def bf16_available(args):
    with tempfile.TemporaryDirectory(prefix="train_compare_probe_") as d:
        probe = subprocess.run([str(args.minigpt), "train", "--steps", "1", "--precision", "bf16", "--out", d,
                                "--overwrite", "--sample-tokens", "1", "--corpus", *args.corpus],
                               capture_output=True, text=True)
    return probe.returncode == 0


def driver(args):
    try:
        import torch  # noqa: F401
    except ImportError:
        print("train_compare: this python3 has no PyTorch (Debian: python3-torch, for /usr/bin/python3); skipped")
        return 77 if args.check else 0
    if not Path(args.minigpt).is_file():
        sys.exit(f"{args.minigpt} not found: build first (meson setup build && ninja -C build)")
    text = read_corpus(args.corpus)
    n_train = int(len(text) * (1 - VAL_FRACTION))
    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    if "bf16" in precisions and not bf16_available(args):
        print("note: this CPU has no bf16 unit attograd uses (minigpt refuses --precision bf16): bf16 rows skipped")
        precisions.remove("bf16")
    print(f"CPU: {compare_pytorch.cpu_model()}; {args.threads} threads each side; {args.steps} steps of "
          f"{BATCH} x {BLOCK} tokens; {len(text) / 1e6:.2f} M characters, vocabulary {len(set(text))}, "
          f"{len(text) - n_train} validation characters")
    rows = []
    with tempfile.TemporaryDirectory(prefix="train_compare_") as d:
        val_file = os.path.join(d, "validation.txt")
        Path(val_file).write_text(text[n_train:], encoding="utf-8")
        for precision in precisions:
            a = attograd_run(args, precision, os.path.join(d, f"run_{precision}"), val_file)
            print(f"  {precision}: attograd {a['train_s']:.1f} s, val {a['val_loss']:.4f}", flush=True)
            torch_runs = []
            for threads in sorted({1, args.threads}) + [0]:
                p = pytorch_run(args, precision, threads)
                p["threads"] = p["setting"]
                torch_runs.append(p)
                print(f"  {precision}: PyTorch at {p['setting']} {p['train_s']:.1f} s, val {p['val_loss']:.4f}",
                      flush=True)
            rows.append((precision, a, torch_runs))
    tokens = args.steps * BATCH * BLOCK
    print()
    print("| precision | side | threads | train s | tokens/s | process s | val loss (all windows) | estimate (20 batches) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for precision, a, torch_runs in rows:
        sides = [("attograd", args.threads, a)]
        sides += [(f"PyTorch {p['torch']}" + (" autocast" if precision == "bf16" else ""), p["threads"], p)
                  for p in torch_runs]
        for side, threads, r in sides:
            print(f"| {precision} | {side} | {threads} | {r['train_s']:.1f} | {tokens / r['train_s']:.0f} | "
                  f"{r['process_s']:.1f} | {r['val_loss']:.4f} | {r['estimate']:.4f} |")
    print()
    print("| precision | attograd / PyTorch's faster run, tokens/s | val loss, attograd - PyTorch | within 0.02 |")
    print("|---|---:|---:|---|")
    within = True
    for precision, a, torch_runs in rows:
        p = min(torch_runs, key=lambda r: r["train_s"])
        gap = a["val_loss"] - p["val_loss"]
        within = within and abs(gap) <= 0.02
        print(f"| {precision} | {p['train_s'] / a['train_s']:.2f} (PyTorch at {p['threads']}) | {gap:+.4f} | "
              f"{'yes' if abs(gap) <= 0.02 else 'no'} |")
    if len(rows) == 2:
        print(f"\nattograd bf16 against its own fp32: {rows[0][1]['train_s'] / rows[1][1]['train_s']:.2f}x the tokens/s; "
              f"validation losses {rows[1][1]['val_loss'] - rows[0][1]['val_loss']:+.4f} apart")
    return 0 if within else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps (default 2000)")
    parser.add_argument("--threads", type=int, default=2, help="threads on each side (default 2)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "both"), default="both")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--corpus", nargs="+", default=None, help="text files (default: minigpt's, the fortunes)")
    parser.add_argument("--minigpt", default=str(DEFAULT_MINIGPT), help="the minigpt binary")
    parser.add_argument("--check", action="store_true", help="exit 77 (a skip to meson) without PyTorch")
    parser.add_argument("--pytorch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < WARMUP:
        parser.error(f"--steps must be at least the warm-up's {WARMUP}, got {args.steps}")
    if args.threads < (0 if args.pytorch_worker else 1):
        parser.error(f"--threads must be at least 1, got {args.threads}")
    args.corpus = args.corpus or default_corpus()
    if args.pytorch_worker:
        pytorch_worker(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
