# SPDX-License-Identifier: MIT
# Builds a consumer of the redis_lock Conan package and runs it (no server needed).
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout


class RedisLockTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        toolchain = CMakeToolchain(self)
        # The optional component, when the package has it: the consumer uses it too.
        toolchain.cache_variables["WITH_PROMETHEUS"] = bool(
            self.dependencies["redis_lock"].options.prometheus)
        toolchain.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "consumer"), env="conanrun")
            # The CLI, when the package has it (a static library's bin/ is not on the run PATH:
            # a user who wants the tool takes the package as a tool_requires).
            redis_lock = self.dependencies["redis_lock"]
            if redis_lock.options.cli:
                self.run(os.path.join(redis_lock.package_folder, "bin", "redis-lock") +
                         " --version", env="conanrun")
