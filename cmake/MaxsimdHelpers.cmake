# Shared CMake helpers for maxsimd targets.

# Applies the project's warning policy to a target: -Wall -Wextra -Werror for
# C++, and the same through nvcc's host compiler for CUDA sources.
function(maxsimd_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror --Werror=all-warnings>)
endfunction()

# Adds CUDA compile flags (architectures, line info, relaxed constexpr) to a
# target with .cu sources.
function(maxsimd_set_cuda_flags target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${MAXSIMD_CUDA_GENCODE_FLAGS} -lineinfo
    --expt-relaxed-constexpr>)
  target_link_options(${target} PRIVATE
    $<$<LINK_LANGUAGE:CUDA>:${MAXSIMD_CUDA_GENCODE_FLAGS}>)
endfunction()

# Test code (not the libraries it tests) compiles at -O1 in optimised builds:
# about a fifth less compile time than -O2 over some fifty test sources, the
# bulk of a CI build, and -O1 keeps GCC's flow-based warnings. The libraries
# under test keep the build type's flags.
function(maxsimd_set_test_flags target)
  maxsimd_set_warnings(${target})
  target_compile_options(${target} PRIVATE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<NOT:$<CONFIG:Debug>>>:-O1>)
endfunction()

# maxsimd_add_test(NAME name SOURCES a.cc ... LIBS lib ... [LABELS l ...])
# Builds one GoogleTest binary and registers each of its tests with CTest.
function(maxsimd_add_test)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} maxsimd_test_support
                        GTest::gmock GTest::gtest GTest::gtest_main)
  maxsimd_set_test_flags(${ARG_NAME})
  gtest_discover_tests(${ARG_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
