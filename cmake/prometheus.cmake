# SPDX-License-Identifier: MIT
# The optional component redis_lock::prometheus (<redis_lock/prometheus.hpp>): the observer
# that keeps Prometheus metrics, on prometheus-cpp's core library. REDIS_LOCK_PROMETHEUS:
# AUTO builds it when prometheus-cpp is found, ON requires it, OFF leaves it out.
set(REDIS_LOCK_PROMETHEUS AUTO CACHE STRING
    "Build redis_lock::prometheus, which needs prometheus-cpp (AUTO, ON, OFF)")
set_property(CACHE REDIS_LOCK_PROMETHEUS PROPERTY STRINGS AUTO ON OFF)

if(REDIS_LOCK_PROMETHEUS STREQUAL "ON")
  find_package(prometheus-cpp CONFIG REQUIRED)
elseif(REDIS_LOCK_PROMETHEUS STREQUAL "AUTO")
  find_package(prometheus-cpp CONFIG QUIET)
elseif(NOT REDIS_LOCK_PROMETHEUS STREQUAL "OFF")
  message(FATAL_ERROR "REDIS_LOCK_PROMETHEUS is '${REDIS_LOCK_PROMETHEUS}': AUTO, ON or OFF")
endif()

if(NOT REDIS_LOCK_PROMETHEUS STREQUAL "OFF" AND TARGET prometheus-cpp::core)
  add_library(redis_lock_prometheus src/prometheus/observer.cpp)
  add_library(redis_lock::prometheus ALIAS redis_lock_prometheus)
  target_link_libraries(redis_lock_prometheus PUBLIC redis_lock prometheus-cpp::core)
  redis_lock_warnings(redis_lock_prometheus)
  set_target_properties(redis_lock_prometheus PROPERTIES
    EXPORT_NAME prometheus
    OUTPUT_NAME redis_lock_prometheus
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    CXX_EXTENSIONS OFF)
  # Its own export macro (REDIS_LOCK_PROMETHEUS_EXPORT): a shared build exports from this
  # library, not from redis_lock.
  include(GenerateExportHeader)
  generate_export_header(redis_lock_prometheus
    BASE_NAME REDIS_LOCK_PROMETHEUS
    EXPORT_FILE_NAME "${PROJECT_BINARY_DIR}/include/redis_lock/prometheus_export.hpp")
  target_include_directories(redis_lock_prometheus PUBLIC
    "$<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>")
  get_target_property(_rl_prom_type redis_lock_prometheus TYPE)
  if(NOT _rl_prom_type STREQUAL "SHARED_LIBRARY")
    target_compile_definitions(redis_lock_prometheus PUBLIC REDIS_LOCK_PROMETHEUS_STATIC_DEFINE)
  endif()
  message(STATUS "redis_lock: building redis_lock::prometheus (prometheus-cpp ${prometheus-cpp_VERSION})")
elseif(NOT REDIS_LOCK_PROMETHEUS STREQUAL "OFF")
  message(STATUS "redis_lock: prometheus-cpp not found; redis_lock::prometheus is not built")
endif()
