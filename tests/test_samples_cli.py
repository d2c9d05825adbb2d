"""The samples ship in the package: `smemtile samples` lists them, `--copy DIR` writes them (refusing to overwrite),
every sample a `--help` example names is in the package, and a build of the package run outside the repository
copies them and runs the README's first command as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT

from smemtile.cli import main
from smemtile.cli.samples import describe, sample_dir

PACKAGED = sorted(p.name for p in sample_dir().iterdir() if p.name.endswith(".yaml"))


def cli(*args: str):
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "80"})


def test_the_top_level_samples_folder_is_the_package_one():
    link = ROOT / "samples"
    assert link.is_symlink() and os.readlink(link) == "smemtile/samples"
    assert sorted(p.name for p in link.glob("*.yaml")) == PACKAGED and len(PACKAGED) == 14
    assert (ROOT / "smemtile" / "samples").resolve() == Path(str(sample_dir())).resolve()


def test_list_names_every_sample_with_one_line():
    r = cli("samples")
    assert r.exit_code == 0, r.output
    rows = {
        ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.split() and ln.split()[0].endswith(".yaml")
    }
    assert sorted(k for k in rows if "/" not in k) == PACKAGED
    # the inspect corpus and the measure catalogues are listed too, each with its line
    assert "catalogues/heldout.yaml" in rows and "kernels/transpose_naive.cu" in r.stdout
    assert "fp32 GEMM A tile, column read (BK=32)" in rows["gemm_a_column.yaml"]
    doc = json.loads(cli("samples", "--json").stdout)
    by = {s["file"]: s["description"] for s in doc["samples"]}
    assert sorted(k for k in by if "/" not in k) == PACKAGED and all(d and "\n" not in d for d in by.values())
    assert by["kernels/transpose_naive.cu"].startswith("Naive 32x32 shared-memory transpose")
    assert by["ldmatrix_f16.yaml"] == "fp16 tile read with ldmatrix.x4"
    # no name: -> the first sentence of the opening comment
    assert (
        by["raw_addresses.yaml"]
        == "The raw form: explicit per-lane byte offsets from the buffer base (docs/spec.md)"
    )


def test_describe_rules():
    assert describe("# First one. Second.\narch: sm_90\n") == "First one"
    assert describe("# ignored\nname: 'quoted title'\n") == "quoted title"


def test_copy_writes_every_sample_and_refuses_to_overwrite(tmp_path):
    dest = tmp_path / "new" / "samples"
    r = cli("samples", "--copy", str(dest), "--json")
    assert r.exit_code == 0, r.output
    files = json.loads(r.stdout)["copied"]["files"]
    assert [f for f in files if "/" not in f] == PACKAGED
    assert "kernels/transpose_naive.cu" in files and "kernels/transpose_naive.args.yaml" in files
    assert "catalogues/heldout.yaml" in files  # every --help example (inspect, measure) runs in the copy
    for name in files:
        assert (dest / name).read_bytes() == (ROOT / "smemtile" / "samples" / name).read_bytes()
    # one existing file: one line, exit 2, nothing written (the others are not rewritten either)
    for name in files:
        (dest / name).unlink()
    for sub in ("kernels", "catalogues"):
        (dest / sub).rmdir()
    (dest / "tma_128b.yaml").write_text("mine\n")
    r = cli("samples", "--copy", str(dest))
    assert r.exit_code == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("smemtile: error: --copy: ") and "tma_128b.yaml already exists" in line
    assert sorted(p.name for p in dest.iterdir()) == ["tma_128b.yaml"]
    assert (dest / "tma_128b.yaml").read_text() == "mine\n"
    f = tmp_path / "file"
    f.write_text("x")
    r = cli("samples", "--copy", str(f))
    assert r.exit_code == 2 and "is a file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _examples() -> list[str]:
    out = []
    for name in main.list_commands(None):
        text = CliRunner().invoke(main, [name, "--help"], terminal_width=200).stdout
        out += [ln.strip() for ln in text.splitlines() if ln.strip().startswith("smemtile ")]
    text = CliRunner().invoke(main, ["--help"], terminal_width=200).stdout
    return out + [ln.strip() for ln in text.splitlines() if ln.strip().startswith("smemtile ")]


def test_every_sample_a_help_example_names_is_in_the_package():
    named = {m for ex in _examples() for m in re.findall(r"samples/([\w.-]+\.yaml)", ex)}
    assert {"gemm_a_column.yaml", "transpose_32x32.yaml", "sgemm_float4.yaml"} <= named
    assert named <= set(PACKAGED), named - set(PACKAGED)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The package as setuptools builds it for a wheel (build_py: the modules and the package data only),
    from a copy of pyproject.toml, README.md and smemtile/."""
    import shutil

    src = tmp_path_factory.mktemp("src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "smemtile", src / "smemtile", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("lib")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from setuptools import setup; setup()",
            "-q",
            "build_py",
            "--build-lib",
            str(out),
        ],
        cwd=src,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def test_built_package_has_the_samples_and_runs_outside_the_repo(built, tmp_path):
    assert sorted(p.name for p in (built / "smemtile" / "samples").glob("*.yaml")) == PACKAGED
    env = {**os.environ, "PYTHONPATH": str(built), "COLUMNS": "80"}

    def smemtile(*args):
        return subprocess.run(
            [sys.executable, "-m", "smemtile", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import smemtile; print(smemtile.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    ).stdout
    assert where.startswith(str(built)), where
    r = smemtile("samples", "--copy", "samples")
    assert r.returncode == 0, r.stderr
    # each distinct example once (two help texts give the same command: it runs once, asserted the same)
    for ex in dict.fromkeys(
        e for e in _examples() if e.startswith("smemtile analyze samples/") and "|" not in e
    ):
        args = ex.split()[1:]
        if "--export" in args:
            continue  # writes a file: covered by the export tests
        r = smemtile(*args)
        assert r.returncode == 0, (ex, r.stderr)
        assert "Summary" in r.stdout and "Review checklist" in r.stdout
