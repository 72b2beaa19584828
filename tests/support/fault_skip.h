// Skips a test that arms fault points (kernels/base/fault_injection.h) in a
// build that compiles them out.
#ifndef MAXSIMD_TESTS_SUPPORT_FAULT_SKIP_H_
#define MAXSIMD_TESTS_SUPPORT_FAULT_SKIP_H_

#include "gtest/gtest.h"
#include "kernels/base/fault_injection.h"

#define MAXSIMD_SKIP_WITHOUT_FAULT_INJECTION()                         \
  do {                                                                 \
    if (!::maxsimd::fault::kEnabled) {                                 \
      GTEST_SKIP() << "this build has no fault injection "             \
                      "(configure with -DMAXSIMD_FAULT_INJECTION=ON)"; \
    }                                                                  \
  } while (0)

#endif  // MAXSIMD_TESTS_SUPPORT_FAULT_SKIP_H_
