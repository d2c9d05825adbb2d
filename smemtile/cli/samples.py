"""`smemtile samples [--copy DIR]`: the sample specs shipped in the package (smemtile/samples/ in the wheel).

Each is listed with one line: its ``name:`` (the title `analyze` prints), else the first sentence of its opening
comment. Besides the specs: ``kernels/`` (the `inspect` corpus: kernels with their launch YAMLs) and
``catalogues/`` (access-pattern catalogues for `measure`). ``--copy DIR`` writes the whole tree into DIR (created
if missing) after checking that none of it is there yet: an existing file is refused with one line (exit 2) and
nothing is written, so every `--help` example runs as written in DIR.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import click

from smemtile.cli.common import console, emit_json, json_option
from smemtile.errors import SpecError
from smemtile.fileio import printable


def sample_dir():
    """The packaged samples folder (an importlib.resources Traversable: a folder of the installed package)."""
    return resources.files("smemtile") / "samples"


def sample_files() -> list:
    return sorted((p for p in sample_dir().iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)


SUBFOLDERS = ("kernels", "catalogues")  # the inspect corpus, the measure catalogues
SUFFIXES = (".yaml", ".cu", ".cuh", ".ptx")


def tree_files() -> list[tuple[str, object]]:
    """(relative name, Traversable) of every shipped sample file: the specs and the subfolders' files."""
    out = [(p.name, p) for p in sample_files()]
    for sub in SUBFOLDERS:
        folder = sample_dir() / sub
        if folder.is_dir():
            out += sorted(
                ((f"{sub}/{p.name}", p) for p in folder.iterdir() if p.name.endswith(SUFFIXES)),
                key=lambda x: x[0],
            )
    return out


def describe_source(text: str) -> str:
    """One line for a kernel: the first sentence of its leading // comment."""
    comment = []
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        comment.append(line.lstrip("/").strip())
    return re.split(r"(?<=\.)\s", " ".join(comment), maxsplit=1)[0].rstrip(".:")


def describe(text: str) -> str:
    """One line for a sample: its top-level ``name:``, else the first sentence of its leading comment."""
    m = re.search(r"^name:\s*(.+?)\s*$", text, flags=re.M)
    if m:
        return m.group(1).strip("'\"")
    comment = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    first = re.split(r"(?<=\.)\s", " ".join(comment), maxsplit=1)[0]
    return first.rstrip(".:")


def samples_list() -> list[dict]:
    """The specs, the inspect kernels (each with its launch YAML) and the catalogues, one line each."""
    out = [{"file": p.name, "description": describe(p.read_text(encoding="utf-8"))} for p in sample_files()]
    for name, p in tree_files():
        if name.startswith("kernels/") and name.endswith(".cu"):
            out.append({"file": name, "description": describe_source(p.read_text(encoding="utf-8"))})
        elif name.startswith("catalogues/"):
            out.append({"file": name, "description": describe(p.read_text(encoding="utf-8"))})
    return out


@click.command(
    "samples",
    short_help="List the shipped sample specs, or copy them into a folder.",
    epilog="""\b
Examples:
  smemtile samples
  smemtile samples --copy samples     # then every --help example runs as written
  smemtile samples --json""",
)
@click.option(
    "--copy",
    "copy",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write every sample into DIR (created if missing); refused, with nothing written, if one exists.",
)
@json_option
def command(copy: Path | None, as_json: bool) -> None:
    """The sample specs shipped with smemtile, each with one line on what it shows.

    The `--help` examples name them as samples/NAME.yaml: in a clone of the repository they are there; anywhere
    else `smemtile samples --copy samples` writes them first.
    """
    items = samples_list()
    written: list[str] = []
    if copy is not None:
        written = _copy(copy)
    if as_json:
        doc: dict = {"samples": items}
        if copy is not None:
            doc["copied"] = {"folder": str(copy), "files": written}
        emit_json(doc)
        return
    from smemtile.report.banks import Grid

    con = console()
    if copy is not None:
        con.print(f"wrote {len(written)} sample files into {printable(copy)}/ (specs, kernels/, catalogues/)")
        return
    con.print(
        Grid(
            None,
            ["sample", "what it shows"],
            [[i["file"], i["description"]] for i in items],
            left=2,
            wrap_last=True,
        )
    )
    con.print(
        "Run one: smemtile analyze samples/gemm_a_column.yaml (outside a clone: smemtile samples --copy "
        "samples first)"
    )


def _copy(folder: Path) -> list[str]:
    """Every sample into ``folder``: all targets checked before the first is written (nothing half-written)."""
    from smemtile.fileio import write_text_atomic

    if folder.exists() and not folder.is_dir():
        raise SpecError(f"{printable(folder)} is a file, not a folder", key="--copy")
    files = tree_files()
    for name, _ in files:
        target = folder / name
        if target.exists() or target.is_symlink():
            raise SpecError(
                f"{printable(target)} already exists; refusing to overwrite it (nothing was written: "
                "remove it or copy into another folder)",
                key="--copy",
            )
    out = []
    for name, p in files:
        write_text_atomic(folder / name, p.read_text(encoding="utf-8"), key="--copy", make_parents=True)
        out.append(name)
    return out
