"""A family's test sizes through the Python launcher, one ``CHECK`` line each: the program compute-sanitizer wraps
(memcheck, racecheck) on small problems.

    compute-sanitizer --tool memcheck python -m bench.sanitize_family conv2d --tile '{}' --tile '{"PATH": 1}'
    compute-sanitizer --tool racecheck python -m bench.sanitize_family conv2d --first 3

Each ``--tile`` (a JSON object of the family's parameters; default ``{}``: the tile model's pick) is configured
for every test size of the family's task.yaml, built for ``--arch`` (default: the tile's own, the family's
sm_90a path for ``PATH`` 1, else the device's), run once on the family's random inputs with poisoned outputs and
compared with the float64 reference (``smemtile.gpu.run.check_config``, what ``verify`` does). A size a tile
refuses prints ``REFUSED`` with the reason. Exit 1 if any check is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family")
    ap.add_argument("--tile", action="append", default=[], help="JSON object of parameters (repeatable)")
    ap.add_argument("--arch", default=None)
    ap.add_argument("--first", type=int, default=0, help="only the first N test sizes (0: all)")
    args = ap.parse_args(argv)

    import numpy as np

    from smemtile.errors import SpecError
    from smemtile.families import FAMILIES
    from smemtile.gpu.run import check_config, open_device
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve

    dev = open_device(0)
    fam = FAMILIES[args.family]
    sizes = list(fam.test_sizes)[: args.first or None]
    wrong = 0
    for tile in [json.loads(t) for t in args.tile] or [{}]:
        arch = args.arch or ("sm_90a" if tile.get("PATH") == 1 else dev.arch_name)
        for i, problem in enumerate(sizes):
            label = {"tile": tile, "problem": problem, "arch": arch}
            try:
                doc = {"arch": arch, "tile": tile, "kernel": {"family": args.family, **problem}}
                cfg = variants(resolve(doc))["fixed"]
            except SpecError as e:
                print("REFUSED", json.dumps({**label, "reason": str(e)}), flush=True)
                continue
            t0 = time.perf_counter()
            res = check_config(cfg, dev, np.random.default_rng(i))
            wrong += not res.correct
            out = {**label, **res.to_dict(), "params": dict(cfg.params), "seconds": time.perf_counter() - t0}
            print("CHECK", json.dumps(out, default=str), flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    from smemtile.errors import NoDevice

    try:
        sys.exit(main())
    except NoDevice as e:
        print(f"sanitize_family: {e}", file=sys.stderr)
        sys.exit(3)
