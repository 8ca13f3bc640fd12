// Breeze dashboard: the AI assistant's chat page (no inline script; CSP script-src 'self').
// Sends a message to POST /api/v1/ai/sessions/{id}/messages and reads its event stream
// (fetch streaming: message_start, content_delta, tool_use_start, tool_result,
// approval_required, message_end, error, done), decides a waiting tool call inline
// (POST …/approve/{executionId}), and polls GET /api/v1/ai/usage for the cost indicator.
// Everything the model or a tool says is set as text, never as HTML.
(function () {
  "use strict";

  var root = document.getElementById("chat");
  if (!root) return;
  var log = document.getElementById("chat-log");
  var form = document.getElementById("chat-compose");
  var input = document.getElementById("chat-input");
  var send = document.getElementById("chat-send");
  var errorBox = document.getElementById("chat-error");
  var streaming = false;

  function csrfToken() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }
  function session() { return root.getAttribute("data-session") || ""; }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function pretty(v) {
    if (typeof v === "string") {
      try { v = JSON.parse(v); } catch (_) { return v; }
    }
    try { return JSON.stringify(v, null, 2); } catch (_) { return String(v); }
  }
  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  }
  function scrollDown() {
    var last = log.lastElementChild;
    if (last && last.scrollIntoView) last.scrollIntoView({ block: "nearest" });
  }

  // A tool call's card: name, status, input, and later its result or the approval dialog.
  function toolCard(name, toolUseId, inputValue) {
    var li = el("li", "chat-tool card");
    li.setAttribute("data-tool-use", toolUseId);
    var head = el("div", "chat-tool-head");
    head.appendChild(el("code", "", name));
    head.appendChild(document.createTextNode(" "));
    var status = el("span", "badge s-running", "running");
    status.setAttribute("data-status", "");
    head.appendChild(status);
    li.appendChild(head);
    var d = el("details");
    d.appendChild(el("summary", "", "Input"));
    d.appendChild(el("pre", "", pretty(inputValue)));
    li.appendChild(d);
    log.appendChild(li);
    return li;
  }
  function setStatus(card, status) {
    var s = card.querySelector("[data-status]");
    if (s) { s.textContent = status; s.className = "badge s-" + status; }
  }
  function approvalDialog(card, description) {
    var g = el("div", "chat-approval");
    g.setAttribute("role", "group");
    g.setAttribute("aria-label", "Approve this call");
    g.appendChild(el("p", "", description || "This call waits for your approval."));
    var reason = el("input");
    reason.type = "text"; reason.name = "reason"; reason.maxLength = 1000;
    reason.placeholder = "Reason (optional)"; reason.setAttribute("aria-label", "Reason");
    g.appendChild(reason);
    var yes = el("button", "primary", "Approve");
    yes.type = "button"; yes.setAttribute("data-decide", "approve");
    var no = el("button", "danger", "Reject");
    no.type = "button"; no.setAttribute("data-decide", "reject");
    g.appendChild(yes);
    g.appendChild(no);
    card.appendChild(g);
    setStatus(card, "pending");
    yes.focus();
  }

  // One event of the stream.
  var current = null;
  function handle(name, data) {
    switch (name) {
      case "message_start":
        current = el("li", "chat-msg chat-assistant", "");
        log.appendChild(current);
        break;
      case "content_delta":
        if (!current) { current = el("li", "chat-msg chat-assistant", ""); log.appendChild(current); }
        current.textContent += data.delta || "";
        break;
      case "message_end":
        if (current && !current.textContent) current.remove();
        current = null;
        pollCost();
        break;
      case "tool_use_start":
        toolCard(data.toolName, data.toolUseId, data.input);
        break;
      case "approval_required": {
        // The newest card of that tool not yet tied to an execution is the one waiting.
        var cards = log.querySelectorAll("li.chat-tool:not([data-execution])");
        var card = null;
        for (var i = cards.length - 1; i >= 0; i--) {
          var code = cards[i].querySelector(".chat-tool-head code");
          if (code && code.textContent === data.toolName) { card = cards[i]; break; }
        }
        if (!card) card = toolCard(data.toolName, "", data.input);
        card.setAttribute("data-execution", data.executionId);
        approvalDialog(card, data.description);
        break;
      }
      case "tool_result": {
        var c = log.querySelector('li.chat-tool[data-tool-use="' + cssEscape(data.toolUseId) + '"]');
        if (!c) c = toolCard("tool", data.toolUseId, null);
        var g = c.querySelector(".chat-approval");
        if (g) g.remove();
        var d = el("details", "chat-result");
        d.open = true;
        d.appendChild(el("summary", "", data.isError ? "Error" : "Result"));
        d.appendChild(el("pre", "", pretty(data.output)));
        c.appendChild(d);
        if (data.isError) c.classList.add("failed");
        setStatus(c, data.isError ? "failed" : "completed");
        break;
      }
      case "error":
        showError(data.message || "The assistant failed.");
        log.appendChild(el("li", "chat-msg chat-system error", data.message || "error"));
        break;
      case "done":
        refreshList();
        break;
    }
    scrollDown();
  }
  function cssEscape(s) {
    return window.CSS && CSS.escape ? CSS.escape(s || "") : String(s || "").replace(/["\\]/g, "\\$&");
  }

  // Reloads the sessions list (the server's fragment, HTML it escaped) with the open chat
  // marked: a chat just opened, or a title changed elsewhere, shows. A search in progress is
  // kept; a failure leaves the list as it was.
  function refreshList() {
    var list = document.getElementById("chat-list");
    var q = document.getElementById("chat-q");
    if (!list) return;
    var url = "/o/" + encodeURIComponent(root.getAttribute("data-org") || "") + "/chat/sessions?q=" +
      encodeURIComponent(q ? q.value : "") + "&session=" + encodeURIComponent(session());
    fetch(url, { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.text() : null;
    }).then(function (html) {
      if (html !== null) list.innerHTML = html;
    }).catch(function () {});
  }

  // Reads an event-stream body block by block ("event: x\ndata: {...}\n\n").
  function readStream(body) {
    var reader = body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    function block(text) {
      var name = "", data = "";
      text.split("\n").forEach(function (line) {
        if (line.indexOf("event:") === 0) name = line.slice(6).trim();
        else if (line.indexOf("data:") === 0) data += line.slice(5).replace(/^ /, "");
      });
      if (!name) return; // keep-alive comment
      var parsed = {};
      try { parsed = data ? JSON.parse(data) : {}; } catch (_) { parsed = {}; }
      handle(name, parsed);
    }
    function pump() {
      return reader.read().then(function (r) {
        if (r.done) { if (buffer.trim()) block(buffer); return; }
        buffer += decoder.decode(r.value, { stream: true }).replace(/\r\n/g, "\n");
        var at;
        while ((at = buffer.indexOf("\n\n")) >= 0) {
          block(buffer.slice(0, at));
          buffer = buffer.slice(at + 2);
        }
        return pump();
      });
    }
    return pump();
  }

  function jsonHeaders() {
    return { "Content-Type": "application/json", "X-CSRF-Token": csrfToken() };
  }
  function failure(r) {
    return r.json().then(function (b) {
      return (b && b.error && (b.error.message || b.error)) || b.message || ("HTTP " + r.status);
    }, function () { return "HTTP " + r.status; });
  }

  // A new chat is opened by the page's own form (CSRF token, the page's context); the
  // redirect names the session.
  function ensureSession(text) {
    if (session()) return Promise.resolve(session());
    var body = new URLSearchParams(new FormData(form));
    body.set("content", text); // names the chat
    return fetch(form.action, {
      method: "POST",
      credentials: "same-origin",
      body: body,
    }).then(function (r) {
      var id = r.ok ? new URL(r.url).searchParams.get("session") : null;
      if (!id) throw new Error("The chat could not be opened (HTTP " + r.status + ").");
      root.setAttribute("data-session", id);
      var heading = document.getElementById("chat-heading");
      if (heading) heading.textContent = text.slice(0, 60);
      if (window.history && history.replaceState) history.replaceState(null, "", r.url);
      refreshList();
      return id;
    });
  }

  function ask(text) {
    streaming = true;
    send.disabled = true;
    showError("");
    log.appendChild(el("li", "chat-msg chat-user", text));
    scrollDown();
    return ensureSession(text).then(function (id) {
      return fetch("/api/v1/ai/sessions/" + encodeURIComponent(id) + "/messages", {
        method: "POST",
        credentials: "same-origin",
        headers: Object.assign({ Accept: "text/event-stream" }, jsonHeaders()),
        body: JSON.stringify({ content: text }),
      });
    }).then(function (r) {
      if (!r.ok) return failure(r).then(function (m) { throw new Error(m); });
      return readStream(r.body);
    }).catch(function (e) {
      showError(e.message || String(e));
    }).then(function () {
      streaming = false;
      send.disabled = false;
      input.focus();
    });
  }

  if (form) {
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var text = input.value.trim();
      if (!text || streaming) return;
      input.value = "";
      ask(text);
    });
    // Enter sends, Shift+Enter is a new line.
    input.addEventListener("keydown", function (e) {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        if (form.requestSubmit) form.requestSubmit(); else form.dispatchEvent(new Event("submit"));
      }
    });
  }

  // Approve / Reject on a waiting call's card.
  log.addEventListener("click", function (e) {
    var b = e.target.closest ? e.target.closest("[data-decide]") : null;
    if (!b) return;
    var card = b.closest("li.chat-tool");
    var exec = card && card.getAttribute("data-execution");
    if (!exec || !session()) return;
    var group = b.closest(".chat-approval");
    var reason = group.querySelector('input[name="reason"]');
    var approve = b.getAttribute("data-decide") === "approve";
    group.querySelectorAll("button").forEach(function (x) { x.disabled = true; });
    fetch("/api/v1/ai/sessions/" + encodeURIComponent(session()) + "/approve/" + encodeURIComponent(exec), {
      method: "POST",
      credentials: "same-origin",
      headers: jsonHeaders(),
      body: JSON.stringify({ approve: approve, reason: reason && reason.value ? reason.value : null }),
    }).then(function (r) {
      if (!r.ok) return failure(r).then(function (m) { throw new Error(m); });
      group.replaceChildren(el("p", "", approve ? "Approved: running…" : "Rejected."));
      setStatus(card, approve ? "approved" : "rejected");
      // Decided after a reload: the turn goes on on the server; show its outcome.
      if (!streaming) setTimeout(function () { window.location.reload(); }, 2000);
    }).catch(function (err) {
      group.querySelectorAll("button").forEach(function (x) { x.disabled = false; });
      showError(err.message || String(err));
    });
  });

  // The cost indicator: today's usage of the organization, every 15 s; it stops after five
  // failures in a row, or at once when the session is gone (401/403).
  var cost = document.getElementById("chat-cost");
  var failures = 0, timer = null, stopped = false;
  function money(microCents) {
    var cents = microCents / 1e6;
    return cents >= 100 ? "$" + (cents / 100).toFixed(2) : cents.toFixed(cents < 1 ? 4 : 2) + "¢";
  }
  function pollCost() {
    if (!cost || stopped) return;
    fetch(cost.getAttribute("data-usage"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (r.status === 401 || r.status === 403) { stop("Cost: sign in again to see it."); return; }
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json().then(function (u) {
          failures = 0;
          var today = new Date().toISOString().slice(0, 10);
          var micro = 0, tokens = 0, unknown = false;
          (u.usage || []).forEach(function (row) {
            if (row.day !== today) return;
            tokens += (row.inputTokens || 0) + (row.outputTokens || 0);
            if (row.costMicroCents === null || row.costMicroCents === undefined) unknown = true;
            else micro += row.costMicroCents;
          });
          var text = "Cost today: " + (unknown ? "unknown" : money(micro)) + " · " + tokens.toLocaleString() + " tokens";
          if (u.budget && u.budget.dailyCents !== null && u.budget.dailyCents !== undefined) {
            text += " (budget " + u.budget.dailyCents + "¢/day)";
          }
          if (u.refusal) text += " — " + u.refusal;
          cost.textContent = text;
          cost.setAttribute("data-micro-cents", String(micro));
        });
      })
      .catch(function () {
        failures += 1;
        if (failures >= 5) stop("Cost: unavailable.");
      });
  }
  function stop(text) {
    stopped = true;
    if (timer) clearInterval(timer);
    cost.textContent = text;
  }
  if (cost) {
    pollCost();
    timer = setInterval(pollCost, 15000);
  }
})();
