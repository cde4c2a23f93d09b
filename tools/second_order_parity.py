"""Checks attograd's second derivatives against PyTorch, in float64.

Each case below draws its inputs in PyTorch from a seeded generator, writes them as .npy files,
runs second_order_grads (tools/second_order_grads.cpp) on them, reads back the .npy files it
writes, and compares them with what torch.autograd.grad computes, with create_graph, for the same
function on the same float64 values:

  - Hessian-vector products of scaled dot-product attention in (q, k, v) jointly, for the loss
    L = sum(out * g): with a key padding mask and Tq != Tk, causal with Tq != Tk (the diagonal
    shifted so that the last query sees every key, attograd's rule) and a non-default scale,
    and causal with key padding;
  - the Hessian-vector product of layer norm in (x, weight, bias) jointly, which includes the
    mixed x-weight block;
  - the Hessian-vector products of RMSNorm in (x, weight) and of SwiGLU in (x, gate, up, down)
    jointly, and SwiGLU's in x alone by forward over reverse (ag::hvp);
  - a gradient penalty P = ||dL/dx||^2 on a two-layer MLP with exact GELU and cross-entropy:
    dP with respect to x and every parameter, with the first layer as linear then gelu, and as
    the fused linear_gelu.

    /usr/bin/python3 tools/second_order_parity.py --second-order-grads build/tools/second_order_grads

PyTorch's side is written out by hand from elementary ops (attention as softmax(q k^T * scale,
masked scores -inf) v, layer norm from mean and variance), so it does not rest on the fused
kernels whose double backward is under test on the other side; for layer norm the script also
reports whether F.layer_norm's double backward agrees with the hand-written one.

Tolerances, the reading of the relative error, the exit codes (0 all agree, 1 any mismatch, 77
skipped without PyTorch) and the byte helpers are those of tools/pytorch_parity.py.

  .npy v1.0: "\\x93NUMPY" 1 0, u16 LE header length, a Python dict literal, raw data
"""
import argparse
import ast
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("second_order_parity: skipped (PyTorch not installed for this python3)")
    sys.exit(77)

# This script's directory is on sys.path when it is run as a script, so its sibling imports;
# without leaving a __pycache__ in the source tree.
sys.dont_write_bytecode = True
from pytorch_parity import ATOL, DTYPE_NAMES, RTOL, compare, tensor_bytes, tensor_from_bytes  # noqa: E402

# --- .npy files ------------------------------------------------------------------------------

NPY_DESCR = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "BOOL": "|b1"}
NPY_DTYPE = {descr: name for name, descr in NPY_DESCR.items()}


def write_npy(path, t):
    """NumPy's .npy version 1.0 for a float32, float64, int64 or bool tensor of any rank."""
    shape = ", ".join(str(s) for s in t.shape) + ("," if t.dim() == 1 else "")  # Python's (4,) and ()
    header = "{'descr': '" + NPY_DESCR[DTYPE_NAMES[t.dtype]] + "', 'fortran_order': False, 'shape': (" + shape + "), }"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"  # the data starts 64-byte aligned
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin-1"))
        f.write(tensor_bytes(t))


def read_npy(path):
    """A .npy file (versions 1.0 to 3.0, C order) as a tensor; refuses anything else."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY" or raw[6] not in (1, 2, 3):
        raise ValueError(f"{path}: not a .npy file of version 1, 2 or 3")
    if raw[6] == 1:
        (n,), start = struct.unpack("<H", raw[8:10]), 10
    else:
        (n,), start = struct.unpack("<I", raw[8:12]), 12
    header = ast.literal_eval(raw[start:start + n].decode("latin-1" if raw[6] < 3 else "utf-8"))
    if header.get("fortran_order") or header.get("descr") not in NPY_DTYPE:
        raise ValueError(f"{path}: unsupported header {header}")
    data, shape = raw[start + n:], list(header["shape"])
    dtype_name = NPY_DTYPE[header["descr"]]
    torch_dtype = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool}[dtype_name]
    expected = math.prod(shape) * torch.tensor([], dtype=torch_dtype).element_size()
    if len(data) != expected:
        raise ValueError(f"{path}: {len(data)} bytes of data for shape {shape}, expected {expected}")
    return tensor_from_bytes(data, dtype_name, shape)


# --- the references ----------------------------------------------------------------------------

def normal(generator, *shape, std=1.0):
    return std * torch.randn(shape, generator=generator, dtype=torch.float64)


def leaves(tensors):
    return [t.clone().requires_grad_() for t in tensors]


def grad_and_hvp(loss_of, inputs, directions):
    """The gradient of loss_of(*inputs) and its Hessian times `directions`, as
    H u = d/dtheta <dL/dtheta, u>: one backward pass with create_graph, and one through it."""
    xs = leaves(inputs)
    grads = torch.autograd.grad(loss_of(*xs), xs, create_graph=True)
    inner = sum((g * u).sum() for g, u in zip(grads, directions))
    return [g.detach() for g in grads], [h.detach() for h in torch.autograd.grad(inner, xs)]


def attention_allowed(c):
    """[B, 1, Tq, Tk] bool, true where a query may attend to a key: the key padding mask
    (key < length) and the causal rule key <= query + (Tk - Tq), as attograd defines them."""
    allowed = torch.ones(c["B"], 1, c["Tq"], c["Tk"], dtype=torch.bool)
    keys = torch.arange(c["Tk"])
    if "lengths" in c:
        allowed &= (keys[None, :] < torch.tensor(c["lengths"])[:, None])[:, None, None, :]
    if c.get("causal"):
        allowed &= keys[None, :] <= torch.arange(c["Tq"])[:, None] + (c["Tk"] - c["Tq"])
    assert allowed.any(-1).all(), "every query must see a key: PyTorch's softmax of a row of -inf is NaN"
    return allowed


def attention_case(c, generator):
    """L = sum(attention(q, k, v) * g); H u in (q, k, v) jointly, and the q-q block alone."""
    B, H, Tq, Tk, d, dv = (c[n] for n in ("B", "H", "Tq", "Tk", "d", "dv"))
    q, k, u_q = normal(generator, B, H, Tq, d), normal(generator, B, H, Tk, d), normal(generator, B, H, Tq, d)
    v, u_k, u_v = normal(generator, B, H, Tk, dv), normal(generator, B, H, Tk, d), normal(generator, B, H, Tk, dv)
    g = normal(generator, B, H, Tq, dv)
    inputs = dict(q=q, k=k, v=v, g=g, u_q=u_q, u_k=u_k, u_v=u_v)
    if "lengths" in c:
        inputs["lengths"] = torch.tensor(c["lengths"], dtype=torch.int64)
    if c.get("causal"):
        inputs["causal"] = torch.tensor(True)
    if "scale" in c:
        inputs["scale"] = torch.tensor(c["scale"], dtype=torch.float64)

    allowed, scale = attention_allowed(c), c.get("scale", 1 / math.sqrt(d))

    def loss_of(q, k, v):
        scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~allowed, float("-inf"))
        return (scores.softmax(dim=-1) @ v * g).sum()

    grads, hvp = grad_and_hvp(loss_of, [q, k, v], [u_q, u_k, u_v])
    _, (hvp_q_only,) = grad_and_hvp(lambda q: loss_of(q, k, v), [q], [u_q])
    want = {"loss": loss_of(q, k, v)}
    want.update({f"grad_{n}": t for n, t in zip("qkv", grads)})
    want.update({f"hvp_{n}": t for n, t in zip("qkv", hvp)})
    want["hvp_q_only"] = hvp_q_only
    return inputs, {"": want}, []


LAYER_NORM_EPS = 1e-5


def layer_norm_by_hand(x, weight, bias):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as layer norm's
    return (x - mean) / torch.sqrt(var + LAYER_NORM_EPS) * weight + bias


def layer_norm_case(c, generator):
    """L = sum(y * g) + sum(y^2) / 2: the linear part's Hessian is layer norm's own second
    derivative (x-x and x-weight; nothing in bias), the quadratic part couples bias too."""
    D = c["shape"][-1]
    x, g = normal(generator, *c["shape"]), normal(generator, *c["shape"])
    weight, bias = 1 + normal(generator, D, std=0.3), normal(generator, D, std=0.3)
    u_x, u_weight, u_bias = normal(generator, *c["shape"]), normal(generator, D), normal(generator, D)
    inputs = dict(x=x, weight=weight, bias=bias, g=g, u_x=u_x, u_weight=u_weight, u_bias=u_bias)

    def loss_with(layer_norm):
        return lambda x, w, b: (lambda y: (y * g).sum() + (y * y).sum() / 2)(layer_norm(x, w, b))

    names = ("x", "weight", "bias")
    loss_of = loss_with(layer_norm_by_hand)
    grads, hvp = grad_and_hvp(loss_of, [x, weight, bias], [u_x, u_weight, u_bias])
    want = {"loss": loss_of(x, weight, bias)}
    want.update({f"grad_{n}": t for n, t in zip(names, grads)})
    want.update({f"hvp_{n}": t for n, t in zip(names, hvp)})

    # PyTorch's own F.layer_norm, for the record: not part of the verdict.
    builtin = loss_with(lambda x, w, b: F.layer_norm(x, (D,), w, b, eps=LAYER_NORM_EPS))
    grads_f, hvp_f = grad_and_hvp(builtin, [x, weight, bias], [u_x, u_weight, u_bias])
    ref = torch.cat([t.reshape(-1) for t in grads + hvp])
    got = torch.cat([t.reshape(-1) for t in grads_f + hvp_f])
    abs_err, rel_err, ok = compare(got, ref)
    notes = [f"F.layer_norm's gradient and H u against the hand-written layer norm: max abs {abs_err:.2e}, "
             f"max rel {rel_err:.2e}, {'agree' if ok else 'DISAGREE'} (rtol {RTOL:g}, atol {ATOL:g})"]
    return inputs, {"": want}, notes


def rms_norm_case(c, generator):
    """As the layer norm case, without the centring and the bias: y = x / sqrt(mean(x^2) + eps) w."""
    D = c["shape"][-1]
    x, g = normal(generator, *c["shape"]), normal(generator, *c["shape"])
    weight = 1 + normal(generator, D, std=0.3)
    u_x, u_weight = normal(generator, *c["shape"]), normal(generator, D)
    inputs = dict(x=x, weight=weight, g=g, u_x=u_x, u_weight=u_weight)

    def loss_of(x, w):
        y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + LAYER_NORM_EPS) * w
        return (y * g).sum() + (y * y).sum() / 2

    grads, hvp = grad_and_hvp(loss_of, [x, weight], [u_x, u_weight])
    want = {"loss": loss_of(x, weight)}
    want.update({f"grad_{n}": t for n, t in zip(("x", "weight"), grads)})
    want.update({f"hvp_{n}": t for n, t in zip(("x", "weight"), hvp)})
    return inputs, {"": want}, []


def swiglu_case(c, generator):
    """y = (silu(x gate^T) * x up^T) down^T, silu(v) = v sigmoid(v), with the same loss."""
    shape, hidden, out = c["shape"], c["hidden"], c["out"]
    x, g = normal(generator, *shape), normal(generator, *shape[:-1], out)
    gate, up = normal(generator, hidden, shape[-1], std=0.5), normal(generator, hidden, shape[-1], std=0.5)
    down = normal(generator, out, hidden, std=0.5)
    names = ("x", "gate", "up", "down")
    values = [x, gate, up, down]
    directions = [normal(generator, *t.shape) for t in values]
    inputs = dict(zip(names, values), g=g, **{f"u_{n}": u for n, u in zip(names, directions)})

    def loss_of(x, gate, up, down):
        h1 = x @ gate.T
        y = (h1 * torch.sigmoid(h1) * (x @ up.T)) @ down.T
        return (y * g).sum() + (y * y).sum() / 2

    grads, hvp = grad_and_hvp(loss_of, values, directions)
    want = {"loss": loss_of(*values)}
    want.update({f"grad_{n}": t for n, t in zip(names, grads)})
    want.update({f"hvp_{n}": t for n, t in zip(names, hvp)})
    _, hvp_x = grad_and_hvp(lambda x: loss_of(x, gate, up, down), [x], [directions[0]])
    want["hvp_x_only"] = hvp_x[0]
    return inputs, {"": want}, []


def gradient_penalty_case(c, generator):
    """P = ||dL/dx||^2 for L = cross_entropy(linear(gelu(linear(x, w1, b1)), w2, b2), targets),
    one target ignored (-100, PyTorch's and attograd's default ignore_index). attograd writes
    the same results for the fused linear_gelu under "fused_"; the reference is the same."""
    N, d_in, hidden, classes = c["N"], c["d_in"], c["hidden"], c["classes"]
    x = normal(generator, N, d_in)
    w1, b1 = normal(generator, hidden, d_in, std=0.7), normal(generator, hidden, std=0.5)
    w2, b2 = normal(generator, classes, hidden, std=0.7), normal(generator, classes, std=0.5)
    targets = torch.randint(0, classes, (N,), generator=generator)
    targets[c["ignored"]] = -100
    inputs = dict(x=x, w1=w1, b1=b1, w2=w2, b2=b2, targets=targets)

    names = ("x", "w1", "b1", "w2", "b2")
    xs = leaves([x, w1, b1, w2, b2])
    x_, w1_, b1_, w2_, b2_ = xs
    hidden_out = F.gelu(F.linear(x_, w1_, b1_), approximate="none")
    loss = F.cross_entropy(F.linear(hidden_out, w2_, b2_), targets)
    (dx,) = torch.autograd.grad(loss, x_, create_graph=True)
    penalty = (dx * dx).sum()
    want = {"loss": loss.detach(), "grad_x": dx.detach(), "penalty": penalty.detach()}
    want.update({f"penalty_grad_{n}": t for n, t in zip(names, torch.autograd.grad(penalty, xs))})
    return inputs, {"": want, "fused_": want}, []


# Shapes are odd and non-square on purpose: Tq != Tk, d != dv, no dimension a power of two.
CASES = [
    dict(name="attention, key padding", kind="attention", B=2, H=3, Tq=4, Tk=6, d=5, dv=3,
         lengths=[6, 3], seed=1),
    dict(name="attention, causal, scale 0.3", kind="attention", B=2, H=3, Tq=4, Tk=6, d=5, dv=3,
         causal=True, scale=0.3, seed=2),
    dict(name="attention, causal + padding", kind="attention", B=2, H=3, Tq=5, Tk=5, d=5, dv=3,
         causal=True, lengths=[5, 2], seed=3),
    dict(name="layer norm", kind="layer_norm", shape=[2, 3, 7], seed=4),
    dict(name="rms norm", kind="rms_norm", shape=[2, 3, 7], seed=6),
    dict(name="swiglu", kind="swiglu", shape=[2, 3, 5], hidden=7, out=4, seed=7),
    dict(name="swiglu, one row", kind="swiglu", shape=[5], hidden=3, out=6, seed=8),
    dict(name="gradient penalty", kind="gradient_penalty", N=5, d_in=4, hidden=6, classes=3, ignored=2,
         seed=5),
]
BUILDERS = {"attention": attention_case, "layer_norm": layer_norm_case, "rms_norm": rms_norm_case,
            "swiglu": swiglu_case, "gradient_penalty": gradient_penalty_case}
VARIANT_LABELS = {"": "", "fused_": " (linear_gelu)"}


def describe(case):
    skip = ("name", "kind", "seed")
    return ", ".join(f"{k} {v}" for k, v in case.items() if k not in skip)


def run_program(case, inputs, program, workdir):
    """Writes the case's inputs as .npy files, runs `program KIND IN_DIR OUT_DIR` on them and returns
    OUT_DIR, or None (having said why) when the program failed."""
    in_dir, out_dir = (os.path.join(workdir, f"{case['seed']}-{side}") for side in ("in", "out"))
    os.makedirs(in_dir)
    os.makedirs(out_dir)
    for name, t in inputs.items():
        write_npy(os.path.join(in_dir, name + ".npy"), t)
    run = subprocess.run([program, case["kind"], in_dir, out_dir], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"  {os.path.basename(program)} exited with {run.returncode}: {run.stderr.strip()}")
        return None
    return out_dir


def run_case(case, program, workdir):
    """Prints one row per tensor; returns [(label, elements, max abs, max rel, ok)], one per variant."""
    generator = torch.Generator().manual_seed(case["seed"])
    inputs, variants, notes = BUILDERS[case["kind"]](case, generator)
    out_dir = run_program(case, inputs, program, workdir)
    if out_dir is None:
        return [(case["name"] + VARIANT_LABELS[p], 0, math.nan, math.nan, False) for p in variants]

    results = []
    for prefix, want in variants.items():
        all_ok, elements, max_abs, max_rel = True, 0, 0.0, 0.0
        for name, reference in want.items():
            path = os.path.join(out_dir, prefix + name + ".npy")
            if not os.path.exists(path):
                print(f"  {prefix + name}: attograd wrote no file")
                all_ok = False
                continue
            got = read_npy(path)
            if got.dtype != torch.float64 or got.shape != reference.shape:
                print(f"  {prefix + name}: attograd wrote {got.dtype} {list(got.shape)}, "
                      f"expected float64 {list(reference.shape)}")
                all_ok = False
                continue
            abs_err, rel_err, ok = compare(got, reference)
            all_ok, max_abs, max_rel = all_ok and ok, max(max_abs, abs_err), max(max_rel, rel_err)
            elements += reference.numel()
            shape = "x".join(str(s) for s in reference.shape) or "scalar"
            print(f"  {prefix + name:<26} {shape:>10} {reference.abs().max().item():10.3e} {abs_err:10.2e} "
                  f"{rel_err:10.2e}  {'ok' if ok else 'MISMATCH'}")
        results.append((case["name"] + VARIANT_LABELS[prefix], elements, max_abs, max_rel, all_ok))
    for note in notes:
        print(f"  {note}")
    return results


def main():
    return run_all("second_order_parity", "--second-order-grads", __doc__, CASES, run_case, 26,
                   f"torch {torch.__version__}")


def run_all(script, flag, doc, cases, run_case, label_width, reference, summary_width=42):
    """The main of the parity script `script`: reads the path of the attograd program from `flag`,
    runs every case through run_case(case, program_path, workdir) -> [(label, elements, max abs,
    max rel, ok)], printing each case's header, and ends with print_summary's table and exit code."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument(flag, required=True, help=f"path to the {flag[2:].replace('-', '_')} program")
    path = getattr(parser.parse_args(), flag[2:].replace("-", "_"))
    if not os.access(path, os.X_OK):
        print(f"{script}: program '{path}' not found or not executable")
        return 1
    summary = []
    with tempfile.TemporaryDirectory(prefix=script + "_") as workdir:
        for case in cases:
            print(f"{case['name']}: {describe(case)}")
            print(f"  {'':<{label_width}} {'shape':>10} {'max |ref|':>10} {'max abs':>10} {'max rel':>10}")
            summary += run_case(case, path, workdir)
            print()
    return print_summary(script, summary, reference, width=summary_width)


def print_summary(program, summary, reference, width=42):
    """The closing table of [(label, elements, max abs, max rel, ok)], and the exit code."""
    print(f"{'case':<{width}} {'elements':>8} {'max abs err':>12} {'max rel err':>12}  result")
    for label, elements, max_abs, max_rel, ok in summary:
        print(f"{label:<{width}} {elements:>8} {max_abs:12.2e} {max_rel:12.2e}  {'pass' if ok else 'FAIL'}")
    failed = [label for label, *_, ok in summary if not ok]
    if failed:
        print(f"{program}: MISMATCH in {', '.join(failed)} (rtol {RTOL:g}, atol {ATOL:g})")
        return 1
    print(f"{program}: all {len(summary)} checks agree with {reference} (rtol {RTOL:g}, atol {ATOL:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
