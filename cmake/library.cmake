# SPDX-License-Identifier: MIT
# The library: its objects (redis_lock_internal) and the public redis_lock made of them.
include(${CMAKE_CURRENT_LIST_DIR}/warnings.cmake)

# Lua scripts are embedded with their SHA1 computed here, so EVALSHA needs no hashing code.
set(_rl_script_defs "")
set(_rl_library_functions "")
set(_rl_all_scripts "")
# The scripts that mint, read the clock or keep a queue share functions: first.lua goes first
# in a script whose first line is '-- (first.lua)', and shared.lua where a script's line
# '-- (shared.lua)' stands (after its common path: each function defined costs the server a
# closure on every call). A script says what it shares: a new one needs nothing here.
set(_rl_first "${PROJECT_SOURCE_DIR}/src/scripts/first.lua")
set(_rl_shared "${PROJECT_SOURCE_DIR}/src/scripts/shared.lua")
# The idempotent requests' scripts (idem_*) share idem.lua instead, where their line
# '-- (idem.lua)' stands.
set(_rl_idem "${PROJECT_SOURCE_DIR}/src/scripts/idem.lua")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_rl_first}" "${_rl_shared}"
                                                              "${_rl_idem}")
file(READ "${_rl_first}" _rl_first_body)
file(READ "${_rl_shared}" _rl_shared_body)
file(READ "${_rl_idem}" _rl_idem_body)
# Every script of src/scripts/ but the shared parts; its entry in src/script_table.hpp says how
# it is called (script_table_test.cpp holds the two together).
file(GLOB _rl_lua CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/scripts/*.lua")
# One file per deployment shape (src/topology.hpp): a new shape is a new file.
file(GLOB _rl_shapes CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/topology_*.cpp")
list(SORT _rl_lua)
foreach(_file ${_rl_lua})
  get_filename_component(name "${_file}" NAME_WE)
  if(name STREQUAL "first" OR name STREQUAL "shared" OR name STREQUAL "idem")
    continue()
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_file}")
  file(READ "${_file}" _body)
  set(_raw "\n${_body}")
  if(_body MATCHES "^-- \\(first\\.lua\\)\n")
    string(REGEX REPLACE "^-- \\(first\\.lua\\)\n" "" _body "${_body}")
    string(PREPEND _body "${_rl_first_body}")
  endif()
  string(REPLACE "\n-- (shared.lua)\n" "\n${_rl_shared_body}" _body "${_body}")
  string(REPLACE "\n-- (idem.lua)\n" "\n${_rl_idem_body}" _body "${_body}")
  # Comment lines travel to the server for nothing (and a script over 16 KB is refused from
  # a client not yet authenticated, before its NOAUTH): blanked, so line numbers still match.
  string(REGEX REPLACE "\n[ \t]*--[^\n]*" "\n" _body "\n${_body}")
  string(SUBSTRING "${_body}" 1 -1 _body)
  # Its flags, from its header's '-- flags:' line (script_table.hpp's Flags; none: it writes).
  set(_flag "")
  if(_raw MATCHES "\n-- flags: ([a-z-]+)\n")
    set(_flag "${CMAKE_MATCH_1}")
  endif()
  # The idempotent requests' scripts say their flags to EVAL too (Redis 7's shebang): a
  # client that cannot call the library still records an outcome on a full store (their
  # first command is a read, so EVAL's "a script that has written first" does not apply),
  # and still reads a record on one.
  if(name MATCHES "^idem_" AND _flag)
    string(PREPEND _body "#!lua flags=${_flag}\n")
  endif()
  string(SHA1 _sha "${_body}")
  # The same script as a function of the library below: its own part only, first.lua's and
  # shared.lua's functions being defined once, when the library loads. What they keep for
  # one call (the clock read, the counter minted) is forgotten as each call begins.
  file(READ "${_file}" _own)
  string(REGEX REPLACE "^-- \\(first\\.lua\\)\n" "" _own "${_own}")
  string(REPLACE "\n-- (shared.lua)\n" "\n" _own "${_own}")
  string(REPLACE "\n-- (idem.lua)\n" "\n" _own "${_own}")
  string(REGEX REPLACE "\n[ \t]*--[^\n]*" "\n" _own "\n${_own}")
  string(SUBSTRING "${_own}" 1 -1 _own)
  # A release, an extension or a force-release runs when the server is out of memory, as
  # the EVAL of a script that has written first does (a lease freed, never a key added); an
  # acquire is refused then, before it writes anything. A look writes nothing: it runs
  # wherever a read does (a replica, a server refusing writes). Of the idempotent requests'
  # scripts, those that record what an attempt that began learnt run out of memory too (the
  # outcome of work done must not be lost), the reconciler's claim of due keys (it only
  # moves scores) and the shard count's check (every client's first call; it writes one small
  # key, once per store): a client that starts on a full store still replays and records.
  # A begin or a next attempt is refused before anything is sent downstream.
  set(_flags "")
  if(_flag)
    set(_flags ", flags = {'${_flag}'}")
  endif()
  string(APPEND _rl_library_functions
    "redis.register_function{function_name = 'rl_@H@_${name}'${_flags}, callback = function(KEYS, ARGV)\n"
    "clock, minted = nil, nil\n${_own}\nend}\n")
  string(APPEND _rl_all_scripts "&${name}_script, ")
  string(APPEND _rl_script_defs
    "inline constexpr Script ${name}_script{\"${name}\", R\"redis_lock_lua(${_body})redis_lock_lua\", \"${_sha}\", \"rl_@H@_${name}\"};\n")
endforeach()
# The scripts as one Redis Functions library (FUNCTION LOAD once per connection, then FCALL):
# first.lua and shared.lua once at its top. Its name and its functions' carry a hash of its
# text, so that builds of other scripts (a rolling upgrade) each have their own.
set(_rl_library "${_rl_first_body}${_rl_shared_body}${_rl_idem_body}")
string(REGEX REPLACE "\n[ \t]*--[^\n]*" "\n" _rl_library "\n${_rl_library}")
string(APPEND _rl_library
  "${_rl_library_functions}"
  "redis.register_function{function_name = 'rl_@H@_probe', flags = {'no-writes', 'allow-oom'}, "
  "callback = function() return 1 end}\n")
string(SHA1 _rl_library_sha "${_rl_library}")
string(SUBSTRING "${_rl_library_sha}" 0 12 _rl_library_hash)
string(REPLACE "@H@" "${_rl_library_hash}" _rl_library "${_rl_library}")
string(REPLACE "@H@" "${_rl_library_hash}" _rl_script_defs "${_rl_script_defs}")
string(PREPEND _rl_library "#!lua name=redis_lock_${_rl_library_hash}\n")
string(APPEND _rl_script_defs
  "inline constexpr std::string_view function_library_name = \"redis_lock_${_rl_library_hash}\";\n"
  "inline constexpr std::string_view function_probe = \"rl_${_rl_library_hash}_probe\";\n"
  "inline constexpr std::string_view function_library = R\"redis_lock_lua(${_rl_library})redis_lock_lua\";\n"
  "inline constexpr const Script* all_scripts[] = {${_rl_all_scripts}};\n")
configure_file(src/scripts.hpp.in "${PROJECT_BINARY_DIR}/generated/redis_lock_scripts.hpp" @ONLY)

# Every source of the library, in this one list, compiled once into redis_lock_internal. The
# public redis_lock (static, or shared with -DBUILD_SHARED_LIBS=ON: hidden visibility, only
# what export.hpp marks is exported) is made of these objects. Whatever reaches into src/
# (unit tests, fuzzers, lock_bench) links redis_lock_internal instead, and so builds and runs
# the same in a shared build, where the internals are hidden. It links the objects themselves:
# such a program must not link redis_lock as well (one copy of each static, e.g. Asio's
# service ids).
add_library(redis_lock_internal OBJECT
  src/acquire_all.cpp
  src/acquire_fsm.cpp
  src/acquire_op.cpp
  src/backoff.cpp
  src/admin.cpp
  src/config.cpp
  src/config_syntax.cpp
  src/connect_fsm.cpp
  src/connection.cpp
  src/connection_connect.cpp
  src/election.cpp
  src/engine.cpp
  src/error.cpp
  src/idempotency.cpp
  src/idempotency_op.cpp
  src/idempotency_record.cpp
  src/idempotency_run.cpp
  src/idempotency_store.cpp
  src/keys.cpp
  src/library_use.cpp
  src/lease_ops.cpp
  src/observe_op.cpp
  src/pipeline.cpp
  src/lock.cpp
  src/lock_service.cpp
  src/quorum.cpp
  src/quorum_call.cpp
  src/redirect.cpp
  src/renewal.cpp
  src/replies.cpp
  src/resp.cpp
  src/script_call.cpp
  src/script_table.cpp
  src/router.cpp
  src/sentinel_locator.cpp
  src/slot_map.cpp
  src/shutdown_watch.cpp
  src/tls.cpp
  src/token.cpp
  src/topology.cpp
  ${_rl_shapes}
  src/validate.cpp
  src/waiters.cpp)
target_compile_features(redis_lock_internal PUBLIC cxx_std_20)
target_include_directories(redis_lock_internal PUBLIC
  "${PROJECT_SOURCE_DIR}/include"
  "${PROJECT_BINARY_DIR}/include"
  "${PROJECT_SOURCE_DIR}/src"
  "${PROJECT_BINARY_DIR}/generated")
target_link_libraries(redis_lock_internal PUBLIC
  Boost::system Boost::url Threads::Threads hiredis::hiredis OpenSSL::SSL OpenSSL::Crypto)
redis_lock_warnings(redis_lock_internal)
set_target_properties(redis_lock_internal PROPERTIES
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  CXX_EXTENSIONS OFF)

add_library(redis_lock $<TARGET_OBJECTS:redis_lock_internal>)
add_library(redis_lock::redis_lock ALIAS redis_lock)

target_compile_features(redis_lock PUBLIC cxx_std_20)
# (Installed, the include directory comes from install(TARGETS ... INCLUDES DESTINATION).)
target_include_directories(redis_lock PUBLIC
  "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>"
  "$<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>")
target_link_libraries(redis_lock
  PUBLIC Boost::system Threads::Threads
  PRIVATE Boost::url hiredis::hiredis OpenSSL::SSL OpenSSL::Crypto)
set_target_properties(redis_lock PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  EXPORT_NAME redis_lock
  LINKER_LANGUAGE CXX)

include(GenerateExportHeader)
generate_export_header(redis_lock
  BASE_NAME REDIS_LOCK
  EXPORT_FILE_NAME "${PROJECT_BINARY_DIR}/include/redis_lock/export.hpp")
configure_file(cmake/version.hpp.in "${PROJECT_BINARY_DIR}/include/redis_lock/version.hpp" @ONLY)
# The objects are compiled for the kind of library they go into: position-independent and
# defining redis_lock_EXPORTS (what CMake does for a shared library's own sources) for a shared
# one; with REDIS_LOCK_STATIC_DEFINE (no export attributes) for a static one.
get_target_property(_rl_type redis_lock TYPE)
if(_rl_type STREQUAL "SHARED_LIBRARY")
  set_target_properties(redis_lock_internal PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_definitions(redis_lock_internal PRIVATE redis_lock_EXPORTS)
else()
  target_compile_definitions(redis_lock_internal PUBLIC REDIS_LOCK_STATIC_DEFINE)
  target_compile_definitions(redis_lock PUBLIC REDIS_LOCK_STATIC_DEFINE)
endif()
