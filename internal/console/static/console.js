// Strata console: the only script. Shows <time> elements in the viewer's zone (UTC stays in
// the title, on hover) and follows a running erasure until it finishes.
(function () {
  "use strict";
  function localise(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      el.textContent = d.toLocaleString(undefined, {year: "numeric", month: "short", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"});
    });
  }
  function poll(el) {
    var url = el.getAttribute("data-poll");
    var progress = document.getElementById("erasure-progress");
    function tick() {
      fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
        .then(function (s) {
          el.textContent = s.status;
          if (progress && s.phases) progress.textContent = (s.phases_done || []).length + " of " + s.phases.length + " phases done";
          if (s.status === "completed" || s.status === "failed") { window.location.reload(); return; }
          setTimeout(tick, 1000);
        })
        .catch(function () { setTimeout(tick, 3000); });
    }
    setTimeout(tick, 500);
  }
  document.addEventListener("DOMContentLoaded", function () {
    localise(document);
    var st = document.getElementById("erasure-status");
    if (st && st.getAttribute("data-poll")) {
      var s = st.getAttribute("data-status");
      if (s !== "completed" && s !== "failed") poll(st);
    }
  });
})();
