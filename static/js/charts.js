// Draws every <script id="chart-NAME-data" type="application/json"> figure (Django's json_script)
// into the element #chart-NAME.
// Runs on page load and after htmx swaps, so fragments with charts work too.
(function () {
  function draw(root) {
    root.querySelectorAll('script[type="application/json"][id^="chart-"][id$="-data"]').forEach(function (node) {
      var target = document.getElementById(node.id.slice(0, -5));
      if (!target || !window.Plotly) return;
      var figure = JSON.parse(node.textContent);
      Plotly.react(target, figure.data, figure.layout, {displayModeBar: false, responsive: true});
      target.dataset.drawn = "true";
      // From a number to the rows behind it: a bar opens its recalls in the log.
      var click = figure.layout.meta && figure.layout.meta.click;
      if (click && target.on && !target.dataset.linked) {
        target.dataset.linked = "true";
        target.on("plotly_click", function (event) {
          var point = event.points && event.points[0];
          if (point && point.customdata) window.location.href = click.replace("{customdata}", point.customdata);
        });
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function (event) { draw(event.target); });
})();
