"""Hostile specs: hypothesis over spec dictionaries through the library and the CLI (no traceback, bounded time and
memory, exit code 0, 1 or 2), and the named hostile cases of issue 16, each one line and exit 2."""

from __future__ import annotations

import resource
import time
import tracemalloc

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smemtile.cli import main
from smemtile.errors import SmemtileError
from smemtile.pipeline.analyze import analyze
from smemtile.pipeline.specs import resolve

TIME_S = 20.0  # per spec, library or CLI (the slowest legal spec, 65,536 instructions, takes about 10 s)
MEMORY = 768 << 20  # bytes traced per spec
RSS_START = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

NAMES = st.sampled_from(["A", "B", "As", "tile", "[/bold]", "\x1b[31m", "é", "float", "", "a b"])
EXPRS = st.one_of(
    st.sampled_from(
        [
            "lane",
            "lane * 4",
            "warp",
            "tid // 8",
            "(tid % 8) * 4",
            "k",
            "lane % 16",
            "(lane // 16) * 8",
            "i * 8 + warp",
            "lane + 1000",
            "-1",
            "2**47 * 2**47",
            "9**9**9",
            "1 // 0",
            "cdiv(lane, 0)",
            "min(lane, 3)",
            "lane < 16",
            "__import__('os')",
            "lane.real",
            "x",
            "BM",
            "\ud800",
            "[/bold]",
            "lane << 70",
            "k * 2**40",
        ]
    ),
    st.integers(-3, 300),
    st.text(max_size=6),
)
INTS = st.one_of(st.integers(-2, 300), st.sampled_from([0, 1 << 24, 2**31, 2**63, 2**64, -(2**63)]))
VALUES = st.one_of(INTS, st.sampled_from(["256", "BM", "true", "", None, 3.5, float("nan"), True, [], {}]))


@st.composite
def layouts(draw):
    return draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries({"pad": VALUES}),
            st.fixed_dictionaries({"swizzle": st.lists(st.integers(-1, 13), min_size=0, max_size=4)}),
            st.fixed_dictionaries({"tma_swizzle": st.sampled_from(["none", "32B", "64B", "128B", "256B"])}),
            st.sampled_from(["pad 1", 4, [1, 2]]),
        )
    )


@st.composite
def buffers(draw):
    b = {
        "name": draw(st.one_of(NAMES, st.sampled_from(["As", "Bs"]))),
        "dtype": draw(st.sampled_from(["f32", "f16", "bf16", "tf32", "f8e4m3", "u8", "i64", "fp32", 7])),
    }
    b["shape"] = draw(
        st.one_of(
            st.lists(
                st.one_of(st.integers(-1, 200), st.sampled_from(["BM", 2**63, 1 << 24])),
                min_size=0,
                max_size=4,
            ),
            INTS,
        )
    )
    if draw(st.booleans()):
        b["layout"] = draw(layouts())
    if draw(st.integers(0, 3)) == 0:
        b["stages"] = draw(VALUES)
    if draw(st.integers(0, 5)) == 0:
        b[draw(st.sampled_from(["nmae", "note", "source"]))] = "x"
    return b


@st.composite
def accesses(draw, names):
    a = {
        "name": draw(NAMES),
        "buffer": draw(st.sampled_from([*names, "Z"])),
        "op": draw(st.sampled_from(["load", "store", "ldmatrix", "stmatrix", "cp.async", "lod"])),
    }
    if draw(st.booleans()):
        a["width"] = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 32, "16", None]))
    form = draw(st.sampled_from(["rc", "rc", "src", "index", "address", "addresses", "none", "all"]))
    if form in ("rc", "src", "all"):
        a["row"], a["col"] = draw(EXPRS), draw(EXPRS)
    if form in ("src", "all"):
        a["stage"] = draw(EXPRS)
    if form in ("index", "all"):
        a["index"] = draw(EXPRS)
    if form == "address":
        a["address"] = draw(EXPRS)
    if form == "addresses":
        a["addresses"] = draw(st.lists(st.integers(-4, 5000), min_size=30, max_size=33))
    if draw(st.booleans()):
        rng = st.one_of(
            st.integers(-2, 40),
            st.lists(
                st.one_of(st.integers(-5, 40), st.sampled_from([10**9, 2**46, "BK", 0])),
                min_size=0,
                max_size=4,
            ),
        )
        a["over"] = draw(st.dictionaries(st.sampled_from(["k", "i", "lane", "BM", "kk"]), rng, max_size=2))
    for key, strat in (
        ("warps", st.one_of(st.lists(st.integers(-1, 40), max_size=3), st.integers(-1, 9))),
        ("matrices", st.sampled_from([1, 2, 3, 4, "4"])),
        ("trans", st.sampled_from([True, "false", 1])),
        ("active", EXPRS),
        ("role", st.sampled_from(["inner", "copy", "main"])),
        ("source", EXPRS),
        ("note", st.sampled_from(["x", 3])),
    ):
        if draw(st.integers(0, 4)) == 0:
            a[key] = draw(strat)
    return a


@st.composite
def specs(draw):
    doc: dict = {}
    if draw(st.integers(0, 9)):
        doc["arch"] = draw(
            st.sampled_from(
                [
                    "sm_90",
                    "sm_90",
                    "sm_80",
                    "sm_75",
                    "sm_70",
                    "sm_90a",
                    "sm_89a",
                    "sm_120f",
                    "90",
                    9.0,
                    "auto",
                    "",
                    None,
                ]
            )
        )
    if draw(st.booleans()):
        doc["threads"] = draw(st.one_of(st.sampled_from([32, 64, 128, 256]), VALUES))
    if draw(st.booleans()):
        doc["tile"] = draw(
            st.dictionaries(st.sampled_from(["BM", "BN", "BK", "lane", "9x"]), VALUES, max_size=3)
        )
    if draw(st.integers(0, 3)) == 0:
        doc["stages"] = draw(VALUES)
    if draw(st.integers(0, 4)) == 0:
        doc["problem"] = draw(
            st.one_of(
                st.fixed_dictionaries({"M": INTS, "N": INTS, "K": INTS}),
                st.fixed_dictionaries(
                    {"M": INTS, "N": INTS, "K": INTS, "dtype": st.sampled_from(["f16", "bf16", "x"])}
                ),
                st.sampled_from([3, "gemm"]),
            )
        )
    if draw(st.integers(0, 6)) == 0:
        doc["kernel"] = draw(
            st.one_of(
                st.fixed_dictionaries(
                    {
                        "family": st.sampled_from(["transpose", "stencil2d", "sgemm", "nope"]),
                        "rows": st.sampled_from([64, 0, 2**40]),
                        "cols": st.sampled_from([64, 128]),
                        "M": st.sampled_from([64, 128]),
                        "N": st.sampled_from([64]),
                        "K": st.sampled_from([64, 8]),
                    }
                ),
                st.sampled_from([{"family": "transpose", "rows": 256, "cols": 256}, "sgemm", {}]),
            )
        )
    if doc.get("kernel") is None or draw(st.booleans()):
        bufs = draw(st.lists(buffers(), min_size=0, max_size=3))
        doc["buffers"] = bufs
        names = [b["name"] for b in bufs if isinstance(b.get("name"), str)] or ["A"]
        doc["accesses"] = draw(st.lists(accesses(names), min_size=0, max_size=3))
    if draw(st.integers(0, 6)) == 0:
        doc[draw(st.sampled_from(["acesses", "regs", "name", "constants"]))] = draw(VALUES)
    return doc


@st.composite
def valid_specs(draw):
    """A spec the analysis accepts: sizes, widths and coordinates chosen so that every address is legal."""
    threads = draw(st.sampled_from([32, 64, 128, 256]))
    doc: dict = {"arch": draw(st.sampled_from(["sm_80", "sm_90", "sm_90a", "sm_120"])), "threads": threads}
    bufs, accs = [], []
    for n in range(draw(st.integers(1, 2))):
        name = f"B{n}"
        dtype = draw(st.sampled_from(["f32", "f16", "u8"]))
        eb = {"f32": 4, "f16": 2, "u8": 1}[dtype]
        dims = draw(st.sampled_from(["1d", "2d", "2d", "3d"]))
        rows, cols, stages = draw(st.sampled_from([8, 16, 32, 64])), draw(st.sampled_from([16, 32, 64])), 2
        shape = {"1d": [rows * cols], "2d": [rows, cols], "3d": [stages, rows, cols]}[dims]
        b: dict = {"name": name, "dtype": dtype, "shape": shape}
        if dims != "1d" and draw(st.booleans()):
            b["layout"] = draw(
                st.sampled_from(
                    [
                        {"pad": 1},
                        {"pad": 4},
                        {"pad": 8},
                        {"swizzle": [2, 0, 3]},
                        {"swizzle": [3, 2, 3]},
                        {"swizzle": [1, 1, 4]},
                    ]
                )
            )
        if dims == "2d" and draw(st.integers(0, 3)) == 0:
            b["stages"] = 2
        bufs.append(b)
        for m in range(draw(st.integers(1, 2))):
            op = draw(st.sampled_from(["load", "store", "load", "cp.async", "ldmatrix"]))
            if op == "ldmatrix" and (dtype != "f16" or dims == "1d" or cols < 8):
                op = "load"
            width = 16 if op == "ldmatrix" else draw(st.sampled_from([w for w in (4, 8, 16) if w >= eb]))
            v = (16 if op == "ldmatrix" else width) // eb  # elements per lane
            a: dict = {"name": f"a{n}{m}", "buffer": name, "op": op}
            if op != "ldmatrix":
                a["width"] = width
            k = draw(st.integers(1, 8))
            mul = draw(st.sampled_from([0, 1, 2, 3, 8]))
            if dims == "1d":
                a["index"] = f"((lane * {mul} + warp + k) % {rows * cols // v}) * {v}"
            else:
                a["row"] = f"(lane * {mul} + warp + k) % {rows}"
                a["col"] = f"((lane + k * {draw(st.sampled_from([0, 1, 4]))}) % {max(1, cols // v)}) * {v}"
                if dims == "3d":
                    a["stage"] = "k % 2"
            a["over"] = {"k": [0, k]}
            if draw(st.integers(0, 4)) == 0:
                a["active"] = f"lane < {draw(st.integers(1, 32))}"
            if op == "cp.async" and draw(st.booleans()):
                a["source"] = f"(lane * {draw(st.sampled_from([1, 8, 33]))}) * {v}"
            accs.append(a)
    doc["buffers"], doc["accesses"] = bufs, accs
    if draw(st.integers(0, 3)) == 0:
        doc["problem"] = {"M": 1024, "N": 512, "K": 256, "dtype": draw(st.sampled_from(["f32", "f16"]))}
    if draw(st.integers(0, 3)) == 0:
        doc["stages"] = draw(st.integers(1, 4))
    return doc


@st.composite
def mutated_specs(draw):
    """A valid spec with one or two values replaced by hostile ones (or removed): reaches the deep code paths."""
    doc = draw(valid_specs())
    for _ in range(draw(st.integers(0, 2))):
        node, key = doc, None
        path = draw(st.lists(st.integers(0, 7), min_size=1, max_size=4))
        for step in path:  # walk down a random path through mappings and lists; stop at (node, key)
            child = None
            if isinstance(node, dict) and node:
                child = sorted(node, key=str)[step % len(node)]
            elif isinstance(node, list) and node:
                child = step % len(node)
            if child is None:
                break
            key = child
            if not isinstance(node[key], (dict, list)) or not node[key] or step % 3 == 0:
                break
            node, key = node[key], None
        if key is None:
            continue
        if draw(st.integers(0, 4)) == 0 and isinstance(node, dict):
            del node[key]
        else:
            node[key] = draw(st.one_of(VALUES, EXPRS))
    return doc


_CALLS = [0]


def bounded(fn, memory: bool = True):
    """Run ``fn`` and return its result, asserting the time it took and its memory: the process's high-water
    mark (cheap, every call) and, every 8th call, the peak that tracemalloc traces (numpy's arrays included)."""
    _CALLS[0] += 1
    traced = memory and _CALLS[0] % 8 == 1
    if traced:
        tracemalloc.start()
    t = time.monotonic()
    try:
        return fn()
    finally:
        spent = time.monotonic() - t
        if traced:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert peak < MEMORY, f"{peak >> 20} MiB"
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        assert rss < RSS_START + MEMORY, f"the process peaked at {rss >> 20} MiB"
        assert spent < TIME_S, f"{spent:.1f} s"


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=st.one_of(mutated_specs(), mutated_specs(), specs()))
def test_library_refuses_or_analyses_every_spec(doc):
    def run():
        try:
            rep = analyze(resolve(doc, "fuzz.yaml"), compile=False)
            rep.to_dict()
        except SmemtileError as e:  # the documented refusal: one line, exit 1 or 2
            assert e.exit_code in (1, 2) and "\n" not in str(e), str(e)

    bounded(run)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=st.one_of(mutated_specs(), specs()), flags=st.sampled_from([[], ["--json"], ["--brief"]]))
def test_cli_exit_code_and_one_line(tmp_path_factory, doc, flags):
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    # the CLI runs the library's code (whose memory the test above traces): here time and the exit are checked
    r = bounded(
        lambda: CliRunner().invoke(main, ["analyze", str(path), "--no-compile", *flags]), memory=False
    )
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code in (0, 1, 2), (r.exit_code, r.output)
    assert "Traceback" not in r.output
    if r.exit_code:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("smemtile: error:"), r.stderr


# ---- the named hostile cases ------------------------------------------------------------------------------------

BASE = "arch: sm_90\nthreads: 64\nbuffers: [{name: S, dtype: f32, shape: [32, 32]}]\n"
ONE = BASE + "accesses: [{name: a, buffer: S, op: load, row: lane, col: 0}]\n"


def _accesses(n: int) -> bytes:
    return (
        BASE
        + "accesses:\n"
        + "".join(f"  - {{name: a{i}, buffer: S, row: lane, col: 0}}\n" for i in range(n))
    ).encode()


HOSTILE = {
    "lone surrogate bytes": (
        ONE.replace("name: a", "name: a\udcff").encode("utf-8", "surrogatepass"),
        "not UTF-8",
    ),
    "YAML integer 2**63": (
        (BASE + f"accesses: [{{name: a, buffer: S, row: lane, col: {2**63}}}]\n").encode(),
        "2**48",
    ),
    "threads 2**64": (ONE.replace("threads: 64", f"threads: {2**64}").encode(), "threads"),
    "shape 2**63": (ONE.replace("shape: [32, 32]", f"shape: [32, {2**63}]").encode(), "shape"),
    "warps: []": (ONE.replace("col: 0}", "col: 0, warps: []}").encode(), "at least one warp"),
    "nested flow YAML": (("a: " + "[" * 200 + "]" * 200 + "\n").encode(), "nested 200 levels deep"),
    "nested block YAML": ("".join("  " * i + f"k{i}:\n" for i in range(400)).encode(), "nested too deeply"),
    "10,000 accesses": (_accesses(10_000), "10000 accesses; a spec has at most 256"),
    "10,000 buffers": (
        (
            "arch: sm_90\nbuffers:\n"
            + "".join(f"  - {{name: b{i}, dtype: u8, shape: [4]}}\n" for i in range(10_000))
            + "accesses: []\n"
        ).encode(),
        "10000 buffers",
    ),
    "loop to 10**9": (
        ONE.replace("col: 0}", "col: 0, over: {k: [0, 1000000000]}}").encode(),
        "at most 65536",
    ),
    "4 accesses at the cap": (
        (
            BASE.replace("threads: 64", "threads: 1024")
            + "accesses:\n"
            + "".join(
                f"  - {{name: a{i}, buffer: S, row: lane, col: 0, over: {{k: [0, 2048]}}}}\n"
                for i in range(4)
            )
        ).encode(),
        "262144 instructions to analyse in all",
    ),
    "duplicate key": (ONE.replace("threads: 64", "threads: 64\nthreads: 32").encode(), "given twice"),
    "string boolean": (
        ONE.replace("col: 0}", "col: 0, op: ldmatrix, trans: 'false'}").replace("op: load, ", "").encode(),
        "must be true or false",
    ),
    "buffer name is markup": (
        ONE.replace("name: S", "name: '[/bold]'").replace("buffer: S", "buffer: '[/bold]'").encode(),
        "not a C++ identifier",
    ),
    "cp.async on sm_75": (
        ONE.replace("sm_90", "sm_75").replace("op: load", "op: cp.async, width: 4").encode(),
        "cp.async needs sm_80 or later; the target is sm_75",
    ),
    "sm_89a": (ONE.replace("sm_90", "sm_89a").encode(), "sm_89 has no 'a' target"),
    "misaligned raw address": (
        (BASE + "accesses: [{name: v, buffer: S, op: load, width: 16, address: 'lane * 16 + 4'}]\n").encode(),
        "lane 0 address 4 is not aligned to 16 bytes",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_case_is_one_line_exit_2(tmp_path, case):
    data, needle = HOSTILE[case]
    f = tmp_path / "h.yaml"
    f.write_bytes(data)
    t = time.monotonic()
    r = CliRunner().invoke(main, ["analyze", str(f), "--no-compile"])
    assert time.monotonic() - t < TIME_S
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smemtile: error:") and "Traceback" not in r.output, (
        r.stderr
    )
    assert needle in lines[0], lines[0]
    assert r.stdout == ""


def test_a_100_mb_spec_is_refused_before_it_is_read(tmp_path):
    f = tmp_path / "big.yaml"
    with open(f, "wb") as fh:
        fh.truncate(100 << 20)  # sparse: 100 MB of zeros
    r = CliRunner().invoke(main, ["analyze", str(f)])
    assert (
        r.exit_code == 2
        and "spec size budget of 1 MiB" in r.stderr
        and len(r.stderr.strip().splitlines()) == 1
    )


def test_library_and_model_read_through_one_reader(tmp_path, monkeypatch):
    """model.spec.load_spec and pipeline.specs.load both read with smemtile.fileio.read_text."""
    import smemtile.fileio as fileio
    import smemtile.model.spec as spec_mod
    import smemtile.pipeline.specs as specs_mod

    seen = []
    real = fileio.read_text

    def spy(path, **kw):
        seen.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(spec_mod, "read_text", spy)
    monkeypatch.setattr(specs_mod, "read_text", spy, raising=False)
    f = tmp_path / "s.yaml"
    f.write_text(ONE)
    spec_mod.load_spec(f)
    specs_mod.load(f)
    assert seen == [str(f), str(f)]
