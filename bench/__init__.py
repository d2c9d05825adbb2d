"""The benchmarks: run from the repository root as modules (``python -m bench.run FAMILY PLAN``,
``python -m bench.bench_analyze``, ...), importing the installed ``smemtile`` package; bench/README.md says what
each one measures and writes. Nothing here edits ``sys.path``."""
