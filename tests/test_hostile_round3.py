"""Hostile input, round 3 (issue 34), one section per class of the issue, and the `tiles | generate -` seam of
issue 30: every file the tool writes goes through one guarded writer that knows the command's inputs and
outputs; names are plain or refused; no silent wrong answer; every YAML reader has the spec's budgets and every
wait a timeout; a terminated tune leaves no process and loses no result; budgets hold in total."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import ROOT, run_cli
from test_hostile_cli import cli, one_line


def proc(*args: str, cwd: Path = ROOT, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """``python -m smemtile ARGS`` in a subprocess (the real entry point, its streams and signals)."""
    return subprocess.run(
        [sys.executable, "-m", "smemtile", *args],
        cwd=cwd,
        capture_output=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        **kw,
    )


SGEMM = ROOT / "samples" / "sgemm_float4.yaml"
TRANSPOSE = ROOT / "samples" / "transpose_32x32.yaml"
CATALOGUE = ROOT / "bench" / "catalogue_heldout.yaml"
GEMM = ROOT / "samples" / "gemm_a_column.yaml"


def inproc(*args: str, input: bytes | None = None) -> SimpleNamespace:
    """The command in this process (fast); the same fields as ``proc``'s result."""
    r = cli(*args, input=input)
    return SimpleNamespace(returncode=r.exit_code, stderr=r.stderr, stdout=r.stdout)


def copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def bomb(levels: int = 9) -> str:
    """A YAML alias bomb of under 1 KB: 9 ** levels values once expanded."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# ---- 1. one guarded writer: never an input, another output, a device or a symlink's link ------------------------


def test_measure_out_never_replaces_its_catalogue_a_device_or_a_link(tmp_path):
    cat = copy(CATALOGUE, tmp_path / "cat.yaml")
    before = cat.read_bytes()
    r = proc("measure", str(cat), "--predict-only", "--out", str(cat))
    assert r.returncode == 2 and "is the input CATALOGUE" in one_line(r.stderr)
    link = tmp_path / "link.json"
    link.symlink_to(cat)
    r = proc("measure", str(cat), "--predict-only", "--out", str(link))
    assert r.returncode == 2 and "is the input CATALOGUE" in one_line(r.stderr)
    assert cat.read_bytes() == before and link.is_symlink()
    r = proc("measure", str(cat), "--predict-only", "--out", "/dev/null")
    assert r.returncode == 2 and "character device; refusing to replace it" in one_line(r.stderr)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_measure_out_is_written_0644_and_through_a_symlink(tmp_path):
    cat = copy(CATALOGUE, tmp_path / "cat.yaml")
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "out.json"
    link.symlink_to(real)
    old = os.umask(0o022)
    try:
        r = cli("measure", str(cat), "--predict-only", "--out", str(link))
        fresh = tmp_path / "fresh.json"
        r2 = cli("measure", str(cat), "--predict-only", "--out", str(fresh))
    finally:
        os.umask(old)
    assert r.exit_code == 0 and r2.exit_code == 0, r.output + r2.output
    assert link.is_symlink() and json.loads(real.read_text())["patterns"]  # the link kept, its file replaced
    assert mode(fresh) == 0o644  # 0666 & ~umask, as any open(); the old writer made 0600
    r = cli("measure", str(cat), "--predict-only", "--out", "-")  # `--out -`: the document on stdout
    assert r.exit_code == 0 and json.loads(r.stdout)["catalogue"] == str(cat) and not Path("-").exists()


@pytest.mark.parametrize(
    "extra, text",
    [
        (["--cache", "{spec}"], "--cache: is the input SPEC"),
        (["-o", "{spec}"], "-o: is the input SPEC"),
        (["--space", "{space}", "-o", "{space}"], "-o: is the input --space"),
        (["--space", "{space}", "--cache", "{space}"], "--cache: is the input --space"),
        (["--shapes", "{shapes}", "-o", "{shapes}"], "-o: is the input --shapes"),
        (["--cache", "{cache}", "-o", "{cache}"], "-o: is also the output of --cache"),
        (["--cache", "/dev/null"], "character device; refusing to replace it"),
    ],
)
def test_tune_outputs_are_never_its_inputs_or_each_other(tmp_path, extra, text):
    spec = copy(SGEMM, tmp_path / "s.yaml")
    space = tmp_path / "space.yaml"
    space.write_text("- {BM: 64, BN: 64, BK: 8, TM: 4, TN: 4}\n")
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("- {M: 1024, N: 1024, K: 1024}\n")
    cache = tmp_path / "c.jsonl"
    cache.write_text("")
    files = {p: p.read_bytes() for p in (spec, space, shapes, cache)}
    names = {"spec": spec, "space": space, "shapes": shapes, "cache": cache}
    args = [a.format(**names) for a in extra]
    r = proc("tune", str(spec), *args, "--dry-run")  # refused before any work, so before the dry run too
    assert r.returncode == 2 and text in one_line(r.stderr)
    assert all(p.read_bytes() == data for p, data in files.items())


def test_generate_output_option_dash_is_stdout_and_empty_is_refused(tmp_path):
    spec = copy(TRANSPOSE, tmp_path / "t.yaml")
    r = proc("generate", str(spec), "--no-compile", "-o", "", cwd=tmp_path)
    assert r.returncode == 2 and "empty file name" in one_line(r.stderr) and r.stdout == b""
    r = proc("generate", str(spec), "--no-compile", "-o", "-", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith(b"// Generated by smemtile")
    assert not (tmp_path / "-").exists()


def test_compile_cache_entries_are_written_0644(tmp_path, monkeypatch):
    from smemtile.gpu import nvrtc

    monkeypatch.setenv("SMEMTILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SMEMTILE_COMPILE_CACHE", "1")
    res = nvrtc.CompileResult(
        cubin=b"\x7fELF", arch="sm_90", lowered={"k": "_Z1k"}, log="", nvrtc_version="13.0"
    )
    old = os.umask(0o022)
    try:
        nvrtc._cache_put("k1", res)
    finally:
        os.umask(old)
    entry = tmp_path / "nvrtc" / "k1.json"
    assert mode(entry) == 0o644 and nvrtc._cache_get("k1").cubin == b"\x7fELF"


# ---- 2. names: plain or refused, escaped for every sink -------------------------------------------------------------


def _spec_with(
    tmp_path, *, access: str | None = None, name: str | None = None, description: str | None = None
):
    doc = yaml.safe_load(GEMM.read_text())
    if access is not None:
        doc["accesses"][0]["name"] = access
    if name is not None:
        doc["name"] = name
    if description is not None:
        doc["description"] = description
    p = tmp_path / "n.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return p


@pytest.mark.parametrize(
    "access",
    ["a\n#error injected", "a */ int x; /*", "a\u202ebc", "a\u200bb", "é", "[bold]x", "a b", "x" * 65, ""],
)
def test_access_names_that_are_not_plain_words_are_refused(tmp_path, access):
    r = inproc("analyze", str(_spec_with(tmp_path, access=access)))
    line = one_line(r.stderr)
    assert r.returncode == 2 and "is not a plain name" in line
    assert "\u202e" not in line and "\u200b" not in line and "\n" not in line.strip()


def test_plain_access_names_still_work(tmp_path):
    r = cli("analyze", str(_spec_with(tmp_path, access="a_col.v2-x")), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["accesses"][0]["name"] == "a_col.v2-x"


@pytest.mark.parametrize(
    "text", ["evil\u202eltxt", "zero\u200bwidth", "bell\x07", "two\nlines", "esc\x1b[2J"]
)
def test_spec_name_with_control_or_invisible_characters_is_refused(tmp_path, text):
    r = inproc("analyze", str(_spec_with(tmp_path, name=text)))
    line = one_line(r.stderr)
    assert r.returncode == 2 and "name:" in line and "control or invisible character" in line


def test_description_keeps_its_lines_but_not_bidi(tmp_path):
    assert (
        cli("analyze", str(_spec_with(tmp_path, description="line one\nline two\tend")), "--brief").exit_code
        == 0
    )
    r = inproc("analyze", str(_spec_with(tmp_path, description="abc\u2067def")))
    assert r.returncode == 2 and "description:" in one_line(r.stderr)


def test_tuned_winner_comment_escapes_a_newline_in_the_spec_file_name(tmp_path):
    from smemtile.api import _write_winner

    doc = yaml.safe_load(SGEMM.read_text())
    evil = "s.yaml\nname: injected\n#"
    best = {"params": {}, "label": "x\ny: 1", "time_ms": 1.0, "value": 2.0, "unit": "tflops"}
    target = tmp_path / "w.yaml"
    _write_winner({"summary": {"best": best}, "spec": evil, "family": "sgemm"}, doc, target)
    text = target.read_text()
    first, rest = text.split("\n", 1)
    assert first.startswith("# smemtile tune s.yaml\\x0aname: injected\\x0a#: winner x\\x0ay: 1")
    assert "injected" not in rest and yaml.safe_load(text).get("name") != "injected"


# ---- 3. no silent wrong answer ------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89"])
def test_clusters_on_an_arch_without_them_are_refused(arch):
    r = cli("occupancy", "--arch", arch, "--threads", "256", "--regs", "64", "--cluster", "2")
    assert r.exit_code == 2 and f"clusters need sm_90 or later; the target is {arch}" in one_line(r.stderr)
    assert (
        cli("occupancy", "--arch", arch, "--threads", "256", "--regs", "64", "--cluster", "1").exit_code == 0
    )
    r = cli("occupancy", "--arch", "sm_90", "--threads", "256", "--regs", "64", "--cluster", "2", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["clusters"]["cluster"] == 2


def test_verify_compile_only_without_nvrtc_exits_3(monkeypatch):
    from smemtile.errors import NoDevice
    from smemtile.gpu import nvrtc

    def missing():
        raise NoDevice("NVRTC is unavailable (libnvrtc.so.13: cannot open shared object file)")

    monkeypatch.setattr(nvrtc, "_nvrtc", missing)
    for spec in (TRANSPOSE, GEMM):  # a kernel spec and an analysis-only spec (microkernels)
        r = cli("verify", str(spec), "--compile-only")
        assert r.exit_code == 3 and "NVRTC is unavailable" in one_line(r.stderr), r.output

    def broken():
        raise RuntimeError("Failed to dlopen libnvrtc.so.13")

    monkeypatch.setattr(nvrtc, "_nvrtc", broken)
    r = cli("verify", str(TRANSPOSE), "--compile-only", "--json")
    assert r.exit_code == 3 and "NVRTC cannot be loaded" in one_line(r.stderr) and r.stdout == ""


@pytest.mark.parametrize(
    "value, text",
    [
        ("010", "010 is a YAML 1.1 octal number (8); write 8, or 10"),
        ("0o10", None),
        ("1:30", "base-60 number"),
    ],
)
def test_yaml_1_1_numbers_that_read_as_something_else_are_refused(tmp_path, value, text):
    spec = tmp_path / "o.yaml"
    spec.write_text(GEMM.read_text().replace("BK: 32", f"BK: {value}"))
    r = inproc("analyze", str(spec), "--brief")
    assert r.returncode == 2
    line = one_line(r.stderr)
    if text is not None:
        assert text in line and "line " in line
    tiles = tmp_path / "shapes.yaml"
    tiles.write_text(f"- {{M: 4096, N: 4096, K: {value}}}\n")
    r = inproc("tune", str(SGEMM), "--shapes", str(tiles), "--dry-run")
    assert r.returncode == 2 and (text is None or text in one_line(r.stderr))


def test_hex_and_plain_numbers_still_read(tmp_path):
    spec = tmp_path / "h.yaml"
    spec.write_text(GEMM.read_text().replace("BK: 32", "BK: 0x20"))
    r = cli("analyze", str(spec), "--json")
    assert r.exit_code == 0 and "BK=32" in cli("analyze", str(spec), "--brief").stdout


@pytest.mark.parametrize("reader", ["catalogue", "space", "shapes", "spec_stdin"])
def test_duplicate_keys_are_refused_in_every_yaml_reader(tmp_path, reader):
    if reader == "catalogue":
        f = tmp_path / "c.yaml"
        f.write_text(
            "arch: sm_90\npatterns:\n  - {name: a, op: load, width: 4, address: 'lane * 4', width: 8}\n"
        )
        r = inproc("measure", str(f), "--predict-only")
    elif reader == "space":
        f = tmp_path / "space.yaml"
        f.write_text("- {BM: 64, BN: 64, BM: 128}\n")
        r = inproc("tune", str(SGEMM), "--space", str(f), "--dry-run")
    elif reader == "shapes":
        f = tmp_path / "shapes.yaml"
        f.write_text("- {M: 1024, N: 1024, K: 1024, M: 2048}\n")
        r = inproc("tune", str(SGEMM), "--shapes", str(f), "--dry-run")
    else:
        r = inproc("generate", "-", "--no-compile", input=TRANSPOSE.read_bytes() + b"arch: sm_80\n")
    assert r.returncode == 2 and "given twice" in one_line(r.stderr)


# ---- 4. no hangs: every YAML reader has the budgets, every wait a timeout ---------------------------------------


@pytest.mark.parametrize(
    "reader", ["analyze", "generate_stdin", "space", "shapes", "catalogue", "tune_stdin"]
)
def test_alias_bomb_is_refused_in_seconds_by_every_reader(tmp_path, reader):
    text = "arch: sm_90\n" + bomb()
    assert len(text) < 1024
    f = tmp_path / "bomb.yaml"
    f.write_text(text)
    args, stdin = {
        "analyze": (["analyze", str(f)], None),
        "generate_stdin": (["generate", "-", "--no-compile"], text.encode()),
        "space": (["tune", str(SGEMM), "--space", str(f), "--dry-run"], None),
        "shapes": (["tune", str(SGEMM), "--shapes", str(f), "--dry-run"], None),
        "catalogue": (["measure", str(f), "--predict-only"], None),
        "tune_stdin": (["tune", "-", "--dry-run"], text.encode()),
    }[reader]
    t0 = time.monotonic()
    r = inproc(*args, input=stdin) if stdin is not None else inproc(*args)
    assert time.monotonic() - t0 < 15
    assert r.returncode == 2 and "YAML aliases (*name) expand to over" in one_line(r.stderr)


def test_self_referencing_alias_is_refused(tmp_path):
    f = tmp_path / "cyc.yaml"
    f.write_text("arch: sm_90\nx: &a [1, *a]\n")
    r = inproc("analyze", str(f))
    assert r.returncode == 2 and "alias refers to a list or mapping that contains it" in one_line(r.stderr)


def test_shared_aliases_within_budget_still_load():
    from smemtile.model.spec import load_yaml

    doc = load_yaml("a: &x {p: 1}\nb: *x\nc: [*x, *x]\n", "t")
    assert doc["b"] == {"p": 1} and doc["c"] == [{"p": 1}, {"p": 1}]


def test_a_fifo_in_the_compile_cache_is_skipped_not_opened(tmp_path, monkeypatch):
    from smemtile.gpu import nvrtc

    monkeypatch.setenv("SMEMTILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SMEMTILE_COMPILE_CACHE", "1")
    (tmp_path / "nvrtc").mkdir()
    os.mkfifo(tmp_path / "nvrtc" / "k2.json")
    got = []
    t = threading.Thread(target=lambda: got.append(nvrtc._cache_get("k2")), daemon=True)
    t.start()
    t.join(5)
    assert got == [None], "reading a FIFO in the compile cache blocked"
    res = nvrtc.CompileResult(cubin=b"x", arch="sm_90", lowered={}, log="", nvrtc_version="13.0")
    nvrtc._cache_put("k2", res)  # left alone, no hang either
    assert stat.S_ISFIFO(os.lstat(tmp_path / "nvrtc" / "k2.json").st_mode)


def test_a_stuck_lock_on_a_tune_cache_entry_times_out_with_one_warning(tmp_path, monkeypatch):
    from smemtile.cache import ResultCache

    monkeypatch.setenv("SMEMTILE_LOCK_TIMEOUT", "0.5")
    warnings: list[str] = []
    cache = ResultCache(tmp_path / "c.jsonl", warn=warnings.append)
    with cache.claim("k"):  # a first claim creates the lock file
        pass
    (lock,) = (tmp_path / "c.jsonl.locks").iterdir()
    stuck = os.open(lock, os.O_RDWR)
    fcntl.flock(stuck, fcntl.LOCK_EX)  # another open file description: a stuck tune holding the entry
    try:
        t0 = time.monotonic()
        with cache.claim("k") as hit:
            waited = time.monotonic() - t0
            assert hit is None
            cache.put("k", {"status": "skipped", "reason": "measured here"})
    finally:
        os.close(stuck)
    assert 0.4 < waited < 5
    assert len(warnings) == 1 and "locked by another process for 0.5 s" in warnings[0]
    assert ResultCache(tmp_path / "c.jsonl").get("k")["reason"] == "measured here"


# ---- 5. a terminated tune: its whole process tree ends, results kept, one line ------------------------------------


def _descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_terminated_tune_ends_its_process_tree_and_keeps_its_results(tmp_path, how):
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc")
    shapes = tmp_path / "shapes.yaml"
    # 24 problems (192 candidates: the tune is still running when it is stopped, also on a fast machine), each quick to plan (large grids:
    # few split-K candidates to rank), so the workers start soon
    shapes.write_text(yaml.safe_dump([{"M": 4096 + 256 * i, "N": 4096, "K": 1024} for i in range(24)]))
    cache = tmp_path / "c.jsonl"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "smemtile",
            "tune",
            str(SGEMM),
            "--shapes",
            str(shapes),
            "--simulate",
            "--top",
            "8",
            "--compile-workers",
            "2",
            "--cache",
            str(cache),
            "-o",
            str(tmp_path / "out"),
            "--json",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # Ctrl-C's default action in the child even where this test runs with SIGINT ignored (a shell's
        # background job): Python then turns it into KeyboardInterrupt, as in a user's terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline, seen = time.monotonic() + 150, set()
        while time.monotonic() < deadline and p.poll() is None:
            seen |= _descendants(p.pid)
            if cache.exists() and cache.read_bytes().count(b"\n") >= 2 and len(seen) >= 2:
                break
            time.sleep(0.05)
        assert p.poll() is None, (
            "tune ended before it could be interrupted: " + p.stderr.read().decode()[-800:]
        )
        seen |= _descendants(p.pid)
        lines_before = cache.read_bytes().count(b"\n")
        if how == "SIGTERM":
            p.send_signal(signal.SIGTERM)  # `kill PID`: the parent only
        else:
            os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the whole foreground process group
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == (143 if how == "SIGTERM" else 130), err.decode()[-2000:]
    text = err.decode()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    lines = [ln for ln in text.splitlines() if ln.startswith("smemtile:")]
    assert len(lines) == 1 and ("terminated" in lines[0] or "interrupted" in lines[0]), text[-2000:]
    assert str(cache) in lines[0]
    t0 = time.monotonic()
    while any(_alive(c) for c in seen) and time.monotonic() - t0 < 15:
        time.sleep(0.05)
    assert not [c for c in seen if _alive(c)], "worker processes outlived the terminated tune"
    rows = [json.loads(ln) for ln in cache.read_text().splitlines() if ln.strip()]
    assert len(rows) >= lines_before and all(r["row"]["status"] in ("ok", "skipped") for r in rows)


# ---- 6. a bad dask:// address fails in seconds with one line ------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(banner: bytes | None):
    """A TCP server on 127.0.0.1 that sends ``banner`` (or nothing) to its first client and holds it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    held = []

    def serve():
        try:
            c, _ = srv.accept()
            held.append(c)
            if banner:
                c.sendall(banner)
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


@pytest.mark.parametrize(
    "kind, text",
    [
        ("refused", "connection refused"),
        ("malformed", "is not an address: expected dask://HOST:PORT"),
        ("bad_port", "is not an address"),
        ("ssh", "answered 'SSH-2.0-OpenSSH_9.6', not a Dask scheduler"),
        ("silent", "accepted the connection but sent nothing within"),
    ],
)
def test_bad_dask_addresses_fail_in_seconds_with_one_line(kind, text, monkeypatch, tmp_path):
    from smemtile.pipeline import executors

    monkeypatch.setattr(executors, "CONNECT_TIMEOUT", 1.0)
    srv = None
    if kind == "refused":
        address = f"dask://127.0.0.1:{_free_port()}"
    elif kind == "malformed":
        address = "dask://127.0.0.1"
    elif kind == "bad_port":
        address = "dask://127.0.0.1:99999"
    else:
        srv, port = _server(b"SSH-2.0-OpenSSH_9.6\r\n" if kind == "ssh" else None)
        address = f"dask://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        r = cli("tune", str(SGEMM), "--executor", address, "--simulate", "--cache", str(tmp_path / "c.jsonl"))
        took = time.monotonic() - t0
    finally:
        if srv is not None:
            srv.close()
    pytest.importorskip("distributed")
    line = one_line(r.stderr)
    assert r.exit_code == 2 and text in line and "--executor" in line, line
    assert took < 10
    if kind in ("refused", "ssh", "silent"):
        assert address.split("://")[1] in line


# ---- 7. budgets in total ------------------------------------------------------------------------------------------


def _constants_spec(tmp_path, n: int) -> Path:
    lines = ["arch: sm_90", "constants:", *(f"  C{i}: {i} + 1" for i in range(n))]
    lines += [
        "buffers: [{name: S, dtype: u8, shape: [1024]}]",
        "accesses: [{name: a, buffer: S, op: load, width: 4, address: 'lane * 4'}]",
    ]
    f = tmp_path / f"c{n}.yaml"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_constants_cost_linear_time_and_their_count_is_bounded(tmp_path):
    from smemtile.model.spec import MAX_CONSTANTS, load_spec

    t0 = time.monotonic()
    spec = load_spec(_constants_spec(tmp_path, MAX_CONSTANTS))
    assert spec.constants["C4095"] == 4096
    assert time.monotonic() - t0 < 5  # quadratic (set(env) per constant) took ~10x this at 4096
    r = cli("analyze", str(_constants_spec(tmp_path, MAX_CONSTANTS + 1)))
    assert r.exit_code == 2 and f"at most {MAX_CONSTANTS}" in one_line(r.stderr)


def test_unknown_name_message_stays_one_short_line(tmp_path):
    f = _constants_spec(tmp_path, 3000)
    f.write_text(f.read_text().replace("'lane * 4'", "'lane * NOPE'"))
    line = one_line(cli("analyze", str(f)).stderr)
    assert "unknown name 'NOPE'" in line and "more)" in line and len(line) < 600


def test_shapes_count_is_bounded(tmp_path):
    from smemtile.pipeline.tune import MAX_SHAPES

    f = tmp_path / "shapes.yaml"
    f.write_text(yaml.safe_dump([{"M": 64 * (i + 1)} for i in range(MAX_SHAPES + 1)]))
    r = cli("tune", str(SGEMM), "--shapes", str(f), "--dry-run")
    assert r.exit_code == 2 and f"{MAX_SHAPES + 1} shapes; at most {MAX_SHAPES}" in one_line(r.stderr)


def test_batch_rows_are_bounded_with_nothing_on_stdout(tmp_path, monkeypatch):
    from smemtile.cli import occupancy as occ

    monkeypatch.setattr(occ, "MAX_BATCH_ROWS", 10)
    monkeypatch.setattr(occ, "CHUNK_ROWS", 4)
    f = tmp_path / "b.csv"
    f.write_text("sm_90,256,64,0,0\n" * 11)
    r = cli("occupancy", "--batch", str(f), "--json")
    assert r.exit_code == 2 and r.stdout == "" and "at most 10" in one_line(r.stderr)
    f.write_text("sm_90,256,64,0,0\n" * 10)
    assert len(json.loads(cli("occupancy", "--batch", str(f), "--json").stdout)) == 10


# ---- 8. corrupt caches: skipped with one warning and rebuilt ------------------------------------------------------


@pytest.mark.parametrize("damage", ["folder", "fifo", "locks_file"])
def test_a_broken_default_tune_cache_falls_back_with_one_warning(tmp_path, monkeypatch, damage):
    from smemtile.cache import open_cache

    monkeypatch.setenv("SMEMTILE_CACHE_DIR", str(tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    home = tmp_path / "home"
    home.mkdir()
    if damage == "folder":
        (home / "tune.jsonl").mkdir()
    elif damage == "fifo":
        os.mkfifo(home / "tune.jsonl")
    else:
        (home / "tune.jsonl.locks").write_text("not a folder")
    said: list[str] = []
    cache = open_cache(None, warn=said.append)
    assert len(said) == 1 and "using" in said[0] and str(cache.path).startswith(str(tmp_path / "tmp"))
    cache.put("k", {"status": "skipped", "reason": "r"})
    with cache.claim("k") as hit:
        assert hit["reason"] == "r"


def test_torn_binary_and_empty_cache_lines_are_skipped_with_one_warning(tmp_path):
    from smemtile.cache import open_cache

    f = tmp_path / "c.jsonl"
    good = json.dumps({"key": "a", "row": {"status": "skipped", "reason": "x"}})
    f.write_bytes(b"\x00\xff\xfe\n\n" + good.encode() + b'\n{"key": "b", "ro\n')
    said: list[str] = []
    cache = open_cache(f, warn=said.append)
    assert said == [f"cache {f}: skipped 2 corrupt lines"] and cache.get("a")["reason"] == "x"
    cache.put("c", {"status": "skipped", "reason": "y"})
    assert open_cache(f).get("c")["reason"] == "y"


@pytest.mark.parametrize("content", [b"", b'{"cubin": ', b"\x00\x01\x02\xff", b"[]", b'{"cubin": 1}'])
def test_a_corrupt_compile_cache_entry_is_a_miss_and_is_rewritten(tmp_path, monkeypatch, content):
    from smemtile.gpu import nvrtc

    monkeypatch.setenv("SMEMTILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SMEMTILE_COMPILE_CACHE", "1")
    (tmp_path / "nvrtc").mkdir()
    (tmp_path / "nvrtc" / "k3.json").write_bytes(content)
    assert nvrtc._cache_get("k3") is None
    nvrtc._cache_put(
        "k3", nvrtc.CompileResult(cubin=b"ok", arch="sm_90", lowered={}, log="", nvrtc_version="1")
    )
    assert nvrtc._cache_get("k3").cubin == b"ok"


# ---- 9. smaller inconsistencies -------------------------------------------------------------------------------------


def test_raw_addresses_beyond_the_addressable_range_exit_2(tmp_path):
    doc = {
        "arch": "sm_90",
        "buffers": [{"name": "S", "dtype": "u8", "shape": [65536]}],
        "accesses": [
            {
                "name": "a",
                "buffer": "S",
                "op": "load",
                "width": 4,
                "addresses": [10**23] + [4 * i for i in range(1, 32)],
            }
        ],
    }
    f = tmp_path / "raw.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = inproc("analyze", str(f))
    assert (
        r.returncode == 2
        and "lane 0 byte offset 100000000000000000000000 is outside 0..65535" in one_line(r.stderr)
    )


def test_batch_header_naming_a_column_twice_is_refused():
    r = cli(
        "occupancy",
        "--batch",
        "-",
        input="arch,threads,regs,static_smem,dynamic_smem,regs\nsm_90,256,64,0,0,8\n",
    )
    assert r.exit_code == 2 and "column 'regs' named twice" in one_line(r.stderr) and r.stdout == ""


def test_batch_reads_a_fifo_and_process_substitution(tmp_path):
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "w") as w:
            w.write("arch,threads,regs,static_smem,dynamic_smem\nsm_90,256,64,0,0\nsm_80,128,32,0,0\n")

    t = threading.Thread(target=write, daemon=True)
    t.start()
    r = proc("occupancy", "--batch", str(fifo), "--json")
    t.join(5)
    assert r.returncode == 0, r.stderr
    assert [d["arch"] for d in json.loads(r.stdout)] == ["sm_90", "sm_80"]
    bash = "/bin/bash"
    if os.path.exists(bash):
        cmd = f"{sys.executable} -m smemtile occupancy --json --batch <(printf 'sm_90,256,64,0,0\\n')"
        r = subprocess.run([bash, "-c", cmd], cwd=ROOT, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)[0]["active_blocks"] == 4


def test_tune_dash_reads_stdin_once():
    r = inproc("tune", "-", "--dry-run", "--json", input=SGEMM.read_bytes())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"] == "-" and json.loads(r.stdout)["candidates"]
    r = inproc("tune", "-", "--space", "-", "--dry-run", input=SGEMM.read_bytes())
    assert r.returncode == 2 and "stdin (-) can be read once" in one_line(r.stderr)


def test_a_nul_byte_in_yaml_gives_its_position(tmp_path):
    f = tmp_path / "nul.yaml"
    f.write_bytes(b"arch: sm_90\nname: ab\x00c\n")
    r = inproc("analyze", str(f))
    assert r.returncode == 2 and "at line 2, column 9: character \\x00 is not allowed" in one_line(r.stderr)
    r = inproc("generate", "-", input=b"arch: sm_90\n\x00")
    assert r.returncode == 2 and "<stdin>: malformed YAML at line 2, column 1" in one_line(r.stderr)


# ---- issue 30, item 3: tiles ... --format yaml | smemtile generate - ------------------------------------------------


def test_a_stream_of_specs_into_generate_takes_the_first_and_says_so(tmp_path):
    # the stream is made in this process (the same bytes as `smemtile tiles ...` prints); the processes read it
    stream = run_cli("tiles", "4096", "4096", "4096", "--top", "3", "--format", "yaml").stdout.encode()
    assert stream.count(b"\n---") + stream.startswith(b"---") >= 2
    out = tmp_path / "k.cu"
    r = proc("generate", "-", "--no-compile", "-o", str(out), input=stream)
    assert r.returncode == 0, r.stderr
    assert (
        "smemtile: note: <stdin> holds 3 specs; generating the first (smemtile tiles --top 1 gives one)"
        in (r.stderr.decode())
    )
    first = next(d for d in yaml.safe_load_all(stream) if d)
    one = proc("generate", "-", "--no-compile", input=yaml.safe_dump(first).encode())
    assert one.returncode == 0 and b"holds" not in one.stderr
    assert out.read_bytes().split(b"\n", 1)[1] == one.stdout.split(b"\n", 1)[1]  # line 1 names the origin
    r = proc("analyze", "-", input=stream)  # elsewhere a stream is refused with one line naming --top 1
    assert (
        r.returncode == 2
        and "holds 3 YAML documents" in one_line(r.stderr)
        and "--top 1" in one_line(r.stderr)
    )


def test_the_documented_limits_are_the_enforced_constants():
    from smemtile import cache, fileio
    from smemtile.cli import occupancy as occ
    from smemtile.gpu import nvrtc
    from smemtile.model import spec
    from smemtile.pipeline import executors, tune

    text = (ROOT / "docs" / "spec.md").read_text()
    budgets = text[text.index("## Budgets") : text.index("## Errors")]
    for needle in (
        f"| `occupancy --batch` rows in all | {occ.MAX_BATCH_ROWS:,} ",
        f"| YAML values once aliases expand | {spec.MAX_YAML_VALUES:,} ",
        f"| `tile:` and `constants:` names together | {spec.MAX_CONSTANTS:,} ",
        f"below 2**{spec.ADDRESS_LIMIT.bit_length() - 1} in magnitude",
        f"| `tune --shapes` entries | {tune.MAX_SHAPES} ",
        f"first byte | {fileio.FIFO_WAIT:g} s (`SMEMTILE_FIFO_WAIT`)",
        f"cache entry lock | {cache.LOCK_TIMEOUT:g} s (`SMEMTILE_LOCK_TIMEOUT`)",
        f"handshake | {executors.CONNECT_TIMEOUT:g} s each",
        f"| NVRTC compile cache entry | {nvrtc.CACHE_ENTRY_BUDGET >> 20} MiB ({nvrtc.CACHE_ENTRY_BUDGET} bytes)",
    ):
        assert needle in budgets, needle
