// ZeroLock pages: live updates over /ws/live/ and TTL countdowns. No framework.
(function () {
  "use strict";

  function left(ms) {
    if (ms <= 0) return "expired";
    var s = Math.floor(ms / 1000), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    s = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll(".countdown[data-expires]").forEach(function (el) {
      var ms = Date.parse(el.dataset.expires) - now;
      el.textContent = left(ms);
      el.classList.toggle("urgent", ms < 60000);
    });
  }

  // Pages say what they want from a push: the queue refreshes its rows (htmx, on
  // the "zl-refresh" event), a detail page reloads when its approval changed.
  var submitting = false;
  document.addEventListener("submit", function () { submitting = true; });

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

  function onEvent(event) {
    document.dispatchEvent(new CustomEvent("zl-live", { detail: event }));
    if (event.type === "shards") { onShards(event.changes); return; }
    if (event.type !== "approval") return;
    if (document.getElementById("queue-rows")) refresh();
    var head = document.querySelector(".head[data-approval-id]");
    // Not while this page is submitting its own decision: the reload would race
    // the form's redirect and swallow the result message.
    if (head && !submitting && head.dataset.approvalId === event.approval_id && event.event === "decided") {
      var status = document.getElementById("approval-status");
      if (status && status.textContent !== event.status) window.location.reload();
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
    tick();
    setInterval(tick, 1000);
    document.body.addEventListener("htmx:afterSwap", tick);
    connect(500);
  });
})();
