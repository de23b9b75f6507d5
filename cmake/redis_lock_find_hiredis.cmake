# SPDX-License-Identifier: MIT
# Provides the imported target hiredis::hiredis however hiredis was installed: with its own
# CMake package (upstream 1.x, vcpkg, Conan), with Debian's "Hiredis" package (0.14, which
# defines only variables), or with nothing but pkg-config or bare headers and a library.
include_guard(GLOBAL)

function(_redis_lock_hiredis_target inc lib)
  add_library(hiredis::hiredis UNKNOWN IMPORTED GLOBAL)
  set_target_properties(hiredis::hiredis PROPERTIES
    IMPORTED_LOCATION "${lib}"
    INTERFACE_INCLUDE_DIRECTORIES "${inc}")
endfunction()

function(redis_lock_find_hiredis)
  if(TARGET hiredis::hiredis)
    return()
  endif()
  # 1. A CMake package that exports the target itself.
  find_package(hiredis CONFIG QUIET)
  if(TARGET hiredis::hiredis)
    return()
  endif()
  if(TARGET hiredis::hiredis_static)
    add_library(hiredis::hiredis INTERFACE IMPORTED GLOBAL)
    target_link_libraries(hiredis::hiredis INTERFACE hiredis::hiredis_static)
    return()
  endif()
  # 2. Debian's package. Its version file breaks on an empty requested version, so ask for one.
  find_package(Hiredis 0.13 CONFIG QUIET)
  if(HIREDIS_INCLUDE_DIRS AND HIREDIS_LIBRARIES)
    _redis_lock_hiredis_target("${HIREDIS_INCLUDE_DIRS}" "${HIREDIS_LIBRARIES}")
    return()
  endif()
  # 3. pkg-config. Its include dir points inside hiredis/; we include <hiredis/hiredis.h>.
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(REDIS_LOCK_HIREDIS QUIET hiredis)
    if(REDIS_LOCK_HIREDIS_FOUND)
      find_library(_rl_hiredis_lib NAMES hiredis HINTS ${REDIS_LOCK_HIREDIS_LIBRARY_DIRS})
      find_path(_rl_hiredis_inc hiredis/hiredis.h HINTS ${REDIS_LOCK_HIREDIS_INCLUDE_DIRS}/..)
      if(_rl_hiredis_lib AND _rl_hiredis_inc)
        _redis_lock_hiredis_target("${_rl_hiredis_inc}" "${_rl_hiredis_lib}")
        return()
      endif()
    endif()
  endif()
  # 4. Plain search.
  find_library(_rl_hiredis_lib2 NAMES hiredis)
  find_path(_rl_hiredis_inc2 hiredis/hiredis.h)
  if(_rl_hiredis_lib2 AND _rl_hiredis_inc2)
    _redis_lock_hiredis_target("${_rl_hiredis_inc2}" "${_rl_hiredis_lib2}")
    return()
  endif()
  if(ARGV0 STREQUAL "REQUIRED")
    message(FATAL_ERROR "redis_lock: hiredis not found (install libhiredis-dev, or point CMAKE_PREFIX_PATH at it)")
  endif()
endfunction()
