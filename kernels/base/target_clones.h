// MAXSIMD_TARGET_CLONES: compiles a hot CPU loop twice, for AVX2 (Haswell)
// and for the baseline, and lets the dynamic loader pick one at start (an
// ifunc resolver; GCC on x86-64 only).
//
// Off in sanitizer builds: the resolver runs while the loader relocates the
// binary, before the sanitizer's runtime is set up, and its instrumented
// code crashes there. Those builds test the baseline clone.
#ifndef MAXSIMD_KERNELS_BASE_TARGET_CLONES_H_
#define MAXSIMD_KERNELS_BASE_TARGET_CLONES_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define MAXSIMD_TARGET_CLONES \
  __attribute__((target_clones("arch=haswell", "default")))
#else
#define MAXSIMD_TARGET_CLONES
#endif

#endif  // MAXSIMD_KERNELS_BASE_TARGET_CLONES_H_
