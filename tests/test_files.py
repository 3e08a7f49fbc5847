"""cvmvm.files: bounded reads (every failure an io.* or a limit), checked outputs, and outputs
committed as one unit, all old or all new wherever a command dies."""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cvmvm import files
from cvmvm.cli.common import EXIT_CODES
from cvmvm.cli.main import main
from isa.errors import CvmError
from tests import platforms
from tests.test_receipt import mlp_model

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "fixtures" / "models" / "digits"


def code_of(fn, *args, **kwargs) -> str:
    with pytest.raises(CvmError) as e:
        fn(*args, **kwargs)
    return e.value.code


def cli(capsys, argv: list[str]) -> tuple[int, str]:
    """Exit code and the one error line (empty on success)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") <= 1 and "Traceback" not in err
    return code, err.strip()


# -- reading -------------------------------------------------------------------

def test_read_bytes_checks_the_kind_before_opening(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)           # opening it for reading would block until a writer comes
    assert code_of(files.read_bytes, fifo, "model") == "io.not_regular"
    assert code_of(files.read_bytes, "/dev/zero", "model") == "io.not_regular"
    assert code_of(files.read_bytes, tmp_path, "model") == "io.not_regular"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    assert code_of(files.read_bytes, tmp_path / "sock", "model") == "io.not_regular"
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert code_of(files.read_bytes, tmp_path / "loop", "model") == "io.not_regular"
    assert code_of(files.read_bytes, tmp_path / "missing", "model") == "io.not_found"
    assert code_of(files.read_bytes, tmp_path / "missing" / "x", "model") == "io.not_found"
    (tmp_path / "real").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert files.read_bytes(tmp_path / "link", "model") == b"abc"
    assert code_of(files.read_bytes, tmp_path / "link", "model", follow=False) == "io.not_regular"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_read_bytes_permission(tmp_path):
    (tmp_path / "secret").write_bytes(b"x")
    (tmp_path / "secret").chmod(0)
    assert code_of(files.read_bytes, tmp_path / "secret", "model") == "io.permission"


class _DiskError(io.BytesIO):
    def read(self, size=-1):
        raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_failed_read_is_io_read(capsys, tmp_path, monkeypatch):
    """A read that fails (a disk error, EIO) is io.read, naming the file and the OS's words;
    the CLI prints it as one line and exits with the io family's code."""
    with pytest.raises(CvmError) as e:
        files.read_bounded(_DiskError(), 10, 100, "model", tmp_path / "m.cvm")
    assert e.value.code == "io.read" and e.value.message == f"model {tmp_path / 'm.cvm'}: {os.strerror(errno.EIO)}"
    (tmp_path / "m.cvm").write_bytes(b"x" * 10)
    real = files.read_bounded
    monkeypatch.setattr(files, "read_bounded", lambda f, *args, **kw: real(_DiskError(), *args, **kw))
    assert main(["verify", str(tmp_path / "m.cvm")]) == EXIT_CODES["io"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cvmvm: error io.read: ")
    assert err.endswith(f" {tmp_path / 'm.cvm'}: {os.strerror(errno.EIO)}\n")


@pytest.mark.parametrize("number, reason", [
    (errno.ENOENT, "not_found"), (errno.ENOTDIR, "not_found"), (errno.EACCES, "permission"),
    (errno.EPERM, "permission"), (errno.EISDIR, "not_regular"), (errno.ELOOP, "not_regular"),
    (errno.ENXIO, "not_regular"), (errno.EIO, None), (errno.ENOSPC, None), (errno.EFBIG, None),
])
def test_the_io_reason_an_errno_names(number, reason):
    """Tested by errno, since root (as CI runs) reads and writes every file: no test can meet
    EACCES through the file system there."""
    e = OSError(number, os.strerror(number), "f")
    assert files.read_failure(e, "model", "f").code == f"io.{reason or 'read'}"
    assert files.write_failure(e, "output", "f").code == f"io.{reason or 'write'}"


def test_read_bytes_limits_before_reading(tmp_path):
    (tmp_path / "f").write_bytes(b"0123456789")
    assert files.read_bytes(tmp_path / "f", "x", 10) == b"0123456789"
    assert code_of(files.read_bytes, tmp_path / "f", "x", 9) == "limit.bytes"
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate((1 << 32) + 1)          # 4 GiB + 1 of nothing: refused from its size alone
    assert code_of(files.read_bytes, sparse, "model") == "limit.bytes"


def test_read_bytes_in_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "READ_STEP", 7)
    data = bytes(range(256)) * 3
    (tmp_path / "f").write_bytes(data)
    assert files.read_bytes(tmp_path / "f", "x") == data


def _under_4_gib(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter whose address space is limited to 4 GiB."""
    prelude = "from tests.platforms import bound_address_space; bound_address_space(4 << 30)\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=platforms.address_space_env(4 << 30))


def test_small_files_are_read_under_a_4_gib_address_space(tmp_path):
    # Defect: read(2^32 + 1) reserved 4 GiB before reading a 5-byte file (internal.bug: MemoryError).
    (tmp_path / "five").write_bytes(b"abcde")
    npy = tmp_path / "huge.npy"
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824,), }"
    npy.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\x00" * 64)
    proc = _under_4_gib("import sys\nfrom cvmvm.cli.main import main\n"
                        f"print(main(['verify', {str(tmp_path / 'five')!r}]))\n"
                        f"print(main(['hash', {str(npy)!r}]))\n")
    assert proc.stdout.split() == [str(EXIT_CODES["malformed"])] * 2, proc.stderr
    assert "internal" not in proc.stderr


@pytest.mark.parametrize("dtype", ["i4", "i8", "f4", "f8"])
def test_npy_files_are_written_little_endian_on_any_host(dtype):
    """np.save writes the host's byte order, and on a big-endian host the VM's arrays are big-endian:
    the outputs and tensors cvmvm writes are the same bytes on every machine all the same."""
    values = np.arange(-3, 3).astype(dtype)
    little = files.npy_bytes(values.astype("<" + dtype))
    assert files.npy_bytes(values.astype(">" + dtype)) == little    # what a big-endian host holds
    assert f"'descr': '<{dtype}'".encode() in little
    assert np.array_equal(np.load(io.BytesIO(little)), values)
    assert files.npy_bytes(np.arange(3, dtype=np.uint8)) == files.npy_bytes(np.arange(3, dtype="|u1"))


def npy(tmp_path: Path, header: str | bytes, data: bytes = b"", version: int = 1, raw_len: bytes | None = None) -> Path:
    text = header.encode("latin-1") if isinstance(header, str) else header
    width = 2 if version == 1 else 4
    path = tmp_path / "x.npy"
    path.write_bytes(b"\x93NUMPY" + bytes([version, 0]) + (raw_len or len(text).to_bytes(width, "little"))
                     + text + data)
    return path


@pytest.mark.parametrize("header, data, code", [
    # the size the header declares is checked against the file before anything is read
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824,), }", b"\0" * 100, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", b"\0" * 23, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", b"\0" * 25, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (1 << 40,), }", b"", "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (1099511627776, 4096), }", b"", "limit.bytes"),
    # an empty array's other dimensions are bounded too (numpy's reshape: a bare ValueError, internal.bug)
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4611686018427387904)}", b"",
     "limit.bytes"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0, 1073741824, 2)}", b"", "limit.bytes"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0" + ", 4294967295" * 3 + ")}", b"", "limit.bytes"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0, 4294967296)}", b"", "limit.bytes"),
    # only plain decimal integers: the others pass the 20-digit check with any value
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0, 1_000_000_000_000_000_000_000)}", b"", "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0, 0xffffffffffffffffffff)}", b"", "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0x2,)}", b"\0" * 8, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0o2,)}", b"\0" * 8, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0b10,)}", b"\0" * 8, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (1_0,)}", b"\0" * 40, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (2.0,)}", b"\0" * 8, "malformed.npy"),
    # zero-size and non-numeric dtypes (numpy: OverflowError on a zero itemsize)
    ("{'descr': '|V0', 'fortran_order': False, 'shape': (3,), }", b"", "input.dtype"),
    ("{'descr': '<U0', 'fortran_order': False, 'shape': (3,), }", b"", "input.dtype"),
    ("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", b"\0" * 16, "input.dtype"),
    ("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,), }", b"\0" * 4, "input.dtype"),
    ("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", b"\0" * 8, "malformed.npy"),
    ("{'descr': 'zz', 'fortran_order': False, 'shape': (1,), }", b"", "input.dtype"),
    ("{'descr': ',i8', 'fortran_order': True, 'shape': (2, 3), }", b"\0" * 48, "input.dtype"),  # np.dtype: SyntaxError
    # not a VM dtype the same way on every host ('<f16' is float128 where numpy has it, else no dtype)
    ("{'descr': '<i16', 'fortran_order': False, 'shape': (1,), }", b"\0" * 16, "input.dtype"),
    ("{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }", b"\0" * 16, "input.dtype"),
    ("{'descr': '<b2', 'fortran_order': False, 'shape': (1,), }", b"\0" * 2, "input.dtype"),
    # a multi-byte dtype without a byte order: numpy reads it in the host's, so it is no one tensor
    ("{'descr': '|i4', 'fortran_order': False, 'shape': (1,), }", b"\0\0\0\1", "malformed.npy"),
    ("{'descr': '=i4', 'fortran_order': False, 'shape': (1,), }", b"\0\0\0\1", "malformed.npy"),
    ("{'descr': '|f8', 'fortran_order': False, 'shape': (1,), }", b"\0" * 8, "malformed.npy"),
    ("{'descr': '=u2', 'fortran_order': False, 'shape': (1,), }", b"\0" * 2, "malformed.npy"),
    ("{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }", b"\0" * 12, "input.dtype"),
    # bad headers: each one clean line (they gave 3-line messages, TypeError, tokenizer errors)
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (2,3 }", b"", "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': 0, 'shape': (1,), }", b"\0" * 4, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (True,), }", b"\0" * 4, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (-1,), }", b"", "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': [1], }", b"\0" * 4, "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False}", b"", "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), 'x': 1}", b"\0" * 4, "malformed.npy"),
    ("[" * 5000, b"", "malformed.npy"),
    ("'\"\"\"\n\n\n", b"", "malformed.npy"),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (" + "9" * 5000 + ",), }", b"", "malformed.npy"),
    (b"\xff\xfe{}", b"", "malformed.npy"),
])
def test_read_npy_refuses_with_one_line(tmp_path, capsys, header, data, code):
    path = npy(tmp_path, header, data)
    assert code_of(files.read_npy, path) == code
    exit_code, err = cli(capsys, ["hash", str(path)])
    assert exit_code == EXIT_CODES[code.split(".")[0]] and err.startswith(f"cvmvm: error {code}:")


def test_long_digit_strings_do_not_depend_on_the_environment(tmp_path):
    path = npy(tmp_path, "{'descr': '<i4', 'fortran_order': False, 'shape': (" + "9" * 5000 + ",), }")
    for env in ({}, {"PYTHONINTMAXSTRDIGITS": "0"}):
        proc = subprocess.run([sys.executable, "-m", "cvmvm", "hash", str(path)], capture_output=True, text=True,
                              env={**os.environ, **env}, cwd=REPO, timeout=120)
        assert proc.returncode == EXIT_CODES["malformed"], proc.stderr
        assert proc.stderr.startswith("cvmvm: error malformed.npy")


def test_read_npy_header_bounds(tmp_path):
    assert code_of(files.read_npy, npy(tmp_path, "{}", version=2, raw_len=(1 << 31).to_bytes(4, "little"))) \
        == "malformed.npy"
    assert code_of(files.read_npy, npy(tmp_path, "{}", version=9)) == "malformed.npy"
    assert code_of(files.read_npy, npy(tmp_path, "{'descr'", raw_len=(500).to_bytes(2, "little"))) == "malformed.npy"
    (tmp_path / "short.npy").write_bytes(b"\x93NUM")
    assert code_of(files.read_npy, tmp_path / "short.npy") == "malformed.npy"


def test_an_empty_arrays_dimensions_are_bounded_as_a_full_ones(tmp_path):
    """The bound is the data the other dimensions describe: at it an empty array is read, past it not."""
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (0, %d, %d), }"
    assert files.read_npy(npy(tmp_path, header % (1 << 20, 1 << 10)), limit=1 << 32).shape == (0, 1 << 20, 1 << 10)
    assert code_of(files.read_npy, npy(tmp_path, header % (1 << 20, 1 << 10)), limit=(1 << 32) - 1) == "limit.bytes"
    assert files.read_npy(npy(tmp_path, header % (0, 1 << 30))).shape == (0, 0, 1 << 30)


def _sparse(path: Path, head: bytes, size: int) -> Path:
    """A file of ``size`` bytes that begins with ``head``, the rest a hole that costs no disk."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def _never_read(*args, **kwargs):
    raise AssertionError("the file was read beyond its first bytes")


def test_read_by_head_reads_under_the_limit_of_the_kind_its_first_bytes_show(tmp_path, monkeypatch):
    def limit_of(head: bytes) -> tuple[int, str]:
        return (10, "small kind") if head.startswith(b"s") else (300, "large kind")

    (tmp_path / "s").write_bytes(b"s" * 10)
    assert files.read_by_head(tmp_path / "s", "x", limit_of) == b"s" * 10
    (tmp_path / "l").write_bytes(bytes(range(256)) + b"l" * 44)
    monkeypatch.setattr(files, "READ_STEP", 7)
    assert files.read_by_head(tmp_path / "l", "x", limit_of) == bytes(range(256)) + b"l" * 44
    (tmp_path / "e").write_bytes(b"")
    assert files.read_by_head(tmp_path / "e", "x", limit_of) == b""
    (tmp_path / "s").write_bytes(b"s" * 11)
    monkeypatch.setattr(files, "read_bounded", _never_read)
    with pytest.raises(CvmError, match="small kind") as e:
        files.read_by_head(tmp_path / "s", "x", limit_of)
    assert e.value.code == "limit.bytes"
    assert code_of(files.read_by_head, tmp_path / "missing", "x", limit_of) == "io.not_found"
    assert code_of(files.read_by_head, tmp_path, "x", limit_of) == "io.not_regular"


@pytest.mark.parametrize("argv", [["show", "{f}"], ["hash", "{f}"], ["verify", "{f}"], ["disasm", "{f}"],
                                  ["convert", "{f}", "{d}/out.cvm"], ["run", "{f}", "--input", "data={d}/x.npy"]])
@pytest.mark.parametrize("head", [b'{"nodes": ', b'\n  {"nodes": '])
def test_a_huge_graph_json_is_refused_from_its_size_before_it_is_read(capsys, tmp_path, monkeypatch, argv, head):
    # Defect: read under any file's 4 GiB, a 1 GiB graph JSON took 12 s and 2 GB before its 64 MiB limit refused it.
    big = _sparse(tmp_path / "big.json", head, 1 << 30)
    monkeypatch.setattr(files, "read_bounded", _never_read)
    code, err = cli(capsys, [a.format(f=big, d=tmp_path) for a in argv])
    assert code == EXIT_CODES["limit"] and err.startswith("cvmvm: error limit.bytes:"), err
    assert str(big) in err and "1073741824 bytes" in err


@pytest.mark.parametrize("value", [
    np.arange(6, dtype=np.int32).reshape(2, 3),
    np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
    np.arange(5, dtype=">i4"),
    np.arange(-3, 3, dtype=np.int8),
    np.arange(3, dtype=">u2"),
    np.arange(3, dtype="<u8"),
    np.array([-1.5, 0.25], dtype=">f2"),
    np.array([True, False]),
    np.zeros((0, 3), dtype=np.uint8),
    np.float32(2.5) * np.ones(()),
])
def test_read_npy_reads_what_numpy_writes(tmp_path, value):
    for version in ((1, 0), (2, 0), (3, 0)):
        path = tmp_path / "v.npy"
        with open(path, "wb") as f:
            np.lib.format.write_array(f, value, version=version, allow_pickle=False)
        got = files.read_npy(path)
        assert got.dtype == value.dtype and got.shape == value.shape and np.array_equal(got, value)


def test_a_one_byte_dtype_needs_no_byte_order(tmp_path):
    for descr in ("|i1", "=i1", "<u1", "|b1"):
        got = files.read_npy(npy(tmp_path, "{'descr': '%s', 'fortran_order': False, 'shape': (2,), }" % descr,
                                 b"\xff\x01"))
        assert got.tolist() == ([-1, 1] if "i" in descr else [255, 1] if "u" in descr else [True, True])


# -- outputs checked before the work -------------------------------------------------

@pytest.fixture()
def small(tmp_path) -> dict[str, Path]:
    (tmp_path / "m.cvm").write_bytes(mlp_model().canonical_bytes)
    np.save(tmp_path / "x.npy", np.array([[5, -100, 120, 7]], dtype=np.int32))
    return {"model": tmp_path / "m.cvm", "x": tmp_path / "x.npy", "dir": tmp_path}


def run_argv(small, *extra: str) -> list[str]:
    return ["run", str(small["model"]), "--input", f"x={small['x']}", *extra]


@pytest.mark.parametrize("option", ["--trace", "--receipt", "--save-outputs"])
def test_an_output_in_a_missing_directory_fails_before_the_run(capsys, small, option, monkeypatch):
    ran = []
    monkeypatch.setattr("cvmvm.cli.model.load_model", lambda *a: ran.append(a))
    target = "/nonexistent/t.out" if option != "--save-outputs" else "/nonexistent/dir/out"
    code, err = cli(capsys, run_argv(small, option, target))
    assert code == EXIT_CODES["io"] == 8 and err.startswith("cvmvm: error io.not_found:")
    assert target in err and not ran


def test_every_writing_command_names_the_path_it_was_given(capsys, small, tmp_path):
    bad = "/nonexistent/out"
    for argv in (["prove-step", str(small["model"]), "--input", f"x={small['x']}", "--step", "0", "--out", bad],
                 ["convert", str(small["model"]), bad + ".json"],
                 ["store", "add", bad, str(small["model"])]):
        code, err = cli(capsys, argv)
        assert code == EXIT_CODES["io"] and err.startswith("cvmvm: error io.") and bad in err, argv
        assert ".tmp" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.cvm", "x.npy"]


def test_an_output_that_is_a_directory_or_device(capsys, small):
    (small["dir"] / "d").mkdir()
    code, err = cli(capsys, run_argv(small, "--trace", str(small["dir"] / "d")))
    assert code == EXIT_CODES["io"] and "io.not_regular" in err
    code, err = cli(capsys, run_argv(small, "--receipt", "/dev/null"))
    assert code == EXIT_CODES["io"] and "io.not_regular" in err
    code, err = cli(capsys, run_argv(small, "--save-outputs", str(small["x"])))
    assert code == EXIT_CODES["io"] and "io.not_regular" in err


def test_an_output_equal_to_an_input_is_refused(capsys, small):
    d, m, x = small["dir"], str(small["model"]), str(small["x"])
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    for argv in (run_argv(small, "--trace", x),
                 run_argv(small, "--receipt", m),
                 run_argv(small, "--receipt", str(d / "." / "m.cvm")),
                 run_argv(small, "--trace", str(d / "t.json"), "--receipt", str(d / "t.json")),
                 ["prove-step", m, "--input", f"x={x}", "--step", "0", "--out", m],
                 ["convert", m, m]):
        code, err = cli(capsys, argv)
        assert code != 0 and err.startswith("cvmvm: error "), argv
    (d / "link.json").symlink_to(small["x"])
    code, _ = cli(capsys, run_argv(small, "--trace", str(d / "link.json")))
    assert code != 0
    out = d / "out"
    out.mkdir()
    np.save(out / "output_0.npy", np.array([[5, -100, 200, 7]], dtype=np.int32))
    code, err = cli(capsys, ["run", m, "--input", f"x={out / 'output_0.npy'}", "--save-outputs", str(out)])
    assert code != 0 and "output_0.npy" in err
    code, err = cli(capsys, run_argv(small, "--save-outputs", str(out), "--trace", str(out / "output_3.npy")))
    assert code != 0
    assert {n: (d / n).read_bytes() for n in before} == before


def test_convert_checks_the_suffix_against_the_direction(capsys, tmp_path):
    (tmp_path / "g.json").write_bytes(gzip.decompress((DIGITS / "graph.json.gz").read_bytes()))
    (tmp_path / "g.params").write_bytes(gzip.decompress((DIGITS / "params.bin.gz").read_bytes()))
    g, p = str(tmp_path / "g.json"), str(tmp_path / "g.params")
    code, err = cli(capsys, ["convert", g, "--params", p, str(tmp_path / "n.json")])
    assert code != 0 and ".cvm" in err and not (tmp_path / "n.json").exists()
    code, _ = cli(capsys, ["convert", g, "--params", p, str(tmp_path / "n.cvm")])
    assert code == 0
    n = str(tmp_path / "n.cvm")
    for wrong in ("back.cvm", "back", "back.params"):
        code, err = cli(capsys, ["convert", n, str(tmp_path / wrong)])
        assert code != 0 and ".json" in err and not (tmp_path / wrong).exists()
    code, err = cli(capsys, ["convert", n, str(tmp_path / "back.json"), "--params-out", n])
    assert code != 0
    code, _ = cli(capsys, ["convert", n, str(tmp_path / "back.json")])
    assert code == 0 and (tmp_path / "back.json").exists() and (tmp_path / "back.params").exists()


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_files_are_created_with_the_umask_mode(capsys, small, mask):
    old = os.umask(mask)
    try:
        d = small["dir"]
        code, _ = cli(capsys, run_argv(small, "--trace", str(d / "t.json"), "--receipt", str(d / "r.bin"),
                                       "--save-outputs", str(d / "o")))
        assert code == 0
        for p in (d / "t.json", d / "r.bin", d / "o" / "output_0.npy"):
            assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask, p
        assert stat.S_IMODE((d / "o").stat().st_mode) == 0o777 & ~mask
        code, _ = cli(capsys, ["store", "add", str(d / "s"), str(small["model"])])
        assert code == 0
        stored = next((d / "s").iterdir())
        assert stat.S_IMODE(stored.stat().st_mode) == 0o666 & ~mask
    finally:
        os.umask(old)


def test_save_outputs_removes_stale_outputs_and_nothing_else(capsys, small):
    out = small["dir"] / "o"
    out.mkdir()
    for name in ("output_0.npy", "output_1.npy", "output_17.npy", "notes.txt", "output_x.npy"):
        (out / name).write_bytes(b"old")
    code, _ = cli(capsys, run_argv(small, "--save-outputs", str(out)))
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "output_0.npy", "output_x.npy"]
    assert np.load(out / "output_0.npy").shape == (1, 3)


# -- a failed write ------------------------------------------------------------------

def test_a_failed_write_is_io_write_names_the_path_and_leaves_old_files(capsys, small, monkeypatch):
    d = small["dir"]
    argv = run_argv(small, "--trace", str(d / "t.json"), "--receipt", str(d / "r.bin"))
    assert cli(capsys, argv)[0] == 0
    old = {n: (d / n).read_bytes() for n in ("t.json", "r.bin")}
    calls = []
    real_write = os.write

    def full_disk(fd, data):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    code, err = cli(capsys, run_argv(small, "--trace", str(d / "t.json"), "--receipt", str(d / "r.bin"),
                                     "--ops-limit", "1000000"))
    monkeypatch.undo()
    assert code == EXIT_CODES["io"] and err.startswith("cvmvm: error io.write: cannot write --trace ")
    assert str(d / "t.json") in err and "No space left" in err
    assert {n: (d / n).read_bytes() for n in old} == old
    assert not [p for p in d.iterdir() if files.is_own_temp(p.name)]


# -- one unit: all old or all new, wherever the writer dies ----------------------------------

def _unit(tmp_path: Path, tag: bytes, count: int) -> files.Outputs:
    """Three files over two directories and a directory of ``count`` owned files."""
    out = files.Outputs()
    for rel in ("a/t.json", "a/r.bin", "b/x.bin"):
        out.put(out.file(tmp_path / rel, rel), tag + rel.encode())
    saved = out.directory(tmp_path / "b" / "o", "o", r"output_[0-9]+\.npy")
    for k in range(count):
        out.put_in(saved, f"output_{k}.npy", tag + str(k).encode())
    return out


def _state(tmp_path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}


def _expected(tmp_path: Path, tag: bytes, count: int) -> dict[str, bytes]:
    state = {rel: tag + rel.encode() for rel in ("a/t.json", "a/r.bin", "b/x.bin")}
    state.update({f"b/o/output_{k}.npy": tag + str(k).encode() for k in range(count)})
    return state


def test_a_unit_is_all_old_or_all_new_at_every_crash_point(tmp_path):
    """Kill the writer before each of its file-system calls in turn (forked child, os._exit)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _unit(tmp_path, b"old ", 3).commit()
    old = _expected(tmp_path, b"old ", 3)
    new = _expected(tmp_path, b"new ", 2)
    assert _state(tmp_path) == old
    outcomes = set()
    for k in range(200):
        pid = os.fork()
        if pid == 0:   # the child dies just before its k-th call
            count = [0]

            def dying(fn):
                def call(*args, **kwargs):
                    count[0] += 1
                    if count[0] > k:
                        os._exit(99)
                    return fn(*args, **kwargs)
                return call
            for name in ("replace", "unlink", "mkdir", "fsync", "write", "open"):
                setattr(os, name, dying(getattr(os, name)))
            try:
                _unit(tmp_path, b"new ", 2).commit()
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        seen = _state(tmp_path)
        # every final name holds a whole file, old or new, at every moment
        for rel, data in seen.items():
            if not files.is_own_temp(Path(rel).name):
                assert data in (old.get(rel), new.get(rel)), (k, rel)
        files.recover(tmp_path / "a")
        files.recover(tmp_path / "b")
        files.recover(tmp_path / "b" / "o")
        after = _state(tmp_path)
        assert after in (old, new), (k, after)
        outcomes.add("new" if after == new else "old")
        if os.waitstatus_to_exitcode(status) == 0:
            break
        _back_to(tmp_path, after, old)   # for the next crash point
    else:
        pytest.fail("the commit never finished")
    assert outcomes == {"old", "new"} and k > 10, k


def _back_to(tmp_path: Path, now: dict[str, bytes], old: dict[str, bytes]) -> None:
    for rel in now:
        (tmp_path / rel).unlink()
    for rel, data in old.items():
        (tmp_path / rel).write_bytes(data)


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_interrupted_unit_is_all_old_or_all_new_when_the_interrupt_goes_on(tmp_path, monkeypatch, when):
    """Ctrl-C (KeyboardInterrupt, as SIGTERM's Terminated is) before or just after each of the
    writer's file-system calls in turn: once the interrupt reaches the caller, every name is old
    or new and no record or temporary file is left, with no recovery run.  Past the commit point
    the unit used to stop where it was: mixed files and its record left to the next writer."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _unit(tmp_path, b"old ", 3).commit()
    old, new = _expected(tmp_path, b"old ", 3), _expected(tmp_path, b"new ", 2)
    outcomes = set()
    for k in range(1, 200):
        count = [0]

        def interrupted(fn):
            def call(*args, **kwargs):
                count[0] += 1
                if count[0] == k and when == "before":
                    raise KeyboardInterrupt
                result = fn(*args, **kwargs)
                if count[0] == k:
                    raise KeyboardInterrupt
                return result
            return call
        with monkeypatch.context() as m:
            for name in ("replace", "unlink", "mkdir", "fsync", "write", "open"):
                m.setattr(os, name, interrupted(getattr(os, name)))
            try:
                _unit(tmp_path, b"new ", 2).commit()
                finished = True
            except KeyboardInterrupt:
                finished = False
        after = _state(tmp_path)
        assert after in (old, new), (k, after)
        assert not [p for p in tmp_path.rglob("*") if files.is_own_temp(p.name) or ".commit" in p.name], k
        outcomes.add("new" if after == new else "old")
        if finished:
            break
        _back_to(tmp_path, after, old)
    else:
        pytest.fail("the commit never finished")
    assert outcomes == {"old", "new"} and k > 10, k


def _killed_after_the_commit_point(tmp_path: Path) -> None:
    """A unit over a/ and b/ (old state committed first) whose writer dies after its commit
    point, before b/x.bin is renamed: a/ new, b/x.bin old, the unit's record pending."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _unit(tmp_path, b"old ", 1).commit()
    pid = os.fork()
    if pid == 0:
        real = os.replace

        def replace(src, dst):
            if not str(src).endswith(".commit") and ".cvmvm-" in str(src) and "x.bin" in str(dst):
                os._exit(99)          # after the commit point, before b/x.bin is renamed
            return real(src, dst)
        os.replace = replace
        try:
            _unit(tmp_path, b"new ", 1).commit()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def test_recovery_of_a_unit_named_in_another_directory(tmp_path):
    """A killed unit over a/ and b/ is finished by the next unit writing only into b/."""
    _killed_after_the_commit_point(tmp_path)
    assert (tmp_path / "a" / "t.json").read_bytes() == b"new a/t.json"
    assert (tmp_path / "b" / "x.bin").read_bytes() == b"old b/x.bin"
    files.write_file(tmp_path / "b" / "other", b"z", "other")
    assert _state(tmp_path) == {**_expected(tmp_path, b"new ", 1), "b/other": b"z"}


@pytest.mark.parametrize("blocked", ["b/o/output_1.npy", "b/o/output_7.npy", "a/r.bin"])
def test_a_final_name_that_is_a_directory_is_refused_before_anything_is_written(tmp_path, blocked):
    """An output directory's file (written or stale), or a declared file that became a directory
    after it was declared: refused under the lock, not by a rename after the commit point, which
    left the unit pending and every later write into the directory failing."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _unit(tmp_path, b"old ", 3).commit()
    old = _state(tmp_path)
    unit = _unit(tmp_path, b"new ", 2)
    (tmp_path / blocked).unlink(missing_ok=True)
    (tmp_path / blocked).mkdir()
    with pytest.raises(CvmError) as e:
        unit.commit()
    assert e.value.code == "io.not_regular" and blocked.split("/")[-1] in e.value.message
    assert _state(tmp_path) == {k: v for k, v in old.items() if k != blocked}
    assert not [p for p in tmp_path.rglob("*") if files.is_own_temp(p.name) or ".commit" in p.name]
    (tmp_path / blocked).rmdir()
    _unit(tmp_path, b"new ", 2).commit()
    assert _state(tmp_path) == _expected(tmp_path, b"new ", 2)


def test_a_killed_unit_that_cannot_be_finished_is_named_as_such(tmp_path):
    _killed_after_the_commit_point(tmp_path)
    (tmp_path / "b" / "x.bin").unlink()
    (tmp_path / "b" / "x.bin").mkdir()           # in the way of the rename recovery must do
    with pytest.raises(CvmError) as e:
        files.write_file(tmp_path / "b" / "other", b"z", "other")
    assert e.value.code == "io.not_regular" and "interrupted write" in e.value.message
    assert ".commit" in e.value.message and "x.bin" in e.value.message and "other" not in e.value.message


def test_a_planted_commit_record_is_ignored(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "d").mkdir()
    token = "0" * files.TOKEN_HEX
    record = {"format": files.COMMIT_FORMAT, "dirs": [str(tmp_path / "d")], "renames": [],
              "removes": [str(victim)]}
    (tmp_path / "d" / files.record_name(token)).write_text(json.dumps(record))
    files.recover(tmp_path / "d")
    assert victim.read_bytes() == b"keep" and list((tmp_path / "d").iterdir()) == []


def _planted(directory: Path, token: str, data: bytes) -> Path:
    path = directory / files.record_name(token)
    path.write_bytes(data)
    return path


def test_a_commit_record_that_does_not_parse_is_removed_not_fatal(tmp_path):
    # Defect: a record of "[" * 100000 made every later write in its directory fail with RecursionError.
    for k, data in enumerate([b"[" * 100000, b'{"a": ' * 100000, b"{" + b"[" * 2000 + b"]" * 2000 + b"}",
                              b'{"format": "cvmvm-commit/1", "format": 1}', b"\xff\xfe", b"not json",
                              b"", b"[1e999999]", b"[" + b"9" * 100000 + b"]"]):
        _planted(tmp_path, f"{k:016x}", data)
    files.write_file(tmp_path / "out.bin", b"x", "output")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    assert (tmp_path / "out.bin").read_bytes() == b"x"


def _removing(tmp_path: Path, victim: Path, pad: int) -> bytes:
    """A record, honoured if read, whose commit point is itself and that removes ``victim``;
    ``pad`` spaces make it that much longer."""
    record = {"format": files.COMMIT_FORMAT, "dirs": [str(tmp_path)], "renames": [], "removes": [str(victim)]}
    return json.dumps(record).encode() + b" " * pad


def test_a_commit_record_is_read_only_up_to_its_limit(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    over = _removing(tmp_path, victim, 0)
    _planted(tmp_path, "1" * files.TOKEN_HEX, over + b" " * (files.MAX_RECORD_BYTES + 1 - len(over)))
    files.recover(tmp_path)
    assert victim.read_bytes() == b"keep" and [p.name for p in tmp_path.iterdir()] == ["victim"]
    at = _removing(tmp_path, victim, 0)
    _planted(tmp_path, "2" * files.TOKEN_HEX, at + b" " * (files.MAX_RECORD_BYTES - len(at)))
    files.recover(tmp_path)   # a record of its own: finished, the file it removes removed
    assert list(tmp_path.iterdir()) == []


def test_a_commit_record_that_is_no_regular_file_is_removed_unopened(tmp_path):
    os.mkfifo(tmp_path / files.record_name("3" * files.TOKEN_HEX))   # opening it would block
    (tmp_path / "target").write_bytes(_removing(tmp_path, tmp_path / "victim", 0))
    (tmp_path / files.record_name("4" * files.TOKEN_HEX)).symlink_to(tmp_path / "target")
    files.recover(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["target"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another owner needs root to make")
def test_a_commit_record_of_another_user_is_never_read(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    for digit, data in (("5", b"[" * 100000), ("6", _removing(tmp_path, victim, 0))):
        os.chown(_planted(tmp_path, digit * files.TOKEN_HEX, data), 12345, 12345)
    monkeypatch.setattr(files, "read_bounded", _never_read)
    files.recover(tmp_path)
    assert victim.read_bytes() == b"keep" and [p.name for p in tmp_path.iterdir()] == ["victim"]


def test_json_has_no_infinities(capsys, tmp_path):
    # Defect: --json printed -Infinity for a float max_pool window of only -inf and NaN.
    from isa.attrs import parse_attrs
    from isa.table import OP_BY_NAME
    from isa.types import TensorType
    from serializer.model import Input, Instr, Model as ModelIR
    from cvmvm.vm.api import Model
    from cvmvm.vm.verify import verify
    attrs = parse_attrs(OP_BY_NAME["max_pool"].attrs, dict(
        kernel_shape=(2,), strides=(2,), dilations=(1,), pads=(0, 0), auto_pad="NOTSET", ceil_mode=0,
        storage_order=0, index_axis=0, index_dtype="int64"), fill_defaults=False)
    ir = ModelIR((Input("x", TensorType((1, 1, 4), None, "float32")),), (),
                 (Instr("max_pool", attrs, (0,), (1, 2)),), (1, 0))
    (tmp_path / "m.cvm").write_bytes(Model(verify(ir)).canonical_bytes)
    np.save(tmp_path / "x.npy", np.array([[[-np.inf, np.nan, 2.5, np.inf]]], dtype=np.float32))
    code = main(["run", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}", "--json"])
    out = capsys.readouterr().out

    def refuse(name):
        raise AssertionError(f"{name} is not JSON")
    info = json.loads(out, parse_constant=refuse)
    assert code == 0
    y, x = info["outputs"]
    assert (y["min"], y["max"]) == ("-inf", "inf") and (x["min"], x["max"]) == ("-inf", "inf")
    np.save(tmp_path / "x.npy", np.full((1, 1, 4), np.nan, dtype=np.float32))
    main(["run", str(tmp_path / "m.cvm"), "--input", f"x={tmp_path / 'x.npy'}", "--json"])
    captured = capsys.readouterr()
    y, x = json.loads(captured.out, parse_constant=refuse)["outputs"]
    assert (y["min"], x["min"], x["max"]) == ("-inf", "nan", "nan") and captured.err == ""


def test_a_file_system_without_flock_still_gets_its_files(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    stale = tmp_path / files.temp_name("t.json", "ab" * 8)
    stale.write_bytes(b"maybe another writer's")
    monkeypatch.setattr(fcntl, "flock", no_locks)
    files.write_file(tmp_path / "t.json", b"new", "--trace")
    assert (tmp_path / "t.json").read_bytes() == b"new"
    assert stale.exists()   # unlocked, it may belong to a live writer: left alone


def test_dump_tensors_is_part_of_the_unit(capsys, small):
    d = small["dir"]
    dump = d / "tensors"
    dump.mkdir()
    (dump / "0099-relu-stale.npy").write_bytes(b"from an earlier model")
    (dump / "notes.txt").write_bytes(b"mine")
    code, _ = cli(capsys, run_argv(small, "--dump-tensors", str(dump), "--trace", str(d / "t.json")))
    assert code == 0
    names = sorted(p.name for p in dump.iterdir())
    assert "0099-relu-stale.npy" not in names and "notes.txt" in names and len(names) == 9
    code, err = cli(capsys, run_argv(small, "--dump-tensors", str(dump), "--trace", str(dump / "0000-input-x.npy")))
    assert code == EXIT_CODES["usage"] and "usage.conflict" in err


@pytest.mark.parametrize("length", [227, 228, 255])
def test_any_name_the_system_takes_can_be_written(tmp_path, length):
    # Defect: the temporary name adds 28 bytes, so names of 228-255 bytes failed with ENAMETOOLONG.
    path = tmp_path / ("é" + "a" * (length - 2))    # 'é' is two bytes: cut inside no character either
    files.write_file(path, b"x", "--trace")
    assert path.read_bytes() == b"x" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_long_names_of_one_unit_get_their_own_temporary_files(tmp_path):
    names = ["a" * 250 + "1.npy", "a" * 250 + "2.npy"]
    temps = {files.temp_name(n, "ab" * 8) for n in names}
    assert len(temps) == 2 and all(len(t.encode()) <= files.NAME_MAX and files.is_own_temp(t) for t in temps)
    outputs = files.Outputs()
    for n in names:
        outputs.put(outputs.file(tmp_path / n, "out"), n.encode())
    outputs.commit()
    assert sorted(p.read_bytes().decode() for p in tmp_path.iterdir()) == names


def test_a_regular_file_where_a_directory_goes_is_called_so(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(CvmError) as e:
        files.Outputs().directory(tmp_path / "f", "--export", r"x")
    assert e.value.code == "io.not_regular" and "a regular file, not a directory" in e.value.message
