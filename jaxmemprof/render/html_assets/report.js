// jaxmemprof's HTML page: a timeline by site, flame graphs of any snapshot
// and of the change between two, lifetimes, memory inside jit, findings.
// Written here, no library; every text from the data goes into the page
// through textContent (never innerHTML). See docs/html.md.
(function () {
  "use strict";
  var t0 = performance.now();
  var ALL = JSON.parse(document.getElementById("jmp-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";

  // -- small helpers ---------------------------------------------------------------

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) {  // appends the children given; returns the last one
    var last = null;
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) last = parent.appendChild(arguments[i]);
    return last;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  function bytes(n, signed) {  // as jaxmemprof/units.py format_bytes
    if (n === null || n === undefined) return "-";
    var sign = n < 0 ? "-" : (signed && n > 0 ? "+" : "");
    var v = Math.abs(n), i = 0;
    while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
    return sign + (i === 0 ? Math.floor(v) + " B" : v.toFixed(2) + " " + UNITS[i]);
  }
  function secs(t) { return t === null || t === undefined ? "-" : (t < 10 ? t.toFixed(2) : t.toFixed(1)) + " s"; }
  function pct(x) { return (100 * x).toFixed(1) + "%"; }
  function copyText(text, button) {
    function done(ok) { button.textContent = ok ? "copied" : "select and copy"; setTimeout(function () { button.textContent = "copy"; }, 1500); }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(fallback()); });
    } else done(fallback());
    function fallback() {
      var ta = el("textarea");
      ta.value = text; document.body.appendChild(ta); ta.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      document.body.removeChild(ta);
      return ok;
    }
  }
  var tip = add(document.body, el("div", "tip"));
  tip.hidden = true;
  function showTip(ev, lines) {
    tip.textContent = "";
    lines.forEach(function (l, i) { add(tip, el("div", i === 0 ? "tip-head" : null, l)); });
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  function hideTip() { tip.hidden = true; }
  var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                 "#9c755f", "#86bcb6", "#d37295", "#a0cbe8"];
  var OTHER = "#bab0ac";
  function hash(s) { var h = 2166136261; for (var i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; }

  function selectBox(label, options, value, onchange, id) {
    var wrap = el("label", "ctl");
    add(wrap, el("span", null, label + " "));
    var s = add(wrap, el("select"));
    if (id) s.id = id;
    options.forEach(function (o) { var op = add(s, el("option", null, o[1])); op.value = String(o[0]); });
    s.value = String(value);
    s.addEventListener("change", function () { onchange(s.value); });
    return wrap;
  }
  function niceTicks(max, n) {
    if (!(max > 0)) return [0];
    var raw = max / n, p = Math.pow(2, Math.floor(Math.log2(raw)));
    var steps = [1, 2, 4, 5, 8], step = p;
    for (var i = 0; i < steps.length; i++) { if (p * steps[i] >= raw) { step = p * steps[i]; break; } }
    var out = []; for (var v = 0; v <= max * 1.0001; v += step) out.push(v);
    return out;
  }
  function niceSecs(span) {
    var steps = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400];
    for (var i = 0; i < steps.length; i++) if (span / steps[i] <= 8) return steps[i];
    return 86400 * Math.ceil(span / 86400 / 8);
  }
  function table(parent, columns, rows, id) {
    var tb = add(parent, el("table", "data"));
    if (id) tb.id = id;
    var tr = add(add(tb, el("thead")), el("tr"));
    columns.forEach(function (c) { add(tr, el("th", c[2] ? "num" : null, c[0])); });
    var body = add(tb, el("tbody"));
    rows.forEach(function (r) {
      var row = add(body, el("tr"));
      columns.forEach(function (c) { var v = c[1](r); var td = el("td", c[2] ? "num" : null); if (v instanceof Element) td.appendChild(v); else td.textContent = v === null || v === undefined ? "" : String(v); add(row, td); });
    });
    return tb;
  }

  // -- one run's page (a report, a show or a diff page; one process of a job) --------

  function mount(D, root) {
  var STR = D.strings || [];
  function section(id, title, hint) {
    var s = el("section", "card");
    s.id = id;
    add(s, el("h2", null, title));
    if (hint) add(s, el("p", "hint", hint));
    add(root, s);
    return s;
  }

  // -- the data: frames, stacks, cells ----------------------------------------------

  var frames = (D.frames || []).map(function (f) {
    var fn = STR[f[0]], file = STR[f[1]];
    return { name: file + ":" + f[2] + " (" + fn + ")", file: file, user: f[3] === 1 };
  });
  var stacks = D.stacks || [];
  var keys = D.keys || [];
  var changes = D.changes || [];
  changes.forEach(function (ch) { for (var i = 3; i < ch.length; i += 3) ch[i] += ch[i - 3]; });  // gaps -> positions
  var K = keys.length;
  var keyStack = new Int32Array(K), keyProc = new Int32Array(K), keyDev = [], keyType = [];
  for (var k = 0; k < K; k++) {
    keyStack[k] = keys[k][0]; keyType.push(STR[keys[k][1]]); keyDev.push(STR[keys[k][2]]); keyProc[k] = keys[k][3];
  }
  function siteOfStack(s) {
    var st = stacks[s];
    if (!st || !st.length) return "<no stack>";
    for (var i = 0; i < st.length; i++) if (frames[st[i]].user) return frames[st[i]].name;
    return frames[st[0]].name;
  }
  var stackSite = stacks.map(function (_, s) { return siteOfStack(s); });
  function userPath(s, lib) {  // outermost first
    var st = stacks[s] || [];
    var ids = lib ? st.slice() : st.filter(function (f) { return frames[f].user; });
    if (!ids.length && st.length) ids = [st[0]];
    return ids.reverse();
  }
  function valueAt(k, j) {  // [bytes, buffers] of key k at kept position j
    var ch = changes[k], lo = 0, hi = ch.length / 3 - 1, at = -1;
    while (lo <= hi) { var mid = (lo + hi) >> 1; if (ch[3 * mid] <= j) { at = mid; lo = mid + 1; } else hi = mid - 1; }
    return at < 0 ? null : [ch[3 * at + 1], ch[3 * at + 2]];
  }
  var processes = [], devices = [];
  (function () {
    var ps = {}, ds = {};
    for (var k = 0; k < K; k++) { ps[keyProc[k]] = 1; if (keyDev[k]) ds[keyDev[k]] = 1; }
    processes = Object.keys(ps).map(Number).sort(function (a, b) { return a - b; });
    devices = Object.keys(ds).sort();
  })();
  var state = { proc: -1, dev: "", lib: false, search: "", zoom: null, dzoom: null,
                selected: (D.defaults || {}).selected || 0, base: (D.defaults || {}).base || 0,
                "new": (D.defaults || {})["new"] || 0, click: "selected", side: 1 };
  function wanted(k) { return (state.proc < 0 || keyProc[k] === state.proc) && (!state.dev || keyDev[k] === state.dev); }

  var snaps = D.snapshots || null;
  var P = snaps ? snaps.snapshot.length : (D.names ? D.names.length : 1);
  function snapName(j) {
    if (!snaps) return D.names ? D.names[j] : "profile";
    var s = "snapshot " + snaps.snapshot[j] + " at " + secs(snaps.t[j]);
    var lab = STR[snaps.label[j]], trig = STR[snaps.trigger[j]];
    if (lab) s += " '" + lab + "'";
    if (trig && trig !== "interval") s += " (" + trig + ")";
    if (D.peak && j === D.peak.j) s += " \u00b7 the peak";
    return s;
  }

  // -- header and headline ----------------------------------------------------------

  function header() {
    var h = add(root, el("header"));
    add(h, el("h1", null, D.title));
    if (D.command) add(h, el("p", "command", "$ " + D.command));
    if (D.facts) {
      var f = D.facts, bits = [];
      if (f.backend) bits.push(f.backend + (f.devices ? " x " + f.devices + " device" + (f.devices === 1 ? "" : "s") : ""));
      if (f.duration_s !== null && f.duration_s !== undefined) bits.push("ran " + secs(f.duration_s));
      bits.push(f.snapshots + " snapshots" + (D.snapshots_total > P ? " (" + P + " drawn, peaks kept)" : ""));
      if (f.markers) bits.push(f.markers + " markers");
      if (f.exit_status !== null && f.exit_status !== undefined) bits.push("exit status " + f.exit_status + (f.ended_by ? " (" + f.ended_by + ")" : ""));
      if (f.finished === false) bits.push("unfinished run");
      add(h, el("p", "facts", bits.join(" \u00b7 ")));
    }
    (D.warnings || []).forEach(function (w) { add(h, el("p", "warning", "warning: " + w)); });
  }

  function headline() {
    var H = D.headline || {};
    var box = add(root, el("section", "headline"));
    box.id = "headline";
    function tile(title, id) { var t = add(box, el("div", "tile")); t.id = id; add(t, el("h3", null, title)); return t; }
    function siteList(t, rows, valueOf) {
      var ul = add(t, el("ul", "sites"));
      rows.forEach(function (r) {
        var li = add(ul, el("li"));
        add(li, el("span", "num", valueOf(r)), el("span", "site", r.site));
        if (r.holder) add(li, el("span", "holder", "kept alive by " + r.holder));  // the Python reference holding it
      });
      if (!rows.length) add(t, el("p", "hint", "nothing"));
    }
    if (D.page === "report") {
      var A = D.answer;
      if (A && A.true_peak_bytes) {  // the answer first: the true peak, what it is, what inside the call holds it
        var tp = tile("True peak", "jmp-true-peak");
        add(tp, el("p", "big", bytes(A.true_peak_bytes) + (A.devices > 1 ? " per device" : "")));
        add(tp, el("p", "label-line", A.true_peak));
        if (A.composition && A.composition.length) {
          var ul0 = add(tp, el("ul", "sites"));
          A.composition.forEach(function (c) { var li = add(ul0, el("li")); add(li, el("span", "num", bytes(c[1])), el("span", "site", c[0])); });
        }
        if (A.inside) add(tp, el("p", "hint", A.inside));
        (A.chip || []).forEach(function (line) { add(tp, el("p", "hint jmp-chip", line)); });  // the chip's own counters
      }
      var t = tile("Live peak", "jmp-peak");
      add(t, el("p", "big", bytes(H.peak_bytes)));
      add(t, el("p", "label-line", A && A.live_peak ? A.live_peak : H.peak_snapshot === null || H.peak_snapshot === undefined ? "no snapshots" :
        "live peak at " + secs(H.peak_t) + " (snapshot " + H.peak_snapshot + ")"));
      siteList(tile("Which lines held the live peak", "jmp-held"), H.held_by || [], function (r) { return bytes(r.bytes) + " " + pct(r.share); });
      var g = tile("What grew", "jmp-grew");
      if (H.grew_between && H.grew_between.length) add(g, el("p", "hint", "snapshot " + H.grew_between[0] + " \u2192 " + H.grew_between[1]));
      siteList(g, (H.grew || []).filter(function (r) { return r.delta_bytes > 0; }), function (r) { return bytes(r.delta_bytes, true); });
      var c = tile("What to change", "jmp-change");
      var F = D.findings || [];
      if (!F.length) add(c, el("p", "hint", "no findings"));
      var ul = add(c, el("ul", "fixes"));
      F.slice(0, 4).forEach(function (f, i) {  // a card: the finding's line, what it saves, its fix, a link to it
        var li = add(ul, el("li"));
        var a = add(li, el("a", "card-link", (i + 1) + ". " + f.rule));
        a.href = "#finding-" + (i + 1);
        add(li, el("span", "sev sev-" + f.severity, " " + f.severity));
        if (f.site) add(li, el("span", "site", " " + f.site));
        if (f.saves) add(li, el("span", "num", " " + f.saves));
        add(li, el("div", null, f.brief_fix || f.fix || f.brief || f.message));
      });
      if (F.length > 4) add(c, el("p", "hint", (F.length - 4) + " more below"));
    } else if (D.page === "show") {
      var s = tile("Total", "jmp-total");
      add(s, el("p", "big", bytes(H.total_bytes)));
      add(s, el("p", "hint", D.value_type));
      siteList(tile("Which lines hold it", "jmp-held"), H.held_by || [], function (r) { return bytes(r.bytes) + " " + pct(r.share); });
    } else {
      var d = tile("Total", "jmp-total");
      add(d, el("p", "big", bytes(H.new_bytes - H.base_bytes, true)));
      add(d, el("p", "hint", bytes(H.base_bytes) + " \u2192 " + bytes(H.new_bytes)));
      siteList(tile("What grew", "jmp-grew"), (H.grew || []).filter(function (r) { return r.delta_bytes > 0; }), function (r) { return bytes(r.delta_bytes, true); });
      siteList(tile("What shrank", "jmp-shrank"), (H.grew || []).filter(function (r) { return r.delta_bytes < 0; }).reverse(), function (r) { return bytes(r.delta_bytes, true); });
    }
  }

  // -- controls shared by the views --------------------------------------------------

  var listeners = [];
  function changed() { listeners.forEach(function (f) { f(); }); }
  function snapOptions() { var o = []; for (var j = 0; j < P; j++) o.push([j, snapName(j)]); return o; }
  function filters(parent) {
    if (processes.length > 1) add(parent, selectBox("process", [[-1, "all processes"]].concat(processes.map(function (p) { return [p, "process " + p]; })), state.proc,
      function (v) { state.proc = Number(v); state.zoom = state.dzoom = null; changed(); }, "jmp-process"));
    if (devices.length > 1) add(parent, selectBox("device", [["", "all devices"]].concat(devices.map(function (d) { return [d, d]; })), state.dev,
      function (v) { state.dev = v; state.zoom = state.dzoom = null; changed(); }, "jmp-device"));
  }

  // -- timeline ----------------------------------------------------------------------

  function siteSeries() {
    // Live bytes per site at every kept position, for the chosen process and device.
    var per = {}, total = new Float64Array(P);
    for (var k = 0; k < K; k++) {
      if (!wanted(k)) continue;
      var site = stackSite[keyStack[k]], arr = per[site] || (per[site] = new Float64Array(P + 1));
      var ch = changes[k], prev = 0;
      for (var i = 0; i < ch.length; i += 3) { arr[ch[i]] += ch[i + 1] - prev; prev = ch[i + 1]; }
    }
    var names = Object.keys(per), peaks = {};
    names.forEach(function (n) {
      var a = per[n], run = 0, mx = 0;
      for (var j = 0; j < P; j++) { run += a[j]; a[j] = run; total[j] += run; if (run > mx) mx = run; }
      peaks[n] = mx;
    });
    // The report's top sites first (all devices: the terminal's order), then the next by peak, ten in all.
    var order = (state.proc < 0 && !state.dev && D.top_sites ? D.top_sites : []).filter(function (n) { return per[n]; });
    var first = {}; order.forEach(function (n) { first[n] = 1; });
    order = order.concat(names.filter(function (n) { return !first[n] && peaks[n] > 0; })
      .sort(function (a, b) { return peaks[b] - peaks[a] || (a < b ? -1 : 1); })).slice(0, Math.max(10, order.length));
    var inTop = {}; order.forEach(function (n) { inTop[n] = 1; });
    var other = new Float64Array(P), hasOther = false;
    names.forEach(function (n) { if (!inTop[n] && peaks[n] > 0) { hasOther = true; for (var j = 0; j < P; j++) other[j] += per[n][j]; } });
    var series = order.map(function (n, i) { return { name: n, values: per[n], color: PALETTE[i % PALETTE.length] }; });
    if (hasOther) series.push({ name: "other", values: other, color: OTHER });
    return { series: series, total: total };
  }
  var siteColor = {};


  function timeline() {
    var s = section("timeline", "Live memory over time, by line",
      "Stacked by the lines holding the most at their peak. Hover for values; click a moment to show that snapshot below.");
    var bar = add(s, el("div", "controls"));
    filters(bar);
    var mode = add(bar, el("span", "ctl"));
    add(mode, el("span", null, "a click sets "));
    [["selected", "the flame graph's snapshot"], ["base", "the diff's base"], ["new", "the diff's new"]].forEach(function (m) {
      var l = add(mode, el("label", "radio")), r = add(l, el("input"));
      r.type = "radio"; r.name = "jmp-click"; r.value = m[0]; r.checked = state.click === m[0];
      r.addEventListener("change", function () { if (r.checked) state.click = m[0]; });
      add(l, el("span", null, " " + m[1]));
    });
    var chartBox = add(s, el("div", "chart"));
    var legend = add(s, el("ul", "legend"));
    legend.id = "jmp-legend";
    var note = add(s, el("p", "hint"));
    var cur = null, yMax = 1, W = 0, H = 280, M = { l: 72, r: 12, t: 14, b: 34 };
    var t = snaps.t, tMin = t.length ? t[0] : 0, tMax = t.length ? t[t.length - 1] : 1;
    if (tMax <= tMin) tMax = tMin + 1;
    function X(v) { return M.l + (v - tMin) / (tMax - tMin) * (W - M.l - M.r); }
    function Y(v) { return H - M.b - v / yMax * (H - M.t - M.b); }
    function nearest(px) {
      var v = tMin + (px - M.l) / (W - M.l - M.r) * (tMax - tMin), lo = 0, hi = P - 1;
      while (hi - lo > 1) { var mid = (lo + hi) >> 1; if (t[mid] <= v) lo = mid; else hi = mid; }
      return Math.abs(t[hi] - v) < Math.abs(t[lo] - v) ? hi : lo;
    }
    function stat(name) {
      var dev = state.dev, rows = D.stats || [];
      for (var i = 0; i < rows.length; i++) if (STR[rows[i].device] === dev && (state.proc < 0 || rows[i].process === state.proc)) return rows[i][name];
      return null;
    }
    function draw() {
      cur = siteSeries();
      W = Math.max(600, chartBox.clientWidth || 900);
      var inUse = stat("bytes_in_use"), limit = stat("bytes_limit");
      var mx = 0; for (var j = 0; j < P; j++) { mx = Math.max(mx, cur.total[j], inUse && inUse[j] || 0); }
      var tp = (!state.dev && state.proc < 0 && D.true_peak && D.true_peak.bytes) || 0;
      mx = Math.max(mx, tp);
      var lim = 0; if (limit) limit.forEach(function (v) { if (v > lim) lim = v; });
      var limitShown = lim > 0 && lim <= 4 * mx;
      if (limitShown) mx = Math.max(mx, lim);
      yMax = mx > 0 ? mx * 1.08 : 1;
      chartBox.textContent = "";
      var g = sv("svg", { width: W, height: H, "class": "timeline", role: "img" });
      g.id = "jmp-timeline";
      add(chartBox, g);
      niceTicks(yMax, 4).forEach(function (v) {
        add(g, sv("line", { x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), "class": "grid" }));
        add(g, sv("text", { x: M.l - 6, y: Y(v) + 4, "class": "axis", "text-anchor": "end" }, bytes(v)));
      });
      var xt = niceSecs(tMax - tMin);
      for (var v = Math.ceil(tMin / xt) * xt; v <= tMax + 1e-9; v += xt) {
        add(g, sv("text", { x: X(v), y: H - M.b + 28, "class": "axis", "text-anchor": "middle" }, secs(v)));
      }
      // stacked areas, largest at the bottom
      var lower = new Float64Array(P);
      siteColor = {};
      cur.series.forEach(function (ser) {
        siteColor[ser.name] = ser.color;
        var up = [], down = [];
        for (var j = 0; j < P; j++) {
          var y0 = lower[j], y1 = y0 + ser.values[j];
          up.push(X(t[j]).toFixed(1) + "," + Y(y1).toFixed(1));
          down.push(X(t[j]).toFixed(1) + "," + Y(y0).toFixed(1));
          lower[j] = y1;
        }
        var p = add(g, sv("path", { d: "M" + up.join("L") + "L" + down.reverse().join("L") + "Z", fill: ser.color, "class": "area" }));
        p.setAttribute("data-site", ser.name);
      });
      function line(values, cls, label) {
        if (!values) return;
        var pts = [];
        for (var j = 0; j < P; j++) if (values[j] !== null && values[j] !== undefined) pts.push(X(t[j]).toFixed(1) + "," + Y(values[j]).toFixed(1));
        if (pts.length) add(g, sv("path", { d: "M" + pts.join("L"), "class": cls, "data-line": label }));
      }
      line(inUse, "line-inuse", "bytes_in_use");
      if (limitShown) line(limit, "line-limit", "bytes_limit");
      var top = 0; for (var jt = 0; jt < P; jt++) if (cur.total[jt] > top) top = cur.total[jt];
      if (tp > top) {  // above the snapshot peak (else it is the peak itself)
        add(g, sv("line", { x1: M.l, x2: W - M.r, y1: Y(tp), y2: Y(tp), "class": "line-truepeak" }));
        add(g, sv("text", { x: M.l + 6, y: Y(tp) - 4, "class": "label" }, "true peak " + bytes(tp) +
          (D.true_peak.where ? " (" + D.true_peak.where + ")" : "")));
      }
      // the peak
      var pj = 0; for (var j2 = 1; j2 < P; j2++) if (cur.total[j2] > cur.total[pj]) pj = j2;
      if (P) {
        add(g, sv("circle", { cx: X(t[pj]), cy: Y(cur.total[pj]), r: 4.5, "class": "peak" }));
        var right = X(t[pj]) > W * 0.7;
        var pl = add(g, sv("text", { x: X(t[pj]) + (right ? -8 : 8), y: Math.max(M.t + 10, Y(cur.total[pj]) - 6), "class": "label peak-label", "text-anchor": right ? "end" : "start" },
          "live peak " + bytes(cur.total[pj]) + " at " + secs(t[pj])));
        pl.id = "jmp-peak-label";
      }
      // markers as ticks
      var mk = D.markers || { t: [] };
      for (var m = 0; m < mk.t.length; m++) {
        var tick = add(g, sv("line", { x1: X(mk.t[m]), x2: X(mk.t[m]), y1: H - M.b, y2: H - M.b + 6, "class": "marker" }));
        add(tick, sv("title", {}, "marker " + STR[mk.label[m]] + " at " + secs(mk.t[m])));
      }
      add(g, sv("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, "class": "axis-line" }));
      // the chosen snapshots
      [["base", "A"], ["new", "B"], ["selected", "\u25bc"]].forEach(function (c) {
        var j = state[c[0]]; if (j === null || j >= P) return;
        add(g, sv("line", { x1: X(t[j]), x2: X(t[j]), y1: M.t, y2: H - M.b, "class": "cursor cursor-" + c[0] }));
        add(g, sv("text", { x: X(t[j]), y: M.t - 2, "class": "cursor-label", "text-anchor": "middle" }, c[1]));
      });
      var guide = add(g, sv("line", { x1: 0, x2: 0, y1: M.t, y2: H - M.b, "class": "guide", visibility: "hidden" }));
      var hit = add(g, sv("rect", { x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, "class": "hit" }));
      hit.addEventListener("mousemove", function (ev) {
        var r = g.getBoundingClientRect(), j = nearest(ev.clientX - r.left);
        guide.setAttribute("x1", X(t[j])); guide.setAttribute("x2", X(t[j])); guide.setAttribute("visibility", "visible");
        var lines = [snapName(j), "live " + bytes(cur.total[j])];
        if (inUse && inUse[j] !== null) lines.push("bytes_in_use " + bytes(inUse[j]));
        if (limit && limit[j] !== null) lines.push("bytes_limit " + bytes(limit[j]));
        cur.series.slice().reverse().forEach(function (ser) { if (ser.values[j] > 0) lines.push(bytes(ser.values[j]) + "  " + ser.name); });
        showTip(ev, lines);
      });
      hit.addEventListener("mouseleave", function () { guide.setAttribute("visibility", "hidden"); hideTip(); });
      hit.addEventListener("click", function (ev) {
        var r = g.getBoundingClientRect();
        pick(state.click, nearest(ev.clientX - r.left));
      });
      legend.textContent = "";
      cur.series.slice().reverse().forEach(function (ser) {
        var li = add(legend, el("li"));
        var sw = add(li, el("span", "swatch")); sw.style.background = ser.color;
        var mxs = 0; for (var j = 0; j < P; j++) if (ser.values[j] > mxs) mxs = ser.values[j];
        add(li, el("span", "site", ser.name), el("span", "num", "peak " + bytes(mxs)));
      });
      var notes = [];
      if (inUse) notes.push("line: bytes_in_use (the allocator)");
      if (lim > 0) notes.push(limitShown ? "dashed: bytes_limit" : "bytes_limit " + bytes(lim) + " (above the chart)");
      if (D.markers_total) notes.push("ticks: " + D.markers_total + " markers" + (D.markers_total > mk.t.length ? " (" + mk.t.length + " drawn)" : ""));
      if (D.snapshots_total > P) notes.push(P + " of " + D.snapshots_total + " snapshots drawn: each stretch's highest and lowest, the peak and labelled ones");
      note.textContent = notes.join(" \u00b7 ");
    }
    listeners.push(draw);
    window.addEventListener("resize", function () { if (chartBox.isConnected && Math.abs((chartBox.clientWidth || 0) - W) > 20) draw(); });
    draw();
  }
  var pickers = {};
  function pick(which, j) {
    state[which] = j;
    if (which === "selected") state.zoom = null; else state.dzoom = null;
    if (pickers[which]) pickers[which].value = String(j);
    changed();
  }

  // -- flame graphs ------------------------------------------------------------------

  function FNode(name, frame) { this.name = name; this.frame = frame; this.w = 0; this.a = 0; this.b = 0; this.n = 0; this.types = {}; this.kids = {}; this.list = null; }
  function buildTree(ja, jb) {
    // jb === undefined: one snapshot (w = bytes); else a diff (w = the larger side per key).
    var top = new FNode("all", -1);
    var pathCache = {};
    for (var k = 0; k < K; k++) {
      if (!wanted(k)) continue;
      var va = valueAt(k, ja), vb = jb === undefined ? null : valueAt(k, jb);
      var a = va ? va[0] : 0, b = vb ? vb[0] : 0, nA = va ? va[1] : 0, nB = vb ? vb[1] : 0;
      if (jb === undefined) { if (!a && !nA) continue; } else if (!a && !b && !nA && !nB) continue;
      var w = jb === undefined ? a : Math.max(a, b), n = jb === undefined ? nA : nB;
      var s = keyStack[k], path = pathCache[s] || (pathCache[s] = userPath(s, state.lib));
      var node = top, ty = keyType[k];
      accumulate(node, w, a, b, n, ty);
      for (var i = 0; i < path.length; i++) {
        var f = path[i], c = node.kids[f];
        if (!c) c = node.kids[f] = new FNode(frames[f].name, f);
        accumulate(c, w, a, b, n, ty);
        node = c;
      }
    }
    return top;
  }
  function accumulate(node, w, a, b, n, ty) { node.w += w; node.a += a; node.b += b; node.n += n; if (n) node.types[ty] = (node.types[ty] || 0) + n; }
  function kidsOf(node) {
    if (!node.list) node.list = Object.keys(node.kids).map(function (f) { return node.kids[f]; })
      .sort(function (x, y) { return y.w - x.w || (x.name < y.name ? -1 : 1); });
    return node.list;
  }
  function typesText(node) {
    var ts = Object.keys(node.types).filter(function (t) { return t; }).sort(function (x, y) { return node.types[y] - node.types[x]; });
    if (!ts.length) return null;
    var shown = ts.slice(0, 6).map(function (t) { return t + " \u00d7" + node.types[t]; });
    return "types: " + shown.join(", ") + (ts.length > 6 ? ", \u2026" : "");
  }
  function flameColor(node, diff) {
    if (node.frame < 0) return "#c9c9c9";
    if (diff) {
      var d = node.b - node.a, r = node.w ? Math.min(1, Math.abs(d) / node.w) : 0;
      if (!d) return "#d9d6cf";
      var l = 88 - 40 * r;
      return d > 0 ? "hsl(0,75%," + l + "%)" : "hsl(130,55%," + l + "%)";
    }
    var f = frames[node.frame], h = hash(f.file);
    return f.user ? "hsl(" + (10 + h % 40) + ",85%," + (58 + h % 14) + "%)" : "hsl(" + (200 + h % 30) + ",30%," + (70 + h % 10) + "%)";
  }

  function flameView(parent, opts) {
    // opts: {diff: bool, id, get: () => [ja, jb], zoomKey}; another tree: tree: () => its top FNode,
    // with color(node, depth), tip(node, top) -> lines, info(top) -> text, noSearch (what the memory is)
    var box = add(parent, el("div", "flame-wrap"));
    var info = add(box, el("p", "flame-info"));
    var chart = add(box, el("div", "chart"));
    var ROW = 18;
    function draw() {
      var js = opts.get(), tree = opts.tree ? opts.tree() : opts.diff ? buildTree(js[0], js[1]) : buildTree(js[0]);
      var W = Math.max(600, chart.clientWidth || 900);
      // the zoomed node, found again by its path of frames
      var zpath = state[opts.zoomKey] || [], focus = tree, chain = [tree];
      for (var i = 0; i < zpath.length; i++) { var c = focus.kids[zpath[i]]; if (!c) break; focus = c; chain.push(c); }
      var rows = [], maxDepth = 0, query = opts.noSearch ? "" : state.search.toLowerCase(), matched = 0;
      chain.forEach(function (n, d) { rows.push({ n: n, d: d, x: 0, w: W, anc: d < chain.length - 1 }); });
      function lay(n, d, x, w, inMatch) {
        var hitNow = query && n.frame >= 0 && n.name.toLowerCase().indexOf(query) >= 0;
        if (hitNow && !inMatch) matched += n.w;
        if (d > chain.length - 1) rows.push({ n: n, d: d, x: x, w: w, m: hitNow });
        maxDepth = Math.max(maxDepth, d);
        var kx = x, ks = kidsOf(n);
        for (var i = 0; i < ks.length; i++) {
          var kw = n.w ? w * ks[i].w / n.w : 0;
          if (kw >= 0.5) lay(ks[i], d + 1, kx, kw, inMatch || hitNow);
          kx += kw;
        }
      }
      lay(focus, chain.length - 1, 0, W, false);
      rows[chain.length - 1].m = query && focus.frame >= 0 && focus.name.toLowerCase().indexOf(query) >= 0;
      var H = (maxDepth + 1) * ROW + 2;
      chart.textContent = "";
      var g = sv("svg", { width: W, height: H, "class": "flame", role: "img" });
      g.id = opts.id;
      add(chart, g);
      rows.forEach(function (r) {
        var n = r.n, y = r.d * ROW;
        var grp = add(g, sv("g", { "class": "fnode" + (r.m ? " match" : "") + (r.anc ? " ancestor" : "") }));
        grp.setAttribute("data-name", n.name);
        grp.setAttribute("data-bytes", String(opts.diff ? n.b : n.w));
        if (n.path) grp.setAttribute("data-path", n.path);
        if (opts.diff) { grp.setAttribute("data-base", String(n.a)); grp.setAttribute("data-delta", String(n.b - n.a)); }
        add(grp, sv("rect", { x: r.x.toFixed(2), y: y, width: Math.max(0.5, r.w - 0.5).toFixed(2), height: ROW - 1, fill: opts.color ? opts.color(n, r.d) : flameColor(n, opts.diff) }));
        if (r.w > 36) {
          var chars = Math.floor((r.w - 6) / 6.6), label = n.frame < 0 ? (opts.diff ? "all: " + bytes(n.b - n.a, true) : "all: " + bytes(n.w)) : n.name;
          if (label.length > chars) label = label.slice(0, Math.max(0, chars - 1)) + "\u2026";
          add(grp, sv("text", { x: (r.x + 3).toFixed(2), y: y + ROW - 5, "class": "flabel" }, label));
        }
        grp.addEventListener("mousemove", function (ev) {
          if (opts.tip) { showTip(ev, opts.tip(n, tree)); return; }
          var lines = [n.frame < 0 ? "all" : n.name];
          if (opts.diff) {
            lines.push(bytes(n.a) + " \u2192 " + bytes(n.b) + " (" + bytes(n.b - n.a, true) + ")");
            lines.push(n.n + " buffers in the new snapshot");
          } else {
            lines.push(bytes(n.w) + " (" + (tree.w ? pct(n.w / tree.w) : "0%") + " of " + bytes(tree.w) + ")");
            lines.push(n.n + " buffer" + (n.n === 1 ? "" : "s"));
          }
          var tt = typesText(n); if (tt) lines.push(tt);
          if (n.frame >= 0) lines.push(frames[n.frame].user ? "your code" : "library code");
          showTip(ev, lines);
        });
        grp.addEventListener("mouseleave", hideTip);
        grp.addEventListener("click", function () {
          var p = [], cur = n; // the path of frames from the top down to n
          (function find(x, acc) {
            if (x === n) { p = acc.slice(); return true; }
            var ks = kidsOf(x);
            for (var i = 0; i < ks.length; i++) { acc.push(ks[i].frame); if (find(ks[i], acc)) return true; acc.pop(); }
            return false;
          })(tree, []);
          state[opts.zoomKey] = p.length ? p : null;
          draw();
          void cur;
        });
      });
      var bits = [];
      if (opts.info) bits.push(opts.info(tree));
      else if (opts.diff) bits.push(opts.label() + ": " + bytes(tree.a) + " \u2192 " + bytes(tree.b) + " (" + bytes(tree.b - tree.a, true) + ")");
      else bits.push(opts.label() + ": " + bytes(tree.w) + " in " + tree.n + " buffers");
      if (zpath.length) bits.push("zoomed: click the top bar to zoom out");
      if (query) bits.push("search: " + bytes(matched) + " match (" + (tree.w ? pct(matched / tree.w) : "0%") + ")");
      info.textContent = bits.join(" \u00b7 ");
      info.setAttribute("data-total", String(opts.diff ? tree.b - tree.a : tree.w));
    }
    listeners.push(draw);
    draw();
    return draw;
  }

  function flameControls(parent) {
    var bar = add(parent, el("div", "controls"));
    if (D.page !== "report") filters(bar);
    var sl = add(bar, el("label", "ctl")), search = add(sl, el("input"));
    search.type = "search"; search.placeholder = "search frames"; search.id = "jmp-search";
    search.addEventListener("input", function () { state.search = search.value; changed(); });
    var ll = add(bar, el("label", "ctl")), lib = add(ll, el("input"));
    lib.type = "checkbox"; lib.id = "jmp-lib"; lib.checked = state.lib;
    lib.addEventListener("change", function () { state.lib = lib.checked; state.zoom = state.dzoom = null; changed(); });
    add(ll, el("span", null, " library frames"));
    return bar;
  }

  function flames() {
    if (D.page === "diff") {
      var d = section("diff", "What changed: a differential flame graph",
        "Width: the larger of the two sides at each stack; red grew, green shrank. Hover for bytes; click to zoom.");
      flameControls(d);
      flameView(d, { diff: true, id: "jmp-diff", zoomKey: "dzoom", get: function () { return [0, 1]; },
        label: function () { return D.names[0] + " \u2192 " + D.names[1]; } });
      var f = section("flame", "Each side", null);
      add(f, selectBox("show", [[0, D.names[0]], [1, D.names[1]]], state.side, function (v) { state.side = Number(v); state.zoom = null; changed(); }, "jmp-side"));
      flameView(f, { diff: false, id: "jmp-flame", zoomKey: "zoom", get: function () { return [state.side]; },
        label: function () { return D.names[state.side]; } });
      return;
    }
    var s = section("flame", D.page === "report" ? "Where the bytes of one snapshot are, by stack" : "Where the bytes are, by stack",
      "An icicle graph over your code's stacks (library frames hidden unless asked for): width is bytes. Hover for bytes, buffers, shapes and dtypes; click to zoom; search to highlight.");
    var bar = flameControls(s);
    if (D.page === "report") {
      var w = selectBox("snapshot", snapOptions(), state.selected, function (v) { pick("selected", Number(v)); }, "jmp-selected");
      pickers.selected = w.querySelector("select");
      bar.insertBefore(w, bar.firstChild);
    }
    flameView(s, { diff: false, id: "jmp-flame", zoomKey: "zoom", get: function () { return [state.selected]; },
      label: function () { return snapName(state.selected); } });
    if (D.page !== "report" || P < 2) return;
    var d = section("diff", "What grew between two snapshots",
      "A differential flame graph: width is the larger of the two sides at each stack; red grew, green shrank. The first and the final snapshot by default; pick others here or by clicking the timeline.");
    var db = add(d, el("div", "controls"));
    var a = selectBox("base", snapOptions(), state.base, function (v) { pick("base", Number(v)); }, "jmp-base");
    var b = selectBox("new", snapOptions(), state["new"], function (v) { pick("new", Number(v)); }, "jmp-new");
    pickers.base = a.querySelector("select"); pickers["new"] = b.querySelector("select");
    add(db, a, b);
    flameView(d, { diff: true, id: "jmp-diff", zoomKey: "dzoom", get: function () { return [state.base, state["new"]]; },
      label: function () { return "snapshot " + snaps.snapshot[state.base] + " \u2192 " + snaps.snapshot[state["new"]]; } });
  }

  // -- what the memory is: role -> owner path, per group of devices -------------------
  // The cells are analysis/flame.py's role_cells: one position; a stack per owner, its role
  // outermost, then its path's parts; a frame is [label, path, 0, 1] (a role's path is "").

  var ROLE_HUES = [212, 28, 280, 130, 170, 95, 4, 330, 48, 250, 30];
  function roles() {
    var R = D.roles;
    if (!R || !(R.groups || []).length) return;
    var s = section("roles", "What the memory is: by role and by owner",
      "At the largest sampled jitted call: each role's bytes (they add up to the call's peak on the device), and under it " +
      "its arrays by their path in your own trees; XLA's temporaries by your line. Width is bytes. Hover for bytes and share; click to zoom.");
    var rf = R.frames.map(function (f) { return { label: STR[f[0]], path: STR[f[1]] }; });
    function tree(device) {
      var top = new FNode("all", -1);
      R.keys.forEach(function (key, k) {
        if (STR[key[2]] !== device) return;
        var st = R.stacks[key[0]], ch = R.changes[k], b = ch[1], n = ch[2], ty = STR[key[1]], node = top;
        var role = rf[st[st.length - 1]].label;
        accumulate(node, b, b, b, n, ty);
        for (var i = st.length - 1; i >= 0; i--) {
          var f = st[i], c = node.kids[f];
          if (!c) { c = node.kids[f] = new FNode(rf[f].label, f); c.path = rf[f].path; c.role = role; }
          accumulate(c, b, b, b, n, ty);
          node = c;
        }
      });
      return top;
    }
    function color(n, d) {
      if (n.frame < 0) return "#c9c9c9";
      var i = (R.order || []).indexOf(n.role), h = ROLE_HUES[(i < 0 ? ROLE_HUES.length - 1 : i) % ROLE_HUES.length];
      return "hsl(" + h + "," + (i < 0 || i >= 9 ? 10 : 62) + "%," + Math.min(90, 56 + 8 * (d - 1)) + "%)";
    }
    var boxes = [];
    R.groups.forEach(function (g, i) {
      var box = add(s, el("div", "roles-group"));
      box.id = "jmp-roles-group-" + i;
      box.setAttribute("data-device", g.device);
      var on = g.label ? " on " + g.label + (g.devices.length > 1 ? " each" : "") : "";
      if (R.groups.length > 1) add(box, el("h3", null, (R.where || "at the call") + on + ": " + bytes(g.bytes)));
      boxes.push([box, g]);
      flameView(box, { id: "jmp-roles-" + i, zoomKey: "rzoom" + i, noSearch: true, get: function () { return [0]; },
        tree: function () { return tree(g.device); }, color: color,
        label: function () { return (R.where || "at the call") + on; },
        info: function (top) { return (R.where || "at the call") + on + ": " + bytes(top.w) + ", " + top.n + " named array" + (top.n === 1 ? "" : "s"); },
        tip: function (n, top) {
          var lines = [n.frame < 0 ? "all" : (n.path || n.name), bytes(n.w) + " (" + (top.w ? pct(n.w / top.w) : "0%") + " of " + bytes(top.w) + ")"];
          if (n.n) lines.push(n.n + " array" + (n.n === 1 ? "" : "s"));
          var tt = typesText(n); if (tt) lines.push(tt);
          if (n.path) lines.push("role: " + n.role);
          return lines;
        } });
    });
    // With a device chosen above, the group holding it alone.
    function pickGroup() {
      boxes.forEach(function (bg) {
        var g = bg[1], mine = !state.dev || g.devices.indexOf(state.dev) >= 0;
        bg[0].hidden = !mine;
      });
    }
    listeners.push(pickGroup);
    pickGroup();
  }

  // -- lifetimes ---------------------------------------------------------------------

  function lifetimes() {
    var L = D.lifetimes || [];
    var s = section("lifetimes", "Lifetimes of the largest arrays",
      L.length ? "The " + L.length + " largest arrays (at most 40 from one line), grouped by the line that made them: each bar runs from the first snapshot that saw the array to its end, or to the end of the run for one still alive." : null);
    if (!L.length) { add(s, el("p", "hint", "This run has no per-array records (a directory of profiles).")); return; }
    var bySite = {}, order = [];
    L.forEach(function (a) { if (!bySite[a.site]) { bySite[a.site] = []; order.push(a.site); } bySite[a.site].push(a); });
    order.sort(function (x, y) { return bySite[y].reduce(function (v, a) { return v + a.bytes; }, 0) - bySite[x].reduce(function (v, a) { return v + a.bytes; }, 0); });
    var t = snaps.t, tMin = t[0], tMax = t[t.length - 1]; if (tMax <= tMin) tMax = tMin + 1;
    var chart = add(s, el("div", "chart"));
    function draw() {
      var W = Math.max(600, chart.clientWidth || 900), M = { l: 12, r: 12 }, ROW = 7, HEAD = 16, y = 4;
      var total = 0; order.forEach(function (site) { total += HEAD + bySite[site].length * ROW + 4; });
      chart.textContent = "";
      var g = add(chart, sv("svg", { width: W, height: total + 26, "class": "lifetimes" }));
      g.id = "jmp-lifetimes";
      function X(v) { return M.l + (v - tMin) / (tMax - tMin) * (W - M.l - M.r); }
      order.forEach(function (site) {
        var color = siteColor[site] || OTHER;
        add(g, sv("text", { x: M.l, y: y + 12, "class": "lt-site" }, site + " \u00b7 " + bySite[site].length + (bySite[site].length === 1 ? " array" : " arrays")));
        y += HEAD;
        bySite[site].sort(function (a, b) { return a.start - b.start; }).forEach(function (a) {
          var end = a.alive_at_end ? tMax : (a.end !== null ? a.end : a.last);
          var r = add(g, sv("rect", { x: X(a.start).toFixed(1), y: y, width: Math.max(1.5, X(end) - X(a.start)).toFixed(1), height: ROW - 1.5,
            fill: color, "class": "lt-bar" + (a.alive_at_end ? " alive" : "") }));
          r.setAttribute("data-site", site); r.setAttribute("data-bytes", String(a.bytes));
          r.addEventListener("mousemove", function (ev) {
            showTip(ev, [a.type + " " + bytes(a.bytes), site, "alive " + secs(a.start) + " \u2192 " + (a.alive_at_end ? "the end" : secs(end)) + (a.how ? " (" + a.how + ")" : "")]);
          });
          r.addEventListener("mouseleave", hideTip);
          y += ROW;
        });
        y += 4;
      });
      var xt = niceSecs(tMax - tMin);
      for (var v = Math.ceil(tMin / xt) * xt; v <= tMax + 1e-9; v += xt) add(g, sv("text", { x: X(v), y: y + 16, "class": "axis", "text-anchor": "middle" }, secs(v)));
    }
    listeners.push(draw);
    draw();
  }

  // -- memory inside jit -------------------------------------------------------------

  function jit() {
    var J = D.jit || {}, mem = J.memory || [];
    var s = section("jit", "Memory inside jitted functions",
      "What XLA allocates for one call: arguments, outputs (aliased: outputs written into donated arguments), and temporaries that no snapshot sees.");
    if (!mem.length) { add(s, el("p", "hint", "No jitted function was recorded.")); return; }
    var mx = 1;
    mem.forEach(function (r) { mx = Math.max(mx, (r.argument_bytes || 0) + (r.output_bytes || 0) - (r.alias_bytes || 0) + (r.temp_bytes || 0)); });
    var bars = add(s, el("div", "jit-bars"));
    var parts = [["argument_bytes", "arguments", "#4e79a7"], ["output_bytes", "outputs", "#f28e2b"], ["temp_bytes", "temporaries", "#e15759"]];
    mem.forEach(function (r) {
      var row = add(bars, el("div", "jit-row"));
      add(row, el("span", "jit-name", r["function"] + " (" + (r.defined_at || "") + ")"));
      var bar = add(row, el("span", "jit-bar"));
      parts.forEach(function (p) {
        var v = r[p[0]] || 0; if (p[0] === "output_bytes") v -= (r.alias_bytes || 0);
        if (v <= 0) return;
        var seg = add(bar, el("span", "seg")); seg.style.width = (100 * v / mx).toFixed(2) + "%"; seg.style.background = p[2];
        seg.title = p[1] + " " + bytes(v);
      });
    });
    var lg = add(s, el("p", "hint"));
    parts.forEach(function (p) { var sw = add(lg, el("span", "swatch")); sw.style.background = p[2]; add(lg, el("span", null, " " + p[1] + "  ")); });
    table(s, [["function", function (r) { return r["function"]; }], ["defined at", function (r) { return r.defined_at; }],
      ["calls", function (r) { return r.calls; }, 1], ["arguments", function (r) { return bytes(r.argument_bytes); }, 1],
      ["outputs", function (r) { return bytes(r.output_bytes); }, 1], ["aliased", function (r) { return bytes(r.alias_bytes); }, 1],
      ["temporaries", function (r) { return bytes(r.temp_bytes); }, 1], ["code", function (r) { return bytes(r.generated_code_bytes); }, 1],
      ["call peak", function (r) { return bytes(r.call_peak_bytes); }, 1]], mem, "jmp-jit-memory");
    var pk = J.peak || [];
    add(s, el("h3", null, "At each function's own peak, by your line"));
    if (!pk.length) add(s, el("p", "hint", "No XLA dump was read (the run had none, or the budget left them out)."));
    else table(s, [["function", function (r) { return r["function"]; }], ["line", function (r) { return r.site; }],
      ["kind", function (r) { return r.kind; }], ["bytes", function (r) { return bytes(r.bytes); }, 1],
      ["buffers", function (r) { return r.buffers; }, 1],
      ["share of peak", function (r) { var w = el("span", "share"); var b = add(w, el("span", "share-bar")); b.style.width = (100 * (r.share_of_peak || 0)).toFixed(1) + "%"; add(w, el("span", null, pct(r.share_of_peak || 0))); return w; }]],
      pk, "jmp-jit-peak");
    curves(s, J.curves || []);
    var bu = J.buffers || [];
    if (bu.length) {
      add(s, el("h3", null, "The largest buffers inside, with their live ranges (program order)"));
      table(s, [["function", function (r) { return r["function"]; }], ["buffer", function (r) { return r.name; }],
        ["line", function (r) { return r.site; }], ["kind", function (r) { return r.kind; }], ["shape", function (r) { return r.shape; }],
        ["bytes", function (r) { return bytes(r.bytes); }, 1],
        ["live", function (r) { var w = el("span", "range"); var b = add(w, el("span", "range-bar")); var L = r.program_length || 1;
          b.style.left = (100 * (r.live_start || 0) / L).toFixed(1) + "%"; b.style.width = Math.max(1, 100 * ((r.live_end || 0) - (r.live_start || 0)) / L).toFixed(1) + "%";
          if (r.at_peak) b.className += " at-peak"; return w; }]], bu, "jmp-jit-buffers");
    }
  }

  // Each function's bytes in program order, by your line: what XLA's schedule holds at
  // each position of the largest signature's sequence (stacked, largest line at the bottom).
  function curves(s, C) {
    if (!C.length) return;
    add(s, el("h3", null, "In program order, by your line"));
    C.forEach(function (c, k) {
      var box = add(s, el("div", "chart jit-curve"));
      box.id = "jmp-jit-curve-" + k;
      add(box, el("p", "hint", c["function"] + ": its buffers live at once reach " + bytes(c.peak_bytes) + " at position " +
        c.peak_position + " of XLA's schedule (its call peak adds arguments, outputs and temporaries each whole, " +
        "so it can be more: docs/glossary.md)"));
      var W = Math.max(600, s.clientWidth || 900), H = 212, M = { l: 72, r: 12, t: 12, b: 40 }, pos = c.positions, n = pos.length;
      var mx = 1; c.bytes.forEach(function (v) { if (v > mx) mx = v; });
      var yMax = mx * 1.08, xMax = Math.max(1, pos[n - 1] || 1);
      function X(p) { return M.l + p / xMax * (W - M.l - M.r); }
      function Y(v) { return H - M.b - v / yMax * (H - M.t - M.b); }
      var g = add(box, sv("svg", { width: W, height: H, "class": "timeline", role: "img" }));
      niceTicks(yMax, 3).forEach(function (v) {
        add(g, sv("line", { x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), "class": "grid" }));
        add(g, sv("text", { x: M.l - 6, y: Y(v) + 4, "class": "axis", "text-anchor": "end" }, bytes(v)));
      });
      niceTicks(xMax, 6).forEach(function (v) {  // the positions of XLA's schedule, readable on their own
        if (v > xMax) return;
        add(g, sv("line", { x1: X(v), x2: X(v), y1: H - M.b, y2: H - M.b + 4, "class": "axis-line" }));
        add(g, sv("text", { x: X(v), y: H - M.b + 16, "class": "axis", "text-anchor": "middle" }, String(Math.round(v))));
      });
      add(g, sv("text", { x: (M.l + W - M.r) / 2, y: H - 4, "class": "axis", "text-anchor": "middle" },
        "position in XLA's schedule of the program (" + (xMax + 1) + " instructions)"));
      add(g, sv("text", { x: X(c.peak_position) + 4, y: M.t + 10, "class": "label" }, "its peak " + bytes(c.peak_bytes)));
      var series = c.series.slice().sort(function (a, b) { return Math.max.apply(null, b.values) - Math.max.apply(null, a.values); });
      var lower = new Float64Array(n), legend = add(box, el("ul", "legend"));
      series.forEach(function (ser, i) {
        var up = [], down = [], color = PALETTE[i % PALETTE.length];
        for (var j = 0; j < n; j++) {
          var y0 = lower[j], y1 = y0 + ser.values[j];
          up.push(X(pos[j]).toFixed(1) + "," + Y(y1).toFixed(1)); down.push(X(pos[j]).toFixed(1) + "," + Y(y0).toFixed(1));
          lower[j] = y1;
        }
        var p = add(g, sv("path", { d: "M" + up.join("L") + "L" + down.reverse().join("L") + "Z", fill: color, "class": "area" }));
        p.setAttribute("data-site", ser.site);
        var li = add(legend, el("li")), sw = add(li, el("span", "swatch")); sw.style.background = color;
        add(li, el("span", "site", ser.site), el("span", "num", "most " + bytes(Math.max.apply(null, ser.values))));
      });
      add(g, sv("line", { x1: X(c.peak_position), x2: X(c.peak_position), y1: M.t, y2: H - M.b, "class": "cursor cursor-selected" }));
      add(g, sv("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, "class": "axis-line" }));
      var hit = add(g, sv("rect", { x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, "class": "hit" }));
      hit.addEventListener("mousemove", function (ev) {
        var r = g.getBoundingClientRect(), px = ev.clientX - r.left, j = 0;
        for (var q = 1; q < n; q++) if (Math.abs(X(pos[q]) - px) < Math.abs(X(pos[j]) - px)) j = q;
        var lines = ["position " + pos[j], "live " + bytes(c.bytes[j])];
        series.forEach(function (ser) { if (ser.values[j] > 0) lines.push(bytes(ser.values[j]) + "  " + ser.site); });
        showTip(ev, lines);
      });
      hit.addEventListener("mouseleave", hideTip);
    });
  }

  // -- run --plan: the step's peak against the batch, and the device's line --------------

  function plan() {
    var L = D.plan;
    if (!L || !(L.functions || []).length) return;
    var s = section("plan", "Plan: the peak against the batch",
      "XLA's compiles of the step at other batch sizes (run --plan), the busiest device's peak (live outside the call plus XLA's call peak); each dot a compile. " +
      (L.fit_peak_bytes ? "Dashed: the most a " + bytes(L.device_bytes) + " device holds by the fit rule (XLA's default pool, less 5 % and 64 MiB)." :
        "report --device-memory SIZE draws the device's line."));
    L.functions.forEach(function (f, k) {
      var box = add(s, el("div", "chart plan-chart"));
      box.id = "jmp-plan-" + k;
      add(box, el("p", "hint", f["function"] + ": recorded at batch " + f.recorded_batch + "; " + f.compiles + " compiles in " +
        secs(f.compile_s) + " by XLA on " + f.backend + (f.largest_batch !== null && f.largest_batch !== undefined ? "; largest batch that fits: " + f.largest_batch : "")));
      var W = Math.max(600, (s.clientWidth || 900) - 40), H = 240, M = { l: 72, r: 24, t: 12, b: 30 };
      var bMin = Infinity, bMax = 1, mx = 1;
      f.variants.forEach(function (v) { v.points.forEach(function (p) { bMin = Math.min(bMin, p[0]); bMax = Math.max(bMax, p[0]); mx = Math.max(mx, p[1]); }); });
      if (L.fit_peak_bytes && L.fit_peak_bytes <= 4 * mx) mx = Math.max(mx, L.fit_peak_bytes);
      var lo = Math.log2(Math.max(1, bMin)), hi = Math.max(lo + 1, Math.log2(bMax)), yMax = mx * 1.08;
      function X(b) { return M.l + (Math.log2(Math.max(1, b)) - lo) / (hi - lo) * (W - M.l - M.r); }
      function Y(v) { return H - M.b - v / yMax * (H - M.t - M.b); }
      var g = add(box, sv("svg", { width: W, height: H, "class": "timeline", role: "img" }));
      niceTicks(yMax, 4).forEach(function (v) {
        add(g, sv("line", { x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), "class": "grid" }));
        add(g, sv("text", { x: M.l - 6, y: Y(v) + 4, "class": "axis", "text-anchor": "end" }, bytes(v)));
      });
      var every = Math.max(1, Math.ceil((Math.ceil(hi) - Math.floor(lo)) / 8));  // powers of 2, at most about 8 ticks
      for (var e = Math.ceil(lo); e <= Math.floor(hi); e += every) {
        var b = Math.pow(2, e), label = b >= 1048576 ? (b / 1048576) + "Mi" : b >= 1024 ? (b / 1024) + "Ki" : String(b);
        add(g, sv("line", { x1: X(b), x2: X(b), y1: H - M.b, y2: H - M.b + 4, "class": "axis-line" }));
        add(g, sv("text", { x: X(b), y: H - M.b + 16, "class": "axis", "text-anchor": "middle" }, label));
      }
      add(g, sv("text", { x: M.l + 4, y: M.t + 10, "class": "axis" }, "peak per device; batch on a log scale"));
      if (L.fit_peak_bytes && L.fit_peak_bytes <= yMax) {
        add(g, sv("line", { x1: M.l, x2: W - M.r, y1: Y(L.fit_peak_bytes), y2: Y(L.fit_peak_bytes), "class": "line-limit" }));
      }
      if (f.largest_batch && f.largest_batch >= bMin && f.largest_batch <= bMax) {
        add(g, sv("line", { x1: X(f.largest_batch), x2: X(f.largest_batch), y1: M.t, y2: H - M.b, "class": "cursor cursor-selected" }));
      }
      var legend = add(box, el("ul", "legend"));
      f.variants.forEach(function (v, i) {
        var color = PALETTE[i % PALETTE.length];
        var pl = add(g, sv("polyline", { points: v.points.map(function (p) { return X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1); }).join(" "),
          fill: "none", stroke: color, "stroke-width": 1.5 }));
        pl.setAttribute("data-variant", v.variant);
        v.points.forEach(function (p) {
          var c = add(g, sv("circle", { cx: X(p[0]), cy: Y(p[1]), r: 3.5, fill: color }));
          c.addEventListener("mousemove", function (ev) { showTip(ev, [v.variant + " at batch " + p[0], bytes(p[1])]); });
          c.addEventListener("mouseleave", hideTip);
        });
        var li = add(legend, el("li")), sw = add(li, el("span", "swatch")); sw.style.background = color;
        add(li, el("span", "site", v.variant));
      });
      add(g, sv("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, "class": "axis-line" }));
    });
  }

  // -- findings ----------------------------------------------------------------------

  function findings() {
    var F = D.findings || [];
    var s = section("findings", "Findings: what to change", F.length ? null : "No findings: nothing to change that jaxmemprof can see.");
    var list = add(s, el("ol", "findings"));
    list.id = "jmp-findings";
    F.forEach(function (f, i) {
      var li = add(list, el("li", "finding"));
      li.id = "finding-" + (i + 1);
      li.setAttribute("data-rule", f.rule);
      var head = add(li, el("p"));
      add(head, el("span", "sev sev-" + f.severity, f.severity), el("span", "rule", " " + f.rule + " "), el("span", null, f.message));
      if (f.saves) add(li, el("p", "hint", f.saves));
      if (f.fix) {
        var fx = add(li, el("div", "fix"));
        var code = add(fx, el("code", null, f.fix));
        var b = add(fx, el("button", "copy", "copy"));
        b.type = "button";
        b.addEventListener("click", function () { copyText(code.textContent, b); });
      }
      if (f.evidence) { var det = add(li, el("details")); add(det, el("summary", null, "evidence")); add(det, el("p", null, f.evidence)); }
    });
  }

  header();
  headline();
  if (D.page === "report" && P > 0) timeline();
  flames();
  if (D.page === "report") { roles(); lifetimes(); jit(); plan(); findings(); }
  }  // mount

  // -- a multi-process job: the job's memory over time, each process's peak, one process's page

  function job(J, main) {
    var Q = J.job, STR = J.strings || [];
    var h = add(main, el("header"));
    add(h, el("h1", null, J.title));
    add(h, el("p", "facts", Q.process_count + " processes \u00b7 clocks aligned by " + Q.alignment +
      (Q.unfinished.length ? " \u00b7 unfinished: " + Q.unfinished.join(", ") : "")));
    var box = add(main, el("section", "headline")); box.id = "headline";
    var t = add(box, el("div", "tile")); t.id = "jmp-job-peak";
    add(t, el("h3", null, "When the job's memory peaked"));
    add(t, el("p", "big", bytes(Q.peak_bytes)));
    add(t, el("p", null, "at " + secs(Q.peak_t) + ", the sum over processes"));
    var w = add(box, el("div", "tile")); w.id = "jmp-job-held";
    add(w, el("h3", null, "Which processes held it"));
    var ul = add(w, el("ul", "sites"));
    Q.processes.filter(function (r) { return r.at_job_peak_bytes > 0; })
      .sort(function (a, b) { return b.at_job_peak_bytes - a.at_job_peak_bytes; }).slice(0, 6).forEach(function (r) {
        var li = add(ul, el("li"));
        add(li, el("span", "num", bytes(r.at_job_peak_bytes) + " " + pct(Q.peak_bytes ? r.at_job_peak_bytes / Q.peak_bytes : 0)),
          el("span", "site", "process " + r.process + (r.host ? " (" + r.host + ")" : "")));
      });
    var s = add(main, el("section", "card")); s.id = "job";
    add(s, el("h2", null, "The job's live memory over time"));
    var chart = add(s, el("div", "chart"));
    function draw() {
      var W = Math.max(600, chart.clientWidth || 900), H = 200, M = { l: 72, r: 12, t: 14, b: 30 };
      var tt = Q.t, vv = Q.live_bytes, n = tt.length;
      if (!n) return;
      var tMin = tt[0], tMax = tt[n - 1] > tt[0] ? tt[n - 1] : tt[0] + 1, mx = 0;
      vv.forEach(function (v) { if (v > mx) mx = v; });
      var yMax = mx > 0 ? mx * 1.08 : 1;
      function X(v) { return M.l + (v - tMin) / (tMax - tMin) * (W - M.l - M.r); }
      function Y(v) { return H - M.b - v / yMax * (H - M.t - M.b); }
      chart.textContent = "";
      var g = add(chart, sv("svg", { width: W, height: H, "class": "timeline" })); g.id = "jmp-job-timeline";
      niceTicks(yMax, 4).forEach(function (v) {
        add(g, sv("line", { x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), "class": "grid" }));
        add(g, sv("text", { x: M.l - 6, y: Y(v) + 4, "class": "axis", "text-anchor": "end" }, bytes(v)));
      });
      var pts = [];
      for (var i = 0; i < n; i++) { pts.push(X(tt[i]).toFixed(1) + "," + Y(i ? vv[i - 1] : 0).toFixed(1)); pts.push(X(tt[i]).toFixed(1) + "," + Y(vv[i]).toFixed(1)); }
      add(g, sv("path", { d: "M" + pts.join("L"), "class": "line-inuse", "data-line": "job" }));
      if (Q.peak_t !== null) {
        add(g, sv("circle", { cx: X(Q.peak_t), cy: Y(Q.peak_bytes), r: 4.5, "class": "peak" }));
        var right = X(Q.peak_t) > W * 0.7;
        add(g, sv("text", { x: X(Q.peak_t) + (right ? -8 : 8), y: Math.max(M.t + 10, Y(Q.peak_bytes) - 6), "class": "label",
          "text-anchor": right ? "end" : "start" }, "live peak " + bytes(Q.peak_bytes) + " at " + secs(Q.peak_t)));
      }
      var xt = niceSecs(tMax - tMin);
      for (var v = Math.ceil(tMin / xt) * xt; v <= tMax + 1e-9; v += xt) add(g, sv("text", { x: X(v), y: H - M.b + 22, "class": "axis", "text-anchor": "middle" }, secs(v)));
    }
    draw();
    add(s, el("h3", null, "Processes"));
    var drawn = {}; Q.drawn.forEach(function (n) { drawn[n] = 1; });
    table(s, [["process", function (r) { return r.process; }, 1], ["host", function (r) { return r.host; }],
      ["peak", function (r) { return bytes(r.peak_bytes); }, 1], ["at", function (r) { return secs(r.peak_t); }, 1],
      ["at the job's peak", function (r) { return bytes(r.at_job_peak_bytes); }, 1], ["snapshots", function (r) { return r.snapshots; }, 1],
      ["exit status", function (r) { return r.exit_status; }, 1],
      ["", function (r) { return r.error ? "unreadable: " + r.error : (drawn[r.process] ? "drawn below" : ""); }]], Q.processes, "jmp-processes");
    if (Q.drawn.length < Q.process_count) add(s, el("p", "hint", "Drawn in full: the " + Q.drawn.length + " processes holding the most at the job's peak."));
    var view = el("div"); view.id = "jmp-process-view";
    var bar = add(main, el("div", "controls"));
    var blocks = {}; J.processes.forEach(function (b) { blocks[b.process] = b; });
    add(bar, selectBox("process", Q.drawn.map(function (n) { return [n, "process " + n]; }), Q.default, function (v) { show(Number(v)); }, "jmp-process"));
    add(main, view);
    function show(n) {
      view.textContent = "";
      var b = blocks[n]; if (!b) return;
      b.strings = STR; b.generator = J.generator;
      mount(b, view);
    }
    show(Q.default);
    void STR;
  }

  try {
    var main = document.getElementById("jmp");
    if (ALL.page === "job") job(ALL, main); else mount(ALL, main);
    add(main, el("footer", "hint", "Made by " + ALL.generator + ". One file, no network: the data is inside it."));
  } finally {
    var ms = performance.now() - t0;
    document.documentElement.setAttribute("data-jmp-render-ms", ms.toFixed(1));
    document.documentElement.setAttribute("data-jmp-ready", "1");
  }
})();
