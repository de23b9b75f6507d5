# SPDX-License-Identifier: MIT
# Installs the library, its headers, a CMake package (redis_lockConfig.cmake) and redis_lock.pc.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(REDIS_LOCK_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/redis_lock"
    CACHE STRING "Where the CMake package files are installed")

install(TARGETS redis_lock EXPORT redis_lockTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET redis_lock_cli)
  install(TARGETS redis_lock_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
# (<redis_lock/prometheus.hpp> with its library only.)
install(DIRECTORY include/redis_lock "${PROJECT_BINARY_DIR}/include/redis_lock"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  PATTERN prometheus.hpp EXCLUDE
  PATTERN prometheus_export.hpp EXCLUDE)
install(EXPORT redis_lockTargets
  NAMESPACE redis_lock::
  DESTINATION ${REDIS_LOCK_CMAKE_DIR})
# The optional component, in an export set of its own: find_package(redis_lock COMPONENTS
# prometheus) loads it (and finds prometheus-cpp) only when asked for.
if(TARGET redis_lock_prometheus)
  install(TARGETS redis_lock_prometheus EXPORT redis_lock_prometheusTargets
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES include/redis_lock/prometheus.hpp
                "${PROJECT_BINARY_DIR}/include/redis_lock/prometheus_export.hpp"
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/redis_lock)
  install(EXPORT redis_lock_prometheusTargets
    NAMESPACE redis_lock::
    DESTINATION ${REDIS_LOCK_CMAKE_DIR})
endif()

# A static redis_lock carries its private dependencies (hiredis, OpenSSL) to the consumer's link.
get_target_property(_rl_type redis_lock TYPE)
if(_rl_type STREQUAL "SHARED_LIBRARY")
  set(REDIS_LOCK_SHARED ON)
  set(REDIS_LOCK_PC_CFLAGS_EXTRA "")
else()
  set(REDIS_LOCK_SHARED OFF)
  set(REDIS_LOCK_PC_CFLAGS_EXTRA " -DREDIS_LOCK_STATIC_DEFINE")
endif()

configure_package_config_file(cmake/redis_lockConfig.cmake.in
  "${PROJECT_BINARY_DIR}/redis_lockConfig.cmake"
  INSTALL_DESTINATION ${REDIS_LOCK_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/redis_lockConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/redis_lockConfig.cmake"
  "${PROJECT_BINARY_DIR}/redis_lockConfigVersion.cmake"
  cmake/redis_lock_find_hiredis.cmake
  DESTINATION ${REDIS_LOCK_CMAKE_DIR})

# pkg-config, relocatable (prefix found from the .pc file's own place). A static library's
# dependencies belong on every consumer's link line, so that the plain
# `pkg-config --cflags --libs redis_lock` links; a shared one links them itself.
set(_rl_pc_requires " hiredis libssl libcrypto")
set(_rl_pc_libs " -lboost_url -pthread")
if(REDIS_LOCK_SHARED)
  set(REDIS_LOCK_PC_REQUIRES "")
  set(REDIS_LOCK_PC_LIBS "")
  set(REDIS_LOCK_PC_REQUIRES_PRIVATE "${_rl_pc_requires}")
  set(REDIS_LOCK_PC_LIBS_PRIVATE "${_rl_pc_libs}")
else()
  set(REDIS_LOCK_PC_REQUIRES "${_rl_pc_requires}")
  set(REDIS_LOCK_PC_LIBS "${_rl_pc_libs}")
  set(REDIS_LOCK_PC_REQUIRES_PRIVATE "")
  set(REDIS_LOCK_PC_LIBS_PRIVATE "")
endif()
file(RELATIVE_PATH REDIS_LOCK_PC_TO_PREFIX
  "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
configure_file(cmake/redis_lock.pc.in "${PROJECT_BINARY_DIR}/redis_lock.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/redis_lock.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
