package report

// pageHTML is the report's template: inline CSS, inline SVG, one inline
// script (zoom, pan and filter of the timeline) and no external reference.
// Every mark carries its trace line as a tooltip, and its time, bot and
// event as data attributes the script reads.
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}} — {{.Verdict}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 20px; color: #1d2330; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
.verdict { display: inline-block; padding: 2px 10px; border-radius: 4px; color: #fff; font-weight: 600; }
.verdict.PASS { background: #2e7d32; } .verdict.FAIL { background: #c62828; }
table { border-collapse: collapse; } td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
.meta td:first-child { color: #5b6477; }
.grid { display: flex; gap: 48px; flex-wrap: wrap; }
.pass { color: #2e7d32; } .fail { color: #c62828; font-weight: 600; }
.zero { color: #9aa2b1; }
code, pre { font: 12px/1.35 ui-monospace, monospace; }
pre { background: #f5f6f8; padding: 8px; overflow-x: auto; max-height: 420px; }
.violation { border: 2px solid #c62828; background: #fdecea; border-radius: 6px; padding: 8px 12px; margin: 10px 0; }
.violation h3 { margin: 0 0 4px; font-size: 15px; color: #c62828; }
svg { background: #fff; border: 1px solid #dde1e8; }
svg text { font: 11px ui-monospace, monospace; fill: #1d2330; }
.lane { fill: #f7f8fa; } .lane.alt { fill: #eef0f4; } .lane.lanehl { fill: #fde0dc; }
.axis { stroke: #c3c9d4; } .window { fill: #fff3cd; opacity: .6; }
.heal { stroke: #2e7d32; stroke-width: 2; stroke-dasharray: 4 3; }
.decisive { stroke: #6a1b9a; stroke-width: 3; }
.vline { stroke: #c62828; stroke-width: 2; }
.send { stroke: #1565c0; } .produce { stroke: #6a1b9a; }
.ok { fill: #2e7d32; } .bad { fill: #c62828; } .dup { fill: #ef6c00; } .lost { fill: #8d6e63; }
.batch { fill: #7e57c2; } .fault { fill: #ad1457; } .dead { fill: #000; }
.crash { fill: #c62828; } .boot { fill: #2e7d32; }
.hl { stroke: #000; stroke-width: 1.5; }
.legend span { display: inline-block; margin-right: 14px; }
.sw { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: middle; }
.controls { margin: 6px 0; } .controls button { margin-right: 4px; } .controls input { width: 220px; }
#timeline { cursor: grab; } .off { display: none; }
</style>
</head>
<body>
<h1>{{.Title}} <span class="verdict {{.Verdict}}" id="verdict">{{.Verdict}}</span></h1>
<table class="meta">
<tr><td>seed</td><td><code>{{.Seed}}</code></td></tr>
<tr><td>backend</td><td>{{.Backend}}</td></tr>
<tr><td>fault plan</td><td><code>{{.Plan}}</code></td></tr>
<tr><td>known bugs on</td><td>{{.Bugs}}</td></tr>
<tr><td>simulated</td><td>{{.Simulated}}{{if .Quiescent}} (quiescent){{else}} (stopped at the deadline){{end}}</td></tr>
<tr><td>trace</td><td>{{.TraceLines}} lines, sha256 <code>{{.TraceHash}}</code></td></tr>
{{if .Reproduce}}<tr><td>reproduce</td><td><code>{{.Reproduce}}</code></td></tr>{{end}}
</table>

{{if .Violations}}
<div class="violation" id="violations">
<h3>{{len .Violations}}{{if .MoreViol}}+{{.MoreViol}}{{end}} violation(s)</h3>
<ul>{{range .Violations}}<li><a href="#{{.ID}}">{{.Invariant}}</a> — {{.Where}}</li>{{end}}</ul>
</div>
{{end}}

<div class="grid">
<div>
<h2>Invariants</h2>
<table id="invariants">
{{range .Invariants}}<tr><td>{{.Name}}</td>{{if .Pass}}<td class="pass">pass</td><td></td>{{else}}<td class="fail">FAIL</td><td>{{.N}} violation(s)</td>{{end}}</tr>
{{end}}</table>
</div>
<div>
<h2>Faults injected</h2>
<table id="faults">
{{range .Faults}}<tr><td>{{.Name}}</td><td{{if not .N}} class="zero"{{end}}>{{.N}}</td></tr>
{{end}}</table>
</div>
<div>
<h2>Counters</h2>
<table>
{{range .Counters}}<tr><td>{{.Name}}</td><td>{{.N}}</td></tr>
{{end}}</table>
</div>
</div>

<h2>Timeline</h2>
<div class="legend">
<span><svg width="10" height="10"><line x1="5" y1="0" x2="5" y2="10" class="send" stroke-width="2"/></svg> send</span>
<span><span style="background:#2e7d32" class="sw"></span>ok / handled</span>
<span><span style="background:#c62828" class="sw"></span>failed / refused / crash</span>
<span><span style="background:#ef6c00" class="sw"></span>duplicate</span>
<span><span style="background:#ad1457" class="sw"></span>fault injected</span>
<span><span style="background:#fff3cd" class="sw"></span>fault window</span>
<span><span style="background:#fde0dc" class="sw"></span>lane of a violation</span>
<span>black outline: the violation's event · hover a mark for its trace line</span>
</div>
<div class="controls" id="controls">
<button type="button" id="zoom-in">zoom in</button><button type="button" id="zoom-out">zoom out</button><button type="button" id="zoom-reset">whole run</button>
<label>filter by bot or event: <input id="filter" type="search" placeholder="bot-1, ev-…"></label>
<span id="view"></span>
<span>· wheel zooms at the pointer, drag pans; the address may say <code>#from=S&amp;to=S&amp;filter=TEXT</code></span>
</div>
<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{{.SVGWidth}}" height="{{.SVGHeight}}" viewBox="0 0 {{.SVGWidth}} {{.SVGHeight}}" data-plot-l="{{.PlotL}}" data-plot-w="{{.PlotW}}" data-span="{{ts .SpanSeconds}}">
<defs><clipPath id="plotclip"><rect x="{{.PlotL}}" y="0" width="{{.PlotW}}" height="{{.SVGHeight}}"/></clipPath></defs>
{{range $i, $l := .Lanes}}<rect class="lane{{if $l.Highlight}} lanehl{{else if odd $i}} alt{{end}}" x="0" y="{{$l.Y}}" width="{{$.SVGWidth}}" height="22"/>
<text x="4" y="{{$l.Y}}" dy="15">{{$l.Name}}</text>
{{end}}
<g clip-path="url(#plotclip)">
{{with .Window}}<rect class="window" id="window" x="{{f .X}}" y="20" width="{{f .W}}" height="{{$.SVGHeight}}" data-t="0" data-t2="{{ts $.Heal.T}}"><title>fault window: faults may be injected until the heal</title></rect>{{end}}
{{range .Ticks}}<line class="axis" x1="{{f .X}}" y1="20" x2="{{f .X}}" y2="{{$.SVGHeight}}" data-t="{{ts .T}}"/><text x="{{f .X}}" y="14" text-anchor="middle" data-t="{{ts .T}}">{{.Label}}</text>
{{end}}
{{with .Heal}}<line class="heal" x1="{{f .X}}" y1="20" x2="{{f .X}}" y2="{{$.SVGHeight}}" data-t="{{ts .T}}"><title>{{.Label}}</title></line>{{end}}
{{with .Decisive}}<line class="decisive" id="decisive" x1="{{f .X}}" y1="20" x2="{{f .X}}" y2="{{$.SVGHeight}}" data-t="{{ts .T}}"><title>{{.Label}}</title></line>{{end}}
{{range .Marks}}{{if eq .Shape "tick"}}<line class="m {{.Class}}{{if .HL}} hl{{end}}" x1="{{f .X}}" y1="{{f (sub .Y 7)}}" x2="{{f .X}}" y2="{{f (add .Y 7)}}" stroke-width="{{if .HL}}3{{else}}1{{end}}" data-t="{{ts .T}}" data-bot="{{.Bot}}" data-event="{{.Event}}"><title>{{.Title}}</title></line>
{{else if eq .Shape "bar"}}<rect class="m {{.Class}}{{if .HL}} hl{{end}}" x="{{f (sub .X 1.5)}}" y="{{f (sub .Y 10)}}" width="3" height="20" data-t="{{ts .T}}" data-dx="-1.5" data-bot="{{.Bot}}" data-event="{{.Event}}"><title>{{.Title}}</title></rect>
{{else if eq .Shape "diamond"}}<rect class="m {{.Class}}{{if .HL}} hl{{end}}" x="{{f (sub .X 4)}}" y="{{f (sub .Y 4)}}" width="8" height="8" transform="rotate(45 {{f .X}} {{f .Y}})" data-t="{{ts .T}}" data-dx="-4" data-cy="{{f .Y}}" data-bot="{{.Bot}}" data-event="{{.Event}}"><title>{{.Title}}</title></rect>
{{else}}<circle class="m {{.Class}}{{if .HL}} hl{{end}}" cx="{{f .X}}" cy="{{f .Y}}" r="{{if .HL}}5{{else}}3{{end}}" data-t="{{ts .T}}" data-bot="{{.Bot}}" data-event="{{.Event}}"><title>{{.Title}}</title></circle>
{{end}}{{end}}
{{range .Violations}}<line class="vline" id="{{.ID}}-line" x1="{{f .X}}" y1="20" x2="{{f .X}}" y2="{{$.SVGHeight}}" data-t="{{ts .T}}"><title>{{.Invariant}}: {{.Detail}}{{if .Cause}} ({{.Cause}}){{end}}</title></line>
{{end}}
</g>
</svg>
{{if .Skipped}}<p>{{.Skipped}} more records not drawn (a long run); the trace has them all.</p>{{end}}

{{if .Violations}}
<h2>Violations in detail</h2>
{{range $i, $v := .Violations}}
<div class="violation" id="{{.ID}}">
<h3>{{.Invariant}}</h3>
<div>{{.Where}}</div>
<div>{{.Detail}}</div>
{{if .Cause}}<div>On the timeline: {{.Cause}}.</div>{{end}}
{{if .Lines}}<details{{if eq $i 0}} open{{end}}><summary>trace lines of this event</summary><pre>{{range .Lines}}{{.}}
{{end}}{{if .More}}… {{.More}} more
{{end}}</pre></details>{{end}}
</div>
{{end}}
{{if .MoreViol}}<p>… and {{.MoreViol}} more violations (see the JSON output).</p>{{end}}
{{end}}

<script>
// Zoom, pan and filter of the timeline. Marks keep their time in data-t;
// a view [from, to] (seconds) maps it onto the plot's width, so shapes keep
// their size at any zoom. The whole run is the view at load unless the
// address says #from=S&to=S&filter=TEXT.
(function () {
  var svg = document.getElementById("timeline");
  if (!svg) { return; }
  var L = +svg.dataset.plotL, W = +svg.dataset.plotW, span = +svg.dataset.span;
  var timed = svg.querySelectorAll("[data-t]");
  var marks = svg.querySelectorAll(".m");
  var view = { from: 0, to: span };
  function px(t) { return L + (t - view.from) / (view.to - view.from) * W; }
  function fmt(x) { return x.toFixed(3); }
  function draw() {
    for (var i = 0; i < timed.length; i++) {
      var e = timed[i], x = px(+e.dataset.t);
      switch (e.tagName) {
      case "line": e.setAttribute("x1", fmt(x)); e.setAttribute("x2", fmt(x)); break;
      case "circle": e.setAttribute("cx", fmt(x)); break;
      case "text": e.setAttribute("x", fmt(x)); break;
      case "rect":
        if (e.dataset.t2 !== undefined) {
          e.setAttribute("x", fmt(x)); e.setAttribute("width", fmt(Math.max(0, px(+e.dataset.t2) - x)));
        } else {
          e.setAttribute("x", fmt(x + (+e.dataset.dx || 0)));
          if (e.dataset.cy !== undefined) { e.setAttribute("transform", "rotate(45 " + fmt(x) + " " + e.dataset.cy + ")"); }
        }
      }
    }
    svg.dataset.from = fmt(view.from); svg.dataset.to = fmt(view.to);
    document.getElementById("view").textContent = "showing " + view.from.toFixed(3) + "s to " + view.to.toFixed(3) + "s";
  }
  function setView(from, to) {
    var min = span / 100000;
    if (!(to - from >= min)) { var mid = (from + to) / 2; from = mid - min / 2; to = mid + min / 2; }
    var w = Math.min(to - from, span);
    from = Math.max(0, Math.min(from, span - w));
    view = { from: from, to: from + w };
    draw();
  }
  function zoomAt(t, f) { setView(t - (t - view.from) * f, t + (view.to - t) * f); }
  function timeAt(clientX) {
    var r = svg.getBoundingClientRect(), x = (clientX - r.left) * (svg.viewBox.baseVal.width / r.width);
    return view.from + (x - L) / W * (view.to - view.from);
  }
  function filter(text) {
    text = text.trim().toLowerCase();
    var shown = 0;
    for (var i = 0; i < marks.length; i++) {
      var m = marks[i];
      var hit = !text || (m.dataset.bot || "").toLowerCase().indexOf(text) >= 0 || (m.dataset.event || "").toLowerCase().indexOf(text) >= 0;
      m.classList.toggle("off", !hit);
      if (hit) { shown++; }
    }
    svg.dataset.shown = shown;
  }
  document.getElementById("zoom-in").onclick = function () { zoomAt((view.from + view.to) / 2, 0.5); };
  document.getElementById("zoom-out").onclick = function () { zoomAt((view.from + view.to) / 2, 2); };
  document.getElementById("zoom-reset").onclick = function () { setView(0, span); };
  var input = document.getElementById("filter");
  input.oninput = function () { filter(input.value); };
  svg.addEventListener("wheel", function (ev) { ev.preventDefault(); zoomAt(timeAt(ev.clientX), ev.deltaY < 0 ? 0.8 : 1.25); }, { passive: false });
  var drag = null;
  svg.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, from: view.from, to: view.to }; });
  window.addEventListener("mouseup", function () { drag = null; });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) { return; }
    var r = svg.getBoundingClientRect(), dx = (ev.clientX - drag.x) * (svg.viewBox.baseVal.width / r.width);
    var dt = dx / W * (drag.to - drag.from);
    setView(drag.from - dt, drag.to - dt);
  });
  var q = {};
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) { var i = kv.indexOf("="); if (i > 0) { q[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1)); } });
  var from = parseFloat(q.from), to = parseFloat(q.to);
  if (isFinite(from) && isFinite(to) && to > from) { setView(from, to); } else { draw(); }
  if (q.filter) { input.value = q.filter; filter(q.filter); }
})();
</script>
</body>
</html>
`
