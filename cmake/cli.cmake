# SPDX-License-Identifier: MIT
# The redis-lock command-line tool (tools/redis-lock), installed with the library. It uses
# the public API only; its command line is parsed with Boost.Program_options.
include(GNUInstallDirs)
find_package(Boost 1.81 REQUIRED COMPONENTS program_options)
# The command-line rules alone, also linked by the unit tests.
add_library(redis_lock_cli_options STATIC tools/redis-lock/options.cpp)
target_include_directories(redis_lock_cli_options PUBLIC tools/redis-lock)
target_compile_definitions(redis_lock_cli_options PRIVATE REDIS_LOCK_VERSION="${PROJECT_VERSION}")
target_link_libraries(redis_lock_cli_options PUBLIC Boost::program_options)
redis_lock_warnings(redis_lock_cli_options)

add_executable(redis_lock_cli
  tools/redis-lock/main.cpp tools/redis-lock/process.cpp tools/redis-lock/diagnose.cpp
  tools/redis-lock/output.cpp tools/redis-lock/supervision.cpp tools/redis-lock/cmd_run.cpp
  tools/redis-lock/cmd_status.cpp tools/redis-lock/cmd_force_release.cpp
  tools/redis-lock/cmd_observe.cpp)
# Installed beside a shared redis_lock, it finds the library relative to itself.
set_target_properties(redis_lock_cli PROPERTIES
  OUTPUT_NAME redis-lock
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
target_link_libraries(redis_lock_cli PRIVATE redis_lock::redis_lock redis_lock_cli_options)
redis_lock_warnings(redis_lock_cli)
# GCC 12 reports the frame of an Asio coroutine with external linkage (the subcommands',
# cmd_*.cpp) as freed by a mismatched operator delete when it inlines both ends (TSan's
# build): a false positive of -Wmismatched-new-delete on awaitable_frame_base.
target_compile_options(redis_lock_cli PRIVATE
  $<$<CXX_COMPILER_ID:GNU>:-Wno-mismatched-new-delete>)
