"""The scope ledger round-trips, compresses large entries under the annotation limit, and
never takes a corrupt annotation for an empty claim silently."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.core import ledger as lg

names = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), max_size=30, unique=True)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,8}/[a-z]{1,8}", fullmatch=True),
                       st.tuples(names, st.one_of(st.none(), names)), max_size=4))
def test_round_trip(entries):
    led = lg.Ledger({b: lg.Entry(tuple(sorted(a)), tuple(sorted(p)) if p is not None else None)
                     for b, (a, p) in entries.items()})
    text = lg.encode(led)
    assert (text is None) == (not entries)
    assert lg.decode(text).entries == led.entries


def test_ten_thousand_names_fit_well_under_the_annotation_limit():
    added = tuple(sorted(f"ds-user-{i:05d}" for i in range(10_000)))
    text = lg.encode(lg.Ledger({"tenant-slurm/b": lg.Entry(added, ("tenant-slurm",))}))
    assert text.startswith("zlib:") and len(text) < 64 * 1024
    assert lg.decode(text).get("tenant-slurm/b").added == added


def test_small_ledgers_stay_readable_json():
    text = lg.encode(lg.Ledger({"ns/b": lg.Entry(("ds-a",), ())}))
    assert text == '{"version":1,"generation":0,"bindings":{"ns/b":{"added":["ds-a"],"preexisting":[]}}}'


def test_with_entry_sets_and_removes_one_binding_only():
    led = lg.Ledger({"ns/a": lg.Entry(("x",)), "ns/b": lg.Entry(("y",))})
    assert set(led.with_entry("ns/a", None).entries) == {"ns/b"}
    assert led.with_entry("ns/c", lg.Entry(("z",))).get("ns/c").added == ("z",)
    assert set(led.entries) == {"ns/a", "ns/b"}  # unchanged: a copy was returned


def test_unreadable_annotation_is_an_error_not_a_silent_claim():
    for junk in ("{not json", "zlib:!!!", '{"bindings": 3}'):
        led = lg.decode(junk)
        assert led.error and led.entries == {}
    assert lg.decode(None).entries == {} and lg.decode(None).error is None


def test_the_generation_counts_list_writes_and_survives_the_round_trip():
    ledger = lg.Ledger({"ns/b": lg.Entry(("ds-a",), ())}).next_generation().next_generation()
    assert ledger.generation == 2
    assert lg.decode(lg.encode(ledger)).generation == 2
    assert ledger.with_entry("ns/c", lg.Entry(("ds-b",), None)).generation == 2  # entries do not reset it
    # Older ledgers (no generation) and nonsense read as 0.
    assert lg.decode('{"version":1,"bindings":{}}').generation == 0
    assert lg.decode('{"version":1,"generation":true,"bindings":{}}').generation == 0
    assert lg.decode('{"version":1,"generation":-3,"bindings":{}}').generation == 0


def test_a_compressed_ledger_that_inflates_past_the_bound_is_unreadable_not_expanded() -> None:
    """The annotation is on the tenant's own target: 8 KiB of zlib must not become gigabytes."""
    import base64
    import zlib

    from sunk_sandbox_operator.core import ledger as lg

    bomb = "zlib:" + base64.b64encode(zlib.compress(b"[" + b" " * (64 * 1024 * 1024), 9)).decode()
    assert len(bomb) < 100_000
    got = lg.decode(bomb)
    assert got.error and "unreadable" in got.error and got.entries == {}


def _zlib(raw: bytes) -> str:
    import base64
    import zlib
    return "zlib:" + base64.b64encode(zlib.compress(raw, 9)).decode()


def test_a_10_kb_nesting_bomb_is_unreadable_and_rebuilt_not_an_exception() -> None:
    """Issue 31 finding 9: json's decoder raised RecursionError out of decode."""
    for bomb in ("[" * 10_000, '{"bindings":' * 2_000, _zlib(b"[" * 10_000), _zlib(b'{"a":' * 100_000)):
        got = lg.decode(bomb)
        assert got.entries == {} and got.error == "the ledger annotation is unreadable (ValueError); it is rebuilt"


def test_a_zlib_bomb_bad_utf8_and_wrong_types_are_unreadable() -> None:
    for junk in (_zlib(b" " * (64 << 20)), _zlib(b'{"bindings": {"\xff\xfe": {}}}'), "zlib:", "zlib:%%%",
                 '{"bindings": []}', '[]', '"x"', '3', '{"bindings": {"ns/b": 3}}',
                 '{"bindings": {"ns/b": {"added": [["x"]]}}}', '{"bindings": {"ns/b": {"added": "x"}}}',
                 '{"bindings": {"ns/b": {"added": [], "preexisting": {"a": 1}}}}',
                 '{"generation": ' + "9" * 5_000 + "}"):
        got = lg.decode(junk)
        assert got.entries == {} and got.error and "rebuilt" in got.error, junk[:40]
