// live.js refreshes the overview's counts from /api/stats every 2 s. The
// page is complete without it: it only saves a reload.
(function () {
  var table = document.getElementById("counts");
  if (!table) { return; }
  function set(el, v) {
    if (el && el.textContent !== String(v)) { el.textContent = String(v); el.classList.add("changed"); }
  }
  function refresh() {
    fetch("/api/stats", { credentials: "same-origin" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (s) {
      if (!s) { return; }
      var seen = {};
      (s.counts || []).forEach(function (c) {
        var key = c.consumer + "/" + c.status;
        seen[key] = true;
        var row = table.querySelector('tr[data-key="' + CSS.escape(key) + '"]');
        if (!row) {
          var empty = table.querySelector("tr.empty");
          if (empty) { empty.remove(); }
          row = document.createElement("tr");
          row.setAttribute("data-key", key);
          [c.consumer, c.status, "", "", "", ""].forEach(function (v, i) {
            var td = document.createElement("td");
            td.textContent = v;
            if (i >= 2 && i <= 4) { td.className = "n"; td.setAttribute("data-field", ["rows", "atThreshold", "nearThreshold"][i - 2]); }
            row.appendChild(td);
          });
          table.tBodies[0].appendChild(row);
        }
        ["rows", "atThreshold", "nearThreshold"].forEach(function (f) { set(row.querySelector('[data-field="' + f + '"]'), c[f]); });
      });
      table.querySelectorAll("tr[data-key]").forEach(function (row) {
        if (!seen[row.getAttribute("data-key")]) {
          ["rows", "atThreshold", "nearThreshold"].forEach(function (f) { set(row.querySelector('[data-field="' + f + '"]'), 0); });
        }
      });
      set(document.getElementById("atThreshold"), s.atThreshold);
      set(document.getElementById("nearThreshold"), s.nearThreshold);
      if (s.dlq && s.dlq.depth >= 0) { set(document.getElementById("dlq-depth"), s.dlq.depth); }
      if (s.outbox) { set(document.getElementById("outbox-pending"), s.outbox.pending); set(document.getElementById("outbox-parked"), s.outbox.parked); }
      set(document.getElementById("at"), s.at.replace("T", " ").replace(/\..*$|Z$/, ""));
    }).catch(function () {});
  }
  setInterval(refresh, 2000);
})();
