# syntax=docker/dockerfile:1
#
# The maxsimd server image: a CUDA build on Debian 12 (bookworm), run on
# debian:bookworm-slim with Debian's runtime libraries.
#
#   docker build -t maxsimd:0.1.0 .
#   docker run --rm --gpus all -p 50051:50051 -p 9464:9464 maxsimd:0.1.0
#
# Without a Docker engine, scripts/image.sh builds the same image with
# Debian's buildah (base images from debootstrap) and checks it.
#
# Where the CUDA toolkit comes from: the `cuda` stage below, whose
# /usr/local/cuda (CUDA_HOME) is copied into the Debian build stage. Nothing
# else of that image is used, so any image holding a toolkit works:
#   - default: CUDA_IMAGE, an NVIDIA CUDA "devel" image. CUDA 12.4 or newer
#     builds the kernels; this image is built with 13.0, whose static
#     runtime needs an NVIDIA driver >= 580 (12.x: >= 525, the 12.x
#     minor-version compatibility).
#       docker build --build-arg CUDA_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04 .
#   - a toolkit already installed on the build host (BuildKit or buildah
#     replace the `cuda` stage with a named build context):
#       docker build --build-context cuda=/usr/local/cuda-13.0 \
#         --build-arg CUDA_HOME=/ .
# Other build arguments: CUDA_ARCHS (cmake/MaxsimdCudaArchs.cmake; default
# "all": machine code for sm_80, sm_86, sm_89 and sm_90a, the A100 / A10 /
# L4 / L40S / RTX 4090 / H100 class, plus compute_90 PTX that newer GPUs
# compile at load) and BUILD_JOBS (parallel compile jobs; 0 = all cores).
#
# The runtime stage has no toolkit: CUDA's runtime is linked statically, and
# the driver library (libcuda.so.1) is mounted by the NVIDIA Container
# Toolkit. deploy/check_image_deps.py checks (as a ctest test) that its apt
# package list covers every shared library the binaries need. Its binaries
# come from the `binaries` stage, which `--build-context binaries=DIR` (DIR
# holding bin/maxsimd, bin/maxsimctl, bin/maxsimd_health) replaces, so that
# the runtime stage builds from binaries built elsewhere (CI does, with
# scripts/image.sh runtime) without the build stage.

ARG CUDA_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04

FROM ${CUDA_IMAGE} AS cuda

# ---------------------------------------------------------------------------
FROM debian:bookworm AS build
ARG CUDA_HOME=/usr/local/cuda
COPY --from=cuda ${CUDA_HOME}/ /usr/local/cuda/
ENV PATH=/usr/local/cuda/bin:${PATH}
WORKDIR /src
# The dependency layer (the build packages alone) is cached apart from the
# sources.
COPY scripts/install_deps.sh scripts/
RUN bash scripts/install_deps.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
ARG CUDA_ARCHS=all
ARG BUILD_JOBS=0
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DMAXSIMD_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
      -DMAXSIMD_CUDA_ARCHS="${CUDA_ARCHS}" \
      -DMAXSIMD_BUILD_TESTS=OFF -DMAXSIMD_BUILD_BENCH=OFF \
      -DMAXSIMD_FAULT_INJECTION=OFF \
 && jobs="${BUILD_JOBS}" && if [ "$jobs" = 0 ]; then jobs="$(nproc)"; fi \
 && cmake --build build -j "$jobs" \
      --target maxsimd maxsimctl maxsimd_health \
 && scripts/bundle.sh build /opt/maxsimd \
      server/maxsimd client/maxsimctl client/maxsimd_health

# ---------------------------------------------------------------------------
# The runtime stage's binaries (replaceable: --build-context binaries=DIR).
FROM scratch AS binaries
COPY --from=build /opt/maxsimd/bin/ /bin/

# ---------------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime
# Debian's runtime libraries of the -dev packages the build used; the C and
# C++ runtimes (libc6, libgcc-s1, libstdc++6) are already in the base image.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends \
      libabsl20220623 \
      libc-ares2 \
      libfmt9 \
      libgrpc++1.51 \
      libgrpc29 \
      libprometheus-cpp-core1.0 \
      libprotobuf32 \
      libre2-9 \
      libspdlog1.10 \
      libssl3 \
      zlib1g \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 maxsimd \
 && useradd --system --uid 10001 --gid maxsimd --no-create-home \
      --home-dir /var/lib/maxsimd --shell /usr/sbin/nologin maxsimd \
 && mkdir -p /var/lib/maxsimd/data /var/lib/maxsimd/files \
 && chown -R maxsimd:maxsimd /var/lib/maxsimd
# Binaries only: their libraries come from the packages above.
COPY --from=binaries /bin/ /usr/local/bin/

# The NVIDIA Container Toolkit mounts the driver for these.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0"

USER 10001:10001
WORKDIR /var/lib/maxsimd
# gRPC (--listen) and Prometheus /metrics (--metrics_listen).
EXPOSE 50051 9464
# SERVING once the corpora in --data_dir are loaded; allow for a large one.
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s --retries=3 \
  CMD ["/usr/local/bin/maxsimd_health", "--target=127.0.0.1:50051", \
       "--service=maxsimd.v1.Reranker", "--timeout=4s"]
# maxsimd handles SIGTERM itself (health NOT_SERVING, drain, exit 0), so it
# runs as PID 1 with no init wrapper.
ENTRYPOINT ["/usr/local/bin/maxsimd"]
CMD ["--data_dir=/var/lib/maxsimd/data", "--files_dir=/var/lib/maxsimd/files"]
