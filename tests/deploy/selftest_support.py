"""What the deployment checkers' self-tests share: the repository root, a
command's exit status and output, and a copy of the deployment files that
a test breaks before it runs the checker on it.

The self-tests run as scripts (`python3 tests/deploy/x_test.py ...`), so
this module is found next to them.
"""

import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def run(argv, timeout=None):
    """Runs `argv`: its exit status, and its stdout and stderr together."""
    res = subprocess.run(argv, capture_output=True, text=True,
                         timeout=timeout)
    return res.returncode, res.stdout + res.stderr


class BrokenCopyTest(unittest.TestCase):
    """A copy of COPY (files or folders, relative to the repository root) in
    self.tmp; a test breaks it with edit() and runs the checker, command(),
    on it with check() or assert_fails()."""

    COPY = ("deploy",)
    TIMEOUT = None  # of one checker run, in seconds

    def command(self):
        """The checker's command line for the copy in self.tmp."""
        raise NotImplementedError

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=f"{type(self).__name__}_")
        self.addCleanup(shutil.rmtree, self.tmp)
        for rel in self.COPY:
            src = os.path.join(ROOT, rel)
            dst = os.path.join(self.tmp, rel)
            if os.path.isdir(src):
                shutil.copytree(src, dst)
            else:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy(src, dst)

    def edit(self, rel, old, new, count=1):
        """Replaces `old` (which must occur) in the copy of `rel`."""
        path = os.path.join(self.tmp, rel)
        with open(path) as f:
            text = f.read()
        self.assertIn(old, text, f"{rel} no longer contains {old!r}")
        with open(path, "w") as f:
            f.write(text.replace(old, new, count))

    def check(self):
        """The checker's exit status and output on the copy."""
        return run(self.command(), timeout=self.TIMEOUT)

    def assert_fails(self, *expected):
        """The checker exits 1, its output naming each of `expected`."""
        code, out = self.check()
        self.assertEqual(code, 1, out)
        for e in expected:
            self.assertIn(e, out)
