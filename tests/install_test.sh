#!/usr/bin/env bash
# Installs the library into a scratch directory and builds the README's first program against
# it with pkg-config alone, then against the build tree through the uninstalled .pc file.
# Usage: install_test.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1
build=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

meson install -C "$build" --destdir "$scratch/root" --no-rebuild >"$scratch/install.log" 2>&1 ||
  { cat "$scratch/install.log"; exit 1; }
pc=$(find "$scratch/root" -name attograd.pc)
prefix=$(sed -n 's/^prefix=//p' "$pc")
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --define-variable=prefix="$scratch/root$prefix" \
  --cflags --libs attograd)
# The installed headers must be self-sufficient: nothing from the source tree on the path.
g++ -std=c++20 "$src/examples/hello.cpp" $flags -o "$scratch/hello"
libdir=$(dirname "$(find "$scratch/root" -name 'libattograd.so*' | head -n 1)")
out=$(LD_LIBRARY_PATH=$libdir "$scratch/hello")
expected='loss = 14
grad = tensor([2.0000, 4.0000, 6.0000], shape=[3], dtype=float32)'
[ "$out" = "$expected" ] || { echo "installed build printed:"; echo "$out"; exit 1; }

# Every installed header stands on the installed ones alone: one file including each of them
# compiles. An installed header that includes an internal one (not installed) fails here.
include_root=$(dirname "$(find "$scratch/root" -path '*/attograd/attograd.h')")
(cd "$include_root" && find . -name '*.h' | sort | sed 's|^\./|#include <attograd/|; s|$|>|') >"$scratch/every.cpp"
g++ -std=c++20 -fsyntax-only "$scratch/every.cpp" $flags ||
  { echo "the installed headers above do not compile on their own"; exit 1; }

flags=$(PKG_CONFIG_PATH="$build/meson-uninstalled" pkg-config --cflags --libs attograd)
g++ -std=c++20 "$src/examples/hello.cpp" $flags -o "$scratch/hello_uninstalled"
out=$(LD_LIBRARY_PATH=$build "$scratch/hello_uninstalled")
[ "$out" = "$expected" ] || { echo "uninstalled build printed:"; echo "$out"; exit 1; }
echo "install and uninstalled pkg-config builds both print the expected gradient"
