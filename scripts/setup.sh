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

# install_missing_packages [PACKAGE...]: installs, in one apt-get run, those of PACKAGES and of
# the given packages that are not installed yet.
install_missing_packages() {
  local missing=()
  for p in "${PACKAGES[@]}" "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "attograd: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# show_build_progress NAME LOG: reads ninja's output, keeps all of it in LOG and says how far
# the build is from its "[done/total]" lines: on a terminal one line, redrawn at every step;
# elsewhere (CI, a pipe) a line at every tenth, so no minute of a long build passes silently.
show_build_progress() {
  local name=$1 log=$2 line finished total percent tenths=0 width=80 drawn=0
  if [ -t 1 ]; then
    width=$(tput cols 2>/dev/null || echo 80)
    [ "$width" -gt 20 ] || width=80
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line" >&3
    [[ $line =~ ^\[([0-9]+)/([0-9]+)\]\ (.*) ]] || continue
    finished=${BASH_REMATCH[1]} total=${BASH_REMATCH[2]}
    [ "$total" -gt 0 ] || continue
    percent=$((100 * finished / total))
    if [ -t 1 ]; then
      line="attograd: building $name: $percent% ($finished/$total) ${BASH_REMATCH[3]}"
      printf '\r\033[K%s' "${line:0:width-1}"
      drawn=1
    elif [ $((10 * finished / total)) -gt "$tenths" ] && [ "$finished" -lt "$total" ]; then
      tenths=$((10 * finished / total))
      echo "attograd: building $name: $percent% ($finished/$total)"
    fi
  done 3>"$log"
  if [ "$drawn" = 1 ]; then printf '\r\033[K'; fi
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
  local log status=0
  log=$(mktemp)
  # The status format is fixed here, whatever NINJA_STATUS the caller has, as the progress
  # reads it. With pipefail the pipe fails when ninja does.
  NINJA_STATUS='[%f/%t] ' ninja -C "$dir" 2>&1 | show_build_progress "$(basename "$dir")/" "$log" || status=$?
  if [ "$status" -ne 0 ]; then
    # The error output, without the lines of the steps that went well.
    grep -Ev '^\[[0-9]+/[0-9]+\] ' "$log" >&2 || true
    rm -f "$log"
    echo "attograd: build failed" >&2
    exit 1
  fi
  grep -q "no work to do" "$log" || echo "attograd: built $(basename "$dir")/ ($(grep -c '^\[' "$log") steps)"
  rm -f "$log"
}

# A caller may name more packages before sourcing this file: scripts/test --full sets
# EXTRA_PACKAGES=(chromium python3-torch).
install_missing_packages ${EXTRA_PACKAGES[@]+"${EXTRA_PACKAGES[@]}"}
configure_and_build
