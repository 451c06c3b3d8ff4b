"""Compile the native kernels (native/*.cpp) into a shared library, once per machine.

The library is built with the system C++ compiler for this CPU (-march=native) and cached
under ~/.cache/specserve/kernels/<hash of sources, compiler, flags and CPU flags>/, so only the
first use on a machine pays the few seconds of compiling. Set SPECSERVE_CACHE to move the cache,
CXX to choose the compiler and SPECSERVE_MARCH to build for another -march (x86-64-v2, for
instance, builds the portable kernels without AVX-512, as a CPU without it would run them).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent / "native"
LIBRARY_NAME = "libspecserve_kernels.so"
# -ffp-contract=off: a multiply and an add are never fused behind our back, so every kernel variant
# (tile shape, thread count) does exactly the arithmetic its source says: the basis of batch invariance
FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared", "-pthread", "-fno-math-errno", "-ffp-contract=off"]


def flags() -> list[str]:
    return [f"-march={os.environ.get('SPECSERVE_MARCH') or 'native'}", *FLAGS]


class KernelBuildError(RuntimeError):
    """The native kernels could not be compiled or loaded; the message says why."""


def cache_root() -> Path:
    root = os.environ.get("SPECSERVE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "specserve")
    return Path(root) / "kernels"


def find_compiler() -> str:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise KernelBuildError("no C++ compiler found (install g++ or set CXX)")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return os.uname().machine


def _build_key(compiler: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCE_DIR.iterdir()):
        if path.suffix in (".cpp", ".h"):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    for part in (compiler, version, " ".join(flags()), _cpu_flags()):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def library_path() -> Path:
    """The compiled library for this machine, building it first if needed."""
    compiler = find_compiler()
    out_dir = cache_root() / _build_key(compiler)
    library = out_dir / LIBRARY_NAME
    if library.is_file():
        return library
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)         # another process may be building the same library
        if library.is_file():
            return library
        sources = sorted(str(p) for p in SOURCE_DIR.glob("*.cpp"))
        with tempfile.NamedTemporaryFile(dir=out_dir, suffix=".so", delete=False) as tmp:
            tmp_path = tmp.name
        result = subprocess.run([compiler, *flags(), "-o", tmp_path, *sources], capture_output=True, text=True)
        if result.returncode != 0:
            os.unlink(tmp_path)
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
            raise KernelBuildError(f"compiling the native kernels with {compiler} failed:\n{tail}")
        os.replace(tmp_path, library)
    return library
