#!/usr/bin/env bash
# Configures maxsimd with the CUDA targets on against Debian's own CMake
# modules, unpacked from the cmake-data package that matches the installed
# cmake, so that a machine whose modules were changed by hand (a patched
# FindCUDAToolkit.cmake, say) cannot hide a configure error that every stock
# Debian 12 machine would hit.
#
#   scripts/check_stock_cmake.sh [SOURCE_DIR]   (default: this checkout)
#
# The stock modules go first on CMAKE_MODULE_PATH, so find_package() and
# include() take them over the machine's; the check then confirms from a
# trace that the stock FindCUDAToolkit.cmake ran. It needs nvcc (as
# scripts/test.sh finds it) and apt-get; it downloads one .deb from Debian's
# archive and installs nothing. Environment: CUDACXX (default
# /usr/local/cuda/bin/nvcc), WORK_DIR (default: a temporary folder).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$(cd "${1:-$ROOT}" && pwd)"
NVCC="${CUDACXX:-/usr/local/cuda/bin/nvcc}"

if [[ ! -x "$NVCC" ]]; then
  echo "check_stock_cmake: no nvcc at $NVCC: the CUDA configure cannot be" \
    "checked on this machine" >&2
  exit 1
fi
version="$(dpkg-query -W -f='${Version}' cmake-data)"
cmake_minor="$(cmake --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')"
work="${WORK_DIR:-$(mktemp -d)}"
[[ -n ${WORK_DIR:-} ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/deb"

# apt-get download needs the package lists; a machine that had every
# package already may never have fetched them.
download() { (cd "$work/deb" && apt-get download -q "cmake-data=$version"); }
if ! download 2>"$work/download.err"; then
  echo "check_stock_cmake: apt-get download failed; updating the package lists"
  if [[ $(id -u) -eq 0 ]]; then apt-get update -q; else sudo apt-get update -q; fi
  download
fi
dpkg-deb -x "$work"/deb/cmake-data_*.deb "$work/root"
modules="$work/root/usr/share/cmake-$cmake_minor/Modules"
[[ -f "$modules/FindCUDAToolkit.cmake" ]] || {
  echo "check_stock_cmake: no FindCUDAToolkit.cmake in cmake-data $version" >&2
  exit 1
}
if cmp -s "$modules/FindCUDAToolkit.cmake" \
  "/usr/share/cmake-$cmake_minor/Modules/FindCUDAToolkit.cmake"; then
  echo "check_stock_cmake: this machine's FindCUDAToolkit.cmake is stock"
else
  echo "check_stock_cmake: this machine's FindCUDAToolkit.cmake differs from" \
    "cmake-data $version's; configuring against the stock one"
fi

echo "== configure $SRC against cmake-data $version's modules (CUDA on)"
trace="$work/trace.json"
if ! cmake -S "$SRC" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_MODULE_PATH="$modules" -DMAXSIMD_WITH_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" \
  --trace-format=json-v1 --trace-redirect="$trace" \
  --trace-source="$modules/FindCUDAToolkit.cmake" >"$work/configure.log" 2>&1; then
  grep -A4 'CMake Error' "$work/configure.log" >&2 || tail -20 "$work/configure.log" >&2
  echo "check_stock_cmake: FAILED: configure against Debian's stock modules" >&2
  exit 1
fi
# The trace holds the lines of the stock module that ran: none means
# find_package took another FindCUDAToolkit.cmake.
if ! grep -q '"cmd"' "$trace"; then
  echo "check_stock_cmake: FAILED: the stock FindCUDAToolkit.cmake never ran" >&2
  exit 1
fi
echo "check_stock_cmake: configure passed with cmake-data $version's modules" \
  "($(grep -c '"cmd"' "$trace") lines of the stock FindCUDAToolkit.cmake ran)"
