"""FAMILIES imports a family's module when it is first looked up, and is otherwise the dict an eager import gave:
the registry's order, additions after it, deletions, equality, pickling (smemtile.families.core._Families)."""

from __future__ import annotations

import pickle
import subprocess
import sys

from smemtile.families.core import _Families, load
from smemtile.families.registry import REGISTRY


def test_a_lookup_imports_that_family_only():
    code = (
        "import sys\n"
        "from smemtile.families import FAMILIES, get_family\n"
        "loaded = lambda: sorted(m.split('.')[2] for m in sys.modules\n"
        "    if m.startswith('smemtile.families.') and m.count('.') == 2 and m.split('.')[2] in FAMILIES)\n"
        "assert 'transpose' in FAMILIES and 'sgemm' in FAMILIES\n"
        "print(loaded())\n"
        "print(get_family('transpose').name, loaded())\n"
        "print(list(FAMILIES) == list(__import__('smemtile.families.registry').families.registry.REGISTRY))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "[]"  # `in` imports nothing
    assert lines[1] == "transpose ['transpose']"  # one lookup, one family
    assert lines[2] == "True"  # listing loads the rest, in the registry's order


def test_same_dict_as_the_eager_import():
    eager = {name: load(mod) for name, mod in REGISTRY.items()}
    lazy = _Families(REGISTRY)
    assert lazy["hgemm"] is eager["hgemm"]  # one module, one FAMILY
    assert len(lazy) == len(eager)
    assert lazy == eager and list(lazy) == list(eager)
    assert list(lazy.items()) == list(eager.items())
    assert pickle.loads(pickle.dumps(lazy)).keys() == eager.keys()


def test_additions_and_deletions_keep_the_eager_order():
    names = list(REGISTRY)
    lazy = _Families(REGISTRY)
    lazy["extra"] = "x"  # a test's family: after the registry's
    del lazy[names[1]]  # deleted before it was ever loaded
    assert names[1] not in lazy and lazy.get(names[1]) is None
    assert len(lazy) == len(names)
    assert list(lazy) == [names[0], *names[2:], "extra"]
    lazy[names[1]] = "back"  # re-added: last, as a dict does
    assert list(lazy)[-1] == names[1] and lazy[names[1]] == "back"
