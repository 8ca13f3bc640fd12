// The view's half of the MCP Apps bridge (io.modelcontextprotocol/ui), written by hand with no
// dependency: JSON-RPC 2.0 over postMessage with the host window. The view asks nothing of the
// network: its data arrives as the tool's structuredContent (ui/notifications/tool-result), and
// every further tool call goes through the host (tools/call), which runs it as the connection's
// own credential through Breeze's pipeline (scope, tier, limits, audit).
"use strict";
const bridge = (() => {
  let next = 1;
  const waiting = new Map();
  const on = {};
  const host = window.parent;
  const post = (m) => host.postMessage(m, "*");
  window.addEventListener("message", (e) => {
    if (e.source !== host) return;
    const m = e.data;
    if (!m || m.jsonrpc !== "2.0") return;
    if (m.method === undefined) {
      const w = waiting.get(m.id);
      if (!w) return;
      waiting.delete(m.id);
      if (m.error) w.reject(new Error(m.error.message || "request failed"));
      else w.resolve(m.result);
      return;
    }
    if (m.id !== undefined) post({ jsonrpc: "2.0", id: m.id, result: {} });
    const h = on[m.method];
    if (h) h(m.params || {});
  });
  const request = (method, params) =>
    new Promise((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve, reject });
      post({ jsonrpc: "2.0", id, method, params });
    });
  const notify = (method, params) => post({ jsonrpc: "2.0", method, params: params || {} });
  const theme = (ctx) => {
    if (ctx && (ctx.theme === "light" || ctx.theme === "dark")) {
      document.documentElement.dataset.theme = ctx.theme;
    }
  };
  on["ui/notifications/host-context-changed"] = theme;
  return {
    // Connects and hands every tool result (and the tool's arguments) to `render`.
    async start(name, render) {
      let args = {};
      on["ui/notifications/tool-input"] = (p) => { args = p.arguments || {}; };
      on["ui/notifications/tool-result"] = (p) => render(p.structuredContent || {}, args, p);
      const r = await request("ui/initialize", {
        appInfo: { name: "breeze-" + name, version: "1" },
        appCapabilities: {},
        protocolVersion: "2026-01-26",
      });
      theme(r && r.hostContext);
      notify("ui/notifications/initialized");
      if (window.ResizeObserver) {
        // The content's own size (the body's box), not the frame's.
        new ResizeObserver(() => {
          const box = document.body.getBoundingClientRect();
          notify("ui/notifications/size-changed", { width: Math.ceil(box.width), height: Math.ceil(box.height) });
        }).observe(document.body);
      }
    },
    // Calls a Breeze tool through the host; resolves to its structuredContent.
    async call(name, args) {
      const r = await request("tools/call", { name, arguments: args });
      if (r && r.isError) {
        const s = r.structuredContent;
        throw new Error((s && s.error && s.error.message) || "the tool refused");
      }
      return (r && r.structuredContent) || {};
    },
    openLink: (url) => request("ui/open-link", { url }),
  };
})();

// Small helpers shared by the views.
const el = (tag, attrs, ...kids) => {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else if (k === "text") n.textContent = v;
    else n.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) if (k !== undefined && k !== null) n.append(k);
  return n;
};
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "never");
const bytes = (b) => {
  if (b === null || b === undefined) return "—";
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return b.toFixed(i ? 1 : 0) + " " + u[i];
};
const badge = (status) => el("span", { class: "badge s-" + status, text: status });
const mount = (...kids) => {
  const root = document.getElementById("app");
  root.replaceChildren(...kids);
  root.setAttribute("aria-busy", "false");
};
