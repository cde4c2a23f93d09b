#!/usr/bin/env bash
# Installs the library into a scratch directory and builds the README's first program against
# it with pkg-config alone, then against the build tree through the uninstalled .pc file; and
# checks that the program README.md shows is examples/hello.cpp.
# Usage: install_test.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1
build=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The README shows examples/hello.cpp from its first #include on: the program tested here is the
# one a reader copies.
sed -n '/^```cpp$/,/^```$/p' "$src/README.md" | sed '1d;$d' | awk 'NR == 1, /^}$/' >"$scratch/readme.cpp"
sed -n '/^#include <attograd\/attograd.h>$/,$p' "$src/examples/hello.cpp" >"$scratch/hello_body.cpp"
diff "$scratch/hello_body.cpp" "$scratch/readme.cpp" ||
  { echo "README.md's first program is not examples/hello.cpp (diff above)"; exit 1; }

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
# The closed form of the notes' example: scores [1, 2, 1] / 2, so the weights are e^0.5 / z,
# e / z, e^0.5 / z with z = 2 e^0.5 + e, that is 0.2741, 0.4519, 0.2741; dL/dv's row j is weight j.
expected='weights = tensor([[0.2741, 0.4519, 0.2741]], shape=[1, 3], dtype=float64)
dL/dv = tensor([[0.2741, 0.2741, 0.2741, 0.2741],
        [0.4519, 0.4519, 0.4519, 0.4519],
        [0.2741, 0.2741, 0.2741, 0.2741]], shape=[3, 4], dtype=float64)
gradcheck: passed'
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
echo "install and uninstalled pkg-config builds both print the expected weights, gradient and gradcheck"
