#!/usr/bin/env python3
"""Self-test of deploy/check_image_deps.py: the real Dockerfile passes, and
Dockerfiles that lose a library's source fail, naming what is missing.

    tests/deploy/check_image_deps_test.py BINARY...
"""

import os
import re
import sys
import tempfile
import unittest

from selftest_support import ROOT, run

CHECKER = os.path.join(ROOT, "deploy", "check_image_deps.py")
BINARIES = []

# A minimal two-stage Dockerfile whose runtime stage takes its libraries from
# the bundle instead of apt.
BUNDLE_DOCKERFILE = """\
FROM debian:bookworm AS build
RUN cmake --build build \\
 && scripts/bundle.sh build /opt/maxsimd server/maxsimd
FROM debian:bookworm-slim
COPY --from=build /opt/maxsimd/ /opt/maxsimd/
{env}
ENTRYPOINT ["/opt/maxsimd/bin/maxsimd"]
"""


def run_checker(dockerfile_text):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "Dockerfile")
        with open(path, "w") as f:
            f.write(dockerfile_text)
        return run([sys.executable, CHECKER, "--dockerfile", path,
                    *BINARIES])


def real_dockerfile():
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        return f.read()


def runtime_packages(text):
    """The package lines of the runtime stage's apt-get install."""
    runtime = text[text.rindex("\nFROM "):]
    block = runtime[runtime.index("apt-get install"):]
    block = block[:block.index("&& rm")]
    return re.findall(r"^\s+([a-z0-9][a-z0-9.+-]+) \\$", block, re.M)


class CheckImageDepsTest(unittest.TestCase):

    def test_real_dockerfile_passes(self):
        code, out = run_checker(real_dockerfile())
        self.assertEqual(code, 0, out)
        self.assertIn("check_image_deps: OK", out)

    def test_removing_any_runtime_package_fails(self):
        text = real_dockerfile()
        packages = runtime_packages(text)
        self.assertGreater(len(packages), 5, packages)
        for pkg in packages:
            with self.subTest(package=pkg):
                pattern = re.compile(r"^\s+" + re.escape(pkg) + r" \\\n",
                                     re.M)
                broken, n = pattern.subn("", text)
                self.assertEqual(n, 1)
                code, out = run_checker(broken)
                self.assertEqual(code, 1, out)
                self.assertIn(f"Debian package {pkg}", out)

    def test_runtime_base_must_be_bookworm_slim(self):
        text = real_dockerfile().replace("FROM debian:bookworm-slim",
                                         "FROM ubuntu:24.04")
        code, out = run_checker(text)
        self.assertEqual(code, 1, out)
        self.assertIn("not debian:bookworm-slim", out)

    def test_bundle_libraries_count_when_copied_and_on_the_path(self):
        code, out = run_checker(BUNDLE_DOCKERFILE.format(
            env="ENV LD_LIBRARY_PATH=/opt/maxsimd/lib"))
        self.assertEqual(code, 0, out)
        self.assertIn("from bundle", out)

    def test_bundle_libraries_need_ld_library_path(self):
        code, out = run_checker(BUNDLE_DOCKERFILE.format(env=""))
        self.assertEqual(code, 1, out)
        self.assertIn("LD_LIBRARY_PATH", out)

    def test_bundle_binaries_alone_provide_no_libraries(self):
        text = BUNDLE_DOCKERFILE.format(env="").replace(
            "/opt/maxsimd/ /opt/maxsimd/", "/opt/maxsimd/bin/ /usr/local/bin/")
        code, out = run_checker(text)
        self.assertEqual(code, 1, out)
        self.assertIn("MISSING libgrpc++.so", out)


if __name__ == "__main__":
    BINARIES = sys.argv[1:]
    if not BINARIES:
        sys.exit(__doc__)
    unittest.main(argv=sys.argv[:1], verbosity=2)
