"""One exception family. Each maps to a documented exit code of the CLI.

Exit codes: 0 success; 1 the analysed thing fails (mismatch, does not fit); 2 bad input or usage;
3 no GPU / CUDA unavailable.
"""

from __future__ import annotations


class SmemtileError(Exception):
    """Base class. ``exit_code`` is what the CLI returns."""

    exit_code = 2


class SpecError(SmemtileError):
    """Bad user input: a spec file, an expression, a flag value.

    The message is one line that names the file, the key and the allowed values.
    """

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None):
        self.source = source
        self.key = key
        prefix = ""
        if source:
            prefix += f"{source}: "
        if key:
            prefix += f"{key}: "
        super().__init__(prefix + message)


class OutOfResources(SmemtileError):
    """The configuration cannot run on the architecture (shared memory, registers, threads)."""

    exit_code = 1


class VerificationFailed(SmemtileError):
    """A generated kernel computed a wrong result."""

    exit_code = 1


class CompileError(SmemtileError):
    """NVRTC or nvcc rejected a kernel."""

    exit_code = 1


class NoDevice(SmemtileError):
    """No GPU, no driver or no CUDA Python bindings."""

    exit_code = 3
