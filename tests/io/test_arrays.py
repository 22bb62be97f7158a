"""The bounded .npy/.npz reader (``portable.io.arrays``): valid files read exactly as
``np.load`` reads them; files declaring more than the limit (a header claiming terabytes, a zip
bomb, a member whose zip header lies) are refused before anything of that size is allocated or
decompressed; object dtypes and FIFOs are refused; malformed headers and archives raise only
our errors.

Hostile archives are written by hand here (``write_npz``: zip records with ``struct``, deflate
streams with ``zlib``), never with portable's code, and the memory a refusal costs is measured
with ``tracemalloc`` (numpy reports its allocations to it).
"""
from __future__ import annotations

import io
import os
import struct
import threading
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from portable.errors import MemoryBudgetError, SerializationError
from portable.io.arrays import read_arrays, read_npy, read_npz

MiB = 1 << 20
OURS = (SerializationError, MemoryBudgetError)


# -- builders (shared with tests/cli/test_allocation_limits.py) ------------------------------------


def npy_header(shape: tuple, descr: str = "<f4", fortran: bool = False,
               version: tuple = (1, 0)) -> bytes:
    """The bytes of an .npy file before its data (magic, version, length, header dict)."""
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": fortran, "shape": shape}
    if version == (1, 0):
        np.lib.format.write_array_header_1_0(buffer, header)
    else:
        np.lib.format.write_array_header_2_0(buffer, header)
    return buffer.getvalue()


def deflated_zeros(prefix: bytes, zero_mib: int) -> tuple[bytes, int, int]:
    """A raw deflate stream of ``prefix`` then ``zero_mib`` MiB of zeros, built without ever
    holding the zeros: after a full flush the compressor starts afresh, so every 1 MiB block
    of zeros compresses to the same bytes, written once and repeated. Returns the stream, the
    CRC-32 and the length of what it inflates to."""
    zeros = bytes(MiB)
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = squeeze.compress(prefix) + squeeze.flush(zlib.Z_FULL_FLUSH)
    block = squeeze.compress(zeros) + squeeze.flush(zlib.Z_FULL_FLUSH)
    tail = squeeze.flush()
    crc = zlib.crc32(prefix)
    for _ in range(zero_mib):
        crc = zlib.crc32(zeros, crc)
    return head + block * zero_mib + tail, crc, len(prefix) + zero_mib * MiB


def write_npz(path, members: list[tuple[str, bytes, int, int]]) -> None:
    """A zip of deflated members ``(name, deflate stream, crc, declared uncompressed size)``,
    written record by record (APPNOTE 4.3: local headers, central directory, end record), so a
    member may declare any size and CRC."""
    local, central = b"", b""
    for name, stream, crc, size in members:
        raw = name.encode()
        fields = (20, 0, zipfile.ZIP_DEFLATED, 0, 0x21, crc, len(stream), size, len(raw))
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, *fields, 0, 0, 0, 0, 0,
                               len(local)) + raw
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0) + raw + stream
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central),
                      len(local), 0)
    with open(path, "wb") as handle:
        handle.write(local + central + end)


def zip_bomb(path, zero_mib: int = 600, name: str = "x.npy") -> int:
    """An .npz whose one member, a float32 (rows, 4) array, inflates to ``zero_mib`` MiB of
    zeros; honest sizes. Returns the array's bytes."""
    rows = zero_mib * MiB // 16
    stream, crc, size = deflated_zeros(npy_header((rows, 4)), zero_mib)
    write_npz(path, [(name, stream, crc, size)])
    return rows * 16


# -- valid files read as np.load reads them --------------------------------------------------------


def _same(ours, theirs) -> None:
    assert type(ours) is np.ndarray and ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape and ours.flags.f_contiguous == theirs.flags.f_contiguous
    np.testing.assert_array_equal(ours, theirs)


ARRAYS = {
    "floats": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    "fortran": np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4)),
    "scalar": np.float64(2.5),
    "empty": np.zeros((0, 5), np.int16),
    "big_endian": np.arange(5, dtype=">i8"),
    "bools": np.array([True, False, True]),
    "complex": np.array([1 + 2j, -3j], np.complex128),
    "text": np.array(["ab", "c"]),
    "records": np.array([(1, 2.0), (3, 4.0)], dtype=[("a", "<i4"), ("b", ">f8")]),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_an_npy_reads_as_np_load_reads_it(tmp_path, name):
    path = tmp_path / f"{name}.npy"
    np.save(path, ARRAYS[name])
    _same(read_npy(path), np.load(path, allow_pickle=False))
    _same(read_arrays(path), np.load(path, allow_pickle=False))


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_an_npz_reads_as_np_load_reads_it(tmp_path, save):
    path = tmp_path / "all.npz"
    save(path, **ARRAYS)
    ours = read_npz(path)
    with np.load(path, allow_pickle=False) as theirs:
        assert list(ours) == theirs.files
        for name in theirs.files:
            _same(ours[name], theirs[name])
    assert list(read_arrays(path)) == list(ours)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(array=hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, max_dims=4,
                                                              max_side=5)),
       fortran=st.booleans())
def test_generated_arrays_read_as_np_load_reads_them(tmp_path_factory, array, fortran):
    folder = tmp_path_factory.mktemp("arrays")
    array = np.asfortranarray(array) if fortran else array
    np.save(folder / "a.npy", array)
    np.savez_compressed(folder / "a.npz", a=array, b=array.reshape(-1)[:1])
    _same(read_npy(folder / "a.npy"), np.load(folder / "a.npy", allow_pickle=False))
    ours = read_npz(folder / "a.npz")
    with np.load(folder / "a.npz", allow_pickle=False) as theirs:
        for name in theirs.files:
            _same(ours[name], theirs[name])


def test_the_hand_written_archive_is_one_np_load_reads(tmp_path):
    """The builder the bomb tests rely on writes valid archives (checked small: 2 MiB)."""
    stream, crc, size = deflated_zeros(npy_header((2 * MiB // 4,)), 2)
    write_npz(tmp_path / "z.npz", [("z.npy", stream, crc, size)])
    expected = np.zeros(2 * MiB // 4, np.float32)
    with np.load(tmp_path / "z.npz", allow_pickle=False) as theirs:
        np.testing.assert_array_equal(theirs["z"], expected)
    np.testing.assert_array_equal(read_npz(tmp_path / "z.npz", limit=4 * MiB)["z"], expected)


# -- sizes checked before allocation ---------------------------------------------------------------


def _peak(fn) -> int:
    """Bytes allocated at the peak while ``fn`` runs (Python and numpy allocations)."""
    tracemalloc.start()
    try:
        fn()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def _raises(error, fn, *words) -> int:
    def call():
        with pytest.raises(error) as info:
            fn()
        for word in words:
            assert word in str(info.value), str(info.value)
    return _peak(call)


@pytest.mark.parametrize("shape", [(1 << 20, 1 << 20), (1 << 40,), (1 << 62, 1 << 62, 1 << 62)])
def test_a_header_declaring_terabytes_is_refused_before_allocation(tmp_path, shape):
    path = tmp_path / "huge.npy"
    path.write_bytes(npy_header(shape, "<f8") + b"\0" * 64)
    nbytes = 8
    for dim in shape:
        nbytes *= dim  # Python ints: the closed form, whatever int64 would make of it
    peak = _raises(MemoryBudgetError, lambda: read_arrays(path, limit=16 * MiB), "huge.npy",
                   f"({nbytes} bytes)", "16.0 MiB")
    assert peak < MiB


def test_a_version_2_header_claiming_gigabytes_of_header_is_not_read(tmp_path):
    path = tmp_path / "long_header.npy"
    path.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{}")
    peak = _raises(SerializationError, lambda: read_arrays(path), "long_header.npy",
                   "header claims")
    assert peak < MiB


def test_an_npy_whose_data_is_short_or_long_is_refused(tmp_path):
    data = np.arange(4, dtype="<f4").tobytes()
    for extra, name in ((data[:-1], "short.npy"), (data + b"!", "long.npy")):
        (tmp_path / name).write_bytes(npy_header((4,)) + extra)
        with pytest.raises(SerializationError, match=f"{name}.*16 bytes of data"):
            read_arrays(tmp_path / name)


def test_a_zip_bomb_is_refused_under_the_budget_before_decompressing(tmp_path):
    path = tmp_path / "bomb.npz"
    nbytes = zip_bomb(path)
    assert path.stat().st_size < MiB and nbytes == 600 * MiB
    peak = _raises(MemoryBudgetError, lambda: read_arrays(path, limit=16 * MiB), "bomb.npz",
                   "600.0 MiB", "16.0 MiB")
    assert peak < 4 * MiB


def test_a_member_whose_zip_header_lies_small_cannot_inflate(tmp_path):
    """The zip declares 4 float32 (and their CRC) but the stream holds 600 MiB of zeros:
    exactly the declared bytes are read."""
    header = npy_header((4,))
    stream, _, _ = deflated_zeros(header, 600)
    honest = header + bytes(16)
    write_npz(tmp_path / "liar.npz", [("x.npy", stream, zlib.crc32(honest), len(honest))])
    result = {}
    peak = _peak(lambda: result.update(read_npz(tmp_path / "liar.npz", limit=16 * MiB)))
    np.testing.assert_array_equal(result["x"], np.zeros(4, np.float32))
    assert peak < 4 * MiB


def test_a_member_whose_zip_size_disagrees_with_its_npy_header_is_refused(tmp_path):
    header = npy_header((MiB,))  # 4 MiB of float32: within the limit, but not what the zip says
    stream, _, _ = deflated_zeros(header, 4)
    declared = header + bytes(16)  # what the zip declares, CRC included
    write_npz(tmp_path / "mismatch.npz", [("x.npy", stream, zlib.crc32(declared), len(declared))])
    _raises(SerializationError, lambda: read_npz(tmp_path / "mismatch.npz", limit=16 * MiB),
            "mismatch.npz", "member 'x.npy'", f"declares {len(header) + 16} bytes")


def test_a_member_whose_zip_header_lies_large_is_refused_before_decompressing(tmp_path):
    header = npy_header((4,))
    honest = header + bytes(16)
    stream, crc, _ = deflated_zeros(honest, 0)
    claim = 0xF0000000  # 3.75 GiB: the largest kind of claim a zip without zip64 can make
    write_npz(tmp_path / "claims.npz", [("x.npy", stream, crc, claim)])
    peak = _raises(MemoryBudgetError, lambda: read_npz(tmp_path / "claims.npz", limit=16 * MiB),
                   "claims.npz", f"({claim} bytes)", "nothing was decompressed")
    assert peak < MiB


def test_the_running_total_of_members_is_held_to_the_limit(tmp_path):
    path = tmp_path / "many.npz"
    np.savez(path, a=np.zeros(MiB // 4, np.float32), b=np.zeros(MiB // 4, np.float32))
    assert sorted(read_npz(path, limit=2 * MiB)) == ["a", "b"]
    with pytest.raises(MemoryBudgetError, match=r"member 'b.npy'.*1.0 MiB of members before"):
        read_npz(path, limit=2 * MiB - 1)


def test_a_central_directory_over_the_read_bound_is_refused_before_it_is_parsed(tmp_path):
    """25000 empty members: a 1.3 MiB directory, ~13 MiB of ZipInfo objects once parsed."""
    header = npy_header((0,))
    with zipfile.ZipFile(tmp_path / "crowd.npz", "w") as archive:
        for index in range(25000):
            archive.writestr(f"{index:05}.npy", header)
    peak = _raises(SerializationError, lambda: read_npz(tmp_path / "crowd.npz"), "crowd.npz",
                   "central directory")
    assert peak < 2 * MiB


# -- what is never read ----------------------------------------------------------------------------


def test_object_arrays_are_refused_never_unpickled(tmp_path):
    objects = np.array([{"a": 1}, None], dtype=object)
    np.save(tmp_path / "o.npy", objects, allow_pickle=True)
    np.savez(tmp_path / "o.npz", fine=np.ones(2), o=objects)
    with pytest.raises(SerializationError, match="o.npy.*Python objects"):
        read_arrays(tmp_path / "o.npy")
    with pytest.raises(SerializationError, match="member 'o.npy'.*Python objects"):
        read_arrays(tmp_path / "o.npz")


def test_a_pickle_or_other_file_is_neither_format(tmp_path):
    (tmp_path / "p.npy").write_bytes(b"\x80\x04\x95 pickled")
    with pytest.raises(SerializationError, match="neither an .npy array nor an .npz"):
        read_arrays(tmp_path / "p.npy")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need os.mkfifo")
def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "inputs.npz"
    os.mkfifo(fifo)  # nobody ever writes to it: a plain open() would block forever
    outcome = []

    def read():
        try:
            read_arrays(fifo)
        except Exception as exc:  # noqa: BLE001 - the type is what the test checks
            outcome.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "reading a FIFO blocked"
    assert isinstance(outcome[0], SerializationError) and "named pipe" in str(outcome[0])


def test_members_numpy_never_writes_are_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "odd.npz", "w") as archive:
        archive.writestr("notes.txt", b"hello")
    with pytest.raises(SerializationError, match="member 'notes.txt'.*not an .npy"):
        read_npz(tmp_path / "odd.npz")
    with zipfile.ZipFile(tmp_path / "bz.npz", "w", zipfile.ZIP_BZIP2) as archive:
        archive.writestr("x.npy", npy_header((1,)) + bytes(4))
    with pytest.raises(SerializationError, match="member 'x.npy'.*compression method 12"):
        read_npz(tmp_path / "bz.npz")


# -- malformed files raise only our errors ---------------------------------------------------------

_TOKENS = st.sampled_from(["{", "}", "(", ")", ",", ":", "'descr'", "'shape'", "'fortran_order'",
                           "'<f4'", "'O'", "'|V0'", "'<U0'", "[('a', 'O')]", "True", "False",
                           "-1", "0", "99999999999999999999", "1e400", "None", "'x'", " ", "\n",
                           "(1 << 70)", "((((((((", "[" * 50, "b'\\x00'"])


def _write(tmp_path_factory, data: bytes):
    path = tmp_path_factory.mktemp("bad") / "bad.npy"
    path.write_bytes(data)
    return path


def _only_ours(path) -> None:
    try:
        read_arrays(path, limit=MiB)
    except OURS:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(text="{", version=b"\x01\x00", body=b"")  # numpy tokenizes it: TokenError
@example(text="[" * 300, version=b"\x01\x00", body=b"")  # the parser's MemoryError
@given(text=st.lists(_TOKENS, max_size=40).map("".join),
       version=st.sampled_from([b"\x01\x00", b"\x02\x00", b"\x03\x00", b"\x00\x09"]),
       body=st.binary(max_size=64))
def test_malformed_npy_headers_raise_only_our_errors(tmp_path_factory, text, version, body):
    raw = text.encode("latin1")
    length = struct.pack("<H" if version == b"\x01\x00" else "<I", len(raw) % 0x10000)
    _only_ours(_write(tmp_path_factory, b"\x93NUMPY" + version + length + raw + body))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(-3, 1 << 66), max_size=6).map(tuple),
       descr=st.sampled_from(["<f4", "<f8", "|b1", "<U3", "|V0", "|S0", "<c16", "(2,)<f4",
                              "O", "<M8[s]"]),
       fortran=st.booleans(), version=st.sampled_from([(1, 0), (2, 0)]),
       body=st.binary(max_size=64))
@example(shape=(11, 11, 208892495), descr="|S0", fortran=False, version=(1, 0),
         body=b"")  # 'S0' counts 0 bytes but numpy allocates it as 'S1': 23 GiB
def test_npy_headers_declaring_any_shape_raise_only_our_errors(tmp_path_factory, shape, descr,
                                                               fortran, version, body):
    try:
        header = npy_header(shape, descr, fortran, version)
    except (ValueError, TypeError):
        return  # numpy will not even write it
    _only_ours(_write(tmp_path_factory, header + body))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_archives_raise_only_our_errors(tmp_path_factory, data):
    buffer = io.BytesIO()
    np.savez_compressed(buffer, a=np.arange(6, dtype=np.float32).reshape(2, 3), b=np.ones(3))
    raw = bytearray(buffer.getvalue())
    for _ in range(data.draw(st.integers(1, 8))):
        where = data.draw(st.integers(0, len(raw) - 1))
        raw[where] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(len(raw) // 2, len(raw)))
    path = tmp_path_factory.mktemp("bad") / "bad.npz"
    path.write_bytes(bytes(raw[:cut]))
    try:
        arrays = read_arrays(path, limit=MiB)
    except OURS:
        return
    assert isinstance(arrays, dict) and all(isinstance(a, np.ndarray) for a in arrays.values())
