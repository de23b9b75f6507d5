# SPDX-License-Identifier: MIT
# Finds the libraries redis_lock builds against.
find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED COMPONENTS system url)
find_package(OpenSSL 1.1.1 REQUIRED)  # rediss:// through asio::ssl
include(${CMAKE_CURRENT_LIST_DIR}/redis_lock_find_hiredis.cmake)
redis_lock_find_hiredis(REQUIRED)
