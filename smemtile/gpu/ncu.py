"""`verify --ncu`: run a generated kernel under Nsight Compute and put its shared-memory numbers beside the model's.

Three steps, each usable on its own:

1. :func:`profile` runs ``ncu --clock-control none --section SourceCounters --metrics ...`` on a small runner
   (``python -m smemtile.gpu.ncu --target CONFIG_JSON ...``: one run of one configuration's launch plan at a
   small, tile-multiple problem size; ncu profiles the family's main kernel) and reads back two pages of the
   report: the SASS source page (per instruction: executed count, shared wavefronts, ideal wavefronts) and the
   raw page (kernel-level counters).
2. :func:`parse_source_csv` / :func:`parse_raw_csv` turn those CSV pages into numbers (CPU only, tested on a
   saved fixture).
3. :func:`compare` maps every shared-memory SASS instruction (LDS / STS / LDSM / LDGSTS with its width) to the
   family's accesses of the same op and width and compares measured wavefronts per executed
   instruction with the bank model. Where several accesses share an op and width the per-instruction mapping is
   ambiguous, so the group's sums are compared instead, and the result says so. Kernel-level totals (load and
   store wavefronts per instruction from the hardware counters) are always compared too.

Known limits of the counters (measured with bench/ncu_bank_catalogue.py on the H200): 16-byte ``cp.async.cg`` writes
(``LDGSTS...BYPASS.128``) are not counted by any shared-memory wavefront counter; ncu's conflict counter for
cp.async assumes one wavefront per 128 bytes while the hardware works in quarter-warp phases.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from smemtile.fileio import write_text_atomic
from smemtile.gpu.ncu_compare import compare
from smemtile.gpu.ncu_parse import METRICS, parse_raw_csv, parse_source_csv

TIMEOUT_S = 300


def find_ncu() -> str | None:
    """Path of the ``ncu`` executable, or None."""
    return shutil.which("ncu")


class NcuError(RuntimeError):
    pass


def _run(cmd: list[str], *, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise NcuError(f"timed out after {timeout:.0f} s: {' '.join(cmd[:6])} ...") from None


def config_json(cfg) -> str:
    """A configuration as JSON (what the profiled runner rebuilds it from). A TMA layout's spec form leaves its
    element size to the buffer's dtype: it is written beside it here, since ``configure`` reads bare layouts."""
    from smemtile.families import FAMILIES
    from smemtile.model.dtypes import get_dtype

    dtypes = {b["name"]: b.get("dtype") for b in FAMILIES[cfg.family].buffers(cfg)}

    def lay(name: str, layout) -> dict:
        d = layout.to_dict()
        if "tma_swizzle" in d:
            d["elem_bytes"] = get_dtype(dtypes[name]).bytes
        return d

    return json.dumps(
        {
            "family": cfg.family,
            "params": cfg.params,
            "problem": cfg.problem,
            "arch": cfg.arch.name,
            "layouts": {k: lay(k, v) for k, v in cfg.layouts.items()},
        }
    )


def config_from_json(text: str):
    from smemtile.families import configure

    d = json.loads(text)
    return configure(d["family"], {**d["params"], **d["problem"]}, d["layouts"], d["arch"])


def profile(
    label: str,
    variant: str,
    cfg,
    *,
    device: int = 0,
    ncu: str | None = None,
    save_dir: Path | None = None,
    timeout: float = TIMEOUT_S,
) -> dict:
    """Profile ``cfg`` (``variant`` of the spec ``label``, at a small problem) under ncu; compare with the model."""
    from smemtile.families import FAMILIES

    ncu = ncu or find_ncu()
    if ncu is None:
        raise NcuError("ncu not found on PATH")
    fam = FAMILIES[cfg.family]
    work = Path(tempfile.mkdtemp(prefix="smemtile_ncu_"))
    try:
        report = work / "report"
        result = work / "target.json"
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        target = [
            sys.executable,
            "-m",
            "smemtile.gpu.ncu",
            "--target",
            config_json(cfg),
            str(device),
            str(result),
        ]
        # -k matches the function name without template arguments: the family's main kernel, never the steps
        # before it (e.g. split K's preparation kernel)
        cmd = [
            ncu,
            "--clock-control",
            "none",
            "--target-processes",
            "all",
            "-k",  # the configuration's kernel (a family may have several): its name before the template arguments
            fam.name_expression(cfg).split("<")[0],
            "--launch-count",
            "1",
            "--section",
            "SourceCounters",
            "--metrics",
            ",".join(METRICS),
            "--import-source",
            "no",
            "-f",
            "-o",
            str(report),
            *target,
        ]
        p = _run(cmd, timeout=timeout, env=env)
        rep = report.with_suffix(".ncu-rep")
        if p.returncode != 0 or not rep.exists():
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            raise NcuError(f"ncu exited {p.returncode}: {' | '.join(tail)}")
        src = _run(
            [ncu, "-i", str(rep), "--page", "source", "--csv", "--print-source", "sass"], timeout=timeout
        )
        raw = _run([ncu, "-i", str(rep), "--page", "raw", "--csv", "--print-units", "base"], timeout=timeout)
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            stem = f"{label}_{variant}"
            write_text_atomic(
                save_dir / f"{stem}_source.csv", src.stdout, key="--ncu-save", make_parents=True
            )
            write_text_atomic(save_dir / f"{stem}_raw.csv", raw.stdout, key="--ncu-save", make_parents=True)
            write_text_atomic(
                save_dir / f"{stem}_ncu.log",
                p.stdout + "\n--- stderr ---\n" + p.stderr,
                key="--ncu-save",
                make_parents=True,
            )
            shutil.copy(rep, save_dir / f"{stem}.ncu-rep")
        if src.returncode != 0 or raw.returncode != 0:
            raise NcuError(f"ncu -i failed: {(src.stderr or raw.stderr).strip()[:300]}")
        rows, info = parse_source_csv(src.stdout)
        metrics = parse_raw_csv(raw.stdout)
        doc = compare(cfg, rows, metrics)
        doc["columns"] = info
        doc["target"] = json.loads(result.read_text()) if result.exists() else None
        shown = [
            (
                "REPORT"
                if x == str(report)
                else "RESULT.json"
                if x == str(result)
                else "CONFIG_JSON"
                if x == target[4]
                else x
            )
            for x in cmd
        ]
        doc["command"] = " ".join(shown)
        return doc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ncu_version(ncu: str | None = None) -> str | None:
    ncu = ncu or find_ncu()
    if not ncu:
        return None
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except Exception:
        return None
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


# ---- the runner ncu profiles --------------------------------------------------------------------------------


def _target(config: str, device: str, result: str) -> int:
    """One run of a configuration's launch plan on a small problem, checked against the reference; writes a
    JSON summary."""
    from smemtile.families import FAMILIES
    from smemtile.gpu.run import LoadedKernel, open_device

    cfg = config_from_json(config)
    dev = open_device(int(device))
    fam = FAMILIES[cfg.family]
    inputs = fam.make_inputs(cfg, np.random.default_rng(1234))
    k = LoadedKernel(cfg, dev)
    try:
        chk = k.check(dict(inputs), fam.reference(cfg, inputs))
    finally:
        k.close()
    Path(result).write_text(
        json.dumps(
            {
                "name_expression": fam.name_expression(cfg),
                "problem": cfg.problem,
                "correct": chk.correct,
                "max_rel_error": chk.max_rel_error,
            }
        )
    )
    return 0 if chk.correct else 1


if __name__ == "__main__":  # pragma: no cover - runs on a GPU under ncu
    if len(sys.argv) == 5 and sys.argv[1] == "--target":
        raise SystemExit(_target(*sys.argv[2:]))
    print("usage: python -m smemtile.gpu.ncu --target CONFIG_JSON DEVICE RESULT_JSON", file=sys.stderr)
    raise SystemExit(2)
