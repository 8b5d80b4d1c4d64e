"""An agent's own words on the console: its description as markdown and the
links in its context, made safe to show.

Everything here is the agent's text, which may be hostile: no raw HTML passes
(markdown-it-py with ``html`` off escapes it), and the only links made are
http and https ones, opened with ``rel="noopener noreferrer"`` so the page they
lead to gets neither this window nor the console's address. The page's CSP
stays as strict as it was: nothing here needs a script, a style or an image."""

from __future__ import annotations

import re
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

_URL = re.compile(r"https?://[^\s\"'<>`]+", re.IGNORECASE)
_TRAILING = ".,;:!?)]}"  # "see https://x.example/a." ends before the full stop
SAFE_SCHEMES = ("http://", "https://")
LINK_REL = "noopener noreferrer"


def _anchor(url: str) -> str:
    return f'<a href="{escape(url)}" rel="{LINK_REL}" class="agent-link">{escape(url)}</a>'


def linked(text: str) -> SafeString:
    """``text`` escaped, with each http(s) URL in it a link. (Matched by scheme,
    so ``javascript:`` or ``data:`` text stays text.)"""
    out: list[str] = []
    last = 0
    for match in _URL.finditer(text):
        url = match.group(0).rstrip(_TRAILING)
        out.append(escape(text[last : match.start()]))
        out.append(_anchor(url))
        last = match.start() + len(url)
    out.append(escape(text[last:]))
    return mark_safe("".join(out))


def _markdown() -> MarkdownIt:
    """The description's renderer."""
    # CommonMark, raw HTML off (it is escaped, not passed); no images (they would
    # fetch from the agent's choice of host as the officer reads) and no headings
    # (the agent's words must not look like the page's own titles).
    md = MarkdownIt("commonmark", {"html": False}).disable(["image", "heading", "lheading"])
    # markdown-it-py documents replacing validateLink to choose the schemes allowed.
    md.validateLink = lambda url: url.strip().lower().startswith(SAFE_SCHEMES)  # type: ignore[method-assign]

    def link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", LINK_REL)
        tokens[idx].attrSet("class", "agent-link")
        return str(renderer.renderToken(tokens, idx, options, env))

    md.add_render_rule("link_open", link_open)
    return md


_MD = _markdown()


def markdown_safe(text: str) -> SafeString:
    """The agent's description as HTML: markdown rendered, raw HTML escaped,
    only http(s) links."""
    return mark_safe(_MD.render(text))
