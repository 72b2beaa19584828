# Turns MAXSIMD_CUDA_ARCHS into nvcc -gencode flags (MAXSIMD_CUDA_GENCODE_FLAGS,
# a list) for maxsimd_set_cuda_flags.
#
# MAXSIMD_CUDA_ARCHS is a list of:
#   80, 86, 89, 90a   machine code (SASS) for that GPU: A100 / A30 (80),
#                     A10 / A40 / RTX 30 (86), L4 / L40S / RTX 40 (89),
#                     H100 / H200 (90a, Hopper with wgmma and TMA);
#                     90 is taken as 90a
#   80-virtual, 90-virtual
#                     PTX only, compiled by the driver when a program first
#                     loads it, on that GPU or any newer one
#   all               80;86;89;90a;90-virtual: every NVIDIA GPU from Ampere
#                     on, Blackwell and later through the PTX (release
#                     builds: the image, bench/run_gpu.sh's bundle)
#   native            the GPUs of this machine, as nvidia-smi lists them
#                     (scripts/demo.sh: a short first build)
#
# The Hopper kernels (maxsim_tma*.cu: wgmma, TMA, mbarrier transactions) run
# only where sm_90a code is loaded: 90a, or compute_90a PTX. For every other
# entry their bodies compile out (kernels/detail/tma.cuh,
# MAXSIMD_TMA_DEVICE_CODE), and the GPU backend asks the device which code it
# loaded (GpuBackend::TmaKernelsAvailable) before it uses them; those GPUs
# serve the dense layouts on the mma.sync kernels.

set(_maxsimd_all_archs 80 86 89 90a 90-virtual)

# Compute capabilities ("8.6", "9.0") of this machine's GPUs, as entries.
function(_maxsimd_native_archs out)
  find_program(_maxsimd_nvidia_smi nvidia-smi)
  if(NOT _maxsimd_nvidia_smi)
    message(FATAL_ERROR "MAXSIMD_CUDA_ARCHS=native: nvidia-smi not found, so "
            "this machine's GPUs are unknown; name the architectures, e.g. "
            "-DMAXSIMD_CUDA_ARCHS=86 or all")
  endif()
  execute_process(
    COMMAND ${_maxsimd_nvidia_smi} --query-gpu=compute_cap
            --format=csv,noheader
    OUTPUT_VARIABLE _caps RESULT_VARIABLE _rc ERROR_QUIET)
  string(REPLACE "\n" ";" _caps "${_caps}")
  set(_archs)
  foreach(_cap IN LISTS _caps)
    string(STRIP "${_cap}" _cap)
    if(_cap STREQUAL "")
      continue()
    endif()
    string(REPLACE "." "" _arch "${_cap}")
    list(APPEND _archs ${_arch})
  endforeach()
  list(REMOVE_DUPLICATES _archs)
  if(NOT _rc EQUAL 0 OR NOT _archs)
    message(FATAL_ERROR "MAXSIMD_CUDA_ARCHS=native: nvidia-smi lists no GPU; "
            "name the architectures, e.g. -DMAXSIMD_CUDA_ARCHS=86 or all")
  endif()
  set(${out} ${_archs} PARENT_SCOPE)
endfunction()

# Sets `out` to the -gencode flags of the entries in `archs`.
function(maxsimd_cuda_gencode_flags archs out)
  set(_entries)
  foreach(_a IN LISTS archs)
    if(_a STREQUAL "all")
      list(APPEND _entries ${_maxsimd_all_archs})
    elseif(_a STREQUAL "native")
      _maxsimd_native_archs(_native)
      list(APPEND _entries ${_native})
    else()
      list(APPEND _entries ${_a})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _entries)
  set(_flags)
  foreach(_e IN LISTS _entries)
    if(_e MATCHES "^([0-9]+)(a?)-virtual$")
      set(_cc ${CMAKE_MATCH_1}${CMAKE_MATCH_2})
      set(_code compute_${_cc})
    elseif(_e MATCHES "^([0-9]+)(a?)$")
      set(_cc ${CMAKE_MATCH_1}${CMAKE_MATCH_2})
      # Hopper's machine code is always the arch-specific variant, which
      # the TMA kernels need and which runs the others as well.
      if(_cc STREQUAL "90")
        set(_cc 90a)
      endif()
      set(_code sm_${_cc})
    else()
      message(FATAL_ERROR "MAXSIMD_CUDA_ARCHS: \"${_e}\" is not an "
              "architecture; use entries such as 80, 86, 89, 90a, "
              "90-virtual, or all, or native")
    endif()
    string(REGEX MATCH "^[0-9]+" _num "${_cc}")
    if(_num LESS 80)
      message(FATAL_ERROR "MAXSIMD_CUDA_ARCHS: ${_e} is older than Ampere; "
              "maxsimd's GPU kernels need compute capability 8.0 or newer")
    endif()
    list(APPEND _flags "-gencode=arch=compute_${_cc},code=${_code}")
  endforeach()
  set(${out} ${_flags} PARENT_SCOPE)
endfunction()
