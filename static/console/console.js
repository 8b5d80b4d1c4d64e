// ZeroLock pages: live updates over /ws/live/ and TTL countdowns. No framework.
(function () {
  "use strict";

  function left(ms) {
    if (ms <= 0) return "expired";
    var s = Math.floor(ms / 1000), d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
    var m = Math.floor((s % 3600) / 60);
    s = s % 60;
    // Days first: a week-long request read "170h 3m 2s".
    if (d) return d + "d " + h + "h";
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s";
  }

  // "12 s ago" under a minute, then minutes, hours, days.
  function ago(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min ago";
    return Math.floor(s / 86400) + " d ago";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time.relative[datetime]").forEach(function (el) {
      el.textContent = ago(now - Date.parse(el.getAttribute("datetime")));
    });
    document.querySelectorAll(".countdown[data-expires]").forEach(function (el) {
      var ms = Date.parse(el.dataset.expires) - now;
      el.textContent = left(ms);
      el.classList.toggle("urgent", ms < 60000);
    });
  }

  // Pages say what they want from a push: the queue refreshes its rows (htmx, on
  // the "zl-refresh" event), a detail page reloads when its approval changed.
  var submitting = false;
  document.addEventListener("submit", function (event) { if (!event.defaultPrevented) submitting = true; });

  function refresh() { document.body.dispatchEvent(new Event("zl-refresh")); }

  // Shard changes arrive in batches (the server coalesces them): update rows in
  // place on the shards page, refresh the panel on a shard's own page.
  function onShards(changes) {
    var rows = document.getElementById("shard-rows");
    var panel = document.getElementById("shard-live");
    var unknown = false;
    changes.forEach(function (change) {
      if (panel && panel.dataset.shardId === change.shard_id) refresh();
      if (!rows) return;
      var row = rows.querySelector('tr[data-shard-id="' + CSS.escape(change.shard_id) + '"]');
      if (!row) {
        unknown = unknown || change.shard_id.indexOf(rows.dataset.prefix || "") === 0;
        return;
      }
      row.querySelector(".version").textContent = "v" + change.version;
      row.querySelector(".updated-by").textContent = change.updated_by;
      row.querySelector(".updated-at").textContent = change.updated_at.substr(0, 19).replace("T", " ");
      row.classList.remove("flash"); void row.offsetWidth; row.classList.add("flash");
    });
    if (unknown) refresh();  // a new shard: fetch the rows again
  }

  // --- the detail page -------------------------------------------------------
  // It never reloads itself: what changed elsewhere is shown in a banner, and the
  // parts of the page that changed are fetched and swapped in around the form,
  // so a reason being typed is never lost.
  var detail = null;

  function banner(text, kind) {
    var el = document.getElementById("live-banner");
    if (!el) return;
    el.hidden = false;
    el.className = "callout live-banner " + (kind || "warn");
    el.textContent = text + " ";
    var again = document.createElement("a");
    again.href = location.href;
    again.textContent = "Reload the page";
    el.appendChild(again);
    if (document.getElementById("reason") && document.getElementById("reason").value) {
      el.appendChild(document.createTextNode(" (your reason will not be kept)"));
    }
  }

  function decisionsClosed(why) {
    // Every decision form: approve, reject, approve with edits, request changes.
    document.querySelectorAll("#decide button, #decide input, #decide textarea").forEach(function (b) {
      b.disabled = true;
    });
    var form = document.getElementById("decide-form");
    if (form) form.dataset.closed = why;
    var dialog = document.getElementById("confirm-approve");
    if (dialog && dialog.open) dialog.close();
  }

  function goStale() {
    var section = document.getElementById("decide");
    if (section) section.dataset.stale = "1";
    var values = document.getElementById("three-values");
    if (values) values.open = true;
    // Nothing left to approve: a confirmation already open would commit nothing.
    var dialog = document.getElementById("confirm-approve");
    if (dialog && dialog.open) dialog.close();
  }

  // Fetch this page again and swap in everything but the decision form.
  var PARTS = ["approval-status", "facts", "change", "line-diff", "history-parts", "stale-callout"];
  function refreshParts() {
    fetch(location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      var fresh = new DOMParser().parseFromString(html, "text/html");
      PARTS.forEach(function (id) {
        var now = document.getElementById(id), then = fresh.getElementById(id);
        if (now && then) now.replaceWith(then);
        else if (!now && then && id === "stale-callout") {
          var change = document.getElementById("change");
          if (change) change.before(then);
        }
      });
      var values = document.getElementById("three-values");
      if (values && detail && detail.dataset.drifted === "1") values.open = true;
      tick();
    }).catch(function () { /* the banner already says what happened */ });
  }

  function onDetailEvent(event) {
    if (!detail) return;
    if (event.type === "shards") {
      event.changes.forEach(function (change) {
        if (change.shard_id !== detail.dataset.shardId) return;
        if (String(change.version) === detail.dataset.expectedVersion) return;
        detail.dataset.drifted = "1";
        if (detail.dataset.status !== "pending") { refreshParts(); return; }
        banner("The shard " + change.shard_id + " moved on to v" + change.version + " while this page was open: approving would no longer apply.", "warn");
        goStale();
        refreshParts();
      });
      return;
    }
    if (event.type !== "approval" || event.approval_id !== detail.dataset.approvalId) return;
    if (submitting) return;  // our own decision: the redirect shows the result
    if (event.event === "approved_partly") {
      banner("Another officer approved this request: the quorum has moved.", "info");
      refreshParts();
      return;
    }
    if (event.event === "decided" && event.status !== detail.dataset.status) {
      detail.dataset.status = event.status;
      var label = event.status === "approved_stale" ? "approved \u2013 not applied (stale)" : event.status;
      banner(event.status === "expired" ? "This request expired: it can no longer be decided."
        : "Someone else decided this request while it was open: " + label + ".", event.status === "committed" ? "info" : "warn");
      decisionsClosed(event.status);
      refreshParts();
    }
  }

  function expiredLocally() {
    if (!detail || detail.dataset.status !== "pending") return;
    var countdown = document.querySelector("#facts .countdown[data-expires]");
    if (!countdown || Date.parse(countdown.dataset.expires) > Date.now()) return;
    detail.dataset.status = "expired";
    banner("This request expired: it can no longer be decided.", "warn");
    decisionsClosed("expired");
    // The server reads an overdue request as expired whether or not the worker
    // has marked it: fetch its view of the page (a moment later, past any skew).
    setTimeout(refreshParts, 1000);
  }

  function reasonCheck(event) {
    var reason = document.getElementById("reason"), error = document.getElementById("reason-error");
    if (reason.value.trim()) { error.hidden = true; reason.removeAttribute("aria-invalid"); return true; }
    error.hidden = false;
    reason.setAttribute("aria-invalid", "true");
    reason.focus();
    if (event) event.preventDefault();
    return false;
  }

  function setUpDecision() {
    var form = document.getElementById("decide-form");
    if (!form) return;
    var dialog = document.getElementById("confirm-approve");
    var pendingApprove = null;
    form.addEventListener("click", function (event) {
      var button = event.target.closest("button[name=action]");
      if (!button) return;
      // The server writes the stale reason itself; the officer's, if any, follows it.
      if (button.value === "reject_stale") return;
      if (button.value === "reject") {
        if (!reasonCheck(event)) submitting = false;
        return;
      }
      // Approving takes a second, deliberate step in a dialog.
      event.preventDefault();
      if (!dialog) return;
      pendingApprove = button;
      dialog.showModal();
      document.getElementById("confirm-cancel").focus();
    });
    if (dialog) {
      document.getElementById("confirm-cancel").addEventListener("click", function () { dialog.close(); });
      document.getElementById("confirm-yes").addEventListener("click", function () {
        dialog.close();
        submitting = true;
        form.requestSubmit(pendingApprove);
      });
    }
    // "Approve, and approve the same kind for 1 hour": its own dialog says what
    // the policy will cover; only its "Yes" submits.
    var sameKind = document.getElementById("approve-same-kind");
    var sameKindDialog = document.getElementById("confirm-same-kind");
    if (sameKind && sameKindDialog) {
      sameKind.addEventListener("click", function () {
        sameKindDialog.showModal();
        document.getElementById("same-kind-cancel").focus();
      });
      document.getElementById("same-kind-cancel").addEventListener("click", function () {
        sameKindDialog.close();
      });
    }
    document.getElementById("reason").addEventListener("input", function () {
      if (this.value.trim()) document.getElementById("reason-error").hidden = true;
    });
  }

  // --- browser notifications, for officers who allowed them -------------------
  // Only when the queue is not in front of them: the open queue shows it anyway.
  function notifyOfficer(event) {
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    if (document.getElementById("queue-rows") && !document.hidden) return;
    try {
      var note = new Notification("ZeroLock: a change waits for approval", {
        body: "Shard " + event.shard_id + " · open the console to review it",
        tag: event.approval_id,
      });
      note.onclick = function () { window.focus(); location.href = "/console/approvals/" + encodeURIComponent(event.approval_id); };
    } catch (e) { /* some browsers allow notifications only from a service worker */ }
  }

  function setUpNotifications() {
    var button = document.getElementById("enable-notifications");
    if (!button || !("Notification" in window)) return;
    var state = document.getElementById("notifications-state");
    function show() {
      var p = Notification.permission;
      button.hidden = p !== "default";
      if (state) state.textContent = p === "granted" ? "Desktop notifications are on for new requests."
        : p === "denied" ? "Desktop notifications are blocked in this browser's settings." : "";
    }
    button.addEventListener("click", function () { Notification.requestPermission().then(show); });
    show();
  }

  // --- the pending count in the navigation and the tab title ----------------
  function showPending(count) {
    var badge = document.getElementById("pending-count");
    if (badge) { badge.textContent = count; badge.setAttribute("aria-label", count + " pending"); }
    document.title = (count ? "(" + count + ") " : "") + document.title.replace(/^\(\d+\) /, "");
  }

  var countTimer = null;
  function refreshPending() {
    var url = document.body.dataset.pendingUrl;
    if (!url || countTimer) return;
    countTimer = setTimeout(function () {  // a burst of requests: one fetch
      countTimer = null;
      fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); })
        .then(function (data) { showPending(data.pending); }).catch(function () {});
    }, 150);
  }

  // --- the queue: selection that survives refreshes, keyboard shortcuts -------
  var selectedId = null, checked = {};

  function queueRows() {
    return Array.prototype.slice.call(document.querySelectorAll("#queue-rows tr[data-approval-id]"));
  }

  function select(row) {
    queueRows().forEach(function (r) { r.classList.remove("selected"); r.removeAttribute("aria-selected"); });
    if (!row) { selectedId = null; return; }
    row.classList.add("selected");
    row.setAttribute("aria-selected", "true");
    selectedId = row.dataset.approvalId;
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var rows = queueRows();
    if (!rows.length) return;
    var index = rows.findIndex(function (r) { return r.dataset.approvalId === selectedId; });
    index = index < 0 ? (step > 0 ? 0 : rows.length - 1) : Math.min(rows.length - 1, Math.max(0, index + step));
    select(rows[index]);
  }

  function selectedRow() {
    return queueRows().find(function (r) { return r.dataset.approvalId === selectedId; });
  }

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  // A new filter starts the queue again at its first page; the 30 s refresh
  // (which includes #queue-page) then stays on the page the filter chose.
  function pageReset(event) {
    var filters = document.getElementById("queue-filters"), page = document.getElementById("queue-page");
    if (filters && page && filters.contains(event.target)) page.value = "";
  }
  document.addEventListener("change", pageReset, true);
  document.addEventListener("submit", pageReset, true);

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    if (document.querySelector("dialog[open]")) return;  // the dialog has the keyboard
    var key = event.key;
    if (key === "?") { document.getElementById("shortcuts").showModal(); event.preventDefault(); return; }
    if (document.getElementById("queue-rows")) {
      var row = selectedRow();
      if (key === "j") move(1);
      else if (key === "k") move(-1);
      else if ((key === "o" || key === "Enter") && row) location.href = row.dataset.url;
      else if (key === "a" && row) location.href = row.dataset.url + "#approve";
      else if (key === "r" && row) location.href = row.dataset.url + "#reject";
      else return;
      event.preventDefault();
      return;
    }
    if (!detail) return;
    if (key === "a") {
      var approve = document.getElementById("approve");
      var section = document.getElementById("decide");
      // A stale request cannot be approved: "a" lands on the one thing left to do.
      if (section && section.dataset.stale === "1") document.getElementById("reject-stale").focus();
      else if (approve && !approve.disabled) approve.click();
    } else if (key === "r") {
      var reason = document.getElementById("reason");
      if (!reason || reason.disabled) return;
      if (reason.value.trim()) document.getElementById(document.getElementById("decide").dataset.stale === "1" ? "reject-stale" : "reject").click();
      else reason.focus();
    } else if (key === "n") {
      if (detail.dataset.nextUrl) location.href = detail.dataset.nextUrl;
      else location.href = "/console/";
    } else return;
    event.preventDefault();
  }

  function remember() {
    checked = {};
    document.querySelectorAll("#queue-rows input[name=ids]:checked").forEach(function (box) { checked[box.value] = true; });
  }

  function restore() {
    document.querySelectorAll("#queue-rows input[name=ids]").forEach(function (box) { box.checked = !!checked[box.value]; });
    if (selectedId) select(selectedRow() || null);
  }

  function setUpQueue() {
    var body = document.getElementById("queue-rows");
    if (!body) return;
    body.addEventListener("htmx:beforeSwap", remember);
    body.addEventListener("htmx:afterSwap", restore);
    body.addEventListener("click", function (event) {
      var row = event.target.closest("tr[data-approval-id]");
      if (row && !event.target.closest("a, input")) select(row);
    });
    var form = document.getElementById("bulk-form");
    if (form) form.addEventListener("submit", function (event) {
      var any = form.querySelector("input[name=ids]:checked");
      var reason = document.getElementById("bulk-reason");
      var error = document.getElementById("bulk-error");
      if (any && reason.value.trim()) { error.hidden = true; return; }
      event.preventDefault();
      submitting = false;
      error.textContent = any ? "Give a reason for rejecting the selected requests." : "Select the requests to reject.";
      error.hidden = false;
      if (!any) return;
      reason.setAttribute("aria-invalid", "true");
      reason.focus();
    });
  }

  function onEvent(event) {
    document.dispatchEvent(new CustomEvent("zl-live", { detail: event }));
    onDetailEvent(event);
    if (event.type === "shards") { onShards(event.changes); return; }
    if (event.type !== "approval") return;
    refreshPending();
    if (event.event === "requested") notifyOfficer(event);
    if (document.getElementById("queue-rows")) refresh();
  }

  // Arriving from the queue with "a" or "r": open the confirmation, or the reason.
  function hashAction() {
    if (!detail) return;
    if (location.hash === "#approve") {
      history.replaceState(null, "", location.pathname);
      var section = document.getElementById("decide");
      if (section && section.dataset.stale !== "1") document.getElementById("approve").click();
      else if (section) document.getElementById("reject-stale").focus();
    } else if (location.hash === "#reject") {
      history.replaceState(null, "", location.pathname);
      var reason = document.getElementById("reason");
      if (reason) reason.focus();
    }
  }

  function connect(delay) {
    var path = document.body.dataset.liveUrl;
    if (!path) return;
    var dot = document.getElementById("live-status");
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + path);
    socket.onopen = function () {
      delay = 500;
      document.body.dataset.live = "open";
      if (dot) { dot.textContent = "live"; dot.classList.add("on"); }
    };
    socket.onmessage = function (message) {
      try { onEvent(JSON.parse(message.data)); } catch (e) { /* not ours */ }
    };
    socket.onclose = function () {
      document.body.dataset.live = "closed";
      if (dot) { dot.textContent = "offline"; dot.classList.remove("on"); }
      setTimeout(function () { connect(Math.min(delay * 2, 10000)); }, delay);
    };
  }

  document.addEventListener("DOMContentLoaded", function () {
    detail = document.querySelector(".head[data-approval-id]");
    setUpDecision();
    setUpQueue();
    setUpNotifications();
    hashAction();
    document.addEventListener("keydown", onKey);
    var toggle = document.querySelector(".nav-toggle");
    if (toggle) toggle.addEventListener("click", function () {
      var open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      document.body.classList.toggle("nav-open", open);
    });
    tick();
    setInterval(function () { tick(); expiredLocally(); }, 1000);
    document.body.addEventListener("htmx:afterSwap", tick);
    connect(500);
  });
})();
