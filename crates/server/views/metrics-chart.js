// Metrics chart for analyze_metrics: CPU, RAM and disk averages as lines (SVG drawn here), with
// a range switch that asks analyze_metrics again through the host.
const RANGES = [[1, "1 h"], [24, "24 h"], [168, "7 d"]];
const SERIES = [["cpuAvg", "CPU", "var(--accent)"], ["ramAvg", "RAM", "var(--ok)"], ["diskMax", "Disk", "var(--warn)"]];
const NS = "http://www.w3.org/2000/svg";
const svg = (tag, attrs) => {
  const n = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  return n;
};
let hours = 24;

function chart(points) {
  const W = 600, H = 230, L = 34, B = 30;
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "data-points": points.length });
  const x = (i) => L + (points.length < 2 ? 0 : (i * (W - L - 4)) / (points.length - 1));
  const y = (v) => 4 + (H - B - 4) * (1 - v / 100);
  for (const v of [0, 50, 100]) {
    s.append(svg("line", { x1: L, x2: W, y1: y(v), y2: y(v), stroke: "var(--line)" }));
    const t = svg("text", { x: 0, y: y(v) + 4 });
    t.textContent = v + "%";
    s.append(t);
  }
  const drawn = [];
  for (const [key, label, color] of SERIES) {
    const pts = points.map((p, i) => [i, p[key]]).filter(([, v]) => typeof v === "number");
    if (!pts.length) continue;
    drawn.push(label);
    s.append(svg("polyline", {
      points: pts.map(([i, v]) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
      fill: "none", stroke: color, "stroke-width": 2, class: "series", "data-series": key,
    }));
    // Few samples: each one marked, so a single one shows too.
    if (pts.length <= 60) {
      for (const [i, v] of pts) s.append(svg("circle", { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 3, fill: color }));
    }
  }
  let lx = L;
  for (const label of drawn) {
    const [, , color] = SERIES.find((x) => x[1] === label);
    s.append(svg("rect", { x: lx, y: H - 12, width: 10, height: 10, fill: color }));
    const t = svg("text", { x: lx + 14, y: H - 3 });
    t.textContent = label;
    s.append(t);
    lx += 60;
  }
  const title = svg("title", {});
  title.textContent = `${drawn.join(", ")} percent over ${points.length} points`;
  s.prepend(title);
  return s;
}

function render(d, args) {
  if (args && args.hoursBack) hours = args.hoursBack;
  const status = el("p", { class: "muted", role: "status", "aria-live": "polite" });
  const ask = async (h) => {
    hours = h;
    status.textContent = "Loading…";
    try {
      render(await bridge.call("analyze_metrics", { deviceId: d.deviceId, hoursBack: h }), { hoursBack: h });
    } catch (e) {
      status.textContent = "Could not load: " + e.message;
      status.className = "err";
    }
  };
  const stat = (name, s) => s && el("li", { text: `${name}: now ${s.current} %, avg ${s.avg} %, max ${s.max} %` });
  const points = d.points || [];
  mount(
    el("section", { "aria-label": "Metrics of " + (d.hostname || "device") },
      el("h1", { text: `${d.hostname || "Device"} — metrics` }),
      el("div", { class: "bar", role: "group", "aria-label": "Range" },
        RANGES.map(([h, label]) => el("button", {
          type: "button", "aria-pressed": String(h === hours), "data-hours": h, onclick: () => ask(h), text: label,
        }))),
      points.length ? chart(points) : el("p", { class: "muted", text: d.message || "No samples in this range" }),
      el("ul", { class: "list", "aria-label": "Summary" },
        stat("CPU", d.cpu), stat("RAM", d.ram), stat("Disk", d.disk),
        el("li", { class: "muted", text: `${d.dataPoints || 0} samples, ${d.aggregation || ""}, ${when(d.from)} – ${when(d.to)}` })),
      status));
}

bridge.start("metrics-chart", render);
