// The metrics page: polls the metrics JSON every 2 s and redraws four charts.
(function () {
  "use strict";
  var script = document.getElementById("metrics-script");
  var url = script.dataset.url;
  var polled = {};  // server second ("HH:MM:SS") -> what the poll read then
  var lastWs = null;

  function line(id, datasets, options) {
    return new Chart(document.getElementById(id), {
      type: "line",
      data: { labels: [], datasets: datasets },
      options: Object.assign({
        animation: false, responsive: true, maintainAspectRatio: false,
        spanGaps: true,
        elements: { point: { radius: 1.5 } },
        scales: { x: { ticks: { maxTicksLimit: 6 } }, y: { beginAtZero: true } },
        plugins: { legend: { position: "bottom" } }
      }, options || {})
    });
  }
  function set(label, color) { return { label: label, data: [], borderColor: color, backgroundColor: color, borderWidth: 2, tension: 0.2 }; }

  function avg(label, color) {
    var s = set(label, color);
    s.borderDash = [6, 4]; s.borderWidth = 1.5; s.pointRadius = 0; s.tension = 0;
    return s;
  }
  // The dashed lines are the tiles' figures: the same minute, drawn on the chart.
  var rates = line("chart-rates", [set("commits/s", "#2f5d8a"), set("conflicts/s", "#a12a2a"),
    avg("commits/s, minute mean (tile)", "#2f5d8a"), avg("conflicts/s, minute mean (tile)", "#a12a2a")]);
  var latency = line("chart-latency", [set("p50", "#1f7a4d"), set("p99", "#8a5a00"), avg("p99 over the minute (tile)", "#8a5a00")]);
  var approvals = line("chart-approvals", [set("pending", "#8a5a00")]);
  var ws = line("chart-ws", [set("sent", "#1f7a4d"), set("naive broadcast", "#9aa5b1")]);

  function clock(iso) { return iso.substr(11, 8); }
  function text(id, value) { document.getElementById(id).textContent = value; }

  function draw(data) {
    var labels = data.series.map(function (p) { return clock(p.t); });
    rates.data.labels = labels;
    rates.data.datasets[0].data = data.series.map(function (p) { return p.commits; });
    rates.data.datasets[1].data = data.series.map(function (p) { return p.conflicts; });
    latency.data.labels = labels;
    latency.data.datasets[0].data = data.series.map(function (p) { return p.p50; });
    latency.data.datasets[1].data = data.series.map(function (p) { return p.p99; });
    var tiles = data.tiles;
    function flat(v) { return data.series.map(function () { return v; }); }
    rates.data.datasets[2].data = flat(tiles.commits_per_second);
    rates.data.datasets[3].data = flat(tiles.conflicts_per_second);
    latency.data.datasets[2].data = flat(tiles.p99);
    rates.update(); latency.update();
    var quiet = !data.series.some(function (p) { return p.commits || p.conflicts; });
    document.getElementById("metrics-empty").hidden = !quiet;
    hotShards(tiles.hot);

    // One clock for all four charts: the server's seconds, the same x range as
    // the commit charts (the browser's clock drifted from it, and the two lower
    // charts once covered a different minute). Polled figures sit at the second
    // they were read; seconds between polls are gaps, not zeros.
    var sent = 0, naive = 0;
    if (lastWs) {
      var dt = (Date.now() - lastWs.at) / 1000;
      sent = (data.ws.messages_sent - lastWs.sent) / dt;
      naive = (data.ws.naive_broadcast_messages - lastWs.naive) / dt;
    }
    lastWs = { at: Date.now(), sent: data.ws.messages_sent, naive: data.ws.naive_broadcast_messages };
    var at = labels.length ? labels[labels.length - 1] : clock(new Date().toISOString());
    polled[at] = { pending: data.approvals.pending, sent: Math.max(0, sent), naive: Math.max(0, naive) };
    Object.keys(polled).forEach(function (k) { if (labels.indexOf(k) < 0 && k !== at) delete polled[k]; });
    function at_(key) { return labels.map(function (l) { return polled[l] ? polled[l][key] : null; }); }
    approvals.data.labels = labels; approvals.data.datasets[0].data = at_("pending");
    ws.data.labels = labels;
    ws.data.datasets[0].data = at_("sent"); ws.data.datasets[1].data = at_("naive");
    approvals.update(); ws.update();

    text("tile-commits", tiles.commits_per_second.toFixed(2));
    text("tile-conflicts", tiles.conflicts_per_second.toFixed(2));
    text("tile-p99", tiles.p99 === null ? "no commits" : tiles.p99.toFixed(1) + " ms");
    text("tile-pending", data.approvals.pending);
    // With no agent socket open there is nothing to save: say so, not "0 %".
    text("tile-savings", !data.ws.connections ? "no agent sockets"
      : data.ws.naive_broadcast_messages ? data.ws.cost_savings_percent.toFixed(1) + " %" : "no pushes yet");
    document.body.dataset.metricsDrawn = String(Number(document.body.dataset.metricsDrawn || 0) + 1);
  }

  function hotShards(rows) {
    var body = document.querySelector("#hot-shards tbody");
    body.textContent = "";
    if (!rows.length) {
      var tr = body.insertRow(), td = tr.insertCell();
      tr.className = "empty"; td.colSpan = 3;
      td.textContent = "No commits in the last minute.";
      return;
    }
    rows.forEach(function (r) {
      var tr = body.insertRow();
      tr.dataset.shardId = r.shard_id;
      var a = document.createElement("a");
      a.href = "/dashboard/shards/" + encodeURIComponent(r.shard_id);
      var code = document.createElement("code"); code.textContent = r.shard_id; a.appendChild(code);
      tr.insertCell().appendChild(a);
      tr.insertCell().textContent = r.commits;
      tr.insertCell().textContent = r.conflicts;
    });
  }

  function poll() {
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(draw)
      .catch(function () { /* next poll retries */ })
      .finally(function () { setTimeout(poll, 2000); });
  }
  poll();
})();
