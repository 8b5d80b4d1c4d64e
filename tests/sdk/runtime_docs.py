"""docs/runtimes.md shows the examples' code: each Python snippet of a
runtime's section must appear, as printed, in that runtime's example (which the
live tests run), so the page cannot drift from what was tested."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def snippets_of(section: str) -> list[str]:
    page = (ROOT / "docs" / "runtimes.md").read_text()
    start = page.index(f"\n## {section}")
    end = page.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", page[start : end if end > 0 else None], re.S)


def assert_snippets_are_the_example(section: str, example: str) -> None:
    code = (ROOT / "examples" / example / "app.py").read_text()
    snippets = snippets_of(section)
    assert snippets, f"no Python snippet in the {section} section"
    for snippet in snippets:
        assert snippet in code, (
            f"docs/runtimes.md ({section}) differs from examples/{example}:\n{snippet}"
        )
