// Keyboard shortcuts and timing for one step of a ratings HIT. The page works without
// this file: the radios, Enter and the button are plain HTML.
(function () {
  "use strict";

  var form = document.getElementById("rating-form");
  if (!form) { return; }
  var radios = Array.prototype.slice.call(form.querySelectorAll("input[name=rating]"));
  var status = document.getElementById("rating-status");
  var start = performance.now();

  function chosen() {
    var r = form.querySelector("input[name=rating]:checked");
    return r ? r.value : null;
  }

  function pick(value) {
    var r = radios.find(function (x) { return x.value === value; });
    if (!r) { return false; }
    r.checked = true;
    r.focus();
    status.textContent = "Chosen: " + value + ". Press Enter to send.";
    return true;
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.altKey || ev.ctrlKey || ev.metaKey) { return; }
    var key = ev.key;
    if (/^[0-9]$/.test(key)) {
      if (pick(key)) { ev.preventDefault(); }
    } else if (key === "." || key === ",") {
      var v = chosen();  // a whole point and a half: 3 then "." is 3.5
      if (v !== null && v.indexOf(".") < 0 && pick(v + ".5")) { ev.preventDefault(); }
    } else if (key === "Enter") {
      var el = document.activeElement;
      if (el && (el.tagName === "A" || el.tagName === "SUMMARY" || (el.tagName === "BUTTON" && !form.contains(el)))) { return; }
      ev.preventDefault();
      if (chosen() === null) {
        status.textContent = "Please choose a rating first.";
        radios[0].focus();
      } else {
        form.requestSubmit();
      }
    }
  });

  form.addEventListener("submit", function () {
    form.querySelector("input[name=ms]").value = String(Math.round(performance.now() - start));
    document.getElementById("send").disabled = true;  // one click, one rating
  });
})();
