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
  message(STATUS "redis_lock: building redis_lock::prometheus (prometheus-cpp ${prometheus-cpp_VERSION})")
elseif(NOT REDIS_LOCK_PROMETHEUS STREQUAL "OFF")
  message(STATUS "redis_lock: prometheus-cpp not found; redis_lock::prometheus is not built")
endif()
