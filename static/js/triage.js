// Keyboard triage on the trails table: j / k move between rows, a approves and r rejects the
// row in focus. Keys press the row's own buttons, so htmx, its confirmation and the no-JS
// forms behave exactly as a click would. Typing in a field is never taken for a key.
(function () {
  var current = -1;

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("#trail-table tbody tr"));
  }

  function show(index) {
    var all = rows();
    if (!all.length) return;
    current = Math.max(0, Math.min(index, all.length - 1));
    all.forEach(function (row) { row.classList.remove("focused"); });
    var row = all[current];
    row.classList.add("focused");
    row.setAttribute("tabindex", "-1");
    row.focus();
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    if (target && (/^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName) || target.isContentEditable)) return;
    if (event.key === "j") { show(current + 1); event.preventDefault(); }
    else if (event.key === "k") { show(current - 1); event.preventDefault(); }
    else if (event.key === "a" || event.key === "r") {
      var row = rows()[current];
      var button = row && row.querySelector('button[data-key="' + event.key + '"]');
      if (button) { button.click(); event.preventDefault(); }
    }
  });

  // A row answered by htmx is a new element: the focus goes to it (or, where the row went, the
  // next one, else the one before), so a keyboard user goes on from there, not from the top.
  var swapped = null;
  function afterRowSwap() {
    var row = swapped && [swapped.id, swapped.next, swapped.prev].map(function (id) {
      return id && document.getElementById(id);
    }).filter(Boolean)[0];
    swapped = null;
    if (row) { show(rows().indexOf(row)); return; }
    row = rows()[current];
    if (row) { row.classList.add("focused"); }
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    var next = target && target.nextElementSibling, prev = target && target.previousElementSibling;
    swapped = target && target.tagName === "TR" ? { id: target.id, next: next && next.id, prev: prev && prev.id } : null;
    // An empty answer (a deleted row) fires no afterSwap: look once the swap is done.
    if (swapped) setTimeout(afterRowSwap, 0);
  });
  document.addEventListener("htmx:afterSwap", afterRowSwap);
})();
