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

# The API reference builds without a single Doxygen warning (docs/Doxyfile fails on any).
find_program(DOXYGEN_EXECUTABLE doxygen)
if(REDIS_LOCK_BUILD_TESTS AND DOXYGEN_EXECUTABLE)
  add_test(NAME docs.doxygen COMMAND ${CMAKE_COMMAND} -E env
    REDIS_LOCK_DOCS_OUT=${PROJECT_BINARY_DIR}/docs ${DOXYGEN_EXECUTABLE} docs/Doxyfile
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs.doxygen PROPERTIES FAIL_REGULAR_EXPRESSION "warning|error")
endif()
