"""smemtile.cache: the tuning cache survives corrupt lines, kill -9, odd paths, a read-only HOME and two
processes sweeping at once (no entry is measured twice)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from smemtile.cache import ResultCache, default_cache_path, open_cache, valid_row
from smemtile.errors import SpecError

OK = {"status": "ok", "time_ms": 1.25, "value": 10.0, "unit": "tflops", "registers": 64}
SKIP = {"status": "skipped", "reason": "compile error: too much shared memory"}


def line(key, row) -> bytes:
    return (json.dumps({"key": key, "row": row}) + "\n").encode()


def test_put_get_roundtrip_and_reopen(tmp_path):
    path = tmp_path / "sub" / "tune.jsonl"
    c = ResultCache(path)
    assert c.get("a") is None
    c.put("a", OK)
    c.put("b", SKIP)
    c.put("a", {**OK, "time_ms": 0.5})  # the last line of a key wins
    again = ResultCache(path)
    assert again.get("a")["time_ms"] == 0.5 and again.get("b") == SKIP and again.skipped == 0
    assert path.read_bytes().count(b"\n") == 3


def test_memory_only_cache():
    c = ResultCache(None)
    c.put("k", OK)
    with c.claim("k") as hit:
        assert hit == OK


def test_corrupt_lines_skipped_and_counted(tmp_path):
    path = tmp_path / "tune.jsonl"
    path.write_bytes(
        line("good1", OK)
        + b"\xff\xfe not utf-8\n"
        + b"{not json\n"
        + b'["a", "list"]\n'
        + b'{"key": "nokey-row"}\n'
        + line("no-time", {"status": "ok", "value": 3.0, "unit": "gbps"})
        + line("row-is-list", [1, 2])
        + line("nan-time", {"status": "ok", "time_ms": float("nan"), "value": 1.0, "unit": "gbps"})
        + line("bad-status", {"status": "great"})
        + b"[" * 100_000
        + b"\n"  # deep nesting: RecursionError in the parser
        + b"\n"
        + line("good2", SKIP)
    )
    warnings = []
    c = open_cache(path, warn=warnings.append)
    assert c.get("good1") == OK and c.get("good2") == SKIP
    assert all(c.get(k) is None for k in ("no-time", "row-is-list", "nan-time", "bad-status"))
    assert c.skipped == 9
    assert warnings == [f"cache {path}: skipped 9 corrupt lines"]


def test_valid_row():
    assert valid_row(OK) and valid_row(SKIP)
    assert not valid_row({"status": "ok", "time_ms": 0, "value": 1.0, "unit": "gbps"})
    assert not valid_row({"status": "ok", "time_ms": True, "value": 1.0, "unit": "gbps"})
    assert not valid_row({"status": "skipped", "reason": ["x"]})


def test_torn_last_line_kept_apart(tmp_path):
    """kill -9 in the middle of a line: earlier lines stay, the torn one is skipped, the next line is whole."""
    path = tmp_path / "tune.jsonl"
    whole = line("done", OK)
    path.write_bytes(whole + line("torn", OK)[:25])
    c = ResultCache(path)
    assert c.get("done") == OK and c.skipped == 0  # a last line without its end may still be being written
    c.put("next", SKIP)
    assert path.read_bytes().startswith(whole) and path.read_bytes().endswith(b"\n" + line("next", SKIP))
    again = ResultCache(path)
    assert again.get("done") == OK and again.get("next") == SKIP and again.get("torn") is None
    assert again.skipped == 1


def test_kill_9_while_writing_loses_nothing_finished(tmp_path):
    path = tmp_path / "tune.jsonl"
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from smemtile.cache import ResultCache
        c = ResultCache(Path({str(path)!r}))
        row = {{"status": "ok", "time_ms": 1.0, "value": 1.0, "unit": "gbps", "pad": "x" * 3000}}
        i = 0
        while True:
            c.put(f"k{{i}}", row)
            i += 1
            if i == 20:
                print("go", flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"go"
    time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1].count(b"\n")
    c = ResultCache(path)
    assert complete >= 20 and len(c.rows) == complete and c.skipped == 0
    assert all(c.get(f"k{i}") is not None for i in range(complete))


def test_fifo_and_device_paths_refused_without_hanging(tmp_path):
    fifo = tmp_path / "tune.jsonl"
    os.mkfifo(fifo)
    out = []

    def go():
        try:
            ResultCache(fifo)
        except SpecError as e:
            out.append(str(e))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(5)
    assert out and "must be a regular file" in out[0]
    with pytest.raises(SpecError, match="must be a regular file"):
        ResultCache(Path("/dev/zero"))
    c = ResultCache(None)
    c.path = Path("/dev/null")
    with pytest.raises(SpecError, match="must be a regular file"):
        c.put("k", OK)


def test_read_only_home_falls_back_with_one_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("x")
    monkeypatch.setenv("SMEMTILE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    warnings = []
    c = open_cache(None, warn=warnings.append)
    assert default_cache_path() == blocker / "cache" / "tune.jsonl"
    assert c.path == tmp_path / "tmp" / f"smemtile-{os.getuid()}" / "tune.jsonl"
    assert len(warnings) == 1 and "cannot create its folder" in warnings[0] and str(c.path) in warnings[0]
    c.put("k", OK)
    assert ResultCache(c.path).get("k") == OK
    assert oct(os.stat(c.path.parent).st_mode & 0o777) == oct(0o700)


def test_explicit_unusable_cache_is_an_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    c = open_cache(f / "tune.jsonl")
    with pytest.raises(SpecError, match="cannot create the tuning cache's folder"):
        c.put("k", OK)


WORKER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from smemtile.cache import ResultCache
    cache = ResultCache(Path(sys.argv[1]))
    log = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    keys = [f"cfg{i}" for i in range(12)]
    if sys.argv[3] == "reverse":
        keys.reverse()
    for key in keys:
        with cache.claim(key) as hit:
            if hit is None:
                os.write(log, f"{key} {os.getpid()}\\n".encode())   # "measure" it
                time.sleep(0.05)
                cache.put(key, {"status": "ok", "time_ms": 1.0, "value": 2.0, "unit": "gbps"})
""")


def test_two_processes_never_measure_an_entry_twice(tmp_path):
    cache, log = tmp_path / "tune.jsonl", tmp_path / "measured.log"
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(cache), str(log), order])
        for order in ("forward", "reverse", "forward")
    ]
    for p in procs:
        assert p.wait(120) == 0
    measured = [ln.split()[0] for ln in log.read_text().splitlines()]
    assert sorted(measured) == sorted(f"cfg{i}" for i in range(12))  # each key exactly once
    assert len({ln.split()[1] for ln in log.read_text().splitlines()}) >= 2  # the work was shared
    assert len(ResultCache(cache).rows) == 12
