"""The Python package against the Rust simulator and libCacheSim's numbers.

Run by ./test.sh after `pip install ./python`; by hand:
    pip install ./python && python3 -m pytest python/tests
"""

import struct
from collections import OrderedDict
from pathlib import Path

import pytest

import cairn

TRACE = Path(__file__).resolve().parents[2] / "crates/cairn/data/cloudPhysicsIO.oracleGeneral.bin.zst"
REQUESTS = 113_872
# libCacheSim 0.3.5's misses at 1, 5, 10, 20 % of the 48,974 objects (the same
# table as crates/cairn-sim/tests/libcachesim_agreement.rs).
LIBCACHESIM = {
    "lru": [95420, 93897, 91657, 82547],
    "s3fifo": [94569, 92574, 86006, 75875],
    "arc": [94229, 92392, 88002, 80004],
}
FRACTIONS = [0.01, 0.05, 0.1, 0.2]


def test_a_cache_evicts_its_least_recently_used_object():
    cache = cairn.Cache("lru", 2)
    assert [cache.get(k) for k in [1, 2, 1, 3]] == [False, False, True, False]
    assert cache.find(1) and cache.find(3) and not cache.find(2)
    assert (len(cache), cache.used, cache.capacity, cache.name) == (2, 2, 2, "lru")
    assert cache.remove(1) and not cache.remove(1)
    assert cache.get(cairn.Request(7, 4096, "write")) is False


def test_byte_capacity_counts_sizes():
    cache = cairn.Cache("fifo", 10_000, unit="bytes")
    cache.get(1, obj_size=6000)
    cache.get(2, obj_size=6000)
    assert not cache.find(1) and cache.find(2) and cache.used == 6000


def test_sim_agrees_with_libcachesim_on_the_sample_trace():
    rows = cairn.sim(TRACE, ["lru", "s3fifo", "arc"], FRACTIONS)
    assert len(rows) == 12
    for row in rows:
        expected = LIBCACHESIM[row["policy"]][FRACTIONS.index(float(row["size"].rstrip("%")) / 100)]
        assert row["requests"] == REQUESTS
        assert row["misses"] == expected, row


def test_policy_parameters_and_the_older_s3fifo():
    v0 = cairn.sim(TRACE, ["s3fifo-v0", ("s3fifo", {"overflow_to_main_while_filling": False})], [0.05])
    assert [row["misses"] for row in v0] == [91396, 91396]  # libCacheSim aa0fc40
    assert cairn.Cache("s3fifo", 1000, small_size_ratio=0.2).capacity == 1000


def test_admission_and_prefetch_go_beside_every_policy():
    # libCacheSim 0.3.5's BloomFilterAdmissioner behind LRU (an exact table;
    # ours sized for every key), as in libcachesim_agreement.rs.
    bloom = ("bloom", {"keys_per_unit": 128, "false_positive_rate": 1e-9})
    rows = cairn.sim(TRACE, ["lru"], [0.01, 0.2], admission=bloom)
    assert [row["misses"] for row in rows] == [96657, 87337]
    # What `cairn sim -p lru -s 10% --prefetch P` prints for the sample trace.
    rows = {p: cairn.sim(TRACE, ["lru"], [0.1], prefetch=p)[0] for p in [None, "obl", "pg", "mithril"]}
    assert rows[None]["misses"] == 91657 and rows[None]["prefetched"] == 0
    assert (rows["obl"]["misses"], rows["obl"]["prefetched"], rows["obl"]["prefetch_hits"]) == (90422, 1243, 1235)
    assert (rows["pg"]["misses"], rows["pg"]["prefetched"], rows["pg"]["prefetch_hits"]) == (91577, 286, 87)
    assert (rows["mithril"]["misses"], rows["mithril"]["prefetched"], rows["mithril"]["prefetch_hits"]) == (
        79647,
        13671,
        12253,
    )
    assert all(row["hits"] + row["misses"] == REQUESTS for row in rows.values())
    with pytest.raises(ValueError, match="unknown prefetcher `nosuch`"):
        cairn.sim(TRACE, ["lru"], [0.1], prefetch="nosuch")
    with pytest.raises(ValueError, match="sequential_confidence_k"):
        cairn.sim(TRACE, ["lru"], [0.1], prefetch=("obl", {"sequential_confidence_k": 0}))


def test_warmup_is_replayed_but_not_counted():
    rows = cairn.sim(TRACE, ["lru", lru_in_python()], [0.1], warmup=20_000)
    assert [row["requests"] for row in rows] == [REQUESTS - 20_000] * 2
    assert rows[0]["misses"] == rows[1]["misses"] < 91657


def test_process_trace_matches_sim():
    cache = cairn.Cache("lru", 4897)
    miss_ratio, byte_miss_ratio = cache.process_trace(TRACE)
    assert miss_ratio == pytest.approx(91657 / REQUESTS)
    assert 0 < byte_miss_ratio < 1


def lru_in_python():
    """LRU written with libCacheSim's plugin hooks."""
    return cairn.PluginCache(2, *lru_hooks(), cache_name="py-lru")


def lru_hooks():
    """LRU's hooks: init, hit, miss, evict, remove."""

    def init(capacity):
        return OrderedDict()

    def hit(data, request):
        data.move_to_end(request.obj_id)

    def miss(data, request):
        data[request.obj_id] = True

    def evict(data, request):
        victim, _ = data.popitem(last=False)
        return victim

    def remove(data, obj_id):
        data.pop(obj_id, None)

    return init, hit, miss, evict, remove


def test_a_policy_written_in_python_runs_in_the_simulator_and_agrees_with_lru():
    plugin = lru_in_python()
    rows = cairn.sim(TRACE, ["lru", plugin], [0.01, 0.1])
    native = {row["size"]: row["misses"] for row in rows if row["policy"] == "lru"}
    python = {row["size"]: row["misses"] for row in rows if row["policy"] == "py-lru"}
    assert python == native == {"1%": 95420, "10%": 91657}


def test_a_plugin_cache_is_a_cache():
    cache = lru_in_python()
    assert [cache.get(k) for k in [1, 2, 1, 3]] == [False, False, True, False]
    assert cache.find(1) and not cache.find(2) and cache.cache_name == "py-lru"
    assert cache.remove(3) and len(cache) == 1


def test_a_hook_that_evicts_what_is_not_cached_is_an_error():
    cache = cairn.PluginCache(1, lambda c: None, lambda d, r: None, lambda d, r: None, lambda d, r: 99)
    cache.get(1)
    with pytest.raises(RuntimeError, match="returned 99, which is not in the cache"):
        cache.get(2)


def test_a_hook_that_raises_surfaces_from_sim():
    def evict(data, request):
        raise KeyError("boom")

    plugin = cairn.PluginCache(1, lambda c: None, lambda d, r: None, lambda d, r: None, evict)
    with pytest.raises(KeyError, match="boom"):
        cairn.sim(TRACE, [plugin], [0.01])


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown policy `lur`"):
        cairn.Cache("lur", 10)
    with pytest.raises(ValueError, match="invalid parameters"):
        cairn.Cache("s3fifo", 100, no_such_knob=1)
    with pytest.raises(ValueError, match="unit"):
        cairn.Cache("lru", 10, unit="blocks")
    with pytest.raises(ValueError, match="fraction"):
        cairn.sim(TRACE, ["lru"], [1.5])
    with pytest.raises(ValueError, match="resolves to 0"):
        cairn.sim(TRACE, ["lru"], [0.00001])
    with pytest.raises(OSError):
        cairn.sim("/nonexistent/trace.bin", ["lru"], [0.1])
    with pytest.raises(TypeError):
        cairn.sim(TRACE, [42], [0.1])


def write_twr_trace(path, steps):
    """An oracleSysTwrNS trace (libCacheSim's Twitter format, which carries a
    TTL per request) of (seconds, object, ttl) steps, 100-byte reads."""
    records = bytearray()
    for time, obj, ttl in steps:
        record = bytearray(34)
        struct.pack_into("<IQ", record, 0, time, obj)
        struct.pack_into("<IH", record, 14, 100, 1)  # size, op get
        struct.pack_into("<iq", record, 22, ttl, -1)  # ttl, no next access
        records += record
    path.write_bytes(bytes(records))
    return path


# Object 1 lives 10 s by its own TTL, object 3 2 s; the rest carry none
# (the trace crates/cairn/tests/cli_sim_ttl.rs works by hand).
TTL_STEPS = [(0, 1, 10), (5, 1, 0), (10, 1, 0), (11, 1, 0), (11, 2, 0), (14, 2, 0),
             (15, 2, 0), (15, 1, 0), (20, 3, 2), (22, 3, 0), (23, 3, 0)]


def test_sim_expires_objects_by_the_trace_ttls_and_a_default(tmp_path):
    trace = write_twr_trace(tmp_path / "t.oracleSysTwrNS", TTL_STEPS)

    def counts(**ttl):
        (row,) = cairn.sim(trace, ["lru"], [4], **ttl)
        return row["hits"], row["misses"], row["expired"]

    # The trace's TTLs alone: object 1 expires at 11 s, object 3 at 23 s.
    assert counts() == (6, 5, 2)
    # 3 s for the requests without one: 4 expirations.
    assert counts(ttl=3) == counts(ttl=3.0) == (4, 7, 4)
    # Trace TTLs ignored and no default: nothing expires.
    assert counts(ignore_trace_ttl=True) == (8, 3, 0)
    # A Python policy follows the same rules.
    (row,) = cairn.sim(trace, [lru_in_python()], [4], ttl=3)
    assert (row["hits"], row["misses"], row["expired"]) == (4, 7, 4)
    # The reader hands the TTLs over.
    assert [r.ttl for r in cairn.TraceReader(trace)][:2] == [10, 0]


def test_sim_with_a_default_ttl_is_cairn_sim_with_ttl():
    # What `cairn sim --trace cloudPhysicsIO.oracleGeneral.bin.zst -p lru -s 1%,10%
    # --ttl 60 [--prefetch obl] --csv -` prints; 91,657 misses at 10 % without TTL.
    rows = cairn.sim(TRACE, ["lru", lru_in_python()], [0.1], ttl=60, threads=2)
    assert [(r["misses"], r["expired"]) for r in rows] == [(96846, 5189)] * 2
    rows = cairn.sim(TRACE, ["lru"], [0.01, 0.1], prefetch="obl", ttl=60)
    assert [(r["misses"], r["prefetched"], r["prefetch_hits"], r["expired"]) for r in rows] == [
        (98814, 1243, 1235, 4629),
        (95611, 1243, 1235, 5189),
    ]


def test_a_cache_with_a_default_ttl_expires_objects():
    cache = cairn.Cache("lru", 10, default_ttl=3)

    def at(seconds, obj=1, ttl=0):
        return cairn.Request(obj, time=seconds * 1_000_000, ttl=ttl)

    # Inserted at 0 s to expire at 3 s; hits do not refresh it; at 4 s it
    # has expired: a miss that inserts it again, to expire at 7 s.
    assert [cache.get(at(t)) for t in [0, 2, 3, 4, 7, 8]] == [False, True, True, False, True, False]
    # A request's own TTL wins over the default.
    assert [cache.get(at(t, obj=2, ttl=10)) for t in [0, 9, 10, 11]] == [False, True, True, False]
    with pytest.raises(TypeError, match="needs the time"):
        cache.get(5)
    # Without a default, requests' own TTLs still count.
    plain = cairn.Cache("lru", 10)
    assert [plain.get(at(t, ttl=1)) for t in [0, 1, 2]] == [False, True, False]
    # A plugin cache too.
    plugin = cairn.PluginCache(10, *lru_hooks(), default_ttl=3)
    assert [plugin.get(at(t)) for t in [0, 3, 4]] == [False, True, False]


def test_process_trace_honours_the_trace_ttls(tmp_path):
    trace = write_twr_trace(tmp_path / "t.oracleSysTwrNS", TTL_STEPS)
    assert cairn.Cache("lru", 4).process_trace(trace)[0] == pytest.approx(5 / 11)
    assert cairn.Cache("lru", 4, default_ttl=3).process_trace(trace)[0] == pytest.approx(7 / 11)
    # No TTLs in the trace, none by default: as before.
    assert cairn.Cache("lru", 4897, default_ttl=None).process_trace(TRACE)[0] == pytest.approx(91657 / REQUESTS)


def test_the_mrc_refuses_a_trace_with_ttls(tmp_path):
    trace = write_twr_trace(tmp_path / "t.oracleSysTwrNS", TTL_STEPS)
    with pytest.raises(ValueError, match="not a stack algorithm"):
        cairn.mrc(trace)
    # Without them: LRU's curve, which sim gives at each size.
    curve = cairn.mrc(trace, ignore_trace_ttl=True)
    for size, ratio in curve:
        (row,) = cairn.sim(trace, ["lru"], [size], ignore_trace_ttl=True)
        assert row["miss_ratio"] == pytest.approx(ratio)


def test_bad_ttls_are_clear_errors():
    for bad in [-1, float("nan"), float("inf")]:
        with pytest.raises(ValueError, match="TTL"):
            cairn.sim(TRACE, ["lru"], [0.1], ttl=bad)
        with pytest.raises(ValueError, match="TTL"):
            cairn.Cache("lru", 10, default_ttl=bad)
    with pytest.raises(TypeError):
        cairn.sim(TRACE, ["lru"], [0.1], ttl="30s")


def test_the_trace_reader_yields_every_request():
    requests = list(cairn.TraceReader(TRACE))
    assert len(requests) == REQUESTS
    assert all(r.op in ("read", "write") for r in requests[:100])
    assert len({r.obj_id for r in requests}) == 48_974


def test_the_mrc_is_lru_at_every_size():
    curve = cairn.mrc(TRACE, points=5)
    assert len(curve) == 5
    ratios = [ratio for _, ratio in curve]
    assert ratios == sorted(ratios, reverse=True)
    rows = cairn.sim(TRACE, ["lru"], [size for size, _ in curve])
    for (size, ratio), row in zip(curve, rows):
        assert row["miss_ratio"] == pytest.approx(ratio, abs=1e-12), size
    assert "s3fifo-v0" in cairn.POLICIES


def test_the_example_plots_and_its_python_clock_equals_cairns(tmp_path):
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[2] / "examples/python/miss_ratio_curves.py"
    svg = tmp_path / "curves.svg"
    out = subprocess.run(
        [sys.executable, str(example), str(TRACE), str(svg)], check=True, capture_output=True, text=True
    ).stdout
    rows = {line[:16].strip(): line[16:].split() for line in out.splitlines() if line.startswith(("clock", "lru"))}
    assert rows["clock (Python)"] == rows["clock"], out
    assert rows["lru"][0] == "0.8380"
    assert svg.read_text().count("<polyline") == 7


def test_a_block_trace_is_keyed_by_start_sector(tmp_path):
    import struct

    # 100 sectors of one disk read 10 times over, as VSCSI version-1 records
    # (32 bytes: serial, length, nSG, cmd 0x28, ver 0x0100, lbn, time).
    trace = tmp_path / "loop.vscsi"
    with open(trace, "wb") as f:
        for i in range(1000):
            f.write(struct.pack("<IIIHHQQ", i, 4096, 1, 0x28, 0x0100, (i % 100) * 8, i))
    rows = cairn.sim(trace, ["lru"], [1.0, 0.5])
    assert [(r["requests"], r["misses"]) for r in rows] == [(1000, 100), (1000, 1000)]
    assert sum(1 for _ in cairn.TraceReader(trace)) == 1000


def test_analyze_gives_libcachesims_numbers_on_the_sample_trace():
    # libcachesim 0.3.5 TraceAnalyzer on the same trace: 113872 requests,
    # 48974 objects, "Zipf alpha=0.5464, R2=0.8743", X-hit 21049 (0.4298),
    # "request rate min 2.1833 req/s, max 320.0500 req/s, window 60s".
    a = cairn.analyze(TRACE, window=60)
    assert (a["requests"], a["keys"], a["unit"], a["format"]) == (REQUESTS, 48_974, "object", "oracle")
    assert (round(a["zipf"]["alpha"], 4), round(a["zipf"]["r2"], 4)) == (0.5464, 0.8743)
    assert a["zipf"]["ranks"] == 48_974
    assert (a["one_hit_keys"], round(a["one_hit_fraction"], 4)) == (21_049, 0.4298)
    rates = [w["requests_per_s"] for w in a["windows"][:120]]
    assert (round(min(rates), 4), round(max(rates), 4)) == (2.1833, 320.05)
    # Stack distances below 2^12 are the hits of LRU at 4096 objects:
    # 21,159 in libcachesim 0.3.5 (LRU(cache_size=4096).process_trace).
    counts = a["stack_distance"]["counts"]
    assert sum(counts[:13]) == 21_159
    assert a["reuse_distance"]["total"] == REQUESTS - 48_974


def test_analyze_a_loop_and_bad_input(tmp_path):
    import struct

    trace = tmp_path / "loop.vscsi"
    with open(trace, "wb") as f:
        for i in range(1000):
            f.write(struct.pack("<IIIHHQQ", i, 4096, 1, 0x28, 0x0100, (i % 100) * 8, i))
    a = cairn.analyze(trace)
    assert (a["unit"], a["keys"], a["one_hit_keys"]) == ("start-sector", 100, 0)
    assert (a["reuse_distance"]["max"], a["stack_distance"]["max"], a["stack_distance"]["mean"]) == (100, 99, 99.0)
    assert cairn.analyze(trace, unit="object")["keys"] == 1
    empty = tmp_path / "empty.oracleGeneral.bin"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="no requests"):
        cairn.analyze(empty)
    with pytest.raises(ValueError, match="window"):
        cairn.analyze(trace, window=0)
    with pytest.raises(ValueError, match="unit"):
        cairn.analyze(trace, unit="sectors")
    with pytest.raises(OSError):
        cairn.analyze(tmp_path / "missing.oracleGeneral.bin")
