#!/usr/bin/python3
"""compare_pytorch: attograd's GPT training step against the same step in PyTorch.

Runs bench/gpt_train_step (attograd) and an equivalent PyTorch model in fresh processes,
alternating attograd, PyTorch, attograd, PyTorch ... for --rounds rounds at 1 and 2 threads,
and reports the median of the per-run step medians. PyTorch also runs once in its own default
thread setting. A matmul-only floor (the step's GEMM shapes, timed alone with torch.matmul on
the same thread count) shows how much of a step is spent outside the matrix products.

--precision says which steps are timed: fp32 (the float32 table above), bf16 or both (the
default). The bf16 rows pit attograd's `--precision bf16` (matrix products with bf16 inputs and
float32 sums) against PyTorch with model and loss under torch.autocast("cpu",
dtype=torch.bfloat16), backward and AdamW outside it, as PyTorch's documentation writes it; a
round then runs attograd fp32, PyTorch fp32, attograd bf16, PyTorch autocast in turn (attograd
fp32 is timed for the bf16-against-fp32 ratio even with --precision bf16). PyTorch autocast
also runs once in its default thread setting. A last table takes each side's best thread
setting per config and sets side by side: PyTorch autocast / attograd bf16 and attograd fp32 /
attograd bf16 (above 1: attograd bf16 is the faster). Where attograd's bf16 path cannot run
(no bf16 unit in the CPU, so it refuses --precision bf16), the bf16 rows are skipped with a
note. attograd's fp32 runs ask for --precision fp32 explicitly: its default, auto, takes bf16
wherever the CPU has a bf16 unit.

    python3 bench/compare_pytorch.py [--configs tiny small medium] [--rounds 2]
        [--steps 20] [--warmup 5] [--precision fp32|bf16|both]
        [--attograd build/bench/gpt_train_step]

--second-order times Hessian-vector products instead, float32 at 2 threads: for each config and
round, attograd's gradient (gpt_train_step --order gradient), its HVP by forward over reverse
(--order hvp-forward, ag::hvp's route) and by reverse over reverse (--order hvp), then PyTorch's
gradient (torch.autograd.grad) and its HVP by double backward (torch.autograd.grad with
create_graph, then the gradient of <g, v> for a fixed random v), all in turn. The table gives
each median, each HVP against its own gradient, and PyTorch's HVP against attograd's.

Needs a python3 with PyTorch; without it the script prints a notice and exits 0. Only the
standard library and torch are used.
"""
# On Debian, the system interpreter /usr/bin/python3 has torch (package python3-torch).

import argparse
import ctypes
import json
import math
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ATTOGRAD = REPO_ROOT / "build" / "bench" / "gpt_train_step"
THREAD_SETTINGS = (1, 2)
VOCAB = 65

# name: (block_size, n_layer, n_head, n_embd, batch), as in bench/gpt_train_step.cpp.
CONFIGS = {
    "tiny": (32, 2, 2, 64, 16),
    "small": (64, 4, 4, 128, 16),
    "medium": (128, 6, 6, 192, 32),
}


# ----------------------------------------------------------------------------------------------
# Helpers shared by both modes


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loaded_libraries(fragment):
    """Paths of the shared objects mapped into this process whose path contains `fragment`."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and fragment in parts[-1] and parts[-1] not in found:
                    found.append(parts[-1])
    except OSError:
        pass
    return found


def openblas_handle():
    """ctypes handle to the OpenBLAS this process has loaded (through torch), or None."""
    for path in loaded_libraries("libopenblas"):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_num_threads.restype = ctypes.c_int
            return lib, path
        except (OSError, AttributeError):
            continue
    return None, None


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in output")


# ----------------------------------------------------------------------------------------------
# PyTorch worker: one fresh process per measurement


def build_model(torch, block, n_layer, n_head, n_embd, vocab=VOCAB):
    nn = torch.nn
    F = torch.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.n_head = n_head
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)  # weight [3C, C]
            self.c_proj = nn.Linear(n_embd, n_embd)
            future = torch.ones(block, block, dtype=torch.bool).triu(diagonal=1)
            self.register_buffer("future", future, persistent=False)

        def forward(self, x):
            B, T, C = x.shape
            hd = C // self.n_head
            q, k, v = self.c_attn(x).split(C, dim=2)
            q = q.view(B, T, self.n_head, hd).transpose(1, 2)  # [B, H, T, hd]
            k = k.view(B, T, self.n_head, hd).transpose(1, 2)
            v = v.view(B, T, self.n_head, hd).transpose(1, 2)
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            scores = scores.masked_fill(self.future[:T, :T], float("-inf"))
            weights = F.softmax(scores, dim=-1)
            y = torch.matmul(weights, v)  # [B, H, T, hd]
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.act = nn.GELU()  # exact (erf) form
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.act(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
            self.mlp = FeedForward()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(block, n_embd)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
            self.head = nn.Linear(n_embd, vocab, bias=False)
            self.head.weight = self.wte.weight  # tied: logits = h wte^T
            self.register_buffer("positions", torch.arange(block), persistent=False)
            residual_std = 0.02 / math.sqrt(2 * n_layer)
            for name, p in self.named_parameters():
                if ".ln_" in name or name.startswith("ln_"):
                    continue  # LayerNorm keeps weight 1, bias 0
                if name.endswith(".bias"):
                    nn.init.zeros_(p)
                else:
                    nn.init.normal_(p, 0.0, residual_std if name.endswith("c_proj.weight") else 0.02)

        def forward(self, ids):
            T = ids.shape[1]
            x = self.wte(ids) + self.wpe(self.positions[:T])
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln_f(x))

    return GPT()


def gemm_shapes(block, n_layer, n_head, n_embd, batch):
    """Forward GEMMs of one step as (label, batch_count, M, K, N, b_is_weight, times_per_step).

    b_is_weight marks products x @ W^T with W stored [N, K] as nn.Linear keeps it; otherwise
    the operands are per-head activations.
    """
    B, T, C, H, L = batch, block, n_embd, n_head, n_layer
    hd = C // H
    return [
        ("c_attn  [B*T,C]x[C,3C]", 1, B * T, C, 3 * C, True, L),
        ("q k^T   [T,hd]x[hd,T] x B*H", B * H, T, hd, T, False, L),
        ("att v   [T,T]x[T,hd] x B*H", B * H, T, T, hd, False, L),
        ("c_proj  [B*T,C]x[C,C]", 1, B * T, C, C, True, L),
        ("c_fc    [B*T,C]x[C,4C]", 1, B * T, C, 4 * C, True, L),
        ("mlp out [B*T,4C]x[4C,C]", 1, B * T, 4 * C, C, True, L),
        ("head    [B*T,C]x[C,V]", 1, B * T, C, VOCAB, True, 1),
    ]


def median_time_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def matmul_floor(torch, cfg, reps=25):
    """Sum over the step's GEMMs of the median time of each alone: forward C = A B, and the
    backward's dA = dC B^T and dB = A^T dC, in the layouts autograd would use."""
    block, n_layer, n_head, n_embd, batch = cfg
    g = torch.Generator().manual_seed(1)
    total_ms, flop, detail = 0.0, 0.0, []
    for label, nb, M, K, N, b_is_weight, count in gemm_shapes(block, n_layer, n_head, n_embd, batch):
        lead = () if nb == 1 else (nb,)
        A = torch.randn(*lead, M, K, generator=g)
        if b_is_weight:
            Bm = torch.randn(N, K, generator=g).t()  # [K, N] view of a weight stored [N, K]
        else:
            Bm = torch.randn(*lead, K, N, generator=g)
        dC = torch.randn(*lead, M, N, generator=g)
        out_c = torch.empty(*lead, M, N)
        out_da = torch.empty(*lead, M, K)
        Bt = Bm.transpose(-2, -1)
        if b_is_weight:  # the weight's gradient comes out in its own [N, K] layout: dC^T A
            out_db, lhs, rhs = torch.empty(N, K), dC.t(), A
        else:
            out_db, lhs, rhs = torch.empty(*lead, K, N), A.transpose(-2, -1), dC
        fwd = median_time_ms(lambda: torch.matmul(A, Bm, out=out_c), reps)
        bwd_a = median_time_ms(lambda: torch.matmul(dC, Bt, out=out_da), reps)
        bwd_b = median_time_ms(lambda: torch.matmul(lhs, rhs, out=out_db), reps)
        ms = (fwd + bwd_a + bwd_b) * count
        total_ms += ms
        flop += 3 * 2.0 * nb * M * K * N * count
        detail.append({"gemm": label, "per_step": count, "fwd_ms": round(fwd, 4),
                       "bwd_dA_ms": round(bwd_a, 4), "bwd_dB_ms": round(bwd_b, 4)})
    return total_ms, flop / 1e9, detail


def pytorch_worker(args):
    import torch  # noqa: PLC0415  (only the worker and the main check need it)

    rss_after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    blas, blas_path = openblas_handle()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        if blas is not None:  # torch.set_num_threads leaves OpenBLAS's own pool alone
            blas.openblas_set_num_threads(args.threads)
    cfg = CONFIGS[args.config]
    block, n_layer, n_head, n_embd, batch = cfg
    torch.manual_seed(0)
    model = build_model(torch, block, n_layer, n_head, n_embd)
    decayed = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                             {"params": plain, "weight_decay": 0.0}], lr=1e-3)
    F = torch.nn.functional

    def forward(x, y):
        logits = model(x)
        return logits, F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))

    params = list(model.parameters())
    v_gen = torch.Generator().manual_seed(1)
    direction = [torch.randn(p.shape, generator=v_gen) for p in params]  # v, for --order hvp

    ids_gen = torch.Generator().manual_seed(0)
    times, losses, logits_dtype = [], [], None
    for s in range(args.warmup + args.steps):
        x = torch.randint(0, VOCAB, (batch, block), generator=ids_gen)
        y = torch.randint(0, VOCAB, (batch, block), generator=ids_gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if args.order == "gradient":
            logits, loss = forward(x, y)
            torch.autograd.grad(loss, params)
        elif args.order == "hvp":  # double backward: the gradient with a graph, then grad of <g, v>
            logits, loss = forward(x, y)
            g = torch.autograd.grad(loss, params, create_graph=True)
            torch.autograd.grad(sum((gi * vi).sum() for gi, vi in zip(g, direction)), params)
        else:
            if args.autocast:  # model and loss under autocast; backward and the update outside it
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    logits, loss = forward(x, y)
            else:
                logits, loss = forward(x, y)
            loss.backward()
            opt.step()
        elapsed = (time.perf_counter() - t0) * 1e3
        if s >= args.warmup:
            times.append(elapsed)
            losses.append(loss.item())
            logits_dtype = str(logits.dtype).replace("torch.", "")
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result = {
        "config": args.config,
        "precision": "bf16-autocast" if args.autocast else "fp32",
        "order": args.order,
        "logits_dtype": logits_dtype,
        "threads": args.threads if args.threads > 0 else "default",
        "torch_threads": torch.get_num_threads(),
        "openblas_threads": blas.openblas_get_num_threads() if blas is not None else None,
        "openblas": blas_path,
        "steps": args.steps,
        "ms_step_median": round(statistics.median(times), 3),
        "ms_step_min": round(min(times), 3),
        "tokens_per_s": round(batch * block / (statistics.median(times) / 1e3)),
        "peak_rss_mb": round(peak_rss, 1),
        "rss_after_import_mb": round(rss_after_import, 1),
        "loss_last": round(losses[-1], 4),
    }
    if args.floor:
        floor_ms, gflop, detail = matmul_floor(torch, cfg)
        result.update({"floor_ms": round(floor_ms, 3), "floor_gflop": round(gflop, 3),
                       "floor_detail": detail})
    print(json.dumps(result), flush=True)
    return 0


# ----------------------------------------------------------------------------------------------
# Driver


def run_json(cmd, env=None, timeout=3600):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
        raise SystemExit(f"compare_pytorch: command failed ({proc.returncode}): {shlex.join(cmd)}")
    return last_json_line(proc.stdout)


def run_attograd(args, config, threads, precision="fp32", order="first"):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    cmd = [str(args.attograd), "--config", config, "--threads", str(threads),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--precision", precision, "--order", order]
    result = run_json(cmd, env)
    if result.get("precision") != precision:
        raise SystemExit(f"compare_pytorch: asked attograd for {precision}, its JSON line says "
                         f"{result.get('precision')}: {shlex.join(cmd)}")
    return result


def attograd_bf16_path(args):
    """(True, the path attograd reports) where its bf16 path runs, (False, its refusal) where it
    refuses --precision bf16; one tiny step, before anything is timed."""
    cmd = [str(args.attograd), "--config", "tiny", "--threads", "1", "--steps", "1",
           "--warmup", "0", "--precision", "bf16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    if proc.returncode == 0:
        said = [line.split(":", 1)[1].strip() for line in lines if line.startswith("precision:")]
        return True, said[-1] if said else "bf16"
    if "--precision bf16" in proc.stderr:
        refusal = [line for line in lines if "--precision bf16" in line][-1]
        return False, refusal.split("--precision bf16", 1)[1].lstrip(": ")
    sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
    raise SystemExit(f"compare_pytorch: command failed ({proc.returncode}): {shlex.join(cmd)}")


def run_pytorch(args, config, threads, floor, autocast=False, order="first"):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--pytorch-worker", "--config", config,
           "--threads", str(threads), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--order", order]
    if floor:
        cmd.append("--floor")
    if autocast:
        cmd.append("--autocast")
    env = dict(os.environ)
    if threads > 0:
        env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    return run_json(cmd, env)


def resolved_openblas_of(binary):
    """The OpenBLAS file the attograd binary links, via ldd when it is available."""
    if shutil.which("ldd") is None:
        return None
    try:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if "openblas" in line and "=>" in line:
            path = line.split("=>", 1)[1].split("(")[0].strip()
            return os.path.realpath(path) if path else None
    return None


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def driver(args):
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        print("compare_pytorch: skipped (PyTorch not installed for this python3)")
        return 0

    attograd = Path(args.attograd) if args.attograd else DEFAULT_ATTOGRAD
    args.attograd = attograd.resolve()
    if not os.access(args.attograd, os.X_OK):
        print(f"compare_pytorch: attograd benchmark not found at {args.attograd} (build it first)",
              file=sys.stderr)
        return 1

    torch.matmul(torch.ones(64, 64), torch.ones(64, 64))  # make torch load its BLAS
    blas, blas_path = openblas_handle()
    config_text = torch.__config__.show()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None

    print(f"command: {shlex.join([sys.executable] + sys.argv)}")
    print(f"machine: {cpu_model()}, nproc {os.cpu_count()}"
          + (f" ({affinity} usable)" if affinity is not None else "")
          + f", {platform.system()} {platform.release()}")
    print(f"python {platform.python_version()}, torch {torch.__version__}; "
          f"steps {args.steps}, warmup {args.warmup}, rounds {args.rounds}, "
          f"precision {args.precision}")
    if blas is not None:
        attograd_blas = resolved_openblas_of(args.attograd)
        same = attograd_blas is not None and os.path.realpath(blas_path) == attograd_blas
        print(f"BLAS: torch loads {os.path.basename(blas_path)}"
              + (f"; attograd links {os.path.basename(attograd_blas)}" if attograd_blas else "")
              + (" (the same file)" if same else " (could not confirm it is the same file)"))
    else:
        print("BLAS: torch has no OpenBLAS mapped; the floor is torch's own sgemm, not attograd's")
    if "openblas" in config_text.lower():
        print("  (assumption that torch uses OpenBLAS checked: torch.__config__.show() mentions OpenBLAS)")
    else:
        print("  (torch.__config__.show() does not name OpenBLAS (BLAS_INFO is "
              + ("'generic'" if "BLAS_INFO=generic" in config_text else "unlisted")
              + "); checked instead by the libraries mapped into the process)")
    print("  torch.set_num_threads does not resize OpenBLAS's pool, so the 1- and 2-thread "
          "PyTorch runs also set it with openblas_set_num_threads")
    want_fp32 = args.precision in ("fp32", "both")
    want_bf16 = args.precision in ("bf16", "both")
    bf16_ok, bf16_why = attograd_bf16_path(args) if want_bf16 else (False, None)
    if want_bf16 and bf16_ok:
        print(f"bf16: attograd --precision bf16 runs {bf16_why}; PyTorch autocast's oneDNN is "
              + ("built in" if torch.backends.mkldnn.is_available() else "not built in"))
    elif want_bf16:
        print(f"bf16: rows skipped, attograd refuses --precision bf16 on this machine: {bf16_why}")
    print(flush=True)
    if args.second_order:
        return second_order(args)
    measure_bf16 = want_bf16 and bf16_ok
    if not want_fp32 and not measure_bf16:
        print("compare_pytorch: nothing left to measure (--precision bf16 without a bf16 path)")
        return 0

    rows, defaults, gflop_attograd, gflop_floor = [], {}, {}, {}
    bf16_rows, bf16_defaults, autocast_dtypes = [], {}, set()
    for config in args.configs:
        for threads in THREAD_SETTINGS:
            ag_ms, pt_ms, floor_ms, ag_rss, pt_rss = [], [], [], [], []
            ag16_ms, pt16_ms, ag16_rss, pt16_rss = [], [], [], []
            for r in range(args.rounds):
                a = run_attograd(args, config, threads)
                ag_ms.append(a["ms_step_median"])
                ag_rss.append(a["peak_rss_mb"])
                gflop_attograd[config] = a["matmul_gflop_per_step"]
                done = [f"attograd {a['ms_step_median']:.2f} ms"]
                if want_fp32:
                    p = run_pytorch(args, config, threads, floor=True)
                    pt_ms.append(p["ms_step_median"])
                    pt_rss.append(p["peak_rss_mb"])
                    floor_ms.append(p["floor_ms"])
                    gflop_floor[config] = p["floor_gflop"]
                    done += [f"PyTorch {p['ms_step_median']:.2f} ms", f"floor {p['floor_ms']:.2f} ms"]
                if measure_bf16:
                    b = run_attograd(args, config, threads, "bf16")
                    q = run_pytorch(args, config, threads, floor=False, autocast=True)
                    ag16_ms.append(b["ms_step_median"])
                    ag16_rss.append(b["peak_rss_mb"])
                    pt16_ms.append(q["ms_step_median"])
                    pt16_rss.append(q["peak_rss_mb"])
                    autocast_dtypes.add(q["logits_dtype"])
                    done += [f"attograd bf16 {b['ms_step_median']:.2f} ms",
                             f"PyTorch autocast {q['ms_step_median']:.2f} ms"]
                print(f"  {config} threads {threads} round {r + 1}/{args.rounds}: " + ", ".join(done),
                      file=sys.stderr, flush=True)
            if want_fp32:
                rows.append({
                    "config": config, "threads": str(threads), "setting": f"{threads}t",
                    "ag": statistics.median(ag_ms), "pt": statistics.median(pt_ms),
                    "floor": statistics.median(floor_ms),
                    "ag_rss": statistics.median(ag_rss), "pt_rss": statistics.median(pt_rss),
                })
            if measure_bf16:
                bf16_rows.append({
                    "config": config, "threads": str(threads), "setting": f"{threads}t",
                    "ag": statistics.median(ag16_ms), "pt": statistics.median(pt16_ms),
                    "fp32": statistics.median(ag_ms),
                    "ag_rss": statistics.median(ag16_rss), "pt_rss": statistics.median(pt16_rss),
                })
        if want_fp32:
            d = run_pytorch(args, config, 0, floor=False)
            defaults[config] = d
            print(f"  {config} PyTorch default threads (torch {d['torch_threads']}, OpenBLAS "
                  f"{d['openblas_threads']}): {d['ms_step_median']:.2f} ms", file=sys.stderr, flush=True)
            best = min((r for r in rows if r["config"] == config), key=lambda r: r["ag"])
            rows.append({
                "config": config,
                "threads": f"default (torch {d['torch_threads']}, OpenBLAS {d['openblas_threads']})",
                "setting": "default",
                "ag": best["ag"], "ag_note": f"*{best['threads']}t", "pt": d["ms_step_median"],
                "floor": None, "ag_rss": None, "pt_rss": d["peak_rss_mb"],
            })
        if measure_bf16:
            d = run_pytorch(args, config, 0, floor=False, autocast=True)
            bf16_defaults[config] = d
            autocast_dtypes.add(d["logits_dtype"])
            print(f"  {config} PyTorch autocast default threads (torch {d['torch_threads']}, OpenBLAS "
                  f"{d['openblas_threads']}): {d['ms_step_median']:.2f} ms", file=sys.stderr, flush=True)
            mine = [r for r in bf16_rows if r["config"] == config]
            best = min(mine, key=lambda r: r["ag"])
            best_fp32 = min(mine, key=lambda r: r["fp32"])
            bf16_rows.append({
                "config": config,
                "threads": f"default (torch {d['torch_threads']}, OpenBLAS {d['openblas_threads']})",
                "setting": "default",
                "ag": best["ag"], "ag_note": f"*{best['threads']}t", "pt": d["ms_step_median"],
                "fp32": best_fp32["fp32"], "fp32_note": f"*{best_fp32['threads']}t",
                "ag_rss": None, "pt_rss": d["peak_rss_mb"],
            })

    if want_fp32:
        print_fp32_table(args, rows, defaults, gflop_attograd, gflop_floor)
    if measure_bf16:
        if want_fp32:
            print()
        print_bf16_tables(args, rows, bf16_rows, autocast_dtypes)
    elif want_bf16:
        print(f"bf16: no rows; attograd refuses --precision bf16 on this machine ({bf16_why}), "
              "so there is nothing to set against PyTorch's autocast.")
    sys.stdout.flush()
    return 0


def second_order(args):
    """The --second-order table: gradients and Hessian-vector products, float32, 2 threads."""
    runs = [("ag grad", "attograd", "gradient"), ("ag hvp", "attograd", "hvp-forward"),
            ("ag hvp rr", "attograd", "hvp"), ("pt grad", "pytorch", "gradient"), ("pt hvp", "pytorch", "hvp")]
    header = ["config", "attograd gradient ms", "attograd HVP ms", "× its gradient", "HVP peak MB / gradient's",
              "attograd HVP reverse-over-reverse ms", "× its gradient", "its peak MB / gradient's",
              "PyTorch gradient ms", "PyTorch HVP ms", "× its gradient",
              "PyTorch HVP / attograd HVP"]
    table = []
    for config in args.configs:
        ms = {name: [] for name, *_ in runs}
        peak = {name: [] for name, *_ in runs}
        for r in range(args.rounds):
            done = []
            for name, side, order in runs:
                out = (run_attograd(args, config, 2, "fp32", order) if side == "attograd"
                       else run_pytorch(args, config, 2, floor=False, order=order))
                ms[name].append(out["ms_step_median"])
                peak[name].append(out.get("peak_tensor_mb_median", math.nan))
                done.append(f"{name} {out['ms_step_median']:.2f} ms")
            print(f"  {config} round {r + 1}/{args.rounds}: " + ", ".join(done), file=sys.stderr, flush=True)
        m = {name: statistics.median(v) for name, v in ms.items()}
        p = {name: statistics.median(v) for name, v in peak.items()}
        table.append([config, fmt(m["ag grad"]), fmt(m["ag hvp"]), fmt(m["ag hvp"] / m["ag grad"]),
                      fmt(p["ag hvp"] / p["ag grad"]), fmt(m["ag hvp rr"]),
                      fmt(m["ag hvp rr"] / m["ag grad"]), fmt(p["ag hvp rr"] / p["ag grad"]), fmt(m["pt grad"]), fmt(m["pt hvp"]),
                      fmt(m["pt hvp"] / m["pt grad"]), fmt(m["pt hvp"] / m["ag hvp"])])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in table:
        print("| " + " | ".join(row) + " |")
    print("float32, 2 threads; medians over the rounds of each run's median step. Peak MB: attograd's most "
          "tensor memory live during a step (memory_stats), HVP against gradient.")
    return 0


def print_fp32_table(args, rows, defaults, gflop_attograd, gflop_floor):
    header = ["config", "threads", "attograd ms", "PyTorch ms", "PyTorch/attograd", "floor ms",
              "attograd/floor", "attograd RSS MB", "PyTorch RSS MB"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|")
    for r in rows:
        ag_text = fmt(r["ag"]) + (f" {r['ag_note']}" if r.get("ag_note") else "")
        cells = [r["config"], r["threads"], ag_text, fmt(r["pt"]), fmt(r["pt"] / r["ag"]),
                 fmt(r["floor"]), fmt(r["ag"] / r["floor"] if r["floor"] else None),
                 fmt(r["ag_rss"], 1), fmt(r["pt_rss"], 1)]
        print("| " + " | ".join(cells) + " |")
    print()
    print("ms: median over runs of each run's median step (zero_grad + forward + loss + backward + "
          "AdamW); runs alternate attograd/PyTorch in fresh processes.")
    print("floor: the step's GEMMs (forward and both backward products) timed one by one with "
          "torch.matmul in float32 on the row's thread count, medians summed; per-head products "
          "as one batched call over B*H heads.")
    print("*Nt: on the default row, attograd's faster thread setting, for the ratio.")
    print("RSS: peak resident set size of the whole process (PyTorch's includes the torch "
          "import: " + ", ".join(f"{c} {defaults[c]['rss_after_import_mb']:.0f} MB"
                                 for c in args.configs) + " before the model is built).")
    print("matmul GFLOP per step (gpt_train_step): " + ", ".join(
        f"{c} {gflop_attograd[c]:.3f}" for c in args.configs)
        + "; counted from the floor's shapes: " + ", ".join(
        f"{c} {gflop_floor[c]:.3f}" for c in args.configs))
    for config in args.configs:
        by_threads = {r["threads"]: r for r in rows if r["config"] == config}
        one, two = by_threads.get("1"), by_threads.get("2")
        if one and two and two["pt"] > 1.3 * one["pt"]:
            print(f"note: PyTorch at 2 threads is slower than at 1 on {config}: torch's OpenMP pool and "
                  "OpenBLAS's pthread pool both run, and with no spare cores OpenMP's spin-waiting "
                  "threads compete with OpenBLAS's (OMP_WAIT_POLICY=passive is the usual remedy).")
            break


def fastest(rows, config, key):
    """The row of `config` with the smallest `key`, or None when there is none."""
    mine = [r for r in rows if r["config"] == config and r.get(key) is not None]
    return min(mine, key=lambda r: r[key]) if mine else None


def print_bf16_tables(args, rows, bf16_rows, autocast_dtypes):
    header = ["config", "threads", "attograd bf16 ms", "PyTorch autocast ms",
              "PyTorch autocast/attograd bf16", "attograd fp32 ms", "attograd fp32/bf16",
              "attograd bf16 RSS MB", "PyTorch autocast RSS MB"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|")
    for r in bf16_rows:
        ag_text = fmt(r["ag"]) + (f" {r['ag_note']}" if r.get("ag_note") else "")
        fp32_text = fmt(r["fp32"]) + (f" {r['fp32_note']}" if r.get("fp32_note") else "")
        cells = [r["config"], r["threads"], ag_text, fmt(r["pt"]), fmt(r["pt"] / r["ag"]),
                 fp32_text, fmt(r["fp32"] / r["ag"]), fmt(r["ag_rss"], 1), fmt(r["pt_rss"], 1)]
        print("| " + " | ".join(cells) + " |")
    print()

    # Each side in its fastest setting: attograd over its thread rows, PyTorch over those and
    # its default.
    header = ["config", "attograd fp32 ms", "PyTorch fp32 ms", "attograd bf16 ms",
              "PyTorch autocast ms", "PyTorch autocast/attograd bf16", "attograd fp32/attograd bf16",
              "PyTorch fp32/PyTorch autocast"]
    print("Best setting of each:")
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < 1 else "---:" for i in range(len(header))) + "|")
    thread_rows = [r for r in bf16_rows if r["setting"] != "default"]
    for config in args.configs:
        ag32 = fastest(thread_rows, config, "fp32")
        pt32 = fastest(rows, config, "pt")
        ag16 = fastest(thread_rows, config, "ag")
        pt16 = fastest(bf16_rows, config, "pt")

        def cell(row, key):
            return "—" if row is None else f"{row[key]:.2f} ({row['setting']})"

        def ratio(num, num_key, den, den_key):
            return fmt(None if num is None or den is None else num[num_key] / den[den_key])

        cells = [config, cell(ag32, "fp32"), cell(pt32, "pt"), cell(ag16, "ag"), cell(pt16, "pt"),
                 ratio(pt16, "pt", ag16, "ag"), ratio(ag32, "fp32", ag16, "ag"),
                 ratio(pt32, "pt", pt16, "pt")]
        print("| " + " | ".join(cells) + " |")
    print()
    print("bf16 ms: attograd with --precision bf16 (bf16 inputs, float32 sums in its matrix "
          "products); PyTorch with model and loss under torch.autocast(\"cpu\", "
          "dtype=torch.bfloat16), backward and AdamW outside it. attograd fp32 is the float32 run "
          "of the same rounds; a round runs attograd fp32, "
          + ("PyTorch fp32, " if rows else "") + "attograd bf16, PyTorch autocast, each in a "
          "fresh process.")
    print("*Nt: on the default row, attograd's faster thread setting, for the ratios. Best: (Nt) "
          "N threads, (default) PyTorch's own thread setting; above 1, the ratio's denominator is "
          "the faster.")
    if autocast_dtypes != {"bfloat16"}:
        print("note: PyTorch's logits under autocast came out as " + ", ".join(sorted(autocast_dtypes))
              + ", not bfloat16: autocast did not take the model's matrix products to bf16.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS),
                        help="configurations to run (default: tiny small medium)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of alternating attograd/PyTorch runs per setting (default 2)")
    parser.add_argument("--steps", type=int, default=20, help="measured steps per run (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured steps first (default 5)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "both"), default="both",
                        help="float32 steps, bf16 steps (attograd --precision bf16 against PyTorch "
                             "autocast) or both (default both)")
    parser.add_argument("--second-order", action="store_true",
                        help="time gradients and Hessian-vector products instead of training steps")
    parser.add_argument("--order", choices=("first", "gradient", "hvp"), default="first", help=argparse.SUPPRESS)
    parser.add_argument("--attograd", default=None,
                        help="path of gpt_train_step (default: build/bench/gpt_train_step in the repo)")
    parser.add_argument("--pytorch-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", choices=list(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--autocast", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1, --warmup at least 0")
    if args.pytorch_worker:
        if args.config is None:
            parser.error("--pytorch-worker needs --config")
        return pytorch_worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
