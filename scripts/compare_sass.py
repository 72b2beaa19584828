#!/usr/bin/env python3
"""Tells whether two builds of a CUDA object file hold the same machine code.

    scripts/compare_sass.py OLD.o NEW.o [OLD.o NEW.o ...]

For each pair of host object files (as nvcc writes them, with the device
code in their .nv_fatbin section), finds the first device ELF (cubin) in
each fatbin and compares its kernels' code section by section (.text.<the
mangled kernel name>). Prints one line per pair: how many kernels are
byte-identical, differ, or appear on one side only. Exits 1 if any kernel
differs or is missing on a side.

A refactoring that should not change what runs (moving device code between
headers, renaming helpers, restructuring templates that inline away) can
be checked here without a GPU: identical sections issue identical
instructions. The symbol and string tables are not compared (they change
with any edit of the translation unit), nor are uncompressed PTX or a
second cubin; a build for several GPUs holds one cubin per GPU, and only
the first is compared. Needs objcopy (binutils).
"""
import struct
import subprocess
import sys
import tempfile


def fatbin(path):
    """The .nv_fatbin section of a host object file, as bytes."""
    with tempfile.NamedTemporaryFile() as out:
        subprocess.run(
            ["objcopy", "-O", "binary", "--only-section=.nv_fatbin", path,
             out.name],
            check=True)
        return open(out.name, "rb").read()


def text_sections(blob):
    """The .text.* sections of the first ELF64 image inside `blob`."""
    at = blob.find(b"\x7fELF")
    if at < 0:
        raise ValueError("no device ELF in the fatbin (compressed, or PTX "
                         "only?)")
    elf = blob[at:]
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = []
    for k in range(shnum):
        name, kind, _flags, _addr, offset, size = struct.unpack_from(
            "<IIQQQQ", elf, shoff + k * shentsize)
        headers.append((name, kind, offset, size))
    names_at = headers[shstrndx][2]
    sections = {}
    for name, kind, offset, size in headers:
        end = elf.index(b"\0", names_at + name)
        label = elf[names_at + name:end].decode()
        if label.startswith(".text.") and kind != 8:  # 8: SHT_NOBITS
            sections[label] = elf[offset:offset + size]
    return sections


def main(argv):
    if len(argv) < 2 or len(argv) % 2 != 0:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    ok = True
    for old_path, new_path in zip(argv[0::2], argv[1::2]):
        old = text_sections(fatbin(old_path))
        new = text_sections(fatbin(new_path))
        same = sum(1 for k in old if k in new and old[k] == new[k])
        differ = sorted(k for k in old if k in new and old[k] != new[k])
        only_old = sorted(set(old) - set(new))
        only_new = sorted(set(new) - set(old))
        print(f"{new_path}: {same} of {len(old)} kernels identical, "
              f"{len(differ)} differ, {len(only_old)} only in {old_path}, "
              f"{len(only_new)} only in {new_path}")
        for k in differ + only_old + only_new:
            print(f"  {k[len('.text.'):]}")
        ok = ok and not differ and not only_old and not only_new
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
