"""Where ``smemtile tune``'s steps run: ``local`` (this process times on one GPU while a pool of processes
prepares and compiles) or ``dask`` (one single-threaded worker process per GPU, pinned by
CUDA_VISIBLE_DEVICES, plus CPU workers that prepare and compile; a local cluster, or an existing scheduler's
workers on any number of hosts). The scheduling itself is smemtile.pipeline.schedule's; an executor only
starts work and says which GPU slots exist.

    ex = make_executor("dask", gpus="all", runner="smemtile.gpu.tune:GpuRunner", seed=1234)
    ex.start()                        # NoDevice (exit 3) when no GPU worker answers
    ex.slots()                        # [Slot]: one per GPU worker, with its device and cache-key env
    h = ex.prepare(doc, source, family, cand, arch)     # handles: add_done_callback, result, cancel
    h = ex.compile(cfg); h = ex.time(slot, cfg, compiled_handle)
    added, removed = ex.poll()        # workers that joined (described) or left since the last poll

An existing cluster (``--executor dask://HOST:PORT``) needs smemtile importable on every worker; GPU workers
are started one per GPU with ``CUDA_VISIBLE_DEVICES=<n> dask worker ADDRESS --nthreads 1 --resources GPU=1``
and CPU workers with ``--resources compile=1`` (without any, the workers that have no GPU compile). Dask is
imported here only, lazily: ``pip install 'smemtile[cluster]'``.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field

from smemtile.errors import NoDevice, SpecError
from smemtile.fileio import printable

GPU_RESOURCE = "GPU"
COMPILE_RESOURCE = "compile"


@dataclass(eq=False)
class Slot:
    """One GPU worker: its name, address, what ``describe()`` said (host, device, UUID) and its key env."""

    name: str
    address: str
    info: dict
    env: dict
    dead: bool = False
    in_flight: int = field(default=0, compare=False)

    @property
    def uuid(self) -> str | None:
        return self.info.get("uuid")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "address": self.address,
            "host": self.info.get("host"),
            "uuid": self.uuid,
            "pid": self.info.get("pid"),
            "device": self.info.get("device"),
            "alive": not self.dead,
        }


def parse_gpus(text: str) -> int | None:
    """``--gpus``: ``all`` (None) or a positive count."""
    if str(text).strip().lower() == "all":
        return None
    try:
        n = int(str(text))
    except ValueError:
        n = 0
    if n < 1:
        raise SpecError(f"expected 'all' or a positive number of GPUs, got {text!r}", key="--gpus")
    return n


def make_executor(
    kind: str,
    *,
    gpus: str = "all",
    runner: str,
    seed: int,
    device: int = 0,
    runner_options: dict | None = None,
    compile_options: dict | None = None,
    compile_workers: int | None = None,
):
    """``local``, ``dask`` (a local cluster) or ``dask://HOST:PORT`` (an existing scheduler)."""
    count = parse_gpus(gpus)
    if kind == "local":
        if count not in (None, 1):
            raise SpecError("the local executor times on one GPU; use --executor dask for more", key="--gpus")
        return LocalExecutor(
            runner,
            seed,
            device=device,
            runner_options=runner_options,
            compile_options=compile_options,
            compile_workers=compile_workers,
        )
    if kind == "dask" or kind.startswith(("dask://", "tcp://")):
        if kind != "dask":
            split_address(kind)  # a malformed address is one line now, not a client timeout later
        address = None if kind == "dask" else "tcp://" + kind.split("://", 1)[1]
        return DaskExecutor(
            address,
            count,
            runner,
            seed,
            runner_options=runner_options,
            compile_options=compile_options,
            compile_workers=compile_workers,
        )
    raise SpecError(f"expected local, dask or dask://HOST:PORT, got {kind!r}", key="--executor")


CONNECT_TIMEOUT = 5.0  # seconds for a dask:// scheduler to accept the connection and to send its handshake


def split_address(text: str) -> tuple[str, int]:
    """(host, port) of ``dask://HOST:PORT`` (or ``tcp://``; ``[v6]:PORT``), or SpecError naming what is wrong."""
    rest = text.split("://", 1)[1] if "://" in text else text
    shown = printable(text)
    host, sep, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    ok_host = bool(host) and all(c.isalnum() or c in ".-_:" for c in host)
    if not sep or not ok_host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SpecError(
            f"{shown!r} is not an address: expected dask://HOST:PORT (e.g. dask://10.0.0.5:8786, "
            "a port 1..65535)",
            key="--executor",
        )
    return host, int(port)


def probe_scheduler(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Check in seconds that a Dask scheduler answers at ``address``: a plain TCP connect, then the
    handshake a Dask comm sends first (msgpack naming ``compression`` and ``pickle-protocol``). Refused,
    unreachable, silent or another protocol (SSH, HTTP) is one line naming the address and what answered."""
    import socket

    host, port = split_address(address)
    where = f"dask://{printable(host)}:{port}"
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as e:
        raise SpecError(
            f"{where}: unknown host ({(e.strerror or str(e)).lower()})", key="--executor"
        ) from None
    except TimeoutError:
        raise SpecError(
            f"{where}: no answer within {timeout:g} s (a firewall, or no host there)", key="--executor"
        ) from None
    except OSError as e:
        raise SpecError(
            f"{where}: {(e.strerror or str(e)).lower()} (is a Dask scheduler running there?)",
            key="--executor",
        ) from None
    with conn:
        conn.settimeout(timeout)
        data = b""
        try:
            while len(data) < 256 and b"pickle-protocol" not in data:
                chunk = conn.recv(256)
                if not chunk:
                    break
                data += chunk
        except (TimeoutError, OSError):
            pass
    if b"pickle-protocol" in data or b"compression" in data:
        return
    if not data:
        raise SpecError(
            f"{where}: accepted the connection but sent nothing within {timeout:g} s; not a Dask "
            "scheduler (its port is usually 8786)",
            key="--executor",
        )
    said = printable(data[:40].decode("latin-1").strip())
    raise SpecError(
        f"{where}: answered {said!r}, not a Dask scheduler (its port is usually 8786)", key="--executor"
    )


def default_compile_workers(gpus: int) -> int:
    return max(1, min(32, (os.cpu_count() or 2) - gpus))


class LocalExecutor:
    """This process: a thread owns the GPU (its context is current there), a process pool prepares and
    compiles (``compile_workers`` processes; with one, a thread), so compiles overlap the timing."""

    name = "local"

    def __init__(
        self,
        runner: str,
        seed: int,
        *,
        device: int = 0,
        runner_options: dict | None = None,
        compile_options: dict | None = None,
        compile_workers: int | None = None,
    ):
        self.runner_spec, self.seed, self.device = runner, seed, device
        self.runner_options, self.compile_options = runner_options or {}, compile_options or {}
        self.cpu_workers = compile_workers or default_compile_workers(1)
        self.runner = None
        self._gpu = ThreadPoolExecutor(1, thread_name_prefix="smemtile-gpu")
        self._cpu = None
        self._procs: list = []  # the compile processes started (terminate() ends them)
        self._slot: Slot | None = None

    def start(self) -> None:
        from smemtile.gpu.tune import load_object

        def make():
            return load_object(self.runner_spec)(self.device, self.seed, **self.runner_options)

        self.runner = self._gpu.submit(make).result()  # NoDevice -> exit 3
        self._slot = Slot(f"gpu{self.device}", "local", self.runner.describe(), self.runner.env)
        if self.cpu_workers > 1:
            import multiprocessing

            # spawn, not fork: this process holds a CUDA context, which a forked child must not inherit
            self._cpu = ProcessPoolExecutor(
                self.cpu_workers, mp_context=multiprocessing.get_context("spawn"), initializer=worker_init
            )
        else:
            self._cpu = ThreadPoolExecutor(1, thread_name_prefix="smemtile-cpu")

    def slots(self) -> list[Slot]:
        return [self._slot] if self._slot else []

    def poll(self) -> tuple[list[Slot], list[str]]:
        return [], []

    def prepare(self, doc, source, family, cand, arch) -> Future:
        from smemtile.pipeline.tune import prepare

        return self._cpu.submit(prepare, doc, source, family, cand, arch)

    def compile(self, cfg) -> Future:
        from smemtile.gpu.tune import worker_compile

        return self._cpu.submit(
            worker_compile, getattr(self.runner, "compiler", None), cfg, self.compile_options
        )

    def time(self, slot: Slot, cfg, compiled) -> Future:
        from smemtile.gpu.tune import measure_row

        done = compiled.result() if compiled is not None else {}
        return self._gpu.submit(measure_row, self.runner, cfg, done.get("compiled"))

    def restart(self, slot: Slot) -> bool:
        return False  # one process: a broken context stays broken (later candidates fail with its error)

    def close(self) -> None:
        """Cancel what is queued; the compile processes exit after their current compile."""
        if self._cpu is not None:
            self._procs = [*self._procs, *(getattr(self._cpu, "_processes", None) or {}).values()]
            self._cpu.shutdown(wait=False, cancel_futures=True)
        self._gpu.shutdown(wait=False, cancel_futures=True)

    def terminate(self) -> None:
        """``close`` and end the compile processes now, a compile in flight included (``kill PID`` or Ctrl-C
        on tune leaves no process behind). The process is exiting: a write to a dead worker's pipe must not
        end it with SIGPIPE (the CLI restores SIGPIPE's default action for ``| head``)."""
        import signal

        if hasattr(signal, "SIGPIPE"):
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        self.close()
        end_processes(self._procs)


def worker_init() -> None:
    """In each compile process: Ctrl-C goes to the whole process group, but only the parent handles it (no
    traceback from every worker); and the process ends with its parent, even one killed with SIGKILL (Linux:
    ``PR_SET_PDEATHSIG``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        if os.getppid() == 1:  # the parent died before the prctl
            os._exit(0)
    except (OSError, AttributeError):
        pass


def end_processes(procs, wait: float = 3.0) -> None:
    """SIGTERM each process, wait up to ``wait`` s in all, then SIGKILL what is left."""
    import time

    for p in procs:
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    deadline = time.monotonic() + wait
    for p in procs:
        try:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass


class DaskExecutor:
    """One Dask worker per GPU (``resources={"GPU": 1}``, one thread, CUDA_VISIBLE_DEVICES=<n>) and CPU workers
    (``{"compile": 1}``); every timing is pinned to its worker, so the scheduler here knows which device (and
    which cache key) each result belongs to, and a worker that leaves loses only what was pinned to it."""

    name = "dask"

    def __init__(
        self,
        address: str | None,
        gpus: int | None,
        runner: str,
        seed: int,
        *,
        runner_options: dict | None = None,
        compile_options: dict | None = None,
        compile_workers: int | None = None,
    ):
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise SpecError(
                "dask is not installed; pip install 'smemtile[cluster]'", key="--executor"
            ) from None
        self.address, self.gpus, self.runner_spec, self.seed = address, gpus, runner, seed
        self.runner_options, self.compile_options = runner_options or {}, compile_options or {}
        self.compile_workers = compile_workers
        self.simulated = not runner.endswith(":GpuRunner")
        self.cluster = self.client = None
        self._slots: dict[str, Slot] = {}
        self._describing: dict[str, object] = {}
        self._compile_restriction: dict = {}
        self.cpu_workers = 0
        self._lock = threading.Lock()

    # -- the cluster ----------------------------------------------------------------------------------------

    def _devices(self) -> list[str]:
        """CUDA_VISIBLE_DEVICES entries of the local cluster's GPU workers."""
        if self.simulated:
            return [str(i) for i in range(self.gpus or 2)]
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        if not visible:
            from smemtile.gpu.run import device_count

            visible = [str(i) for i in range(device_count())]  # cuInit only: no context in this process
        if self.gpus is not None and self.gpus > len(visible):
            raise NoDevice(f"no CUDA GPU: --gpus {self.gpus} asked, {len(visible)} visible")
        return visible[: self.gpus or len(visible)]

    def _local_cluster(self):
        import dask
        from distributed import Nanny, Scheduler, SpecCluster

        # forkserver: workers fork from a clean server process that imported distributed once (never this one,
        # which may hold a CUDA context): a 32-worker cluster starts in about a second
        dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
        from distributed.utils import get_mp_context

        # ...and imported the workers' code too (pure Python: no CUDA library is loaded by these modules)
        get_mp_context().set_forkserver_preload(
            ["distributed", "numpy", "yaml", "smemtile.pipeline.tune", "smemtile.gpu.tune"]
        )

        devices = self._devices()
        cpus = self.compile_workers or default_compile_workers(len(devices))
        # CRITICAL in the workers: a worker's failure reaches this process as its task's exception; what a worker
        # would log itself while the cluster closes (a heartbeat to a scheduler already gone) is noise
        common = {"nthreads": 1, "memory_limit": 0, "host": "127.0.0.1", "silence_logs": logging.CRITICAL}
        # OMP/BLAS threads: the GPU workers' float64 references may use a few cores, compile workers none
        blas = str(max(1, (os.cpu_count() or 2) // max(1, len(devices)) // 2))
        workers = {
            f"gpu{d}": {
                "cls": Nanny,
                "options": {
                    **common,
                    "resources": {GPU_RESOURCE: 1},
                    "env": {"CUDA_VISIBLE_DEVICES": d, "OMP_NUM_THREADS": blas},
                },
            }
            for d in devices
        }
        for j in range(cpus):
            workers[f"cpu{j}"] = {
                "cls": Nanny,
                "options": {
                    **common,
                    "resources": {COMPILE_RESOURCE: 1},
                    "env": {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"},
                },
            }
        scheduler = {
            "cls": Scheduler,
            "options": {"host": "127.0.0.1", "port": 0, "dashboard": False, "dashboard_address": ":0"},
        }
        return SpecCluster(
            workers=workers, scheduler=scheduler, silence_logs=logging.ERROR, name="smemtile-tune"
        )

    def start(self) -> None:
        from distributed import Client

        if self.address is None:
            self.cluster = self._local_cluster()
            self.client = Client(self.cluster, set_as_default=False)
        else:
            probe_scheduler(self.address)  # seconds, one line: refused, silent, or not a Dask scheduler
            try:
                self.client = Client(self.address, set_as_default=False, timeout=CONNECT_TIMEOUT)
            except Exception as e:  # a scheduler that answered the handshake but not the client
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise SpecError(
                    f"the Dask scheduler at {printable(self.address)} did not accept a client: "
                    f"{printable(first)}",
                    key="--executor",
                ) from None
        workers = self._workers(fresh=True)
        gpu = sorted(
            (a for a, w in workers.items() if w.get("resources", {}).get(GPU_RESOURCE)),
            key=lambda a: str(workers[a].get("name")),
        )
        if self.gpus is not None:
            gpu = gpu[: self.gpus]
        if not gpu:
            raise NoDevice(
                "no CUDA GPU: the cluster has no worker with the GPU resource (dask worker --resources GPU=1)"
            )
        self._wanted = self.gpus or len(gpu)
        futures = {a: self._describe(a) for a in gpu}
        errors = []
        for addr, fut in futures.items():
            try:
                self._add(addr, workers[addr], fut.result())
            except Exception as e:  # NoDevice travels as itself; anything else names the worker
                errors.append(e)
        if not self._slots:
            raise (
                errors[0]
                if isinstance(errors[0], NoDevice)
                else NoDevice(f"no CUDA GPU worker answered: {errors[0]}")
            )
        compilers = [a for a, w in workers.items() if w.get("resources", {}).get(COMPILE_RESOURCE)]
        plain = [a for a, w in workers.items() if not w.get("resources", {}).get(GPU_RESOURCE)]
        if compilers:
            self._compile_restriction = {"resources": {COMPILE_RESOURCE: 1}}
        elif plain:
            self._compile_restriction = {"workers": plain}
        self.cpu_workers = len(compilers or plain or gpu)

    def _workers(self, fresh: bool = False) -> dict:
        """The scheduler's workers: a local cluster keeps a copy up to date in the background (no round trip
        from the scheduling loop); a remote scheduler, or ``fresh``, asks."""
        if not fresh and self.cluster is not None and getattr(self.cluster, "scheduler_info", None):
            return dict(self.cluster.scheduler_info.get("workers", {}))
        return self.client.scheduler_info(n_workers=-1)["workers"]

    def _describe(self, addr: str):
        from smemtile.gpu.tune import worker_describe

        return self.client.submit(
            worker_describe,
            self.runner_spec,
            self.seed,
            self.runner_options,
            workers=[addr],
            allow_other_workers=False,
            pure=False,
            priority=100,
        )

    def _add(self, addr: str, winfo: dict, info: dict) -> Slot:
        slot = Slot(str(winfo.get("name", addr)), addr, info, info["env"])
        self._slots[addr] = slot
        return slot

    def slots(self) -> list[Slot]:
        return [s for s in self._slots.values() if not s.dead]

    def poll(self) -> tuple[list[Slot], list[str]]:
        """Workers that left (their slots die) and GPU workers that joined (a restarted process: described)."""
        workers = self._workers()
        removed = []
        for addr, slot in self._slots.items():
            if not slot.dead and addr not in workers:
                slot.dead = True
                removed.append(slot.name)
        added = []
        live = sum(not s.dead for s in self._slots.values()) + len(self._describing)
        for addr, w in workers.items():
            if addr in self._slots or not w.get("resources", {}).get(GPU_RESOURCE):
                continue
            fut = self._describing.get(addr)
            if fut is None and live < self._wanted:
                self._describing[addr] = self._describe(addr)
                live += 1
            elif fut is not None and fut.done():
                del self._describing[addr]
                try:
                    added.append(self._add(addr, w, fut.result()))
                except Exception:
                    pass  # it cannot time: leave it out
        return added, removed

    # -- the work ---------------------------------------------------------------------------------------------

    def prepare(self, doc, source, family, cand, arch):
        from smemtile.pipeline.tune import prepare

        return self.client.submit(
            prepare, doc, source, family, cand, arch, pure=False, **self._compile_restriction
        )

    def compile(self, cfg):
        from smemtile.gpu.tune import load_object, worker_compile

        compiler = load_object(self.runner_spec).compiler
        return self.client.submit(
            worker_compile,
            compiler,
            cfg,
            self.compile_options,
            pure=False,
            priority=1,
            **self._compile_restriction,
        )

    def time(self, slot: Slot, cfg, compiled):
        from smemtile.gpu.tune import worker_measure

        return self.client.submit(
            worker_measure,
            self.runner_spec,
            self.seed,
            self.runner_options,
            cfg,
            compiled,
            workers=[slot.address],
            allow_other_workers=False,
            pure=False,
            priority=10,
        )

    def restart(self, slot: Slot) -> bool:
        """A worker whose CUDA context broke is restarted (a new process, a new context)."""
        slot.dead = True

        def go():
            try:
                self.client.restart_workers([slot.address], raise_for_error=False)
            except Exception:
                pass

        threading.Thread(target=go, daemon=True).start()
        return True

    def pid(self, slot: Slot) -> int | None:
        return slot.info.get("pid")

    def terminate(self) -> None:
        self.close()  # the local cluster's close ends its worker processes; a remote cluster's workers stay

    def close(self) -> None:
        for obj in (self.client, self.cluster):
            if obj is not None:
                try:
                    obj.close()
                except Exception:
                    pass
