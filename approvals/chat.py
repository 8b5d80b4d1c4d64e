"""Approval events as chat messages, for Slack and Teams incoming webhooks.

A subscription's ``format`` picks one of these at send time; each turns the
standard payload (``webhooks.event_payload``, which is what is stored and what
admin shows) into the body the chat service posts as it is. Everything that
came from an agent (description, requester, shard id, change lines, reasons) is
hostile: it must arrive as text, never as a mention, a link or markup. The one
link in a message is our own console URL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .models import WebhookFormat

JSON = dict[str, Any]

# Slack's limits (Block Kit): a header's plain text, a section's text, a field.
SLACK_HEADER_MAX = 150
SLACK_SECTION_MAX = 3000
SLACK_FIELD_MAX = 2000
SLACK_FALLBACK_MAX = 3000
# Teams has no documented per-block limit; the card as a whole is capped near
# 28 KB, so each agent text is held to a size that keeps a card well inside it.
TEAMS_TEXT_MAX = 3000
CHANGE_LINES = 10
OPEN_LABEL = "Open in ZeroLock"

HEADLINES = {
    "approval.requested": "Approval requested",
    "approval.decided": "Approval decided",
    "approval.expiring": "Approval expiring soon",
    "approval.expired": "Approval expired",
    "webhook.test": "ZeroLock test message",
}


def clamp(text: str, limit: int) -> str:
    """At most ``limit`` characters, an ellipsis saying some were cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def headline(payload: JSON) -> str:
    """The event in words; server text with the shard named (escaped by the caller)."""
    event = str(payload.get("type", ""))
    data = payload.get("data") or {}
    words = HEADLINES.get(event, event)
    if event == "approval.decided":
        words = f"Approval {data.get('status_label') or data.get('status') or 'decided'}"
    if data.get("shard_id"):
        words = f"{words}: change to {data['shard_id']}"
    return words


def change_lines(data: JSON) -> list[str]:
    """The change summary as short raw lines (``replace /balance: 1000 -> 750``)."""
    change = data.get("change")
    if change is None:
        return []
    lines = []
    for row in list(change)[:CHANGE_LINES]:
        old, new = row.get("old") or "", row.get("new") or ""
        if row.get("op") == "remove":
            what = f"{old} \u2192 (removed)"
        else:
            what = f"{old or '(nothing)'} \u2192 {new}"
        lines.append(f"{row.get('op')} {row.get('path') or '/'}: {what}")
    more = int(data.get("change_more") or 0) + max(0, len(change) - CHANGE_LINES)
    if more:
        lines.append(f"\u2026 and {more} more change{'s' if more != 1 else ''}")
    return lines


def facts(data: JSON) -> list[tuple[str, str]]:
    """Label and raw value of what a message shows beside the headline."""
    rows = [
        ("Shard", data.get("shard_id")),
        ("Requested by", data.get("requested_by")),
        ("Status", data.get("status_label") or data.get("status")),
        ("Decided by", data.get("decided_by")),
        ("Expires", data.get("expires_at") if data.get("status") == "pending" else None),
        ("Subscription", data.get("subscription")),
    ]
    return [(label, str(value)) for label, value in rows if value]


# --- Slack ---------------------------------------------------------------------


def slack_escape(text: str) -> str:
    """Slack's three control characters as entities: ``<!channel>`` and
    ``<https://evil|click>`` then read as text, not a mention or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(text: str, limit: int) -> str:
    """Escaped, then cut to ``limit`` without leaving half an entity behind."""
    escaped = slack_escape(text)
    if len(escaped) <= limit:
        return escaped
    cut = escaped[: limit - 1]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "\u2026"


def slack_section(text: str) -> JSON:
    # verbatim: Slack neither turns bare URLs into links nor parses names in it.
    return {"type": "section", "text": {"type": "mrkdwn", "text": text, "verbatim": True}}


def slack_body(payload: JSON) -> JSON:
    data = payload.get("data") or {}
    url = str(data.get("console_url") or "")
    title = headline(payload)
    blocks: list[JSON] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": clamp(title, SLACK_HEADER_MAX), "emoji": False},
        }
    ]
    shown = facts(data)
    if shown:
        blocks.append(
            {
                "type": "section",
                "fields": [
                    {
                        "type": "mrkdwn",
                        "text": f"*{label}*\n" + slack_text(value, SLACK_FIELD_MAX - 40),
                        "verbatim": True,
                    }
                    for label, value in shown[:10]
                ],
            }
        )
    for label, raw in (
        ("What the agent says it is for", data.get("description")),
        ("Reason", data.get("reason")),
    ):
        if raw:
            blocks.append(
                slack_section(f"*{label}*\n" + slack_text(str(raw), SLACK_SECTION_MAX - 40))
            )
    lines = change_lines(data)
    if lines:
        body = "\n".join(slack_text(line, 290) for line in lines)
        blocks.append(slack_section(clamp("*Change*\n" + body, SLACK_SECTION_MAX)))
    if url:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": OPEN_LABEL},
                        "url": url,
                        "style": "primary",
                    }
                ],
            }
        )
    fallback = slack_text(title, SLACK_FALLBACK_MAX - len(url) - 40)
    if url:
        fallback += f" <{slack_escape(url)}|{OPEN_LABEL}>"
    return {"text": fallback, "blocks": blocks, "unfurl_links": False, "unfurl_media": False}


# --- Teams ---------------------------------------------------------------------

# Markdown that a TextBlock or a FactSet value would act on: links and images
# ([x](y), ![x](y), <url>), emphasis, headings, lists, code. Backslash-escaped,
# they show as themselves.
TEAMS_MARKDOWN = set("\\`*_{}[]()<>#+-!|~")
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.]*):(?=//)")


def teams_text(text: str, limit: int = TEAMS_TEXT_MAX) -> str:
    """Agent text for a place that renders markdown: every markdown character
    escaped, so ``[click](https://evil)`` is not a link, then clamped.
    The colon of a bare ``scheme://`` is escaped too, so a renderer that turns
    URLs in text into links does not recognise one (it still reads the same)."""
    escaped = "".join("\\" + c if c in TEAMS_MARKDOWN else c for c in text)
    escaped = SCHEME.sub(r"\1\\:", escaped)
    if len(escaped) <= limit:
        return escaped
    cut = escaped[: limit - 1]
    # Never end on half an escape: a lone backslash would escape the ellipsis.
    if (len(cut) - len(cut.rstrip("\\"))) % 2:
        cut = cut[:-1]
    return cut + "\u2026"


def teams_body(payload: JSON) -> JSON:
    data = payload.get("data") or {}
    url = str(data.get("console_url") or "")
    body: list[JSON] = [
        {
            "type": "TextBlock",
            "text": teams_text(headline(payload), 300),
            "weight": "Bolder",
            "size": "Medium",
            "wrap": True,
        }
    ]
    shown = facts(data)
    if shown:
        body.append(
            {
                "type": "FactSet",
                "facts": [
                    {"title": label, "value": teams_text(value, 500)} for label, value in shown
                ],
            }
        )
    for label, raw in (
        ("What the agent says it is for", data.get("description")),
        ("Reason", data.get("reason")),
    ):
        if raw:
            body.append({"type": "TextBlock", "text": label, "weight": "Bolder", "wrap": True})
            body.append({"type": "TextBlock", "text": teams_text(str(raw)), "wrap": True})
    lines = change_lines(data)
    if lines:
        body.append({"type": "TextBlock", "text": "Change", "weight": "Bolder", "wrap": True})
        body.append(
            {
                "type": "TextBlock",
                "text": teams_text("\n".join(line[:290] for line in lines)),
                "wrap": True,
                "fontType": "Monospace",
            }
        )
    card: JSON = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": [{"type": "Action.OpenUrl", "title": OPEN_LABEL, "url": url}] if url else [],
    }
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": card,
            }
        ],
    }


FORMATTERS: dict[str, Callable[[JSON], JSON]] = {
    WebhookFormat.SLACK: slack_body,
    WebhookFormat.TEAMS: teams_body,
}


def wire_payload(format: str, payload: JSON) -> JSON:
    """The JSON a subscription of ``format`` is sent for ``payload``."""
    formatter = FORMATTERS.get(format)
    return formatter(payload) if formatter is not None else payload
