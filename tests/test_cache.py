"""Response cache: loose files and pack segments (round trip, backward compatibility, concurrent
writers, killed writers, damaged segments, index of many entries)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmaker.io import iter_jsonl
from benchmaker.providers.cache import ResponseCache, content_key

SRC = str(Path(__file__).resolve().parents[1] / "src")


def k(i) -> str:
    return content_key({"item": i})


def rec(i) -> dict:
    return {"answer": {"i": i, "text": f"answer ü {i}"}, "model": "m", "usage": {"input_tokens": i}}


def packs(d: Path) -> list[Path]:
    return sorted((d / "packs").glob("*.pack")) if (d / "packs").exists() else []


def test_round_trip_bulk_and_loose(tmp_path):
    c = ResponseCache(tmp_path)
    c.put(k("loose"), rec(-1))                                   # outside a bulk block: a loose file
    assert (tmp_path / k("loose")[:2] / f"{k('loose')}.json").exists()
    with c.bulk():
        for i in range(10):
            c.put(k(i), rec(i))
        c.put("not-a-hex-key", rec(99))
        assert c.get(k(3)) == rec(3)                             # visible before it is published
        assert packs(tmp_path) == []                             # ... but nothing published yet
        assert c.contains(k(9)) and not c.contains(k(10))
    [seg] = packs(tmp_path)
    assert seg.name.startswith(f"{os.uname().nodename}.{os.getpid()}.")
    assert not list((tmp_path / "packs").glob(".*"))             # no temporary file left
    assert not [p for p in tmp_path.iterdir() if p.name not in ("packs", k("loose")[:2])]

    c2 = ResponseCache(tmp_path)
    assert [c2.get(k(i)) for i in range(10)] == [rec(i) for i in range(10)]
    assert c2.get("not-a-hex-key") == rec(99) and c2.get(k("loose")) == rec(-1)
    assert c2.get(k("nope")) is None and not c2.contains(k("nope"))
    assert (c2.hits, c2.misses) == (12, 1)
    assert c2.index_size() == 11

    # a later bulk block adds a second segment; an overwrite of a key is served from either copy
    with c2.background():                                        # the old name still works
        c2.put(k(0), rec(0))
        c2.put(k(100), rec(100))
    assert len(packs(tmp_path)) == 2 and c2.get(k(100)) == rec(100)
    assert ResponseCache(tmp_path).index_size() == 13

    off = ResponseCache(None)
    off.put(k(1), rec(1))
    with off.bulk():
        off.put(k(1), rec(1))
    assert off.get(k(1)) is None and not off.contains(k(1)) and off.misses == 1


def test_flush_publishes_and_periodic_segments(tmp_path):
    c = ResponseCache(tmp_path, segment_entries=4)
    with c.bulk():
        for i in range(10):
            c.put(k(i), rec(i))
        assert len(packs(tmp_path)) == 2                          # every 4 entries
        c.flush()
        assert len(packs(tmp_path)) == 3
        c.flush()                                                 # nothing pending: no empty segment
        assert len(packs(tmp_path)) == 3
    assert len(packs(tmp_path)) == 3
    assert all(ResponseCache(tmp_path).get(k(i)) == rec(i) for i in range(10))
    t = ResponseCache(tmp_path, segment_seconds=0.0)              # time-based: every put publishes
    with t.bulk():
        t.put(k("a"), rec(1))
        t.put(k("b"), rec(2))
        assert len(packs(tmp_path)) == 5


def test_bulk_block_ending_by_exception_still_publishes(tmp_path):
    c = ResponseCache(tmp_path)
    with pytest.raises(RuntimeError):
        with c.bulk():
            c.put(k(1), rec(1))
            raise RuntimeError("boom")
    assert ResponseCache(tmp_path).get(k(1)) == rec(1)


def test_backward_compatible_loose_files(tmp_path):
    """A cache written by the one-file-per-answer version is read as is, next to pack segments."""
    for i in range(5):
        p = tmp_path / k(i)[:2] / f"{k(i)}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(rec(i)))
    bad = tmp_path / k("bad")[:2] / f"{k('bad')}.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text('{"answer": {"i": ')                           # corrupt: a miss
    (tmp_path / k("list")[:2]).mkdir(exist_ok=True)
    (tmp_path / k("list")[:2] / f"{k('list')}.json").write_text("[1, 2]")   # not an object: a miss
    (tmp_path / "gemini-batches").mkdir()                       # other things in the cache dir
    c = ResponseCache(tmp_path)
    with c.bulk():
        c.put(k(10), rec(10))
    c2 = ResponseCache(tmp_path)
    assert [c2.get(k(i)) for i in range(5)] == [rec(i) for i in range(5)]
    assert c2.get(k(10)) == rec(10)
    assert c2.get(k("bad")) is None and c2.get(k("list")) is None
    assert all(c2.contains(k(i)) for i in (0, 4, 10))
    assert (c2.hits, c2.misses) == (6, 2)


WRITER = r"""
import os, signal, sys, time
sys.path.insert(0, {src!r})
from benchmaker.io import iter_jsonl
from benchmaker.providers.cache import ResponseCache, content_key
d, name, n, every, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
c = ResponseCache(d, segment_entries=every)
with c.bulk():
    for i in range(n):
        if i == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        key = content_key({{"item": ("shared", i % 50)}}) if i % 7 == 0 else content_key({{"item": (name, i)}})
        c.put(key, {{"answer": {{"w": name, "i": i}}, "model": "m"}})
"""


def _writer(tmp_path: Path, d: Path, name: str, n: int, every: int, kill_at: int = -1) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(src=SRC))
    return subprocess.Popen([sys.executable, str(script), str(d), name, str(n), str(every), str(kill_at)])


def test_concurrent_writers_in_two_processes(tmp_path):
    d = tmp_path / "cache"
    reader = ResponseCache(d, refresh_seconds=0.0)
    assert reader.get(content_key({"item": ("a", 1)})) is None    # index loaded before the writers run
    procs = [_writer(tmp_path, d, name, 3000, 700) for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    segs = packs(d)
    pids = [s.name.split(".")[-3] for s in segs]                 # <host>.<pid>.<uuid>.pack
    assert len(set(pids)) == 2 and all(pids.count(p) >= 4 for p in pids)   # a segment every 700 keys
    assert not list((d / "packs").glob(".*"))
    fresh = ResponseCache(d)
    for c in (fresh, reader):                                     # the early reader picks up new segments
        for name in ("a", "b"):
            for i in range(3000):
                if i % 7:
                    assert c.get(content_key({"item": (name, i)})) == {"answer": {"w": name, "i": i}, "model": "m"}
        for j in range(50):                                       # written by both: either copy is fine
            got = c.get(content_key({"item": ("shared", j)}))
            assert got["answer"]["w"] in ("a", "b") and got["answer"]["i"] % 50 == j
    assert fresh.misses == 0 and reader.misses == 1


def test_killed_writer_leaves_no_visible_partial_entries(tmp_path):
    d = tmp_path / "cache"
    p = _writer(tmp_path, d, "k", 1000, 200, kill_at=550)
    assert p.wait(timeout=120) == -signal.SIGKILL
    assert len(packs(d)) == 2                                     # entries 0..399 published
    assert len(list((d / "packs").glob(".*.tmp"))) == 1           # the unpublished window, ignored
    c = ResponseCache(d)
    assert c.index_size() == 400
    for i in range(550):
        if i % 7:
            got = c.get(content_key({"item": ("k", i)}))
            assert (got is not None) == (i < 400), i
    assert not c.contains(content_key({"item": ("k", 500)}))


def _publish(d: Path, n: int, start: int = 0) -> Path:
    c = ResponseCache(d)
    with c.bulk():
        for i in range(start, start + n):
            c.put(k(i), rec(i))
    return max(packs(d), key=lambda p: p.stat().st_mtime_ns)


def test_damaged_segment_tail_and_corrupt_records(tmp_path, caplog):
    d = tmp_path / "cache"
    seg = _publish(d, 20)
    lines = seg.read_bytes().split(b"\n")
    data_end = sum(len(ln) + 1 for ln in lines[:20])
    blob = seg.read_bytes()
    # truncated in the middle of record 15: records 0..14 are found, the rest are misses
    cut = sum(len(ln) + 1 for ln in lines[:15]) + 30
    seg.write_bytes(blob[:cut])
    c = ResponseCache(d)
    assert [c.get(k(i)) is not None for i in range(20)] == [True] * 15 + [False] * 5
    assert "damaged tail" in caplog.text
    # garbage appended after a valid trailer: indexed by scanning, every record is found
    seg.write_bytes(blob + b"\x00garbage")
    assert all(ResponseCache(d).get(k(i)) == rec(i) for i in range(20))
    # a flipped byte inside one record's JSON: that record is a miss (checksum), the rest are fine
    bad = bytearray(blob)
    at = sum(len(ln) + 1 for ln in lines[:7]) + 90
    bad[at] ^= 0x01
    seg.write_bytes(bytes(bad))
    c = ResponseCache(d)
    assert [c.get(k(i)) is not None for i in range(20)] == [i != 7 for i in range(20)]
    # a damaged footer (its checksum fails): falls back to scanning, which stops at the footer
    bad = bytearray(blob)
    bad[data_end + 5] ^= 0xFF
    seg.write_bytes(bytes(bad))
    assert all(ResponseCache(d).get(k(i)) == rec(i) for i in range(20))
    # a file that is not a segment at all: no entries, no error; other segments still served
    (d / "packs" / "junk.pack").write_bytes(b"\xff\xfe not a segment")
    _publish(d, 5, start=100)
    c = ResponseCache(d)
    assert c.get(k(100)) == rec(100) and c.get(k(0)) == rec(0)


def test_index_of_many_entries(tmp_path):
    n = 100_000
    d = tmp_path / "cache"
    c = ResponseCache(d)
    keys = [k(i) for i in range(n)]
    with c.bulk():
        for i, key in enumerate(keys):
            c.put(key, {"answer": {"i": i}})
    assert len(packs(d)) == 4                                      # 25,000 entries per segment
    fresh = ResponseCache(d)
    t = time.perf_counter()
    assert fresh.index_size() == n
    dt = time.perf_counter() - t
    assert dt < 5.0, dt                                            # ~0.05 s here: footers only
    ix = fresh._index
    assert sum(a.nbytes for a in (ix.hi, ix.lo, ix.seg, ix.off, ix.ln)) == 32 * n
    for i in range(0, n, 997):
        assert fresh.get(keys[i]) == {"answer": {"i": i}}
    assert not any(fresh.contains(k(("other", i))) for i in range(1000))


def test_batch_collect_writes_a_segment_and_a_lost_window_is_parsed_again_for_free(tmp_path, tiny_corpus,
                                                                                    monkeypatch):
    """Collect appends its answers to one pack segment (no loose file). If those answers never reach
    the cache (a collect killed before publishing), collect run again re-reads the batch output it
    had downloaded into the state dir: no new batch, no new download, nothing paid again."""
    import fake_openai
    from test_openai_batch import Shard

    f = fake_openai.start(steps=2)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    try:
        sh = Shard(tmp_path, tiny_corpus, f)
        sh.build()
        sh.submit()
        sh.collect()
        cache = Path(sh.cache)
        # beside the packs only the cross-shard claims (released once collected): no loose answer file,
        # and the answers by the bytes sent (providers/claims.py) are references in the same segment,
        # not a folder of copies
        assert len(packs(cache)) == 1 and sorted(p.name for p in cache.iterdir()) == ["claims", "packs"]
        c = ResponseCache(cache)
        assert c.index_size() == 12                       # 6 answers + 6 references by the bytes sent
        refs = [m["wire"] for m in iter_jsonl(sh.p["manifest"]) if m.get("wire")]
        assert len(refs) == 6 and all(set(c.get(w)) == {"ref"} and "answer" in c.get(c.get(w)["ref"]) for w in refs)
        assert not [p for p in (cache / "claims").rglob("*") if p.is_file()]
        ann, _, costs = sh.results()
        assert ann.height == 6 and not any(c["cached"] for c in costs)
        calls = {p: f.count(m, p) for m, p in (("POST", "/v1/batches"), ("GET", r"/v1/files/[^/]+/content"))}
        for p in packs(cache):                                    # the window that a kill would lose
            p.unlink()
        sh.collect()
        ann2, _, _ = sh.results()
        assert ann2.equals(ann)
        assert {p: f.count(m, p) for m, p in (("POST", "/v1/batches"), ("GET", r"/v1/files/[^/]+/content"))} == calls
        c = ResponseCache(cache)
        assert len(packs(cache)) == 1 and c.index_size() == 12
    finally:
        fake_openai.stop(f)


def test_answers_by_sent_bytes_are_references_not_copies(tmp_path):
    """An answer is stored once: under the wire key (the bytes sent, providers/claims.py) goes a
    reference to its content-keyed entry. Sync mode (no bulk block): a small loose file in wire/;
    batch collect (bulk): an entry of the same pack segment, no file. A full copy written by an
    earlier version is read as it is; a reference whose entry is gone is a miss (the request is sent)."""
    from benchmaker.providers.cost import Usage
    from benchmaker.providers.engine import Item
    from benchmaker.providers.parse import Outcome
    from benchmaker.providers.runners import provider_runner
    from benchmaker.providers.spec import RequestSpec, Text

    schema = {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}},
              "required": ["a"]}
    r = provider_runner("openai", stage="vision", item_type="image", cache_dir=str(tmp_path / "c"),
                        settings={"model": "gpt-5-mini", "mode": "sync"})

    def settle(n: int) -> Item:
        it = Item(f"i{n}", RequestSpec(system="s", parts=(Text(f"t{n}"),), schema=schema, schema_name="x"),
                  key=content_key(["k", n]), wire=content_key(["w", n]))
        assert r.settle(it, Outcome(True, obj={"a": str(n)}, usage=Usage(10, 0, 5, 0), paid=True),
                        attempt=1, mode="sync") == {"a": str(n)}
        return it

    sync = settle(1)                                        # sync: a loose reference in wire/
    ref = tmp_path / "c" / "wire" / sync.wire[:2] / f"{sync.wire}.json"
    assert json.loads(ref.read_text()) == {"ref": sync.key}
    assert r.wire_record(sync.wire)["answer"] == {"a": "1"} and r.wire_record(sync.wire)["usage"]["output_tokens"] == 5
    with r.cache.bulk():                                    # batch collect: in the answer's segment
        batch = settle(2)
    assert not (tmp_path / "c" / "wire" / batch.wire[:2]).exists()
    fresh = ResponseCache(tmp_path / "c")
    assert fresh.index_size() == 2 and fresh.get(batch.wire) == {"ref": batch.key}
    assert r.wire_record(batch.wire)["answer"] == {"a": "2"}
    old = content_key(["w", 3])                             # a full copy, as caches before held
    r.wire_cache.put(old, {"answer": {"a": "3"}, "model": "gpt-5-mini", "usage": {}})
    assert r.wire_record(old)["answer"] == {"a": "3"}
    (tmp_path / "c" / sync.key[:2] / f"{sync.key}.json").unlink()          # the entry itself gone
    assert r.wire_record(sync.wire) is None
