# SPDX-License-Identifier: MIT
# Conan 2 recipe of redis_lock (CMakeDeps + CMakeToolchain):
#   conan create . --build=missing          (runs test_package/)
# The version is read from CMakeLists.txt, the one place it is written.
import os
import re

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load, rmdir


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
        # The public headers include Boost.Asio and Boost.System: a consumer compiles them.
        self.requires("boost/[>=1.81 <2]", transitive_headers=True)
        # hiredis 0.14 (Debian 12's, which every test here links) and 1.x: the library uses
        # only the reply reader, the same in both.
        self.requires("hiredis/[>=0.14 <2]")
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
        platform = self._platform_packages()
        if platform and len(platform) != len(self._requirement_names()):
            raise ConanInvalidConfiguration(
                f"redis_lock: {', '.join(platform)} from [platform_requires] and the rest of "
                f"{', '.join(sorted(self._requirement_names()))} built by Conan: take all of them "
                "from the system or none (Conan 2.8's components cannot name a platform package)")

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
        # The consumer's find_package files are CMakeDeps', made from package_info(): the
        # CMake package's own config and pkg-config files would point at this build's prefix.
        rmdir(self, os.path.join(self.package_folder, "lib", "cmake"))
        rmdir(self, os.path.join(self.package_folder, "lib", "pkgconfig"))

    def package_info(self):
        # The targets find_package(redis_lock) gives: redis_lock::redis_lock (the core) and,
        # with the prometheus option, redis_lock::prometheus. The package's own aggregate
        # target gets a name of its own so that it does not collide with the core's.
        self.cpp_info.set_property("cmake_file_name", "redis_lock")
        self.cpp_info.set_property("cmake_target_name", "redis_lock::redis_lock_all_unofficial")
        self.cpp_info.set_property("pkg_config_name", "redis_lock_all_unofficial")
        static = not self.options.shared

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "redis_lock::redis_lock")
        core.set_property("pkg_config_name", "redis_lock")
        core.libs = ["redis_lock"]
        # (No BOOST_ASIO_NO_DEPRECATED: the library's build choice, not its consumers'.)
        core.defines = ["REDIS_LOCK_STATIC_DEFINE"] if static else []
        core.system_libs = ["pthread"]
        # Public: Boost.Asio and Boost.System (headers). Private, so a consumer links them only
        # when redis_lock is static: Boost.URL, hiredis, OpenSSL.
        self._use(core, "boost", ["headers", "system", "url"], ["boost_url"] if static else [])
        self._use(core, "hiredis", ["hiredislib"], ["hiredis"] if static else [])
        self._use(core, "openssl", ["ssl", "crypto"], ["ssl", "crypto"] if static else [])
        if self.options.prometheus:
            component = self.cpp_info.components["prometheus"]
            component.set_property("cmake_target_name", "redis_lock::prometheus")
            component.set_property("pkg_config_name", "redis_lock_prometheus")
            component.libs = ["redis_lock_prometheus"]
            component.requires = ["core"]
            component.defines = ["REDIS_LOCK_PROMETHEUS_STATIC_DEFINE"] if static else []
            # Public: its header takes a prometheus::Registry.
            self._use(component, "prometheus-cpp", ["prometheus-cpp-core"], ["prometheus-cpp-core"])

    def _use(self, component, package, conan_components, system_libs):
        """A dependency of a component: its Conan components when Conan built it; its libraries
        by name when the profile's [platform_requires] takes it from the system.

        Conan 2.8 cannot name a platform package in a component's requires (CMakeDeps: "not a
        direct dependency") and wants either every direct dependency named or none. So with any
        platform requirement, none is named and each one's libraries are linked by name: a
        profile takes all of them from the system or none (a mix is refused in validate())."""
        if self._platform_packages():
            component.system_libs += system_libs
        else:
            component.requires += [f"{package}::{name}" for name in conan_components]

    def _platform_packages(self):
        """The direct host requirements given by [platform_requires] (no package of their own:
        Conan's dependency views leave them out)."""
        built = {dependency.ref.name for dependency in self.dependencies.host.values()}
        return sorted(self._requirement_names() - built)

    def _requirement_names(self):
        names = {"boost", "hiredis", "openssl"}
        if self.options.prometheus:
            names.add("prometheus-cpp")
        return names
