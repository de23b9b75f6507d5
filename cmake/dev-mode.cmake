# SPDX-License-Identifier: MIT
# Tests, examples and benchmarks: built only when redis_lock is the top-level project.
# State file of the shared test server (CTest fixture "redis_standalone").
set(REDIS_LOCK_FIXTURE_STATE "${PROJECT_BINARY_DIR}/tests/standalone.state")

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
if(REDIS_LOCK_BUILD_FUZZERS)
  enable_testing()
  add_subdirectory(tests/fuzz)
endif()
