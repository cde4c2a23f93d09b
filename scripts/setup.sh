# Shared by scripts/demo and scripts/test: install what is missing, configure, build.
# Sourced, not run. Quiet when there is nothing to do.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${ATTOGRAD_BUILD_DIR:-$ROOT/build}

# Debian 12 packages the build needs.
PACKAGES=(
  g++ meson ninja-build pkg-config python3
  libopenblas-dev libfmt-dev libgtest-dev libbenchmark-dev
  libdnnl-dev cmake ocl-icd-opencl-dev   # oneDNN: bfloat16 matrix products (optional; its CMake package needs cmake and OpenCL headers)
  libboost1.81-dev libboost-program-options1.81-dev libboost-json1.81-dev  # one Boost version, 1.81
  libboost-mpi1.81-dev libopenmpi-dev openmpi-bin  # data-parallel training over MPI (optional)
  libpng-dev unifont                # pictures: PNG files, and a font for their labels
  fortunes fortunes-zh              # text corpora for the Mini-GPT (English and Chinese)
  clang libclang-rt-14-dev          # scripts/fuzz: clang and its libFuzzer and sanitizer runtimes
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "attograd: need root (or sudo) to run: $*" >&2
    exit 1
  fi
}

install_missing_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "attograd: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# configure_and_build [DIR [meson setup options]]: the release build by default.
configure_and_build() {
  local dir=${1:-$BUILD_DIR}
  shift || true
  local options=("$@")
  [ ${#options[@]} -eq 0 ] && options=(--buildtype=release --werror)
  if [ ! -f "$dir/build.ninja" ]; then
    echo "attograd: configuring $(basename "$dir")/ (${options[*]})"
    meson setup "$dir" "$ROOT" "${options[@]}" >/dev/null
  fi
  local log
  log=$(mktemp)
  if ! ninja -C "$dir" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "attograd: build failed" >&2
    exit 1
  fi
  grep -q "no work to do" "$log" || echo "attograd: built $(basename "$dir")/ ($(grep -c '^\[' "$log") steps)"
  rm -f "$log"
}

install_missing_packages
configure_and_build
