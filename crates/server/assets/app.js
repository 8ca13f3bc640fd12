// Breeze dashboard: the little script the pages need (no inline script anywhere; CSP
// script-src 'self'). Copy buttons, the CSRF header on htmx requests, live updates over SSE.
(function () {
  "use strict";

  function csrfToken() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }

  // htmx requests carry the session's CSRF token as a header.
  document.addEventListener("htmx:configRequest", function (e) {
    var t = csrfToken();
    if (t) e.detail.headers["X-CSRF-Token"] = t;
  });

  // <button data-copy="ID"> copies the text of element ID.
  document.addEventListener("click", function (e) {
    var b = e.target.closest ? e.target.closest("[data-copy]") : null;
    if (!b) return;
    var el = document.getElementById(b.getAttribute("data-copy"));
    if (!el) return;
    var text = el.value !== undefined && el.tagName !== "CODE" && el.tagName !== "PRE" ? el.value : el.textContent;
    var done = function () {
      var old = b.textContent;
      b.textContent = "Copied";
      b.classList.add("copied");
      setTimeout(function () { b.textContent = old; b.classList.remove("copied"); }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { selectText(el); });
    } else {
      selectText(el);
      try { document.execCommand("copy"); done(); } catch (_) { /* selected for a manual copy */ }
    }
  });

  function selectText(el) {
    var r = document.createRange();
    r.selectNodeContents(el);
    var s = window.getSelection();
    s.removeAllRanges();
    s.addRange(r);
  }

  // <form data-confirm="Question?"> asks before submitting.
  document.addEventListener("submit", function (e) {
    var q = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (q && !window.confirm(q)) e.preventDefault();
  }, true);

  // <body data-events="/o/acme/events">: live updates. Each server event names what changed;
  // elements with data-refresh-on="EVENT" get an htmx "refresh" event and reload themselves.
  function listen() {
    var url = document.body.getAttribute("data-events");
    if (!url || !window.EventSource) return;
    var es = new EventSource(url);
    var names = ["approvals", "alerts", "devices", "metrics"];
    function refresh(name) {
      document.querySelectorAll('[data-refresh-on~="' + name + '"]').forEach(function (el) {
        if (window.htmx) window.htmx.trigger(el, "refresh");
      });
    }
    names.forEach(function (name) {
      es.addEventListener(name, function () { refresh(name); });
    });
    // The stream reports changes after it opened; whatever changed between the page's render
    // and then is fetched once now (and again after a reconnect).
    var opened = false;
    es.addEventListener("open", function () {
      if (opened) names.forEach(refresh);
      else setTimeout(function () { names.forEach(refresh); }, 2500);
      opened = true;
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", listen);
  else listen();

  // Approvals page: an opt-in browser notification and a short sound when a new request
  // arrives while the page is open (the list reloads itself on the live `approvals` event).
  // The choice is kept in this browser only; nothing is sent anywhere.
  var NOTIFY_KEY = "breeze.notifyApprovals";
  function beep() {
    try {
      var Ctx = window.AudioContext || window.webkitAudioContext;
      if (!Ctx) return;
      var c = new Ctx(), o = c.createOscillator(), g = c.createGain();
      o.frequency.value = 880;
      g.gain.value = 0.08;
      o.connect(g);
      g.connect(c.destination);
      o.start();
      o.stop(c.currentTime + 0.25);
    } catch (_) { /* no sound */ }
  }
  function approvalsNotify() {
    var box = document.getElementById("pending");
    var btn = document.getElementById("notify-toggle");
    if (!box || !btn) return;
    var on = function () {
      try { return window.localStorage.getItem(NOTIFY_KEY) === "1"; } catch (_) { return false; }
    };
    var label = function () {
      btn.textContent = on() ? "Alerting on new requests (turn off)" : "Alert me to new requests";
      btn.setAttribute("aria-pressed", on() ? "true" : "false");
    };
    btn.hidden = false;
    label();
    btn.addEventListener("click", function () {
      try {
        if (on()) { window.localStorage.removeItem(NOTIFY_KEY); label(); return; }
        window.localStorage.setItem(NOTIFY_KEY, "1");
      } catch (_) { return; }
      label();
      beep();
      if (window.Notification && window.Notification.permission === "default") {
        window.Notification.requestPermission();
      }
    });
    var ids = function () {
      return Array.prototype.map.call(box.querySelectorAll("article.approval"), function (a) { return a.id; });
    };
    var known = ids();
    document.body.addEventListener("htmx:afterSwap", function (e) {
      if (e.target !== box) return;
      var now = ids();
      var fresh = now.filter(function (id) { return known.indexOf(id) < 0; });
      known = now;
      if (!fresh.length || !on()) return;
      var h = document.getElementById(fresh[0]).querySelector("h3");
      var text = h ? h.textContent : "A request is waiting for a decision";
      var said = document.getElementById("arrived");
      if (said) said.textContent = "New request: " + text;
      beep();
      if (window.Notification && window.Notification.permission === "granted") {
        try { new window.Notification("Approval needed", { body: text, tag: "breeze-approval" }); } catch (_) { /* shown in the page */ }
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", approvalsNotify);
  else approvalsNotify();
})();
