"""Webhooks with a real Celery worker and real HTTP receivers on this machine."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from access.identity import Actor
from approvals.models import (
    Approval,
    WebhookAttempt,
    WebhookDelivery,
    WebhookSubscription,
)
from shards.services import shard_create
from tests.conftest import ROOT, server_env

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

PUBLIC_URL = "https://zerolock.example"
ALL_EVENTS = ["approval.requested", "approval.decided", "approval.expiring", "approval.expired"]


class Receiver:
    """An HTTP endpoint that records what it gets and answers with the codes
    it is given (the last one repeats)."""

    def __init__(self, codes: list[int] | None = None) -> None:
        self.codes = list(codes or [200])
        self.received: list[dict] = []
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.received.append(
                    {"headers": dict(self.headers.items()), "body": body, "at": time.monotonic()}
                )
                code = receiver.codes.pop(0) if len(receiver.codes) > 1 else receiver.codes[0]
                self.send_response(code)
                self.end_headers()
                receiver.arrived.set()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def verified(secret: str, message: dict) -> dict:
    """Checks the signature as a receiver would (Standard Webhooks), returns the JSON."""
    headers = {k.lower(): v for k, v in message["headers"].items()}
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + message["body"]
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    version, signature = headers["webhook-signature"].split(",", 1)
    assert version == "v1"
    assert hmac.compare_digest(signature, expected), "bad signature"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 30
    return json.loads(message["body"])


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Path]:
    """A real Celery worker (with beat) on the test's broker and database."""
    env = server_env()
    env["ZEROLOCK_WEBHOOK_RETRY_BASE_SECONDS"] = "0.5"
    env["ZEROLOCK_WEBHOOK_MAX_ATTEMPTS"] = "3"
    env["ZEROLOCK_WEBHOOK_TIMEOUT_SECONDS"] = "1"
    tmp = tmp_path_factory.mktemp("webhook-worker")
    log = tmp / "celery.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "zerolock_site",
                "worker",
                "--beat",
                "--concurrency=2",
                "--loglevel=INFO",
                f"--schedule={tmp / 'beat-schedule'}",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while b"ready." not in log.read_bytes():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    yield log
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def api(make_key, client_for):
    shard_create(
        actor=Actor("treasurer"),
        shard_id="treasury",
        shard_type="decision",
        initial_value={"balance": 1000},
        reversible=False,
    )
    executor = client_for(
        make_key("shard:read", "approval:request", agents=["executor"]), "executor"
    )
    officer = client_for(make_key("shard:read", "approval:decide"), "officer")
    return executor, officer


def request(executor, ttl: int = 3600) -> str:
    response = executor.post(
        "/api/approvals/request",
        {
            "shard_id": "treasury",
            "proposed_value": {"balance": 750},
            "expected_version": 1,
            "description": "Pay ACME",
            "ttl_seconds": ttl,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


def subscribe(url: str, events: list[str] | None = None, **kw) -> WebhookSubscription:
    return WebhookSubscription.objects.create(
        name="ops", url=url, events=events or ALL_EVENTS, **kw
    )


def wait_for(check, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_live_receiver_gets_a_signed_approval_requested_within_two_seconds(worker, api):
    executor, officer = api
    receiver = Receiver()
    try:
        subscription = subscribe(receiver.url)
        started = time.monotonic()
        approval_id = request(executor)
        assert receiver.arrived.wait(2.0), worker.read_text()[-2000:]
        elapsed = receiver.received[0]["at"] - started
        event = verified(subscription.secret, receiver.received[0])
        assert event["type"] == "approval.requested"
        assert event["data"]["approval_id"] == approval_id
        assert event["data"]["status"] == "pending"
        assert elapsed < 2.0, elapsed

        receiver.arrived.clear()
        assert officer.post(f"/api/approvals/{approval_id}/approve").status_code == 200
        assert receiver.arrived.wait(2.0)
        decided = verified(subscription.secret, receiver.received[1])
        assert decided["type"] == "approval.decided"
        assert decided["data"]["status"] == "committed"
        delivery = WebhookDelivery.objects.get(approval_id=approval_id, event="approval.requested")
        wait_for(lambda: WebhookAttempt.objects.filter(delivery=delivery, ok=True).exists(), 2)
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts) == ("delivered", 1)
    finally:
        receiver.close()
    print(f"approval.requested reached the receiver {elapsed * 1000:.0f} ms after the request")


def test_a_tampered_body_fails_the_signature_check(worker, api):
    executor, _ = api
    receiver = Receiver()
    try:
        subscription = subscribe(receiver.url, ["approval.requested"])
        request(executor)
        assert receiver.arrived.wait(2.0)
        message = dict(receiver.received[0])
        message["body"] = message["body"].replace(b"Pay ACME", b"Pay EVIL")
        with pytest.raises(AssertionError, match="bad signature"):
            verified(subscription.secret, message)
    finally:
        receiver.close()


def test_a_failing_receiver_is_retried_with_backoff_and_every_attempt_is_recorded(worker, api):
    executor, _ = api
    flaky = Receiver([503, 500, 200])
    dead = Receiver([500])
    try:
        subscribe(flaky.url, ["approval.requested"])
        subscribe(dead.url, ["approval.requested"])
        approval_id = request(executor)
        deliveries = WebhookDelivery.objects.filter(approval_id=approval_id)

        def settled() -> bool:
            return set(deliveries.values_list("status", flat=True)) == {"delivered", "failed"}

        wait_for(settled, 15)
        recovered = deliveries.get(subscription__url=flaky.url)
        gave_up = deliveries.get(subscription__url=dead.url)
        assert (recovered.status, recovered.attempts) == ("delivered", 3)
        assert [a.status_code for a in recovered.tries.all()] == [503, 500, 200]
        assert [a.ok for a in recovered.tries.all()] == [False, False, True]
        assert (gave_up.status, gave_up.attempts) == ("failed", 3)
        assert [a.status_code for a in gave_up.tries.all()] == [500, 500, 500]
        # Exponential backoff: at least 0.5 s, then at least 1 s between attempts
        # (a loaded machine may add to either wait, so their order is not asked).
        times = [m["at"] for m in flaky.received]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert gaps[0] >= 0.4 and gaps[1] >= 0.9, gaps
        # The same message id on every attempt, so a receiver can drop duplicates.
        ids = {m["headers"]["webhook-id"] for m in flaky.received}
        assert ids == {recovered.id}
    finally:
        flaky.close()
        dead.close()


def test_a_decision_is_not_delayed_by_a_dead_endpoint(worker, api):
    executor, officer = api
    # One endpoint accepts connections and never answers; another refuses them.
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(16)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    try:
        subscribe(f"http://127.0.0.1:{hanging.getsockname()[1]}/hook")
        subscribe(f"http://127.0.0.1:{closed_port}/hook")
        approval_id = request(executor)
        started = time.monotonic()
        response = officer.post(f"/api/approvals/{approval_id}/approve")
        took = time.monotonic() - started
        assert response.status_code == 200 and response.json()["status"] == "committed"
        assert took < 0.5, took
        assert Approval.objects.get(pk=approval_id).status == "committed"
        # The worker did try, and recorded why it failed.
        wait_for(
            lambda: (
                WebhookAttempt.objects.filter(
                    delivery__approval_id=approval_id, error__icontains="timeout"
                ).exists()
                and WebhookAttempt.objects.filter(
                    delivery__approval_id=approval_id, error__icontains="connect"
                ).exists()
            ),
            10,
        )
    finally:
        hanging.close()
    print(f"decision with two dead endpoints subscribed took {took * 1000:.0f} ms")


def test_expiring_and_expired_events_are_sent_once(worker, api):
    executor, _ = api
    receiver = Receiver()
    try:
        subscribe(
            receiver.url, ["approval.expiring", "approval.expired"], expiring_lead_seconds=3600
        )
        approval_id = request(executor, ttl=10)
        wait_for(lambda: len(receiver.received) >= 2, 20)
        time.sleep(2.5)  # another beat tick must not send approval.expiring again
        types = [json.loads(m["body"])["type"] for m in receiver.received]
        assert types == ["approval.expiring", "approval.expired"], types
        assert all(
            json.loads(m["body"])["data"]["approval_id"] == approval_id for m in receiver.received
        )
    finally:
        receiver.close()


def test_no_api_input_sets_a_webhook_url(api):
    executor, officer = api
    response = executor.post(
        "/api/approvals/request",
        {
            "shard_id": "treasury",
            "proposed_value": {"balance": 1},
            "expected_version": 1,
            "description": "x",
            "webhook_url": "http://127.0.0.1:1/steal",
        },
        format="json",
    )
    assert response.status_code == 400
    assert "webhook_url" in response.json()["error"]["fields"]
    assert not WebhookSubscription.objects.exists()


def test_admins_manage_subscriptions_and_see_every_attempt_in_admin(worker, api):
    from django.contrib.auth.models import User
    from django.test import Client

    executor, _ = api
    receiver = Receiver([502, 200])
    root = User.objects.create_superuser("root", "", "x")
    admin = Client()
    admin.force_login(root)
    try:
        refused = admin.post(
            "/admin/approvals/webhooksubscription/add/",
            {
                "name": "ops",
                "url": "ftp://127.0.0.1/x",
                "events": ["approval.requested"],
                "active": "on",
                "expiring_lead_seconds": "300",
                "secret": "whsec_" + "A" * 44,
            },
        )
        assert refused.status_code == 200 and not WebhookSubscription.objects.exists()
        created = admin.post(
            "/admin/approvals/webhooksubscription/add/",
            {
                "name": "ops",
                "url": receiver.url,
                "format": "standard",
                "events": ["approval.requested"],
                "active": "on",
                "expiring_lead_seconds": "300",
                "secret": "whsec_" + "A" * 44,
            },
        )
        assert created.status_code == 302, created.content.decode()[:2000]
        assert WebhookSubscription.objects.get().events == ["approval.requested"]
        approval_id = request(executor)
        wait_for(
            lambda: WebhookDelivery.objects.filter(
                approval_id=approval_id, status="delivered"
            ).exists(),
            10,
        )
        delivery = WebhookDelivery.objects.get(approval_id=approval_id)
        # quote(): the admin reads "_26" in a raw "msg_26..." id as "&".
        page = admin.get(
            reverse("admin:approvals_webhookdelivery_change", args=[quote(delivery.id)])
        )
        html = page.content.decode()
        assert page.status_code == 200
        assert "502" in html and "200" in html and "delivered" in html
        listing = admin.get("/admin/approvals/webhookdelivery/").content.decode()
        assert delivery.id in listing
    finally:
        receiver.close()


def test_the_default_schedule_keeps_trying_for_hours_with_backoff(settings):
    from approvals.webhooks import retry_delays

    # The server's defaults (the worker above runs a fast schedule).
    settings.ZEROLOCK_WEBHOOK_RETRY_BASE_SECONDS = 10.0
    settings.ZEROLOCK_WEBHOOK_RETRY_MAX_SECONDS = 3600.0
    settings.ZEROLOCK_WEBHOOK_MAX_ATTEMPTS = 15
    delays = retry_delays()
    assert delays[:3] == [10.0, 20.0, 40.0]  # backs off
    assert delays == sorted(delays) and max(delays) == 3600.0  # never more than an hour apart
    # Six attempts gave up after 310 s; now a receiver down for five hours still
    # gets its events.
    assert sum(delays) > 5 * 3600, sum(delays)


def test_a_payload_links_the_console_absolutely_and_summarises_the_change(worker, api, settings):
    settings.ZEROLOCK_PUBLIC_URL = PUBLIC_URL  # the payload is made where the request is
    executor, _ = api
    receiver = Receiver()
    try:
        subscription = subscribe(receiver.url, ["approval.requested"])
        approval_id = request(executor)
        assert receiver.arrived.wait(5.0), worker.read_text()[-2000:]
        data = verified(subscription.secret, receiver.received[0])["data"]
        assert data["console_url"] == f"{PUBLIC_URL}/console/approvals/{approval_id}"
        assert data["change"] == [
            {"op": "replace", "path": "/balance", "old": "1000", "new": "750"}
        ]
        assert data["change_more"] == 0
    finally:
        receiver.close()


def test_admin_sends_a_test_event_redelivers_a_failed_one_and_lists_health(worker, api, settings):
    from django.contrib.auth.models import User
    from django.test import Client

    settings.ZEROLOCK_PUBLIC_URL = PUBLIC_URL
    executor, _ = api
    receiver = Receiver([500])  # down: every attempt fails until it is told otherwise
    root = User.objects.create_superuser("root", "", "x")
    admin = Client()
    admin.force_login(root)
    try:
        subscription = subscribe(receiver.url, ["approval.requested"])
        approval_id = request(executor)
        delivery = WebhookDelivery.objects.get(approval_id=approval_id)
        wait_for(lambda: WebhookDelivery.objects.get(pk=delivery.pk).status == "failed", 15)
        listing = admin.get("/admin/approvals/webhooksubscription/").content.decode()
        assert '<td class="field-last_success">never</td>' in listing
        assert '<td class="field-failed">1</td>' in listing

        receiver.codes = [200]  # back up
        received = len(receiver.received)
        answer = admin.post(
            "/admin/approvals/webhookdelivery/",
            {"action": "redeliver", "_selected_action": [delivery.pk], "index": "0"},
        )
        assert answer.status_code == 302, answer.content.decode()[:2000]
        wait_for(lambda: WebhookDelivery.objects.get(pk=delivery.pk).status == "delivered", 10)
        delivery.refresh_from_db()
        assert delivery.attempts == 4  # three failed, then the redelivery
        again = receiver.received[received:]
        assert len(again) == 1 and again[0]["headers"]["webhook-id"] == delivery.id
        assert verified(subscription.secret, again[0])["data"]["approval_id"] == approval_id

        answer = admin.post(
            "/admin/approvals/webhooksubscription/",
            {"action": "send_test_event", "_selected_action": [subscription.pk], "index": "0"},
        )
        assert answer.status_code == 302, answer.content.decode()[:2000]
        wait_for(lambda: len(receiver.received) == received + 2, 10)
        test_event = verified(subscription.secret, receiver.received[-1])
        assert test_event["type"] == "webhook.test"
        assert test_event["data"]["console_url"] == f"{PUBLIC_URL}/console/"
        listing = admin.get("/admin/approvals/webhooksubscription/").content.decode()
        assert '<td class="field-failed">0</td>' in listing
        assert '<td class="field-last_success">never</td>' not in listing
    finally:
        receiver.close()


def test_in_a_real_browser_an_admin_sees_health_redelivers_and_sends_a_test_event(
    worker, api, browser, live_server_url
):
    """Issue 28, console defect 8, in Chromium: the subscription list shows a dead
    endpoint's health, the delivery list's "redeliver" action delivers a failed
    delivery once the endpoint is back, and "send a test event" reaches it signed."""
    from django.contrib.auth.models import User
    from playwright.sync_api import expect

    from tests.approvals.conftest import PASSWORD

    executor, _ = api
    receiver = Receiver([500])
    User.objects.create_superuser("root", "", PASSWORD)
    try:
        subscription = subscribe(receiver.url, ["approval.requested"])
        approval_id = request(executor)
        delivery = WebhookDelivery.objects.get(approval_id=approval_id)
        wait_for(lambda: WebhookDelivery.objects.get(pk=delivery.pk).status == "failed", 15)
        page = browser(live_server_url, "root")
        page.goto(f"{live_server_url}/admin/approvals/webhooksubscription/")
        row = page.locator("#result_list tbody tr").filter(has_text="ops")
        expect(row.locator("td.field-failed")).to_have_text("1")
        expect(row.locator("td.field-last_success")).to_have_text("never")

        receiver.codes = [200]  # the endpoint is back
        received = len(receiver.received)
        page.goto(f"{live_server_url}/admin/approvals/webhookdelivery/")
        page.check(f"#result_list input.action-select[value='{delivery.pk}']")
        page.select_option("select[name=action]", "redeliver")
        page.click("#changelist-form button[name=index]")
        expect(page.locator("ul.messagelist")).to_be_visible()
        wait_for(lambda: WebhookDelivery.objects.get(pk=delivery.pk).status == "delivered", 10)
        again = receiver.received[received:]
        assert len(again) == 1 and again[0]["headers"]["webhook-id"] == delivery.id
        assert verified(subscription.secret, again[0])["data"]["approval_id"] == approval_id

        page.goto(f"{live_server_url}/admin/approvals/webhooksubscription/")
        page.check(f"#result_list input.action-select[value='{subscription.pk}']")
        page.select_option("select[name=action]", "send_test_event")
        page.click("#changelist-form button[name=index]")
        expect(page.locator("ul.messagelist")).to_be_visible()
        wait_for(lambda: len(receiver.received) == received + 2, 10)
        assert verified(subscription.secret, receiver.received[-1])["type"] == "webhook.test"
        page.reload()
        row = page.locator("#result_list tbody tr").filter(has_text="ops")
        expect(row.locator("td.field-failed")).to_have_text("0")
        expect(row.locator("td.field-last_success")).not_to_have_text("never")
    finally:
        receiver.close()
