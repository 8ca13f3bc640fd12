// Device table for query_devices: sortable columns (buttons in the headers, aria-sort) and a
// filter over hostname, OS, site and tags, all on the result already received.
const COLS = [["hostname", "Hostname"], ["status", "Status"], ["osType", "OS"], ["siteName", "Site"], ["lastSeenAt", "Last seen"]];
let sortBy = "hostname", asc = true, filter = "", data = { devices: [] };

function rows() {
  const f = filter.toLowerCase();
  const list = (data.devices || []).filter((d) => !f ||
    [d.hostname, d.status, d.osType, d.osVersion, d.siteName, ...(d.tags || [])].join(" ").toLowerCase().includes(f));
  list.sort((a, b) => String(a[sortBy] ?? "").localeCompare(String(b[sortBy] ?? "")) * (asc ? 1 : -1));
  return list;
}

function draw() {
  const list = rows();
  const input = el("input", { type: "search", "aria-label": "Filter devices", placeholder: "Filter", value: filter });
  input.addEventListener("input", () => { filter = input.value; draw(); const i = document.querySelector("input"); i.focus(); i.setSelectionRange(i.value.length, i.value.length); });
  mount(
    el("section", { "aria-label": "Devices" },
      el("h1", { text: `Devices (${data.showing ?? list.length} of ${data.total ?? list.length})` }),
      el("div", { class: "bar" }, input, el("span", { class: "muted", role: "status", text: `${list.length} shown` })),
      el("div", { class: "wide" },
        el("table", {},
          el("thead", {}, el("tr", {}, COLS.map(([k, label], i) => el("th", {
            scope: "col", class: i > 2 ? "hide-narrow" : null,
            "aria-sort": k === sortBy ? (asc ? "ascending" : "descending") : "none",
          }, el("button", {
            type: "button", "data-col": k, text: label + (k === sortBy ? (asc ? " ▲" : " ▼") : ""),
            onclick: () => { asc = k === sortBy ? !asc : true; sortBy = k; draw(); },
          }))))),
          el("tbody", {}, list.map((d) => el("tr", {},
            el("td", { text: d.hostname }), el("td", {}, badge(d.status)),
            el("td", { text: `${d.osType} ${d.osVersion || ""}` }),
            el("td", { class: "hide-narrow", text: d.siteName || "—" }),
            el("td", { class: "hide-narrow", text: when(d.lastSeenAt) }))))))));
}

bridge.start("device-table", (d) => { data = d; draw(); });
