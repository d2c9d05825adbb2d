"""Answers of pure, slow questions kept on disk between runs (``analyze``'s tile ranking for the spec's problem).

An entry is JSON under ``$SMEMTILE_CACHE_DIR/answers`` (else ``$XDG_CACHE_HOME`` or ``~/.cache`` +
``smemtile/answers``), named by the SHA-256 of the question and of the package that answers it: every file of the
installed ``smemtile`` package (path, size, modification time), so an edited model, calibration file or family
never reads an old answer. ``SMEMTILE_ANSWER_CACHE=0`` (or ``SMEMTILE_COMPILE_CACHE=0``) turns it off. A missing, torn or
foreign entry is a miss (the answer is computed again and rewritten); an entry is written to a temporary name and
renamed, so a reader never sees half of one. Nothing here is required for a correct answer: it only saves time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENTRY_BUDGET = 1 << 20  # bytes: an answer is a few kilobytes; a larger file is not ours


def folder() -> Path | None:
    if "0" in (os.environ.get("SMEMTILE_COMPILE_CACHE", "1"), os.environ.get("SMEMTILE_ANSWER_CACHE", "1")):
        return None
    root = os.environ.get("SMEMTILE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "smemtile"
    )
    return Path(root) / "answers"


@functools.lru_cache(maxsize=1)
def package_identity() -> str:
    """Every source and data file of the package (relative path, size, mtime in ns), hashed: ~2 ms."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".") or e.name == "__pycache__":
                continue
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
            elif e.name.endswith((".py", ".json", ".yaml", ".cu", ".cuh")):
                st = e.stat()
                h.update(f"{os.path.relpath(e.path, root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _path(kind: str, question: Any) -> Path | None:
    d = folder()
    if d is None:
        return None
    doc = json.dumps(
        {"kind": kind, "q": question, "package": package_identity()}, sort_keys=True, default=repr
    )
    return d / f"{kind}-{hashlib.sha256(doc.encode()).hexdigest()[:32]}.json"


def remembered(kind: str, question: Any, answer: Callable[[], Any]) -> Any:
    """``answer()`` (JSON-serialisable), read from disk when this package answered ``question`` before."""
    path = _path(kind, question)
    if path is not None:
        try:
            if path.is_file() and path.stat().st_size <= ENTRY_BUDGET:
                doc = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(doc, dict) and "answer" in doc:
                    return doc["answer"]
        except (OSError, ValueError):
            pass  # a torn or foreign entry: answer again
    value = answer()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"answer": value}), encoding="utf-8")
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError):
            pass  # a read-only cache folder costs time, never the answer
    return value
