# cmake -P test of cmake/MaxsimdCudaArchs.cmake: the -gencode flags each
# MAXSIMD_CUDA_ARCHS entry gives, and the entries it refuses. Needs no CUDA.
#   cmake -DSOURCE_DIR=<repo> -P tests/cmake/cuda_archs_test.cmake
include(${SOURCE_DIR}/cmake/MaxsimdCudaArchs.cmake)

set(_failures 0)
function(expect_flags archs expected)
  maxsimd_cuda_gencode_flags("${archs}" got)
  if(NOT "${got}" STREQUAL "${expected}")
    message(SEND_ERROR "MAXSIMD_CUDA_ARCHS=${archs}:\n  got      ${got}\n"
            "  expected ${expected}")
  else()
    message(STATUS "ok: ${archs} -> ${got}")
  endif()
endfunction()

# The release set: SASS for Ampere, Ada and Hopper (arch-specific), and the
# PTX that newer GPUs compile at load.
expect_flags("all"
  "-gencode=arch=compute_80,code=sm_80;-gencode=arch=compute_86,code=sm_86;-gencode=arch=compute_89,code=sm_89;-gencode=arch=compute_90a,code=sm_90a;-gencode=arch=compute_90,code=compute_90")
expect_flags("90a" "-gencode=arch=compute_90a,code=sm_90a")
# Hopper machine code is always sm_90a, which the TMA kernels need.
expect_flags("90" "-gencode=arch=compute_90a,code=sm_90a")
expect_flags("80-virtual" "-gencode=arch=compute_80,code=compute_80")
expect_flags("86;all;86"
  "-gencode=arch=compute_86,code=sm_86;-gencode=arch=compute_80,code=sm_80;-gencode=arch=compute_89,code=sm_89;-gencode=arch=compute_90a,code=sm_90a;-gencode=arch=compute_90,code=compute_90")

# Refused entries stop the configure with a message naming the entry: run
# each in a cmake -P of its own and expect failure.
foreach(bad "75" "sm_80" "70-virtual" "x86")
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/cuda_archs_bad.cmake
       "include(${SOURCE_DIR}/cmake/MaxsimdCudaArchs.cmake)\n"
       "maxsimd_cuda_gencode_flags(\"${bad}\" out)\n")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -P ${CMAKE_CURRENT_BINARY_DIR}/cuda_archs_bad.cmake
    RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(rc EQUAL 0)
    message(SEND_ERROR "MAXSIMD_CUDA_ARCHS=${bad} was accepted")
  elseif(NOT err MATCHES "MAXSIMD_CUDA_ARCHS")
    message(SEND_ERROR "MAXSIMD_CUDA_ARCHS=${bad}: the error does not name "
            "the variable:\n${err}")
  else()
    message(STATUS "ok: ${bad} refused")
  endif()
endforeach()
file(REMOVE ${CMAKE_CURRENT_BINARY_DIR}/cuda_archs_bad.cmake)
