"""Reading user files and writing outputs safely: the one place smemtile opens a file it was given.

Reading (specs, ``--batch`` CSV, ``--space``, caches)::

    text = read_text(path, what="spec")          # regular files only, <= SPEC_BUDGET bytes, strict UTF-8
    for block in read_blocks(path, what="CSV file"):   # streamed, whole lines: bounded memory for any size
        ...

    - ``stat`` first: a device (/dev/zero, /dev/urandom), a socket or a folder is refused with one line
      before anything is opened, so nothing can block or read forever; the open itself is ``O_NONBLOCK`` (a path
      swapped for a FIFO after the check cannot block either) and the opened file is checked again (``fstat``).
      A FIFO or pipe (``--batch <(command)``) is read like stdin once its writer sends data; one nobody writes
      to is refused after ``FIFO_WAIT`` (30 s). Caches read with ``open_regular`` never open a FIFO.
    - UTF-8 strictly: a bad byte or an encoded lone surrogate is an error naming the line, never replaced.
    - Budgets, stated in the message: a spec is at most ``SPEC_BUDGET`` (1 MiB); a streamed file is read
      ``BLOCK`` (1 MiB) at a time and a line without its end after ``LINE_BUDGET`` (64 KiB) is refused.

Writing (``generate -o``, ``analyze --export``, ``measure --out``, ``tune``'s winner, the compile cache)::

    check_outputs({"-o": out, "--cache": cache}, {"SPEC": spec, "--space": space})   # first, before any work
    write_text_atomic(path, text, key="-o", inputs=[spec])

    0. ``check_outputs`` refuses an output that is an input or another output of the command (same inode, or
       the same resolved path for a file not there yet); ``output_option`` reads ``-o -`` as stdout and refuses
       ``-o ''``. Appended files (the tune cache, ``smemtile.cache``) take the same checks and are only
       opened when regular.

    1. ``stat(path)`` (following a final symlink: the file the user sees): a folder, a device node, a FIFO or a
       socket is refused; so is any file that *is* one of ``inputs`` (same device and inode, whatever the name).
    2. A temporary file ``.NAME.<random>.tmp`` is created next to the target with
       ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a planted file or symlink of that name is never followed or reused),
       mode 0666 & ~umask like any ``open`` (0644 usually), or the existing file's mode when it is replaced.
    3. write, ``fsync``, ``rename`` over the target (atomic: a reader sees the old or the new file, never half),
       then ``fsync`` the folder.

    A symlink at the target is followed like any ``open`` would, and the file it resolves to is replaced (the
    link stays): renaming over the link itself would turn ``-o /dev/stdout`` into a regular file in /dev. A
    symlink to nothing is refused (it could point anywhere), as is one that does not resolve to the file it
    names (``/proc/self/fd/N`` of a deleted file).

Every failure is a ``SpecError`` (exit 2): one line naming the file and the reason, no traceback; the
temporary file is removed.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from smemtile.errors import SpecError

SPEC_BUDGET = 1 << 20  # bytes: a spec is a few KB; anything over 1 MiB is refused before it is read
LINE_BUDGET = 1 << 16  # bytes per line of a streamed file (a CSV row is ~40 bytes)
BLOCK = 1 << 20  # bytes read at a time from a streamed file

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def printable(text: object) -> str:
    """``text`` with every control, format or unassigned character written as an escape (``\\x1b``,
    ``\\u202e``): file names and spec names reach a terminal or a message as data, never as control codes."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else _escape(c) for c in s)


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _fail(path: object, message: str, key: str | None = None) -> SpecError:
    return SpecError(message, source=printable(path), key=key)


def _stdin(key: str | None):
    """The binary stdin a ``-`` path reads, or SpecError when there is none."""
    if sys.stdin is None:
        raise _fail("<stdin>", "stdin is closed", key)
    return sys.stdin.buffer


def _reason(e: OSError) -> str:
    if e.errno == errno.ENOTDIR:
        return "a parent of this path is a file, not a folder"
    if e.errno == errno.ENOENT:
        return "no such file or folder"
    return e.strerror.lower() if e.strerror else str(e)


# ---- reading ---------------------------------------------------------------------------------------------------


def open_regular(
    path: str | os.PathLike, *, what: str = "file", key: str | None = None, fifo: bool = False
) -> tuple[int, os.stat_result]:
    """An fd open for reading on ``path`` after checking it is a regular file (before and after the open);
    with ``fifo`` a FIFO or pipe (``<(command)``) is accepted too, once its writer has sent data within
    ``fifo_wait()`` seconds (the fd is then blocking, like stdin)."""
    only = "a regular file, a FIFO or stdin" if fifo else "a regular file only"
    try:
        st = os.stat(path)
    except OSError as e:
        what_is = f"no such {what}" if e.errno == errno.ENOENT else f"cannot read: {_reason(e)}"
        raise _fail(path, what_is, key) from None
    except ValueError:  # an embedded NUL
        raise _fail(path, "not a valid file name", key) from None
    ok = stat.S_ISREG(st.st_mode) or (fifo and stat.S_ISFIFO(st.st_mode))
    if not ok:
        raise _fail(path, f"is {_kind(st.st_mode)}; a {what} is read from {only}", key)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)  # a FIFO's read end opens at once this way
    except OSError as e:
        raise _fail(path, f"cannot read: {_reason(e)}", key) from None
    st = os.fstat(fd)
    if stat.S_ISFIFO(st.st_mode) and fifo:
        _await_writer(fd, path, key)
    elif not stat.S_ISREG(st.st_mode):  # swapped between the stat and the open
        os.close(fd)
        raise _fail(path, f"is {_kind(st.st_mode)}; a {what} is read from {only}", key)
    return fd, st


FIFO_WAIT = 30.0  # seconds a FIFO's writer has to send its first byte ($SMEMTILE_FIFO_WAIT overrides)


def fifo_wait() -> float:
    try:
        return max(0.0, float(os.environ.get("SMEMTILE_FIFO_WAIT", FIFO_WAIT)))
    except ValueError:
        return FIFO_WAIT


def _await_writer(fd: int, path: object, key: str | None) -> None:
    """Wait (bounded) until the FIFO on ``fd`` has data or its writer has closed it, then make ``fd`` blocking.
    A FIFO nobody writes to is refused after ``fifo_wait()`` seconds instead of hanging."""
    import select

    wait = fifo_wait()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if not poller.poll(int(wait * 1000)):
        os.close(fd)
        raise _fail(path, f"is a FIFO (named pipe) that nothing wrote to within {wait:g} s", key)
    os.set_blocking(fd, True)


def decode_utf8(data: bytes, path: object, *, line_offset: int = 0, key: str | None = None) -> str:
    """``data`` as strict UTF-8, or one line naming the first bad byte and its line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = line_offset + data.count(b"\n", 0, e.start) + 1
        raise _fail(
            path, f"is not UTF-8 text: byte 0x{data[e.start]:02x} at line {line} ({e.reason})", key
        ) from None


def read_bytes(
    path: str | os.PathLike,
    *,
    what: str = "spec",
    budget: int = SPEC_BUDGET,
    key: str | None = None,
    fifo: bool = True,
) -> bytes:
    """The bytes of a regular file (or a FIFO unless ``fifo`` is False: caches), or of stdin for ``-``, of at
    most ``budget`` bytes (checked before and while reading)."""
    too_big = f"is over the {what} size budget of {_size(budget)}; a {what} must be at most {budget} bytes"
    if str(path) == "-":  # e.g. `smemtile tiles ... --format yaml | smemtile generate - -o k.cu`
        try:
            data = _stdin(key).read(budget + 1)
        except OSError as e:
            raise _fail("<stdin>", f"cannot read: {_reason(e)}", key) from None
        if len(data) > budget:
            raise _fail("<stdin>", too_big, key)
        return data
    fd, st = open_regular(path, what=what, key=key, fifo=fifo)
    with os.fdopen(fd, "rb") as f:
        if stat.S_ISREG(st.st_mode) and st.st_size > budget:
            raise _fail(path, f"{too_big} (it has {st.st_size})", key)
        try:
            data = f.read(budget + 1)  # +1: a file that grew after the stat is still caught
        except OSError as e:
            raise _fail(path, f"cannot read: {_reason(e)}", key) from None
    if len(data) > budget:
        raise _fail(path, too_big, key)
    return data


def read_text(
    path: str | os.PathLike,
    *,
    what: str = "spec",
    budget: int = SPEC_BUDGET,
    key: str | None = None,
    fifo: bool = True,
) -> str:
    """The text of a small user file (a spec, a ``--space`` list): regular file or FIFO, <= ``budget``, strict
    UTF-8."""
    data = read_bytes(path, what=what, budget=budget, key=key, fifo=fifo)
    return decode_utf8(data, "<stdin>" if str(path) == "-" else path, key=key)


def read_blocks(
    path: str | os.PathLike, *, what: str = "file", key: str | None = None, line_budget: int = LINE_BUDGET
) -> Iterator[str]:
    """The text of a regular file, or of stdin for ``-``, streamed in blocks of whole lines (about
    ``BLOCK`` bytes each), decoded strictly (the error names the line). Memory stays bounded whatever the size:
    a line still without its end after ``line_budget`` bytes is refused."""
    if str(path) == "-":
        yield from iter_blocks(_stdin(key), "<stdin>", key=key, line_budget=line_budget)
        return
    fd, _ = open_regular(path, what=what, key=key, fifo=True)  # `--batch <(command)` is a pipe
    with os.fdopen(fd, "rb") as f:
        yield from iter_blocks(f, path, key=key, line_budget=line_budget)


def read_lines(
    path: str | os.PathLike, *, what: str = "file", key: str | None = None, line_budget: int = LINE_BUDGET
) -> Iterator[tuple[int, str]]:
    """(line number, text with its line ending) of a regular file or stdin (``-``), streamed as ``read_blocks``."""
    n = 0
    for block in read_blocks(path, what=what, key=key, line_budget=line_budget):
        for line in block.splitlines(keepends=True):
            n += 1
            yield n, line


def iter_blocks(f, path: object, *, key: str | None = None, line_budget: int = LINE_BUDGET) -> Iterator[str]:
    """``read_blocks`` of an open binary stream; ``path`` names it in errors."""
    lines_before, rest = 0, b""
    while True:
        try:
            data = f.read(BLOCK)
        except OSError as e:
            raise _fail(path, f"cannot read: {_reason(e)}", key) from None
        if data:
            data = rest + data
            cut = data.rfind(b"\n") + 1  # 0x0a never occurs inside a multi-byte UTF-8 character
            block, rest = data[:cut], data[cut:]
        else:
            block, rest = rest, b""
        if len(rest) > line_budget:
            line = lines_before + block.count(b"\n") + 1
            raise _fail(path, f"line {line} is longer than the line budget of {_size(line_budget)}", key)
        if block:
            yield decode_utf8(block, path, line_offset=lines_before, key=key)
            lines_before += block.count(b"\n")
        if not data:
            return


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n >> 10} KiB" if n % 1024 == 0 else f"{n} bytes"


# ---- writing ---------------------------------------------------------------------------------------------------


def output_option(value: str | os.PathLike | None, key: str = "-o") -> Path | None:
    """An output option's path: None for stdout (not given, or ``-``); an empty name is refused."""
    if value is None or str(value) == "-":
        return None
    if str(value).strip() == "":
        raise _fail("''", "is an empty file name; give a file name, or - for stdout", key)
    return Path(value)


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: the same device and inode when both exist (any name, hard link
    or symlink), else the same resolved path (two names for one file that does not exist yet)."""
    if str(a) == "-" or str(b) == "-":
        return False
    try:
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    except (OSError, ValueError):
        pass
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def check_outputs(
    outputs: dict[str, str | os.PathLike | None], inputs: dict[str, str | os.PathLike | None]
) -> None:
    """Before a command does any work: refuse an output (``{"--cache": path, "-o": path}``) that is one of its
    inputs (``{"SPEC": path, "--space": path}``) or another of its outputs, with one line naming both, and one
    that is a device, a FIFO or a socket (a folder is left to the writer: ``tune -o DIR`` takes one)."""
    outs = [(k, v) for k, v in outputs.items() if v is not None and str(v) != "-"]
    for i, (key, path) in enumerate(outs):
        if not os.path.isdir(path):  # a device, a FIFO or a dangling name is refused now, not after the work
            _check_target(Path(path), key, ())
        for what, src in inputs.items():
            if src is not None and same_file(path, src):
                raise _fail(
                    path,
                    f"is the input {what} ({printable(src)}); refusing to overwrite it (choose "
                    "another file name)",
                    key,
                )
        for other, opath in outs[:i]:
            if same_file(path, opath):
                raise _fail(path, f"is also the output of {other}; give each output its own file", key)


def write_text_atomic(
    path: str | os.PathLike,
    text: str,
    *,
    key: str = "-o",
    inputs: Iterable[str | os.PathLike] = (),
    make_parents: bool = False,
) -> Path:
    """Write ``text`` (UTF-8) to ``path`` safely and atomically; see the module docstring. Returns the path."""
    return write_bytes_atomic(
        path, text.encode("utf-8", "surrogateescape"), key=key, inputs=inputs, make_parents=make_parents
    )


def write_bytes_atomic(
    path: str | os.PathLike,
    data: bytes,
    *,
    key: str = "-o",
    inputs: Iterable[str | os.PathLike] = (),
    make_parents: bool = False,
) -> Path:
    """``write_text_atomic`` of bytes: every file smemtile writes whole (outputs, exports, compile caches)."""
    target = Path(path)
    if str(path).strip() == "":
        raise _fail("''", "is an empty file name; give a file name", key)
    if target.name in ("", ".", "..") or str(path).endswith(os.sep):
        raise _fail(path, "is a folder; give a file name", key)
    mode = _check_target(target, key, inputs)
    if os.path.islink(target):
        target = _resolve_link(target, key)
    folder = target.parent
    if make_parents:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise _fail(path, "a parent of this path is a file, not a folder", key) from None
        except OSError as e:
            raise _fail(path, f"cannot create its folder: {_reason(e)}", key) from None
    fd, tmp = _create_temp(target, key)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise _fail(path, f"cannot write: {_reason(e)}", key) from None
        raise
    _fsync_folder(folder)
    return target


def _check_target(target: Path, key: str, inputs: Iterable[str | os.PathLike]) -> int | None:
    """The mode to keep (None for a new file); refuses folders, non-regular files and the inputs."""
    try:
        st = os.stat(target)
    except FileNotFoundError:  # a new file (or a dangling symlink, replaced like any symlink)
        return None
    except OSError as e:
        raise _fail(target, f"cannot write: {_reason(e)}", key) from None
    except ValueError:
        raise _fail(target, "not a valid file name", key) from None
    if stat.S_ISDIR(st.st_mode):
        raise _fail(target, "is a folder; give a file name", key)
    if not stat.S_ISREG(st.st_mode):
        raise _fail(
            target,
            f"is {_kind(st.st_mode)}; refusing to replace it with a regular file "
            "(give a regular file's name)",
            key,
        )
    for src in inputs:
        if str(src) == "-":
            continue
        try:
            ist = os.stat(src)
        except (OSError, ValueError):
            continue
        if (ist.st_dev, ist.st_ino) == (st.st_dev, st.st_ino):
            raise _fail(
                target,
                f"is the input {printable(src)}; refusing to overwrite it (choose another file name)",
                key,
            )
    return stat.S_IMODE(st.st_mode)


def _resolve_link(link: Path, key: str) -> Path:
    """The regular file ``link`` resolves to (the same file ``stat`` sees), or SpecError."""
    real = Path(os.path.realpath(link))
    try:
        seen, at = os.stat(link), os.lstat(real)
    except FileNotFoundError:
        raise _fail(link, "is a symlink to a missing file; give the real file's name", key) from None
    except OSError as e:
        raise _fail(link, f"cannot write: {_reason(e)}", key) from None
    if not stat.S_ISREG(at.st_mode) or (seen.st_dev, seen.st_ino) != (at.st_dev, at.st_ino):
        raise _fail(
            link, "is a symlink that does not resolve to a regular file; give the real file's name", key
        )
    return real


def _create_temp(target: Path, key: str) -> tuple[int, Path]:
    folder = target.parent
    stem = target.name[:80]  # the random suffix keeps the name unique; the length keeps it under NAME_MAX
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    import secrets  # here, not at the top: a few ms of every command that writes no file

    for _ in range(64):
        tmp = folder / f".{stem}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:
            where = "its folder does not exist" if e.errno == errno.ENOENT else _reason(e)
            raise _fail(target, f"cannot write: {where}", key) from None
    raise _fail(target, "cannot create a temporary file next to it", key)


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (best effort: some file systems refuse to open or sync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
