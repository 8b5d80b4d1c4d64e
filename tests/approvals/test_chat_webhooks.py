"""Slack and Teams subscriptions: deliver() POSTs a chat message to a real HTTP
receiver on this machine, with the console link and the agent's text defused."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from access.identity import Actor
from approvals.models import Approval, WebhookDelivery, WebhookSubscription
from approvals.services import approval_request
from approvals.webhooks import deliver
from shards.services import shard_create
from tests.approvals.test_webhooks import Receiver, verified

pytestmark = pytest.mark.django_db

PUBLIC_URL = "https://zerolock.example"
HOSTILE = (
    "<!channel> urgent: <https://evil.example|click here> and "
    "[approve now](https://evil.example/phish) & <@U123>"
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    endpoint = Receiver()
    yield endpoint
    endpoint.close()


@pytest.fixture(autouse=True)
def public_url(settings) -> None:
    settings.ZEROLOCK_PUBLIC_URL = PUBLIC_URL


def asked(description: str = "Pay ACME invoice 42") -> Approval:
    shard_create(
        actor=Actor("treasurer"),
        shard_id="treasury",
        shard_type="decision",
        initial_value={"balance": 1000},
        reversible=False,
    )
    return approval_request(
        actor=Actor("executor"),
        shard_id="treasury",
        proposed_value={"balance": 750},
        expected_version=1,
        description=description,
    )


def sent(receiver: Receiver, format: str, description: str = "Pay ACME invoice 42") -> dict:
    """Subscribes ``receiver`` in ``format``, asks for an approval and delivers
    its approval.requested the way the worker does; returns what arrived."""
    subscription = WebhookSubscription.objects.create(
        name="chat", url=receiver.url, events=["approval.requested"], format=format
    )
    approval = asked(description)
    delivery = WebhookDelivery.objects.get(subscription=subscription, approval_id=approval.id)
    assert deliver(delivery.id) == "delivered"
    message = receiver.received[-1]
    # The standard headers stay: a receiver that checks them can.
    body = verified(subscription.secret, message)
    return {"body": body, "approval": approval, "delivery": delivery, "raw": message["body"]}


def texts(node: Any) -> list[str]:
    """Every string in a JSON body, wherever it sits."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [t for value in node.values() for t in texts(value)]
    if isinstance(node, list):
        return [t for value in node for t in texts(value)]
    return []


def urls(node: Any) -> list[str]:
    """Every value of a "url" key: the places a chat service makes a link of."""
    if isinstance(node, dict):
        found = [node["url"]] if isinstance(node.get("url"), str) else []
        return found + [u for value in node.values() for u in urls(value)]
    if isinstance(node, list):
        return [u for value in node for u in urls(value)]
    return []


def test_a_slack_subscription_gets_blocks_a_fallback_and_a_button_to_the_detail_page(receiver):
    got = sent(receiver, "slack")
    body, approval = got["body"], got["approval"]
    link = f"{PUBLIC_URL}/console/approvals/{approval.id}"
    assert body["text"] == f"Approval requested: change to treasury <{link}|Open in ZeroLock>"
    blocks = body["blocks"]
    assert blocks[0] == {
        "type": "header",
        "text": {
            "type": "plain_text",
            "text": "Approval requested: change to treasury",
            "emoji": False,
        },
    }
    fields = [f["text"] for f in blocks[1]["fields"]]
    assert "*Shard*\ntreasury" in fields
    assert "*Requested by*\nexecutor" in fields
    assert "*Status*\npending" in fields
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b]
    assert "*What the agent says it is for*\nPay ACME invoice 42" in sections
    assert "*Change*\nreplace /balance: 1000 \u2192 750" in sections
    assert all(b["text"]["verbatim"] for b in blocks if b["type"] == "section" and "text" in b)
    button = blocks[-1]["elements"][0]
    assert (button["text"]["text"], button["url"]) == ("Open in ZeroLock", link)
    assert urls(body) == [link]
    # What is stored (and shown in admin, and redelivered) is still the standard event.
    stored = WebhookDelivery.objects.get(pk=got["delivery"].pk).payload
    assert stored["type"] == "approval.requested"
    assert stored["data"]["console_url"] == link


def test_a_teams_subscription_gets_an_adaptive_card_with_facts_and_an_open_url_action(receiver):
    got = sent(receiver, "teams")
    body, approval = got["body"], got["approval"]
    link = f"{PUBLIC_URL}/console/approvals/{approval.id}"
    assert body["type"] == "message"
    (attachment,) = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert (card["type"], card["version"]) == ("AdaptiveCard", "1.4")
    assert card["body"][0]["type"] == "TextBlock"
    assert card["body"][0]["text"] == "Approval requested: change to treasury"
    factset = next(b for b in card["body"] if b["type"] == "FactSet")
    facts = {f["title"]: f["value"] for f in factset["facts"]}
    assert facts["Shard"] == "treasury" and facts["Requested by"] == "executor"
    assert facts["Status"] == "pending"
    blocks = [b["text"] for b in card["body"] if b["type"] == "TextBlock"]
    assert "Pay ACME invoice 42" in blocks
    assert "replace /balance: 1000 \u2192 750" in blocks
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open in ZeroLock", "url": link}]
    assert urls(body) == [link]


def test_a_hostile_description_reaches_slack_as_text_not_a_mention_or_a_link(receiver):
    got = sent(receiver, "slack", description=HOSTILE)
    body = got["body"]
    everything = "\n".join(texts(body))
    # Slack acts on "<...>" only: escaped, none of the agent's survive.
    assert "<!channel>" not in everything and "<@U123>" not in everything
    assert "<https://evil" not in everything
    assert (
        "&lt;!channel&gt;" in everything and "&lt;https://evil.example|click here&gt;" in everything
    )
    assert "&amp; &lt;@U123&gt;" in everything
    # The only "<...|...>" link is ours, and the only URL a button opens.
    assert re.findall(r"<([^>]*)>", everything) == [
        f"{PUBLIC_URL}/console/approvals/{got['approval'].id}|Open in ZeroLock"
    ]
    assert all("evil" not in u for u in urls(body))


def test_a_hostile_description_reaches_teams_with_its_markdown_link_escaped(receiver):
    got = sent(receiver, "teams", description=HOSTILE)
    card = got["body"]["attachments"][0]["content"]
    described = [
        b["text"] for b in card["body"] if b["type"] == "TextBlock" and "evil" in b["text"]
    ]
    assert len(described) == 1
    assert "[approve now](https://evil.example/phish)" not in described[0]
    assert r"\[approve now\]\(https\://evil.example/phish\)" in described[0]
    assert r"\<\!channel\>" in described[0]
    # No bare URL of the agent's for a renderer to make a link of.
    assert "https://evil" not in "\n".join(texts(card))
    assert not re.search(r"(?<!\\)\[[^\]]*(?<!\\)\]\(", "\n".join(texts(card)))
    assert [a["url"] for a in card["actions"]] == [
        f"{PUBLIC_URL}/console/approvals/{got['approval'].id}"
    ]


def test_long_agent_text_is_clamped_to_slacks_limits(receiver):
    got = sent(receiver, "slack", description="<" * 3900 + "tail")
    blocks = got["body"]["blocks"]
    described = next(
        b["text"]["text"] for b in blocks if "agent says" in b.get("text", {}).get("text", "")
    )
    assert len(described) <= 3000 and described.endswith("\u2026")
    assert "tail" not in described
    # Cut between entities, never inside one.
    assert described.removeprefix("*What the agent says it is for*\n").removesuffix(
        "\u2026"
    ) == "&lt;" * ((len(described) - 33) // 4)
    assert all(len(b["text"]["text"]) <= 150 for b in blocks if b["type"] == "header")


def test_long_agent_text_is_clamped_in_a_teams_card(receiver):
    got = sent(receiver, "teams", description="x" * 3900)
    described = [t for t in texts(got["body"]) if t.startswith("xxx")]
    assert len(described) == 1 and len(described[0]) == 3000
    assert described[0].endswith("\u2026")


def test_a_standard_subscription_gets_the_signed_event_as_before(receiver):
    got = sent(receiver, "standard")
    assert got["body"]["type"] == "approval.requested"
    assert got["body"]["data"]["approval_id"] == got["approval"].id
    assert got["body"]["data"]["description"] == "Pay ACME invoice 42"
    stored = WebhookDelivery.objects.get(pk=got["delivery"].pk).payload
    assert got["raw"] == json.dumps(stored, separators=(",", ":"), sort_keys=True).encode()


@pytest.mark.parametrize("format", ["standard", "slack", "teams"])
def test_admins_pick_the_format_and_send_a_test_message_in_it(receiver, format):
    root = User.objects.create_superuser("root", "", "x")
    admin = Client()
    admin.force_login(root)
    created = admin.post(
        "/admin/approvals/webhooksubscription/add/",
        {
            "name": "chat",
            "url": receiver.url,
            "format": format,
            "events": ["approval.requested"],
            "active": "on",
            "expiring_lead_seconds": "300",
            "secret": "whsec_" + "A" * 44,
        },
    )
    assert created.status_code == 302, created.content.decode()[:2000]
    subscription = WebhookSubscription.objects.get()
    assert subscription.format == format
    listing = admin.get("/admin/approvals/webhooksubscription/").content.decode()
    assert f'<td class="field-format">{subscription.get_format_display()}</td>' in listing
    answer = admin.post(
        "/admin/approvals/webhooksubscription/",
        {"action": "send_test_event", "_selected_action": [subscription.pk], "index": "0"},
    )
    assert answer.status_code == 302
    delivery = WebhookDelivery.objects.get(event="webhook.test")
    assert deliver(delivery.id) == "delivered"
    body = verified(subscription.secret, receiver.received[-1])
    console = f"{PUBLIC_URL}/console/"
    if format == "standard":
        assert body["type"] == "webhook.test" and body["data"]["console_url"] == console
    elif format == "slack":
        assert body["blocks"][0]["text"]["text"] == "ZeroLock test message"
        assert "*Subscription*\nchat" in [f["text"] for f in body["blocks"][1]["fields"]]
        assert urls(body) == [console]
    else:
        card = body["attachments"][0]["content"]
        assert card["body"][0]["text"] == "ZeroLock test message"
        assert card["actions"][0]["url"] == console
