"""The README is the front door and docs/ holds the rest: every relative link between them reaches
a file and, with a fragment, a heading of that file; the table of contents names every page; the
README's first two commands stay the demo and the tests (.ci/run runs the second); and the
runbook URLs of the alerts name headings that exist."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")
BLOB = "https://github.com/sunksandbox/sunk-sandbox-operator/blob/main/"


def github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")


def anchors(page: Path) -> set[str]:
    out, code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            code = not code
        elif not code and line.startswith("#"):
            out.add(github_anchor(line.lstrip("#").strip()))
    return out


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def broken(page: Path, link: str) -> str | None:
    path, _, fragment = link.partition("#")
    target = (page.parent / path).resolve() if path else page
    if not target.exists():
        return "no such file"
    if fragment and target.suffix == ".md" and fragment not in anchors(target):
        return "no such heading"
    return None


def test_every_relative_link_reaches_a_file_and_a_heading() -> None:
    bad = [f"{p.relative_to(ROOT)}: {link}: {why}" for p in pages() for link in LINK.findall(p.read_text())
           if not link.startswith(("http://", "https://", "mailto:")) and (why := broken(p, link))]
    assert bad == []


def test_the_checker_sees_a_broken_link() -> None:
    assert broken(DOCS / "README.md", "install.md#uninstall") is None
    assert broken(DOCS / "README.md", "install.md#no-such-heading") == "no such heading"
    assert broken(DOCS / "README.md", "nowhere.md") == "no such file"


def test_the_table_of_contents_names_every_page_and_the_readme_links_it() -> None:
    toc = (DOCS / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"]({page.name})" in toc, page.name
    assert "](docs/README.md)" in (ROOT / "README.md").read_text()


def test_the_readmes_first_commands_are_the_demo_and_the_tests() -> None:
    text = (ROOT / "README.md").read_text()
    first = text[text.index("```sh\n") + 6:]
    commands = [line.split("#")[0].strip() for line in first[:first.index("```")].splitlines()]
    assert commands == ["make demo", "make test"]
    assert text.index("```sh\n") < text.index("\n## Compatibility")  # on the first screen
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_runbook_url_names_a_heading_of_its_page() -> None:
    rules = yaml.safe_load((ROOT / "manifests" / "monitoring" / "prometheusrule.yaml").read_text())
    urls = [r["annotations"]["runbook_url"] for g in rules["spec"]["groups"] for r in g["rules"]
            if "runbook_url" in r.get("annotations", {})]
    assert urls
    for url in urls:
        assert url.startswith(BLOB), url
        path, _, fragment = url[len(BLOB):].partition("#")
        assert fragment in anchors(ROOT / path), url


def test_every_code_block_is_closed() -> None:
    """An unclosed fence turns the rest of a page into code (its headings and links with it)."""
    for page in pages():
        fences = [line for line in page.read_text().splitlines() if line.lstrip().startswith("```")]
        assert len(fences) % 2 == 0, page.relative_to(ROOT)
