"""The tuning cache: JSON lines on disk that several processes share without losing or repeating work.

Pure Python (no CUDA). ``smemtile tune`` keeps one line per measured (or deterministically failed)
configuration, ``{"key": KEY, "row": {...}}``; the last line of a key wins::

    cache = open_cache(path_or_None, warn=print_to_stderr)  # --cache PATH, else the default with a fallback
    for cand in candidates:
        key = cache_key(...)
        with cache.claim(key) as hit:       # waits while another process measures this key
            if hit is None or force:
                row = measure(cand)
                cache.put(key, row)         # inside the claim: others waiting on the key then read this row
            else:
                row = hit                   # another process finished it while we waited

Why each rule:

- **One process per entry**: ``claim(key)`` holds an exclusive ``flock`` on ``<cache>.locks/<hash of key>``
  (one small lock file per key, kept: removing a lock file while another process waits on it would let a
  third lock a new file of the same name). On entry it reads what other processes appended meanwhile, so a
  configuration timed by one process is a hit for the other, never timed twice.
- **Whole lines**: ``put`` appends one ``\\n``-terminated line with a single ``write`` on an ``O_APPEND``
  descriptor under an exclusive ``flock`` of the cache file, then ``fsync``s. A line left without its end by
  ``kill -9`` is finished with a newline by the next writer, so it never merges into a new line.
- **Corrupt lines are skipped and counted** (``skipped``): not UTF-8, not JSON, not an object, no ``key`` or
  ``row``, a row without a ``status`` or an ``ok`` row without a positive finite ``time_ms`` and ``value``.
  The command prints the count as one warning line.
- **Only a regular file** is read or appended to (a FIFO or a device at the cache path is an error, never a
  hang or an endless read), and a cache over ``CACHE_BUDGET`` bytes is refused with its size.
- **Never stuck**: waiting for another process's entry lock ends after ``LOCK_TIMEOUT`` (300 s) with one
  warning line, and this process measures the entry itself.
- **Where**: ``--cache``, else ``$SMEMTILE_CACHE_DIR/tune.jsonl``, else ``$XDG_CACHE_HOME`` or
  ``~/.cache/smemtile/tune.jsonl``. When that folder cannot be created or written (a read-only HOME) the cache
  falls back to a private folder under the system's temporary folder, with a one-line warning (so does a
  default cache that is a folder or a FIFO: a broken cache is never blamed on the user); an explicit
  ``--cache`` that cannot be used is an error (exit 2).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from smemtile.errors import SpecError
from smemtile.fileio import printable

CACHE_BUDGET = 256 << 20  # bytes: ~500,000 results; a larger file is refused with its size, not read
LOCK_TIMEOUT = 300.0  # seconds to wait for another process's entry lock ($SMEMTILE_LOCK_TIMEOUT overrides)


def lock_timeout() -> float:
    try:
        return max(0.0, float(os.environ.get("SMEMTILE_LOCK_TIMEOUT", LOCK_TIMEOUT)))
    except ValueError:
        return LOCK_TIMEOUT


_STATUSES = ("ok", "skipped")


def default_cache_path() -> Path:
    """``$SMEMTILE_CACHE_DIR/tune.jsonl``, else ``$XDG_CACHE_HOME`` or ``~/.cache`` + ``smemtile/tune.jsonl``."""
    root = os.environ.get("SMEMTILE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "smemtile"
    )
    return Path(root) / "tune.jsonl"


def fallback_cache_path() -> Path:
    """A private folder (0700, ours, not a symlink) under the temporary folder: for a read-only HOME."""
    folder = Path(tempfile.gettempdir()) / f"smemtile-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
    except OSError as e:
        raise SpecError(f"cannot create a fallback cache folder: {e.strerror}", source=str(folder)) from None
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        raise SpecError(
            "the fallback cache folder is not a folder owned by this user; pass --cache FILE",
            source=str(folder),
        )
    return folder / "tune.jsonl"


def open_cache(path: Path | None = None, *, warn: Callable[[str], None] | None = None) -> ResultCache:
    """The cache at ``path`` (``--cache``: must be usable) or at the default path, falling back to a temporary
    folder when the default cannot be written; ``warn`` gets the one-line fallback and corrupt-line notes."""
    say = warn or (lambda _msg: None)
    if path is not None:
        cache = ResultCache(path, warn=say)
    else:
        default = default_cache_path()
        problem = _unwritable(default)
        cache = None
        if problem is None:
            try:
                cache = ResultCache(default, warn=say)
            except SpecError as e:  # a folder or a FIFO where the file should be: not the user's input
                problem = str(e).split(": ", 1)[-1]
        if cache is None:
            other = fallback_cache_path()
            say(f"cache {printable(default)}: {problem}; using {printable(other)} for this run")
            cache = ResultCache(other, warn=say)
    if cache.skipped:
        say(
            f"cache {printable(cache.path)}: skipped {cache.skipped} corrupt line{'s' if cache.skipped != 1 else ''}"
        )
    return cache


def _unwritable(path: Path) -> str | None:
    """Why the cache cannot live at ``path`` (its folder cannot be created or written), or None."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"cannot create its folder ({(e.strerror or str(e)).lower()})"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return "its folder is not writable"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is not writable"
    if path.is_dir() or (os.path.lexists(path) and not path.is_file()):
        return "it is not a regular file"
    locks = Path(str(path) + ".locks")
    if os.path.lexists(locks) and not locks.is_dir():
        return f"{printable(locks.name)} is not a folder"
    return None


def valid_row(row: object) -> bool:
    """What a cached row must hold for ``tune`` to use it (anything else is a corrupt line)."""
    if not isinstance(row, dict) or row.get("status") not in _STATUSES:
        return False
    if row["status"] == "ok":
        return all(_positive(row.get(k)) for k in ("time_ms", "value")) and isinstance(row.get("unit"), str)
    return isinstance(row.get("reason", ""), str)


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


class ResultCache:
    """Append-only JSON lines ``{"key": ..., "row": {...}}``; ``path`` None keeps results in memory only."""

    def __init__(self, path: Path | None, *, warn: Callable[[str], None] | None = None):
        self.path = Path(path) if path is not None else None
        self.warn = warn or (lambda _msg: None)
        self.rows: dict[str, dict] = {}
        self.skipped = 0  # corrupt lines seen (not counting a last line still being written)
        self._offset = 0  # bytes of the file already read
        if self.path is not None:
            self._refresh()

    # -- the get/put interface of the sweep -------------------------------------------------------------------

    def get(self, key: str) -> dict | None:
        return self.rows.get(key)

    def put(self, key: str, row: dict) -> None:
        """Record ``row`` under ``key``: in memory, and as one whole line appended to the file."""
        self.rows[key] = row
        if self.path is None:
            return
        line = (json.dumps({"key": key, "row": row}, default=str) + "\n").encode()
        self._folder()
        fd = self._open(os.O_RDWR | os.O_APPEND | os.O_CREAT)  # read: the last byte
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # one writer at a time: the torn-line repair below is not racy
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # the previous writer was killed mid-line: end that line first
            os.write(fd, line)  # one write of the whole line (O_APPEND: at the end, whoever else appends)
            os.fsync(fd)
        except OSError as e:
            raise SpecError(
                f"cannot write the tuning cache: {(e.strerror or str(e)).lower()}",
                source=printable(self.path),
            ) from None
        finally:
            os.close(fd)  # closing releases the lock

    @contextlib.contextmanager
    def claim(self, key: str) -> Iterator[dict | None]:
        """Hold ``key`` against other processes while measuring it; yields the row if one is cached by now."""
        if self.path is None:
            yield self.get(key)
            return
        self._folder()
        folder = Path(str(self.path) + ".locks")
        try:
            folder.mkdir(exist_ok=True)
            lock = os.open(
                folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock"),
                os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                0o666,
            )
        except OSError as e:
            raise SpecError(
                f"cannot lock a cache entry: {(e.strerror or str(e)).lower()}", source=printable(folder)
            ) from None
        try:
            self._lock(lock, key)  # waits while another process measures this key, at most lock_timeout()
            self._refresh()
            yield self.get(key)
        finally:
            os.close(lock)

    def _lock(self, fd: int, key: str) -> None:
        """``flock`` the entry's lock file, polling; after ``lock_timeout()`` seconds (a stuck or stopped
        ``tune`` holds it) say so in one warning and go on without the lock: this process then measures the
        entry itself, so a stuck run costs one repeated measurement, never a hang."""
        wait = lock_timeout()
        deadline, pause = time.monotonic() + wait, 0.01
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            if time.monotonic() >= deadline:
                self.warn(
                    f"cache {printable(self.path)}: entry {key[:16]} has been locked by another process for "
                    f"{wait:g} s (a stuck or stopped smemtile tune?); measuring it here"
                )
                return
            time.sleep(pause)
            pause = min(0.5, pause * 2)

    # -- reading ----------------------------------------------------------------------------------------------

    def _folder(self) -> None:
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SpecError(
                f"cannot create the tuning cache's folder: {(e.strerror or str(e)).lower()}",
                source=printable(self.path),
            ) from None

    def _open(self, flags: int) -> int:
        """An fd on the cache file, which must be a regular file (never a FIFO or a device: no hang)."""
        assert self.path is not None
        shown = printable(self.path)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise SpecError(
                f"cannot use the tuning cache: {(e.strerror or str(e)).lower()}", source=shown
            ) from None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise SpecError("the tuning cache must be a regular file (pass --cache FILE)", source=shown)
        extra = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)  # O_NONBLOCK: a FIFO swapped in
        try:  # after the stat cannot block the open; the fstat below refuses it
            fd = os.open(self.path, flags | extra, 0o666)
        except OSError as e:
            raise SpecError(
                f"cannot use the tuning cache: {(e.strerror or str(e)).lower()}", source=shown
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise SpecError("the tuning cache must be a regular file (pass --cache FILE)", source=shown)
        return fd

    def _refresh(self) -> None:
        """Read the lines appended since the last read; a last line without its newline is left for later."""
        assert self.path is not None
        if not os.path.lexists(self.path):
            return
        fd = self._open(os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > CACHE_BUDGET:
                raise SpecError(
                    f"the tuning cache is {size} bytes, over its budget of {CACHE_BUDGET >> 20} MiB; "
                    "delete it or pass --cache FILE",
                    source=printable(self.path),
                )
            if size < self._offset:  # replaced by a shorter file: read it all again
                self._offset, self.rows = 0, {}
            data = os.pread(fd, size - self._offset, self._offset) if size > self._offset else b""
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1
        for raw in data[:end].split(b"\n")[:-1]:
            self._load(raw)
        self._offset += end

    def _load(self, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            self.skipped += 1
            return
        if not (isinstance(rec, dict) and isinstance(rec.get("key"), str) and valid_row(rec.get("row"))):
            self.skipped += 1
            return
        self.rows[rec["key"]] = rec["row"]
