#!/usr/bin/env bash
# The layers of meson.build hold at link time. The build already links every layer alone, with
# only the layers below it (lib<layer>_alone.so); this shows that such a link really refuses a
# call upward. A file calling ag::add (ops, the layer above) is linked with the autograd layer
# and the two below it, kernels and runtime: the link must fail and name ag::add. The same file
# calling Tensor::to (autograd's own, which converts through the kernels) must link, so the
# failure is the layering and not the command.
# Usage: layers_link_test.sh SOURCE_ROOT CXX AUTOGRAD_LIB KERNELS_LIB RUNTIME_LIB SANITIZE EXTRA_LIBS...
# (EXTRA_LIBS: what the kernels link beyond OpenBLAS and fmt, such as oneDNN)
set -euo pipefail
src=$1
cxx=$2
autograd=$3
kernels=$4
runtime=$5
sanitize=$6
shift 6
extra=("$@")
if [ "$sanitize" != none ]; then
  echo "a sanitizer build leaves undefined symbols to the sanitizer's run time: nothing to show here"
  exit 77
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

link_alone() {  # link_alone NAME CALL: the file, whole, with autograd, kernels and runtime; the linker's words
  printf '#include "ops/binary.h"\nag::Tensor planted(const ag::Tensor& a) { return %s; }\n' "$2" >"$scratch/$1.cpp"
  "$cxx" -std=c++20 -fPIC -I"$src" -c "$scratch/$1.cpp" -o "$scratch/$1.o"
  "$cxx" -shared -o "$scratch/$1.so" -Wl,--no-undefined -Wl,--whole-archive "$scratch/$1.o" "$autograd" \
    -Wl,--no-whole-archive "$kernels" "$runtime" $(pkg-config --libs fmt openblas) "${extra[@]}" -ldl \
    >"$scratch/$1.log" 2>&1
}

link_alone own 'a.to(ag::kFloat64)' || { echo "a call inside the layer did not link:"; cat "$scratch/own.log"; exit 1; }
if link_alone upward 'ag::add(a, a)'; then
  echo "a call from autograd into ops linked with autograd, kernels and runtime alone"
  exit 1
fi
grep -q 'undefined reference to `ag::add(' "$scratch/upward.log" ||
  { echo "the link failed, but not for ag::add:"; cat "$scratch/upward.log"; exit 1; }
echo "a call upward fails to link (ag::add from autograd), a call inside the layer links"
