#!/usr/bin/env bash
# Fails when a C++/CUDA source differs from clang-format's Google style
# (.clang-format). Run with --fix to rewrite the files in place.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
clang-format --dry-run --Werror "${files[@]}"
echo "check_format: ${#files[@]} files clean"
