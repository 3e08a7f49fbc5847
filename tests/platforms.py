"""Other platforms to run cvmvm on: Debian roots of other architectures under qemu-user
emulation, a root of a newer Debian on this machine's own architecture (its Python, numpy,
BLAS and tools, natively), and virtual environments of other Pythons and numpy versions.

Both are built on demand and cached (``$CVMVM_PLATFORMS_CACHE``, default
``~/.cache/cvmvm-platforms``); under CI (``CI=true``) they are built fresh in a
temporary directory, so CI proves the build as well as the run.

A root is Debian's own python3, numpy, msgpack, cryptography, pytest and
hypothesis (Debian's hypothesis: the PyPI wheel carries an x86-only extension),
and the rest of the test install that Debian packages (mypy, tqdm,
threadpoolctl, onnx), unpacked by mmdebstrap's ``extract`` variant: no
maintainer script runs, so the build needs no emulation and takes about a minute.
What the scripts would have done and Python needs is done here: the merged-/usr
links, the libblas.so.3/liblapack.so.3 alternatives, the CA bundle pip reads,
and byte-compiling the Python libraries once (under emulation) so every later
run imports fast.  Each session copies the checkout to the root's /src and
installs it there as the host's is (``pip install -e``, no dependencies), so
the package's metadata and the ``cvmvm`` command exist.  The extras Debian does
not package (``ray``; ``chain``: titanoboa, py-evm and solc from npm) are not
there: their tests skip on any machine without the extra (``importorskip``, CI
or not), and run on the host, where CI installs every extra.  Python runs
inside a root through ``chroot`` in a private mount namespace (its /proc mount
vanishes with the process), with the host kernel handing the foreign binaries
to qemu through binfmt_misc (a native root's run as they are).  All of that needs root.

``python -m tests.platforms [--full]`` runs what CI runs in each root (or the
whole suite in every one) at once and prints each architecture's counts, duration and
versions.  Every process in an emulated root has ``CVMVM_EMULATED`` set: the tests
that bound a child's address space read it (address_space_env); nothing else does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

REPO = Path(__file__).resolve().parent.parent


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def cache_dir() -> Path:
    return Path(os.environ.get("CVMVM_PLATFORMS_CACHE") or Path.home() / ".cache" / "cvmvm-platforms")


class Unavailable(Exception):
    """This machine cannot provide the platform (a missing tool, no root, no binfmt entry)."""


class BuildFailed(Exception):
    """Building a root or a virtual environment failed."""


# -- Debian roots: emulated architectures, and this machine's own -----------------

@dataclass(frozen=True)
class Arch:
    name: str                   # Debian's architecture name
    triplet: str                # multiarch library directory
    qemu: str | None            # binfmt_misc entry qemu-<qemu>; None: this machine's own, run natively
    byteorder: str
    # Links the skipped update-alternatives would make: name under /usr/lib/<triplet> -> target there.
    libraries: tuple[tuple[str, str], ...]
    # The CPU qemu emulates (QEMU_CPU): its default arm64 CPU authenticates pointers, which qemu
    # emulates so slowly that Python runs ten times slower; a Neoverse N1 (a common server core) does not.
    cpu: str | None = None
    extra: tuple[str, ...] = ()
    # Tried in order: trixie first (its cryptography meets the >= 41 the project asks for; bookworm's
    # is 38), forky when a mirror's trixie index for an architecture does not verify.
    suites: tuple[str, ...] = ("trixie", "forky")
    whole: bool = False         # CI runs the whole suite there less KERNEL_TESTS, not EMULATED_TESTS


# s390x runs OpenBLAS (its own z/Architecture kernels), arm64 the reference BLAS, amd64 Debian's
# OpenBLAS (x86_64 kernels): with the host's numpy wheel's OpenBLAS, four BLAS builds behind the
# exact GEMM paths.
OPENBLAS = (("libblas.so.3", "openblas-pthread/libblas.so.3"), ("liblapack.so.3", "openblas-pthread/liblapack.so.3"),
            ("libopenblas.so.0", "openblas-pthread/libopenblas.so.0"))
REFERENCE_BLAS = (("libblas.so.3", "blas/libblas.so.3"), ("liblapack.so.3", "lapack/liblapack.so.3"))
# The native root is Debian testing (forky; unstable when forky's packages do not install together):
# the newest Python Debian ships (3.14 when this was written; the venv matrix stops at 3.13), its
# numpy, its OpenBLAS with x86_64 kernels, and its mypy, hypothesis and onnx.  It runs on x86_64
# hosts only, as CI's are.
ARCHES: tuple[Arch, ...] = (
    Arch("s390x", "s390x-linux-gnu", "s390x", "big", OPENBLAS, extra=("libopenblas0-pthread",)),
    Arch("arm64", "aarch64-linux-gnu", "aarch64", "little", REFERENCE_BLAS, cpu="neoverse-n1"),
    Arch("amd64", "x86_64-linux-gnu", None, "little", OPENBLAS, extra=("libopenblas0-pthread",),
         suites=("forky", "sid"), whole=True),
)
ARCH_BY_NAME = {a.name: a for a in ARCHES}
# Debian's name for this machine's architecture (a native root must be of it).
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "s390x": "s390x"}.get(platform.machine())

PACKAGES = ("python3", "python3-numpy", "python3-msgpack", "python3-cryptography",
            "python3-pytest", "python3-hypothesis",
            # the rest of the test install (pyproject's test, speed, progress and onnx extras), so the
            # whole suite can run here too; pip and setuptools install cvmvm itself (its metadata)
            "python3-mypy", "python3-tqdm", "python3-threadpoolctl", "python3-onnx",
            "python3-pip", "python3-setuptools", "ca-certificates")
EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
ROOT_RECIPE_VERSION = 4  # bump when the build steps below change, so cached roots are rebuilt
STAMP = "cvmvm-root.json"
# Set for every process in an emulated root: the name of the architecture qemu-user emulates.  Read in
# one place, address_space_env: the one operating-system behaviour the tests meet that qemu changes.
EMULATED = "CVMVM_EMULATED"
# Copied into a root's /src for each session: what the tests read (no .git, no caches).
SOURCE_SKIP = {".git", "__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache", "build", "dist", "node_modules"}


def check_emulation(arch: Arch) -> None:
    """Raise Unavailable unless this machine can build and run a root of ``arch``."""
    if os.geteuid() != 0:
        raise Unavailable("building and entering Debian roots needs root (mmdebstrap --mode=root, chroot)")
    for tool in ("mmdebstrap", "unshare", "chroot", "mount"):
        if shutil.which(tool, path=_host_path()) is None:
            raise Unavailable(f"{tool} is not installed (apt-get install mmdebstrap qemu-user-static binfmt-support)")
    if arch.qemu is None:
        if HOST_ARCH != arch.name:
            raise Unavailable(f"the native {arch.name} root runs only on a host of that architecture "
                              f"(this one: {platform.machine()})")
        return
    entry = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{arch.qemu}"
    if not entry.exists() or not entry.read_text().startswith("enabled"):
        raise Unavailable(f"binfmt_misc has no enabled {entry.name} entry (apt-get install qemu-user-static "
                          f"binfmt-support; mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; "
                          f"update-binfmts --enable {entry.name})")


def _host_path() -> str:
    return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def root_recipe(arch: Arch) -> dict[str, Any]:
    return {"version": ROOT_RECIPE_VERSION, "arch": arch.name, "suites": arch.suites, "libraries": arch.libraries,
            "packages": sorted(PACKAGES + arch.extra), "excludes": EXCLUDES}


def root_for(arch: Arch, cache: Path) -> Path:
    """A root of ``arch`` for the current recipe: the cached one, else a new one."""
    key = hashlib.sha256(json.dumps(root_recipe(arch), sort_keys=True).encode()).hexdigest()[:12]
    root = cache / f"root-{arch.name}-{key}"
    if (root / STAMP).is_file():
        return root
    build_root(arch, root)
    return root


def build_root(arch: Arch, root: Path) -> None:
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    suite, logs = None, []
    for candidate in arch.suites:
        cmd = ["mmdebstrap", "--mode=root", "--variant=extract", f"--arch={arch.name}", "--quiet",
               # a mirror may serve a snapshot whose Release has expired; the signatures still hold
               "--aptopt=Acquire::Check-Valid-Until \"false\"",
               "--include=" + ",".join(PACKAGES + arch.extra)]
        cmd += [f"--dpkgopt=path-exclude={p}" for p in EXCLUDES]
        run = subprocess.run(cmd + [candidate, str(partial)], capture_output=True, text=True,
                             env=_host_env(), timeout=1200)
        if run.returncode == 0:
            suite = candidate
            break
        logs.append(f"{candidate}: {(run.stdout + run.stderr)[-1500:]}")
        shutil.rmtree(partial, ignore_errors=True)
    if suite is None:
        raise BuildFailed(f"mmdebstrap could not build a {arch.name} root from any of {arch.suites}:\n" + "\n".join(logs))
    _finish_root(arch, partial)
    libs = ["/usr/lib/python3"] + ["/" + p.relative_to(partial).as_posix()
                                   for p in sorted((partial / "usr" / "lib").glob("python3.*"))]
    compile_run = run_in_root(partial, ["-m", "compileall", "-q", "-j", "0", *libs], arch=arch, timeout=1800)
    if compile_run.returncode != 0:
        raise BuildFailed(f"byte-compiling the {arch.name} root failed:\n{compile_run.stderr[-3000:]}")
    (partial / STAMP).write_text(json.dumps({"suite": suite, **root_recipe(arch)}, sort_keys=True))
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)


def _finish_root(arch: Arch, root: Path) -> None:
    """What the skipped maintainer scripts would have left that Python needs."""
    # lib64: where amd64's dynamic loader is looked for
    for d in ("bin", "lib", "sbin") + (("lib64",) if (root / "usr" / "lib64").is_dir() else ()):
        if not (root / d).exists() and not (root / d).is_symlink():
            (root / d).symlink_to(f"usr/{d}")
    for d in ("proc", "src"):
        (root / d).mkdir(exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    # update-ca-certificates' bundle: pip loads it when it starts, even for an install from a directory
    bundle = root / "etc" / "ssl" / "certs" / "ca-certificates.crt"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    certificates = sorted((root / "usr" / "share" / "ca-certificates" / "mozilla").glob("*.crt"))
    bundle.write_bytes(b"".join(c.read_bytes() for c in certificates))
    libdir = root / "usr" / "lib" / arch.triplet
    for name, target in arch.libraries:
        if not (libdir / target).exists():
            raise BuildFailed(f"{arch.name} root has no {(libdir / target).relative_to(root)}")
        link = libdir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)


def root_suite(root: Path) -> str:
    return json.loads((root / STAMP).read_text())["suite"]


def root_label(arch: Arch, suite: str) -> str:
    return f"{arch.name} (Debian {suite}, {'qemu' if arch.qemu else 'native'})"


def ci_tests(arch: Arch) -> tuple[str, ...]:
    """pytest's arguments for what CI runs in a root of ``arch`` besides tests/records.py: the whole
    suite less KERNEL_TESTS, or the subset less EMULATED_DESELECT."""
    if arch.whole:
        return _deselect(KERNEL_TESTS)
    return EMULATED_TESTS + _deselect(EMULATED_DESELECT)


def _deselect(tests: Sequence[str]) -> tuple[str, ...]:
    return tuple(arg for test in tests for arg in ("--deselect", test))


def stage_source(root: Path, arch: Arch) -> None:
    """A fresh copy of this checkout at the root's /src (and of ../shared, when there, at /shared),
    installed there as the host's is (``pip install -e``, no dependencies: Debian's are the
    root's), so its metadata and ``cvmvm`` exist."""
    dest = root / "src"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(REPO, dest, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n in SOURCE_SKIP or n.endswith(".egg-info")])
    shared = root / "shared"   # ../shared beside /src, where tests/test_fixtures.py compares its copies
    shutil.rmtree(shared, ignore_errors=True)
    if (REPO.parent / "shared").is_dir():
        shutil.copytree(REPO.parent / "shared", shared, symlinks=True)
    _lend_onnx_test_data(root)
    run = run_in_root(root, ["-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                             "--break-system-packages", "--root-user-action=ignore", "--disable-pip-version-check",
                             "--editable", "/src"], arch=arch, timeout=900)
    if run.returncode != 0:
        raise BuildFailed(f"pip install -e /src in the {arch.name} root failed:\n{run.stderr[-3000:]}")


ONNX_TEST_DATA = ("backend", "test", "data", "pytorch-converted")


def _lend_onnx_test_data(root: Path) -> None:
    """The host onnx wheel's pytorch-converted models, which tests/test_importer.py imports and
    Debian's python3-onnx does not ship: protobuf files, the same bytes on every architecture.
    A host without the onnx extra lends nothing, and test_importer.py fails there naming the folder."""
    dest = root.joinpath("usr", "lib", "python3", "dist-packages", "onnx", *ONNX_TEST_DATA)
    try:
        import onnx
    except ImportError:
        return
    if not dest.is_dir():   # Debian's, or lent by an earlier session, stays
        shutil.copytree(Path(onnx.__file__).parent.joinpath(*ONNX_TEST_DATA), dest)


# Runs on the host side of the private mount namespace: mount /proc, then enter the root.
_ENTER = r'''
root=$1; shift
mount -t proc proc "$root/proc" || exit 97
exec chroot "$root" /usr/bin/python3 "$@"
'''

# Runs first inside the root: Debian's python3 has no shell around it, so it changes directory itself.
_BOOT = ("import os, runpy, sys; os.chdir('/src'); sys.argv = sys.argv[1:]; "
         "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def _in_root(root: Path, args: Sequence[str], arch: Arch,
             env: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
    args = list(args)
    if args[:1] == ["-m"]:
        args = ["-c", _BOOT, *args[1:]]
    full_env = {"PATH": "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
                "PYTHONPATH": "/src"}
    if arch.qemu is not None:
        full_env[EMULATED] = arch.name
    if arch.cpu:
        full_env["QEMU_CPU"] = arch.cpu
    full_env.update(env or {})
    cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _ENTER, "sh", str(root), *args]
    return cmd, full_env


def run_in_root(root: Path, args: Sequence[str], *, arch: Arch, env: dict[str, str] | None = None,
                timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run Debian's python3 inside ``root`` with ``args``; ``-m module ...`` runs from /src."""
    cmd, full_env = _in_root(root, args, arch, env)
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)


def _host_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "TMPDIR", "http_proxy", "https_proxy")}
    env["PATH"] = _host_path()
    return env


# -- a child's address space, here and under emulation ---------------------------

def address_space_env(limit: int, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment (``env``, default this one's) for a child Python that calls
    bound_address_space(``limit``).  Under qemu-user the guest's setrlimit(RLIMIT_AS) does nothing:
    qemu accepts it and drops it (applied to the host process it would bound qemu's own mappings,
    not the guest's).  There the bound is qemu's: QEMU_RESERVED_VA makes it reserve exactly
    ``limit`` bytes of guest address space, and a guest mapping that does not fit fails with
    ENOMEM, as under RLIMIT_AS.  A child's children inherit it, as they inherit RLIMIT_AS."""
    out = dict(os.environ if env is None else env)
    if os.environ.get(EMULATED):
        out["QEMU_RESERVED_VA"] = str(limit)
    return out


def bound_address_space(limit: int) -> None:
    """Limit this process's address space to ``limit`` bytes (RLIMIT_AS; under qemu-user the bound
    is address_space_env's) and prove a bound holds: a mapping of ``limit`` bytes is refused."""
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        mmap.mmap(-1, limit).close()
    except OSError:
        return
    raise RuntimeError(f"a mapping of {limit} bytes succeeded: nothing bounds this address space "
                       f"(under qemu-user, start this process with address_space_env)")


def address_space_used() -> int:
    """Bytes of address space this process holds: its mappings' sizes (on Linux the VmSize of
    /proc/self/status; under qemu-user that is qemu's, while /proc/self/maps is the guest's)."""
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            start, _, end = line.split(maxsplit=1)[0].partition("-")
            total += int(end, 16) - int(start, 16)
    return total


# -- other Pythons and numpy versions -----------------------------------------

PYTHON_MINORS = ("3.10", "3.11", "3.12", "3.13")


def find_python(minor: str) -> Path:
    """An interpreter of this minor version: ``python3.X`` on PATH, else pyenv's."""
    candidates = []
    on_path = shutil.which(f"python{minor}")
    if on_path:
        candidates.append(Path(on_path))
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += sorted((pyenv_root / "versions").glob(f"{minor}.*/bin/python{minor}"), reverse=True)
    for c in candidates:
        probe = subprocess.run([str(c), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == minor:
            return c
    raise Unavailable(f"no Python {minor} on PATH or under {pyenv_root}/versions")


def numpy_floor() -> str:
    """The oldest numpy pyproject.toml allows (the ``numpy>=X.Y`` dependency)."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r'"numpy>=([0-9.]+)', text)
    if not m:
        raise BuildFailed("pyproject.toml has no numpy>=X dependency")
    return m.group(1)


def _pip(venv: Path) -> list[str]:
    return [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--no-input"]


def venv_for(python: Path, minor: str, which: str, cache: Path) -> Path:
    """A venv of ``python`` with numpy's oldest installable (``which="oldest"``) or newest release
    for that interpreter, and the other runtime dependencies' newest (wheels only)."""
    venv = cache / f"venv-py{minor}-numpy-{which}"
    if (venv / "cvmvm-venv.json").is_file():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    made = subprocess.run([str(python), "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        raise BuildFailed(f"python{minor} -m venv failed: {made.stderr[-2000:]}")
    spec = "numpy" if which == "newest" else _oldest_numpy(venv)
    got = subprocess.run(_pip(venv) + ["install", "--quiet", "--only-binary=:all:", spec, "msgpack", "cryptography"],
                         capture_output=True, text=True, timeout=900)
    if got.returncode != 0:
        raise BuildFailed(f"pip install {spec} for Python {minor} failed: {got.stderr[-2000:]}")
    (venv / "cvmvm-venv.json").write_text(json.dumps({"numpy": spec}))
    return venv


def _oldest_numpy(venv: Path) -> str:
    """The oldest numpy release series >= pyproject's floor with a wheel for this venv's Python."""
    floor = tuple(int(x) for x in numpy_floor().split(".")[:2])
    listed = subprocess.run(_pip(venv) + ["index", "versions", "numpy"], capture_output=True, text=True, timeout=300)
    series = sorted({tuple(int(x) for x in v.split(".")[:2])
                     for v in re.findall(r"\b(\d+\.\d+)\.\d+\b", listed.stdout.partition("Available versions:")[2])})
    for major, minor in (s for s in series if s >= floor):
        spec = f"numpy=={major}.{minor}.*"
        probe = subprocess.run(_pip(venv) + ["install", "--dry-run", "--quiet", "--only-binary=:all:", spec],
                               capture_output=True, text=True, timeout=300)
        if probe.returncode == 0:
            return spec
    raise BuildFailed(f"no numpy >= {numpy_floor()} has a wheel for {venv}")


def run_records(python: Sequence[str], env: dict[str, str] | None = None, timeout: float = 900) -> dict[str, Any]:
    """``python -m tests.records`` with a host interpreter, parsed."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "OPENBLAS", "OMP_", "MKL_"))}
    full_env["PYTHONPATH"] = str(REPO)
    full_env.update(env or {})
    run = subprocess.run([*python, "-m", "tests.records"], cwd=REPO, capture_output=True, text=True,
                         env=full_env, timeout=timeout)
    if run.returncode != 0:
        raise BuildFailed(f"{' '.join(python)} -m tests.records failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout)


def differences(want: dict[str, Any], got: dict[str, Any], limit: int = 20) -> list[str]:
    """Each record id whose computed values differ, with the first differing field."""
    out = []
    for key in sorted(set(want) | set(got)):
        if key not in got:
            out.append(f"{key}: missing")
        elif key not in want:
            out.append(f"{key}: not computed by the host")
        elif want[key] != got[key]:
            a, b = want[key], got[key]
            fields = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) if isinstance(a, dict) else []
            f = fields[0] if fields else None
            out.append(f"{key}: {f} host {a.get(f) if f else a!r:.80} != {b.get(f) if f else b!r:.80}")
        if len(out) >= limit:
            out.append("...")
            break
    return out


_PROGRESS = re.compile(r"[.sxXFE]+\s*(\[\s*\d+%\])?")


def pytest_summary(output: str, limit: int = 6000) -> str:
    """A pytest run's output without its progress lines: the failures and the counts."""
    lines = [line for line in output.splitlines() if not _PROGRESS.fullmatch(line.strip())]
    return "\n".join(lines)[-limit:]


# What the test output reports about every platform that ran (tests/conftest.py prints it).
SEEN: list[str] = []


def describe(label: str, info: dict[str, Any]) -> str:
    return (f"{label}: {info['machine']} ({info['byteorder']}-endian), Python {info['python']}, "
            f"numpy {info['numpy']}, BLAS {', '.join(info['blas']) or 'none loaded'} "
            f"(threads {info['blas_threads']})")


def temp_cache() -> Path:
    return Path(tempfile.mkdtemp(prefix="cvmvm-platforms-"))


# -- the suite in each root ----------------------------------------------------

# What CI runs in each root besides tests/records.py (tests/test_platforms.py): every reference
# vector, the determinism tests, the codecs and hashes (byte order lives in the formats), the trace
# file's reader and its JSON scan (a trace is read on machines other than the one that wrote it; 53 s
# of s390x on 2026-12-03), the exact GEMM paths and models (another BLAS), the parity classes, and
# the shift kernels' sign rules.
# The whole suite (``python -m tests.platforms --full``) takes over an hour per architecture.
EMULATED_TESTS = ("tests/test_vectors.py", "tests/test_determinism.py", "tests/test_maxpool.py",
                  "tests/test_conversion.py", "tests/test_cortex_format.py", "tests/test_native_format.py",
                  "tests/test_hashing.py", "tests/test_trace_file.py", "tests/test_strict_json.py",
                  "tests/test_gemm_paths.py", "tests/test_models.py",
                  "tests/test_mixed_model.py", "tests/test_parity.py",
                  "tests/test_ops_elemwise.py::test_right_shift_is_arithmetic",
                  "tests/test_ops_elemwise.py::test_left_shift_of_negatives_at_the_precision_edge")
# Under emulation the hashing-timing test keeps its smallest ring (blocks that wait for earlier ones,
# wrap around it, or are hashed inline): the other two sizes run the same byte paths on other
# timings, which the host and the native root cover.  They took 223 of the s390x root's 870 s and
# 105 of the arm64 root's 464 (both at once on an AMD EPYC Zen 5, 2026-12-03); s390x is the long pole.
EMULATED_DESELECT = ("tests/test_determinism.py::test_repeated_traced_runs_never_depend_on_hashing_timing[33554432]",
                     "tests/test_determinism.py::test_repeated_traced_runs_never_depend_on_hashing_timing[1572864]")
# A native root is a chroot on the host's kernel, so the tests whose subject is how the kernel ends and
# reaps processes (kill -9 at a chosen point, a driver ended by a signal) repeat the host's run of them
# there: CI leaves them out of the native root's whole suite, where they took a fifth of its time
# (93 of 474 s on 2026-12-02).  The fuzzing budget stays: which exceptions hostile bytes raise can
# change with numpy's version.
KERNEL_TESTS = ("tests/test_replay_cli.py::test_kill_9_loses_only_what_was_in_flight",
                "tests/test_replay_cli.py::test_a_driver_ended_alone_leaves_no_worker",
                "tests/test_replay_cli.py::test_a_killed_worker_ends_the_replay_with_internal_worker_and_resume_completes",
                "tests/test_faults.py::test_kill_9_during_store_add",
                "tests/test_faults.py::test_kill_9_during_run_with_every_output")
# Inside a root the ``platforms`` tests do not run: they are this harness (chroot and qemu, or the
# host's other Pythons), which runs on the host.
PYTEST_IN_ROOT = ("-m", "pytest", "-q", "-rfEs", "--tb=short", "-m", "not platforms")

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's closing line (``error`` for errors)."""
    closing = next((line for line in reversed(output.splitlines()) if " in " in line and _COUNT.search(line)), "")
    return {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in _COUNT.findall(closing)}


@dataclass
class SuiteRun:
    arch: Arch
    suite: str
    info: dict[str, Any]
    exit: int
    seconds: float
    counts: dict[str, int]
    log: Path

    def line(self) -> str:
        counts = ", ".join(f"{n} {kind}" for kind, n in self.counts.items()) or "no counts (see the log)"
        return (f"{describe(root_label(self.arch, self.suite), self.info)}\n"
                f"    pytest exit {self.exit}: {counts} in {self.seconds / 60:.1f} min; log {self.log}")


def run_suite(arch: Arch, cache: Path, tests: Sequence[str], logs: Path) -> SuiteRun:
    """pytest ``tests`` (all of them when empty) inside a fresh root of ``arch``, its output to a log."""
    root = root_for(arch, cache)
    stage_source(root, arch)
    probe = run_in_root(root, ["-c", "import json; from tests.records import platform_info; "
                                     "print(json.dumps(platform_info()))"], arch=arch, timeout=600)
    if probe.returncode != 0:
        raise BuildFailed(f"{arch.name}: the platform probe failed:\n{probe.stderr[-3000:]}")
    log = logs / f"pytest-{arch.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    cmd, env = _in_root(root, [*PYTEST_IN_ROOT, *tests], arch, {"PYTHONUNBUFFERED": "1"})   # a log to follow
    start = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    seconds = time.monotonic() - start
    return SuiteRun(arch, root_suite(root), json.loads(probe.stdout), code, seconds,
                    pytest_counts(log.read_text(errors="replace")), log)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.platforms",
        description="Run the test suite inside the Debian roots (built or taken from the cache), all "
                    "architectures at once; print each one's counts, duration and versions.")
    parser.add_argument("--full", action="store_true",
                        help="the whole suite in every root (over an hour per emulated architecture) instead of "
                             "what CI runs there")
    parser.add_argument("--arch", action="append", choices=sorted(ARCH_BY_NAME),
                        help="only this architecture (repeatable; default: all)")
    parser.add_argument("tests", nargs="*", help="test files or ids instead (relative to the checkout)")
    args = parser.parse_args(argv)
    arches = [ARCH_BY_NAME[n] for n in args.arch] if args.arch else list(ARCHES)
    try:
        for arch in arches:
            check_emulation(arch)
    except Unavailable as e:
        print(f"cannot run here: {e}", file=sys.stderr)
        return 2
    cache = cache_dir()
    logs = cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    def tests(arch: Arch) -> list[str]:
        return args.tests or ([] if args.full else list(ci_tests(arch)))
    for arch in arches:
        print(f"{arch.name}: pytest {' '.join(tests(arch)) or '(the whole suite)'}", flush=True)
    print(f"logs in {logs}", flush=True)
    failed = False
    with ThreadPoolExecutor(len(arches)) as pool:
        futures = [pool.submit(run_suite, a, cache, tests(a), logs) for a in arches]
        for arch, future in zip(arches, futures):
            try:
                run = future.result()
            except (BuildFailed, OSError, subprocess.SubprocessError) as e:
                print(f"{arch.name}: {type(e).__name__}: {e}", flush=True)
                failed = True
                continue
            print(run.line(), flush=True)
            if run.exit != 0:
                failed = True
                print(pytest_summary(run.log.read_text(errors="replace"), limit=4000), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
