// Moonbase dashboard. Plain JavaScript, no dependencies, same-origin requests only.
// The master key lives in this tab's sessionStorage and travels as X-Parse-Master-Key: no
// cookies, so no request can be forged from another site. Every value from the server is put
// into the page as text (never as HTML).
"use strict";

const store = window.sessionStorage;
const state = { key: store.getItem("mb.key") || "", app: store.getItem("mb.app") || "moonbase", timers: [] };

// ---------------------------------------------------------------- DOM helpers

function h(tag, attrs, ...children) {
  const ns = tag.startsWith("svg:") ? "http://www.w3.org/2000/svg" : null;
  const el = ns ? document.createElementNS(ns, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.setAttribute("class", v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const $ = (sel) => document.querySelector(sel);

function toast(msg) {
  const t = $("#toast");
  t.textContent = msg;
  t.classList.add("show");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => t.classList.remove("show"), 2500);
}

// ---------------------------------------------------------------- HTTP

class ApiError extends Error {
  constructor(status, body) {
    super(body && (body.error || body.message) ? String(body.error || body.message) : "HTTP " + status);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(method, path, body, opts) {
  const headers = { "X-Parse-Application-Id": state.app, "X-Parse-Master-Key": state.key };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit", cache: "no-store", redirect: "error",
  });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!res.ok) {
    const err = new ApiError(res.status, json);
    if (res.status === 403 && json && json.error === "unauthorized" && json.code === undefined) {
      logout("The server refused the master key or application id. Log in again.");
    }
    throw err;
  }
  if (opts && opts.withHeaders) return { json, headers: res.headers };
  return json;
}

const enc = encodeURIComponent;
function qs(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") continue;
    parts.push(enc(k) + "=" + enc(typeof v === "string" ? v : JSON.stringify(v)));
  }
  return parts.length ? "?" + parts.join("&") : "";
}

// ---------------------------------------------------------------- login

async function login(ev) {
  ev.preventDefault();
  const key = $("#login-key").value.trim();
  const app = $("#login-app").value.trim() || "moonbase";
  const err = $("#login-error");
  if (!key) { err.textContent = "Enter the master key."; $("#login-key").focus(); return; }
  err.textContent = "Checking…";
  try {
    const res = await fetch("/admin/functions", {
      headers: { "X-Parse-Application-Id": app, "X-Parse-Master-Key": key }, credentials: "omit", cache: "no-store",
    });
    if (res.status === 403) {
      err.textContent = "Wrong master key or application id: the server refused them.";
      $("#login-key").select();
      return;
    }
    if (!res.ok) { err.textContent = "The server answered HTTP " + res.status + "."; return; }
  } catch (e) {
    err.textContent = "Cannot reach the server: " + e.message;
    return;
  }
  err.textContent = "";
  state.key = key; state.app = app;
  store.setItem("mb.key", key); store.setItem("mb.app", app);
  $("#login-key").value = "";
  enter();
}

function logout(message) {
  state.key = "";
  store.removeItem("mb.key");
  stopTimers();
  $("#nav").hidden = true; $("#logout").hidden = true; $("#screen").hidden = true;
  $("#screen").replaceChildren();
  $("#login").hidden = false;
  $("#login-error").textContent = typeof message === "string" ? message : "";
  $("#login-key").focus();
}

function enter() {
  $("#login").hidden = true;
  $("#nav").hidden = false; $("#logout").hidden = false; $("#screen").hidden = false;
  detectRealtime();
  if (!location.hash || location.hash === "#") location.hash = "#data"; else route();
}

// ---------------------------------------------------------------- routing

const screens = {};
function stopTimers() { for (const t of state.timers) clearInterval(t); state.timers = []; }
// A screen's polling: stops when the screen is left (its root is no longer in the page).
function every(root, ms, fn) {
  if (!root.isConnected) return;
  const t = setInterval(() => { if (root.isConnected) fn(); else clearInterval(t); }, ms);
  state.timers.push(t);
}

async function route() {
  if (!state.key) return;
  stopTimers();
  const parts = location.hash.slice(1).split("/").map(decodeURIComponent);
  const name = screens[parts[0]] ? parts[0] : "data";
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.screen === name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  // Each visit renders into a fresh element: a slower screen still loading when the user moves
  // on writes into its own detached element, never over the screen now shown.
  const root = h("div", {}, h("p", { class: "status" }, "Loading…"));
  $("#screen").replaceChildren(root);
  try {
    await screens[name](root, parts.slice(1));
  } catch (e) {
    if (!state.key) return;
    root.replaceChildren(h("h1", {}, name), h("p", { class: "error", role: "alert" }, e.message));
  }
}

// ---------------------------------------------------------------- dialogs

// Opens the shared dialog; `onOk` returns true (or a promise of true) to close it. Enter submits,
// Escape cancels (the browser's own <dialog> behaviour), focus returns where it was.
function dialog(title, body, okLabel, onOk, danger) {
  const d = $("#dialog");
  const back = document.activeElement;
  $("#dialog-title").textContent = title;
  $("#dialog-body").replaceChildren(...[].concat(body));
  $("#dialog-error").textContent = "";
  const ok = $("#dialog-ok");
  ok.textContent = okLabel;
  ok.className = danger ? "danger" : "primary";
  const form = $("#dialog-form");
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    ok.disabled = true;
    try {
      if (await onOk()) d.close();
    } catch (e) {
      $("#dialog-error").textContent = e.message;
    } finally {
      ok.disabled = false;
    }
  };
  $("#dialog-cancel").onclick = () => d.close();
  d.onclose = () => { if (back && back.focus) back.focus(); };
  d.showModal();
  const first = d.querySelector("#dialog-body textarea, #dialog-body input, #dialog-body select");
  (first || (danger ? $("#dialog-cancel") : ok)).focus();
}

function confirmAction(title, text, okLabel, action) {
  dialog(title, h("p", {}, text), okLabel, async () => { await action(); return true; }, true);
}

function jsonEditor(title, value, okLabel, save) {
  const ta = h("textarea", { id: "dialog-json", rows: 14, spellcheck: "false", "aria-label": "JSON" });
  ta.value = JSON.stringify(value, null, 2);
  // Enter inserts a newline in the editor; Ctrl/Cmd+Enter saves.
  ta.addEventListener("keydown", (ev) => { if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) $("#dialog-form").requestSubmit(); });
  // A save that deletes something (a field, an index, a parameter) names it and needs a second
  // press: `confirmLoss(text)` stops the first one.
  let confirmed = null;
  const confirmLoss = (what) => {
    if (!what || confirmed === what + ta.value) return;
    confirmed = what + ta.value;
    $("#dialog-ok").className = "danger";
    throw new Error(what + " Press " + okLabel + " again to confirm, or Cancel.");
  };
  dialog(title, [ta, h("p", { class: "muted" }, "JSON. Ctrl+Enter saves, Escape cancels.")], okLabel, async () => {
    let parsed;
    try { parsed = JSON.parse(ta.value); } catch (e) { throw new Error("Not valid JSON: " + e.message); }
    await save(parsed, confirmLoss);
    return true;
  });
}

// ---------------------------------------------------------------- typed cells

function fmtDate(iso) {
  const d = new Date(iso);
  if (isNaN(d)) return String(iso);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function isImage(name) { return /\.(png|jpe?g|gif|webp|svg)$/i.test(name || ""); }

function cell(v, key) {
  if (v === undefined || v === null) return h("span", { class: "cell-null" }, "—");
  if ((key === "createdAt" || key === "updatedAt") && typeof v === "string") return h("span", { class: "cell-date" }, fmtDate(v));
  if (typeof v === "object" && !Array.isArray(v)) {
    switch (v.__type) {
      case "Date": return h("span", { class: "cell-date", title: v.iso }, fmtDate(v.iso));
      case "GeoPoint": return h("span", { class: "mono", title: "GeoPoint" }, v.latitude.toFixed(5) + ", " + v.longitude.toFixed(5));
      case "Pointer": return h("a", { class: "nowrap", href: "#data/" + enc(v.className) + "/" + enc(v.objectId), title: v.className }, v.className + " " + v.objectId);
      case "Object": return h("a", { href: "#data/" + enc(v.className) + "/" + enc(v.objectId) }, v.className + " " + v.objectId);
      case "File": {
        const url = v.url || "";
        const sameOrigin = url.startsWith(location.origin + "/") || url.startsWith("/");
        if (isImage(v.name) && sameOrigin) {
          return h("a", { href: url, target: "_blank", rel: "noopener", title: v.name }, h("img", { class: "thumb", src: url, alt: v.name, loading: "lazy" }));
        }
        return h("a", { href: url, target: "_blank", rel: "noopener" }, v.name || "file");
      }
      case "Relation": return h("span", { class: "muted" }, "Relation<" + v.className + ">");
      case "Bytes": return h("span", { class: "muted" }, "Bytes");
      default: break;
    }
  }
  if (typeof v === "boolean") return h("span", {}, v ? "true" : "false");
  if (typeof v === "number") return h("span", { class: "mono" }, String(v));
  if (typeof v === "string") return h("span", { title: v.length > 60 ? v : null }, v.length > 120 ? v.slice(0, 120) + "…" : v);
  const s = JSON.stringify(v);
  return h("span", { class: "cell-json", title: s.length > 60 ? s : null }, s.length > 80 ? s.slice(0, 80) + "…" : s);
}

// ---------------------------------------------------------------- Data browser

function classPath(cls, id) {
  return "/parse/classes/" + enc(cls) + (id ? "/" + enc(id) : "");
}

screens.data = async (root, args) => {
  const classes = (await api("GET", "/admin/classes")).results;
  const cls = args[0] || (classes.find((c) => !c.className.startsWith("_")) || classes[0] || {}).className;
  const single = args[1];
  const ui = { cls, where: single ? JSON.stringify({ objectId: single }) : "", order: "-createdAt", limit: 25, skip: 0 };

  const list = h("ul", { class: "classes", "aria-label": "Classes" }, classes.map((c) =>
    h("li", {}, h("a", { href: "#data/" + enc(c.className), "aria-current": c.className === cls ? "true" : null },
      h("span", {}, c.className), h("span", { class: "count" }, String(c.count))))));
  const side = h("div", { class: "panel" }, h("h2", {}, "Classes"), classes.length ? list : h("p", { class: "muted" }, "No classes yet."));
  const main = h("div", {});
  root.replaceChildren(h("h1", {}, "Data"), h("div", { class: "browser" }, side, main));
  if (!cls) { main.append(h("p", { class: "muted" }, "Nothing stored yet. Run the seedDemo job on the Jobs screen for demo data.")); return; }
  const schema = classes.find((c) => c.className === cls) || { fields: {} };
  const fieldNames = Object.keys(schema.fields || {});
  const columns = ["objectId", ...fieldNames.filter((f) => !["objectId", "createdAt", "updatedAt", "ACL"].includes(f)), "createdAt", "updatedAt"];

  const whereInput = h("input", { id: "where", class: "where", type: "text", placeholder: '{"category":"food"}', spellcheck: "false" });
  whereInput.value = ui.where;
  const orderSel = h("select", { id: "order" }, columns.flatMap((c) => [h("option", { value: "-" + c }, c + " ↓"), h("option", { value: c }, c + " ↑")]));
  orderSel.value = ui.order;
  const limitSel = h("select", { id: "limit" }, [10, 25, 50, 100].map((n) => h("option", { value: n }, String(n))));
  limitSel.value = String(ui.limit);
  const status = h("p", { class: "status", role: "status" }, "");
  const table = h("table", {});
  const wrap = h("div", { class: "tablewrap" }, table);
  const pageInfo = h("span", { class: "muted" }, "");
  const prev = h("button", { type: "button", class: "small" }, "← Previous");
  const next = h("button", { type: "button", class: "small" }, "Next →");

  const form = h("form", { class: "toolbar", "aria-label": "Query" },
    h("div", { class: "grow" }, h("label", { for: "where" }, "where (JSON)"), whereInput),
    h("div", {}, h("label", { for: "order" }, "sort"), orderSel),
    h("div", {}, h("label", { for: "limit" }, "per page"), limitSel),
    h("button", { type: "submit", class: "primary" }, "Apply"),
    h("button", { type: "button", onclick: () => createObject() }, "New object"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); ui.where = whereInput.value.trim(); ui.order = orderSel.value; ui.limit = +limitSel.value; ui.skip = 0; load(); });
  prev.addEventListener("click", () => { ui.skip = Math.max(0, ui.skip - ui.limit); load(); });
  next.addEventListener("click", () => { ui.skip += ui.limit; load(); });
  main.append(h("div", { class: "panel" }, h("h2", {}, cls, " ", h("span", { class: "count" }, "(" + schema.count + ")")), form, status, wrap,
    h("div", { class: "pager" }, prev, next, pageInfo)));

  function header() {
    return h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)), h("th", { scope: "col" }, h("span", { class: "muted" }, "actions"))));
  }
  // Placeholder rows keep the table's height while a page loads (no layout shift).
  function placeholder(n) {
    return h("tbody", {}, Array.from({ length: Math.min(n, 10) }, () => h("tr", {}, columns.map(() => h("td", {}, "\u00a0")), h("td", {}, "\u00a0"))));
  }
  table.replaceChildren(header(), placeholder(ui.limit));

  async function load() {
    let where;
    if (ui.where) {
      try { where = JSON.parse(ui.where); } catch (e) { status.textContent = ""; status.append(h("span", { class: "error" }, "where is not valid JSON: " + e.message)); return; }
    }
    status.textContent = "Loading…";
    try {
      const r = await api("GET", classPath(cls) + qs({ where, order: ui.order, limit: String(ui.limit), skip: String(ui.skip), count: "1" }));
      const rows = r.results || [];
      table.replaceChildren(header(), h("tbody", {}, rows.length ? rows.map(row) : h("tr", {}, h("td", { colspan: columns.length + 1, class: "muted" }, "No objects match."))));
      const total = r.count !== undefined ? r.count : rows.length;
      status.textContent = total + " matching object" + (total === 1 ? "" : "s");
      pageInfo.textContent = rows.length ? "rows " + (ui.skip + 1) + "–" + (ui.skip + rows.length) + " of " + total : "";
      prev.disabled = ui.skip === 0;
      next.disabled = ui.skip + rows.length >= total;
    } catch (e) {
      status.textContent = "";
      status.append(h("span", { class: "error" }, e.message));
    }
  }

  function row(o) {
    return h("tr", {}, columns.map((c) => h("td", { class: c === "objectId" ? "mono" : null }, cell(o[c], c))),
      h("td", { class: "rowactions" },
        h("button", { type: "button", class: "small", "aria-label": "Edit " + o.objectId, onclick: () => editObject(o) }, "Edit"), " ",
        h("button", { type: "button", class: "small danger", "aria-label": "Delete " + o.objectId, onclick: () => deleteObject(o) }, "Delete")));
  }

  function editable(o) {
    const c = {};
    for (const [k, v] of Object.entries(o)) if (!["objectId", "createdAt", "updatedAt", "sessionToken"].includes(k)) c[k] = v;
    return c;
  }
  function editObject(o) {
    jsonEditor("Edit " + cls + " " + o.objectId, editable(o), "Save", async (changes, confirmLoss) => {
      // Fields removed in the editor are deleted on the server.
      const removed = Object.keys(editable(o)).filter((k) => !(k in changes));
      confirmLoss(removed.length ? "This deletes the field" + (removed.length > 1 ? "s " : " ") + removed.join(", ") + " of " + o.objectId + "." : null);
      for (const k of removed) changes[k] = { __op: "Delete" };
      await api("PUT", classPath(cls, o.objectId), changes);
      toast("Saved " + o.objectId);
      load();
    });
  }
  function createObject() {
    jsonEditor("New " + cls, {}, "Create", async (fields) => {
      const r = await api("POST", classPath(cls), fields);
      toast("Created " + r.objectId);
      load();
    });
  }
  function deleteObject(o) {
    confirmAction("Delete " + cls + " " + o.objectId + "?", "This deletes the object for good (its delete triggers run).", "Delete", async () => {
      await api("DELETE", classPath(cls, o.objectId));
      toast("Deleted " + o.objectId);
      load();
    });
  }
  await load();
};

// ---------------------------------------------------------------- Schema

screens.schema = async (root) => {
  const classes = (await api("GET", "/admin/classes")).results;
  root.replaceChildren(h("h1", {}, "Schema, indexes and class permissions"));
  for (const c of classes) {
    const fields = Object.entries(c.fields || {});
    const clp = c.classLevelPermissions || {};
    const ops = Object.keys(clp);
    root.append(h("section", { class: "panel", "aria-label": c.className },
      h("h2", {}, c.className, " ", h("span", { class: "count" }, "(" + c.count + " objects)")),
      h("div", { class: "grid2" },
        h("div", {}, h("h3", {}, "Fields"), h("div", { class: "tablewrap" }, h("table", {},
          h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "type"))),
          h("tbody", {}, fields.map(([n, f]) => h("tr", {}, h("td", { class: "mono" }, n), h("td", {}, f.type + (f.targetClass ? "<" + f.targetClass + ">" : "")))))))),
        h("div", {},
          h("h3", {}, "Indexes"),
          Object.keys(c.indexes || {}).length
            ? h("div", { class: "tablewrap" }, h("table", {}, h("tbody", {}, Object.entries(c.indexes).map(([n, i]) => h("tr", {}, h("td", { class: "mono" }, n), h("td", { class: "cell-json" }, JSON.stringify(i)))))))
            : h("p", { class: "muted" }, "No declared indexes."),
          h("h3", {}, "Class permissions"),
          ops.length
            ? h("div", { class: "tablewrap" }, h("table", {}, h("tbody", {}, ops.map((op) => h("tr", {}, h("td", {}, op), h("td", { class: "cell-json" }, JSON.stringify(clp[op])))))))
            : h("p", { class: "muted" }, "Open to everyone (no class permissions)."),
          h("p", {}, h("button", { type: "button", class: "small", onclick: () => editCLP(c) }, "Edit permissions…"), " ",
            h("button", { type: "button", class: "small", onclick: () => editIndexes(c) }, "Edit indexes…"))))));
  }
  function editCLP(c) {
    jsonEditor("Class permissions of " + c.className, c.classLevelPermissions || {}, "Save", async (clp) => {
      await api("PUT", "/parse/schemas/" + enc(c.className), { classLevelPermissions: clp });
      toast("Saved permissions of " + c.className);
      route();
    });
  }
  function editIndexes(c) {
    jsonEditor("Indexes of " + c.className + ' (add {"name":{"field":1}}, drop {"name":{"__op":"Delete"}})', c.indexes || {}, "Save", async (idx, confirmLoss) => {
      const dropped = Object.keys(idx).filter((k) => idx[k] && idx[k].__op === "Delete");
      confirmLoss(dropped.length ? "This drops the index" + (dropped.length > 1 ? "es " : " ") + dropped.join(", ") + "." : null);
      await api("PUT", "/parse/schemas/" + enc(c.className), { indexes: idx });
      toast("Saved indexes of " + c.className);
      route();
    });
  }
};

// ---------------------------------------------------------------- Cloud Code

function optionsText(o) {
  const parts = [];
  for (const [k, v] of Object.entries(o || {})) {
    if (v === true) parts.push(k);
    else if (k === "fields") parts.push("fields: " + v.map((f) => f.name + (f.required ? "*" : "")).join(", "));
    else if (k === "rateLimit") parts.push(v.perMinute + "/min");
    else parts.push(k + "=" + v);
  }
  return parts.join(" · ") || "—";
}

screens.cloud = async (root, args) => {
  const c = await api("GET", "/admin/cloud");
  const errors = Object.entries(c.errors || {});
  const handlers = [
    ...c.functions.map((f) => ["function", f.name, f.options, f.at]),
    ...c.jobs.map((f) => ["job", f.name, f.options, f.at]),
    ...c.routes.map((r) => ["route", r.method + " " + r.path, r.options, r.at]),
    ...c.triggers.map((t) => ["trigger", t.name, t.options, t.at]),
  ];
  const source = h("pre", { class: "code", tabindex: "0", "aria-label": "Source" }, "Choose a file to read it.");
  const calls = h("div", { class: "tablewrap" });
  const logs = h("div", { class: "logs", role: "log", "aria-label": "Lua logs", tabindex: "0" });
  const ridInput = h("input", { id: "rid", type: "text", placeholder: "request id (empty: all)", spellcheck: "false" });
  ridInput.value = args[0] || "";
  const levelSel = h("select", { id: "level" }, ["debug", "info", "warn", "error"].map((l) => h("option", { value: l }, l)));
  const failedOnly = h("input", { id: "failed", type: "checkbox" });

  root.replaceChildren(...[
    h("h1", {}, "Cloud Code"),
    errors.length
      ? h("div", { class: "panel notice", role: "alert" }, h("h2", {}, "Reload failed: the previous generation is still serving"),
          errors.map(([f, e]) => h("p", { class: "error mono" }, f + ": " + e)))
      : null,
    h("div", { class: "grid2" },
      h("section", { class: "panel" }, h("h2", {}, "Files ", h("span", { class: "count" }, "generation " + c.generation)),
        c.files.length ? h("ul", {}, c.files.map((f) => h("li", {}, h("button", { type: "button", class: "small", onclick: () => showFile(f.name) }, f.name), " ", h("span", { class: "muted" }, f.bytes + " bytes")))) : h("p", { class: "muted" }, "No Lua files loaded."),
        source),
      h("section", { class: "panel" }, h("h2", {}, "Functions, jobs, routes and triggers"),
        h("div", { class: "tablewrap" }, h("table", {},
          h("thead", {}, h("tr", {}, h("th", {}, "kind"), h("th", {}, "name"), h("th", {}, "options"), h("th", {}, "defined at"))),
          h("tbody", {}, handlers.map(([k, n, o, at]) => h("tr", {}, h("td", {}, k), h("td", { class: "mono" }, n), h("td", {}, optionsText(o)), h("td", { class: "mono" }, at || "—")))))))),
    h("section", { class: "panel" }, h("h2", {}, "Recent calls"),
      h("div", { class: "toolbar" }, h("label", { for: "failed" }, failedOnly, " errors only")),
      calls),
    h("section", { class: "panel" }, h("h2", {}, "Lua logs"),
      h("form", { class: "toolbar", id: "logform" },
        h("div", { class: "grow" }, h("label", { for: "rid" }, "request id"), ridInput),
        h("div", {}, h("label", { for: "level" }, "level"), levelSel),
        h("button", { type: "submit", class: "primary" }, "Show")),
      logs)].filter(Boolean));

  async function showFile(name) {
    source.textContent = "Loading " + name + "…";
    const res = await fetch("/admin/functions/" + enc(name), { headers: { "X-Parse-Application-Id": state.app, "X-Parse-Master-Key": state.key }, credentials: "omit" });
    source.textContent = res.ok ? await res.text() : "HTTP " + res.status;
  }

  async function loadCalls() {
    const r = await api("GET", "/admin/calls" + qs({ limit: "50", failed: failedOnly.checked ? "1" : "" }));
    const rows = r.results;
    calls.replaceChildren(h("table", {},
      h("thead", {}, h("tr", {}, ["time", "call", "caller", "duration", "outcome", "request id"].map((t) => h("th", { class: t === "duration" ? "num" : null }, t)))),
      h("tbody", {}, rows.length ? rows.map((c) => h("tr", {},
        h("td", { class: "cell-date" }, fmtDate(c.time)),
        h("td", { class: "mono" }, c.target),
        h("td", { class: "mono" }, c.caller),
        h("td", { class: "num" }, c.durationMs.toFixed(1) + " ms"),
        h("td", {}, c.ok ? h("span", { class: "badge ok" }, String(c.status)) : h("span", {}, h("span", { class: "badge bad" }, c.status + " · " + c.code), " ", h("span", { class: "error mono call-error" }, c.error || ""))),
        h("td", {}, h("a", { href: "#cloud/" + enc(c.requestId), class: "mono" }, c.requestId))))
        : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No Cloud Code calls yet.")))));
  }

  let since = 0;
  async function loadLogs(reset) {
    if (reset) { since = 0; logs.replaceChildren(); }
    const r = await api("GET", "/admin/logs" + qs({ since: String(since), level: levelSel.value, requestId: ridInput.value.trim(), limit: "500" }));
    for (const l of r.lines) {
      const extra = [l.function ? "function=" + l.function : "", l.at ? "at=" + l.at : ""].filter(Boolean).join(" ");
      logs.append(h("div", { class: "l-" + l.level }, fmtDate(l.time) + " " + l.level.toUpperCase() + (l.requestId ? " [" + l.requestId + "]" : "") + " " + l.msg + (extra ? "  " + extra : "")));
      since = Math.max(since, l.seq);
    }
    if (!logs.childNodes.length) logs.append(h("div", { class: "l-debug" }, "No log lines" + (ridInput.value ? " for this request." : " yet.")));
    else if (r.lines.length) logs.scrollTop = logs.scrollHeight;
  }
  root.querySelector("#logform").addEventListener("submit", (ev) => { ev.preventDefault(); loadLogs(true); });
  failedOnly.addEventListener("change", loadCalls);
  await Promise.all([loadCalls(), loadLogs(true)]);
  every(root, 3000, () => { loadCalls().catch(() => {}); loadLogs(false).catch(() => {}); });
};

// ---------------------------------------------------------------- Jobs

function statusBadge(s) {
  const cls = s === "succeeded" ? "ok" : s === "running" ? "run" : s === "failed" ? "bad" : "";
  return h("span", { class: "badge " + cls }, s);
}

screens.jobs = async (root) => {
  const j = await api("GET", "/admin/jobs");
  const history = h("div", { class: "tablewrap" });
  root.replaceChildren(
    h("h1", {}, "Jobs"),
    h("div", { class: "grid12" },
      h("section", { class: "panel" }, h("h2", {}, "Jobs"),
        j.jobs.length ? h("div", { class: "tablewrap" }, h("table", {}, h("tbody", {}, j.jobs.map((name) => h("tr", {},
          h("td", { class: "mono" }, name),
          h("td", { class: "rowactions" }, h("button", { type: "button", class: "small primary", "data-job": name, onclick: () => runNow(name) }, "Run now…")))))))
          : h("p", { class: "muted" }, "No jobs defined (cloud.job).")),
      h("section", { class: "panel" }, h("h2", {}, "Schedules"),
        j.schedules.length ? h("div", { class: "tablewrap" }, h("table", {},
          h("thead", {}, h("tr", {}, ["job", "schedule", "params", "next runs", "last run"].map((t) => h("th", {}, t)))),
          h("tbody", {}, j.schedules.map((s) => h("tr", {},
            h("td", { class: "mono" }, s.job),
            h("td", { class: "mono", title: s.location }, s.schedule + (s.timeZone && s.timeZone !== "UTC" ? " " + s.timeZone : "")),
            h("td", { class: "cell-json" }, JSON.stringify(s.params)),
            h("td", { class: "cell-date" }, s.next.slice(0, 3).map((t) => h("div", {}, fmtDate(t)))),
            h("td", {}, s.lastRun ? statusBadge(s.lastRun.status) : h("span", { class: "muted" }, "never")))))))
          : h("p", { class: "muted" }, "No schedules in the cron folder."))),
    h("section", { class: "panel" }, h("h2", {}, "History"), history));

  function runNow(name) {
    jsonEditor("Run " + name + " now — parameters", {}, "Run", async (params) => {
      const r = await api("POST", "/parse/jobs/" + enc(name), params, { withHeaders: true });
      toast("Started " + name + " (" + (r.headers.get("X-Parse-Job-Status-Id") || "") + ")");
      loadHistory();
    });
  }
  async function loadHistory() {
    let rows = [];
    try {
      rows = (await api("GET", "/parse/classes/_JobStatus" + qs({ order: "-createdAt", limit: "20" }))).results;
    } catch (e) {
      if (e.code !== 119 && e.status !== 404) throw e;
    }
    history.replaceChildren(h("table", {},
      h("thead", {}, h("tr", {}, ["started", "job", "source", "status", "progress", "message", "duration"].map((t) => h("th", { class: t === "duration" ? "num" : null }, t)))),
      h("tbody", {}, rows.length ? rows.map((r) => {
        const p = typeof r.progress === "number" ? r.progress : 0;
        return h("tr", { "data-run": r.objectId, "data-status": r.status },
          h("td", { class: "cell-date" }, r.startedAt ? fmtDate(r.startedAt.iso) : fmtDate(r.createdAt)),
          h("td", { class: "mono" }, r.jobName),
          h("td", {}, r.source || ""),
          h("td", {}, statusBadge(r.status)),
          h("td", { class: "progress-cell" }, h("progress", { max: "1", value: String(p), "aria-label": "progress" }), " ", h("span", { class: "pct" }, Math.round(p * 100) + "%")),
          h("td", { class: "message" }, r.message || ""),
          h("td", { class: "num" }, typeof r.durationMs === "number" ? (r.durationMs / 1000).toFixed(2) + " s" : "…"));
      }) : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No runs yet.")))));
  }
  await loadHistory();
  every(root, 1000, () => { loadHistory().catch(() => {}); });
};

// ---------------------------------------------------------------- Usage

function monthRange() {
  const now = new Date();
  const from = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  const to = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
  return [from.toISOString().slice(0, 10), to.toISOString().slice(0, 10)];
}

// Every day of [from, to), with the report's rows filled in (days without usage show as 0).
function allDays(rows, from, to) {
  const byDay = new Map(rows.map((r) => [r.key.slice(0, 10), r]));
  const out = [];
  const end = Date.parse(to + "T00:00:00Z");
  for (let t = Date.parse(from + "T00:00:00Z"); t < end && out.length < 400; t += 86400000) {
    const day = new Date(t).toISOString().slice(0, 10);
    out.push(byDay.get(day) || { key: day, units: 0, refused: 0 });
  }
  return out.length ? out : rows;
}

// Drawn at the page's width (one SVG unit = one pixel) so labels stay readable on a phone.
function dayChart(rows) {
  const W = Math.max(300, Math.min(1400, ($("#screen").clientWidth || 720) - 28)), H = 240, L = 48, B = 28, T = 10;
  const max = Math.max(1, ...rows.map((r) => r.units + r.refused));
  const n = Math.max(rows.length, 1);
  const bw = (W - L - 10) / n;
  const svg = h("svg:svg", { class: "chart", viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "Units per day" });
  const y = (v) => T + (H - T - B) * (1 - v / max);
  for (const f of [0, 0.5, 1]) {
    svg.append(h("svg:line", { class: "axis", x1: L, x2: W, y1: y(max * f), y2: y(max * f) }),
      h("svg:text", { x: L - 6, y: y(max * f) + 4, "text-anchor": "end" }, String(Math.round(max * f))));
  }
  rows.forEach((r, i) => {
    const x = L + i * bw + bw * 0.15, w = Math.max(2, bw * 0.7);
    const g = h("svg:g", { class: "day", "data-units": r.units });
    g.append(h("svg:title", {}, r.key.slice(0, 10) + ": " + r.units + " units, " + r.refused + " refused"));
    g.append(h("svg:rect", { class: "bar", x, width: w, y: y(r.units), height: Math.max(0, y(0) - y(r.units)) }));
    if (r.refused) g.append(h("svg:rect", { class: "bar-refused", x, width: w, y: y(r.units + r.refused), height: y(0) - y(r.refused) }));
    if (n <= W / 50 || i % Math.ceil(n / (W / 90)) === 0) g.append(h("svg:text", { x: x + w / 2, y: H - 8, "text-anchor": "middle" }, r.key.slice(5, 10)));
    svg.append(g);
  });
  if (!rows.length) svg.append(h("svg:text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "No usage in this range."));
  return svg;
}

function hbars(rows, label) {
  const max = Math.max(1, ...rows.map((r) => r.units));
  return h("div", { role: "list", "aria-label": label }, rows.slice(0, 10).map((r) => {
    const fill = h("div", { class: "fill" });
    fill.style.width = (100 * r.units / max).toFixed(1) + "%";
    return h("div", { class: "hbar", role: "listitem" }, h("span", { class: "name mono", title: r.key }, r.key), h("div", { class: "track" }, fill), h("span", { class: "num" }, String(r.units)));
  }));
}

function usageTable(rows) {
  return h("div", { class: "tablewrap" }, h("table", {},
    h("thead", {}, h("tr", {}, ["key", "units", "refused", "db reads", "db writes", "Lua CPU ms", "wall ms"].map((t, i) => h("th", { class: i ? "num" : null }, t)))),
    h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, h("td", { class: "mono" }, r.key), ...[r.units, r.refused, r.dbReads, r.dbWrites, r.luaCpuMs.toFixed(1), r.wallMs.toFixed(1)].map((v) => h("td", { class: "num" }, String(v)))))
      : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No usage in this range.")))));
}

screens.usage = async (root) => {
  const [defFrom, defTo] = monthRange();
  const from = h("input", { id: "from", type: "date", value: defFrom });
  const to = h("input", { id: "to", type: "date", value: defTo });
  const body = h("div", {});
  const form = h("form", { class: "toolbar" }, h("div", {}, h("label", { for: "from" }, "from"), from), h("div", {}, h("label", { for: "to" }, "to (exclusive)"), to), h("button", { type: "submit", class: "primary" }, "Show"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  root.replaceChildren(h("h1", {}, "Usage"), form, body);
  async function load() {
    const range = { from: from.value, to: to.value };
    const [day, acc, fn] = await Promise.all(["day", "account", "function"].map((by) => api("GET", "/admin/usage" + qs({ ...range, by }))));
    const app = acc.rows.find((r) => r.key === "app") || { units: 0, refused: 0 };
    const callers = acc.rows.filter((r) => r.key !== "app");
    const refusedRows = acc.rows.filter((r) => r.key !== "app" && r.refused > 0).sort((a, b) => b.refused - a.refused);
    // The chart shows the app's total, or one account's or one function's units per day.
    const series = h("select", { id: "series" },
      h("option", { value: "" }, "the whole app"),
      h("optgroup", { label: "account" }, callers.slice(0, 50).map((r) => h("option", { value: "account=" + r.key }, r.key))),
      h("optgroup", { label: "function" }, fn.rows.slice(0, 50).map((r) => h("option", { value: "function=" + r.key }, r.key))));
    const chartBox = h("div", {}, dayChart(allDays(day.rows, from.value, to.value)));
    series.addEventListener("change", async () => {
      const [kind, key] = series.value ? [series.value.slice(0, series.value.indexOf("=")), series.value.slice(series.value.indexOf("=") + 1)] : [null, null];
      const rows = kind ? (await api("GET", "/admin/usage" + qs({ ...range, by: "day", [kind]: key }))).rows : day.rows;
      chartBox.replaceChildren(dayChart(allDays(rows, from.value, to.value)));
    });
    body.replaceChildren(
      h("section", { class: "panel" }, h("h2", {}, "Units per day"),
        h("p", { class: "muted" }, h("span", { id: "total-units" }, String(app.units)), " units, ", String(app.refused), " refused (429) in this range. Blue: units; red: refused."),
        h("div", { class: "toolbar" }, h("div", {}, h("label", { for: "series" }, "units of"), series)),
        chartBox),
      h("div", { class: "grid2" },
        h("section", { class: "panel" }, h("h2", {}, "Top callers"), hbars(callers, "Top callers")),
        h("section", { class: "panel" }, h("h2", {}, "By function"), hbars(fn.rows, "Units by function"))),
      h("section", { class: "panel" }, h("h2", {}, "Refusals (429)"),
        refusedRows.length ? usageTable(refusedRows) : h("p", { class: "muted" }, "No request was refused in this range.")),
      h("section", { class: "panel" }, h("h2", {}, "By account"), usageTable(acc.rows)),
      h("section", { class: "panel" }, h("h2", {}, "By function"), usageTable(fn.rows)));
  }
  await load();
};

// ---------------------------------------------------------------- Config

screens.config = async (root) => {
  root.replaceChildren(h("h1", {}, "Config"));
  let cfg;
  try {
    cfg = await api("GET", "/parse/config");
  } catch (e) {
    if (e.status === 404 || e.status === 405) {
      root.append(h("div", { class: "notice", role: "status" }, "Config parameters are not available: this server has no /parse/config endpoint."));
      return;
    }
    throw e;
  }
  const params = cfg.params || {};
  const masterOnly = cfg.masterKeyOnly || {};
  const keys = Object.keys(params).sort();
  root.append(h("section", { class: "panel" },
    keys.length ? h("div", { class: "tablewrap" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, "parameter"), h("th", {}, "value"), h("th", {}, "readable by"))),
      h("tbody", {}, keys.map((k) => h("tr", {}, h("td", { class: "mono" }, k), h("td", {}, cell(params[k], k)),
        h("td", {}, masterOnly[k] ? h("span", { class: "badge" }, "master key only") : "clients"))))))
      : h("p", { class: "muted" }, "No parameters yet."),
    h("p", {}, h("button", { type: "button", class: "primary", onclick: edit }, "Edit parameters…"))));
  function edit() {
    jsonEditor("Config parameters", params, "Save", async (p, confirmLoss) => {
      const removed = keys.filter((k) => !(k in p));
      confirmLoss(removed.length ? "This deletes the parameter" + (removed.length > 1 ? "s " : " ") + removed.join(", ") + "." : null);
      const changes = { ...p };
      for (const k of keys) if (!(k in p)) changes[k] = { __op: "Delete" };
      await api("PUT", "/parse/config", { params: changes });
      toast("Config saved");
      route();
    });
  }
};

// ---------------------------------------------------------------- Realtime (shown once the server reports it)

function realtimeLines(text) {
  return text.split("\n").filter((l) => l && !l.startsWith("#") && /realtime|livequery/i.test(l));
}

async function detectRealtime() {
  try {
    const res = await fetch("/metrics", { headers: { "X-Parse-Master-Key": state.key }, credentials: "omit", cache: "no-store" });
    if (res.ok && realtimeLines(await res.text()).length) $('#nav a[data-screen="realtime"]').hidden = false;
  } catch (_) { /* no realtime screen */ }
}

screens.realtime = async (root) => {
  const res = await fetch("/metrics", { headers: { "X-Parse-Master-Key": state.key }, credentials: "omit", cache: "no-store" });
  const lines = res.ok ? realtimeLines(await res.text()) : [];
  root.replaceChildren(h("h1", {}, "Realtime"), h("section", { class: "panel" },
    lines.length ? h("div", { class: "tablewrap" }, h("table", {}, h("tbody", {}, lines.map((l) => {
      const i = l.lastIndexOf(" ");
      return h("tr", {}, h("td", { class: "mono" }, l.slice(0, i)), h("td", { class: "num" }, l.slice(i + 1)));
    })))) : h("p", { class: "muted" }, "This server reports no realtime connections.")));
  every(root, 3000, () => route());
};

// ---------------------------------------------------------------- start

$("#login-form").addEventListener("submit", login);
$("#logout").addEventListener("click", () => logout(""));
window.addEventListener("hashchange", route);
if (state.key) enter(); else { $("#login-app").value = state.app; $("#login-key").focus(); }
