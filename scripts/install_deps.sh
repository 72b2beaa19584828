#!/usr/bin/env bash
# Installs maxsimd's build and test dependencies from Debian's packages, only
# those missing, so it is idempotent and quick on a machine that has them.
# The CUDA toolkit is not a Debian package here: CUDA targets are built when
# nvcc is found at /usr/local/cuda (or CUDACXX), and skipped otherwise.
#
#   scripts/install_deps.sh           everything: build, tests, CI checks
#   scripts/install_deps.sh --build   only what builds the server and clients
#                                     (the Dockerfile's build stage)
set -euo pipefail

BUILD_PACKAGES=(cmake ninja-build g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  grpc-proto libabsl-dev libspdlog-dev prometheus-cpp-dev zlib1g-dev)
TEST_PACKAGES=(libgtest-dev libgmock-dev libbenchmark-dev
  clang-format curl
  clang-14 libfuzzer-14-dev libclang-rt-14-dev
  yamllint prometheus
  python3-numpy python3-grpcio python3-protobuf python3-grpc-tools openssl
  python3-venv python3-pip python3-setuptools python3-wheel python3-build
  python3-mypy python3-torch
  buildah debootstrap haproxy)

case "${1:-}" in
  --build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  "") PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *)
    echo "usage: $0 [--build]" >&2
    exit 1
    ;;
esac

missing=()
for pkg in "${PACKAGES[@]}"; do
  # "install ok installed" only: a removed package with leftover config
  # files still answers dpkg -s.
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null |
      grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
# The Kubernetes manifest check (deploy/k8s/validate) runs on Node.js 18 or
# newer with npm: Debian's nodejs and npm, unless a node with npm is already
# on PATH (another distribution's nodejs bundles npm, and Debian's npm
# would conflict with it).
if [[ "${1:-}" != --build ]] && ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
command -v apt-get >/dev/null || {
  echo "install_deps: apt-get not found; install by hand: ${missing[*]}" >&2
  exit 1
}
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || {
    echo "install_deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  }
  SUDO=(sudo)
fi
"${SUDO[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q \
  --no-install-recommends "${missing[@]}"
