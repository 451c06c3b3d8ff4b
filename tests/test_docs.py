"""The documentation stays true: the generated option page matches the declarations, and every
relative link in README.md and docs/ points to a file (and heading) that exists."""
from __future__ import annotations

import re
from pathlib import Path

from specserve.option_docs import PAGE, REGENERATE, render

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _anchors(path: Path) -> set[str]:
    """The heading anchors a Markdown renderer such as GitHub's makes for a page."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)          # a link's text only
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_options_page_is_current():
    assert PAGE.is_file(), f"{PAGE.relative_to(ROOT)} is missing: run `{REGENERATE}`"
    assert PAGE.read_text() == render(), (f"{PAGE.relative_to(ROOT)} differs from the Option declarations: "
                                          f"run `{REGENERATE}`")


def test_relative_links_point_to_existing_files():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):         # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            if not dest.exists():
                broken.append(f"{where} -> no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where} -> no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_docs_exist_for_every_family():
    names = {p.name for p in (ROOT / "docs").glob("*.md")}
    wanted = {"architecture.md", "ngram.md", "model-drafters.md", "block-drafters.md", "scheduling.md",
              "server.md", "bench.md", "training.md", "llamacpp.md", "speed.md", "python-api.md", "options.md"}
    assert wanted <= names, f"missing pages: {sorted(wanted - names)}"
