# SPDX-License-Identifier: MIT
# Tests, examples and benchmarks: built only when redis_lock is the top-level project.
if(REDIS_LOCK_BUILD_TESTS)
  enable_testing()
  add_subdirectory(tests)
endif()
if(REDIS_LOCK_BUILD_EXAMPLES)
  add_subdirectory(examples)
endif()
if(REDIS_LOCK_BUILD_BENCH)
  add_subdirectory(bench)
endif()
