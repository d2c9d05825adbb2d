"""The program Nsight Compute profiles for ``inspect --ncu``: load one module, launch one kernel once.

    python -m smemtile.gpu.inspect_launch SPEC.json

SPEC.json (written by :func:`smemtile.gpu.inspect.launch_spec`)::

    {"module": "kernel.ptx" | "kernel.cubin", "entry": "_Z9transposePfS_", "grid": [x, y, z],
     "block": [x, y, z], "dynamic_smem": 0, "args": [KernelArg.to_dict(), ...],
     "param_types": [".u64", ".u32", ...], "device": 0, "seed": 0, "result": "result.json" | null}

(an array a Python caller passed has ``"fill": "caller"`` and ``"data_file"``: a ``.npy`` copy of its contents)

The arguments are built exactly as :func:`smemtile.gpu.inspect.record` builds them (same seed, same fills), so
ncu sees the launch ``inspect`` recorded. Writes ``{"ok": true, "entry": ...}`` to ``result``; exit 0, or 1 with
one line on stderr when the kernel cannot be loaded or launched, 2 for a bad spec, 3 without a GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _args(items: list[dict]):
    import numpy as np

    from smemtile.model.inspect_args import KernelArg

    out = []
    for a in items:
        fields = {k: a[k] for k in ("name", "kind", "dtype", "count", "fill", "value") if k in a}
        if a.get("data_file"):  # a copy of the caller's own array
            fields["data"] = np.load(a["data_file"], allow_pickle=False)
        out.append(KernelArg(**fields))
    return out


def main(argv: list[str]) -> int:
    from smemtile.errors import SmemtileError
    from smemtile.gpu.inspect import PreparedLaunch

    if len(argv) != 1:
        print("usage: python -m smemtile.gpu.inspect_launch SPEC.json", file=sys.stderr)
        return 2
    try:
        spec = json.loads(Path(argv[0]).read_text())
        module = Path(spec["module"])
        image = module.read_text() if module.suffix == ".ptx" else module.read_bytes()
        args = _args(spec["args"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"{argv[0]}: bad launch spec ({e.__class__.__name__}: {e})", file=sys.stderr)
        return 2
    try:
        k = PreparedLaunch(
            image,
            spec["entry"],
            grid=spec["grid"],
            block=spec["block"],
            dynamic_smem=spec.get("dynamic_smem", 0),
            args=args,
            param_types=spec["param_types"],
            seed=spec.get("seed", 0),
            device=spec.get("device", 0),
        )
        try:
            k.launch()
            k.synchronize()
        finally:
            k.close()
    except SmemtileError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    if spec.get("result"):
        Path(spec["result"]).write_text(json.dumps({"ok": True, "entry": spec["entry"]}))
    return 0


if __name__ == "__main__":  # pragma: no cover - runs on a GPU, under ncu
    raise SystemExit(main(sys.argv[1:]))
