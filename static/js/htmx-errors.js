// An htmx action (a POST: not a page's own polling) the server refused (a 503 with the database
// away, a 403) or could not reach says so at the top of the page; before, nothing was said.
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
  function isAction(event) {
    var config = event.detail.requestConfig;
    return !config || String(config.verb).toLowerCase() !== "get";
  }
  document.addEventListener("htmx:responseError", function (event) {
    if (!isAction(event)) return;
    var xhr = event.detail.xhr;
    // The server's own error page says why (its heading and cause); text only, never its markup.
    var page = new DOMParser().parseFromString(xhr.responseText || "", "text/html");
    var why = [page.querySelector("h1"), page.querySelector("#refusal")]
      .filter(Boolean).map(function (part) { return part.textContent.trim().replace(/\.$/, ""); }).join(". ");
    say(why ? why + ". (" + xhr.status + ")"
            : "Nothing was done: the server answered " + xhr.status + ". Try again in a moment.");
  });
  document.addEventListener("htmx:sendError", function (event) {
    if (!isAction(event)) return;
    say("Nothing was done: the server could not be reached. Try again in a moment.");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var notice = document.getElementById("action-error");
    if (notice && event.detail.successful && isAction(event)) notice.remove();
  });
})();
