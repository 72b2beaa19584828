# shellcheck shell=bash
# Sourced by the scripts that run bundles (scripts/bundle.sh) on a machine
# with an NVIDIA GPU (bench/run_gpu.sh, bench/probe.sh).
#
# use_bundle DIR: unpacks DIR.tgz into DIR where only the archive was
# carried, and puts DIR/lib and the CUDA toolkit's libraries on the search
# path.
use_bundle() {
  local dir=$1
  if [[ ! -d $dir/bin && -f $dir.tgz ]]; then
    mkdir -p "$dir"
    tar -C "$dir" -xzf "$dir.tgz"
  fi
  export LD_LIBRARY_PATH=$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
}
