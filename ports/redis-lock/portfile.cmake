# SPDX-License-Identifier: MIT
# Overlay port of redis_lock, building the source tree it lives in:
#   vcpkg install redis-lock --overlay-ports=<redis_lock checkout>/ports
# (A registry port would fetch a release archive instead of SOURCE_PATH below.)
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

vcpkg_check_features(OUT_FEATURE_OPTIONS feature_options
  FEATURES
    cli REDIS_LOCK_BUILD_CLI
    prometheus REDIS_LOCK_PROMETHEUS)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${feature_options}
    -DREDIS_LOCK_INSTALL=ON
    -DREDIS_LOCK_BUILD_TESTS=OFF
    -DREDIS_LOCK_BUILD_EXAMPLES=OFF
    -DREDIS_LOCK_BUILD_BENCH=OFF
    -DREDIS_LOCK_BUILD_FUZZERS=OFF)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME redis_lock CONFIG_PATH lib/cmake/redis_lock)
vcpkg_fixup_pkgconfig()

if("cli" IN_LIST FEATURES)
  vcpkg_copy_tools(TOOL_NAMES redis-lock AUTO_CLEAN)
endif()

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug/include" "${CURRENT_PACKAGES_DIR}/debug/share")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
