// Live query view for run_live_query: the rows under the question's columns (the catalogue's
// row schema, embedded in the document as reference data, so the table is headed the same
// whichever rows arrived), each device's answer (status, rows, the cap that cut it, its error)
// and the query's counts. After action=run it asks for the devices' answers and stored rows
// with action=results through the host (a run's result names only the devices that stood out,
// and its first rows); "More devices" fetches the next page the same way.
const CATALOGUE = JSON.parse(document.getElementById("data").textContent);
let lq = null;

const cell = (v) => v === null || v === undefined ? "—"
  : Array.isArray(v) ? v.join(", ") : typeof v === "object" ? JSON.stringify(v) : String(v);
const nameOf = (q) => (q && typeof q === "object" && q.question) || "";

// Every device the run named, until the stored answers arrive.
function runDevices(d) {
  const list = [];
  const seen = new Set();
  for (const [key, status] of [["capsHit", "answered"], ["timedOut", "timed_out"], ["offline", "offline"], ["unsupported", "unsupported"]]) {
    for (const r of d[key] || []) {
      if (seen.has(r.deviceId)) continue;
      seen.add(r.deviceId);
      list.push({ deviceId: r.deviceId, hostname: r.hostname, status, cap: r.cap });
    }
  }
  for (const r of d.rows || []) {
    if (seen.has(r.deviceId)) continue;
    seen.add(r.deviceId);
    list.push({ deviceId: r.deviceId, hostname: r.hostname, status: "answered" });
  }
  return list;
}

function rowsOf(answers) {
  return answers.flatMap((a) => (a.rows || []).map((row) => ({ deviceId: a.deviceId, hostname: a.hostname, row })));
}

function facts(q, d) {
  const f = (label, value) => [el("dt", { text: label }), el("dd", { text: cell(value) })];
  if (!q) {
    return el("dl", { class: "facts" }, f("Devices targeted", d.devicesTargeted), f("Online, asked", d.devicesOnline),
      f("Rows expected", d.estimatedRows));
  }
  return el("dl", { class: "facts" },
    f("Devices targeted", q.devicesTargeted), f("Online, asked", q.devicesOnline),
    f("Answered", q.answered), f("Failed", q.failed), f("Timed out", q.timedOut), f("Offline", q.offline),
    f("Rows kept", q.rows), f("Started", when(q.createdAt)),
    d.elapsedMs !== undefined ? f("Took", (d.elapsedMs / 1000).toFixed(1) + " s") : null,
    q.queryCap ? f("Query cap hit", q.queryCap) : null);
}

function deviceTable() {
  const body = lq.answers.length
    ? lq.answers.map((a) => el("tr", {},
      el("td", { text: a.hostname }), el("td", {}, badge(a.status)),
      el("td", { text: a.rowCount ?? (a.rows ? a.rows.length : "—") }),
      el("td", { class: a.error ? "err" : "muted", text: a.error || (a.cap ? "cut at the " + a.cap + " cap" : "") })))
    : [el("tr", {}, el("td", { colspan: "4", class: "muted", text: "No device was asked." }))];
  return el("div", { class: "wide" }, el("table", { "aria-label": "Each device's answer" },
    el("thead", {}, el("tr", {}, ["Device", "Status", "Rows", "Note"].map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, body)));
}

function rowTable() {
  const cols = lq.columns.length ? lq.columns
    : Object.keys((lq.rows[0] || {}).row || {}).map((name) => ({ name, description: name }));
  const f = lq.filter.toLowerCase();
  const shown = lq.rows.filter((r) => !f ||
    [r.hostname, ...cols.map((c) => cell(r.row[c.name]))].join(" ").toLowerCase().includes(f)).slice(0, 500);
  const input = el("input", { type: "search", "aria-label": "Filter rows", placeholder: "Filter", value: lq.filter });
  input.addEventListener("input", () => {
    lq.filter = input.value;
    draw();
    const i = document.querySelector("input[type=search]");
    i.focus();
    i.setSelectionRange(i.value.length, i.value.length);
  });
  const narrow = (i) => (i > 2 ? "hide-narrow" : null);
  return [
    el("div", { class: "bar" }, input, el("span", { class: "muted", role: "status", text: `${shown.length} of ${lq.rows.length} rows shown` })),
    el("div", { class: "wide" }, el("table", { "aria-label": "Rows" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Device" }),
        cols.map((c, i) => el("th", { scope: "col", class: narrow(i), title: c.description, text: c.name })))),
      el("tbody", {}, shown.length ? shown.map((r) => el("tr", {}, el("td", { text: r.hostname }),
        cols.map((c, i) => el("td", { class: narrow(i), text: cell(r.row[c.name]) }))))
        : [el("tr", {}, el("td", { colspan: String(cols.length + 1), class: "muted", text: "No rows." }))]))),
  ];
}

async function more() {
  lq.loading = true;
  draw();
  try {
    const r = await bridge.call("run_live_query", { action: "results", queryId: lq.query.queryId, cursor: lq.next, limit: 25 });
    lq.answers = lq.answers.concat(r.answers || []);
    lq.rows = lq.rows.concat(rowsOf(r.answers || []));
    lq.next = r.nextCursor;
    lq.query = r.query || lq.query;
    lq.note = "";
  } catch (e) {
    lq.note = "More answers unavailable: " + e.message;
  }
  lq.loading = false;
  draw();
}

function draw() {
  const q = lq.query;
  const spec = CATALOGUE[lq.name] || {};
  const params = Object.entries(lq.question || {}).filter(([k]) => k !== "question").map(([k, v]) => `${k}: ${cell(v)}`).join(" · ");
  mount(el("article", { "aria-label": "Live query" },
    el("h1", {}, el("span", { text: "Live query: " + (spec.title || lq.name || "question") }), q ? badge(q.status) : badge("prepared")),
    params ? el("p", { class: "muted", text: params }) : null,
    facts(q, lq.d),
    el("h2", { text: "Devices" }),
    lq.loading && !lq.answers.length ? el("p", { class: "muted", role: "status", text: "Loading each device's answer…" }) : deviceTable(),
    lq.next ? el("p", {}, el("button", { type: "button", onclick: more, disabled: lq.loading, text: lq.loading ? "Loading…" : "More devices" })) : null,
    lq.note ? el("p", { class: "err", role: "status", text: lq.note }) : null,
    q ? [el("h2", { text: `Rows (${q.rows})` }), ...rowTable()] : null,
    lq.d.message ? el("p", { class: "muted", text: lq.d.message }) : null));
}

function catalogue(questions) {
  mount(el("section", { "aria-label": "Live query questions" },
    el("h1", { text: `Questions (${questions.length})` }),
    el("ul", { class: "list" }, questions.map((q) => el("li", {},
      el("strong", { text: q.name }), " — ", q.title,
      el("div", { class: "muted", text: (q.columns || []).map((c) => c.name).join(", ") }))))));
}

bridge.start("live-query", (d, args) => {
  if (d.questions) return catalogue(d.questions);
  const question = (d.query && d.query.question) || args.question || {};
  lq = {
    d, question, name: nameOf(question), query: d.query,
    columns: (CATALOGUE[nameOf(question)] || {}).columns || [],
    filter: "", note: "", loading: false, next: d.nextCursor,
    answers: d.answers || runDevices(d),
    rows: d.answers ? rowsOf(d.answers) : (d.rows || []),
  };
  if (d.answers || !d.query) return draw();
  // A run lists only the devices that stood out; the stored answers name every device.
  lq.loading = true;
  lq.answers = [];
  draw();
  bridge.call("run_live_query", { action: "results", queryId: d.query.queryId, limit: 25 }).then(
    (r) => {
      // The stored rows of the devices on this page, so that further pages add to them alike.
      lq.answers = r.answers || [];
      lq.rows = rowsOf(lq.answers);
      lq.next = r.nextCursor;
      lq.query = r.query || lq.query;
    },
    (e) => { lq.answers = runDevices(d); lq.note = "Each device's answer is unavailable: " + e.message; })
    .finally(() => { lq.loading = false; draw(); });
});
