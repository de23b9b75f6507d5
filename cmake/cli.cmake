# SPDX-License-Identifier: MIT
# The redis-lock command-line tool, installed with the library.
include(GNUInstallDirs)
add_executable(redis_lock_cli src/cli/redis_lock_cli.cpp)
# Installed beside a shared redis_lock, it finds the library relative to itself.
set_target_properties(redis_lock_cli PROPERTIES
  OUTPUT_NAME redis-lock
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
target_link_libraries(redis_lock_cli PRIVATE redis_lock::redis_lock)
redis_lock_warnings(redis_lock_cli)
