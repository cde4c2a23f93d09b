"""Checks attograd's comparisons, selections and extrema against PyTorch's own ops, in float64.

Each case below draws its operands in PyTorch from a seeded generator (on a grid of quarters
where ties and bound hits are the point), writes them as .npy files, runs ops_grads
(tools/ops_grads.cpp) on them, and compares what it writes back, by the fast kernels and again
by the naive backend's loops, with PyTorch's op on the same values:

  - the value;
  - for a floating result, the gradient of sum(out * weight) for every operand (torch.autograd)
    and the tangent when every operand moves (torch.autograd.forward_ad);
  - for a bool or int64 result, every element exactly.

The ops: index_select, index_add, gather and scatter_add with repeated indices, and stack;
abs; maximum and minimum with broadcasting, ties included (PyTorch splits a tie's
gradient evenly, and so does attograd); where with a broadcast condition; clamp with both
bounds, one bound, and min > max; max and min over a dim (values with ties, and indices),
amax, amin and argmin without ties, max and min of everything without ties (on a tie
PyTorch's amax, amin, max() and min() share the gradient among the tied elements, where
attograd's go to the first: docs/models.md lists the difference); the six comparisons,
broadcast, with ties and a NaN; the sum and mean of a bool tensor and the sum of an int64 one.

Tangents are compared where the value is a number. Where maximum or minimum meets a NaN,
PyTorch 1.13's backward passes dy to both sides while its forward rule moves the result with b
alone; attograd's forward rule is its backward's transpose (the tangent there is a-dot + b-dot),
so the two tangents part at that element and nowhere else.

    /usr/bin/python3 tools/ops_parity.py --ops-grads build/tools/ops_grads

Tolerances (RTOL 1e-10, ATOL 1e-13), the reading of the relative error, the exit codes (0 all
agree, 1 any mismatch, 77 skipped without PyTorch) and the .npy helpers are those of
tools/pytorch_parity.py and tools/second_order_parity.py.
"""
import math
import os
import sys

try:
    import torch
    import torch.autograd.forward_ad as fwAD
except ImportError:
    print("ops_parity: skipped (PyTorch not installed for this python3)")
    sys.exit(77)

sys.dont_write_bytecode = True
from pytorch_parity import compare  # noqa: E402
from second_order_parity import read_npy, run_all, run_program  # noqa: E402


def normal(generator, *shape):
    return torch.randn(shape, generator=generator, dtype=torch.float64)


def quarters(generator, *shape, span=3):
    """Values k / 4 for integer k in [-4 span, 4 span]: exact in float64, and often equal."""
    return torch.randint(-4 * span, 4 * span + 1, shape, generator=generator).to(torch.float64) / 4


# Each op as PyTorch writes it, from the operands (in ops_grads's order) and the case.
TORCH_OPS = {
    "abs": lambda c, x: x.abs(),
    "maximum": lambda c, a, b: torch.maximum(a, b),
    "minimum": lambda c, a, b: torch.minimum(a, b),
    "where": lambda c, a, b: torch.where(c["cond_tensor"], a, b),
    "clamp": lambda c, x: x.clamp(c.get("lo"), c.get("hi")),
    "max_dim": lambda c, x: x.max(c["dim"], c.get("keepdim", False)).values,
    "min_dim": lambda c, x: x.min(c["dim"], c.get("keepdim", False)).values,
    "max_indices": lambda c, x: x.max(c["dim"], c.get("keepdim", False)).indices,
    "min_indices": lambda c, x: x.min(c["dim"], c.get("keepdim", False)).indices,
    "amax": lambda c, x: x.amax(c["dim"], c.get("keepdim", False)),
    "amin": lambda c, x: x.amin(c["dim"], c.get("keepdim", False)),
    "argmin": lambda c, x: x.argmin(c["dim"], c.get("keepdim", False)),
    "max_all": lambda c, x: x.max(),
    "min_all": lambda c, x: x.min(),
    "eq": lambda c, a, b: a == b,
    "ne": lambda c, a, b: a != b,
    "lt": lambda c, a, b: a < b,
    "le": lambda c, a, b: a <= b,
    "gt": lambda c, a, b: a > b,
    "ge": lambda c, a, b: a >= b,
    "index_select": lambda c, x: x.index_select(c["dim"], c["index_tensor"]),
    "index_add": lambda c, s, src: s.index_add(c["dim"], c["index_tensor"], src),
    "gather": lambda c, x: x.gather(c["dim"], c["index_tensor"]),
    "scatter_add": lambda c, s, src: s.scatter_add(c["dim"], c["index_tensor"], src),
    "stack": lambda c, a, b: torch.stack([a, b], c["dim"]),
    "sum_bool": lambda c: c["mask_tensor"].sum(-1),
    "mean_bool": lambda c: c["mask_tensor"].to(torch.float32).mean(),
    "sum_int64": lambda c: c["ids_tensor"].sum(0),
}
OPERANDS = {"abs": ["x"], "clamp": ["x"], "max_dim": ["x"], "min_dim": ["x"], "max_indices": ["x"],
            "min_indices": ["x"], "amax": ["x"], "amin": ["x"], "argmin": ["x"], "max_all": ["x"],
            "min_all": ["x"], "sum_bool": [], "mean_bool": [], "sum_int64": [], "index_select": ["x"],
            "gather": ["x"], "index_add": ["self", "src"], "scatter_add": ["self", "src"]}


def build(case, g):
    """The files ops_grads reads, and PyTorch's value, gradients and tangent for them."""
    kind = case["kind"]
    names = OPERANDS.get(kind, ["a", "b"])
    span = case.get("span", 3)
    draw = (lambda g, *shape: quarters(g, *shape, span=span)) if case.get("grid") else normal
    values = {n: draw(g, *case["shapes"][i]) for i, n in enumerate(names)}
    if "nan" in case:
        values[names[0]].view(-1)[case["nan"]] = math.nan
    files = dict(values)
    if kind == "where":
        case["cond_tensor"] = torch.rand(case["cond"], generator=g) < 0.5
        files["cond"] = case["cond_tensor"]
    if kind == "sum_bool" or kind == "mean_bool":
        case["mask_tensor"] = torch.rand(case["mask"], generator=g) < 0.4
        files["mask"] = case["mask_tensor"]
    if kind == "sum_int64":
        big = 2 ** 62
        case["ids_tensor"] = torch.tensor([[big, -5, 7], [big - 1, 3, -(2 ** 63)], [-big, 2, 1]], dtype=torch.int64)
        files["ids"] = case["ids_tensor"]
    if "index" in case:  # drawn with repeats: their gradients add up
        case["index_tensor"] = torch.randint(0, case["index_range"], case["index"], generator=g)
        files["index"] = case["index_tensor"]
    for key in ("lo", "hi"):
        if key in case:
            files[key] = torch.tensor(case[key], dtype=torch.float64)
    if "dim" in case:
        files["dim"] = torch.tensor(case["dim"], dtype=torch.int64)
        files["keepdim"] = torch.tensor(case.get("keepdim", False))
    leaves = [values[n].clone().requires_grad_() for n in names]
    out = TORCH_OPS[kind](case, *leaves)
    want = {"output": out.detach()}
    if out.is_floating_point() and names:
        weight = normal(g, *out.shape)
        files["weight"] = weight
        grads = torch.autograd.grad((out * weight).sum(), leaves)
        want.update({f"grad_{n}": gr for n, gr in zip(names, grads)})
        tangents = {n: normal(g, *values[n].shape) for n in names}
        files.update({f"t_{n}": t for n, t in tangents.items()})
        with fwAD.dual_level():
            duals = [fwAD.make_dual(values[n], tangents[n]) for n in names]
            want["tangent"] = fwAD.unpack_dual(TORCH_OPS[kind](case, *duals)).tangent.detach()
    return files, want


def same(got, want):
    """(max abs err, max rel err, ok): exact for bool and int64 results, NaN where PyTorch has NaN."""
    if not want.is_floating_point():
        ok = got.dtype == want.dtype and torch.equal(got, want)
        return (0.0 if ok else math.inf), (0.0 if ok else math.inf), ok
    nan = torch.isnan(want)
    if not torch.equal(torch.isnan(got), nan):
        return math.inf, math.inf, False
    return compare(got[~nan], want[~nan]) if (~nan).any() else (0.0, 0.0, True)


def run_case(case, program, workdir):
    generator = torch.Generator().manual_seed(case["seed"])
    files, want = build(case, generator)
    out_dir = run_program(case, files, program, workdir)
    routes = {"": "fast", "naive_": "naive"}
    if out_dir is None:
        return [(f"{case['name']}, {label}", 0, math.nan, math.nan, False) for label in routes.values()]
    results = []
    for prefix, label in routes.items():
        all_ok, elements, max_abs, max_rel = True, 0, 0.0, 0.0
        for name, w in want.items():
            path = os.path.join(out_dir, prefix + name + ".npy")
            if not os.path.exists(path):
                print(f"  {prefix + name}: attograd wrote no such file")
                all_ok = False
                continue
            got = read_npy(path)
            if got.dtype != w.dtype or got.shape != w.shape:
                print(f"  {prefix + name}: attograd wrote {got.dtype} {list(got.shape)}, expected {w.dtype} {list(w.shape)}")
                all_ok = False
                continue
            if name == "tangent":  # where the value is NaN, the two libraries' tangents part (docstring)
                keep = ~torch.isnan(want["output"])
                got, w = got[keep], w[keep]
            abs_err, rel_err, ok = same(got, w)
            all_ok, max_abs, max_rel = all_ok and ok, max(max_abs, abs_err), max(max_rel, rel_err)
            elements += w.numel()
            shape = "x".join(str(s) for s in w.shape) or "scalar"
            scale = f"{w[~torch.isnan(w)].abs().max().item():10.3e}" if w.is_floating_point() and w.numel() else ""
            print(f"  {prefix + name:<18} {shape:>10} {scale or str(w.dtype)[6:]:>10} {abs_err:10.2e} "
                  f"{rel_err:10.2e}  {'ok' if ok else 'MISMATCH'}")
        results.append((f"{case['name']}, {label}", elements, max_abs, max_rel, all_ok))
    return results


# Odd, non-square shapes, broadcasting in every two-operand case.
CASES = [
    dict(name="abs", kind="abs", shapes=[(3, 5)], seed=1),
    dict(name="maximum, ties", kind="maximum", shapes=[(3, 1, 5), (4, 1)], grid=True, seed=2),
    dict(name="minimum, ties", kind="minimum", shapes=[(2, 5), (3, 1, 5)], grid=True, seed=3),
    dict(name="maximum, a NaN", kind="maximum", shapes=[(3, 4), (4,)], nan=5, seed=4),
    dict(name="where", kind="where", shapes=[(1, 4, 5), (4, 1)], cond=(3, 1, 5), seed=5),
    dict(name="clamp, bounds hit", kind="clamp", shapes=[(3, 7)], grid=True, lo=-1.0, hi=1.5, seed=6),
    dict(name="clamp, min only", kind="clamp", shapes=[(5, 3)], lo=0.25, seed=7),
    dict(name="clamp, max only", kind="clamp", shapes=[(5, 3)], hi=-0.5, seed=8),
    dict(name="clamp, min > max", kind="clamp", shapes=[(4, 3)], lo=1.0, hi=-1.0, seed=9),
    dict(name="max over dim 1, ties", kind="max_dim", shapes=[(3, 7, 2)], grid=True, dim=1, seed=10),
    dict(name="min over dim -1, keepdim, ties", kind="min_dim", shapes=[(3, 5)], grid=True, dim=-1, keepdim=True,
         seed=11),
    dict(name="max's indices, ties", kind="max_indices", shapes=[(3, 7, 2)], grid=True, span=1, dim=1, seed=27),
    dict(name="min's indices, ties", kind="min_indices", shapes=[(4, 3, 5)], grid=True, dim=0, seed=12),
    dict(name="amax over dim 0", kind="amax", shapes=[(5, 3)], dim=0, seed=13),
    dict(name="amin over dim 2, keepdim", kind="amin", shapes=[(2, 3, 5)], dim=2, keepdim=True, seed=14),
    dict(name="argmin, a NaN", kind="argmin", shapes=[(3, 5)], dim=1, nan=7, seed=15),
    dict(name="max of all", kind="max_all", shapes=[(3, 5)], seed=16),
    dict(name="min of all", kind="min_all", shapes=[(5, 3)], seed=17),
    dict(name="eq, ties", kind="eq", shapes=[(3, 5), (5,)], grid=True, span=1, seed=28),
    dict(name="ne, a NaN", kind="ne", shapes=[(3, 5), (3, 1)], grid=True, nan=2, seed=19),
    dict(name="lt", kind="lt", shapes=[(3, 1), (4,)], grid=True, seed=20),
    dict(name="le", kind="le", shapes=[(2, 3, 1), (3, 4)], grid=True, seed=21),
    dict(name="gt, a NaN", kind="gt", shapes=[(5,), (3, 5)], grid=True, nan=1, seed=22),
    dict(name="ge", kind="ge", shapes=[(3, 5), (3, 5)], grid=True, seed=23),
    dict(name="index_select, repeats", kind="index_select", shapes=[(3, 5, 2)], dim=1, index=(7,), index_range=5,
         seed=29),
    dict(name="index_add, repeats", kind="index_add", shapes=[(4, 3), (6, 3)], dim=0, index=(6,), index_range=4,
         seed=30),
    dict(name="gather, repeats", kind="gather", shapes=[(3, 5, 2)], dim=1, index=(3, 4, 2), index_range=5, seed=31),
    dict(name="scatter_add, repeats", kind="scatter_add", shapes=[(3, 5, 2), (3, 4, 2)], dim=-2, index=(3, 4, 2),
         index_range=5, seed=32),
    dict(name="stack", kind="stack", shapes=[(3, 5), (3, 5)], dim=1, seed=33),
    dict(name="sum of bool", kind="sum_bool", shapes=[], mask=(3, 7), seed=24),
    dict(name="mean of bool", kind="mean_bool", shapes=[], mask=(5, 3), seed=25),
    dict(name="sum of int64, past 2^53", kind="sum_int64", shapes=[], seed=26),
]


def main():
    return run_all("ops_parity", "--ops-grads", __doc__, CASES, run_case, 18,
                   f"torch {torch.__version__}'s ops", summary_width=44)


if __name__ == "__main__":
    sys.exit(main())
