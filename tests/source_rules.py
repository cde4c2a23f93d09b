#!/usr/bin/env python3
"""Four rules of the library's source, read from the files themselves.

1. The layering of docs/architecture.md: every #include "..." of a library file points to a
   folder its own folder may include (LAYERS below, the same table as the doc), or is one of
   the few named edges in EXCEPTIONS. A violation is reported with its file and line.

2. One router: what changes how an op runs (the kernel route, autocast, create_graph, grad
   mode and forward mode's tangents) is read in ops/route.cpp (the first two) and
   ops/fused_node.cpp (the others) alone. No other file of ops/ or
   nn/ calls use_reference(), creating_graph(), autocasts(), is_grad_enabled(), any_tangent(),
   live_level() or is_active() (ops/kernels.cpp and ops/autocast.cpp define the first and the
   third). Setting grad mode (NoGradGuard) is not reading it.

3. The programs (examples/, bench/, tools/, exercises/) use the library as a user does, through
   <attograd/...>: a quoted #include of theirs stays inside their own folder, and none names a
   library folder in angle brackets (<kernels/...>), but for the edges named in EXCEPTIONS.

4. Kernels are plain functions on buffers: no file of kernels/ names what belongs to autograd
   (Tensor, Node, record, Held, grad mode, autocast, tangents, the kernel switch), even by a
   forward declaration, which rule 1 alone would let through.

  source_rules.py ROOT           checks the tree at ROOT; exits 1 on any violation
  source_rules.py --self-test    also shows that each rule catches a planted violation
"""
import os
import re
import shutil
import sys
import tempfile

# Folder -> the folders its files may include (besides their own). Kept equal to the map in
# docs/architecture.md.
KERNELS = {"kernels", "kernels/cpu", "kernels/bf16"}
BACKENDS = KERNELS | {"kernels/naive"}  # every folder of kernels/: rule 4 holds for each
LAYERS = {
    "runtime": set(),
    "kernels/cpu": {"kernels", "runtime"},
    "kernels/naive": {"kernels"},  # one thread, no BLAS: not even runtime/'s pool
    "kernels/bf16": {"kernels/cpu", "runtime"},
    "kernels": {"kernels/cpu", "kernels/bf16", "runtime"},
    "autograd": {"kernels", "runtime"},  # the backend computes the core's elements too (autograd/context.h)
    "autograd/debug": {"autograd", "runtime"},
    "ops": KERNELS | {"autograd", "runtime"},
    "ops/reference": KERNELS | {"ops", "autograd", "runtime"},
    "ops/fused": KERNELS | {"ops/reference", "ops", "autograd", "runtime"},
    "nn": KERNELS | {"ops", "ops/reference", "autograd", "runtime"},
    "text": {"nn", "ops", "autograd", "runtime"},
    "data": {"ops", "autograd", "runtime"},
    "io": {"text", "data", "nn", "ops", "autograd", "runtime"},
    "distributed": {"autograd", "runtime"},
    "include/attograd": KERNELS | {"runtime", "autograd", "autograd/debug", "ops", "ops/reference", "ops/fused", "nn",
                                   "text", "data", "io", "distributed"},
}

# The edges the table does not allow, each named: (file, included file) -> why.
EXCEPTIONS = {
    # These two build as the checks layer, above ops (meson.build), not with the rest of autograd/.
    ("autograd/functional.cpp", "ops/shape.h"):
        "jacobian and hessian stack their rows with cat",
    ("autograd/gradcheck.cpp", "ops/shape.h"):
        "gradcheck reshapes and concatenates the inputs it perturbs",
    ("bench/gpt_train_step.cpp", "examples/common/kernels_option.h"):
        "the step timer takes minigpt's --kernels option, so that the flag means the same in both",
    ("bench/gpt_train_step.cpp", "examples/common/precision_option.h"):
        "the step timer takes minigpt's --precision option and its refusal where bf16 cannot run",
    ("bench/ops_benchmark.cpp", "kernels/bf16/bf16.h"):
        "the product benchmarks time the bf16 kernels themselves, on raw buffers, below any op",
    ("bench/ops_benchmark.cpp", "kernels/cpu/blas.h"):
        "the product benchmarks time OpenBLAS's GEMM itself, on raw buffers, below any op",
}

# The programs' folders (rule 3): each may include, quoted, only files inside itself.
PROGRAMS = ("examples", "bench", "tools", "exercises")

SWITCHES = re.compile(r"\b(use_reference|creating_graph|autocasts|is_grad_enabled|any_tangent|live_level|is_active)\s*\(")
# Where the switches may be named: the router (the kernel switch and autocast), the autograd side
# of its ops (grad mode, create_graph, forward mode), and the two files that define the first two.
SWITCH_HOMES = {"ops/route.cpp", "ops/route.h", "ops/fused_node.cpp", "ops/fused_node.h", "ops/kernels.cpp",
                "ops/kernels.h", "ops/autocast.cpp", "ops/autocast.h"}

# What a kernel must not name (rule 3): autograd's types and switches.
AUTOGRAD_NAMES = re.compile(r"\b(Tensor|TensorImpl|Node|record|Held|is_grad_enabled|NoGradGuard|AutoGradMode|"
                            r"AutocastGuard|autocasts|DualLevel|live_tangent|KernelGuard|use_reference|"
                            r"creating_graph)\b")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ANGLE_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>')


def folder_of(path):
    """The LAYERS folder a library path belongs to (the longest that contains it), or None."""
    containing = [folder for folder in LAYERS if path.startswith(folder + "/")]
    return max(containing, key=len) if containing else None


def library_files(root):
    for folder in LAYERS:
        base = os.path.join(root, folder)
        if not os.path.isdir(base):
            continue
        for name in sorted(os.listdir(base)):
            if name.endswith((".h", ".cpp")):
                yield f"{folder}/{name}"


def program_files(root):
    for top in PROGRAMS:
        for folder, _, names in sorted(os.walk(os.path.join(root, top))):
            for name in sorted(names):
                if name.endswith((".h", ".cpp")):
                    yield os.path.relpath(os.path.join(folder, name), root)


def check_programs(root):
    problems = []
    for rel in program_files(root):
        top = rel.split("/", 1)[0]
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            lines = f.read().split("\n")
        for number, line in enumerate(lines, 1):
            angle = ANGLE_INCLUDE.match(line)
            if angle and folder_of(angle.group(1)) is not None and (rel, angle.group(1)) not in EXCEPTIONS:
                problems.append(f"{rel}:{number}: includes <{angle.group(1)}>, an internal path of the library; a "
                                f"program reaches it through <attograd/...>, as a user's does")
                continue
            m = INCLUDE.match(line)
            if not m:
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1)))
            if target.startswith(top + "/") or (rel, target) in EXCEPTIONS:
                continue
            problems.append(f"{rel}:{number}: includes \"{m.group(1)}\" from outside {top}/; a program reaches the "
                            f"library through <attograd/...>, as a user's does")
    return problems


def check(root):
    """Every violation as 'file:line: message'."""
    problems = check_programs(root)
    for rel in library_files(root):
        own = folder_of(rel)
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            lines = f.read().split("\n")
        for number, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if m:
                target = os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1)))
                if not os.path.exists(os.path.join(root, target)):
                    # A path relative to the include directories: "attograd/..." or "runtime/...".
                    for prefix in ("", "include"):
                        candidate = os.path.normpath(os.path.join(prefix, m.group(1)))
                        if os.path.exists(os.path.join(root, candidate)):
                            target = candidate
                            break
                theirs = folder_of(target)
                if theirs is None or theirs == own or theirs in LAYERS[own]:
                    continue
                if (rel, target) in EXCEPTIONS:
                    continue
                problems.append(f"{rel}:{number}: includes {target} ({theirs}/), which the map in "
                                f"docs/architecture.md does not allow for {own}/ (it may include: "
                                f"{', '.join(sorted(LAYERS[own])) or 'nothing of attograd'})")
            code = line.split("//", 1)[0]
            if own in BACKENDS and AUTOGRAD_NAMES.search(code):
                problems.append(f"{rel}:{number}: names {AUTOGRAD_NAMES.search(code).group(1)}, which belongs to "
                                f"autograd; a kernel takes buffers and sizes and knows nothing of tensors or graphs")
            if SWITCHES.search(code) and rel not in SWITCH_HOMES and (rel.startswith("ops/") or rel.startswith("nn/")):
                name = SWITCHES.search(code).group(1)
                problems.append(f"{rel}:{number}: calls {name}() itself; only the router (ops/route.cpp) and "
                                f"ops/fused_node.cpp read the kernel switch, autocast, create_graph, grad mode and tangents")
    # Every named exception must still be an edge of the tree: a stale one would hide nothing,
    # but would leave the map describing code that no longer exists.
    for (rel, target), why in EXCEPTIONS.items():
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            problems.append(f"{rel}: named in EXCEPTIONS ({why}) but does not exist")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if os.path.relpath(target, os.path.dirname(rel)) not in text and f"<{target}>" not in text:
            problems.append(f"{rel}: EXCEPTIONS allows it to include {target} ({why}), but it no longer does")
    return problems


def self_test(root):
    """Plants one violation of each rule in a copy of the tree and checks both are reported."""
    with tempfile.TemporaryDirectory() as tmp:
        for folder in list(LAYERS) + list(PROGRAMS):
            src = os.path.join(root, folder)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(tmp, folder), dirs_exist_ok=True)
        with open(os.path.join(tmp, "runtime/parallel.h"), "a", encoding="utf-8") as f:
            f.write('\n#include "../nn/module.h"\n')
        with open(os.path.join(tmp, "ops/matmul.cpp"), "a", encoding="utf-8") as f:
            f.write("\nbool planted() { return ag::use_reference(ag::KernelOp::Linear); }\n")
        with open(os.path.join(tmp, "ops/fused/gelu.cpp"), "a", encoding="utf-8") as f:
            f.write("\nbool planted() { return ag::is_grad_enabled(); }\n")
        with open(os.path.join(tmp, "kernels/cpu/blas.h"), "a", encoding="utf-8") as f:
            f.write('\n#include "../../autograd/grad_mode.h"\n')
        with open(os.path.join(tmp, "kernels/bf16/bf16.h"), "a", encoding="utf-8") as f:
            f.write("\nnamespace ag { class Tensor; }\n")
        with open(os.path.join(tmp, "tools/npy_case.h"), "a", encoding="utf-8") as f:
            f.write('\n#include "../ops/route.h"\n')
        with open(os.path.join(tmp, "examples/hello.cpp"), "a", encoding="utf-8") as f:
            f.write('\n#include <ops/route.h>\n')
        with open(os.path.join(tmp, "kernels/naive/linear.cpp"), "a", encoding="utf-8") as f:
            f.write('\n#include "../../runtime/parallel.h"\n')
        with open(os.path.join(tmp, "kernels/naive/norms.cpp"), "a", encoding="utf-8") as f:
            f.write("\nbool planted() { return ag::is_grad_enabled(); }\n")
        found = check(tmp)
        wanted = ["runtime/parallel.h", "ops/matmul.cpp", "ops/fused/gelu.cpp", "kernels/cpu/blas.h", "kernels/bf16/bf16.h", "tools/npy_case.h",
                  "examples/hello.cpp", "kernels/naive/linear.cpp", "kernels/naive/norms.cpp"]
        missed = [w for w in wanted if not any(p.startswith(w + ":") for p in found)]
        return missed


def main():
    args = sys.argv[1:]
    run_self_test = "--self-test" in args
    args = [a for a in args if a != "--self-test"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = check(root)
    for p in problems:
        print(p)
    status = 1 if problems else 0
    if run_self_test:
        missed = self_test(root)
        for m in missed:
            print(f"self-test: a violation planted in {m} was not reported")
        if missed:
            status = 1
    if status == 0:
        print("source rules: the include map, the one router, the programs' includes and the plain kernels hold")
    return status


if __name__ == "__main__":
    sys.exit(main())
