// The checkpoint upload: resumable, chunked, hashed in the browser as it goes.
// Protocol (proctor/web/submissions/README.md): POST /api/uploads declares the file;
// PUT /api/uploads/{id}?offset=N appends; POST …/complete submits it.
"use strict";

(() => {
  // bytes a request carries (a dropped connection loses at most this): the page says
  let CHUNK = 8 * 1024 * 1024;
  const RETRIES = 5;

  const $ = (id) => document.getElementById(id);

  function human(n) {
    const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return i === 0 ? `${n} bytes` : `${n.toFixed(1)} ${units[i]}`;
  }

  function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

  class Upload {
    constructor(file) {
      this.file = file;
      this.id = null;
      this.offset = 0;
      this.hash = new window.ProctorSha256();
      this.hashed = 0; // bytes of the file fed to the hash
      this.xhr = null;
      this.paused = false;
    }

    status(text, fraction) {
      $("upload-status").hidden = false;
      $("upload-text").textContent = text;
      if (fraction !== undefined) $("upload-progress").value = Math.round(fraction * 1000) / 10;
    }

    async begin() {
      const open = await window.Proctor.api("/api/uploads");
      const same = open.find((u) => u.filename === this.file.name && u.size_bytes === this.file.size);
      if (same) {
        this.id = same.id;
        this.offset = same.offset;
        return;
      }
      const created = await window.Proctor.api("/api/uploads", {
        method: "POST",
        body: { filename: this.file.name, size_bytes: this.file.size },
      });
      this.id = created.id;
      this.offset = created.offset;
    }

    async hashUpTo(end) {
      // the hash must cover exactly the bytes the server holds, in order
      if (end < this.hashed) {
        this.hash = new window.ProctorSha256();
        this.hashed = 0;
      }
      while (this.hashed < end) {
        const stop = Math.min(end, this.hashed + CHUNK);
        const bytes = new Uint8Array(await this.file.slice(this.hashed, stop).arrayBuffer());
        this.hash.update(bytes);
        this.hashed = stop;
        this.status(`Checking the part already sent: ${human(this.hashed)} of ${human(end)}`, this.hashed / this.file.size);
        await sleep(0); // let the page breathe
      }
    }

    send(bytes) {
      return new Promise((resolve, reject) => {
        const xhr = new XMLHttpRequest();
        this.xhr = xhr;
        xhr.open("PUT", `/api/uploads/${this.id}?offset=${this.offset}`);
        xhr.setRequestHeader("Content-Type", "application/octet-stream");
        const token = window.Proctor.csrfToken();
        if (token) xhr.setRequestHeader("X-CSRF-Token", token);
        xhr.upload.onprogress = (event) => {
          const done = this.offset + event.loaded;
          this.status(`Uploading ${this.file.name}: ${human(done)} of ${human(this.file.size)}`, done / this.file.size);
        };
        xhr.onload = () => {
          let data = null;
          try { data = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
          if (xhr.status >= 200 && xhr.status < 300) resolve(data);
          else {
            const error = new Error(data && typeof data.detail === "string" ? data.detail : `HTTP ${xhr.status}`);
            error.status = xhr.status;
            reject(error);
          }
        };
        xhr.onerror = () => { const e = new Error("the connection dropped"); e.status = 0; reject(e); };
        xhr.onabort = () => { const e = new Error("paused"); e.status = -1; reject(e); };
        xhr.send(bytes);
      });
    }

    async resync() {
      const info = await window.Proctor.api(`/api/uploads/${this.id}`);
      this.offset = info.offset;
    }

    async run() {
      await this.begin();
      await this.hashUpTo(this.offset);
      let failures = 0;
      while (this.offset < this.file.size) {
        if (this.paused) throw Object.assign(new Error("paused"), { status: -1 });
        const stop = Math.min(this.file.size, this.offset + CHUNK);
        const bytes = new Uint8Array(await this.file.slice(this.offset, stop).arrayBuffer());
        try {
          const info = await this.send(bytes);
          if (this.hashed === this.offset) {
            this.hash.update(bytes);
            this.hashed = stop;
          }
          this.offset = info.offset;
          failures = 0;
        } catch (error) {
          if (error.status === -1 || error.status === 413 || error.status === 404 || error.status === 410) throw error;
          failures += 1;
          if (failures > RETRIES) throw error;
          this.status(`${error.message}: resuming (try ${failures} of ${RETRIES})…`);
          await sleep(500 * 2 ** failures);
          await this.resync();
          await this.hashUpTo(this.offset);
        }
      }
      await this.hashUpTo(this.file.size);
      this.status("Every byte is in. Checking the archive and its policy.toml…", 1);
      return window.Proctor.api(`/api/uploads/${this.id}/complete`, {
        method: "POST",
        body: { sha256: this.hash.hex() },
      });
    }
  }

  function showProblems(detail) {
    const list = $("upload-problems");
    list.innerHTML = "";
    const items = Array.isArray(detail) ? detail.map((d) => d.msg || JSON.stringify(d)) : [String(detail)];
    for (const text of items) {
      const li = document.createElement("li");
      li.textContent = text;
      list.appendChild(li);
    }
    list.hidden = false;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = $("upload-form");
    if (!form) return;
    const maxBytes = Number(form.dataset.maxBytes);
    CHUNK = Number(form.dataset.chunkBytes) || CHUNK;
    let current = null;
    $("upload-pause").addEventListener("click", () => {
      if (!current) return;
      current.paused = true;
      if (current.xhr) current.xhr.abort();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      $("upload-problems").hidden = true;
      const file = $("checkpoint-file").files[0];
      if (!file) { showProblems("choose the archive to upload"); return; }
      if (file.size > maxBytes) { showProblems(`the file is ${human(file.size)}; this server accepts at most ${human(maxBytes)}`); return; }
      current = new Upload(file);
      $("upload-start").disabled = true;
      $("upload-pause").hidden = false;
      try {
        const submission = await current.run();
        current.status("Submitted. Opening its page…", 1);
        window.location.assign(`/submit/submissions/${submission.id}`);
      } catch (error) {
        if (error.status === -1) current.status("Paused: choose the same file and press Upload to resume.");
        else {
          current.status("The upload was not accepted.");
          showProblems(error.detail !== undefined ? error.detail : error.message);
        }
      } finally {
        $("upload-start").disabled = false;
        $("upload-pause").hidden = true;
      }
    });
  });
})();
