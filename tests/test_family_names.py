"""Issue 28's done-when: a family's folder is the only place that names it. No family name appears in the
package outside ``smemtile/families/`` (its folders, task files, data), ``smemtile/kernels/`` and the shipped
samples; help text, examples and options come from the registry."""

from __future__ import annotations

import re
from pathlib import Path

import smemtile
from smemtile.families.registry import NAMES

ROOT = Path(smemtile.__file__).parent
ALLOWED = ("families", "kernels", "samples")


def test_no_family_name_outside_the_family_folders():
    word = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, NAMES)) + r")(?![A-Za-z0-9_])")
    bad = []
    for f in sorted(ROOT.rglob("*")):
        rel = f.relative_to(ROOT)
        if not f.is_file() or rel.parts[0] in ALLOWED or f.suffix in (".pyc",):
            continue
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if word.search(line):
                bad.append(f"smemtile/{rel}:{i}: {line.strip()[:100]}")
    assert not bad, f"{len(bad)} lines name a family outside its folder:\n" + "\n".join(bad[:40])
