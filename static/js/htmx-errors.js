// An htmx action the server refused (a 503 with the database away, a 403) or could not reach
// says so at the top of the page; without this the row stayed as it was and nothing was said.
(function () {
  function say(text) {
    var notice = document.getElementById("action-error");
    if (!notice) {
      notice = document.createElement("div");
      notice.id = "action-error";
      notice.className = "notice error";
      notice.setAttribute("role", "alert");
      var main = document.querySelector("main") || document.body;
      main.insertBefore(notice, main.firstChild);
    }
    notice.textContent = text;
  }
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    var heading = new DOMParser().parseFromString(xhr.responseText || "", "text/html").querySelector("h1");
    var why = heading ? heading.textContent.trim() : "the server answered " + xhr.status;
    say("Nothing was done: " + why + " (" + xhr.status + "). Try again in a moment.");
  });
  document.addEventListener("htmx:sendError", function () {
    say("Nothing was done: the server could not be reached. Try again in a moment.");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var notice = document.getElementById("action-error");
    if (notice && event.detail.successful) notice.remove();
  });
})();
