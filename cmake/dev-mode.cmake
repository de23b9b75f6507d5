# SPDX-License-Identifier: MIT
# Tests, examples and benchmarks: built only when redis_lock is the top-level project.
# State file of the shared test server (CTest fixture "redis_standalone").
set(REDIS_LOCK_FIXTURE_STATE "${PROJECT_BINARY_DIR}/tests/standalone.state")

# Prometheus and promtool, for the metrics tests (the rules of docs/operations.md, the
# checkout example's scrape): the system's, or the programs ./scripts/test extracts from
# Debian's prometheus package into build/tools/prometheus (nothing installed, no service
# started). Without them those tests say so and are skipped.
find_program(REDIS_LOCK_PROMTOOL promtool HINTS "${PROJECT_SOURCE_DIR}/build/tools/prometheus/usr/bin")
find_program(REDIS_LOCK_PROMETHEUS_SERVER prometheus
  HINTS "${PROJECT_SOURCE_DIR}/build/tools/prometheus/usr/bin")
# Where the tests write the rules of docs/operations.md (metrics.operations_rules_extracted).
set(REDIS_LOCK_RULES_DIR "${PROJECT_BINARY_DIR}/tests/operations_rules")

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
