#!/usr/bin/env bash
# Builds and checks the maxsimd image with Debian's buildah, on a machine
# without a Docker engine (buildah, debootstrap: scripts/install_deps.sh).
#
#   scripts/image.sh base [--debian]   the base images the Dockerfile names,
#                                      from Debian's archive (debootstrap);
#                                      --debian: not the CUDA_IMAGE one
#   scripts/image.sh full [TAG]        both stages: once with the Dockerfile's
#                                      defaults (CUDA_IMAGE), then hostcuda
#   scripts/image.sh hostcuda [TAG]    both stages with --build-context
#                                      cuda=$CUDA_DIR (TAG-hostcuda)
#   scripts/image.sh runtime DIR [TAG] the runtime stage alone, its binaries
#                                      from DIR/bin (--build-context
#                                      binaries=DIR), no CUDA build
#   scripts/image.sh check [TAG]       runs the image's entrypoint in its root
#                                      file system as the image's user: the
#                                      HEALTHCHECK command reads SERVING, a
#                                      rerank through maxsimctl, SIGTERM
#                                      exits 0 (a CPU server: no GPU here)
#   scripts/image.sh ci BUILD_DIR      what CI runs: bundles BUILD_DIR's
#                                      maxsimd, maxsimctl and maxsimd_health,
#                                      then runtime and check
#   scripts/image.sh list-elf [TAG]    the GPU code in the image's maxsimd
#                                      (cuobjdump --list-elf and --list-ptx,
#                                      where cuobjdump is found)
#
# The base images: debootstrap's minbase of bookworm, tagged as both
# debian:bookworm and debian:bookworm-slim (the slim image is minbase less
# documentation), and for the default CUDA_IMAGE an image holding this
# machine's toolkit ($CUDA_DIR as /usr/local/cuda), since the build stage
# takes nothing else from it. A machine that can pull from a registry needs
# neither: `docker build .` pulls the real ones.
#
# Storage: vfs (works anywhere, as root, without overlay or fuse), in
# buildah's default store; about 10 GB free for `full`. Environment: TAG (default maxsimd:0.1.0),
# CUDA_DIR (default /usr/local/cuda, resolved), MIRROR and SECURITY_MIRROR
# (default Debian's),
# BUILD_ARGS (more buildah build flags), PORT (default 50151).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG_DEFAULT="${TAG:-maxsimd:0.1.0}"
CUDA_DIR="$(readlink -f "${CUDA_DIR:-/usr/local/cuda}")"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
# Every buildah call goes through bh: the storage driver is a global flag
# (buildah reads no environment variable for it).
bh() { buildah --storage-driver vfs "$@"; }
# No --layers: with vfs every layer is a whole copy of the file system (the
# build stage's are 3 to 4 GB each), so only the final images are kept.
BUILD_FLAGS=(--isolation chroot --format docker)

# The Dockerfile's default CUDA_IMAGE, read from it.
cuda_image() {
  sed -n 's/^ARG CUDA_IMAGE=//p' "$ROOT/Dockerfile" | head -1
}

have_image() { bh images --quiet "$1" >/dev/null 2>&1; }

# A one-layer image of directory $1's contents, tagged with $2...
image_of_dir() {
  local dir=$1
  shift
  local ctr
  ctr=$(bh from scratch)
  bh copy --quiet "$ctr" "$dir" / >/dev/null
  bh config --cmd /bin/bash "$ctr"
  bh commit --quiet --format docker "$ctr" "$1" >/dev/null
  bh rm "$ctr" >/dev/null
  local t
  for t in "${@:2}"; do bh tag "$1" "$t"; done
}

# The Debian base images; with --debian, not the CUDA one (the runtime
# stage needs no toolkit).
base() {
  base_debian
  [[ "${1:-}" == --debian ]] || base_cuda
}

base_debian() {
  if have_image docker.io/library/debian:bookworm &&
    have_image docker.io/library/debian:bookworm-slim; then
    echo "image.sh: debian:bookworm and debian:bookworm-slim are in the store"
  else
    local rootfs
    rootfs=$(mktemp -d)
    echo "image.sh: debootstrap --variant=minbase bookworm ($MIRROR)"
    debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" \
      >"$rootfs.log" 2>&1 || {
      tail -20 "$rootfs.log" >&2
      exit 1
    }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    # The package sources of Debian's own bookworm images: the release, its
    # updates and its security fixes (debootstrap writes the release alone).
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOS
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
    image_of_dir "$rootfs" docker.io/library/debian:bookworm \
      docker.io/library/debian:bookworm-slim
    rm -rf "$rootfs" "$rootfs.log"
  fi
}

base_cuda() {
  local cuda
  cuda="docker.io/$(cuda_image)"
  if have_image "$cuda"; then
    echo "image.sh: $cuda is in the store"
  else
    echo "image.sh: $cuda from this machine's toolkit $CUDA_DIR"
    local tree
    tree=$(mktemp -d)
    mkdir -p "$tree/usr/local"
    cp -a "$CUDA_DIR" "$tree/usr/local/cuda"
    image_of_dir "$tree" "$cuda"
    rm -rf "$tree"
  fi
}

full() {
  local tag=${1:-$TAG_DEFAULT}
  base
  echo "== buildah build (the Dockerfile's defaults) -> $tag"
  # shellcheck disable=SC2086  # BUILD_ARGS is a list of flags
  bh build "${BUILD_FLAGS[@]}" ${BUILD_ARGS:-} -t "$tag" "$ROOT"
  hostcuda "$tag"
}

# The image again, its toolkit from $CUDA_DIR (a named build context that
# replaces the `cuda` stage), tagged TAG-hostcuda.
hostcuda() {
  local tag=${1:-$TAG_DEFAULT}
  echo "== buildah build --build-context cuda=$CUDA_DIR -> $tag-hostcuda"
  # shellcheck disable=SC2086
  bh build "${BUILD_FLAGS[@]}" ${BUILD_ARGS:-} \
    --build-context "cuda=$CUDA_DIR" --build-arg CUDA_HOME=/ \
    -t "$tag-hostcuda" "$ROOT"
}

runtime() {
  local dir tag=${2:-$TAG_DEFAULT}
  dir=$(cd "$1" && pwd)
  local b
  for b in maxsimd maxsimctl maxsimd_health; do
    [[ -x "$dir/bin/$b" ]] || {
      echo "image.sh: $dir/bin/$b is missing" >&2
      exit 1
    }
  done
  base_debian
  echo "== buildah build --target runtime --build-context binaries=$dir -> $tag"
  # shellcheck disable=SC2086
  bh build "${BUILD_FLAGS[@]}" ${BUILD_ARGS:-} --target runtime \
    --build-context "binaries=$dir" -t "$tag" "$ROOT"
}

# Prints config field $2 ("User", "Entrypoint", ...; a list one item a
# line) of the image whose `buildah inspect` JSON is $1.
config() {
  python3 -c '
import json, sys
value = json.loads(sys.argv[1])["Docker"]["config"]
for key in sys.argv[2].split("."):
    value = (value or {}).get(key)
if isinstance(value, list):
    print("\n".join(value))
elif value is not None:
    print(value)' "$1" "$2"
}

check() {
  local tag=${1:-$TAG_DEFAULT}
  local port=${PORT:-50151}
  local user workdir
  local -a ep args health envs
  local inspected
  inspected=$(bh inspect --type image "$tag")
  user=$(config "$inspected" User)
  workdir=$(config "$inspected" WorkingDir)
  mapfile -t ep < <(config "$inspected" Entrypoint)
  mapfile -t args < <(config "$inspected" Cmd)
  mapfile -t health < <(config "$inspected" Healthcheck.Test)
  mapfile -t envs < <(config "$inspected" Env)
  echo "image $tag: user $user, entrypoint ${ep[*]}, cmd ${args[*]}"
  echo "HEALTHCHECK ${health[*]}"
  [[ -n "$user" && "$user" != 0* && "$user" != root* ]] || {
    echo "image.sh: the image runs as root" >&2
    exit 1
  }
  [[ "${health[0]:-}" == CMD ]] || {
    echo "image.sh: the HEALTHCHECK is not in exec (CMD) form" >&2
    exit 1
  }
  local ctr rootfs
  ctr=$(bh from --pull=false "$tag")
  rootfs=$(bh mount "$ctr")
  local work
  work=$(mktemp -d)
  local server_pid=""
  cleanup_check() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
      kill -KILL "$server_pid" 2>/dev/null || true
    fi
    umount "$rootfs/proc" "$rootfs/dev" 2>/dev/null || true
    bh umount "$ctr" >/dev/null 2>&1 || true
    bh rm "$ctr" >/dev/null 2>&1 || true
    rm -rf "$work"
  }
  trap cleanup_check EXIT
  mount -t proc proc "$rootfs/proc"
  mount --bind /dev "$rootfs/dev"
  # As the image's user, in its working directory, with its environment.
  local -a in_image=(env -i "${envs[@]}" chroot --userspec="$user" "$rootfs"
    /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$workdir")
  # The entrypoint and CMD as the image states them, then the flags a CPU
  # machine needs: the HEALTHCHECK command targets 127.0.0.1:50051, so the
  # server listens there unless that port is taken.
  local listen=127.0.0.1:50051
  if (exec 3<>/dev/tcp/127.0.0.1/50051) 2>/dev/null; then
    listen=127.0.0.1:$port
    echo "image.sh: 127.0.0.1:50051 is taken; the server listens on $listen"
  fi
  # Started directly (no function, no subshell), so that $! is the
  # server's own pid, which every program on the way execs into.
  "${in_image[@]}" "${ep[@]}" "${args[@]}" --cpu --listen="$listen" \
    --metrics_listen= \
    >"$work/server.log" 2>&1 &
  server_pid=$!
  # The HEALTHCHECK command as the image runs it ("CMD" form), its target
  # moved with --listen where 50051 was taken.
  local -a hc=("${health[@]:1}")
  hc=("${hc[@]//127.0.0.1:50051/$listen}")
  local ok=0
  for _ in $(seq 120); do
    kill -0 "$server_pid" 2>/dev/null || break
    if "${in_image[@]}" "${hc[@]}" >/dev/null 2>&1; then
      ok=1
      break
    fi
    sleep 0.5
  done
  if [[ $ok -ne 1 ]]; then
    tail -20 "$work/server.log" >&2
    echo "image.sh: FAILED: the HEALTHCHECK command never read SERVING" >&2
    exit 1
  fi
  echo "HEALTHCHECK: SERVING"
  # A corpus loaded and a rerank run through the image's maxsimctl, as
  # scripts/demo.sh does: query 0 is built from one document's tokens, which
  # must rank first among its candidates.
  local ctl=("${in_image[@]}" maxsimctl --target="$listen")
  local data=/tmp/maxsimd-image-check
  "${ctl[@]}" generate --out "$data" --docs 300 --dim 128 \
    --queries 1 --seed 7 >/dev/null
  "${ctl[@]}" create --name check --dim 128 >/dev/null
  "${ctl[@]}" add --corpus check --tokens "$data/tokens.npy" \
    --cu-seqlens "$data/cu_seqlens.npy" --ids "$data/ids.txt" >/dev/null
  local out source top
  source=$(<"$rootfs$data/query_0.source")
  out=$("${ctl[@]}" query --corpus check --query "$data/query_0.npy" \
    --candidates-file "$data/candidates_0.txt" --top-k 3)
  echo "$out"
  top=$(awk '$1 == "1" { print $2; exit }' <<<"$out")
  [[ "$top" == "$source" ]] || {
    echo "image.sh: FAILED: the rerank ranked '$top' first, not $source" >&2
    exit 1
  }
  echo "rerank through maxsimctl: $source ranks first"
  kill -TERM "$server_pid"
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  if [[ $rc -ne 0 ]]; then
    tail -20 "$work/server.log" >&2
    echo "image.sh: FAILED: the server exited $rc after SIGTERM" >&2
    exit 1
  fi
  echo "SIGTERM: the entrypoint exited 0"
  trap - EXIT
  cleanup_check
  echo "image.sh: check passed for $tag"
}

ci() {
  local build_dir=$1 bundle
  bundle=$(mktemp -d)
  "$ROOT/scripts/bundle.sh" "$build_dir" "$bundle" server/maxsimd \
    client/maxsimctl client/maxsimd_health >/dev/null
  runtime "$bundle" "$TAG_DEFAULT-ci"
  check "$TAG_DEFAULT-ci"
  rm -rf "$bundle"
}

list_elf() {
  local tag=${1:-$TAG_DEFAULT} ctr rootfs tool
  tool=$(command -v cuobjdump || echo "$CUDA_DIR/bin/cuobjdump")
  [[ -x "$tool" ]] || {
    echo "image.sh: no cuobjdump (CUDA toolkit) on this machine" >&2
    exit 1
  }
  ctr=$(bh from --pull=false "$tag")
  rootfs=$(bh mount "$ctr")
  "$tool" --list-elf "$rootfs/usr/local/bin/maxsimd" | sed 's/^/elf: /' |
    sort | uniq -c | sort -rn
  "$tool" --list-ptx "$rootfs/usr/local/bin/maxsimd" | sed 's/^/ptx: /' |
    sort | uniq -c | sort -rn
  bh umount "$ctr" >/dev/null
  bh rm "$ctr" >/dev/null
}

cmd=${1:-}
shift || true
case "$cmd" in
  base) base "$@" ;;
  full) full "$@" ;;
  hostcuda) hostcuda "$@" ;;
  runtime) runtime "$@" ;;
  check) check "$@" ;;
  ci) ci "$@" ;;
  list-elf) list_elf "$@" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
    exit 1
    ;;
esac
