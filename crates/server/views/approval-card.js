// Approval card for a pending Tier 3 call (get_approval_status): what, why, the pinned
// arguments and the time left. Approving needs a person with the approval right, proven the
// way the dashboard proves it (a signed-in session); no MCP host proves that a person pressed a
// button, so Approve and Deny open the request's dashboard page through the host instead of
// calling a tool as the connection's credential.
const DASHBOARD = (document.querySelector('meta[name="breeze-dashboard"]') || {}).content || "";
let timer;

bridge.start("approval-card", (d) => {
  clearInterval(timer);
  const page = `${DASHBOARD}/approvals/${encodeURIComponent(d.approvalId || "")}`;
  const left = el("span", { role: "timer", "aria-live": "off" });
  const tick = () => {
    const ms = new Date(d.expiresAt) - Date.now();
    left.textContent = d.status !== "pending" ? "decided" : ms > 0 ? `${Math.floor(ms / 60000)} min ${Math.floor(ms / 1000) % 60} s left` : "expired";
  };
  tick();
  timer = setInterval(tick, 1000);
  const note = el("p", { class: "muted", role: "status" });
  const decide = (what) => async () => {
    note.textContent = `${what} happens in Breeze's dashboard, signed in as a person with the approval right: opening it…`;
    try { await bridge.openLink(page); } catch (e) { note.textContent = `Open ${page} to ${what.toLowerCase()}.`; }
  };
  const pending = d.status === "pending";
  mount(
    el("article", { "aria-label": "Approval request" },
      el("h1", {}, el("span", { text: `Approval: ${d.tool || "Tier 3 call"}${d.action ? " · " + d.action : ""}` }), badge(d.status || "pending")),
      el("p", { text: d.description || "" }),
      d.reason ? el("p", { class: "muted", text: "Reason: " + d.reason }) : null,
      el("h2", { text: "Pinned arguments" }),
      el("pre", { "aria-label": "Pinned arguments" }, JSON.stringify(d.arguments || {}, null, 2)),
      el("p", {}, "Expires ", when(d.expiresAt), " · ", left),
      pending ? el("div", { class: "bar" },
        el("button", { type: "button", class: "primary", "data-decide": "approve", onclick: decide("Approval"), text: "Approve…" }),
        el("button", { type: "button", "data-decide": "deny", onclick: decide("Denial"), text: "Deny…" }),
        el("a", { href: page, target: "_blank", rel: "noopener", text: "Open in the dashboard" })) : null,
      note));
});
