"""Hostile input and hostile environments at the command line: names are data, every failure is one line
and exit 1 or 2 (a traceback only with --debug), nothing is overwritten that must not be, and nothing hangs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smemtile.cli import main

SAMPLE = ROOT / "samples" / "gemm_a_column.yaml"
# markup that rich or a browser would act on, in the free-text spec name (access names are plain words, and
# control or invisible characters are refused in every name: tests/test_hostile_round3.py)
EVIL = {
    "spec": "[link=javascript:x]c[/link] [/bold]<script>alert(1)</script>",
    "fill": "a_fill",
    "read": "a_read",
}


def cli(*args: str, input: str | bytes | None = None, env: dict | None = None):
    return CliRunner().invoke(main, list(args), input=input, env=env)


def proc(*args: str, **kw) -> subprocess.CompletedProcess:
    """``python -m smemtile ARGS`` in a subprocess (the real entry point, its streams and signals)."""
    env = {**os.environ, **kw.pop("env", {})}
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(
        [sys.executable, "-m", "smemtile", *args],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        env=env,
        timeout=120,
        **kw,
    )


def one_line(stderr: str | bytes) -> str:
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smemtile: error:"), text
    assert "Traceback" not in text
    return lines[0]


@pytest.fixture
def evil_spec(tmp_path):
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["name"] = EVIL["spec"]
    doc["accesses"][0]["name"] = EVIL["fill"]
    doc["accesses"][1]["name"] = EVIL["read"]
    path = tmp_path / "evil.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# ---- names are data ------------------------------------------------------------------------------------------------


def test_names_are_never_markup_or_escape_sequences(evil_spec, tmp_path):
    html = tmp_path / "r.html"
    r = cli("analyze", str(evil_spec), "--export", str(html))
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert EVIL["spec"] in r.stdout  # shown literally
    page = html.read_text()
    # the report page links only its own sections (#id) and has no script at all
    assert not re.findall(r'href="(?!#)', page) and "<script" not in page and "&lt;script&gt;" in page
    assert "\x1b" not in page


def test_names_in_json_stay_exact(evil_spec):
    r = cli("analyze", str(evil_spec), "--json")
    assert r.exit_code == 0
    names = [a["name"] for a in json.loads(r.stdout)["accesses"]]
    assert names == [EVIL["fill"], EVIL["read"]]
    assert json.dumps(EVIL["spec"]) in r.stdout  # data is data: JSON keeps it exactly (escaped by JSON)


def test_error_line_escapes_control_characters(tmp_path):
    bad = tmp_path / "no\x1b[31mpe.yaml"
    r = proc("analyze", str(bad))
    assert r.returncode == 2 and b"\x1b" not in r.stderr and b"\\x1b[31m" in r.stderr
    one_line(r.stderr)


# ---- one line, the right exit code, --debug for the traceback -----------------------------------------------------


class _Boom:
    def __init__(self, exc):
        self.exc = exc

    def values(self):
        raise self.exc


@pytest.mark.parametrize(
    "exc, code, text",
    [
        (RuntimeError("boom"), 1, "internal error: RuntimeError: boom (run with --debug"),
        (RecursionError("maximum recursion depth exceeded"), 2, "nested too deeply"),
        (MemoryError(), 2, "more memory than this machine has"),
        (OSError(5, "Input/output error"), 1, "input/output error"),
        (PermissionError(13, "Permission denied", "/x/y.yaml"), 2, "/x/y.yaml: permission denied"),
    ],
)
def test_unexpected_errors_are_one_line(monkeypatch, exc, code, text):
    import smemtile.model.arch as arch

    monkeypatch.setattr(arch, "ARCHS", _Boom(exc))
    r = cli("archs")
    assert r.exit_code == code and not isinstance(r.exception, type(exc))
    assert text in one_line(r.stderr)
    d = cli("--debug", "archs")
    assert d.exit_code == code and "Traceback (most recent call last)" in d.stderr and text in d.stderr
    e = cli("archs", env={"SMEMTILE_DEBUG": "1"})
    assert "Traceback" in e.stderr
    assert "Traceback" not in cli("archs", env={"SMEMTILE_DEBUG": "0"}).stderr


@pytest.mark.parametrize(
    "args, text",
    [
        (["occupancy", "--foo"], "No such option '--foo'. (see smemtile occupancy --help)"),
        (["--foo"], "No such option '--foo'. (see smemtile --help)"),
        (["analyse"], "No such command 'analyse'"),
        (["tune", "x.yaml", "--device", "-1"], "Invalid value for '--device'"),
    ],
)
def test_usage_errors_are_one_line(args, text):
    r = cli(*args)
    assert r.exit_code == 2 and text in one_line(r.stderr)


def test_stdout_full_or_closed_is_one_line_exit_1():
    for args in (["archs"], ["archs", "--json"]):
        with open("/dev/full", "w") as full:
            r = proc(*args, stdout=full)
        assert r.returncode == 1 and "no space left on device" in one_line(r.stderr)
        r = subprocess.run(
            [sys.executable, "-m", "smemtile", *args],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            timeout=60,
            preexec_fn=lambda: os.close(1),
        )
        assert r.returncode == 1 and "stdout is closed" in one_line(r.stderr)


def test_ascii_output_encoding_still_prints():
    r = proc(
        "occupancy", "--arch", "sm_90", "--threads", "256", "--regs", "64", env={"PYTHONIOENCODING": "ascii"}
    )
    assert r.returncode == 0 and r.stderr == b"" and b"4 blocks/SM" in r.stdout
    r.stdout.decode("ascii")


def test_non_utf8_and_odd_spec_files(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(SAMPLE.read_bytes().replace(b"fp32 GEMM", b"fp32 G\xc9MM"))
    r = proc("analyze", str(bad))
    assert r.returncode == 2 and "utf-8" in one_line(r.stderr).lower()
    deep = tmp_path / "deep.yaml"
    deep.write_text("arch: sm_90\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    r = proc("analyze", str(deep))
    assert r.returncode == 2
    one_line(r.stderr)


# ---- files: never overwrite the input or a device, never hang on a FIFO or /dev/zero --------------------------------


def test_generate_refuses_to_overwrite_its_spec_or_a_device(tmp_path):
    spec = tmp_path / "t.yaml"
    spec.write_bytes((ROOT / "samples" / "transpose_32x32.yaml").read_bytes())
    before = spec.read_bytes()
    r = proc("generate", str(spec), "-o", str(spec), "--no-compile")
    assert r.returncode == 2 and "refusing to overwrite it" in one_line(r.stderr)
    assert spec.read_bytes() == before
    r = proc("generate", str(spec), "-o", "/dev/null", "--no-compile")
    assert r.returncode == 2 and "character device" in one_line(r.stderr)
    below = proc("generate", str(spec), "-o", str(spec / "k.cu"), "--no-compile")
    assert below.returncode == 2 and "is a file, not a folder" in one_line(below.stderr)


def test_batch_from_devices_and_fifos_refused_at_once(tmp_path):
    for dev in ("/dev/zero", "/dev/urandom"):
        r = proc("occupancy", "--batch", dev)
        assert r.returncode == 2 and "character device" in one_line(r.stderr)
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    # no writer: an open without O_NONBLOCK would block forever; a FIFO is read, but nobody writing is refused
    r = proc("occupancy", "--batch", str(fifo), env={"SMEMTILE_FIFO_WAIT": "0.5"})
    assert r.returncode == 2 and "FIFO (named pipe) that nothing wrote to within 0.5 s" in one_line(r.stderr)
    r = proc("occupancy", "--batch", "-", stdin=open("/dev/zero", "rb"))  # stdin is allowed, but bounded
    assert r.returncode == 2 and "line budget" in one_line(r.stderr)


def test_tune_reads_regular_files_only(tmp_path):
    r = proc("tune", "/dev/zero", "--dry-run")
    assert r.returncode == 2
    one_line(r.stderr)
    r = proc("tune", str(ROOT / "samples" / "sgemm_float4.yaml"), "--space", "/dev/urandom", "--dry-run")
    assert r.returncode == 2
    one_line(r.stderr)


def test_batch_streams_a_large_file_in_bounded_memory(tmp_path):
    rows = 200_000
    f = tmp_path / "big.csv"
    with open(f, "w") as out:
        out.write("arch,threads,regs,static_smem,dynamic_smem,carveout,opt_in\n")
        for i in range(rows):
            out.write(
                f"sm_{(70, 80, 86, 90)[i % 4]},{32 * (1 + i % 32)},{i % 256},0,{(i % 7) * 8192},,{i % 2}\n"
            )
    # the peak RSS of this process image: /proc's VmHWM, which exec resets (getrusage's ru_maxrss keeps the
    # forked parent's, a pytest worker of a few hundred MB, across the exec)
    code = (
        "import resource, runpy, sys; sys.argv = ['smemtile', 'occupancy', '--batch', sys.argv[1], '--json']\n"
        "try:\n    runpy.run_module('smemtile', run_name='__main__')\nfinally:\n"
        "    try:\n        hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]\n"
        "        print(int(hwm.split()[1]), file=sys.stderr)\n"
        "    except (OSError, IndexError):\n"
        "        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(f)], cwd=ROOT, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert out.count(b"\n") == rows + 2 and out.startswith(b"[\n{") and out.endswith(b"}\n]\n")
    first, last = json.loads(out.split(b"\n")[1].rstrip(b",")), json.loads(out.split(b"\n")[-3])
    assert (first["arch"], first["threads"], last["regs"]) == ("sm_70", 32, (rows - 1) % 256)
    peak_kb = int(r.stderr.decode().strip().splitlines()[-1])
    assert peak_kb < 400_000, f"{peak_kb} KB peak for {rows} rows"  # the whole document would be ~2x this


def test_batch_error_anywhere_prints_nothing_on_stdout(tmp_path):
    from smemtile.cli import occupancy as occ

    f = tmp_path / "b.csv"
    good = "sm_90,256,64,0,0\n"
    f.write_text(good * (occ.CHUNK_ROWS + 10) + "sm_90,256,999,0,0\n")
    r = cli("occupancy", "--batch", str(f), "--json")
    assert r.exit_code == 2 and r.stdout == ""
    assert f":{occ.CHUNK_ROWS + 11}: regs: must be at most 255" in one_line(r.stderr)


# ---- fuzz ----------------------------------------------------------------------------------------------------------

CELL = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        [
            "",
            " ",
            "48K",
            "48KiB",
            "1M",
            "-1K",
            "1e3",
            "0x10",
            "nan",
            "sm_90",
            "sm_61",
            "auto",
            "%",
            "50%",
            "yes",
            "no",
            "true",
            "#",
            "\x00",
            "\x1b[2J",
            "[/bold]",
            "é",
            "\ud800",
        ]
    ),
    st.text(max_size=8),
)
ROW = st.lists(CELL, min_size=0, max_size=9)


def _csv_line(cells: list[str]) -> str:
    return ",".join(c.replace("\n", " ").replace("\r", " ") for c in cells)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(ROW, min_size=0, max_size=6), header=st.booleans(), as_json=st.booleans())
def test_fuzz_batch_csv(rows, header, as_json):
    text = "arch,threads,regs,static_smem,dynamic_smem,carveout,opt_in\n" if header else ""
    text += "".join(_csv_line(r) + "\n" for r in rows)
    data = text.encode("utf-8", "surrogatepass")
    r = CliRunner().invoke(main, ["occupancy", "--batch", "-", *(["--json"] if as_json else [])], input=data)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    # 3 only for a row asking for `auto` (this machine's GPU) where there is none: the documented no-GPU exit
    assert r.exit_code in (0, 1, 2) or (r.exit_code == 3 and "CUDA" in r.stderr), (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr
    if r.exit_code == 0:
        assert r.stderr == ""
        if as_json:
            assert isinstance(json.loads(r.stdout), list)
    else:
        one_line(r.stderr)
        assert r.stdout == ""


FLAGS = [
    "--arch",
    "--threads",
    "--regs",
    "--smem-static",
    "--smem-dynamic",
    "--carveout",
    "--no-opt-in",
    "--json",
    "--top",
    "--dtype",
    "--format",
    "--sms",
    "--vendor",
    "--gpu",
    "--rejected",
    "--batch",
]
VALUE = st.one_of(
    st.sampled_from(
        [
            "sm_90",
            "sm_80",
            "sm_121",
            "gfx942",
            "sm_90a",
            "256",
            "0",
            "-1",
            "64",
            "48K",
            "1e9",
            "99999999999999999999",
            "f16",
            "bf16",
            "f32",
            "tf32",
            "i8",
            "json",
            "yaml",
            "triton",
            "table",
            "amd",
            "h200",
            "",
            "[/bold]",
            "\x1b]8;;x\x07",
            "1024",
        ]
    ),
    st.integers(-(2**40), 2**40).map(str),
    st.text(max_size=6),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    command=st.sampled_from(["occupancy", "archs", "tiles"]),
    args=st.lists(st.one_of(st.sampled_from(FLAGS), VALUE), max_size=8),
)
def test_fuzz_cli_arguments(command, args):
    args = [a for a in args if "\x00" not in a and a != "--batch"]
    if command == "tiles":  # M N K first, each at most 2**20 so that the model's time stays bounded
        args = ["4096", "1024", "512", *args]
    r = CliRunner().invoke(main, [command, *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code in (0, 1, 2), (r.exit_code, r.output)
    assert "Traceback" not in r.output
