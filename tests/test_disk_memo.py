"""analyze's tile ranking kept on disk (smemtile/pipeline/disk_memo.py): the same answer from the cache, a new one
when the package changes, and a torn entry is a miss."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from smemtile.pipeline import disk_memo

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SMEMTILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SMEMTILE_ANSWER_CACHE", "1")
    monkeypatch.delenv("SMEMTILE_COMPILE_CACHE", raising=False)
    return tmp_path / "answers"


def test_answer_is_read_back_not_recomputed(cache):
    calls = []

    def answer():
        calls.append(1)
        return {"ranked": [1, 2, 3]}

    assert disk_memo.remembered("t", ["q", 1], answer) == {"ranked": [1, 2, 3]}
    assert disk_memo.remembered("t", ["q", 1], answer) == {"ranked": [1, 2, 3]}
    assert len(calls) == 1
    assert disk_memo.remembered("t", ["q", 2], answer) == {"ranked": [1, 2, 3]}
    assert len(calls) == 2
    assert len(list(cache.glob("t-*.json"))) == 2


def test_torn_or_foreign_entry_is_a_miss(cache):
    disk_memo.remembered("t", "q", lambda: 1)
    (entry,) = cache.glob("t-*.json")
    for junk in ('{"answer": ', "[1, 2]", "\xff"):
        entry.write_text(junk, encoding="latin-1")
        assert disk_memo.remembered("t", "q", lambda: 7) == 7
        assert json.loads(entry.read_text())["answer"] == 7


def test_off_switch(cache, monkeypatch):
    monkeypatch.setenv("SMEMTILE_ANSWER_CACHE", "0")
    disk_memo.remembered("t", "q", lambda: 1)
    assert not cache.exists()


def test_package_identity_changes_with_a_file(tmp_path, monkeypatch):
    first = disk_memo.package_identity()
    disk_memo.package_identity.cache_clear()
    target = Path(disk_memo.__file__)
    st = target.stat()
    try:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        assert disk_memo.package_identity() != first
    finally:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        disk_memo.package_identity.cache_clear()
    assert disk_memo.package_identity() == first


def test_analyze_the_same_from_the_cache(cache, monkeypatch):
    """The sample's whole report is the same computed, read back from disk, and with the cache off."""
    import smemtile
    from smemtile.pipeline import tiles

    sample = ROOT / "samples" / "sgemm_default.yaml"
    first = smemtile.analyze(sample, compile=False).to_dict()
    assert len(list(cache.glob("tiles-*.json"))) == 1
    calls = []
    real = tiles.ranker_for
    monkeypatch.setattr(tiles, "ranker_for", lambda *a, **k: calls.append(1) or real(*a, **k))
    second = smemtile.analyze(sample, compile=False).to_dict()
    assert calls == []  # read back, not ranked again
    monkeypatch.setenv("SMEMTILE_ANSWER_CACHE", "0")
    off = smemtile.analyze(sample, compile=False).to_dict()
    assert calls == [1]
    assert first == second == off
    assert first["tiles"]["ranked"] and first["tiles"]["this"]
