"""The risk officers' console: server-rendered pages over the approval services.

Anyone who may watch (staff, or the view permission: "Viewers", "Risk officers")
sees the pages; only the decide permission ("Risk officers", superusers) gets
the approve and reject forms, and the POST checks it again. Which requests a
person sees and decides at all is routing's rule (approvals.routing): a request
routed to a group they are not in is, for them, a request that does not exist."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import replace_url

from access.auth import can_watch
from audit.chain import value_digest
from audit.models import AuditEntry
from common.errors import ApiError
from common.inputs import json_depth_check
from shards.models import Shard
from shards.value_schema import value_validate

from . import emails, policies, routing, selectors, services
from .diffs import (
    ApprovalDiff,
    approval_diff,
    proposed_value_check,
    stored_diff,
    unmoved,
    value_diff,
)
from .diffview import shown, shown_diff
from .models import Approval, ApprovalQuerySet, ApprovalStatus
from .review import SummaryRow, change_summary, first_change
from .selectors import ApprovalNow, ShardNow

DECIDE_PERMISSION = routing.DECIDE_PERMISSION


def _watcher(request: HttpRequest) -> AbstractBaseUser:
    """The signed-in user, if they may watch (``login_required`` has already
    sent anonymous visitors to the login page)."""
    user = request.user
    if not isinstance(user, AbstractBaseUser) or not can_watch(user):
        raise PermissionDenied("You may not view approvals.")
    return user


def _can_decide(request: HttpRequest) -> bool:
    """May decide some approvals (the forms); which ones is ``routing.may_decide``."""
    return request.user.has_perm(DECIDE_PERMISSION)


def _missing(request: HttpRequest, approval_id: str) -> HttpResponse:
    return render(request, "console/missing.html", {"approval_id": approval_id}, status=404)


def _seen(user: AbstractBaseUser, approval_id: str) -> Approval | None:
    """The approval, if ``user`` may see it (else None: the same 404 as an unknown id)."""
    return Approval.objects.visible_to(user).filter(pk=approval_id).first()


def _decidable(request: HttpRequest, approval_id: str) -> AbstractBaseUser | HttpResponse:
    """The signed-in decider of this approval, or the answer when they are not:
    404 if they may not see it (not a hint that it exists), 403 if they may
    see it but not decide it."""
    user = _watcher(request)
    if not _can_decide(request):
        raise PermissionDenied("Only risk officers may decide approvals.")
    approval = _seen(user, approval_id)
    if approval is None:
        return _missing(request, approval_id)
    if not routing.may_decide(user, approval):
        raise PermissionDenied("This request is routed to a group you are not in.")
    return user


SORTS: dict[str, Callable[[ApprovalQuerySet], ApprovalQuerySet]] = {
    # Time left first: what expires soonest is what needs a decision first.
    "time_left": ApprovalQuerySet.expiring_first,
    "age": ApprovalQuerySet.oldest_first,
    "newest": ApprovalQuerySet.newest_first,
}
QUEUE_LIMIT = 200


@dataclass(frozen=True)
class QueueRow:
    """One pending request as the queue shows it: its shard now, and the first
    line of its change."""

    read: ApprovalNow
    preview: SummaryRow | None
    preview_more: int


def _queue_filters(request: HttpRequest) -> dict[str, str]:
    filters = {
        name: request.GET.get(name, "").strip()[:128]
        for name in ("sort", "shard", "requester", "q", "within", "stale", "page")
    }
    if filters["sort"] not in SORTS:
        filters["sort"] = "time_left"
    if not filters["within"].isdigit():
        filters["within"] = ""
    filters["stale"] = "1" if filters["stale"] in ("1", "on", "yes") else ""
    if not filters["page"].isdigit() or int(filters["page"]) < 2:
        filters["page"] = ""
    return filters


@login_required
@require_GET
def queue(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    context = _queue_context(request)
    # Those who may decide learn here that no mail will tell them of a request.
    context["email_off"] = context["can_decide"] and not emails.email_enabled()
    return render(request, "console/queue.html", context)


@login_required
@require_GET
def queue_rows(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    context = _queue_context(request)
    response = render(request, "console/_queue_rows.html", context)
    # The filters live in the address bar too: a reload, a bookmark or a link
    # sent to a colleague shows the same queue.
    # (Replaced, not pushed: the rows also refresh every 30 s.)
    here = reverse("console-queue") + (f"?{context['query']}" if context["query"] else "")
    return replace_url(response, here)


@login_required
@require_GET
def pending_count(request: HttpRequest) -> JsonResponse:
    """For the navigation badge and the tab title, refreshed on live events."""
    user = _watcher(request)
    return JsonResponse({"pending": Approval.objects.visible_to(user).pending().count()})


def _queue_context(request: HttpRequest) -> dict[str, Any]:
    filters = _queue_filters(request)
    now = timezone.now()
    approvals = (
        Approval.objects.visible_to(request.user).pending(now).on_shards_starting(filters["shard"])
    )
    if filters["requester"]:
        # A part of the agent's id is enough: officers remember "billing", not
        # "billing-agent-7f3a".
        approvals = approvals.filter(requested_by__icontains=filters["requester"])
    if filters["q"]:
        approvals = approvals.filter(description__icontains=filters["q"])
    if filters["within"]:
        minutes = min(int(filters["within"]), 7 * 24 * 60)
        approvals = approvals.expiring_by(now + timedelta(minutes=minutes))
    if filters["stale"]:
        # The one staleness rule lives in Python (selectors.approval_stale): ask
        # it of every match, reading only what it needs (no values), so the
        # count and the pages are exact however long the queue.
        thin = approvals.only("id", "shard_id", "expected_version")
        approvals = approvals.filter(
            pk__in=[read.approval.id for read in selectors.approvals_now(thin) if read.stale]
        )
    total = approvals.count()
    pages = max(1, -(-total // QUEUE_LIMIT))
    page = min(int(filters["page"] or 1), pages)
    start = (page - 1) * QUEUE_LIMIT
    reads = selectors.approvals_now(
        SORTS[filters["sort"]](approvals).with_decisions()[start : start + QUEUE_LIMIT]
    )
    rows = [
        QueueRow(read, *first_change(read.approval.diff, read.approval.value_at_request))
        for read in reads
    ]
    same = {k: v for k, v in filters.items() if v and k != "page"}
    return {
        "rows": rows,
        "now": now,
        "filters": filters,
        "total": total,
        "first": start + 1 if rows else 0,
        "last": start + len(rows),
        "previous_page": urlencode({**same, "page": page - 1}) if page > 1 else None,
        "next_page": urlencode({**same, "page": page + 1}) if page < pages else None,
        "filtered": any(filters[k] for k in ("shard", "requester", "q", "within", "stale")),
        "sorts": [("time_left", "time left"), ("age", "oldest first"), ("newest", "newest first")],
        "within_choices": [
            ("5", "5 min"),
            ("15", "15 min"),
            ("60", "1 hour"),
            ("240", "4 hours"),
            ("1440", "1 day"),
            ("10080", "1 week"),
        ],
        "can_decide": _can_decide(request),
        "query": urlencode({k: v for k, v in filters.items() if v}),
    }


@login_required
@require_POST
def bulk_reject(request: HttpRequest) -> HttpResponse:
    """Reject several requests with one reason. (There is no bulk approve: each
    approval of an irreversible change takes its own confirmation.)"""
    user = _watcher(request)
    if not _can_decide(request):
        raise PermissionDenied("Only risk officers may decide approvals.")
    ids = request.POST.getlist("ids")[:QUEUE_LIMIT]
    reason = request.POST.get("reason", "").strip()
    back = redirect(f"{reverse('console-queue')}?{request.POST.get('query', '')}")
    if not ids:
        messages.error(request, "Select the requests to reject.")
        return back
    if not reason:
        messages.error(request, "A rejection needs a reason: give one for the selected requests.")
        return back
    rejected, failed = 0, []
    for approval_id in ids:
        seen = _seen(user, approval_id)
        if seen is None or not routing.may_decide(user, seen):
            failed.append(f"{approval_id}: APPROVAL_NOT_FOUND")
            continue
        try:
            services.approval_decide(
                approval_id=approval_id,
                decider=services.Decider.user(user),
                approve=False,
                reason=reason,
            )
            rejected += 1
        except ApiError as error:
            failed.append(f"{approval_id}: {error.code}")
    if rejected:
        messages.success(request, f"Rejected {rejected} request{'s' if rejected != 1 else ''}.")
    if failed:
        messages.error(request, "Not rejected: " + "; ".join(failed))
    return back


def _metadata_rows(metadata: object) -> list[tuple[str, dict[str, Any]]]:
    """Top-level keys in order, strings as they are, anything else as pretty
    JSON; the template escapes both (links are shown, not followed)."""
    if not isinstance(metadata, dict):
        return []
    return [
        (
            str(key),
            {"is_text": True, "text": value}
            if isinstance(value, str)
            else {
                "is_text": False,
                "text": json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False),
            },
        )
        for key, value in metadata.items()
    ]


@dataclass(frozen=True)
class TrailEntry:
    entry: AuditEntry
    details_json: str


@login_required
@require_GET
def detail(request: HttpRequest, approval_id: str) -> HttpResponse:
    user = _watcher(request)
    approval = Approval.objects.visible_to(user).with_decisions().filter(pk=approval_id).first()
    if approval is None:
        return _missing(request, approval_id)
    # One read of the shard: the versions, the value and its rules agree.
    current = (
        Shard.objects.filter(pk=approval.shard_id)
        .values("version", "created_at", "value", "reversible")
        .first()
    )
    read = ApprovalNow(
        approval, ShardNow(current["version"], current["created_at"]) if current else None
    )
    current_value = shown(current["value"] if current else None)
    proposed_value = shown(approval.proposed_value)
    # What an approval writes: a decider's edit replaces the proposal.
    applied_value = shown(approval.value_to_apply)
    status = approval.effective_status
    trail = [
        TrailEntry(entry, json.dumps(entry.details, sort_keys=True))
        for entry in AuditEntry.objects.filter(details__approval_id=approval.id).order_by("id")
    ]
    decisions = list(approval.decisions.all())
    pending = status == ApprovalStatus.PENDING
    moved = read.shard is not None and not unmoved(approval, read.shard)
    asked = stored_diff(approval)
    asked_summary = (
        change_summary(asked.patch, approval.value_at_request) if asked.patch is not None else None
    )
    if pending:
        # What approving would do now: the server's RFC 6902 patch against the
        # current value (the stored one while the shard has not moved); and,
        # once it has moved, what the agent meant beside it.
        base = current["value"] if moved and current else approval.value_at_request
        patch = (
            _edit_diff(base, approval) if approval.edited else approval_diff(approval, read.shard)
        )
        summary = change_summary(patch.patch, base) if patch.patch is not None else None
        intended = asked_summary if moved else None
        lines = shown_diff(current_value, applied_value)
    else:
        # A decided request shows what it asked for, from the value it was asked
        # against: a committed one's own commit is the current value, which
        # compared with itself read "No change". An edited one, what it applied.
        patch, summary, intended = asked, asked_summary, None
        if approval.edited:
            patch = _edit_diff(approval.value_at_request, approval)
            summary = (
                change_summary(patch.patch, approval.value_at_request)
                if patch.patch is not None
                else None
            )
        lines = shown_diff(shown(approval.value_at_request), applied_value)
    # Counted only: an approval an edit replaced leaves its officer free to approve again.
    mine = next((d for d in decisions if d.principal == f"user:{user.pk}" and d.counts), None)
    return render(
        request,
        "console/detail.html",
        {
            "approval": approval,
            "status": status,
            "current": current,
            "stale": read.stale and pending,
            "stale_refusal": stale_refusal(read) if read.stale and pending else "",
            "stale_reason": stale_reason(read) if read.stale and pending else "",
            "diff": lines,
            "summary": summary,
            "intended": intended,
            "diff_omitted": patch.omitted,
            "value_at_request": shown(approval.value_at_request).text,
            "current_value": current_value.text,
            "proposed_value": proposed_value.text,
            "applied_value": applied_value.text,
            "applied_value_hash": value_digest(approval.value_to_apply),
            # The editor starts from what an approval would write now.
            "editor_value": json.dumps(
                approval.value_to_apply, indent=2, sort_keys=True, ensure_ascii=False
            ),
            "previous": _seen(user, approval.previous_id) if approval.previous_id else None,
            "followers": list(
                Approval.objects.visible_to(user)
                .filter(previous_id=approval.id)
                .order_by("created_at")[:20]
            ),
            "drifted": moved,
            "decisions": decisions,
            "approvals_counted": approval.approvals_counted(),
            "approvers": selectors.approvers_of(approval),
            "my_decision": mine,
            "trail": trail,
            "irreversible": current is not None and not current["reversible"],
            "can_decide": routing.may_decide(user, approval) and pending and mine is None,
            "next_id": selectors.next_pending(approval.id, user),
            "metadata": _metadata_rows(approval.metadata),
            "same_kind": _same_kind_covers(approval),
        },
    )


def _same_kind_covers(approval: Approval) -> list[str]:
    """What "Approve, and approve the same kind for 1 hour" would cover, in the
    words the dialog shows; empty when the request offers no such policy."""
    kind = policies.same_kind(approval)
    if kind is None:
        return []
    fields = kind.fields
    who = f"requests by agent {fields['requested_by']}"
    if fields["key_prefix"]:
        who += f" through key {fields['key_prefix']}"
    return [
        f"shards whose id starts with {fields['shard_prefix']!r} (this one, and any id "
        "that begins with it)",
        who,
        *(f"proposed values where {line}" for line in kind.covers),
        "anything else in the proposed value is not checked",
        f"for {policies.SAME_KIND_SECONDS // 60} minutes from now; "
        "other deciders' requests and quorum rules are unchanged",
    ]


def _edit_diff(base: Any, approval: Approval) -> ApprovalDiff:
    """From ``base`` to the edited value: what an edited request writes."""
    result = value_diff(base, approval.edited_value)
    return ApprovalDiff(result.patch, result.omitted, approval.version_at_request)


def _settled(approval_id: str) -> str:
    """What an officer deciding a request that is no longer pending is told: who
    decided it, when, and what came of it. Empty while it is pending. (The one who
    lost a simultaneous approve was once shown "the shard has moved on", about the
    very commit the other officer's approval made.)"""
    approval = Approval.objects.filter(pk=approval_id).first()
    if approval is None:
        return ""
    status = approval.effective_status
    if status == ApprovalStatus.PENDING:
        return ""
    if status == ApprovalStatus.EXPIRED:
        return "This request expired before your decision: nothing was recorded or written."
    who = approval.decided_by.removeprefix("user:").removeprefix("agent:") or "someone"
    when = approval.decided_at.strftime("%H:%M:%S UTC") if approval.decided_at else ""
    commit = approval.commit or {}
    outcome = {
        ApprovalStatus.COMMITTED: f"the change is applied: {approval.shard_id} is at version "
        f"{commit.get('version')}",
        ApprovalStatus.REJECTED: "it was rejected, and nothing was written",
        ApprovalStatus.APPROVED_STALE: "it was approved but could not apply (stale); nothing "
        "was written",
        ApprovalStatus.CHANGES_REQUESTED: "the agent was asked for changes, and nothing was "
        "written",
    }.get(status, f"it is {status}")
    verb = {
        ApprovalStatus.REJECTED: "rejected",
        ApprovalStatus.CHANGES_REQUESTED: "asked for changes to",
    }.get(status, "approved")
    return (
        f"{who} {verb} this a moment before you (at {when}): {outcome}. "
        "Your decision was not needed and was not recorded."
    )


def stale_reason(read: ApprovalNow) -> str:
    """What "Reject as stale" records: the versions, in the server's words."""
    now = f"v{read.current_version}" if read.current_version is not None else "deleted"
    return (
        f"Stale: the shard moved on from v{read.approval.expected_version} (now {now}) "
        "before this was decided; ask again against the current value."
    )


def stale_refusal(read: ApprovalNow) -> str:
    """Why a stale request cannot be approved here: one sentence for the page
    and for a refused decision."""
    now = f"v{read.current_version}" if read.current_version is not None else "deleted"
    return (
        f"This request can no longer apply: it names v{read.approval.expected_version} of "
        f"the shard, which has moved on (now {now}). Approving it would write nothing; "
        "the agent must ask again (a new request can name this one as previous_id)."
    )


@login_required
@require_POST
def decide(request: HttpRequest, approval_id: str) -> HttpResponse:
    user = _decidable(request, approval_id)
    if isinstance(user, HttpResponse):
        return user
    action = request.POST.get("action")
    if action not in ("approve", "reject", "reject_stale", "edit", "request_changes"):
        messages.error(request, "Choose approve or reject.")
        return redirect("console-detail", approval_id=approval_id)
    decision: dict[str, Any] = {}
    if action in ("approve", "edit"):
        # What the page showed as the value to apply: another officer's edit
        # since then refuses this approval (APPROVAL_VALUE_CHANGED).
        decision["expected_value_hash"] = request.POST.get("expected_value_hash") or None
    if action == "edit":
        try:
            decision["edited_value"] = json.loads(request.POST.get("edited_value", ""))
        except ValueError as error:
            messages.error(request, f"The edited value is not JSON ({error}); nothing was decided.")
            return redirect("console-detail", approval_id=approval_id)
    if action == "request_changes":
        decision["request_changes"] = True
        if not request.POST.get("message", "").strip():
            messages.error(request, "Say what the agent should change: the message is required.")
            return redirect("console-detail", approval_id=approval_id)
    settled = _settled(approval_id)
    if settled:
        messages.info(request, settled)
        return redirect("console-detail", approval_id=approval_id)
    reason = request.POST.get("message" if action == "request_changes" else "reason", "")
    if action in ("approve", "edit", "reject_stale"):
        asked = Approval.objects.only("shard_id", "expected_version").filter(pk=approval_id).first()
        read = selectors.approval_now(asked) if asked is not None else None
        stale = read is not None and read.stale
        if action == "reject_stale":
            if read is not None and not stale:
                messages.error(
                    request, "The shard has not moved on: reject with your own reason instead."
                )
                return redirect("console-detail", approval_id=approval_id)
            # The server writes the stale reason, so the rejection says why
            # whether or not the reason box (or the page's script) said anything.
            note = reason.strip()
            reason = stale_reason(read) + (f" {note}" if note else "") if read else note
            action = "reject"
        elif stale and read is not None:
            # No "approve anyway" (docs/decisions.md): the commit would be refused,
            # so the console does not record an approval nothing can use.
            messages.error(request, f"{stale_refusal(read)} Reject it as stale.")
            return redirect("console-detail", approval_id=approval_id)
    try:
        approval = services.approval_decide(
            approval_id=approval_id,
            decider=services.Decider.user(user),
            approve=action in ("approve", "edit"),
            reason=reason,
            **decision,
        )
    except ApiError as error:
        # Decided by someone else between the check above and this decision.
        settled = _settled(approval_id)
        if settled:
            messages.info(request, settled)
        else:
            messages.error(request, f"{error.code}: {error.message}")
        return redirect("console-detail", approval_id=approval_id)
    commit = approval.commit or {}
    if approval.status == ApprovalStatus.COMMITTED:
        messages.success(
            request,
            f"Approved and committed: {approval.shard_id} is now at version "
            f"{commit['version']} (audit entry {commit['audit_entry_id']}).",
        )
    elif approval.status == ApprovalStatus.APPROVED_STALE:
        messages.warning(
            request,
            f"Approved, but not applied (stale): {commit.get('error')} "
            f"(the shard is at version {commit.get('current_version')}). "
            "Nothing was written.",
        )
    elif approval.status == ApprovalStatus.REJECTED:
        messages.success(request, "Rejected. The requester has been told why.")
    elif approval.status == ApprovalStatus.CHANGES_REQUESTED:
        messages.success(request, "Changes requested. The agent has your message.")
    else:
        messages.success(
            request,
            f"Your approval is recorded ({approval.approvals_counted()} of "
            f"{approval.approvals_required}).",
        )
    return redirect("console-detail", approval_id=approval_id)


@login_required
@require_POST
def approve_same_kind(request: HttpRequest, approval_id: str) -> HttpResponse:
    """Approve this request, then create a one-hour policy for the same kind
    (``policies.same_kind``), authored by this officer: the self-approval rule
    then keeps it off the officer's own keys' requests. The approval comes first,
    so a refused decision creates no policy. Routing: only a decider of this
    request creates one, and a policy decides only what its author may
    (``services._policy_decide``)."""
    user = _decidable(request, approval_id)
    if isinstance(user, HttpResponse):
        return user
    settled = _settled(approval_id)
    if settled:
        messages.info(request, settled)
        return redirect("console-detail", approval_id=approval_id)
    asked = Approval.objects.filter(pk=approval_id).first()
    kind = policies.same_kind(asked) if asked is not None else None
    read = selectors.approval_now(asked) if asked is not None else None
    if kind is None or read is None or read.stale:
        messages.error(request, "This request offers no standing approval: decide it alone.")
        return redirect("console-detail", approval_id=approval_id)
    reason = request.POST.get("reason", "").strip() or "Approved with the same kind for 1 hour."
    try:
        approval = services.approval_decide(
            approval_id=approval_id,
            decider=services.Decider.user(user),
            approve=True,
            reason=reason,
            expected_value_hash=request.POST.get("expected_value_hash") or None,
        )
    except ApiError as error:
        messages.error(request, f"{error.code}: {error.message}")
        return redirect("console-detail", approval_id=approval_id)
    try:
        policy = policies.policy_create(
            created_by=f"user:{user.get_username()}",
            author_key=None,
            author_user_id=user.pk,
            reason=f"Same kind as {approval_id}, approved by {user.get_username()}: {reason}",
            **kind.fields,
        )
    except ApiError as error:  # the approval stands; only the policy was refused
        messages.warning(
            request,
            f"Approved ({approval.status}), but no standing policy was created: "
            f"{error.code}: {error.message}",
        )
        return redirect("console-detail", approval_id=approval_id)
    messages.success(
        request,
        f"Approved ({approval.status}), and policy {policy.id} approves the same kind "
        f"until {policy.expires_at:%H:%M} UTC.",
    )
    return redirect("console-detail", approval_id=approval_id)


def _day(value: str, *, end: bool = False) -> datetime | None:
    """A filter date; ValueError for text that is not a real day (2024-02-31)."""
    if not value:
        return None
    day = parse_date(value)  # raises ValueError for a well-formed impossible date
    if day is None:
        raise ValueError(value)
    moment = datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())
    return moment + timedelta(days=1) if end else moment


@login_required
@require_GET
def history(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    filters = {
        name: request.GET.get(name, "").strip()
        for name in ("status", "shard_id", "requested_by", "decided_by", "since", "until")
    }
    if filters["status"] not in ApprovalStatus.values:
        filters["status"] = ""
    days, errors = {}, []
    for name in ("since", "until"):
        try:
            days[name] = _day(filters[name], end=name == "until")
        except ValueError:
            days[name] = None
            errors.append(f"{name.capitalize()}: {filters[name]!r} is not a date (YYYY-MM-DD).")
    approvals = (
        Approval.objects.visible_to(request.user)
        .matching(
            status=filters["status"],
            shard_id=filters["shard_id"],
            requested_by=filters["requested_by"],
            decided_by=filters["decided_by"],
            since=days["since"],
            until=days["until"],
        )
        .newest_first()
    )
    page = Paginator(approvals, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "console/history.html",
        {
            "page": page,
            "filters": filters,
            "statuses": ApprovalStatus.values,
            "query": query.urlencode(),
            "errors": errors,
        },
        status=400 if errors else 200,
    )


@login_required
@require_POST
def edit_preview(request: HttpRequest, approval_id: str) -> HttpResponse:
    """Approve with edits, step two: the edited value's change against the
    proposal, and the confirmation. Nothing is decided here; invalid JSON or a
    value the shard's schema refuses is shown with the text kept for fixing."""
    user = _decidable(request, approval_id)
    if isinstance(user, HttpResponse):
        return user
    approval = Approval.objects.filter(pk=approval_id).first()
    if approval is None:
        return _missing(request, approval_id)
    settled = _settled(approval_id)
    if settled:
        messages.info(request, settled)
        return redirect("console-detail", approval_id=approval_id)
    read = selectors.approval_now(approval)
    if read.stale:
        # An edit approves too, at the version the request names: it would not apply.
        messages.error(request, f"{stale_refusal(read)} Reject it as stale.")
        return redirect("console-detail", approval_id=approval_id)
    text = request.POST.get("edited_value", "")
    error, edited, summary, omitted = "", None, None, ""
    try:
        # The API's depth rule, before json.loads (which recurses once a level).
        json_depth_check(text.encode(), settings.ZEROLOCK_APPROVAL_MAX_DEPTH)
        edited = json.loads(text)
        proposed_value_check(edited, "edited_value")
    except ApiError as refusal:
        error = refusal.message
    except ValueError as problem:
        error = f"Not JSON: {problem}."
    if not error:
        shard = Shard.objects.filter(pk=approval.shard_id).first()
        try:
            if shard is not None:
                value_validate(shard.value_schema, edited)
        except ApiError as refusal:
            error = f"{refusal.code}: {refusal.message}"
    if not error:
        patch = value_diff(approval.value_to_apply, edited)
        omitted = patch.omitted
        if patch.patch is not None:
            summary = change_summary(patch.patch, approval.value_to_apply)
    return render(
        request,
        "console/edit.html",
        {
            "approval": approval,
            "text": text,
            "error": error,
            "summary": summary,
            "diff_omitted": omitted,
            "canonical": json.dumps(edited, sort_keys=True, ensure_ascii=False),
            # The edit replaces what this page compared it with, and only that.
            "applied_value_hash": value_digest(approval.value_to_apply),
            "unchanged": not error and summary is not None and not summary.rows,
        },
        status=400 if error else 200,
    )
