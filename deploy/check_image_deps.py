#!/usr/bin/env python3
"""Checks that the Dockerfile's runtime stage provides every shared library
the built binaries need, without a Docker engine.

    deploy/check_image_deps.py --dockerfile Dockerfile BINARY...

`ldd` lists each binary's libraries (transitively). Every library must be:
  - in the base image of the runtime stage (debian:bookworm-slim): the C
    library family and the C++ runtime, listed in BASE_PACKAGES; or
  - in a Debian package the runtime stage installs with apt-get by name
    (the library's package is found with `dpkg -S`; packages pulled in only
    as dependencies do not count, so the list stays explicit); or
  - in the bundle (scripts/bundle.sh) when the runtime stage copies the
    bundle's lib directory and names it in LD_LIBRARY_PATH; the bundle is
    made here from the same binaries, as the build stage makes it; or
  - the NVIDIA driver's (libcuda, libnvidia-*), which the NVIDIA Container
    Toolkit mounts at run time.
Exits 0 when all are, 1 naming each library that is not (and the package
that would provide it), 2 on a usage error or a Dockerfile it cannot read.
--print-packages prints the packages the binaries need instead.

Standard library only: runs on a bare Debian with python3.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

# Packages of debian:bookworm-slim that the binaries may rely on without the
# runtime stage naming them: glibc (with libm, libpthread, libdl, librt, the
# loader) and GCC's runtime libraries. Everything else must be named.
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}
BASE_IMAGE = "debian:bookworm-slim"
# Mounted by the NVIDIA Container Toolkit; never in an image.
DRIVER_LIB_RE = re.compile(r"^(libcuda\.so|libnvidia-)")
# Not files: the kernel's vDSO.
VIRTUAL_LIB_RE = re.compile(r"^linux-(vdso|gate)\.so")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class DockerfileError(Exception):
    pass


# ---------------------------------------------------------------------------
# Dockerfile parsing


def logical_lines(text):
    """Yields Dockerfile instructions with continuation lines joined and
    comments dropped (a comment line inside a continuation is skipped, as
    Docker does)."""
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            yield current.strip()
        current = ""
    if current.strip():
        yield current.strip()


def parse_stages(text):
    """Returns [(name, base, [(instruction, rest), ...])] in order."""
    stages = []
    for line in logical_lines(text):
        parts = line.split(None, 1)
        instruction = parts[0].upper()
        rest = parts[1] if len(parts) > 1 else ""
        if instruction == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            if not words:
                raise DockerfileError("FROM without an image")
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" \
                else None
            stages.append((name, words[0], []))
        elif stages:
            stages[-1][2].append((instruction, rest))
    if not stages:
        raise DockerfileError("no FROM instruction")
    return stages


def exec_or_shell_words(rest):
    """The words of a RUN/COPY argument, exec form or shell form."""
    if rest.lstrip().startswith("["):
        try:
            return json.loads(rest)
        except json.JSONDecodeError as e:
            raise DockerfileError(f"bad exec form {rest!r}: {e}")
    return shlex.split(rest, posix=True)


def apt_packages(stage):
    """Package names given to `apt-get install` (or `apt install`) in the
    stage's RUN instructions, without version or architecture suffixes."""
    packages = []
    for instruction, rest in stage[2]:
        if instruction != "RUN":
            continue
        words = exec_or_shell_words(rest)
        # Split the shell line into simple commands.
        command = []
        commands = [command]
        for w in words:
            if w in ("&&", "||", ";", "|"):
                command = []
                commands.append(command)
            elif w.endswith(";"):
                command.append(w[:-1])
                command = []
                commands.append(command)
            else:
                command.append(w)
        for cmd in commands:
            # Skip env assignments and sudo in front of the program.
            while cmd and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0])
                           or cmd[0] in ("sudo", "env")):
                cmd = cmd[1:]
            if len(cmd) < 2 or os.path.basename(cmd[0]) not in ("apt-get",
                                                                 "apt"):
                continue
            args = [a for a in cmd[1:] if not a.startswith("-")]
            if not args or args[0] != "install":
                continue
            for a in args[1:]:
                packages.append(re.split(r"[=:]", a, 1)[0])
    return packages


def stage_env(stage):
    """ENV settings of a stage (both `ENV k=v ...` and `ENV k v`)."""
    env = {}
    for instruction, rest in stage[2]:
        if instruction != "ENV":
            continue
        words = shlex.split(rest, posix=True)
        if words and "=" not in words[0]:
            env[words[0]] = " ".join(words[1:])
            continue
        for w in words:
            k, _, v = w.partition("=")
            env[k] = v
    return env


def bundle_dir(stages):
    """The output folder of scripts/bundle.sh in any stage, or None."""
    for stage in stages:
        for instruction, rest in stage[2]:
            if instruction != "RUN":
                continue
            m = re.search(r"bundle\.sh\s+(\S+)\s+(\S+)", rest)
            if m:
                return m.group(2).rstrip("/")
    return None


def copied_bundle_lib(stage, bundle):
    """Where the stage copies the bundle's lib folder to, or None."""
    if bundle is None:
        return None
    for instruction, rest in stage[2]:
        if instruction != "COPY":
            continue
        words = [w for w in exec_or_shell_words(rest)
                 if not w.startswith("--")]
        if len(words) < 2:
            continue
        sources, dest = words[:-1], words[-1].rstrip("/") or "/"
        for src in sources:
            src = src.rstrip("/")
            if src == bundle + "/lib":
                return dest
            if src == bundle:
                return dest + "/lib"
    return None


# ---------------------------------------------------------------------------
# Libraries


def ldd(binary):
    """{soname: resolved path or None} of a binary's shared libraries."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if out.returncode != 0:
        raise DockerfileError(f"ldd {binary} failed: {out.stderr.strip()}")
    libs = {}
    for line in out.stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            libs[m.group(1)] = None if m.group(2) == "not found" \
                else m.group(2)
            continue
        m = re.match(r"^(/\S+)\s+\(0x", line)  # the loader: a path only
        if m:
            libs[os.path.basename(m.group(1))] = m.group(1)
            continue
        m = re.match(r"^(\S+)\s+\(0x", line)  # linux-vdso.so.1
        if m:
            libs[m.group(1)] = None
    return libs


def path_variants(path):
    """Spellings under which dpkg may have registered a library: as given
    and resolved, each with and without /usr (bookworm's merged /usr keeps
    both in the package database)."""
    out = []
    for p in (path, os.path.realpath(path)):
        out.append(p)
        if p.startswith("/usr/lib/"):
            out.append(p[len("/usr"):])
        elif p.startswith("/lib/") or p.startswith("/lib64/"):
            out.append("/usr" + p)
    return list(dict.fromkeys(out))


def owning_packages(paths):
    """{path: package} for the paths dpkg knows; one dpkg -S call."""
    variants = {v: p for p in paths for v in path_variants(p)}
    if not variants:
        return {}
    out = subprocess.run(["dpkg", "-S", *variants], capture_output=True,
                         text=True)
    owners = {}
    for line in out.stdout.splitlines():
        pkgs, _, file = line.partition(": ")
        file = file.strip()
        if file in variants:
            # "libfoo1:amd64" or "a, b" for a diverted file.
            pkg = pkgs.split(",")[0].strip().split(":")[0]
            owners.setdefault(variants[file], pkg)
    return owners


def make_bundle(binaries, out_dir):
    """Runs scripts/bundle.sh as the build stage does; returns the set of
    library names it bundled."""
    script = os.path.join(REPO_ROOT, "scripts", "bundle.sh")
    res = subprocess.run(
        ["bash", script, "/", out_dir, *map(os.path.abspath, binaries)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise DockerfileError(f"bundle.sh failed: {res.stderr.strip()}")
    return set(os.listdir(os.path.join(out_dir, "lib")))


# ---------------------------------------------------------------------------


def check(dockerfile, binaries, print_packages=False):
    with open(dockerfile) as f:
        stages = parse_stages(f.read())
    runtime = stages[-1]
    problems = []
    if runtime[1] != BASE_IMAGE:
        base = ", ".join(sorted(BASE_PACKAGES))
        problems.append(
            f"the runtime stage is FROM {runtime[1]}, not {BASE_IMAGE}: the "
            f"base packages this check assumes ({base}) are those of "
            f"{BASE_IMAGE}")
    named = set(apt_packages(runtime))
    bundle = bundle_dir(stages)
    bundle_lib_dest = copied_bundle_lib(runtime, bundle)
    if bundle_lib_dest is not None:
        ld_path = stage_env(runtime).get("LD_LIBRARY_PATH", "")
        if bundle_lib_dest not in ld_path.split(":"):
            problems.append(
                f"the runtime stage copies the bundle's libraries to "
                f"{bundle_lib_dest} but LD_LIBRARY_PATH "
                f"({ld_path or 'unset'}) does not name it")

    needed = {}  # soname -> (path, [binaries])
    for b in binaries:
        for soname, path in ldd(b).items():
            if VIRTUAL_LIB_RE.match(soname):
                continue
            needed.setdefault(soname, (path, []))[1].append(
                os.path.basename(b))
    owners = owning_packages([p for p, _ in needed.values() if p])
    bundled = set()
    if bundle_lib_dest is not None:
        with tempfile.TemporaryDirectory() as tmp:
            bundled = make_bundle(binaries, tmp)

    if print_packages:
        for pkg in sorted({owners[p] for p, _ in needed.values()
                           if p in owners} - BASE_PACKAGES):
            print(pkg)
        return 0

    counts = {"base image": 0, "apt": 0, "bundle": 0, "driver": 0}
    for soname in sorted(needed):
        path, users = needed[soname]
        who = ", ".join(sorted(set(users)))
        pkg = owners.get(path) if path else None
        if DRIVER_LIB_RE.match(soname):
            counts["driver"] += 1
        elif path is None:
            problems.append(f"{soname} (needed by {who}) is not found by ldd "
                            f"on this machine")
        elif pkg in BASE_PACKAGES:
            counts["base image"] += 1
        elif pkg in named:
            counts["apt"] += 1
        elif soname in bundled:
            counts["bundle"] += 1
        else:
            where = (f"Debian package {pkg}" if pkg else
                     f"no Debian package ({path}); bundle it")
            problems.append(f"{soname} (needed by {who}) is provided by "
                            f"neither the base image, the runtime apt list "
                            f"nor the bundle: {where}")
    for p in problems:
        print(f"check_image_deps: MISSING {p}", file=sys.stderr)
    summary = ", ".join(f"{n} from {k}" for k, n in counts.items() if n)
    print(f"check_image_deps: {len(needed)} libraries of "
          f"{len(binaries)} binaries: {summary}; runtime apt list: "
          f"{len(named)} packages")
    unused = sorted(named - set(owners.values()))
    if unused:
        print(f"check_image_deps: note: no checked binary needs "
              f"{', '.join(unused)}")
    if problems:
        print(f"check_image_deps: FAILED: {len(problems)} problem(s) in "
              f"{dockerfile}", file=sys.stderr)
        return 1
    print("check_image_deps: OK")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dockerfile", default=os.path.join(REPO_ROOT,
                                                        "Dockerfile"))
    p.add_argument("--print-packages", action="store_true",
                   help="print the non-base packages the binaries need")
    p.add_argument("binaries", nargs="+")
    args = p.parse_args()
    for b in args.binaries:
        if not os.access(b, os.X_OK):
            print(f"check_image_deps: {b} is not an executable",
                  file=sys.stderr)
            return 2
    try:
        return check(args.dockerfile, args.binaries, args.print_packages)
    except (OSError, DockerfileError) as e:
        print(f"check_image_deps: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
