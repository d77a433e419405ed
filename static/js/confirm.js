// A button with data-confirm asks before its form does what cannot be undone (a deletion, a
// reset); declining leaves everything as it was. Without JavaScript the form posts as it is.
document.addEventListener("click", function (event) {
  var button = event.target.closest && event.target.closest("button[data-confirm]");
  if (button && !window.confirm(button.getAttribute("data-confirm"))) {
    event.preventDefault();
    event.stopImmediatePropagation();
  }
}, true);
