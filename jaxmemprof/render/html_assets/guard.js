// Runs first: every error of the page, and every console.error, is written
// into <pre id="jmp-errors"> and counted in <html data-jmp-errors>, so a
// reader (or a test reading the DOM) sees it.
(function () {
  "use strict";
  var seen = [];
  function note(text) {
    seen.push(String(text));
    document.documentElement.setAttribute("data-jmp-errors", String(seen.length));
    var box = document.getElementById("jmp-errors");
    if (box) { box.hidden = false; box.textContent = "Errors on this page:\n" + seen.join("\n"); }
  }
  window.addEventListener("error", function (e) {
    note((e.message || "error") + (e.filename ? " (" + e.filename + ":" + e.lineno + ")" : ""));
  });
  window.addEventListener("unhandledrejection", function (e) { note("unhandled rejection: " + e.reason); });
  var original = console.error;
  console.error = function () {
    note(Array.prototype.map.call(arguments, String).join(" "));
    return original.apply(console, arguments);
  };
  window.jmpNote = note;
})();
