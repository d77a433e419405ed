// Draws every <script id="chart-NAME-data" type="application/json"> figure (Django's json_script)
// into the element #chart-NAME, once that element comes near the screen: plotly.js (the URL in
// this script's data-plotly) is fetched and run only then. On a phone the charts sit below the
// health strip, and parsing plotly cost the overview 2 s of a 4x-slowed CPU before it was usable.
// Runs on page load and after htmx swaps, so fragments with charts work too.
(function () {
  var plotlySource = document.currentScript && document.currentScript.dataset.plotly;
  var loading = null;

  function loadPlotly() {
    if (window.Plotly) return Promise.resolve();
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        var tag = document.createElement("script");
        tag.src = plotlySource;
        tag.onload = resolve;
        tag.onerror = function () { loading = null; reject(new Error("plotly.js did not load")); };
        document.head.appendChild(tag);
      });
    }
    return loading;
  }

  function draw(node) {
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
  }

  function drawWhenNear(node) {
    loadPlotly().then(function () { draw(node); }, function () {});
  }

  function watch(root) {
    var nodes = root.querySelectorAll('script[type="application/json"][id^="chart-"][id$="-data"]');
    if (!("IntersectionObserver" in window)) {
      nodes.forEach(drawWhenNear);
      return;
    }
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (!entry.isIntersecting) return;
        observer.unobserve(entry.target);
        drawWhenNear(document.getElementById(entry.target.id + "-data"));
      });
    }, {rootMargin: "200px 0px"});
    nodes.forEach(function (node) {
      var target = document.getElementById(node.id.slice(0, -5));
      if (target) observer.observe(target);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { watch(document); });
  document.addEventListener("htmx:afterSettle", function (event) { watch(event.target); });
})();
