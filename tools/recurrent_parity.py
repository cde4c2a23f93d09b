"""Checks attograd's recurrent modules against torch.nn's, outputs and gradients, in float64.

Each case below builds a torch.nn.RNN, GRU or LSTM (one layer, batch first) or an RNNCell,
GRUCell or LSTMCell with seeded random weights, draws an input, an initial state and a weight
for each output, and takes the gradient of

    loss = sum over the outputs of sum(output * weight)

with respect to the input, the initial state and every weight. Sequences with lengths run
through pack_padded_sequence and come back through pad_packed_sequence, so PyTorch's own
packing decides which steps count and which state is the last. The same numbers go to
recurrent_grads (tools/recurrent_grads.cpp) as .npy files; its outputs and gradients must
match PyTorch's.

    /usr/bin/python3 tools/recurrent_parity.py --recurrent-grads build/tools/recurrent_grads

PyTorch refuses a length of 0 in a packed sequence, so the cases use lengths from 1 up; the
length-0 rule (the last state is the initial one) is tested in tests/nn/recurrent_test.cpp.
Tolerances (RTOL 1e-10, ATOL 1e-13), the exit codes (0 all agree, 1 any mismatch, 77 skipped
without PyTorch) and the .npy helpers are those of tools/pytorch_parity.py and
tools/second_order_parity.py.
"""
import math
import os
import sys

try:
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
except ImportError:
    print("recurrent_parity: skipped (PyTorch not installed for this python3)")
    sys.exit(77)

sys.dont_write_bytecode = True
from pytorch_parity import compare  # noqa: E402
from second_order_parity import read_npy, run_all, run_program  # noqa: E402

MODULES = {"rnn": torch.nn.RNN, "gru": torch.nn.GRU, "lstm": torch.nn.LSTM,
           "rnn_cell": torch.nn.RNNCell, "gru_cell": torch.nn.GRUCell, "lstm_cell": torch.nn.LSTMCell}


def normal(generator, *shape, std=1.0):
    return std * torch.randn(shape, generator=generator, dtype=torch.float64)


def torch_side(case, g):
    """(the inputs recurrent_grads reads, PyTorch's outputs, PyTorch's gradients), by name."""
    kind, B, I, H = case["kind"], case["B"], case["I"], case["H"]
    bias = case.get("bias", True)
    module = MODULES[kind](I, H, bias=bias, **({} if kind.endswith("_cell") else {"batch_first": True})).double()
    # Weights wider than PyTorch's default so that the gates leave their linear middle.
    weights = {}
    for name, p in module.named_parameters():
        with torch.no_grad():
            p.copy_(normal(g, *p.shape, std=0.6))
        weights[name.removesuffix("_l0")] = p
    cell = kind.endswith("_cell")
    x = normal(g, *((B, I) if cell else (B, case["T"], I))).requires_grad_()
    h0 = normal(g, B, H).requires_grad_()
    c0 = normal(g, B, H).requires_grad_() if kind.startswith("lstm") else None
    if cell:
        out = module(x, (h0, c0) if c0 is not None else h0)
        outputs = dict(h=out[0], c=out[1]) if c0 is not None else dict(h=out)
    else:
        state = (h0[None], c0[None]) if c0 is not None else h0[None]
        if "lengths" in case:
            lengths = torch.tensor(case["lengths"], dtype=torch.int64)
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            states, last = module(packed, state)
            states, _ = pad_packed_sequence(states, batch_first=True, total_length=case["T"])
        else:
            states, last = module(x, state)
        outputs = dict(states=states)
        if c0 is not None:
            outputs.update(last=last[0][0], last_cell=last[1][0])
        else:
            outputs.update(last=last[0])
    cotangents = {name: normal(g, *value.shape) for name, value in outputs.items()}
    loss = sum((value * cotangents[name]).sum() for name, value in outputs.items())
    leaves = dict(x=x, h0=h0, **({"c0": c0} if c0 is not None else {}), **weights)
    grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))

    inputs = {name: t.detach() for name, t in leaves.items()}
    inputs.update({f"g_{name}": t for name, t in cotangents.items()})
    if "lengths" in case:
        inputs["lengths"] = torch.tensor(case["lengths"], dtype=torch.int64)
    wanted = {name: t.detach() for name, t in outputs.items()}
    wanted.update({f"grad_{name}": t for name, t in grads.items()})
    return inputs, wanted


# Odd, non-square shapes: no two of B, T, I and H equal, padding with lengths out of order.
CASES = [
    dict(name="RNN, padded", kind="rnn", B=3, T=7, I=5, H=4, lengths=[7, 2, 5], seed=1),
    dict(name="RNN, no bias", kind="rnn", B=2, T=5, I=3, H=6, bias=False, seed=2),
    dict(name="GRU, padded", kind="gru", B=3, T=7, I=5, H=4, lengths=[3, 7, 1], seed=3),
    dict(name="GRU, no bias", kind="gru", B=2, T=6, I=3, H=5, bias=False, seed=4),
    dict(name="GRU, 30 steps", kind="gru", B=2, T=30, I=3, H=5, lengths=[30, 17], seed=5),
    dict(name="LSTM, padded", kind="lstm", B=3, T=7, I=5, H=4, lengths=[5, 1, 7], seed=6),
    dict(name="LSTM, no bias", kind="lstm", B=2, T=5, I=6, H=3, bias=False, seed=7),
    dict(name="RNNCell", kind="rnn_cell", B=3, I=5, H=4, seed=8),
    dict(name="GRUCell", kind="gru_cell", B=3, I=5, H=4, seed=9),
    dict(name="LSTMCell", kind="lstm_cell", B=3, I=5, H=4, seed=10),
    dict(name="LSTMCell, no bias", kind="lstm_cell", B=2, I=3, H=5, bias=False, seed=11),
]


def run_case(case, program, workdir):
    """Prints one row per tensor; returns [(label, elements, max abs, max rel, ok)]."""
    inputs, wanted = torch_side(case, torch.Generator().manual_seed(case["seed"]))
    out_dir = run_program(case, inputs, program, workdir)
    if out_dir is None:
        return [(case["name"], 0, math.nan, math.nan, False)]
    all_ok, elements, max_abs, max_rel = True, 0, 0.0, 0.0
    written = sorted(f.removesuffix(".npy") for f in os.listdir(out_dir))
    if written != sorted(wanted):
        print(f"  recurrent_grads wrote {written}, expected {sorted(wanted)}")
        all_ok = False
    for name, want in wanted.items():
        path = os.path.join(out_dir, name + ".npy")
        if not os.path.exists(path):
            continue
        got = read_npy(path)
        if got.dtype != torch.float64 or got.shape != want.shape:
            print(f"  {name}: attograd wrote {got.dtype} {list(got.shape)}, expected float64 {list(want.shape)}")
            all_ok = False
            continue
        abs_err, rel_err, ok = compare(got, want)
        all_ok, max_abs, max_rel = all_ok and ok, max(max_abs, abs_err), max(max_rel, rel_err)
        elements += want.numel()
        shape = "x".join(str(s) for s in want.shape)
        print(f"  {name:<16} {shape:>10} {want.abs().max().item():10.3e} {abs_err:10.2e} {rel_err:10.2e}  "
              f"{'ok' if ok else 'MISMATCH'}")
    return [(case["name"], elements, max_abs, max_rel, all_ok)]


def main():
    return run_all("recurrent_parity", "--recurrent-grads", __doc__, CASES, run_case, 16,
                   f"torch {torch.__version__}'s torch.nn", summary_width=24)


if __name__ == "__main__":
    sys.exit(main())
