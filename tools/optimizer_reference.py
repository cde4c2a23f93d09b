"""Prints, from torch.optim, the values that tests/nn/optim_test.cpp expects of attograd's optimizers.

Each line repeats one check of that test in PyTorch: the same starting value, gradients,
hyperparameters and number of steps; for the ParamGroups tests, the same param groups, each
overriding some of the optimizer's options. torch's result is printed with 17 significant
digits beside the constant written in the C++ test; the two must agree to 1e-12.

    /usr/bin/python3 tools/optimizer_reference.py

Exits 0 when every constant matches, 1 when one does not, and 77 (meson's "skipped") when this
python3 has no PyTorch. The warmup-cosine schedule is attograd's own (PyTorch has no such
scheduler without a LambdaLR written for it), so it is not repeated here.
"""
import sys

try:
    import torch
except ImportError:
    print("optimizer_reference: skipped (PyTorch not installed for this python3)")
    sys.exit(77)

TOLERANCE = 1e-12


def run(make_optimizer, grads, p0=1.0):
    """p starts at p0; before each step its gradient is set to the next value in `grads`.
    Returns p after every step."""
    p = torch.tensor([p0], dtype=torch.float64, requires_grad=True)
    optimizer = make_optimizer([p])
    values = []
    for g in grads:
        p.grad = torch.tensor([g], dtype=torch.float64)
        optimizer.step()
        values.append(p.item())
    return values


def run_groups(make_optimizer, overrides, grads):
    """One parameter per group, each starting at 1: group i is {"params": [p_i], **overrides[i]}.
    Before each step every parameter's gradient is set to the next value in `grads`. Returns
    values[group][step]."""
    params = [torch.ones(1, dtype=torch.float64, requires_grad=True) for _ in overrides]
    optimizer = make_optimizer([{"params": [p], **o} for p, o in zip(params, overrides)])
    values = [[] for _ in params]
    for g in grads:
        for p in params:
            p.grad = torch.tensor([g], dtype=torch.float64)
        optimizer.step()
        for i, p in enumerate(params):
            values[i].append(p.item())
    return values


def adamw_default_decay_on_zero_gradient():
    """AdamW given only lr = 0.5, a zero gradient and p = 2: m = v = 0, so the step is the decay
    alone, p (1 - lr 0.01)."""
    p = torch.tensor([2.0], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.AdamW([p], lr=0.5)
    p.grad = torch.zeros(1, dtype=torch.float64)
    optimizer.step()
    return p.item()


def group_references():
    """Parameter groups overriding the optimizer's options, as in the test ParamGroups.*."""
    optim = torch.optim
    grads = [0.5, -1.0]
    sgd = run_groups(lambda g: optim.SGD(g, lr=0.1, momentum=0.9),
                     [{}, {"lr": 0.05, "momentum": 0.5, "weight_decay": 0.1}, {"dampening": 0.5},
                      {"nesterov": True}], grads)
    adam = run_groups(lambda g: optim.Adam(g, lr=0.1),
                      [{}, {"lr": 0.05, "betas": (0.5, 0.9), "eps": 1e-3, "weight_decay": 0.1}], grads)
    adamw = run_groups(lambda g: optim.AdamW(g, lr=0.1),
                       [{}, {"lr": 0.05, "weight_decay": 0.0}, {"betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.1}],
                       grads)
    expected = {
        "SGD": (sgd, [[0.95, 1.005], [0.97, 1.00015], [0.95, 0.955], [0.905, 1.0545]]),
        "Adam": (adam, [[0.900000002, 0.9366103542405654], [0.9500831946755408, 0.9760501106100353]]),
        "AdamW": (adamw, [[0.899000002, 0.9347113542385653], [0.950000001, 0.9683051771202827],
                          [0.8900001999996, 0.917660923156587]]),
    }
    rows = []
    for name, (values, constants) in expected.items():
        for group, (torch_steps, cpp_steps) in enumerate(zip(values, constants)):
            for step, (t, c) in enumerate(zip(torch_steps, cpp_steps)):
                rows.append((f"{name} groups: group {group}, step {step + 1}", t, c))
    return rows


def clip_values():
    """clip_grad_norm over a = [3, 0] and b = [4] (total norm 5): first with a limit above the
    norm, which leaves the gradients alone, then with limit 1."""
    a = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    a.grad = torch.tensor([3.0, 0.0], dtype=torch.float64)
    b.grad = torch.tensor([4.0], dtype=torch.float64)
    unclipped = torch.nn.utils.clip_grad_norm_([a, b], 10.0).item()
    a_unchanged = a.grad[0].item()
    clipped = torch.nn.utils.clip_grad_norm_([a, b], 1.0).item()
    return unclipped, a_unchanged, clipped, a.grad[0].item(), b.grad[0].item()


def references():
    """(what, torch's value, the C++ test's constant)."""
    optim = torch.optim
    sgd = run(lambda p: optim.SGD(p, lr=0.1), [0.5])
    momentum = run(lambda p: optim.SGD(p, lr=0.1, momentum=0.9), [0.5, 0.5])
    decayed = run(lambda p: optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.1), [0.5, 0.5])
    nesterov = run(lambda p: optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True), [0.5])
    adam = run(lambda p: optim.Adam(p, lr=0.1, betas=(0.9, 0.999), eps=1e-8), [0.5, -1.0])
    adam_l2 = run(lambda p: optim.Adam(p, lr=0.1, weight_decay=1.0), [-1.0])
    adamw = run(lambda p: optim.AdamW(p, lr=0.1, weight_decay=0.1), [0.5, -1.0])
    adamw_default_decay = optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults["weight_decay"]
    unclipped, a_unchanged, clipped, a_clipped, b_clipped = clip_values()
    scale = 1.0 / (5.0 + 1e-6)
    return [
        ("SGD lr 0.1, step 1", sgd[0], 0.95),
        ("SGD momentum 0.9, step 1", momentum[0], 0.95),
        ("SGD momentum 0.9, step 2", momentum[1], 0.855),
        ("SGD momentum, weight decay 0.1, step 1", decayed[0], 0.94),
        ("SGD momentum, weight decay 0.1, step 2", decayed[1], 0.8266),
        ("SGD Nesterov, step 1", nesterov[0], 0.905),
        ("Adam, step 1 (grad 0.5)", adam[0], 0.900000002),
        ("Adam, step 2 (grad -1)", adam[1], 0.9366103542405654),
        ("Adam weight decay 1, grad -1, step 1", adam_l2[0], 1.0),
        ("AdamW weight decay 0.1, step 1", adamw[0], 0.890000002),
        ("AdamW weight decay 0.1, step 2", adamw[1], 0.9177103542205653),
        ("AdamW default weight decay", adamw_default_decay, 1e-2),
        ("clip_grad_norm limit 10: total norm", unclipped, 5.0),
        ("clip_grad_norm limit 10: a[0] unchanged", a_unchanged, 3.0),
        ("clip_grad_norm limit 1: total norm", clipped, 5.0),
        ("clip_grad_norm limit 1: a[0]", a_clipped, 3 * scale),
        ("clip_grad_norm limit 1: b[0]", b_clipped, 4 * scale),
        ("AdamW lr 0.5 only, zero grad, p = 2", adamw_default_decay_on_zero_gradient(), 2 * (1 - 0.5 * 0.01)),
    ] + group_references()


def main():
    rows = references()
    print(f"{'check':<42} {'torch.optim':>24} {'optim_test.cpp':>24} {'difference':>10}")
    mismatches = 0
    for what, torch_value, cpp_constant in rows:
        diff = abs(torch_value - cpp_constant)
        flag = "" if diff <= TOLERANCE else "  MISMATCH"
        mismatches += bool(flag)
        print(f"{what:<42} {torch_value:24.17g} {cpp_constant:24.17g} {diff:10.1e}{flag}")
    if mismatches:
        print(f"optimizer_reference: {mismatches} of {len(rows)} constants differ from torch.optim by more "
              f"than {TOLERANCE:g}")
        return 1
    print(f"optimizer_reference: all {len(rows)} constants agree with torch {torch.__version__} "
          f"to {TOLERANCE:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
