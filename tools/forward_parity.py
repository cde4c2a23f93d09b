"""Checks attograd's forward mode against PyTorch's forward AD (dual tensors), in float64.

Each case below draws its inputs and their tangents in PyTorch from a seeded generator, writes
them as .npy files, runs forward_grads (tools/forward_grads.cpp) on them, reads back the value
and the tangent it writes (by the fast kernels, and again by the reference twins), and compares
both with what torch.autograd.forward_ad computes for the same function on the same values:

  - attention written out from elementary ops (softmax(q k^T * scale, masked scores -inf) v),
    with a key padding mask and Tq != Tk, causal with Tq != Tk and a non-default scale, and
    causal with padding, every one of q, k and v moving (and one case where only v does);
  - layer norm from its mean and variance, x, weight and bias moving;
  - cross-entropy as the mean of -log_softmax at the target, one target ignored (-100);
  - GELU, exact (from erf) and in its tanh form;
  - a pre-norm GPT block: x plus causal multi-head attention of layer norm of x, plus a GELU
    MLP of layer norm of that, with x and every weight and bias moving.

    /usr/bin/python3 tools/forward_parity.py --forward-grads build/tools/forward_grads

PyTorch's side is written out by hand from elementary ops, so it does not rest on any fused
kernel. Tolerances (RTOL 1e-10, ATOL 1e-13), the reading of the relative error, the exit codes
(0 all agree, 1 any mismatch, 77 skipped without PyTorch) and the .npy helpers are those of
tools/pytorch_parity.py and tools/second_order_parity.py.
"""
import math
import os
import sys

try:
    import torch
    import torch.autograd.forward_ad as fwAD
except ImportError:
    print("forward_parity: skipped (PyTorch not installed for this python3)")
    sys.exit(77)

sys.dont_write_bytecode = True
from pytorch_parity import compare  # noqa: E402
from second_order_parity import attention_allowed, read_npy, run_all, run_program  # noqa: E402


def normal(generator, *shape, std=1.0):
    return std * torch.randn(shape, generator=generator, dtype=torch.float64)


def jvp(f, inputs, tangents):
    """f(*inputs) and its tangent when inputs[i] moves along tangents[i] (None: it stays)."""
    with fwAD.dual_level():
        duals = [x if t is None else fwAD.make_dual(x, t) for x, t in zip(inputs, tangents)]
        primal, tangent = fwAD.unpack_dual(f(*duals))
        return primal.detach(), (torch.zeros_like(primal) if tangent is None else tangent.detach())


def attention_by_hand(q, k, v, allowed, scale):
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~allowed, float("-inf"))
    return scores.softmax(dim=-1) @ v


LAYER_NORM_EPS = 1e-5


def layer_norm_by_hand(x, weight, bias):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as layer norm's
    return (x - mean) / torch.sqrt(var + LAYER_NORM_EPS) * weight + bias


def gelu_by_hand(x, tanh=False):
    if tanh:
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def attention_case(c, g):
    B, H, Tq, Tk, d, dv = (c[n] for n in ("B", "H", "Tq", "Tk", "d", "dv"))
    q, k, v = normal(g, B, H, Tq, d), normal(g, B, H, Tk, d), normal(g, B, H, Tk, dv)
    t = dict(q=normal(g, B, H, Tq, d), k=normal(g, B, H, Tk, d), v=normal(g, B, H, Tk, dv))
    moving = c.get("moving", "qkv")
    inputs = dict(q=q, k=k, v=v)
    inputs.update({f"t_{n}": t[n] for n in moving})
    if "lengths" in c:
        inputs["lengths"] = torch.tensor(c["lengths"], dtype=torch.int64)
    if c.get("causal"):
        inputs["causal"] = torch.tensor(True)
    if "scale" in c:
        inputs["scale"] = torch.tensor(c["scale"], dtype=torch.float64)
    allowed, scale = attention_allowed(c), c.get("scale", 1 / math.sqrt(d))
    return inputs, jvp(lambda q, k, v: attention_by_hand(q, k, v, allowed, scale), [q, k, v],
                       [t[n] if n in moving else None for n in "qkv"])


def layer_norm_case(c, g):
    D = c["shape"][-1]
    x, weight, bias = normal(g, *c["shape"]), 1 + normal(g, D, std=0.3), normal(g, D, std=0.3)
    tx, tw, tb = normal(g, *c["shape"]), normal(g, D), normal(g, D)
    inputs = dict(x=x, weight=weight, bias=bias, t_x=tx, t_weight=tw, t_bias=tb)
    return inputs, jvp(layer_norm_by_hand, [x, weight, bias], [tx, tw, tb])


def cross_entropy_case(c, g):
    N, C = c["N"], c["classes"]
    logits, t = normal(g, N, C, std=2.0), normal(g, N, C)
    targets = torch.randint(0, C, (N,), generator=g)
    targets[c["ignored"]] = -100
    counted = targets != -100

    def loss(x):
        picked = -x.log_softmax(dim=-1).gather(1, targets.clamp(min=0)[:, None])[:, 0]
        return picked[counted].mean()

    return dict(logits=logits, t_logits=t, targets=targets), jvp(loss, [logits], [t])


def gelu_case(c, g):
    x, t = normal(g, *c["shape"], std=2.0), normal(g, *c["shape"])
    inputs = dict(x=x, t_x=t)
    if c.get("tanh"):
        inputs["tanh"] = torch.tensor(True)
    return inputs, jvp(lambda x: gelu_by_hand(x, c.get("tanh", False)), [x], [t])


BLOCK_NAMES = ["x", "ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_w", "proj_b",
               "ln2_w", "ln2_b", "fc1_w", "fc1_b", "fc2_w", "fc2_b"]


def block_case(c, g):
    B, T, C, H = c["B"], c["T"], c["C"], c["H"]
    shapes = dict(x=(B, T, C), ln1_w=(C,), ln1_b=(C,), qkv_w=(3 * C, C), qkv_b=(3 * C,), proj_w=(C, C),
                  proj_b=(C,), ln2_w=(C,), ln2_b=(C,), fc1_w=(4 * C, C), fc1_b=(4 * C,), fc2_w=(C, 4 * C),
                  fc2_b=(C,))
    values = {n: normal(g, *shapes[n], std=(1.0 if n == "x" else 0.4)) for n in BLOCK_NAMES}
    values["ln1_w"] += 1
    values["ln2_w"] += 1
    tangents = {n: normal(g, *shapes[n]) for n in BLOCK_NAMES}
    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def block(x, ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b):
        qkv = layer_norm_by_hand(x, ln1_w, ln1_b) @ qkv_w.T + qkv_b
        q, k, v = (part.reshape(B, T, H, C // H).transpose(1, 2) for part in qkv.split(C, dim=-1))
        attended = attention_by_hand(q, k, v, causal, 1 / math.sqrt(C // H)).transpose(1, 2).reshape(B, T, C)
        h = x + attended @ proj_w.T + proj_b
        return h + gelu_by_hand(layer_norm_by_hand(h, ln2_w, ln2_b) @ fc1_w.T + fc1_b) @ fc2_w.T + fc2_b

    inputs = dict(values)
    inputs.update({f"t_{n}": t for n, t in tangents.items()})
    inputs["heads"] = torch.tensor(H, dtype=torch.int64)
    return inputs, jvp(block, [values[n] for n in BLOCK_NAMES], [tangents[n] for n in BLOCK_NAMES])


# Odd, non-square shapes: Tq != Tk, d != dv, no dimension a power of two.
CASES = [
    dict(name="attention, key padding", kind="attention", B=2, H=3, Tq=4, Tk=6, d=5, dv=3, lengths=[6, 3], seed=1),
    dict(name="attention, causal, scale 0.3", kind="attention", B=2, H=3, Tq=4, Tk=6, d=5, dv=3, causal=True,
         scale=0.3, seed=2),
    dict(name="attention, causal + padding", kind="attention", B=2, H=3, Tq=5, Tk=5, d=5, dv=3, causal=True,
         lengths=[5, 2], seed=3),
    dict(name="attention, only v moving", kind="attention", B=3, H=2, Tq=3, Tk=7, d=3, dv=5, lengths=[7, 1, 4],
         moving="v", seed=4),
    dict(name="layer norm", kind="layer_norm", shape=[2, 3, 7], seed=5),
    dict(name="cross-entropy", kind="cross_entropy", N=7, classes=5, ignored=3, seed=6),
    dict(name="gelu", kind="gelu", shape=[3, 5], seed=7),
    dict(name="gelu, tanh form", kind="gelu", shape=[3, 5], tanh=True, seed=8),
    dict(name="GPT block", kind="block", B=2, T=5, C=6, H=3, seed=9),
]
BUILDERS = {"attention": attention_case, "layer_norm": layer_norm_case, "cross_entropy": cross_entropy_case,
            "gelu": gelu_case, "block": block_case}


def run_case(case, program, workdir):
    """Prints one row per file; returns [(label, elements, max abs, max rel, ok)] for each route."""
    generator = torch.Generator().manual_seed(case["seed"])
    inputs, (output, tangent) = BUILDERS[case["kind"]](case, generator)
    out_dir = run_program(case, inputs, program, workdir)
    routes = {"": "fast kernels", "reference_": "reference twins"}
    if out_dir is None:
        return [(f"{case['name']}, {label}", 0, math.nan, math.nan, False) for label in routes.values()]
    results = []
    for prefix, label in routes.items():
        all_ok, elements, max_abs, max_rel = True, 0, 0.0, 0.0
        for name, want in (("output", output), ("tangent", tangent)):
            got = read_npy(os.path.join(out_dir, prefix + name + ".npy"))
            if got.dtype != torch.float64 or got.shape != want.shape:
                print(f"  {prefix + name}: attograd wrote {got.dtype} {list(got.shape)}, "
                      f"expected float64 {list(want.shape)}")
                all_ok = False
                continue
            abs_err, rel_err, ok = compare(got, want)
            all_ok, max_abs, max_rel = all_ok and ok, max(max_abs, abs_err), max(max_rel, rel_err)
            elements += want.numel()
            shape = "x".join(str(s) for s in want.shape) or "scalar"
            print(f"  {prefix + name:<20} {shape:>10} {want.abs().max().item():10.3e} {abs_err:10.2e} "
                  f"{rel_err:10.2e}  {'ok' if ok else 'MISMATCH'}")
        results.append((f"{case['name']}, {label}", elements, max_abs, max_rel, all_ok))
    return results


def main():
    return run_all("forward_parity", "--forward-grads", __doc__, CASES, run_case, 20,
                   f"torch {torch.__version__}'s forward AD", summary_width=52)


if __name__ == "__main__":
    sys.exit(main())
