"""Checks attograd's GPT against PyTorch: the loss and every parameter's gradient, in float64.

For each case below it builds a nanoGPT-layout GPT as plain PyTorch tensors with random weights,
saves it as a safetensors checkpoint (the layout attograd reads), saves token ids and targets as
.npy, runs gpt_grads (tools/gpt_grads.cpp) on them, reads back the gradients it writes, and
compares them with what torch.autograd computes for the same model and batch.

    /usr/bin/python3 tools/pytorch_parity.py --gpt-grads build/tools/gpt_grads

Both sides compute in float64, so they differ only by rounding (a few 1e-15 here). An element
passes when |attograd - torch| <= ATOL + RTOL |torch|, with RTOL 1e-10 and ATOL 1e-13: about a
hundred times the differences measured, far below any real bug. The table's relative error is
taken over the elements with |torch| >= ATOL / RTOL, where the relative term decides; smaller
elements come out of cancellation and are judged by ATOL. Exits 0 when every case agrees, 1 on
any mismatch, and 77 (meson's "skipped") when this python3 has no PyTorch.

The files are written and read with the standard library only (struct and json), so the check
covers the file formats too: attograd reads checkpoints written here, and the reader here parses
the gradient file attograd writes, whose names and shapes are those of a checkpoint.

  safetensors: [u64 LE header length N][N bytes of JSON header, space-padded][raw data]
               header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
                       "__metadata__": {"config": "{...}", "vocab": "[...]", ...}}
  .npy v1.0:   "\\x93NUMPY" 1 0, u16 LE header length, a Python dict literal, raw data
"""
import argparse
import json
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
    print("pytorch_parity: skipped (PyTorch not installed for this python3)")
    sys.exit(77)

RTOL = 1e-10
ATOL = 1e-13

# Each case is one checkpoint and one batch, with shapes chosen to be awkward: a head size that
# is not a power of two, one head, heads of size 1, a vocabulary smaller than the context, T
# shorter than block_size, T = 1, no biases, float32 files, and a file that carries nanoGPT's
# copy of the tied head as lm_head.weight. `tokens` picks the vocabulary in the metadata.
CASES = [
    dict(name="odd shapes", vocab_size=11, block_size=17, n_layer=2, n_head=3, n_embd=48, bias=True,
         batch=3, seq=17, seed=1, tokens="ascii"),
    dict(name="one head", vocab_size=65, block_size=8, n_layer=1, n_head=1, n_embd=16, bias=True,
         batch=2, seq=5, seed=2, tokens="cjk"),
    dict(name="no bias", vocab_size=30, block_size=12, n_layer=3, n_head=4, n_embd=32, bias=False,
         batch=2, seq=12, seed=3, tokens="cjk escaped"),
    dict(name="heads of size 1, T = 1", vocab_size=7, block_size=6, n_layer=1, n_head=4, n_embd=4,
         bias=True, batch=3, seq=1, seed=4, tokens="cjk"),
    dict(name="with lm_head.weight", vocab_size=23, block_size=9, n_layer=2, n_head=2, n_embd=20,
         bias=True, batch=2, seq=7, seed=5, tokens="ascii", lm_head=True),
    dict(name="float32 file", vocab_size=19, block_size=10, n_layer=2, n_head=2, n_embd=24, bias=True,
         batch=2, seq=9, seed=6, tokens="cjk escaped", file_dtype="F32"),
    dict(name="float32 file, no bias", vocab_size=13, block_size=7, n_layer=1, n_head=3, n_embd=12,
         bias=False, batch=3, seq=7, seed=7, tokens="ascii", file_dtype="F32"),
    # RMSNorm in every block and before the head (config "norm": "rms"; no norm biases). torch
    # 1.13 has no nn.RMSNorm: it is written out below.
    dict(name="RMSNorm", vocab_size=11, block_size=17, n_layer=2, n_head=3, n_embd=48, bias=True,
         batch=3, seq=17, seed=8, tokens="ascii", norm="rms"),
    dict(name="RMSNorm, no bias", vocab_size=30, block_size=12, n_layer=3, n_head=4, n_embd=32, bias=False,
         batch=2, seq=9, seed=9, tokens="cjk", norm="rms"),
    # SwiGLU MLPs (config "mlp": "swiglu"): LLaMA's gate_proj, up_proj and down_proj, no biases,
    # hidden size swiglu_hidden(4 n_embd); with RMSNorm, a LLaMA-shaped block.
    dict(name="SwiGLU", vocab_size=11, block_size=17, n_layer=2, n_head=3, n_embd=48, bias=True,
         batch=3, seq=17, seed=10, tokens="ascii", mlp="swiglu"),
    dict(name="SwiGLU, RMSNorm, no bias", vocab_size=30, block_size=12, n_layer=3, n_head=4, n_embd=20,
         bias=False, batch=2, seq=9, seed=11, tokens="cjk", norm="rms", mlp="swiglu"),
]

# --- file formats --------------------------------------------------------------------------

# safetensors dtype -> (torch dtype, struct format character, bytes per element)
DTYPES = {
    "F32": (torch.float32, "f", 4),
    "F64": (torch.float64, "d", 8),
    "I64": (torch.int64, "q", 8),
    "BOOL": (torch.bool, "?", 1),
}
DTYPE_NAMES = {torch_dtype: name for name, (torch_dtype, _, _) in DTYPES.items()}


def tensor_bytes(t):
    """Little-endian, row-major bytes of `t`."""
    code = DTYPES[DTYPE_NAMES[t.dtype]][1]
    values = t.detach().reshape(-1).tolist()
    return struct.pack(f"<{len(values)}{code}", *values)


def tensor_from_bytes(data, dtype_name, shape):
    torch_dtype, code, size = DTYPES[dtype_name]
    values = struct.unpack(f"<{len(data) // size}{code}", data)
    return torch.tensor(values, dtype=torch_dtype).reshape(shape)


def write_safetensors(path, tensors, metadata):
    """`tensors`: list of (name, tensor), stored in that order with no gaps between them."""
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors:
        blob = tensor_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """Returns ({name: tensor}, metadata). Like attograd's reader it insists that each tensor's
    byte range matches its dtype and shape and that the ranges cover the data with no gap."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: {len(raw)} bytes, too short for the header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n == 0 or n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} does not fit in {len(raw) - 8} bytes")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors, ranges = {}, []
    for name, entry in header.items():
        if set(entry) != {"dtype", "shape", "data_offsets"} or entry["dtype"] not in DTYPES:
            raise ValueError(f"{path}: bad entry for '{name}': {entry}")
        begin, end = entry["data_offsets"]
        size = DTYPES[entry["dtype"]][2] * math.prod(entry["shape"])
        if not 0 <= begin <= end <= len(data) or end - begin != size:
            raise ValueError(f"{path}: '{name}' data_offsets [{begin}, {end}] do not hold {size} bytes")
        tensors[name] = tensor_from_bytes(data[begin:end], entry["dtype"], entry["shape"])
        ranges.append((begin, end, name))
    expected = 0
    for begin, end, name in sorted(ranges):
        if begin != expected:
            raise ValueError(f"{path}: '{name}' starts at byte {begin}, the tensor before it ends at {expected}")
        expected = end
    if expected != len(data):
        raise ValueError(f"{path}: {len(data) - expected} bytes follow the last tensor")
    return tensors, metadata


def write_npy(path, t):
    """NumPy's .npy version 1.0 for an int64 tensor."""
    shape = ", ".join(str(s) for s in t.shape) + ("," if t.dim() == 1 else "")  # Python's (4,)
    header = "{'descr': '<i8', 'fortran_order': False, 'shape': (" + shape + "), }"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"  # the data starts 64-byte aligned
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin-1"))
        f.write(tensor_bytes(t))


# --- the model -------------------------------------------------------------------------------
# Written as plain functions over a dict of parameters under nanoGPT's names, so the same dict
# is the checkpoint, the autograd leaves, and the key set the gradient file must have.

def rms(c):
    return c.get("norm", "layer") == "rms"


def swiglu(c):
    return c.get("mlp", "gelu") == "swiglu"


def swiglu_hidden(gelu_hidden):
    """nn::swiglu_hidden: two thirds of the GELU MLP's hidden size, rounded up to a multiple of 8."""
    return ((2 * gelu_hidden + 2) // 3 + 7) // 8 * 8


def parameter_shapes(c):
    """(name, shape) for every parameter, in nanoGPT's state-dict order."""
    C, shapes = c["n_embd"], []
    shapes += [("transformer.wte.weight", [c["vocab_size"], C]), ("transformer.wpe.weight", [c["block_size"], C])]
    H = swiglu_hidden(4 * C)
    mlp = ([("mlp.gate_proj", [H, C]), ("mlp.up_proj", [H, C]), ("mlp.down_proj", [C, H])] if swiglu(c)
           else [("mlp.c_fc", [4 * C, C]), ("mlp.c_proj", [C, 4 * C])])
    for i in range(c["n_layer"]):
        h = f"transformer.h.{i}."
        layer = [("ln_1", [C]), ("attn.c_attn", [3 * C, C]), ("attn.c_proj", [C, C]), ("ln_2", [C])] + mlp
        for module, weight_shape in layer:  # a bias has one entry per output row
            shapes.append((h + module + ".weight", weight_shape))
            no_bias = (module.startswith("ln_") and rms(c)) or (module.startswith("mlp.") and swiglu(c))
            if c["bias"] and not no_bias:
                shapes.append((h + module + ".bias", [weight_shape[0]]))
    shapes.append(("transformer.ln_f.weight", [C]))
    if c["bias"] and not rms(c):
        shapes.append(("transformer.ln_f.bias", [C]))
    return shapes


def random_parameters(c, generator):
    """Every tensor N(0, 0.1^2), biases and LayerNorm shifts included so that none is zero, except
    LayerNorm gains, 1 + N(0, 0.1^2), and the q/k/v weights, N(0, 0.3^2) so that the attention
    weights are far from uniform."""
    params = {}
    for name, shape in parameter_shapes(c):
        std = 0.3 if "c_attn.weight" in name else 0.1
        value = std * torch.randn(shape, generator=generator, dtype=torch.float64)
        if ".ln_" in name and name.endswith(".weight"):
            value += 1.0
        params[name] = value
    return params


def layer_norm(x, params, prefix):
    return F.layer_norm(x, x.shape[-1:], params[prefix + ".weight"], params.get(prefix + ".bias"), eps=1e-5)


def rms_norm(x, params, prefix):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim, eps 1e-6 as nn::RMSNorm's."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * params[prefix + ".weight"]


def norm(x, params, prefix, c):
    return rms_norm(x, params, prefix) if rms(c) else layer_norm(x, params, prefix)


def linear(x, params, prefix):
    return F.linear(x, params[prefix + ".weight"], params.get(prefix + ".bias"))


def causal_self_attention(x, params, prefix, n_head):
    B, T, C = x.shape
    q, k, v = linear(x, params, prefix + ".c_attn").split(C, dim=2)
    q, k, v = (t.reshape(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
    scores = q @ k.transpose(-2, -1) / math.sqrt(C // n_head)                        # [B, H, T, T]
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    y = (weights @ v).transpose(1, 2).reshape(B, T, C)
    return linear(y, params, prefix + ".c_proj")


def gpt_loss(params, c, ids, targets):
    """Mean next-token cross-entropy; ids, targets: int64 [B, T]."""
    T = ids.shape[1]
    x = params["transformer.wte.weight"][ids] + params["transformer.wpe.weight"][:T]
    for i in range(c["n_layer"]):
        h = f"transformer.h.{i}"
        x = x + causal_self_attention(norm(x, params, h + ".ln_1", c), params, h + ".attn", c["n_head"])
        mlp_in = norm(x, params, h + ".ln_2", c)
        if swiglu(c):  # (silu(x W_gate^T) * x W_up^T) W_down^T, silu(g) = g sigmoid(g)
            gate, up = linear(mlp_in, params, h + ".mlp.gate_proj"), linear(mlp_in, params, h + ".mlp.up_proj")
            x = x + linear(gate * torch.sigmoid(gate) * up, params, h + ".mlp.down_proj")
        else:
            x = x + linear(F.gelu(linear(mlp_in, params, h + ".mlp.c_fc")), params, h + ".mlp.c_proj")  # erf GELU
    logits = norm(x, params, "transformer.ln_f", c) @ params["transformer.wte.weight"].T  # tied head
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# --- one case ----------------------------------------------------------------------------------

def vocabulary(n, tokens):
    """n distinct one-character tokens, as the JSON array for the metadata. "ascii" starts at '!'
    and so includes '"' and '\\', which the JSON has to escape; "cjk" is raw UTF-8; "cjk escaped"
    writes the same characters as \\uXXXX escapes."""
    if tokens == "ascii":
        assert n <= 94, "printable ASCII has 94 visible characters"
        return json.dumps([chr(0x21 + i) for i in range(n)])
    return json.dumps([chr(0x4E00 + i) for i in range(n)], ensure_ascii=tokens == "cjk escaped")


def write_inputs(case, params, ids, targets, paths):
    c = case["config"]
    dtype = DTYPES[case.get("file_dtype", "F64")][0]
    stored = [(name, value.to(dtype)) for name, value in params.items()]
    if case.get("lm_head"):
        stored.append(("lm_head.weight", params["transformer.wte.weight"].to(dtype)))
    metadata = {"format": "attograd-gpt", "config": json.dumps(c), "vocab": vocabulary(c["vocab_size"], case["tokens"])}
    write_safetensors(paths["model"], stored, metadata)
    write_npy(paths["ids"], ids)
    write_npy(paths["targets"], targets)


def compare(got, want):
    """(max |got - want|, max relative error where |want| >= ATOL / RTOL, every element ok)."""
    diff = (got - want).abs()
    large = want.abs() >= ATOL / RTOL
    rel = (diff[large] / want.abs()[large]).max().item() if large.any() else 0.0
    return diff.max().item(), rel, bool((diff <= ATOL + RTOL * want.abs()).all())


def run_case(case, gpt_grads, workdir):
    """Prints one row per tensor; returns (every tensor ok, max abs error, max rel error)."""
    c = case["config"]
    generator = torch.Generator().manual_seed(case["seed"])
    params = random_parameters(c, generator)
    if case.get("file_dtype") == "F32":  # attograd widens the stored float32 values; so does the reference
        params = {name: value.float().double() for name, value in params.items()}
    ids, targets = (torch.randint(0, c["vocab_size"], (case["batch"], case["seq"]), generator=generator)
                    for _ in range(2))
    paths = {k: os.path.join(workdir, f"{k}{case['seed']}.{ext}") for k, ext in
             [("model", "safetensors"), ("ids", "npy"), ("targets", "npy"), ("grads", "safetensors"),
              ("resaved", "safetensors")]}
    write_inputs(case, params, ids, targets, paths)
    run = subprocess.run([gpt_grads, paths["model"], paths["ids"], paths["targets"], paths["grads"],
                          paths["resaved"]], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"  gpt_grads exited with {run.returncode}: {run.stderr.strip()}")
        return False, math.nan, math.nan
    grads, grad_metadata = read_safetensors(paths["grads"])

    leaves = {name: value.clone().requires_grad_() for name, value in params.items()}
    loss = gpt_loss(leaves, c, ids, targets)
    want = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))
    if set(grads) != set(want):
        print(f"  gradient names differ: missing {sorted(set(want) - set(grads))}, "
              f"unexpected {sorted(set(grads) - set(want))}")
        return False, math.nan, math.nan

    rows = [("loss", torch.tensor(float(grad_metadata["loss"]), dtype=torch.float64), loss.detach())] + \
        [(name, grads[name], reference) for name, reference in want.items()]
    all_ok, max_abs, max_rel = True, 0.0, 0.0
    for name, got, reference in rows:
        if got.dtype != torch.float64 or got.shape != reference.shape:
            print(f"  {name}: attograd wrote {got.dtype} {list(got.shape)}, expected float64 {list(reference.shape)}")
            all_ok = False
            continue
        abs_err, rel_err, ok = compare(got, reference)
        all_ok, max_abs, max_rel = all_ok and ok, max(max_abs, abs_err), max(max_rel, rel_err)
        shape = "x".join(str(s) for s in reference.shape)
        print(f"  {name:<38} {shape:>8} {reference.abs().max().item():10.3e} {abs_err:10.2e} {rel_err:10.2e}"
              f"  {'ok' if ok else 'MISMATCH'}")
    return all_ok and check_resaved(case, params, paths["resaved"]), max_abs, max_rel


def check_resaved(case, params, path):
    """The other direction: the model attograd loaded, written back by attograd's save_gpt, must
    load here with the same names, the same values bit for bit, and the same config and vocab."""
    tensors, metadata = read_safetensors(path)
    c = case["config"]
    problems = []
    if set(tensors) != set(params):
        problems.append(f"names differ: missing {sorted(set(params) - set(tensors))}, "
                        f"unexpected {sorted(set(tensors) - set(params))}")
    for name, value in params.items():
        if name in tensors and not torch.equal(tensors[name], value):
            problems.append(f"{name} differs from the weights written")
    config = json.loads(metadata.get("config", "{}"))
    if any(config.get(k) != v for k, v in c.items()):
        problems.append(f"config {config} differs from {c}")
    if json.loads(metadata.get("vocab", "[]")) != json.loads(vocabulary(c["vocab_size"], case["tokens"])):
        problems.append("vocab differs")
    for p in problems:
        print(f"  attograd's own file: {p}")
    if not problems:
        print(f"  attograd's own file loads here: {len(tensors)} tensors bit-identical, config and vocab equal")
    return not problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpt-grads", required=True, help="path to the gpt_grads program")
    args = parser.parse_args()
    if not os.access(args.gpt_grads, os.X_OK):
        print(f"pytorch_parity: gpt_grads program '{args.gpt_grads}' not found or not executable")
        return 1

    summary, failed = [], []
    with tempfile.TemporaryDirectory(prefix="pytorch_parity_") as workdir:
        for case in CASES:
            case["config"] = {k: case[k] for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "bias")}
            for key in ("norm", "mlp"):
                if key in case:
                    case["config"][key] = case[key]
            print(f"{case['name']}: vocab {case['vocab_size']}, block {case['block_size']}, "
                  f"layers {case['n_layer']}, heads {case['n_head']}, embd {case['n_embd']}, bias {case['bias']}, "
                  f"norm {case.get('norm', 'layer')}, mlp {case.get('mlp', 'gelu')}, "
                  f"B {case['batch']}, T {case['seq']}, {case.get('file_dtype', 'F64')} file, {case['tokens']} tokens")
            print(f"  {'':<38} {'shape':>8} {'max |ref|':>10} {'max abs':>10} {'max rel':>10}")
            ok, max_abs, max_rel = run_case(case, args.gpt_grads, workdir)
            summary.append((case["name"], max_abs, max_rel))
            if not ok:
                failed.append(case["name"])
            print()

    print(f"{'case':<26} {'max abs err':>12} {'max rel err':>12}")
    for name, max_abs, max_rel in summary:
        print(f"{name:<26} {max_abs:12.2e} {max_rel:12.2e}")
    if failed:
        print(f"pytorch_parity: MISMATCH in {', '.join(failed)} (rtol {RTOL:g}, atol {ATOL:g})")
        return 1
    print(f"pytorch_parity: all {len(CASES)} cases agree with torch {torch.__version__} "
          f"(rtol {RTOL:g}, atol {ATOL:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
