// A button with data-confirm asks before its form does what cannot be undone (a deletion, a
// reset); declining leaves everything as it was. A yes adds confirm=yes, so the server does not
// ask again; without JavaScript the server's confirmation page asks instead.
document.addEventListener("click", function (event) {
  var button = event.target.closest && event.target.closest("button[data-confirm]");
  if (!button) return;
  if (!window.confirm(button.getAttribute("data-confirm"))) {
    event.preventDefault();
    event.stopImmediatePropagation();
    return;
  }
  var form = button.form;
  if (form && !form.querySelector("input[name=confirm][value=yes]")) {
    var yes = document.createElement("input");
    yes.type = "hidden";
    yes.name = "confirm";
    yes.value = "yes";
    form.appendChild(yes);
  }
}, true);
