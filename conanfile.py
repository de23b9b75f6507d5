# SPDX-License-Identifier: MIT
# Conan 2 recipe of redis_lock (CMakeDeps + CMakeToolchain):
#   conan create . --build=missing          (runs test_package/)
# The version is read from CMakeLists.txt, the one place it is written.
import os
import re

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load


class RedisLockConan(ConanFile):
    name = "redis_lock"
    license = "MIT"
    description = "Distributed locks on Redis for C++20 and Boost.Asio"
    topics = ("redis", "distributed-lock", "asio", "fencing-token")
    package_type = "library"
    settings = "os", "arch", "compiler", "build_type"
    # prometheus: the optional component redis_lock::prometheus (PrometheusObserver).
    options = {"shared": [True, False], "fPIC": [True, False], "cli": [True, False],
               "prometheus": [True, False]}
    default_options = {"shared": False, "fPIC": True, "cli": True, "prometheus": False}
    exports_sources = "CMakeLists.txt", "LICENSE", "cmake/*", "include/*", "src/*", "tools/*"

    def set_version(self):
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        self.version = re.search(r"project\(redis_lock\s+VERSION\s+([0-9.]+)", text).group(1)

    def config_options(self):
        if self.settings.os == "Windows":
            del self.options.fPIC

    def configure(self):
        if self.options.shared:
            self.options.rm_safe("fPIC")

    def requirements(self):
        # Asio and URL come with Boost; hiredis is the protocol; OpenSSL for rediss://.
        self.requires("boost/[>=1.81 <2]")
        self.requires("hiredis/[>=1.0 <2]")
        self.requires("openssl/[>=1.1.1 <4]")
        if self.options.prometheus:
            # Its public headers take a prometheus::Registry: transitive to the consumer.
            self.requires("prometheus-cpp/[>=1.0 <2]", transitive_headers=True)

    def validate(self):
        from conan.tools.build import check_min_cppstd
        from conan.errors import ConanInvalidConfiguration
        check_min_cppstd(self, 20)
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration("redis_lock supports Linux")

    def layout(self):
        cmake_layout(self)

    def generate(self):
        toolchain = CMakeToolchain(self)
        toolchain.cache_variables.update({
            "REDIS_LOCK_INSTALL": True,
            "REDIS_LOCK_BUILD_CLI": bool(self.options.cli),
            "REDIS_LOCK_PROMETHEUS": "ON" if self.options.prometheus else "OFF",
            "REDIS_LOCK_BUILD_TESTS": False,
            "REDIS_LOCK_BUILD_EXAMPLES": False,
            "REDIS_LOCK_BUILD_BENCH": False,
            "REDIS_LOCK_BUILD_FUZZERS": False,
        })
        toolchain.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        CMake(self).install()

    def package_info(self):
        # The components of the CMake package: redis_lock::redis_lock, and with the option
        # redis_lock::prometheus (find_package(redis_lock COMPONENTS prometheus)).
        self.cpp_info.set_property("cmake_file_name", "redis_lock")
        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "redis_lock::redis_lock")
        core.set_property("pkg_config_name", "redis_lock")
        core.libs = ["redis_lock"]
        core.requires = ["boost::boost", "hiredis::hiredis", "openssl::openssl"]
        core.defines = ["BOOST_ASIO_NO_DEPRECATED"]
        if not self.options.shared:
            core.defines.append("REDIS_LOCK_STATIC_DEFINE")
        core.system_libs = ["pthread"]
        if self.options.prometheus:
            metrics = self.cpp_info.components["prometheus"]
            metrics.set_property("cmake_target_name", "redis_lock::prometheus")
            metrics.libs = ["redis_lock_prometheus"]
            metrics.requires = ["core", "prometheus-cpp::prometheus-cpp"]
