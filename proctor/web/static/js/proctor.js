// Proctor: small progressive enhancements shared by every page.
// Pages work without it; it adds copy buttons, confirmations, and a fetch
// helper that sends the CSRF token for signed-in JSON calls.
"use strict";

(() => {
  function csrfToken() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : null;
  }

  // fetch() for the JSON API from a signed-in page: same-origin cookies plus
  // the X-CSRF-Token header that writes require.
  async function api(url, options = {}) {
    const headers = new Headers(options.headers || {});
    const token = csrfToken();
    if (token) headers.set("X-CSRF-Token", token);
    let body = options.body;
    if (body !== undefined && !(body instanceof FormData) && typeof body !== "string") {
      headers.set("Content-Type", "application/json");
      body = JSON.stringify(body);
    }
    const response = await fetch(url, { ...options, body, headers, credentials: "same-origin" });
    const type = response.headers.get("content-type") || "";
    const data = type.includes("application/json") ? await response.json() : await response.text();
    if (!response.ok) {
      const detail = data && data.detail !== undefined ? data.detail : data;
      const error = new Error(typeof detail === "string" ? detail : JSON.stringify(detail));
      error.status = response.status;
      error.detail = detail;
      throw error;
    }
    return data;
  }

  function wireCopyButtons(root) {
    root.querySelectorAll("[data-copy-target]").forEach((button) => {
      button.addEventListener("click", async () => {
        const target = document.querySelector(button.getAttribute("data-copy-target"));
        if (!target) return;
        const text = target.textContent.trim();
        try {
          await navigator.clipboard.writeText(text);
        } catch (_) {
          // clipboard API needs a secure context: fall back to selecting the text
          const range = document.createRange();
          range.selectNodeContents(target);
          const selection = window.getSelection();
          selection.removeAllRanges();
          selection.addRange(range);
          document.execCommand("copy");
        }
        const label = button.textContent;
        button.textContent = "Copied";
        setTimeout(() => { button.textContent = label; }, 1500);
      });
    });
  }

  function wireConfirmations(root) {
    root.querySelectorAll("form[data-confirm]").forEach((form) => {
      form.addEventListener("submit", (event) => {
        if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
      });
    });
  }

  window.Proctor = { api, csrfToken };
  document.addEventListener("DOMContentLoaded", () => {
    wireCopyButtons(document);
    wireConfirmations(document);
  });
})();
