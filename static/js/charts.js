// Draws every <script type="application/json" data-chart="ID"> figure into the element #ID.
// Runs on page load and after htmx swaps, so fragments with charts work too.
(function () {
  function draw(root) {
    root.querySelectorAll("script[data-chart]").forEach(function (node) {
      var target = document.getElementById(node.dataset.chart);
      if (!target || !window.Plotly) return;
      var figure = JSON.parse(node.textContent);
      Plotly.react(target, figure.data, figure.layout, {displayModeBar: false, responsive: true});
      target.dataset.drawn = "true";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function (event) { draw(event.target); });
})();
