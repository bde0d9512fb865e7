"""A corpus of scheduler.conf-like documents and the fidelity checks for a list edit at a path.

Shared by tests/unit/test_scope_doc_corpus.py (checks `write_list`) and tests/bench/yaml_edit.py
(compares it with a ruamel.yaml round trip). Every comment in the corpus carries a `# c:<tag>`
label so that "comments kept" can be counted; tags starting with `c:in-` sit *inside* the edited
value (between list items), where a splice that rewrites the value is not expected to keep them.

The checks:
- oracle: yaml.safe_load(out) equals the input's safe_load with only the path replaced (strict:
  key order and scalar types too);
- unrelated lines: lines outside the edited value's line span, input vs output (a diff count);
  value lines: the same inside the span (how much churn the edit makes in the list itself);
- comments: `# c:` labels of the input still present in the output;
- style: a block list stays block, a flow list flow, a comma string a string with its quotes.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

import yaml

PATH = "scheduler.scope.namespaces"
ADDED = "ds-zz-new"  # sorts after ds-NNNNN, before slurm
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def names(n: int) -> list[str]:
    """n sorted namespace names: ds-00000 ... and slurm."""
    return [f"ds-{i:05d}" for i in range(max(n - 1, 0))] + ["slurm"]


HEAD = """\
# c:header Scheduler config (managed by Helm)
# c:header2 do not edit by hand
scheduler:
  name: slurm-scheduler   # c:name keep me
  scope:
    type: namespace       # c:type namespace | cluster
"""

TAIL = """\
    # c:scope-trailer trailing comment in scope
    resync: 30s
    extra:
      a:
        b: 1              # c:nested
  limits:                 # c:limits
    cpu: "2"
    memory: 4Gi
  other: 1
controller:
  replicas: 2             # c:replicas
"""


def _block(ns: list[str], pad: str = "      ", inside: bool = False, quoted: bool = False) -> str:
    out = []
    for i, v in enumerate(ns):
        item = (f"'{v}'" if i % 2 else f'"{v}"') if quoted else v
        line = f"{pad}- {item}"
        if inside and i == 0:
            line += "  # c:in-first"
        if inside and i == 1:
            line = f"{pad}# c:in-between\n{line}"
        if i == len(ns) - 1:
            line += "  # c:last-item"
        out.append(line + "\n")
    return "".join(out)


def doc_block(n: int) -> str:
    return HEAD + "    namespaces:           # c:key watched namespaces\n      # c:before-items\n" + _block(names(n)) + TAIL


def doc_block_comments_inside(n: int) -> str:
    return HEAD + "    namespaces:\n" + _block(names(n), inside=True) + TAIL


def doc_block_indentless(n: int) -> str:
    return HEAD + "    namespaces:\n" + _block(names(n), pad="    ") + TAIL


def doc_block_quoted_items(n: int) -> str:
    return HEAD + "    namespaces:\n" + _block(names(n), quoted=True) + TAIL


def doc_flow(n: int) -> str:
    return HEAD + f"    namespaces: [{', '.join(names(n))}]   # c:flow-after\n" + TAIL


def doc_flow_wrapped(n: int) -> str:
    ns = names(n)
    rows = [", ".join(ns[i:i + 8]) for i in range(0, len(ns), 8)]
    body = ",\n".join("      " + r for r in rows)
    return HEAD + f"    namespaces: [   # c:in-flow-open\n{body}\n    ]   # c:flow-close\n" + TAIL


def doc_flow_mapping(n: int) -> str:
    head = HEAD.split("  scope:\n")[0]
    return (head + f"  scope: {{type: namespace, namespaces: [{', '.join(names(n))}], resync: 30s}}  # c:flowmap\n"
            + TAIL[TAIL.index("  limits:"):])


def doc_string(n: int) -> str:
    return HEAD + f"    namespaces: {','.join(names(n))}   # c:string\n" + TAIL


def doc_string_quoted(n: int) -> str:
    return HEAD + f"    namespaces: '{', '.join(names(n))}'   # c:string-quoted\n" + TAIL


def doc_anchors(n: int) -> str:
    """Anchors (that no alias uses: aliases are refused, core/untrusted) and a merge key elsewhere."""
    return ("""\
# c:header anchors and a merge key elsewhere in the document
defaults: &defaults       # c:anchor
  image: &img slurm:24.05
  pullPolicy: IfNotPresent
scheduler:
  <<: {pullPolicy: Always} # c:merge
  name: slurm-scheduler
  scope: &scope
    type: namespace
    namespaces:
""" + _block(names(n)) + """\
    image: slurm:24.05    # c:image
  sidecar: {image: slurm:24.05}
other: [slurm:24.05, x]
""")


def doc_anchored_value(n: int) -> str:
    """The list itself is anchored: its text starts at the anchor, so no splice passes the check (re-emit)."""
    return ("# c:header the list carries an anchor\n"
            "scheduler:\n  scope:\n    type: namespace\n    namespaces: &ns   # c:key\n"
            + _block(names(n)) + "  mirror: x             # c:mirror\n")


def doc_missing(n: int) -> str:
    return HEAD + TAIL


def doc_crlf(n: int) -> str:
    return doc_block(n).replace("\n", "\r\n")


def doc_bom(n: int) -> str:
    return "\ufeff" + doc_block(n)


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[int], str]
    style: str  # what read_list reports: "list" | "string" | "missing"
    shape: str  # how the value must look after the edit: "block" | "flow" | "plain" | "'" | '"'
    splices: bool = True  # False: only a re-emit is correct (comments and layout are lost)


CASES = [
    Case("block", doc_block, "list", "block"),
    Case("block-comments-inside", doc_block_comments_inside, "list", "block"),
    Case("block-indentless", doc_block_indentless, "list", "block"),
    Case("block-quoted-items", doc_block_quoted_items, "list", "block"),
    Case("flow", doc_flow, "list", "flow"),
    Case("flow-wrapped", doc_flow_wrapped, "list", "flow"),
    Case("flow-mapping", doc_flow_mapping, "list", "flow"),
    Case("string", doc_string, "string", "plain"),
    Case("string-quoted", doc_string_quoted, "string", "'"),
    Case("anchors", doc_anchors, "list", "block"),
    Case("missing", doc_missing, "missing", "block"),
    Case("crlf", doc_crlf, "list", "block"),
    Case("bom", doc_bom, "list", "block"),
    Case("anchored-value", doc_anchored_value, "list", "block", splices=False),
]


def edit_values(n: int, style: str) -> list[str]:
    """The edit: add one name and remove one (sorted, as the operator writes); all n for a missing key."""
    ns = names(n)
    if style == "missing":
        return ns
    return sorted([v for i, v in enumerate(ns) if i != len(ns) // 2] + [ADDED])


def new_value(values: list[str], style: str) -> Any:
    return ",".join(values) if style == "string" else list(values)


# ---------------------------------------------------------------- checks


def same(a: Any, b: Any) -> bool:
    """Equality that also sees key order and scalar types (1 vs 1.0 vs "1" vs True), done
    independently of the code under test: the reprs of the two parsed documents."""
    return repr(a) == repr(b)


def expected(text: str, value: Any, path: str = PATH) -> Any:
    data = json.loads(json.dumps(yaml.load(text, Loader=_Loader)))  # unshares aliases
    cur = data
    *parents, last = path.split(".")
    for k in parents:
        if not isinstance(cur.get(k), dict):
            cur[k] = {}
        cur = cur[k]
    cur[last] = value
    return data


def oracle_ok(before: str, after: str, value: Any, path: str = PATH) -> bool:
    try:
        return same(yaml.load(after, Loader=_Loader), expected(before, value, path))
    except Exception:  # noqa: BLE001 - an unparsable result simply fails the oracle
        return False


def _compose(text: str) -> tuple[yaml.Node, str]:
    text = text.removeprefix("\ufeff")  # libyaml's marks do not count a leading BOM
    return yaml.compose(text, Loader=_Loader), text


def _node_at(root: yaml.Node, path: str) -> tuple[yaml.Node, yaml.Node] | None:
    node = root
    hit = None
    for key in path.split("."):
        if not isinstance(node, yaml.MappingNode):
            return None
        hit = next(((k, v) for k, v in reversed(node.value) if isinstance(k, yaml.ScalarNode) and k.value == key), None)
        if hit is None:
            return None
        node = hit[1]
    return hit


def _end(node: yaml.Node, text: str) -> int:
    """End of a node's own text (block collections' end marks swallow trailing comments)."""
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        return _end(last[1] if isinstance(last, tuple) else last, text)
    end = node.end_mark.index
    while end > node.start_mark.index and text[end - 1] in " \t\r\n":
        end -= 1
    return end


def value_lines(text: str, path: str = PATH, with_key: bool = False) -> tuple[int, int]:
    """[first, last) line numbers of the value at path (from the key's line if with_key); (0, 0) if absent."""
    root, text = _compose(text)
    hit = _node_at(root, path)
    if hit is None:
        return (0, 0)
    key, val = hit
    start = (key if with_key else val).start_mark.line
    return (start, text.count("\n", 0, _end(val, text)) + 1)


def unrelated_lines_changed(before: str, after: str, path: str = PATH) -> int:
    """Lines outside the edited value that differ between input and output (line endings count)."""
    key_new = _node_at(_compose(before)[0], path) is None
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    a0, a1 = value_lines(before, path)
    b0, b1 = value_lines(after, path, with_key=key_new)  # a new key's own line belongs to the edit
    outside_a, outside_b = a[:a0] + a[a1:], b[:b0] + b[b1:]
    sm = difflib.SequenceMatcher(None, outside_a, outside_b, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in sm.get_opcodes() if op != "equal")


def value_lines_changed(before: str, after: str, path: str = PATH) -> int:
    """Lines inside the edited value that differ (the edit itself is ~2 for a block list, 1 for one line)."""
    a0, a1 = value_lines(before, path)
    b0, b1 = value_lines(after, path)
    a, b = before.splitlines(keepends=True)[a0:a1], after.splitlines(keepends=True)[b0:b1]
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in sm.get_opcodes() if op != "equal")


COMMENT = re.compile(r"# (c:[\w-]+)")


def comments(text: str) -> list[str]:
    return COMMENT.findall(text)


def comments_kept(before: str, after: str) -> tuple[list[str], list[str]]:
    """(kept, lost) comment labels."""
    have = set(comments(after))
    tags = comments(before)
    return [t for t in tags if t in have], [t for t in tags if t not in have]


def value_shape(text: str, path: str = PATH) -> str | None:
    """'block' | 'flow' for a list, 'plain' | "'" | '"' | '|' | '>' for a string, None otherwise."""
    hit = _node_at(_compose(text)[0], path)
    if hit is None:
        return None
    val = hit[1]
    if isinstance(val, yaml.SequenceNode):
        return "flow" if val.flow_style else "block"
    if isinstance(val, yaml.ScalarNode):
        return val.style or "plain"
    return None
