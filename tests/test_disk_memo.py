"""analyze's tile ranking kept on disk (smemtile/pipeline/disk_memo.py): the same answer from the cache, a new one
when the package changes, and a torn entry is a miss."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def test_analyze_the_same_from_the_cache(cache):
    """The sample's whole JSON report is the same computed, read back, and with the cache off."""
    env = {**os.environ}
    cmd = [sys.executable, "-m", "smemtile", "analyze", str(ROOT / "samples" / "sgemm_default.yaml"), "--json"]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    assert len(list(cache.glob("tiles-*.json"))) == 1
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    off = subprocess.run(
        cmd, env={**env, "SMEMTILE_ANSWER_CACHE": "0"}, capture_output=True, text=True, check=True
    ).stdout
    assert first == second == off
    assert json.loads(first)["tiles"]["ranked"]
