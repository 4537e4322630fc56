// Keyboard-first answering for the HIT page. The page works without this file:
// it only adds shortcuts, per-item timing and the MTurk auto-submit.
(function () {
  "use strict";

  var auto = document.getElementById("mturk-submit");
  if (auto) { auto.submit(); return; }

  var form = document.getElementById("hit-form");
  if (!form) { return; }
  var items = Array.prototype.slice.call(form.querySelectorAll("fieldset.item"));
  var status = document.getElementById("answered");
  var k = parseInt(form.dataset.k, 10) || 5;
  var last = performance.now();
  var current = 0;

  function radios(i) { return items[i].querySelectorAll("input[type=radio]"); }
  function answered(i) { return items[i].querySelector("input[type=radio]:checked") !== null; }
  function openCount() { return items.filter(function (_, i) { return !answered(i); }).length; }

  function update() {
    var open = openCount();
    status.textContent = open === 0
      ? "All " + items.length + " answered. Press Enter or the button to send."
      : (items.length - open) + " of " + items.length + " answered.";
    items.forEach(function (el, i) { el.classList.toggle("current", i === current); });
  }

  function focusItem(i) {
    current = Math.max(0, Math.min(items.length - 1, i));
    var target = items[current].querySelector("input[type=radio]:checked") || radios(current)[0];
    target.focus();
    items[current].scrollIntoView({ block: "nearest" });
    update();
  }

  function stamp(i) {
    var ms = items[i].querySelector("input.ms");
    if (ms.value === "") {
      var now = performance.now();
      ms.value = String(Math.round(now - last));
      last = now;
    }
  }

  function choose(i, slot) {
    var r = radios(i)[slot];
    if (!r) { return; }
    r.checked = true;
    stamp(i);
    var next = i + 1;
    if (next < items.length) { focusItem(next); } else { update(); document.getElementById("send").focus(); }
  }

  items.forEach(function (el, i) {
    el.addEventListener("focusin", function () { current = i; update(); });
    el.addEventListener("change", function () { stamp(i); update(); });
  });

  document.addEventListener("keydown", function (ev) {
    if (ev.altKey || ev.ctrlKey || ev.metaKey) { return; }
    var key = ev.key;
    if (/^[0-9]$/.test(key)) {
      var d = parseInt(key, 10);
      if (d > k) { return; }
      ev.preventDefault();
      choose(current, d === 0 ? k : d - 1);
    } else if (key === "ArrowDown" || key === "ArrowUp") {
      if (!form.contains(document.activeElement) && document.activeElement !== document.body) { return; }
      ev.preventDefault();
      focusItem(current + (key === "ArrowDown" ? 1 : -1));
    } else if (key === "Enter") {
      var el = document.activeElement;
      if (el && (el.tagName === "A" || el.tagName === "SUMMARY" || (el.tagName === "BUTTON" && !form.contains(el)))) { return; }
      ev.preventDefault();
      if (openCount() === 0) {
        form.requestSubmit();
      } else {
        focusItem(items.findIndex(function (_, i) { return !answered(i); }));
        status.textContent = "Please answer every text first (" + openCount() + " open).";
      }
    }
  });

  form.addEventListener("submit", function () {
    document.getElementById("send").disabled = true;  // one click, one submission
  });

  var firstOpen = items.findIndex(function (_, i) { return !answered(i); });
  current = firstOpen < 0 ? 0 : firstOpen;
  update();
})();
