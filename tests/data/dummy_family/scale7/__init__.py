"""A seventh family that exists only for tests/test_dummy_family.py: out[i] = alpha * in[i], staged through a
shared tile of TILE floats per block. Its folder holds everything about it (this module, its .cu, its
task.yaml); the test adds one registry line and runs the family contract on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from smemtile.families.base import Family, HostArg, KernelCall, KernelConfig, Param, ProblemKey


class Scale7(Family):
    name = "scale7"
    summary = "out = alpha * in through a shared tile (a test family)"
    file = "scale7.cu"
    kernel = "scale7"
    signature = ("const float* in", "float* out", "int n", "float alpha")
    params = (Param("TILE", 256, "floats per block (one per thread)", (64, 128, 256, 512)),)
    problem_keys = (ProblemKey("n", 4096, "elements"), ProblemKey("alpha", 2.0, "scale", kind="float"))
    host_args = (
        HostArg("in", "const float*", "in", ("n",), "f32"),
        HostArg("out", "float*", "out", ("n",), "f32"),
        HostArg("n", "int"),
        HostArg("alpha", "float"),
    )
    peak = "memory"

    def source(self) -> str:  # a family outside the package ships its .cu in its own folder
        return (Path(__file__).parent / self.file).read_text()

    def threads(self, p):
        return p["TILE"]

    def template_args(self, cfg: KernelConfig) -> list[str]:
        return [str(cfg.params["TILE"])]

    def buffers(self, cfg):
        return [{"name": "s", "dtype": "f32", "shape": ["TILE"]}]

    def accesses(self, cfg):
        return [
            {"name": "stage", "buffer": "s", "op": "store", "width": 4, "index": "tid"},
            {"name": "read", "buffer": "s", "op": "load", "width": 4, "index": "tid"},
        ]

    def calls(self, cfg):
        return [KernelCall(("in", "out", "n", "alpha"), ("cdiv(n, TILE)", "1", "1"), ("TILE", "1", "1"))]

    def make_inputs(self, cfg, rng):
        return {"in": rng.standard_normal(int(cfg.problem["n"]), dtype=np.float32)}

    def reference(self, cfg, inputs):
        return float(cfg.problem.get("alpha", 2.0)) * inputs["in"].astype(np.float64)

    def work(self, problem):
        return "gbps", 8.0 * problem["n"]

    def small_problem(self, cfg):
        return {"n": 3 * cfg.params["TILE"] + 1}


FAMILY = Scale7()
