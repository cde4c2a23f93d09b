#!/usr/bin/env python3
"""docs/derivatives.md's tables match the code they name.

1. Every differentiable op that has both kernels (AG_KERNEL_OPS in ops/kernel_ops.h; adam_update
   and clip_grad_norm run outside the graph) has at least one row, by its name.
2. In every row, each file named in the "implemented in" cell exists, and the first function
   named after it appears in that file (as "name(" or "name =", a definition or a call).
3. Every file named anywhere in the "implemented in" cells of those ops' rows exists.

Usage: derivatives_table.py SOURCE_ROOT [--self-test]
With --self-test it also plants a missing op, a missing file and a missing function in a copy
of the page and checks that each is reported.
"""
import os
import re
import sys
import tempfile

OUTSIDE_THE_GRAPH = {"adam_update", "clip_grad_norm"}
KERNEL_OP = re.compile(r'X\(\w+,\s*"([^"]+)",\s*\w+\)')
CODE = re.compile(r"`([^`]+)`")


def kernel_ops(root):
    with open(os.path.join(root, "ops/kernel_ops.h"), encoding="utf-8") as f:
        return [name for name in KERNEL_OP.findall(f.read()) if name not in OUTSIDE_THE_GRAPH]


def rows(page):
    """(line number, op, implemented-in cell) of every row of a five-column derivatives table."""
    for number, line in enumerate(page.splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) != 5 or cells[0] in ("op", "") or set(cells[0]) <= {"-"}:
            continue
        yield number, cells[0], cells[3]


def check(root, page):
    problems = []
    named = {}
    for number, op, implemented in rows(page):
        name = re.split(r"[ ,(]", op, maxsplit=1)[0]
        named.setdefault(name, number)
        code = CODE.findall(implemented)
        for i, item in enumerate(code):
            if not re.search(r"\.(cpp|h)$", item):
                continue
            path = os.path.join(root, item)
            if not os.path.exists(path):
                problems.append(f"docs/derivatives.md:{number}: {op}: names {item}, which does not exist")
                continue
            function = next((c for c in code[i + 1:] if re.fullmatch(r"[A-Za-z_][\w:]*", c)), None)
            if function is None:
                continue
            short = function.split("::")[-1]
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if not re.search(rf"\b{re.escape(short)}\s*(\(|=|<)", text):
                problems.append(f"docs/derivatives.md:{number}: {op}: says {function} is in {item}, which does "
                                f"not define or call it")
    ops = kernel_ops(root)
    if not ops:  # the list moved or changed form: the check below would hold vacuously
        problems.append("ops/kernel_ops.h: no op found in AG_KERNEL_OPS")
    for op in ops:
        if op not in named:
            problems.append(f"docs/derivatives.md: no row for {op}, an op of AG_KERNEL_OPS (ops/kernel_ops.h)")
    return problems


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(root, "docs/derivatives.md"), encoding="utf-8") as f:
        page = f.read()
    problems = check(root, page)
    for p in problems:
        print(p)
    if problems:
        return 1
    if "--self-test" in sys.argv:
        planted = re.sub(r"^\| rms_norm \|.*\n", "", page, flags=re.M)  # every rms_norm row gone
        planted = planted.replace("`ops/fused/swiglu.cpp`, `swiglu`", "`ops/fused/swiglu_gone.cpp`, `swiglu`", 1)
        planted = planted.replace("`ops/fused/layer_norm.cpp`, `layer_norm`", "`ops/fused/layer_norm.cpp`, `no_such_fn`",
                                  1)
        found = "\n".join(check(root, planted))
        wanted = ["no row for rms_norm", "swiglu_gone.cpp, which does not exist", "no_such_fn is in"]
        missed = [w for w in wanted if w not in found]
        if missed:
            print(f"derivatives table self-test: planted problems not reported: {missed}")
            return 1
    print(f"derivatives table: a row for each of the {len(kernel_ops(root))} differentiable ops of AG_KERNEL_OPS, "
          f"and every file and function the rows name is there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
