#!/usr/bin/env python3
"""Every file README.md and docs/ cite exists, and every `file:function` names a function in it.

A citation is a code span or a link target whose first folder is one of the repository's own
(autograd/, ops/, kernels/, nn/, ..., docs/, tests/, scripts/) or, in docs/, a page or picture
beside it. A name without an extension may be a program the build makes from a source of that
name (examples/seq2seq from examples/seq2seq.cpp) or a test of tests/meson.build; `x.h/.cpp`
cites both halves. `path:name` must name something the file spells (the whole word), and
`path:N` or `path:N-M` a line the file has. Patterns (ops/reference/..., tests/fuzz/TARGET.dict)
are not checked.

Usage: doc_paths.py SOURCE_ROOT [--self-test]
"""
import os
import re
import sys
import tempfile
import shutil

TOPS = ("autograd", "ops", "kernels", "nn", "io", "text", "data", "runtime", "distributed", "examples", "tests", "bench",
        "tools", "scripts", "docs", "include", ".ci")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
PATHLIKE = re.compile(r"^[\w.+-]+(?:/[\w.*+-]+)*/?$")


def pages(root):
    yield "README.md"
    for folder, _, names in sorted(os.walk(os.path.join(root, "docs"))):
        for name in sorted(names):
            if name.endswith(".md"):
                yield os.path.relpath(os.path.join(folder, name), root)


def candidates(text):
    for number, line in enumerate(text.split("\n"), 1):
        for m in SPAN.finditer(line):
            yield number, m.group(1).strip(), False
        for m in LINK.finditer(line):
            yield number, m.group(1).strip(), True


def is_test_name(root, name):
    """A test of the suite named in tests/meson.build ('examples/clean_checkout'), not a file."""
    with open(os.path.join(root, "tests", "meson.build"), encoding="utf-8") as f:
        return f"'{name}'" in f.read()


def check_one(root, page, number, cited, is_link):
    """A problem string, or None."""
    path, _, rest = cited.partition(":")
    if not PATHLIKE.match(path) or "*" in path or "{" in path:
        return None
    first = path.split("/", 1)[0]
    here = os.path.dirname(page)
    if is_link:
        if path.startswith(("http", "mailto")):
            return None
        target = os.path.normpath(os.path.join(here, path))
    elif first in TOPS and "/" in path:
        target = path
    elif page.startswith("docs/") and re.match(r"^[\w-]+\.md$", path):
        target = os.path.normpath(os.path.join(here, path))
    elif page.startswith("docs/") and path.startswith("images/"):
        target = os.path.normpath(os.path.join(here, path))
    else:
        return None
    if "..." in target or any(part.isupper() for part in re.split(r"[/.]", target)):
        return None  # a pattern (ops/reference/..., tests/fuzz/TARGET.dict), not a file
    if target.endswith(".h/.cpp"):  # both halves: nn/optim.h/.cpp
        stem = target[: -len(".h/.cpp")]
        missing = [stem + ext for ext in (".h", ".cpp") if not os.path.exists(os.path.join(root, stem + ext))]
        return f"{page}:{number}: cites {cited}, but {', '.join(missing)} does not exist" if missing else None
    full = os.path.join(root, target)
    if not os.path.exists(full) and "." not in os.path.basename(target):
        # A program by the name the build gives it: examples/seq2seq from examples/seq2seq.cpp.
        for ext in (".cpp", ".py", ".sh"):
            if os.path.exists(full + ext):
                full += ext
                break
    if not os.path.exists(full) and not is_test_name(root, target):
        return f"{page}:{number}: cites {cited}, but {target} does not exist"
    if rest and os.path.isfile(full):
        with open(full, encoding="utf-8", errors="replace") as f:
            body = f.read()
        lines = re.fullmatch(r"(\d+)(?:-(\d+))?", rest)
        if lines:
            last = int(lines.group(2) or lines.group(1))
            if last > body.count("\n") + 1:
                return f"{page}:{number}: cites {cited}, but {target} has {body.count(chr(10)) + 1} lines"
        elif re.fullmatch(r"[A-Za-z_][\w:~]*(\(\))?", rest):
            name = rest.rstrip("()").split("::")[-1]
            if not re.search(r"\b" + re.escape(name) + r"\b", body):
                return f"{page}:{number}: cites {cited}, but {target} never names {name}"
    return None


def check(root):
    problems = []
    for page in pages(root):
        with open(os.path.join(root, page), encoding="utf-8") as f:
            text = f.read()
        for number, cited, is_link in candidates(text):
            problem = check_one(root, page, number, cited, is_link)
            if problem:
                problems.append(problem)
    return problems


def self_test(root):
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(root, "README.md"), tmp)
        shutil.copytree(os.path.join(root, "docs"), os.path.join(tmp, "docs"))
        for top in TOPS:
            if top != "docs" and os.path.isdir(os.path.join(root, top)):
                os.symlink(os.path.abspath(os.path.join(root, top)), os.path.join(tmp, top))
        with open(os.path.join(tmp, "docs", "architecture.md"), "a", encoding="utf-8") as f:
            f.write("\nSee `ops/no_such_file.cpp`, `ops/binary.cpp:no_such_function` and [a page](no_such_page.md).\n")
        found = check(tmp)
        wanted = ["ops/no_such_file.cpp", "ops/binary.cpp:no_such_function", "no_such_page.md"]
        return [w for w in wanted if not any(w in p for p in found)]


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = check(root)
    for p in problems:
        print(p)
    status = 1 if problems else 0
    if "--self-test" in sys.argv:
        for m in self_test(root):
            print(f"self-test: a bad citation planted ({m}) was not reported")
            status = 1
    if status == 0:
        print("doc paths: every file README.md and docs/ cite exists, with the functions and lines they name")
    return status


if __name__ == "__main__":
    sys.exit(main())
