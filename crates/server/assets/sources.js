// Tool sources pages (no inline script; CSP script-src 'self'): the slug previewed from the
// display name until the person edits it, and only the chosen authentication method's fields
// shown. Without this script every field shows and the server derives the slug.
(function () {
  "use strict";

  // Lowercase ASCII letters and digits of the name, at most data-max characters: what the
  // server derives (breeze_core::tool_source::Slug::derive).
  function derive(name, max) {
    return name.toLowerCase().replace(/[^a-z0-9]/g, "").slice(0, max);
  }

  function setup() {
    var name = document.getElementById("display-name");
    var slug = document.getElementById("slug");
    if (name && slug) {
      var max = parseInt(slug.getAttribute("maxlength"), 10) || 24;
      var edited = slug.value !== "" && slug.value !== derive(name.value, max);
      slug.addEventListener("input", function () { edited = slug.value !== ""; });
      name.addEventListener("input", function () {
        if (!edited) slug.value = derive(name.value, max);
      });
    }
    document.querySelectorAll("select[data-auth-method]").forEach(function (select) {
      var form = select.form;
      function show() {
        form.querySelectorAll("[data-method]").forEach(function (el) {
          el.hidden = el.getAttribute("data-method") !== select.value;
        });
      }
      select.addEventListener("change", show);
      show();
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setup);
  else setup();
})();
