"""The streamed sweep behind ``smemtile tune``: every candidate of every problem is prepared (its layouts: the
fix search, pure Python) and compiled (NVRTC) on CPU workers while others are timed, one at a time per GPU.
The executor (smemtile.pipeline.executors) says where each step runs; this module decides what runs next.

    candidate ─prepare (CPU)─► cfg ─ cached on one of the run's devices? ─ yes ─► row (cached)
                                       │ no
                                  compile (CPU) ─► ready ─► claim(key of the GPU's device) ─► time (GPU) ─► put

- **Streamed into the cache**: a result is put while its key is claimed (``ResultCache.claim``: a per-key
  flock), so a killed run resumes where it stopped and two runs sharing a cache never time one entry twice.
  The key names the device (UUID), so a lookup tries every device of the run.
- **Bounded look-ahead**: at most ``2 x CPU workers`` prepares and compiles in flight, and a few compiled
  candidates per GPU waiting, so a sweep of thousands starts timing at once and holds little memory.
- **A GPU worker that leaves** (killed, crashed, its context broken and restarted) loses only its in-flight
  candidates: they go back to the front of the queue, at most ``MAX_REQUEUES`` times each (a candidate that
  keeps killing its worker is then a failure, with the reason).
- **Outliers**: a fresh result timed below ``OUTLIER_CLOCK`` x the run's median SM clock, or with a thermal or
  slowdown reason from NVML, is timed again on another device (the first timing is kept in ``first_timing``).
- **Winners compare like with like**: per problem, results within ``RETIME_MARGIN`` of the best that were
  timed on another device than the best's are timed again on the best's device (a cached result from that
  device counts), and the problem is ranked again.
"""

from __future__ import annotations

import collections
import queue
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from smemtile.errors import SmemtileError

WINDOW = 2  # timings pinned to one GPU worker at once: one running, the next already there
MAX_REQUEUES = 2
OUTLIER_CLOCK = 0.9
RETIME_MARGIN = 0.05
WAIT_FOR_WORKERS_S = 120.0  # with no GPU worker left, how long to wait for one to (re)join
POLL_S = 1.0  # how often the executor is asked which workers left or joined


@dataclass(eq=False)
class _Item:
    id: int
    problem: int
    row: dict
    cand: Any
    prep: dict | None = None
    compiled: Any = None
    hits: dict = field(default_factory=dict)  # device uuid -> cached row
    keys: dict = field(default_factory=dict)  # device uuid -> cache key
    final: dict | None = None
    fresh: bool = False
    requeues: int = 0


class _Requeue(Exception):
    pass


def tune_problems(
    problems: list[dict],
    executor,
    cache,
    *,
    force: bool = False,
    progress: Callable[[dict], None] | None = None,
    retime_margin: float = RETIME_MARGIN,
) -> dict:
    """Run every problem's candidates (``plan_problems`` entries) on ``executor`` (started); the result is
    ``{"rows": [[row, ...] per problem], "counts", "failures", "events", "slots", "reference", "wall_s"}``."""
    return _Run(problems, executor, cache, force, progress, retime_margin).run()


class _Run:
    def __init__(self, problems, ex, cache, force, progress, margin):
        from smemtile.pipeline.tune import candidate_row

        self.problems, self.ex, self.cache, self.force, self.progress, self.margin = (
            problems,
            ex,
            cache,
            force,
            progress,
            margin,
        )
        self.items = [
            _Item(0, p, candidate_row(c), c) for p, prob in enumerate(problems) for c in prob["candidates"]
        ]
        for i, it in enumerate(self.items):
            it.id = i
        self.events: queue.Queue = queue.Queue()
        self.to_prepare = collections.deque(self.items)
        self.to_compile: collections.deque = collections.deque()
        self.ready: collections.deque = collections.deque()  # (item, purpose, slot or None, avoid uuid)
        self.cpu_in_flight = 0
        self.compiling = 0
        self.counts = collections.Counter()
        self.assigned = collections.Counter()  # timings given to each slot
        self.log: list[dict] = []
        self.slots = {s.name: s for s in ex.slots()}
        self.threads = ThreadPoolExecutor(64, thread_name_prefix="smemtile-time")
        self.local = threading.local()
        self.t0 = time.perf_counter()
        self.first_timed: float | None = None
        self.pending_retimes = 0
        self.no_slot_since: float | None = None

    # -- the loop ---------------------------------------------------------------------------------------------

    def run(self) -> dict:
        last_poll = 0.0
        try:
            while any(it.final is None for it in self.items) or self.pending_retimes:
                now = time.perf_counter()
                if now - last_poll > POLL_S:
                    self._poll()
                    last_poll = now
                self._feed_cpu()
                self._dispatch()
                try:
                    ev = self.events.get(timeout=0.2)
                except queue.Empty:
                    continue
                getattr(self, f"_on_{ev[0]}")(*ev[1:])
                self._tick()
                if not self.pending_retimes and all(it.final is not None for it in self.items):
                    self._retime_phase()
        finally:
            self.threads.shutdown(wait=False, cancel_futures=True)
        return self._result()

    def _post(self, *ev) -> None:
        self.events.put(ev)

    def _watch(self, handle, *ev) -> None:
        handle.add_done_callback(lambda h: self._post(*ev, h))

    def _poll(self) -> None:
        added, removed = self.ex.poll()
        for name in removed:
            self.log.append({"event": "worker left", "worker": name, "t_s": self._now()})
            self.counts["workers_lost"] += 1
        for s in added:
            self.slots[s.name] = s
            self.log.append(
                {"event": "worker joined", "worker": s.name, "host": s.info.get("host"), "t_s": self._now()}
            )
        live = [s for s in self.slots.values() if not s.dead]
        if live:
            self.no_slot_since = None
        elif self.no_slot_since is None:
            self.no_slot_since = time.perf_counter()
        elif time.perf_counter() - self.no_slot_since > WAIT_FOR_WORKERS_S:
            for it in self.items:
                if it.final is None:
                    self._finish(
                        it, {"status": "skipped", "reason": "no GPU worker left to time it", "cached": False}
                    )
            self.ready.clear()

    def _now(self) -> float:
        return round(time.perf_counter() - self.t0, 3)

    # -- CPU side: prepare, look up, compile -----------------------------------------------------------------

    def _feed_cpu(self) -> None:
        # enough in flight to keep every CPU worker busy and, when compiles are quick, every GPU fed
        limit = max(2 * self.ex.cpu_workers, 4 * len(self.slots), 2)
        # compiled or compiling but not yet timed: enough for every CPU worker, a few per GPU
        waiting = len(self.ready) + sum(s.in_flight for s in self.slots.values()) + self.compiling
        ahead = max(4 * max(1, len(self.slots)), self.ex.cpu_workers)
        while self.cpu_in_flight < limit and self.to_compile and waiting < ahead:
            it = self.to_compile.popleft()
            self.cpu_in_flight += 1
            self.compiling += 1
            waiting += 1
            self._watch(self.ex.compile(it.prep["cfg"]), "compiled", it)
        while self.cpu_in_flight < limit and self.to_prepare and len(self.to_compile) + waiting < ahead:
            it = self.to_prepare.popleft()
            prob = self.problems[it.problem]
            arch = self._arch()
            self.cpu_in_flight += 1
            self._watch(
                self.ex.prepare(prob["doc"], prob["spec"], prob["family"], it.cand, arch), "prepared", it
            )

    def _arch(self):
        from smemtile.model.arch import get_arch

        live = [s for s in self.slots.values() if not s.dead] or list(self.slots.values())
        return get_arch(live[0].info["arch"])

    def _on_prepared(self, it: _Item, h) -> None:
        self.cpu_in_flight -= 1
        try:
            prep = h.result()
        except Exception as e:  # a CPU worker that died is redone by Dask; anything else is this candidate's
            prep = {
                "refused": f"prepare failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            }
        self.counts["prepared"] += 1
        if "refused" in prep:
            self._finish(it, {"status": "skipped", "reason": prep["refused"], "cached": False})
            return
        it.prep = prep
        it.row.update(name_expression=prep["name_expression"], layouts=prep["layouts"])
        if not self.force:
            for s in self.slots.values():
                hit = self.cache.get(self._key(it, s))
                if hit is not None:
                    it.hits.setdefault(hit.get("device_uuid") or s.uuid, hit)
            if it.hits:
                self.counts["cached"] += 1
                self._finish(it, {**next(iter(it.hits.values())), "cached": True})
                return
        self.to_compile.append(it)

    def _key(self, it: _Item, slot) -> str:
        from smemtile.gpu.tune import cache_key

        if slot.uuid not in it.keys:
            it.keys[slot.uuid] = cache_key(
                it.prep["cfg"], slot.env, self.ex.seed, source=it.prep.get("source_hash")
            )
        return it.keys[slot.uuid]

    def _on_compiled(self, it: _Item, h) -> None:
        self.cpu_in_flight -= 1
        self.compiling -= 1
        try:
            res = h.result()
        except Exception as e:
            res = {"error": f"compile failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        if "error" in res:
            row = {"status": "skipped", "reason": res["error"]}
            if res["error"].startswith("compile error"):  # deterministic: cached for every device of the run
                for s in self.slots.values():
                    self.cache.put(self._key(it, s), row)
            self._finish(it, {**row, "cached": False})
            return
        self.counts["compiled"] += 1
        it.compiled = h
        it.row["compile_s"] = res.get("compile_s")
        self.ready.append((it, "first", None, None))

    # -- GPU side --------------------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        live = [s for s in self.slots.values() if not s.dead]
        kept = collections.deque()
        while self.ready:
            entry = self.ready.popleft()
            it, purpose, target, avoid = entry
            if target is not None and target.dead:
                target = None
            pool = [target] if target is not None else [s for s in live if s.uuid != avoid] or live
            free = [s for s in pool if s.in_flight < WINDOW]
            if not free:
                kept.append((it, purpose, target, avoid))
                continue
            slot = min(free, key=lambda s: (s.in_flight, self.assigned[s.name]))  # ties: the least used
            slot.in_flight += 1
            self.assigned[slot.name] += 1
            fut = self.threads.submit(self._time, it, slot, purpose)
            fut.add_done_callback(
                lambda f, it=it, slot=slot, purpose=purpose: self._post("timed", it, slot, purpose, f)
            )
        self.ready = kept

    def _time(self, it: _Item, slot, purpose: str):
        """On a thread: claim the key of ``slot``'s device, time there, put; ("requeue", why) if it left."""
        key = self._key(it, slot)
        cache = self._thread_cache()
        with cache.claim(key) as hit:
            if hit is not None and purpose == "first" and not self.force:
                return "hit", hit  # another run timed it on this device meanwhile
            h = self.ex.time(slot, it.prep["cfg"], it.compiled)
            done = threading.Event()
            h.add_done_callback(lambda _h: done.set())
            while not done.wait(0.25):
                if slot.dead:
                    h.cancel()
                    raise _Requeue(f"{slot.name} left the cluster while timing it")
            try:
                row = h.result()
            except Exception as e:  # the worker died with it (KilledWorker), or it was cancelled
                raise _Requeue(
                    f"{slot.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                ) from None
            row = dict(row)
            broken = row.pop("broken", False)
            if row.pop(
                "cacheable", True
            ):  # the problem and label too: `tiles --export` marks measured points
                cache.put(key, {**row, "label": it.row.get("label"), "problem": dict(it.prep["cfg"].problem)})
            return "row", row, broken

    def _thread_cache(self):
        """This thread's view of the cache file: a ResultCache reads on (claim refreshes an offset it keeps), so
        threads that claim at once each need their own; an in-memory cache is shared."""
        from smemtile.cache import ResultCache

        if self.cache.path is None:
            return self.cache
        if getattr(self.local, "cache", None) is None:
            self.local.cache = ResultCache(self.cache.path, warn=getattr(self.cache, "warn", None))
        return self.local.cache

    def _on_timed(self, it: _Item, slot, purpose: str, f) -> None:
        slot.in_flight -= 1
        try:
            out = f.result()
        except _Requeue as e:
            self._requeue(it, purpose, str(e))
            return
        except SmemtileError as e:  # the cache cannot be written: that ends the run (exit 2)
            raise e
        if out[0] == "hit":
            self.counts["cached"] += 1
            it.hits[slot.uuid] = out[1]
            row = {**out[1], "cached": True}
        else:
            row, broken = out[1], out[2]
            if broken and self.ex.restart(slot):
                self.log.append(
                    {
                        "event": "worker restarted",
                        "worker": slot.name,
                        "why": row.get("reason"),
                        "t_s": self._now(),
                    }
                )
            self.counts["timed"] += 1
            self.first_timed = self.first_timed or time.perf_counter()
            row = {**row, "cached": False, "worker": slot.name}
            if row.get("status") == "ok":
                it.hits[slot.uuid] = row
        if purpose == "first":
            it.fresh = not row["cached"]
            it.compiled = None  # let the cluster drop the cubin; a re-time compiles again (a disk-cache hit)
            self._finish(it, row)
        else:
            self.pending_retimes -= 1
            self._retimed(it, row, purpose)

    def _requeue(self, it: _Item, purpose: str, why: str) -> None:
        it.requeues += 1
        self.counts["requeued"] += 1
        self.log.append({"event": "requeued", "candidate": it.row["label"], "why": why, "t_s": self._now()})
        if it.requeues > MAX_REQUEUES:
            row = {
                "status": "skipped",
                "reason": f"its GPU worker died {it.requeues} times while timing it (last: {why})",
                "cached": False,
            }
            if purpose == "first":
                self._finish(it, row)
            else:
                self.pending_retimes -= 1
            return
        self.ready.appendleft((it, purpose, None, None))

    def _finish(self, it: _Item, row: dict) -> None:
        it.final = {**it.row, **row}
        if row.get("status") != "ok":
            self.counts["skipped"] += 1

    # -- after the first pass: outliers, then the winners on one device --------------------------------------

    def _retime_phase(self) -> None:
        if getattr(self, "_phase", 0) == 0:
            self._phase = 1
            self._outliers()
        if not self.pending_retimes and self._phase == 1:
            self._phase = 2
            self._winners()

    def _schedule(self, it: _Item, purpose: str, target=None, avoid=None) -> None:
        self.pending_retimes += 1
        self.ready.append((it, purpose, target, avoid))

    def _outliers(self) -> None:
        fresh = [it for it in self.items if it.fresh and it.final.get("status") == "ok"]
        clocks = [it.final["sm_clock_mhz"] for it in fresh if it.final.get("sm_clock_mhz")]
        if not clocks:
            return
        median = statistics.median(clocks)
        for it in fresh:
            r = it.final
            clock = r.get("sm_clock_mhz")
            slow = clock is not None and clock < OUTLIER_CLOCK * median
            if slow or r.get("throttle"):
                why = (
                    f"SM clock {clock} MHz < {OUTLIER_CLOCK:.0%} of the run's median {median:.0f} MHz"
                    if slow
                    else f"throttled ({', '.join(r['throttle'])})"
                )
                it.row["retime_reason"] = why
                self.counts["outliers"] += 1
                self._schedule(it, "outlier", avoid=r.get("device_uuid"))

    def _winners(self) -> None:
        by_uuid = {s.uuid: s for s in self.slots.values() if not s.dead}
        for p in range(len(self.problems)):
            ok = [it for it in self.items if it.problem == p and it.final.get("status") == "ok"]
            if not ok:
                continue
            best = min(ok, key=lambda it: it.final["time_ms"])
            ref = best.final.get("device_uuid")
            target = by_uuid.get(ref)
            if target is None:
                continue  # the best's device left; the ranking stays as measured
            cut = best.final["time_ms"] * (1 + self.margin)
            for it in ok:
                r = it.final
                if it is best or r["time_ms"] > cut or r.get("device_uuid") in (None, ref):
                    continue
                if ref in it.hits and not self.force:  # that device's result is in the cache already
                    self._retimed(it, {**it.hits[ref], "cached": True}, "winner")
                else:
                    self._schedule(it, "winner", target=target)

    def _retimed(self, it: _Item, row: dict, purpose: str) -> None:
        if row.get("status") != "ok":
            return  # keep the first timing
        old = it.final
        first = {k: old.get(k) for k in ("time_ms", "device_uuid", "worker", "sm_clock_mhz", "host")}
        it.final = {
            **it.row,
            **row,
            "first_timing": first,
            "retimed": "outlier" if purpose == "outlier" else "like with like: on the best's device",
        }
        self.counts["retimed"] += 1

    # -- reporting --------------------------------------------------------------------------------------------

    def _tick(self) -> None:
        if self.progress is None:
            return
        self.progress(self.snapshot())

    def snapshot(self) -> dict:
        done = sum(it.final is not None for it in self.items)
        timed = self.counts["timed"]
        eta = None
        if self.first_timed and timed:
            rate = timed / max(time.perf_counter() - self.first_timed, 1e-3)
            eta = (len(self.items) - done + self.pending_retimes) / rate
        live = sum(not s.dead for s in self.slots.values())
        return {
            "total": len(self.items),
            "done": done,
            "prepared": self.counts["prepared"],
            "compiled": self.counts["compiled"],
            "timed": timed,
            "cached": self.counts["cached"],
            "skipped": self.counts["skipped"],
            "requeued": self.counts["requeued"],
            "retimed": self.counts["retimed"],
            "gpus": live,
            "eta_s": eta,
        }

    def _result(self) -> dict:
        rows = [[it.final for it in self.items if it.problem == p] for p in range(len(self.problems))]
        failures = collections.Counter()
        for it in self.items:
            if it.final.get("status") != "ok":
                failures[_reason_kind(it.final.get("reason", ""))] += 1
        return {
            "rows": rows,
            "counts": {
                **self.snapshot(),
                "workers_lost": self.counts["workers_lost"],
                "outliers": self.counts["outliers"],
            },
            "failures": [{"kind": k, "count": n} for k, n in failures.most_common()],
            "skipped": [
                {"problem": it.problem, "label": it.final["label"], "reason": it.final.get("reason")}
                for it in self.items
                if it.final.get("status") != "ok"
            ],
            "events": self.log,
            "slots": [s.to_dict() for s in self.slots.values()],
            "wall_s": time.perf_counter() - self.t0,
        }


def _reason_kind(reason: str) -> str:
    """The kind of a failure, for the end-of-run summary (the first words of its reason)."""
    for kind in (
        "compile error",
        "wrong result",
        "configuration refused",
        "its GPU worker died",
        "no GPU worker",
    ):
        if reason.startswith(kind):
            return kind
    return reason.split(":")[0] or "unknown"
