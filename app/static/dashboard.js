// Study page: refresh the live section (precompute and collection progress) without a reload.
// The server renders the fragment (escaped); this only swaps it in.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.fetch) return;
  var url = live.getAttribute("data-poll");
  var FAST = 3000, SLOW = 20000;

  function schedule(ms) { window.setTimeout(poll, ms); }

  function poll() {
    if (document.hidden) { schedule(FAST); return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) {
        if (!r.ok || (r.headers.get("content-type") || "").indexOf("json") < 0) throw r;
        return r.json();
      })
      .then(function (data) {
        live.innerHTML = data.html;
        live.setAttribute("data-status", data.status);
        schedule(data.live ? FAST : SLOW);
      })
      .catch(function () { schedule(SLOW); });
  }
  schedule(FAST);
})();
