# SPDX-License-Identifier: MIT
# The redis_lock library target.
include(${CMAKE_CURRENT_LIST_DIR}/warnings.cmake)

# Lua scripts are embedded with their SHA1 computed here, so EVALSHA needs no hashing code.
set(_rl_script_defs "")
foreach(name acquire release extend raise_fence)
  set(_file "${PROJECT_SOURCE_DIR}/src/scripts/${name}.lua")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_file}")
  file(READ "${_file}" _body)
  string(SHA1 _sha "${_body}")
  string(APPEND _rl_script_defs
    "inline constexpr Script ${name}_script{\"${name}\", R\"redis_lock_lua(${_body})redis_lock_lua\", \"${_sha}\"};\n")
endforeach()
configure_file(src/scripts.hpp.in "${PROJECT_BINARY_DIR}/generated/redis_lock_scripts.hpp" @ONLY)

add_library(redis_lock
  src/acquire_op.cpp
  src/config.cpp
  src/connection.cpp
  src/error.cpp
  src/keys.cpp
  src/lease_ops.cpp
  src/lock.cpp
  src/lock_service.cpp
  src/quorum.cpp
  src/quorum_call.cpp
  src/redirect.cpp
  src/renewal.cpp
  src/replies.cpp
  src/resp.cpp
  src/router.cpp
  src/sentinel_locator.cpp
  src/shutdown_watch.cpp
  src/tls.cpp
  src/token.cpp
  src/validate.cpp
  src/waiters.cpp)
add_library(redis_lock::redis_lock ALIAS redis_lock)

target_compile_features(redis_lock PUBLIC cxx_std_20)
target_include_directories(redis_lock
  PUBLIC
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>"
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>"
  PRIVATE
    "${PROJECT_SOURCE_DIR}/src"
    "${PROJECT_BINARY_DIR}/generated")
target_link_libraries(redis_lock
  PUBLIC Boost::system Threads::Threads
  PRIVATE Boost::url hiredis::hiredis OpenSSL::SSL OpenSSL::Crypto)
redis_lock_warnings(redis_lock)
set_target_properties(redis_lock PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  EXPORT_NAME redis_lock
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  CXX_EXTENSIONS OFF)

include(GNUInstallDirs)
include(GenerateExportHeader)
generate_export_header(redis_lock
  BASE_NAME REDIS_LOCK
  EXPORT_FILE_NAME "${PROJECT_BINARY_DIR}/include/redis_lock/export.hpp")
configure_file(cmake/version.hpp.in "${PROJECT_BINARY_DIR}/include/redis_lock/version.hpp" @ONLY)
target_include_directories(redis_lock PUBLIC "$<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>")
if(NOT BUILD_SHARED_LIBS)
  target_compile_definitions(redis_lock PUBLIC REDIS_LOCK_STATIC_DEFINE)
endif()
