"""write_list over the scheduler.conf corpus (tests/unit/yaml_corpus.py), up to 10,000 names.

The re-parse oracle (the result loads as the input with only the path replaced) holds for every
document; where the splice applies, no line outside the edited value changes and every comment
outside it survives; the value keeps its style (block list, flow list, comma string and quotes).
tests/bench/yaml_edit.py runs the same corpus against a ruamel.yaml round trip, with timings.
"""

from __future__ import annotations

import pytest

from sunk_sandbox_operator.core.scope.doc import read_list, write_list
from tests.unit import yaml_corpus as corpus

# Every document at small sizes; one of each kind at 10,000 names (~0.3 s each, so the file stays ~2 s).
LARGE = {"block-comments-inside", "flow", "string-quoted", "missing", "crlf"}
PARAMS = [pytest.param(c, n, id=f"{c.name}-{n}") for n in (1, 3, 100, 10_000) for c in corpus.CASES
          if n < 10_000 or c.name in LARGE]


@pytest.mark.parametrize("case, n", PARAMS)
def test_write_list_over_corpus(case: corpus.Case, n: int) -> None:
    text = case.build(n)
    found = read_list(text, corpus.PATH)
    assert found.error is None and found.style == case.style
    values = corpus.edit_values(n, found.style)
    out = write_list(text, corpus.PATH, values, found.style)

    assert corpus.oracle_ok(text, out, corpus.new_value(values, found.style))
    assert corpus.value_shape(out) == case.shape  # block stays block, flow flow, a string keeps its quotes
    again = read_list(out, corpus.PATH)
    assert again.values == values
    if case.splices:
        assert corpus.unrelated_lines_changed(text, out) == 0
        kept, lost = corpus.comments_kept(text, out)
        assert [c for c in lost if not c.startswith("c:in-")] == []  # only comments between items may go
        assert out.startswith(text[:text.index("scheduler")])  # header (and BOM) byte for byte
    if n <= 100:
        assert write_list(out, corpus.PATH, values, again.style) == out  # idempotent


def test_corpus_checks_see_a_reemit() -> None:
    """The checks are not vacuous: the anchored list must re-emit, which loses comments and layout."""
    case = next(c for c in corpus.CASES if not c.splices)
    text = case.build(3)
    out = write_list(text, corpus.PATH, corpus.edit_values(3, "list"), "list")
    assert corpus.unrelated_lines_changed(text, out) > 0
    assert corpus.comments_kept(text, out)[0] == []


def test_bom_document_is_spliced_not_reemitted() -> None:
    # libyaml's node marks do not count a leading BOM; before the fix every splice of such a
    # document was off by one, failed the re-parse check and fell back to the comment-less re-emit.
    text = "\ufeff# c:keep\ns:\n  ns:   # c:key\n  - a\n  - b\n"
    assert write_list(text, "s.ns", ["a", "c"], "list") == "\ufeff# c:keep\ns:\n  ns:   # c:key\n  - a\n  - c\n"
    assert write_list("\ufeffs: {ns: 'a,b'}  # c\n", "s.ns", ["x"], "string") == "\ufeffs: {ns: 'x'}  # c\n"
