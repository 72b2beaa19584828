#!/usr/bin/env bash
# The C++ client library builds and links where no CUDA toolkit is: in a
# mount namespace of its own, with an empty directory over /usr/local/cuda
# (and every /usr/local/cuda-*), a fresh configure of the project
# (CUDA, tests and benchmarks off) must find no nvcc, and building
# client/examples/rerank_example, a program that uses maxsimd_client alone,
# must build no maxsimd library but maxsimd_client, maxsimd_proto and
# maxsimd_base. The example must then reference no CUDA symbol and need no
# CUDA library, and run (its usage text).
#
#   tests/client/client_without_cuda_test.sh [SOURCE_DIR]
#
# It needs a mount namespace: root (unshare -m), or else unprivileged user
# namespaces (unshare -r -m); without either it fails and says so. It builds
# only the targets it needs, in a tree of its own under $TMPDIR (removed at
# the end): a few minutes on 2 cores. Environment: JOBS (default 2),
# WORK_DIR (default: a temporary folder, kept when given).
set -euo pipefail

NAME=client_without_cuda_test
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "${1:-$HERE/../..}" && pwd)"

if [[ -z ${MAXSIMD_IN_CUDA_FREE_NS:-} ]]; then
  for flags in "--mount --propagation private" \
    "--user --map-root-user --mount --propagation private"; do
    # shellcheck disable=SC2086
    if unshare $flags true 2>/dev/null; then
      # shellcheck disable=SC2086
      exec unshare $flags env MAXSIMD_IN_CUDA_FREE_NS=1 \
        bash "${BASH_SOURCE[0]}" "$SRC"
    fi
  done
  echo "$NAME: FAILED: cannot make a mount namespace to hide the CUDA" \
    "toolkit in: 'unshare -m' needs root (or CAP_SYS_ADMIN), and" \
    "'unshare -r -m' unprivileged user namespaces; the test did not run" >&2
  exit 1
fi

fail() {
  echo "$NAME: FAILED: $*" >&2
  exit 1
}

work="${WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/maxsimd-client-no-cuda.XXXXXX")}"
[[ -n ${WORK_DIR:-} ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/empty"

# Hide the toolkit: an empty directory over each CUDA directory (a bind
# mount over /usr/local/cuda lands on the versioned directory it links to).
hidden=()
for dir in /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
  [[ -d $dir ]] || continue
  real="$(realpath "$dir")"
  [[ " ${hidden[*]} " == *" $real "* ]] && continue
  mount --bind "$work/empty" "$real" || fail "cannot bind-mount over $real"
  hidden+=("$real")
done
# And every nvcc on PATH (a copy, or a wrapper such as /usr/local/bin/nvcc
# that runs the toolkit's), under a file that is not executable.
unset CUDACXX CUDAHOSTCXX CUDA_PATH CUDA_HOME CUDAToolkit_ROOT
: >"$work/no-nvcc"
chmod 0644 "$work/no-nvcc"
find_nvcc() {
  local dir
  local IFS=:
  for dir in $PATH; do
    if [[ -f $dir/nvcc && -x $dir/nvcc ]]; then
      echo "$dir/nvcc"
      return 0
    fi
  done
  return 1
}
while nvcc_path="$(find_nvcc)"; do
  [[ ${#hidden[@]} -lt 32 ]] || fail "nvcc is still found at $nvcc_path"
  mount --bind "$work/no-nvcc" "$nvcc_path" ||
    fail "cannot bind-mount over $nvcc_path"
  hidden+=("$nvcc_path")
done
echo "== CUDA toolkit hidden: ${hidden[*]:-(none was installed)}"

build="$work/build"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
echo "== configure $SRC (CUDA, tests and benchmarks off)"
if ! cmake -S "$SRC" -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DMAXSIMD_WITH_CUDA=OFF \
  -DMAXSIMD_BUILD_TESTS=OFF -DMAXSIMD_BUILD_BENCH=OFF \
  >"$work/configure.log" 2>&1; then
  tail -30 "$work/configure.log" >&2
  fail "configure without the CUDA toolkit"
fi
echo "   configured in ${SECONDS}s"
cuda_compiler="$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' \
  "$build/CMakeCache.txt")"
if [[ -n $cuda_compiler && $cuda_compiler != *NOTFOUND ]]; then
  fail "configure found a CUDA compiler: $cuda_compiler"
fi

echo "== build rerank_example (maxsimd_client alone)"
if ! cmake --build "$build" --target rerank_example -j "${JOBS:-2}" \
  >"$work/build.log" 2>&1; then
  tail -40 "$work/build.log" >&2
  fail "building rerank_example, which links only maxsimd_client"
fi
echo "   built in ${SECONDS}s from the start"
example="$(find "$build" -type f -name rerank_example -perm -u+x | head -1)"
[[ -n $example ]] || fail "no rerank_example binary under $build"

# The maxsimd libraries the example needed: the client library and what
# it links, nothing above it (maxsimd_kernels holds the CUDA backends,
# maxsimd_index links maxsimd_kernels).
built="$(find "$build" -name 'libmaxsimd_*.a' -printf '%f\n' | sort | xargs)"
expected="libmaxsimd_base.a libmaxsimd_client.a libmaxsimd_proto.a"
if [[ $built != "$expected" ]]; then
  fail "rerank_example needed the libraries '$built'; maxsimd_client may" \
    "link only maxsimd_proto and maxsimd_base ('$expected')"
fi

# No CUDA symbol, defined or referenced, and no CUDA library.
cuda_symbols="$(nm -a "$example" | grep -iE 'cuda|nvtx|\bcu[A-Z][a-z]' |
  head -5 || true)"
[[ -z $cuda_symbols ]] || fail "rerank_example holds CUDA symbols:" \
  "$cuda_symbols"
cuda_libs="$(readelf -d "$example" | grep NEEDED |
  grep -iE 'cuda|nvrtc|nvidia|cublas|nvtx' || true)"
[[ -z $cuda_libs ]] || fail "rerank_example needs CUDA libraries: $cuda_libs"

"$example" --help >"$work/help.txt" || fail "rerank_example --help failed"
grep -q '^Usage: rerank_example' "$work/help.txt" ||
  fail "rerank_example --help printed no usage"
status=0
"$example" >/dev/null 2>&1 || status=$?
[[ $status -eq 2 ]] || fail "rerank_example without arguments exited" \
  "$status, not 2 (usage)"

echo "$NAME: passed: maxsimd_client and rerank_example build and link with" \
  "no CUDA toolkit (libraries: $built)"
