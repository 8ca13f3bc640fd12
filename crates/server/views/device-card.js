// Device card for get_device_details: status, facts, disks, the device's last commands (in
// the result) and its open alerts (asked of manage_alerts through the host).
bridge.start("device-card", (d) => {
  const dev = d.device || {};
  const m = d.latestMetrics || {};
  const hw = d.hardware || {};
  const os = d.os || {};
  const fact = (label, value) => [el("dt", { text: label }), el("dd", { text: value ?? "—" })];
  const alerts = el("ul", { class: "list", "aria-label": "Open alerts" },
    el("li", { class: "muted", text: "Loading alerts…" }));
  mount(
    el("article", { "aria-label": "Device " + (dev.hostname || "") },
      el("h1", {}, el("span", { text: dev.hostname || "Device" }), badge(dev.status || "unknown")),
      el("p", { class: "muted", text: `${os.name || dev.osType || ""} ${os.version || dev.osVersion || ""} · site ${dev.siteName || "—"}` }),
      el("dl", { class: "facts" },
        fact("Last seen", when(dev.lastSeenAt)),
        fact("Agent", dev.agentVersion),
        fact("CPU", hw.cpuModel ? `${hw.cpuModel} (${hw.logicalCores} threads)` : null),
        fact("Memory", hw.memoryTotalBytes ? bytes(hw.memoryTotalBytes) : null),
        fact("CPU now", m.cpuPercent !== undefined ? m.cpuPercent + " %" : null),
        fact("RAM now", m.ramPercent !== undefined ? m.ramPercent + " %" : null),
        fact("Uptime", d.uptimeSecs ? Math.round(d.uptimeSecs / 3600) + " h" : null),
        fact("Pending reboot", d.pendingReboot === undefined || d.pendingReboot === null ? null : d.pendingReboot ? "yes" : "no"),
        fact("Tags", (dev.tags || []).join(", ") || null)),
      el("h2", { text: "Disks" }),
      el("ul", { class: "list", "aria-label": "Disks" },
        (d.disks || []).map((k) => el("li", { text: `${k.mount} — ${k.usedPercent} % of ${bytes(k.totalBytes)} used` }))),
      el("h2", { text: "Last commands" }),
      el("ul", { class: "list", "aria-label": "Last commands" },
        (d.recentCommands || []).length ? d.recentCommands.map((c) => el("li", {}, badge(c.status), " ",
          c.script ? `${c.script} (script)` : c.kind,
          c.exitCode !== undefined ? el("span", { class: "muted", text: " · exit " + c.exitCode }) : null,
          el("span", { class: "muted", text: " · " + when(c.completedAt || c.createdAt) })))
          : [el("li", { class: "muted", text: "No commands yet" })]),
      el("h2", { text: "Open alerts" }),
      alerts));
  if (!dev.id) return;
  bridge.call("manage_alerts", { action: "list", deviceId: dev.id, status: "open" }).then(
    (r) => {
      const list = r.alerts || [];
      alerts.replaceChildren(...(list.length ? list.map((a) =>
        el("li", {}, badge(a.severity), " ", a.title, el("span", { class: "muted", text: " · " + when(a.triggeredAt) })))
        : [el("li", { class: "muted", text: "No open alerts" })]));
    },
    (e) => alerts.replaceChildren(el("li", { class: "err", text: "Alerts unavailable: " + e.message })));
});
