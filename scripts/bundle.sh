#!/usr/bin/env bash
# Copies built binaries and the shared libraries they need, other than the C
# library family and the NVIDIA driver, into a self-contained folder:
#
#   scripts/bundle.sh <build-dir> <out-dir> <binary>...
#
# Binaries are paths relative to <build-dir> (or absolute). They land in
# <out-dir>/bin, their libraries in <out-dir>/lib; run them with
# LD_LIBRARY_PATH=<out-dir>/lib. Used to carry test and benchmark builds to
# a machine with an NVIDIA GPU, and by the Docker runtime stage.
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 <build-dir> <out-dir> <binary>..." >&2
  exit 1
fi
build_dir=$1
out_dir=$2
shift 2

# Libraries the target system must provide itself: glibc's (they must match
# the kernel and the loader) and the GPU driver's (they must match the
# driver).
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda\.so|libnvidia-)'

mkdir -p "$out_dir/bin" "$out_dir/lib"
for bin in "$@"; do
  [[ "$bin" = /* ]] || bin="$build_dir/$bin"
  if [[ ! -x "$bin" ]]; then
    echo "bundle.sh: $bin is not an executable" >&2
    exit 1
  fi
  cp -f "$bin" "$out_dir/bin/"
  # Debug info is most of a RelWithDebInfo binary's size and is not needed
  # to run it; the build tree keeps the unstripped copy.
  strip --strip-debug "$out_dir/bin/$(basename "$bin")"
  # ldd prints "name => /path (addr)" for resolved libraries.
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" && -f "$path" ]] || continue
    if [[ "$name" =~ $skip_re ]]; then continue; fi
    cp -fL "$path" "$out_dir/lib/$name"
  done < <(ldd "$bin")
done
echo "bundle.sh: $(ls "$out_dir/bin" | wc -l) binaries, $(ls "$out_dir/lib" | wc -l) libraries, $(du -sh "$out_dir" | cut -f1) in $out_dir"
