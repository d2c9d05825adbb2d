"""What a kernel family is: one plug-in that holds everything about one ``.cu`` template.

A family (``smemtile/families/<name>/``) declares, once:

* its **parameters** (template arguments: name, default, allowed values, meaning) and its **problem** keys;
* its **buffers and accesses in the spec language** (:meth:`Family.buffers`, :meth:`Family.accesses`): YAML-form
  dictionaries over its constants. ``analyze``, ``generate``'s header and ``--json``, the fix search and
  ``verify --ncu`` all evaluate these same expressions (:meth:`Family.spec`), so nothing can disagree;
* its **launch** as a list of :class:`KernelCall` whose grid, block, guard and integer arguments are expressions
  too: the Python launcher evaluates them (:meth:`Family.launch`) and the generated C++ host helper renders the
  very same expressions (``Expr.cpp``), split-K preparation included;
* its constraints, reference, tolerance, sizes to test and benchmark, and its review-checklist items.

Pure: numpy and the model layer only; no CUDA, no printing. Nothing outside a family asks which family it is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

import numpy as np

from smemtile.errors import SpecError
from smemtile.families.task import TaskSizes
from smemtile.model.arch import Arch
from smemtile.model.dtypes import NUMPY_DTYPES, ctype_bytes  # noqa: F401  (NUMPY_DTYPES: re-exported)
from smemtile.model.expr import parse_expr
from smemtile.model.layout import Layout
from smemtile.model.memo import memo

GRID_LIMITS = (2**31 - 1, 65535, 65535)  # CUDA: gridDim.x, .y, .z
KERNELS = "kernels"  # the CUDA sources' folder inside the package: one .cu per family and the shared header


def kernel_file(name: str):
    """A file of the kernels folder (an importlib.resources Traversable: works from a wheel or a checkout)."""
    return resources.files("smemtile").joinpath(KERNELS).joinpath(name)


INT_MAX = 2**31 - 1  # problem sizes travel as C++ int


class ContractViolation(SpecError):
    """The configuration breaks a family's contract; refused before compiling (exit 2, one line)."""


@dataclass(frozen=True)
class Param:
    """A template parameter: name, default, allowed values (None: any in lo..hi that the constraints accept)."""

    name: str
    default: int
    doc: str
    allowed: tuple[int, ...] | None = None
    lo: int = 0
    hi: int = 1 << 16


@dataclass(frozen=True)
class ProblemKey:
    """A problem parameter (M, rows, alpha, dtype, ...): ``kind`` int, float or choice."""

    name: str
    default: Any
    doc: str
    kind: str = "int"
    choices: tuple[str, ...] = ()
    # a leading dimension or pitch (elements between rows of an array): the value when the problem does not give
    # it, an expression over the other integer keys (the dense layout, e.g. ``K`` for row-major A of M x K)
    dense: str = ""


@dataclass(frozen=True)
class HostArg:
    """One parameter of the generated launch helper (and of the Python launcher's argument list).

    Arrays carry their shape (expressions over the problem) and element type key (``f32``, ``T``); ``role`` is
    ``in``, ``out`` or ``inout``. Scalars have ``ctype`` ``int`` or ``float`` and no shape.

    ``ld`` names the integer argument that is a 2-D array's leading dimension (elements from one row to the next,
    at least its row length): the user's layout, as cuBLAS takes it. ``shape`` is the logical (rows, cols); element
    (r, c) is at ``ptr[r * ld + c]``."""

    name: str
    ctype: str  # C++ type; ``{T}`` is the family's element type (Family.ctypes)
    role: str = ""  # in | out | inout for arrays; "" for scalars
    shape: tuple[str, ...] = ()
    dtype: str = ""
    ld: str = ""

    @property
    def array(self) -> bool:
        return bool(self.role)


@dataclass(frozen=True)
class KernelCall:
    """One launch of the plan. ``kernel`` None is the family's template instantiation; otherwise an
    ``extern "C"`` kernel of the same ``.cu`` (e.g. split K's C preparation). ``params`` are its C++ parameter
    declarations, ``args`` expressions over the helper's arguments and the configuration's constants."""

    args: tuple[str, ...]
    grid: tuple[str, str, str]
    block: tuple[str, str, str]
    kernel: str | None = None
    params: tuple[str, ...] = ()
    when: str = "1"
    doc: str = ""
    cluster: tuple[str, str, str] = ("1", "1", "1")  # CTAs per cluster (the grid is a multiple of it)

    @property
    def main(self) -> bool:
        return self.kernel is None


@dataclass(frozen=True)
class Workspace:
    """Device memory the launch plan needs besides the user's arrays (e.g. sgemm's copies of unaligned A and B
    with 16-byte rows): ``elems`` elements of ``ctype`` (an expression over the constants and the problem), used
    when ``when`` is not 0. Calls name it in their arguments. Where a call's parameter is ``const`` (it only
    reads) and the workspace is not in use, the argument is ``fallback`` instead (the user's array). The
    generated helper takes ``void* workspace, size_t workspace_bytes`` (null: it allocates stream-ordered) and
    ``launch_<family>_workspace_bytes(...)`` says how much; the Python launcher allocates it itself."""

    name: str
    elems: str
    ctype: str = "float"
    when: str = "1"
    fallback: str = ""
    doc: str = ""


WORKSPACE_ALIGN = 256  # bytes: every workspace region starts at a multiple of this


@dataclass(frozen=True)
class WorkspacePlan:
    """A :class:`Workspace` evaluated for one problem: its byte offset in the one workspace allocation."""

    name: str
    offset: int
    nbytes: int
    active: bool
    fallback: str

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "offset": self.offset,
            "bytes": self.nbytes,
            "active": self.active,
            "fallback": self.fallback,
        }


@dataclass(frozen=True)
class TensorMapArg:
    """A TMA descriptor (``CUtensorMap``, 128 bytes) the launch plan encodes on the host before the kernel runs:
    ``cuTensorMapEncodeTiled`` over host array ``array``. The Python launcher (smemtile.gpu.run) and the generated
    C++ helper make the same call from the same expressions; the kernel takes it by value as
    ``const __grid_constant__ smemtile::TensorMap NAME``. Dimensions are innermost first (a row-major
    ``rows x cols`` array is ``dims = (cols, rows)``); ``row_stride`` is in bytes (a 2-D map), ``strides`` the
    byte strides of dims 1.. of a map of any rank up to 5 (e.g. attention's [batch, seq, heads, head_dim]:
    ``dims = (head_dim, seq, heads, batch)``). When ``when`` is 0 a zero-filled map is passed (the kernel must not
    use it)."""

    name: str
    array: str
    dims: tuple[str, ...]
    row_stride: str
    box: tuple[str, ...]
    swizzle: str = "128B"  # none | 32B | 64B | 128B (CU_TENSOR_MAP_SWIZZLE_*)
    when: str = "1"
    doc: str = ""
    strides: tuple[str, ...] = ()  # bytes, dims 1..; empty: (row_stride,)

    @property
    def stride_exprs(self) -> tuple[str, ...]:
        return self.strides or (self.row_stride,)


@dataclass(frozen=True)
class TensorMapPlan:
    """A :class:`TensorMapArg` evaluated for one problem (what cuTensorMapEncodeTiled receives)."""

    name: str
    array: str
    dtype: str  # spec dtype of the array (the map's CU_TENSOR_MAP_DATA_TYPE_*)
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dims 1..
    box: tuple[int, ...]
    swizzle: str
    active: bool

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "array": self.array,
            "dtype": self.dtype,
            "dims": list(self.dims),
            "strides": list(self.strides),
            "box": list(self.box),
            "swizzle": self.swizzle,
            "active": self.active,
        }


@dataclass(frozen=True)
class Step:
    """One evaluated launch: kernel, grid, block, dynamic shared memory and its argument values."""

    kernel: str  # name expression of the main kernel, or the extern "C" name
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    args: tuple[tuple[Any, str], ...]  # (value or host-array name, C++ type)
    main: bool
    cluster: tuple[int, int, int] = (1, 1, 1)

    def to_dict(self) -> dict:
        return {
            "kernel": self.kernel,
            "grid": list(self.grid),
            "block": list(self.block),
            "cluster": list(self.cluster),
            "dynamic_smem_bytes": self.dynamic_smem_bytes,
            "main": self.main,
        }


@dataclass(frozen=True)
class LaunchConfig:
    """The launch of one configuration on one problem, as ``cuda.core``'s ``LaunchConfig`` describes it, plus
    the steps before it. The generated helper, ``--json``, ``verify``, ``tune`` and the benchmarks use it."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    static_smem_bytes: int
    cluster: tuple[int, int, int] = (1, 1, 1)
    steps: tuple[Step, ...] = ()
    tensor_maps: tuple[TensorMapPlan, ...] = ()  # encoded on the host before the steps run
    workspace: tuple[WorkspacePlan, ...] = ()  # regions of one device allocation the steps use

    @property
    def workspace_bytes(self) -> int:
        """Bytes of workspace this problem needs (0: none)."""
        return max((w.offset + w.nbytes for w in self.workspace if w.active), default=0)

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1] * self.cluster[2]

    def to_dict(self) -> dict:
        d = {
            "grid": list(self.grid),
            "block": list(self.block),
            "cluster": list(self.cluster),
            "dynamic_smem_bytes": self.dynamic_smem_bytes,
            "static_smem_bytes": self.static_smem_bytes,
            "steps": [s.to_dict() for s in self.steps],
        }
        if self.tensor_maps:
            d["tensor_maps"] = [t.to_dict() for t in self.tensor_maps]
        if self.workspace:
            d["workspace"] = [w.to_dict() for w in self.workspace]
            d["workspace_bytes"] = self.workspace_bytes
        return d


@dataclass(frozen=True)
class Item:
    """A review-checklist item: pass / fail / n/a, always with the reason."""

    id: str
    text: str
    status: str
    reason: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


PASS, FAIL, NA = "pass", "fail", "n/a"


@dataclass(frozen=True)
class Candidate:
    """One configuration to time (``smemtile tune``): template parameters and what the model thinks of it."""

    label: str
    params: dict
    source: str  # model | spec | space
    model_rank: int | None = None  # rank in the model's full ranking (None: the model did not rank it)
    predicted: float | None = None  # TFLOP/s or GB/s
    model_reason: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class KernelConfig:
    """One instantiation: family + template parameters + buffer layouts + architecture + problem."""

    family: str
    params: dict[str, int]  # template parameters, complete
    layouts: dict[str, Layout]
    arch: Arch
    problem: dict[str, Any]
    notes: tuple[str, ...] = ()  # how the configuration was chosen (e.g. a recommendation not taken)
    defaulted: tuple[str, ...] = ()  # template parameters that took a default (not set by the user)
    suggested: tuple[str, ...] = ()  # parameters a model chose (not the user): a fallback may change them

    def may_change(self, param: str) -> bool:
        """Whether a fallback (Family.relax) may change ``param``: the user did not set it."""
        return param in self.defaulted or param in self.suggested

    def key(self) -> tuple:
        cached = self.__dict__.get("_key")  # computed once (a configuration is never changed in place)
        if cached is not None:
            return cached
        lay = tuple(sorted((k, v.template_args()) for k, v in self.layouts.items()))
        key = (
            self.family,
            tuple(sorted(self.params.items())),
            lay,
            self.arch.name,
            tuple(sorted((k, repr(v)) for k, v in self.problem.items())),
        )
        self.__dict__["_key"] = key
        return key

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "params": dict(self.params),
            "arch": self.arch.name,
            "layouts": {k: v.to_dict() for k, v in self.layouts.items()},
            "problem": dict(self.problem),
            "notes": list(self.notes),
        }


class Family:
    """Base class of a kernel family. A subclass sets the class attributes and implements the methods marked
    'each family'; everything else here is shared and must not grow a branch for one family."""

    name: str = ""
    file: str = ""  # the family's .cu file in smemtile/kernels/
    kernel: str = ""  # the template function name
    signature: tuple[str, ...] = ()  # the kernel's parameters as C++ declarations ({T}: Family.ctypes)
    params: tuple[Param, ...] = ()
    problem_keys: tuple[ProblemKey, ...] = ()
    host_args: tuple[HostArg, ...] = ()
    smem_kind: str = (
        "static"  # "static": declared __shared__ (<= the arch's static limit); "auto": dynamic above
    )
    layout_dependent_accesses: bool = False  # the instructions change with the layout (fix search re-derives)
    tolerance: float = 1e-5  # max relative error against the float64 reference
    exact: bool = False  # bit-exact comparison (copies)
    # which peak `verify` may divide by: "fp32" (the FFMA peak from the driver's clocks), "memory" (DRAM), or
    # None when no peak the driver can give applies (tensor-core kernels: compare with cuBLAS in bench/)
    peak: str | None = "fp32"
    tile_model: type | None = (
        None  # the family's TileModel class (families/tile_model.py; tiles, tune, generate)
    )
    # the family's task.yaml (smemtile/families/<name>/task.yaml, read once): small problems the checks run and
    # the problems its benchmarks measure; () without a task file; a subclass may still set them itself
    test_sizes: tuple[dict, ...] = TaskSizes()
    bench_sizes: tuple[dict, ...] = TaskSizes()
    summary: str = ""  # one line for --help and docs
    default_arch: str = "sm_90"  # the target the defaults are for (docs, tests); sm_90a for wgmma code
    output: str = ""  # the host array the reference describes (default: the first out/inout array)
    # the family's search space for Kernel Tuner (smemtile.kernel_tuner), None: not exported. ``tune``: tune
    # parameter -> (family parameter, or "pad:<buffer>" for a buffer's padding, values); ``problem_size``: the
    # problem keys Kernel Tuner's x, y, z sizes are; ``grid_div``: the tune parameters each grid axis divides by
    kernel_tuner_space: dict | None = None

    @property
    def problem_params(self) -> tuple[str, ...]:
        """Template parameters that describe the problem rather than the tile (a stencil's radius R): the tile
        model's options (ModelOption). Giving them alone still lets the model pick the tile, and every ranker
        call receives them with the problem."""
        return tuple(o.name for o in getattr(self.tile_model, "options", ()))

    # ---- each family ----------------------------------------------------------------------------------
    def threads(self, p: dict[str, int]) -> int:
        raise NotImplementedError

    def derive(self, params: dict[str, int], user: set[str], arch: Arch) -> dict[str, int]:
        """Defaults that depend on the architecture or on other parameters (only for keys not in ``user``)."""
        return params

    def auto_values(self, cfg: KernelConfig) -> dict[str, int]:
        """What the parameters left at 0 = auto resolve to for this problem (the generated file's header says
        so next to the 0), e.g. sgemm's RAGGED, hgemm's ALIGN."""
        return {}

    def violations(self, cfg: KernelConfig) -> list[str]:
        """Every broken family-specific constraint, in words (the shared ones are in :meth:`problems`)."""
        return []

    def retarget(self, params: dict[str, int], arch: Arch) -> tuple[dict[str, int], list[str]]:
        """Parameters a spec set for another architecture, adapted to ``arch`` when the user asks to generate
        for it (``--arch``), with a note per change; the default changes nothing."""
        return params, []

    def template_args(self, cfg: KernelConfig) -> list[str]:
        raise NotImplementedError

    def buffers(self, cfg: KernelConfig) -> list[dict]:
        """The shared-memory buffers as spec entries (shape expressions over :meth:`constants`)."""
        raise NotImplementedError

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        """The shared-memory instructions as spec accesses (expressions over :meth:`constants`)."""
        raise NotImplementedError

    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        raise NotImplementedError

    def make_inputs(self, cfg: KernelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Random host arrays for every array argument that is read (``in`` and ``inout``)."""
        raise NotImplementedError

    def reference(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The expected output array (float64 or exact), from the inputs."""
        raise NotImplementedError

    def work(self, problem: dict) -> tuple[str, float]:
        """('tflops', flop count) or ('gbps', bytes moved) of one launch."""
        raise NotImplementedError

    def small_problem(self, cfg: KernelConfig) -> dict:
        """A small problem of whole tiles for ncu (every lane active, instruction counts exact)."""
        raise NotImplementedError

    def repeats_per_block(self, cfg: KernelConfig) -> int:
        """How often each access runs per block (e.g. once per K tile)."""
        return 1

    def access_repeats(self, cfg: KernelConfig) -> dict[str, float]:
        """Accesses that run a different number of times per block than :meth:`repeats_per_block` (mean over the
        blocks), e.g. sgemm's RAGGED loop, which copies A one way for the whole K tiles it streams and the other
        way for the prologue and the tail."""
        return {}

    def pipeline_items(self, cfg: KernelConfig, ptx: str | None) -> list[Item]:
        """Checklist items about the cp.async pipeline, from the compiled PTX when given."""
        why = "single-stage tile, no cp.async pipeline"
        return [Item(i, t, NA, why) for i, t in PIPELINE_ITEMS]

    def one_block_reason(self, cfg: KernelConfig, occ: dict) -> str | None:
        """A stated reason for 1 block per SM when the configuration chose it on purpose."""
        return None

    def relax(self, cfg: KernelConfig, spilled_bytes: int) -> tuple[KernelConfig, str] | None:
        """A configuration that spills less, changing only parameters the user left at their default."""
        return None

    def ranker(self, problem: dict, arch: str, gpu: str | None, rank=None):
        """The tile model for this family (``smemtile tune``): an object with ``top(k) -> [params]`` and
        ``__call__(params, source) -> Candidate``; None when the family has no model. A model that ranks its own
        sizes (tile_model.SizesModel) gives it through ``ranker_for``; ``rank``: another loop, for tests."""
        make = getattr(self.tile_model, "ranker_for", None)
        return make(self, problem, arch, gpu, rank) if make is not None else None

    def reads(self, cfg: KernelConfig, array: str) -> bool:
        """Whether the kernel reads ``array`` (an ``inout`` output that is not read is poisoned before a check)."""
        arg = next(a for a in self.host_args if a.name == array)
        return arg.role != "out"

    def output_arg(self) -> HostArg:
        name = self.output or next(a.name for a in self.host_args if a.role in ("out", "inout"))
        return next(a for a in self.host_args if a.name == name)

    def array_shape(self, cfg: KernelConfig, arg: HostArg) -> tuple[int, ...]:
        env = self.env(cfg)
        return tuple(_eval(x, env, f"{self.name} shape of {arg.name}") for x in arg.shape)

    def array_dtype(self, cfg: KernelConfig, arg: HostArg) -> str:
        """The spec dtype of an array argument (``dtype`` may name a problem key, e.g. transpose's)."""
        return str(cfg.problem.get(arg.dtype, arg.dtype))

    def ctypes(self, cfg: KernelConfig) -> dict[str, str]:
        """Values of the ``{T}``-style placeholders in ``signature`` and ``host_args``."""
        return {}

    def stages(self, p: dict[str, int]) -> int:
        return 1

    def kernel_signature(self, cfg: KernelConfig) -> tuple[str, ...]:
        """The main kernel's parameters for this configuration (``signature`` unless a path of the family
        takes others, e.g. an sm_90a kernel's tensor maps)."""
        return self.signature

    def tensor_maps(self, cfg: KernelConfig) -> list[TensorMapArg]:
        """TMA descriptors the launch plan encodes before the kernel (none by default)."""
        return []

    def workspaces(self, cfg: KernelConfig) -> list[Workspace]:
        """Device memory the launch plan uses besides the user's arrays (none by default)."""
        return []

    def default_layouts(self, cfg: KernelConfig) -> dict[str, Layout]:
        """Layouts of buffers the kernel fixes itself (e.g. a TMA swizzle mode); the rest default to dense."""
        return {}

    def decode_output(self, cfg: KernelConfig, raw: np.ndarray) -> np.ndarray:
        """The output array as numbers for the comparison (bf16 travels as raw bits: decoded here)."""
        return raw

    def tolerance_for(self, cfg: KernelConfig) -> float:
        """The check's tolerance for this configuration (``tolerance`` unless the output type changes it)."""
        return self.tolerance

    def layout_rules(self, cfg: KernelConfig) -> list[str]:
        """What the launch assumes about the user's buffers beyond :meth:`requires` (aliasing, alignment it handles
        itself, ...), one line each: the generated helper's comment states them."""
        return []

    def dense_layout(self, problem: dict) -> dict[str, str]:
        """``{leading-dimension key: expression}`` of the dense layout (the problem's other keys decide it, e.g.
        hgemm's ldb is K for a column-major B); by default each key's ``dense``."""
        return {pk.name: pk.dense for pk in self.problem_keys if pk.dense}

    # ---- shared --------------------------------------------------------------------------------------
    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}

    def source(self) -> str:
        """The family's .cu text (real C++: it compiles on its own with the shared header), from the kernels
        folder (``smemtile/kernels``, shipped in the wheel; the repository's top-level ``kernels`` links to it)."""
        return kernel_file(self.file).read_text()

    def size_keys(self) -> list[ProblemKey]:
        """The problem's sizes (integer keys that are not leading dimensions), in order: ``tiles``' SIZES."""
        return [pk for pk in self.problem_keys if pk.kind == "int" and not pk.dense]

    def problem_ints(self, problem: dict) -> dict[str, int]:
        """The problem's integer keys, each leading dimension the problem leaves out at its dense value (derived
        from the sizes every time: a problem whose K changes keeps a dense A)."""
        out = {
            pk.name: int(problem[pk.name])
            for pk in self.problem_keys
            if pk.kind == "int" and not pk.dense and pk.name in problem
        }
        for name, expr in self.dense_layout(problem).items():
            out[name] = (
                int(problem[name]) if name in problem else _eval(expr, out, f"{self.name} dense {name}")
            )
        return out

    def constants(self, cfg: KernelConfig) -> dict[str, int]:
        """Names the expressions of this family may use: template parameters, THREADS, integer problem keys."""
        out = {k: int(v) for k, v in cfg.params.items()}
        out["THREADS"] = self.threads(cfg.params)
        out.update(self.problem_ints(cfg.problem))
        return out

    def spec_doc(self, cfg: KernelConfig, *, accesses: bool = True) -> dict:
        """This configuration as a spec (YAML form): what ``analyze`` analyses and ``generate`` builds."""
        consts = self.constants(cfg)
        tile = {k: v for k, v in consts.items() if k in cfg.params}
        others = {k: v for k, v in consts.items() if k not in cfg.params and k not in ("THREADS",)}
        bufs = []
        for b in self.buffers(cfg):
            lay = cfg.layouts.get(b["name"], Layout())
            entry = dict(b)
            if lay != Layout():
                entry["layout"] = lay.to_dict()
            bufs.append(entry)
        doc: dict[str, Any] = {"arch": cfg.arch.name, "threads": consts["THREADS"], "tile": tile}
        if others:
            doc["constants"] = others
        if self.stages(cfg.params) > 1:
            doc["stages"] = self.stages(cfg.params)
        doc["buffers"] = bufs
        if accesses:
            doc["accesses"] = self.accesses(cfg)
        return doc

    def spec(self, cfg: KernelConfig):
        """The parsed :class:`~smemtile.model.spec.KernelSpec` of :meth:`spec_doc` (cached per configuration)."""
        return _spec_of(self, cfg)

    def buffer_spec(self, cfg: KernelConfig):
        """The spec with its buffers only (no accesses): cheap, for shared-memory sizes and layout checks."""
        return _spec_of(self, cfg, buffers_only=True)

    def _buffers_of(self, cfg: KernelConfig):
        """The parsed spec whose ``buffers`` are this configuration's: the full spec when it is parsed already
        (its buffers are the very ones :meth:`buffer_spec` parses: same entries, same constants), else the
        buffers-only spec."""
        return _SPECS.get((self.name, cfg.key(), False)) or self.buffer_spec(cfg)

    def smem_bytes(self, cfg: KernelConfig) -> int:
        """Shared memory per block: every buffer with its layout's padding, times its stages."""
        return self._buffers_of(cfg).smem_bytes()

    def name_expression(self, cfg: KernelConfig) -> str:
        return f"{self.kernel}<{', '.join(self.template_args(cfg))}>"

    def smem_split(self, cfg: KernelConfig) -> tuple[int, int]:
        """(static, dynamic) shared memory bytes per block."""
        smem = self.smem_bytes(cfg)
        if self.smem_kind == "static" or smem <= cfg.arch.static_smem_max:
            return smem, 0
        return 0, smem

    def env(self, cfg: KernelConfig) -> dict[str, int]:
        """Values launch expressions see: the constants and every integer problem key."""
        return self.constants(cfg)

    def align_names(self) -> dict[str, str]:
        """``{array: name}``: the byte alignment of each array argument's pointer as launch expressions see it
        (``A_align``: the largest power of two <= 256 dividing the address; a cudaMalloc'd pointer has 256)."""
        return {a.name: f"{a.name}_align" for a in self.host_args if a.array}

    def requires(self, cfg: KernelConfig) -> list[tuple[str, str]]:
        """Preconditions of the launch on the helper's arguments, as (expression, rule): the generated helper
        returns cudaErrorInvalidValue before anything runs when one is 0, the Python launcher refuses with the
        rule. Every array with a leading dimension needs it to be at least its row length; a family adds what its
        kernel cannot take (and cannot handle another way)."""
        dense = self.dense_layout(cfg.problem)  # the dense leading dimension is the row length
        out = []
        for a in self.host_args:
            if a.array and a.ld:
                row = dense[a.ld]
                out.append(
                    (f"{a.ld} >= {row}", f"{a.ld} >= {row} (the rows of {a.name} hold {row} elements)")
                )
        return out

    def launch(self, cfg: KernelConfig, align: dict[str, int] | None = None) -> LaunchConfig:
        """Evaluate :meth:`calls` for ``cfg``'s problem: the one launch everything uses. ``align``: the byte
        alignment of the arrays' pointers (default 256 each, as cudaMalloc gives); the plan may depend on it
        (e.g. a copy into a workspace for a pointer that TMA or 16-byte copies cannot take)."""
        env = dict(self.env(cfg))
        for arr, name in self.align_names().items():
            env[name] = int((align or {}).get(arr, 256))
        for expr, rule in self.requires(cfg):
            if not _eval(expr, env, f"{self.name} launch precondition"):
                raise ContractViolation(f"{self.name}: the launch needs {rule}", key="kernel")
        static, dynamic = self.smem_split(cfg)
        steps = []
        main = None
        maps = self._tensor_map_plans(cfg, env)
        work = self._workspace_plans(cfg, env)
        names = {m.name for m in maps} | {w.name for w in work}
        for call in self.calls(cfg):
            if not _eval(call.when, env, f"{self.name} launch guard"):
                continue
            grid = tuple(_eval(g, env, f"{self.name} grid") for g in call.grid)
            block = tuple(_eval(b, env, f"{self.name} block") for b in call.block)
            for axis, (g, lim) in enumerate(zip(grid, GRID_LIMITS, strict=True)):
                if not 1 <= g <= lim:
                    raise ContractViolation(
                        f"{self.name}: grid {'xyz'[axis]} = {g} for this problem is outside CUDA's 1..{lim}",
                        key="kernel",
                    )
            kernel = self.name_expression(cfg) if call.main else call.kernel
            types = self.param_types(cfg, call)
            args = tuple(
                (a if a in names else self._arg_value(a, env), t)
                for a, t in zip(call.args, types, strict=True)
            )
            cluster = tuple(_eval(c, env, f"{self.name} cluster") for c in call.cluster)
            if any(c < 1 for c in cluster) or any(g % c for g, c in zip(grid, cluster, strict=True)):
                raise ContractViolation(
                    f"{self.name}: grid {grid} is not a whole number of clusters {cluster}"
                )
            step = Step(kernel, grid, block, dynamic if call.main else 0, args, call.main, cluster)  # type: ignore[arg-type]
            steps.append(step)
            if call.main:
                main = step
        assert main is not None, f"{self.name}: the launch plan has no main kernel"
        return LaunchConfig(main.grid, main.block, dynamic, static, main.cluster, tuple(steps), maps, work)

    def _workspace_plans(self, cfg: KernelConfig, env: dict) -> tuple[WorkspacePlan, ...]:
        out, offset = [], 0
        for w in self.workspaces(cfg):
            what = f"{self.name} workspace {w.name}"
            active = bool(_eval(w.when, env, what))
            nbytes = _eval(w.elems, env, what) * ctype_bytes(w.ctype) if active else 0
            out.append(WorkspacePlan(w.name, offset, nbytes, active, w.fallback))
            offset += -(-nbytes // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
        return tuple(out)

    def _tensor_map_plans(self, cfg: KernelConfig, env: dict) -> tuple[TensorMapPlan, ...]:
        out = []
        arrays = {a.name: a for a in self.host_args if a.array}
        fallback = {w.name: w.fallback for w in self.workspaces(cfg)}
        for t in self.tensor_maps(cfg):
            what = f"{self.name} tensor map {t.name}"
            src = (
                arrays[t.array] if t.array in arrays else arrays[fallback[t.array]]
            )  # a workspace: its array's type
            out.append(
                TensorMapPlan(
                    t.name,
                    t.array,
                    self.array_dtype(cfg, src),
                    tuple(_eval(x, env, what) for x in t.dims),
                    tuple(_eval(x, env, what) for x in t.stride_exprs),
                    tuple(_eval(x, env, what) for x in t.box),
                    t.swizzle,
                    bool(_eval(t.when, env, what)),
                )
            )
        return tuple(out)

    def param_types(self, cfg: KernelConfig, call: KernelCall) -> list[str]:
        """The C++ types of ``call``'s parameters (the main kernel's signature, or the call's own)."""
        decls = self.kernel_signature(cfg) if call.main else call.params
        ctypes = self.ctypes(cfg)
        return [_decl_type(d).format(**ctypes) for d in decls]

    def _arg_value(self, arg: str, env: dict) -> Any:
        host = _by_name(tuple(self.host_args))
        if arg in host and (host[arg].array or host[arg].ctype == "float"):
            return arg  # resolved by the launcher: a device array or a float problem value
        return _eval(arg, env, f"{self.name} kernel argument {arg!r}")

    def problems(self, cfg: KernelConfig, *, accesses: bool = True) -> list[str]:
        """Every broken constraint: the family's own, then the ones all families share (``accesses=False``
        skips evaluating the access expressions: the tile model's quick screen)."""
        out = list(self.violations(cfg))
        bufs = {b["name"]: b for b in self.buffers(cfg)}
        for name in cfg.layouts:
            if name not in bufs:
                out.append(f"layout given for unknown buffer {name!r}; {self.name} has {', '.join(bufs)}")
        if out:
            return out
        try:
            spec = self.spec(cfg) if accesses else self._buffers_of(cfg)
        except SpecError as e:
            return [f"its own buffers or accesses do not hold for this configuration: {e}"]
        for b in spec.buffers:
            why = b.layout.problem(b.shape)
            if why:
                out.append(f"{b.name}: {why}")
        smem = spec.smem_bytes()
        limit = cfg.arch.smem_optin_per_block
        if smem > limit:
            out.append(
                f"shared memory {smem} bytes per block exceeds the {cfg.arch.name} opt-in limit of {limit}"
                f" bytes{self.smem_hint(cfg)}"
            )
        elif self.smem_kind == "static" and smem > cfg.arch.static_smem_max:
            out.append(
                f"its shared memory is static: {smem} bytes exceeds the {cfg.arch.static_smem_max}-byte "
                f"static limit{self.smem_hint(cfg)}"
            )
        return out

    def smem_hint(self, cfg: KernelConfig) -> str:
        return ""

    def threads_message(self, p: dict[str, int], threads: int, implied: int) -> str:
        return f"threads = {threads} but the tile needs {implied}"


PIPELINE_ITEMS = (
    ("commit_group", "cp.async.commit_group after all copies of a tile"),
    ("wait_group", "cp.async.wait_group(N) with the right N for the stage count"),
    ("barrier_after_wait", "a barrier after the wait and before reading the newly filled buffer"),
    ("ring_index", "the ring-buffer index advances every iteration"),
)


def barrier_follows_each_wait(ptx: str) -> bool:
    """In PTX order, after every ``cp.async.wait_group`` (or ``wait_all``) a ``bar.sync``/``barrier.sync`` comes
    before the next shared load (``ld.shared`` or ``ldmatrix``); the final drain wait, followed by no shared load,
    passes. The checklist's 'barrier after the wait' item, read from the compiled artefact."""
    ok, pending = True, False
    for line in ptx.splitlines():
        s = line.strip()
        if s.startswith(("cp.async.wait_group", "cp.async.wait_all")):
            pending = True
        elif pending and (s.startswith("bar.sync") or s.startswith("barrier.sync")):
            pending = False
        elif pending and (s.startswith("ld.shared") or s.startswith("ldmatrix")):
            ok, pending = False, False
    return ok


def cp_async_ring_items(ptx: str | None, want: set[int], commits_note: str, waits_note: str) -> list[Item]:
    """The four PIPELINE_ITEMS of a cp.async ring, read from the PTX: at least two commit groups (``commits_note``
    says which), every ``cp.async.wait_group`` value in ``want`` (``waits_note`` says why those), a barrier after
    every wait before the next shared load, and the ring index (n/a: it lives in registers). Without PTX the
    first three are n/a."""
    import re

    text = dict(PIPELINE_ITEMS)
    items = []
    if ptx:
        waits = {int(v) for v in re.findall(r"cp\.async\.wait_group\s+(\d+)", ptx)}
        commits = len(re.findall(r"cp\.async\.commit_group", ptx))
        ok = barrier_follows_each_wait(ptx)
        items += [
            Item(
                "commit_group",
                text["commit_group"],
                PASS if commits >= 2 else FAIL,
                f"the PTX commits {commits} groups ({commits_note})",
            ),
            Item(
                "wait_group",
                text["wait_group"],
                PASS if waits and waits <= want else FAIL,
                f"PTX wait_group values {sorted(waits)}; {waits_note}",
            ),
            Item(
                "barrier_after_wait",
                text["barrier_after_wait"],
                PASS if ok else FAIL,
                "every cp.async.wait_group is followed by bar.sync before the next shared load"
                if ok
                else "a shared load follows a wait_group before any bar.sync",
            ),
        ]
    else:
        items += [
            Item(i, text[i], NA, "not compiled (no PTX to read): run without --no-compile")
            for i in ("commit_group", "wait_group", "barrier_after_wait")
        ]
    items.append(
        Item(
            "ring_index",
            text["ring_index"],
            NA,
            "the slot offsets live in registers and are not visible in PTX; a stale slot gives wrong "
            "results, which `smemtile verify` checks on the GPU",
        )
    )
    return items


@functools.lru_cache(maxsize=64)
def _by_name(host_args: tuple[HostArg, ...]) -> dict[str, HostArg]:
    """A family's host arguments by name (read only: shared by every launch of the family)."""
    return {a.name: a for a in host_args}


def _decl_type(decl: str) -> str:
    """'const float* A' -> 'const float*'."""
    return decl.rsplit(" ", 1)[0].strip()


def _eval(text: str, env: dict, what: str) -> int:
    e = parse_expr(text, allowed=env.keys(), key=what)
    v = e(env)
    if type(v) is int:
        return v  # a name bound to a Python int
    v = np.asarray(v)
    if v.ndim:
        raise ContractViolation(f"{what} {text!r} is not a scalar")
    return int(v)


_SPECS: dict[tuple, Any] = {}


def _spec_of(family: Family, cfg: KernelConfig, buffers_only: bool = False):
    from smemtile.model.spec import spec_from_dict

    def make():
        doc = family.spec_doc(cfg, accesses=not buffers_only)
        if buffers_only:  # a kernel spec may leave its accesses out
            doc["kernel"] = {"family": family.name}
        return spec_from_dict(doc, f"<{family.name} family>")

    return memo(_SPECS, (family.name, cfg.key(), buffers_only), make)


def select(cond: str, then: str, other: str) -> str:
    """The launch-expression form of ``then if cond else other`` (the language has no conditional; ``cond`` is a
    comparison, 0 or 1): e.g. the leading dimension an operand is read with after an optional repack."""
    return f"({cond} * {then} + (1 - {cond}) * {other})"


POISON = 0xFF  # bytes around and between the rows of the user's arrays: NaN in f32, f16 and bf16


@dataclass(frozen=True)
class ArrayLayout:
    """Where a logical ``rows x cols`` array lies in the user's memory: element (r, c) at ``offset + r * ld + c``
    elements from the allocation's start (``offset`` > 0: a sub-view, e.g. a block of a bigger matrix at an odd
    address). ``elems`` is the least the allocation must hold, as cuBLAS counts it."""

    rows: int
    cols: int
    ld: int
    offset: int = 0

    @property
    def elems(self) -> int:
        return self.offset + ((self.rows - 1) * self.ld + self.cols if self.rows else 0)

    def scatter(self, a: np.ndarray) -> np.ndarray:
        """The allocation's contents (1-D) holding ``a`` at its place, poison bytes everywhere else."""
        a = np.ascontiguousarray(a).reshape(self.rows, self.cols)
        flat = np.empty(self.elems, dtype=a.dtype)
        flat.view(np.uint8)[:] = POISON
        self.view(flat)[...] = a
        return flat

    def view(self, flat: np.ndarray) -> np.ndarray:
        """The logical array inside the allocation's contents (a strided view, no copy)."""
        if not self.rows:
            return flat[:0].reshape(0, self.cols)
        full = np.lib.stride_tricks.as_strided(
            flat[self.offset :],
            shape=(self.rows, self.cols),
            strides=(self.ld * flat.itemsize, flat.itemsize),
            writeable=True,
        )
        return full

    def outside_untouched(self, flat: np.ndarray) -> bool:
        """Whether every byte outside the logical array is still poison (the kernel wrote only its elements)."""
        mask = np.ones(self.elems, dtype=bool)
        idx = self.offset + np.arange(self.rows)[:, None] * self.ld + np.arange(self.cols)[None, :]
        mask[idx.ravel()] = False
        return bool((flat[mask].view(np.uint8) == POISON).all())


def array_layout(fam: Family, cfg: KernelConfig, arg: HostArg, offset: int = 0) -> ArrayLayout:
    """The user's layout of array ``arg`` for ``cfg``'s problem (its leading dimension from the problem)."""
    shape = fam.array_shape(cfg, arg)
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    cols = int(shape[-1]) if shape else 1
    ld = fam.problem_ints(cfg.problem)[arg.ld] if arg.ld else cols
    return ArrayLayout(rows, cols, ld, offset)


def pointer_align(address: int) -> int:
    """The largest power of two <= 256 dividing ``address`` (what the generated helper computes)."""
    address = int(address)
    return 256 if address % 256 == 0 else address & -address


def subview_case(
    fam: Family, cfg: KernelConfig, pad: int = 3, offset: int = 1
) -> tuple[KernelConfig, dict[str, int]]:
    """The second layout every check runs besides the dense one: each leading dimension ``pad`` elements past
    the row length (odd: rows no longer 16-byte aligned) and every array ``offset`` elements into its allocation
    (an odd address), as a block of a bigger matrix would be. The template parameters that were left to the
    problem (``auto_values``) keep the dense problem's values: the same compiled kernel serves both."""
    ints = fam.problem_ints({k: v for k, v in cfg.problem.items() if k not in fam.dense_layout(cfg.problem)})
    lds = {k: ints[k] + pad for k in fam.dense_layout(cfg.problem)}
    sub = replace(cfg, params={**cfg.params, **fam.auto_values(cfg)}, problem={**cfg.problem, **lds})
    return sub, {a.name: offset for a in fam.host_args if a.array}


def refusal(fam: Family, cfg: KernelConfig, offsets: dict[str, int]) -> str | None:
    """Why the launch refuses this layout (the rule the helper returns cudaErrorInvalidValue for), or None:
    arrays ``offsets`` elements past 256-byte aligned allocations."""
    align = {}
    for a in fam.host_args:
        if a.array:
            item = np.dtype(NUMPY_DTYPES[fam.array_dtype(cfg, a)]).itemsize
            align[a.name] = pointer_align(int(offsets.get(a.name, 0)) * item)
    try:
        fam.launch(cfg, align=align)
    except ContractViolation as e:
        return str(e)
    return None


def with_params(cfg: KernelConfig, **changes: Any) -> KernelConfig:
    """``cfg`` with some template parameters changed (nothing else)."""
    return replace(cfg, params={**cfg.params, **changes})


_PROBLEMS: dict[tuple, dict] = {}


SWIZZLE_PROOF_TEXT = "the swizzle keeps every copy and fragment load conflict-free"


def swizzle_proof_item(fam, cfg: KernelConfig) -> Item:
    """Pass when every buffer given a layout (swizzle or padding) is conflict-free on every access of it; a
    buffer left dense is reported, not failed (nothing to prove: `analyze` shows its conflicts and the fix)."""
    from smemtile.model.analysis import analyze_spec
    from smemtile.model.banks import analyze_addresses

    per: dict[str, list] = {}
    sources = []  # copies whose excess wavefronts come from their global sources, not from the layout
    for r in analyze_spec(fam.spec(cfg)):
        ratio = r.bank.wavefronts / r.bank.ideal_wavefronts
        k = int(ratio.argmax())
        d = float(ratio[k])
        if d > 1 and r.bank.sources is not None:
            # the same shared addresses written from a coalesced source (lane * 16 bytes): what the layout alone
            # gives; rows of A or B that are not 128-byte multiples apart split the copy's groups over lines
            alone = analyze_addresses(r.bank.addresses, r.access.op, r.access.width, active=r.bank.active)
            if (alone.wavefronts == alone.ideal_wavefronts).all():
                sources.append(
                    f"{r.access.name} {int(r.bank.wavefronts[k])}/{int(r.bank.ideal_wavefronts[k])}"
                )
                d = 1.0
        per.setdefault(r.access.buffer, []).append(
            (r.access.name, int(r.bank.wavefronts[k]), int(r.bank.ideal_wavefronts[k]), d)
        )
    laid = [b for b in per if cfg.layouts[b] != Layout()]
    parts, bad = [], []
    for b, rows in per.items():
        worst = ", ".join(f"{n} {w}/{i}" for n, w, i, _ in rows)
        parts.append(f"{b} ({cfg.layouts[b].describe()}): {worst}")
        bad += [
            f"{n} {d:g}-way under {cfg.layouts[b].describe()}" for n, _, _, d in rows if d > 1 and b in laid
        ]
    text = "; ".join(parts) + " (worst instruction: wavefronts/ideal, bank model)"
    if sources:
        text += (
            f"; {', '.join(sources)} above ideal only because the global rows are not 128-byte multiples "
            "apart (conflict-free from a coalesced source: no shared layout changes that)"
        )
    if bad:
        return Item("swizzle_proof", SWIZZLE_PROOF_TEXT, FAIL, f"{', '.join(bad)}; {text}")
    if not laid:
        return Item(
            "swizzle_proof",
            SWIZZLE_PROOF_TEXT,
            NA,
            f"no buffer has a swizzle or padding: {text}; `smemtile analyze` shows the fix",
        )
    return Item("swizzle_proof", SWIZZLE_PROOF_TEXT, PASS, f"every access at its ideal wavefronts: {text}")


def ranked_problem(fam: Family, problem: dict) -> dict:
    """What a tile model ranks for: every problem key at its default (a dense one, whose default is another key's
    value, left to :func:`check_problem`), the given keys of the family over them (others ignored), checked."""
    known = {pk.name for pk in fam.problem_keys}
    full = {pk.name: pk.default for pk in fam.problem_keys if not pk.dense}
    full.update({k: v for k, v in problem.items() if k in known})
    return check_problem(fam, full)


def check_problem(fam: Family, problem: dict) -> dict:
    """The problem with defaults filled in, each value of the right kind and in range (ContractViolation).

    A pure function of the family and the given values (their types included: ``True`` is not ``1``): answered
    once per process for each (the tile models and the fix search configure one problem thousands of times)."""
    key = (fam.name, type(fam), tuple((k, type(v), v) for k, v in problem.items()))
    # an unhashable value is checked without the memo, and refused there
    return dict(memo(_PROBLEMS, key, lambda: _check_problem(fam, problem)))


def _check_problem(fam: Family, problem: dict) -> dict:
    out = {}
    known = {pk.name: pk for pk in fam.problem_keys}
    for name in problem:
        if name not in known:
            raise ContractViolation(
                f"{fam.name} has no problem key {name!r}; known: {', '.join(known)}", key=f"kernel.{name}"
            )
    for pk in fam.problem_keys:
        if pk.dense and pk.name not in problem:
            continue  # filled in below, from the other keys
        v = problem.get(pk.name, pk.default)
        where = f"kernel.{pk.name}"
        if pk.kind == "int":
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ContractViolation(f"must be a whole number, got {v!r}", key=where)
            if not 1 <= int(v) <= INT_MAX:
                raise ContractViolation(f"{v} is out of range (1..{INT_MAX})", key=where)
            v = int(v)
        elif pk.kind == "float":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(float(v)):
                raise ContractViolation(f"must be a finite number, got {v!r}", key=where)
            v = float(v)
        else:
            if v not in pk.choices:
                raise ContractViolation(f"{v!r} is not one of {', '.join(pk.choices)}", key=where)
        out[pk.name] = v
    full = fam.problem_ints(out)  # a leading dimension the problem gives must hold its rows
    for name, expr in fam.dense_layout(out).items():
        if name in out:
            need = _eval(expr, full, f"{fam.name} dense {name}")
            if out[name] < need:
                raise ContractViolation(
                    f"{out[name]} is below the row length {expr} = {need}: a leading dimension "
                    "is at least the row length",
                    key=f"kernel.{name}",
                )
    return out


__all__ = [
    "FAIL",
    "NA",
    "PASS",
    "ArrayLayout",
    "ContractViolation",
    "array_layout",
    "pointer_align",
    "refusal",
    "subview_case",
    "Family",
    "HostArg",
    "Item",
    "KernelCall",
    "KernelConfig",
    "LaunchConfig",
    "Param",
    "ProblemKey",
    "Step",
    "TensorMapArg",
    "TensorMapPlan",
    "check_problem",
    "field",
    "with_params",
]
