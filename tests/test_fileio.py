"""smemtile.fileio: user files are read only when regular, small and UTF-8; outputs are written atomically and
never through a symlink, onto the input, or onto a device node."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from smemtile.errors import SpecError
from smemtile.fileio import (
    SPEC_BUDGET,
    printable,
    read_blocks,
    read_lines,
    read_text,
    write_text_atomic,
)


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


# ---- reading ---------------------------------------------------------------------------------------------------


def test_read_text_regular_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("arch: sm_90\nname: é\n", encoding="utf-8")
    assert read_text(f) == "arch: sm_90\nname: é\n"


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_devices_refused_before_reading(dev):
    if not os.path.exists(dev):
        pytest.skip(f"{dev} missing")
    with pytest.raises(
        SpecError, match="character device; a spec is read from a regular file, a FIFO or stdin"
    ):
        read_text(dev)


def test_fifo_refused_without_blocking(tmp_path, monkeypatch):
    """A FIFO nobody writes to is refused after SMEMTILE_FIFO_WAIT seconds, never a hang (one with a writer
    is read: tests/test_hostile_round3.py)."""
    monkeypatch.setenv("SMEMTILE_FIFO_WAIT", "0.3")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = []

    def go():
        try:
            read_text(fifo)
        except SpecError as e:
            done.append(str(e))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(5)
    assert done and "FIFO" in done[0], "reading a FIFO blocked or was accepted"
    with pytest.raises(SpecError, match="FIFO"):
        list(read_blocks(fifo, what="CSV file"))


def test_folder_and_missing(tmp_path):
    with pytest.raises(SpecError, match="is a folder"):
        read_text(tmp_path)
    with pytest.raises(SpecError, match="no such spec"):
        read_text(tmp_path / "nope.yaml")
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(SpecError, match="parent of this path is a file"):
        read_text(f / "below.yaml")


def test_size_budget_named(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_bytes(b"#" * (SPEC_BUDGET + 1))
    with pytest.raises(SpecError, match=r"over the spec size budget of 1 MiB.*at most 1048576 bytes"):
        read_text(f)
    f.write_bytes(b"#" * SPEC_BUDGET)
    assert len(read_text(f)) == SPEC_BUDGET


@pytest.mark.parametrize(
    "data, where",
    [
        (b"arch: sm_90\nname: \xff\n", "byte 0xff at line 2"),
        (b"a\nb\nname: \xed\xa0\x80\n", "byte 0xed at line 3"),  # an encoded lone surrogate (U+D800)
        (b"\xc3", "byte 0xc3 at line 1"),  # cut in the middle of a character
    ],
)
def test_utf8_strict_names_the_line(tmp_path, data, where):
    f = tmp_path / "s.yaml"
    f.write_bytes(data)
    with pytest.raises(SpecError, match=f"not UTF-8 text: {where}"):
        read_text(f)


def test_streamed_lines_and_budget(tmp_path):
    f = tmp_path / "b.csv"
    f.write_bytes(b"".join(b"sm_90,%d,64,0,0\n" % i for i in range(100_000)))
    lines = list(read_lines(f))
    assert len(lines) == 100_000 and lines[-1] == (100_000, "sm_90,99999,64,0,0\n")
    g = tmp_path / "long.csv"
    g.write_bytes(b"sm_90,1,1,0,0\n" + b"9" * (3 << 20))
    with pytest.raises(SpecError, match="line 2 is longer than the line budget of 64 KiB"):
        list(read_blocks(g))
    h = tmp_path / "bad.csv"
    h.write_bytes(b"ok\n" * 400_000 + b"\xfe\n")  # the bad byte is in the second 1 MiB block
    with pytest.raises(SpecError, match="byte 0xfe at line 400001"):
        list(read_blocks(h))


def test_printable_escapes_control_characters():
    assert printable("a\x1b[31mb\n\u202ec") == "a\\x1b[31mb\\x0a\\u202ec"
    assert printable("plain name é") == "plain name é"
    assert printable("x\udcff") == "x\\udcff"


# ---- writing ---------------------------------------------------------------------------------------------------


def test_new_file_is_0644_under_umask_022(tmp_path):
    old = os.umask(0o022)
    try:
        p = write_text_atomic(tmp_path / "out.cu", "int x;\n")
    finally:
        os.umask(old)
    assert p.read_text() == "int x;\n" and mode(p) == 0o644
    assert [x.name for x in tmp_path.iterdir()] == ["out.cu"]  # no temporary file left


def test_existing_mode_kept(tmp_path):
    p = tmp_path / "out.cu"
    for m in (0o600, 0o644, 0o755):
        p.write_text("old")
        os.chmod(p, m)
        write_text_atomic(p, "new")
        assert p.read_text() == "new" and mode(p) == m


def test_refuses_the_input_by_any_name(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("arch: sm_90\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(spec)
    hard = tmp_path / "hard.yaml"
    os.link(spec, hard)
    for target in (spec, link, hard):
        with pytest.raises(SpecError, match="is the input .*refusing to overwrite it"):
            write_text_atomic(target, "oops", inputs=[spec])
    assert spec.read_text() == "arch: sm_90\n"


@pytest.mark.parametrize("dev", ["/dev/null", "/dev/full"])
def test_refuses_device_nodes(dev):
    if not os.path.exists(dev):
        pytest.skip(f"{dev} missing")
    with pytest.raises(SpecError, match="is a character device; refusing to replace it"):
        write_text_atomic(dev, "x")
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_refuses_fifo_and_folder(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="FIFO"):
        write_text_atomic(fifo, "x")
    with pytest.raises(SpecError, match="is a folder"):
        write_text_atomic(tmp_path, "x")


def test_planted_temporary_symlink_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    # every name the old writer used, and a spray of plausible ones, point at the victim
    for name in (".out.cu.tmp", "out.cu.tmp", ".out.cu.x.tmp"):
        (tmp_path / name).symlink_to(victim)
    write_text_atomic(tmp_path / "out.cu", "generated")
    assert victim.read_text() == "precious" and (tmp_path / "out.cu").read_text() == "generated"


def test_a_symlink_is_followed_and_kept(tmp_path):
    real = tmp_path / "real.cu"
    real.write_text("old")
    os.chmod(real, 0o640)
    link = tmp_path / "out.cu"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new" and mode(real) == 0o640


def test_symlinks_to_devices_or_nothing_are_refused(tmp_path):
    """`-o /dev/stdout` must never turn the /dev/stdout symlink into a regular file."""
    tty = tmp_path / "stdout"
    tty.symlink_to("/dev/null")
    with pytest.raises(SpecError, match="character device"):
        write_text_atomic(tty, "x")
    assert tty.is_symlink() and os.readlink(tty) == "/dev/null"
    dangling = tmp_path / "dangling.cu"
    dangling.symlink_to(tmp_path / "elsewhere" / "victim.cu")
    with pytest.raises(SpecError, match="symlink to a missing file"):
        write_text_atomic(dangling, "x")
    assert not (tmp_path / "elsewhere").exists()


def test_errors_are_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SpecError, match="parent of this path is a file"):
        write_text_atomic(f / "out.cu", "x")
    with pytest.raises(SpecError, match="its folder does not exist"):
        write_text_atomic(tmp_path / "no" / "out.cu", "x")
    with pytest.raises(SpecError, match="cannot write"):
        write_text_atomic("/proc/smemtile_test.cu", "x")
    if os.geteuid() != 0:  # root writes into a read-only folder anyway
        ro = tmp_path / "ro"
        ro.mkdir()
        os.chmod(ro, 0o555)
        with pytest.raises(SpecError, match="cannot write: permission denied"):
            write_text_atomic(ro / "out.cu", "x")


def test_make_parents(tmp_path):
    p = write_text_atomic(tmp_path / "a" / "b" / "out.cu", "x", make_parents=True)
    assert p.read_text() == "x"


def test_concurrent_writers_never_fail(tmp_path):
    target = tmp_path / "winner.yaml"
    errors = []

    def go(i):
        try:
            for _ in range(25):
                write_text_atomic(target, f"writer {i}\n" * 100)
        except Exception as e:  # pragma: no cover - the failure being tested
            errors.append(e)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = target.read_text()
    assert len(set(text.splitlines())) == 1  # one whole file from one writer, never a mix
    assert [x.name for x in tmp_path.iterdir()] == ["winner.yaml"]
