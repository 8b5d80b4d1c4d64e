"""Routing on the console's live feed (/ws/live/): a page hears of a request
only if its person may see it, and the escalation group's pages hear of the
escalation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from access.identity import Actor
from approvals.models import Approval, ApprovalRoute
from approvals.roles import groups_ensure
from approvals.services import approval_escalate_due, approval_request
from shards.services import shard_create
from zerolock_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def page_cookie(username: str, *groups: str) -> bytes:
    groups_ensure()
    user = User.objects.create_user(username, password="pw-pw-pw-pw")
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def live_page(cookie: bytes) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application, "/ws/live/", headers=[(b"origin", b"http://127.0.0.1"), (b"cookie", cookie)]
    )


def routed_payment() -> Approval:
    ApprovalRoute.objects.create(
        shard_prefix="pay.",
        approver_group=Group.objects.get_or_create(name="Payments approvers")[0],
        escalate_after_seconds=60,
        escalation_group=Group.objects.get_or_create(name="Treasury leads")[0],
    )
    shard_create(
        actor=Actor("treasurer"), shard_id="pay.acme", shard_type="decision", initial_value={}
    )
    return approval_request(
        actor=Actor("executor"),
        shard_id="pay.acme",
        proposed_value={"paid": True},
        expected_version=1,
        description="Pay ACME",
    )


async def approval_events(page: WebsocketCommunicator) -> list[dict]:
    events = []
    while not await page.receive_nothing(timeout=1):
        message = await page.receive_json_from()
        if message.get("type") == "approval":
            events.append(message)
    return events


async def test_only_pages_of_people_who_may_see_a_request_hear_of_it_and_of_its_escalation():
    pages = {
        "rita": live_page(await sync_to_async(page_cookie)("rita", "Risk officers", "Payments approvers")),
        "olga": live_page(await sync_to_async(page_cookie)("olga", "Risk officers")),
        "lena": live_page(await sync_to_async(page_cookie)("lena", "Risk officers", "Treasury leads")),
    }  # fmt: skip
    for page in pages.values():
        assert (await page.connect())[0]
    payment = await sync_to_async(routed_payment)()
    heard = {name: await approval_events(page) for name, page in pages.items()}
    assert [e["event"] for e in heard["rita"]] == ["requested"]
    assert "groups" not in heard["rita"][0]
    assert heard["olga"] == heard["lena"] == []
    later = timezone.now() + timedelta(seconds=61)
    assert await sync_to_async(approval_escalate_due)(now=later) == 1
    heard = {name: await approval_events(page) for name, page in pages.items()}
    assert [(e["event"], e["approval_id"]) for e in heard["lena"]] == [("escalated", payment.id)]
    assert [e["event"] for e in heard["rita"]] == ["escalated"]
    assert heard["olga"] == []
    for page in pages.values():
        await page.disconnect()
