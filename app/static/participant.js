// What every HIT page adds when JavaScript runs (issue 33). The page works without it: the
// deadline then stays in UTC (labelled so) and no page signals are recorded.
//  - the deadline in the participant's own time;
//  - page signals of outside help, per item: how often the participant left the page (the
//    tab hidden, or the window losing the focus) and for how long, in the item's hidden
//    field `sig{n}` as "times,milliseconds". A flag for the researchers, never a rule.
(function () {
  "use strict";

  Array.prototype.forEach.call(document.querySelectorAll("time[data-local]"), function (el) {
    var when = new Date(el.getAttribute("datetime"));
    if (isNaN(when.getTime())) { return; }
    el.textContent = when.toLocaleString([], { dateStyle: "medium", timeStyle: "short" }) +
      " (your time)";
  });

  var fields = Array.prototype.slice.call(document.querySelectorAll("input.sig"));
  if (!fields.length) { return; }
  var counts = fields.map(function () { return [0, 0]; });

  function write(i) { fields[i].value = counts[i][0] + "," + Math.round(counts[i][1]); }
  fields.forEach(function (_, i) { write(i); });

  // The item being answered: the one marked current (annotate.js), else the first
  // unanswered one, else the last.
  function current() {
    var i;
    for (i = 0; i < fields.length; i++) {
      var box = fields[i].closest("fieldset");
      if (box && box.classList.contains("current")) { return i; }
    }
    for (i = 0; i < fields.length; i++) {
      var open = fields[i].closest("fieldset");
      if (!open || !open.querySelector("input[type=radio]:checked")) { return i; }
    }
    return fields.length - 1;
  }

  var hidden = document.visibilityState === "hidden";
  var blurred = false;
  var since = null;
  var item = 0;

  function update() {
    var away = hidden || blurred;
    if (away && since === null) {
      since = performance.now();
      item = current();
    } else if (!away && since !== null) {
      counts[item][0] += 1;
      counts[item][1] += performance.now() - since;
      since = null;
      write(item);
    }
  }

  document.addEventListener("visibilitychange", function () {
    hidden = document.visibilityState === "hidden";
    update();
  });
  window.addEventListener("blur", function () { blurred = true; update(); });
  window.addEventListener("focus", function () { blurred = false; update(); });
})();
