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
install(DIRECTORY include/redis_lock "${PROJECT_BINARY_DIR}/include/redis_lock"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT redis_lockTargets
  NAMESPACE redis_lock::
  DESTINATION ${REDIS_LOCK_CMAKE_DIR})

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

# pkg-config: hiredis is private for a shared library, but a static one needs it to link.
if(BUILD_SHARED_LIBS)
  set(REDIS_LOCK_PC_REQUIRES_PRIVATE "hiredis fmt")
  set(REDIS_LOCK_PC_LIBS_PRIVATE "-lboost_url")
else()
  set(REDIS_LOCK_PC_REQUIRES_PRIVATE "hiredis fmt")
  set(REDIS_LOCK_PC_LIBS_PRIVATE "-lboost_url -pthread")
endif()
configure_file(cmake/redis_lock.pc.in "${PROJECT_BINARY_DIR}/redis_lock.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/redis_lock.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
