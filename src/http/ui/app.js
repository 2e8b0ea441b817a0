// The page of mcp-sandboxd (served at /ui by src/http/ui_route.c): a tenant's
// sandboxes and their files, for people. It speaks MCP itself, over
// Streamable HTTP (POST mcp: initialize, notifications/initialized, then
// tools/call, resources/list, resources/read), so it needs no API of its own.
//
// Rules it keeps (the server's Content-Security-Policy enforces most):
// - the API key lives in sessionStorage at most and travels ONLY in the
//   Authorization header, never in a URL;
// - text from the server or a sandbox goes into the page with textContent,
//   never as markup; HTML files are shown only in an <iframe sandbox>
//   (no scripts, an opaque origin) through srcdoc;
// - images and downloads use the signed links the server hands out (they
//   carry no key), on this page's own origin.
"use strict";

const PROTOCOL_VERSION = "2025-06-18";
const KEY_STORE = "mcp-sandbox.key";
const RESOURCE_PAGES_MAX = 50; // resources/list pages read at most
const CSV_ROWS_MAX = 1000;
const CSV_COLS_MAX = 200;

const $ = (id) => document.getElementById(id);

// ---- MCP over Streamable HTTP ----

class McpError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status || 0;
  }
}

// The JSON-RPC message with id ID out of an SSE body (data: lines).
function fromEventStream(text, id) {
  for (const frame of text.split(/\r?\n\r?\n/)) {
    const data = frame
      .split(/\r?\n/)
      .filter((l) => l.startsWith("data:"))
      .map((l) => l.slice(5).replace(/^ /, ""))
      .join("\n");
    if (!data) continue;
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      continue;
    }
    if (msg && msg.id === id) return msg;
  }
  return null;
}

class Mcp {
  constructor(key) {
    this.key = key;
    this.session = null;
    this.version = PROTOCOL_VERSION;
    this.nextId = 1;
    this.connecting = null;
  }

  headers() {
    const h = {
      Authorization: "Bearer " + this.key,
      Accept: "application/json, text/event-stream",
      "Content-Type": "application/json",
    };
    if (this.session) {
      h["Mcp-Session-Id"] = this.session;
      h["MCP-Protocol-Version"] = this.version;
    }
    return h;
  }

  async post(message) {
    let resp;
    try {
      resp = await fetch("mcp", {
        method: "POST",
        headers: this.headers(),
        body: JSON.stringify(message),
        credentials: "omit",
        cache: "no-store",
        referrerPolicy: "no-referrer",
      });
    } catch (e) {
      throw new McpError("the server cannot be reached (" + e.message + ")");
    }
    return resp;
  }

  // The refusal in a non-2xx answer, as words.
  static async refusal(resp) {
    let why = "";
    try {
      const body = await resp.json();
      why = (body && (body.error && body.error.message ? body.error.message : body.error)) || "";
    } catch {
      why = "";
    }
    if (typeof why !== "string") why = JSON.stringify(why);
    if (resp.status === 401) return "the server refused the API key: " + (why || "401");
    if (resp.status === 429) return "too many failed keys from this address: " + (why || "retry later");
    return "HTTP " + resp.status + (why ? ": " + why : "");
  }

  async send(method, params) {
    const id = this.nextId++;
    const resp = await this.post({ jsonrpc: "2.0", id, method, params: params || {} });
    if (!resp.ok) throw new McpError(await Mcp.refusal(resp), resp.status);
    const type = resp.headers.get("Content-Type") || "";
    let msg;
    if (type.startsWith("text/event-stream")) msg = fromEventStream(await resp.text(), id);
    else msg = await resp.json();
    if (!msg) throw new McpError("no answer to " + method);
    if (msg.error) throw new McpError(method + ": " + msg.error.message, 200);
    return { result: msg.result, resp };
  }

  async connect() {
    this.session = null;
    const { result, resp } = await this.send("initialize", {
      protocolVersion: PROTOCOL_VERSION,
      capabilities: {},
      clientInfo: { name: "mcp-sandbox-page", version: "1" },
    });
    this.session = resp.headers.get("Mcp-Session-Id");
    this.version = (result && result.protocolVersion) || PROTOCOL_VERSION;
    this.capabilities = (result && result.capabilities) || {};
    const n = await this.post({ jsonrpc: "2.0", method: "notifications/initialized" });
    if (!n.ok) throw new McpError(await Mcp.refusal(n), n.status);
  }

  async ensure() {
    if (this.session !== null) return;
    if (!this.connecting) {
      this.connecting = this.connect().finally(() => {
        this.connecting = null;
      });
    }
    await this.connecting;
  }

  // A request on the session; a session the server forgot (404) is made
  // anew once.
  async request(method, params) {
    await this.ensure();
    try {
      return (await this.send(method, params)).result;
    } catch (e) {
      if (e.status !== 404) throw e;
      this.session = null;
      await this.ensure();
      return (await this.send(method, params)).result;
    }
  }

  // A tool's result object; a tool error (isError) is thrown as its text.
  async tool(name, args) {
    const result = await this.request("tools/call", { name, arguments: args || {} });
    const text = (result.content || [])
      .filter((c) => c.type === "text")
      .map((c) => c.text)
      .join("\n");
    if (result.isError) throw new McpError(text || name + " failed", 200);
    if (result.structuredContent) return result.structuredContent;
    try {
      return JSON.parse(text);
    } catch {
      return { text };
    }
  }

  async close() {
    if (!this.session) return;
    const h = this.headers();
    this.session = null;
    try {
      await fetch("mcp", { method: "DELETE", headers: h, credentials: "omit", cache: "no-store" });
    } catch {
      // the session expires on its own
    }
  }
}

// ---- small helpers ----

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function showError(message) {
  const e = $("error");
  e.textContent = message;
  e.hidden = !message;
}

function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.round(s / 60) + " min";
  if (s < 86400) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

function age(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? "" : duration(Date.now() - t);
}

function until(iso) {
  if (!iso) return "never";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const left = t - Date.now();
  return left <= 0 ? "now" : "in " + duration(left);
}

function bytes(n) {
  if (typeof n !== "number") return "";
  if (n < 1024) return n + " B";
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
  if (n < 1024 * 1024 * 1024) return (n / 1024 / 1024).toFixed(1) + " MiB";
  return (n / 1024 / 1024 / 1024).toFixed(2) + " GiB";
}

// A signed link on this page's own origin: the server may name itself by
// server.public_url, but the page reached it here (img-src is 'self').
function localLink(link) {
  let u;
  try {
    u = new URL(link, location.href);
  } catch {
    return null;
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") return null;
  if (u.origin === location.origin) return u.href;
  return new URL(u.pathname + u.search, location.href).href;
}

// sandbox://ID/PATH -> {id, path} (PATH percent-decoded for display).
function parseUri(uri) {
  const m = /^sandbox:\/\/([^/]+)\/(.+)$/.exec(uri || "");
  if (!m) return null;
  let path = m[2];
  try {
    path = m[2].split("/").map(decodeURIComponent).join("/");
  } catch {
    // shown as it came
  }
  return { id: m[1], path };
}

// RFC 4180 CSV (quotes, "" inside quotes, CRLF or LF), at most MAXROWS
// rows; returns {rows, more}.
function parseCsv(text, maxRows) {
  const rows = [];
  let row = [];
  let field = "";
  let quoted = false;
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (quoted) {
      if (c === '"') {
        if (text[i + 1] === '"') {
          field += '"';
          i += 2;
          continue;
        }
        quoted = false;
      } else {
        field += c;
      }
      i++;
      continue;
    }
    if (c === '"' && field === "") {
      quoted = true;
    } else if (c === ",") {
      row.push(field);
      field = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(field);
      field = "";
      rows.push(row);
      row = [];
      if (rows.length > maxRows) return { rows: rows.slice(0, maxRows), more: true };
    } else {
      field += c;
    }
    i++;
  }
  if (field !== "" || row.length > 0) {
    row.push(field);
    rows.push(row);
  }
  return { rows: rows.slice(0, maxRows), more: rows.length > maxRows };
}

// ---- the page ----

let mcp = null;
let sandboxes = [];
let filesOf = null; // the sandbox whose files are shown

function showLoggedIn(on) {
  $("login").hidden = on;
  $("sandboxes").hidden = !on;
  $("logout").hidden = !on;
  if (!on) {
    $("files").hidden = true;
    $("who").textContent = "";
    filesOf = null;
  }
}

async function login(key) {
  showError("");
  const client = new Mcp(key);
  try {
    await client.ensure();
    mcp = client;
    sessionStorage.setItem(KEY_STORE, key);
    showLoggedIn(true);
    await refresh();
  } catch (e) {
    mcp = null;
    sessionStorage.removeItem(KEY_STORE);
    showLoggedIn(false);
    showError(e.message);
  }
}

async function logout() {
  const client = mcp;
  mcp = null;
  sessionStorage.removeItem(KEY_STORE);
  showLoggedIn(false);
  showError("");
  if (client) await client.close();
}

// CPU seconds, memory in use and disk written, as the server's last samples say.
function usage(cpu, mem, disk) {
  if (typeof cpu !== "number") return "";
  const text = cpu.toFixed(1) + " s CPU, " + bytes(mem) + " memory";
  return typeof disk === "number" ? text + ", " + bytes(disk) + " disk" : text;
}

function sandboxRow(sb) {
  const tr = el("tr");
  tr.dataset.sandboxId = sb.sandbox_id;
  tr.appendChild(el("td", sb.name || ""));
  tr.appendChild(el("td", sb.sandbox_id, "mono"));
  const st = el("td", sb.status, "status-" + String(sb.status).replace(/[^a-z]/g, ""));
  if (sb.reason) st.title = sb.reason;
  else if (sb.asleep_since) st.title = "asleep since " + sb.asleep_since + ": files kept, the next call wakes it";
  else if (sb.sleeps_at) st.title = "goes to sleep at " + sb.sleeps_at + " unless used";
  tr.appendChild(st);
  const created = el("td", age(sb.created));
  created.title = "created " + sb.created + ", last used " + (sb.last_used || "");
  tr.appendChild(created);
  const exp = el("td", until(sb.expires));
  if (sb.expires) exp.title = sb.expires;
  tr.appendChild(exp);
  tr.appendChild(el("td", (sb.packages || []).join(", ")));
  tr.appendChild(el("td", bytes(sb.egress_bytes_in) + " / " + bytes(sb.egress_bytes_out)));
  tr.appendChild(el("td", usage(sb.cpu_seconds, sb.memory_bytes, sb.disk_bytes)));
  const actions = el("td", null, "actions");
  const files = el("button", "Files");
  files.type = "button";
  files.className = "files";
  files.addEventListener("click", () => openFiles(sb));
  const del = el("button", "Delete", "danger delete");
  del.type = "button";
  del.addEventListener("click", () => deleteSandbox(sb));
  actions.appendChild(files);
  actions.appendChild(del);
  tr.appendChild(actions);
  return tr;
}

async function refresh() {
  if (!mcp) return;
  let res;
  try {
    res = await mcp.tool("list_sandboxes");
  } catch (e) {
    showError("list_sandboxes: " + e.message);
    if (e.status === 401) await logout().then(() => showError(e.message));
    return;
  }
  showError("");
  sandboxes = res.sandboxes || [];
  const body = $("sandbox-table").tBodies[0];
  clear(body);
  for (const sb of sandboxes) body.appendChild(sandboxRow(sb));
  $("sandbox-table").hidden = sandboxes.length === 0;
  $("no-sandboxes").hidden = sandboxes.length !== 0;
  let who = sandboxes.length + " sandbox" + (sandboxes.length === 1 ? "" : "es");
  if (typeof res.tenant_egress_bytes_in === "number")
    who += ", egress " + bytes(res.tenant_egress_bytes_in) + " in / " + bytes(res.tenant_egress_bytes_out) + " out";
  if (typeof res.tenant_cpu_seconds === "number")
    who += ", " + res.tenant_cpu_seconds.toFixed(1) + " s CPU";
  $("who").textContent = who;
  if (filesOf && !sandboxes.some((s) => s.sandbox_id === filesOf.sandbox_id)) {
    $("files").hidden = true;
    filesOf = null;
  }
}

async function deleteSandbox(sb) {
  const label = sb.name ? sb.name + " (" + sb.sandbox_id + ")" : sb.sandbox_id;
  if (!window.confirm("Delete sandbox " + label + "? Its container and files go with it.")) return;
  try {
    await mcp.tool("delete_sandbox", { sandbox_id: sb.sandbox_id });
  } catch (e) {
    showError("delete_sandbox: " + e.message);
    return;
  }
  await refresh();
}

// ---- files (MCP resources) ----

async function listResources(sandboxId) {
  const prefix = "sandbox://" + sandboxId + "/";
  const out = [];
  let cursor;
  for (let page = 0; page < RESOURCE_PAGES_MAX; page++) {
    const params = cursor ? { cursor } : {};
    const res = await mcp.request("resources/list", params);
    for (const r of res.resources || []) if (r.uri && r.uri.startsWith(prefix)) out.push(r);
    cursor = res.nextCursor;
    if (!cursor) return { list: out, complete: true };
  }
  return { list: out, complete: false };
}

async function openFiles(sb) {
  filesOf = sb;
  $("files").hidden = false;
  $("files-of").textContent = sb.name ? sb.name + " (" + sb.sandbox_id + ")" : sb.sandbox_id;
  const list = $("file-list");
  clear(list);
  clear($("preview"));
  const note = $("files-note");
  note.hidden = true;
  let got;
  try {
    got = await listResources(sb.sandbox_id);
  } catch (e) {
    note.textContent =
      e.message.indexOf("Method not found") >= 0 || e.message.indexOf("method not found") >= 0
        ? "This server does not list files (no MCP resources)."
        : "resources/list: " + e.message;
    note.hidden = false;
    return;
  }
  if (filesOf !== sb) return;
  if (got.list.length === 0 && sb.status === "sleeping") {
    note.textContent = "This sandbox is asleep: its files are kept, and are listed again once a call wakes it.";
    note.hidden = false;
  } else if (got.list.length === 0) {
    note.textContent = "No files under /app/results.";
    note.hidden = false;
  } else if (!got.complete) {
    note.textContent = "Only the first " + got.list.length + " files are listed.";
    note.hidden = false;
  }
  for (const r of got.list) list.appendChild(fileItem(r));
}

function fileItem(r) {
  const p = parseUri(r.uri);
  const li = el("li");
  li.dataset.uri = r.uri;
  const name = el("a", (p && p.path) || r.name || r.uri, "name mono");
  name.href = "#";
  name.addEventListener("click", (ev) => {
    ev.preventDefault();
    preview(r);
  });
  li.appendChild(name);
  li.appendChild(el("span", r.mimeType || "", "type"));
  li.appendChild(el("span", bytes(r.size), "size"));
  const link = r._meta && r._meta["mcp-sandbox/link"];
  const href = link ? localLink(link) : null;
  if (href) {
    const dl = el("a", "Download", "download");
    dl.href = href;
    dl.download = ((p && p.path) || r.name || "file").split("/").pop();
    dl.rel = "noopener noreferrer";
    li.appendChild(dl);
  }
  return li;
}

function csvTable(text) {
  const { rows, more } = parseCsv(text, CSV_ROWS_MAX + 1);
  const wrap = el("div", null, "csv");
  const table = el("table");
  table.className = "csv-table";
  rows.forEach((row, i) => {
    const tr = el("tr");
    for (const cell of row.slice(0, CSV_COLS_MAX)) tr.appendChild(el(i === 0 ? "th" : "td", cell));
    if (i === 0) {
      const thead = el("thead");
      thead.appendChild(tr);
      table.appendChild(thead);
    } else {
      if (!table.tBodies.length) table.appendChild(el("tbody"));
      table.tBodies[0].appendChild(tr);
    }
  });
  wrap.appendChild(table);
  if (more) wrap.appendChild(el("p", "The first " + CSV_ROWS_MAX + " rows are shown.", "note"));
  return wrap;
}

// The text of resource R (resources/read), or null when it is binary.
async function readText(r) {
  const res = await mcp.request("resources/read", { uri: r.uri });
  const c = (res.contents || [])[0];
  if (!c) throw new McpError("resources/read returned nothing");
  if (typeof c.text === "string") return c.text;
  if (typeof c.blob === "string") {
    try {
      const raw = Uint8Array.from(atob(c.blob), (ch) => ch.charCodeAt(0));
      return new TextDecoder("utf-8", { fatal: true }).decode(raw);
    } catch {
      return null;
    }
  }
  return null;
}

async function preview(r) {
  const box = $("preview");
  clear(box);
  const p = parseUri(r.uri);
  const title = el("h3", (p && p.path) || r.uri, "mono");
  box.appendChild(title);
  const type = (r.mimeType || "").toLowerCase().split(";")[0].trim();
  const link = r._meta && r._meta["mcp-sandbox/link"];
  try {
    if (type.startsWith("image/")) {
      const href = link ? localLink(link) : null;
      if (!href) throw new McpError("no link for this image");
      const img = el("img");
      img.alt = (p && p.path) || r.uri;
      img.src = href;
      box.appendChild(img);
      return;
    }
    const textual =
      type.startsWith("text/") ||
      type === "application/json" ||
      type === "application/xml" ||
      type === "application/javascript" ||
      type === "image/svg+xml";
    if (!textual) {
      box.appendChild(el("p", "No preview for " + (type || "this type") + ": use Download.", "note"));
      return;
    }
    const text = await readText(r);
    if (text === null) {
      box.appendChild(el("p", "Not UTF-8 text: use Download.", "note"));
      return;
    }
    if (type === "text/csv") {
      box.appendChild(csvTable(text));
    } else if (type === "text/html") {
      // An empty sandbox attribute: an opaque origin that
      // runs nothing, under this page's policy as well.
      const frame = el("iframe");
      frame.setAttribute("sandbox", "");
      frame.setAttribute("referrerpolicy", "no-referrer");
      frame.title = "preview of " + ((p && p.path) || r.uri);
      frame.srcdoc = text;
      box.appendChild(frame);
    } else {
      box.appendChild(el("pre", text));
    }
  } catch (e) {
    box.appendChild(el("p", "Cannot show it: " + e.message, "note"));
  }
}

// ---- start ----

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = $("key");
    const key = input.value.trim();
    input.value = "";
    if (!key) {
      showError("Enter an API key (mcp-sandboxd keys add TENANT prints one).");
      return;
    }
    login(key);
  });
  $("logout").addEventListener("click", () => logout());
  $("refresh").addEventListener("click", () => refresh());
  $("files-close").addEventListener("click", () => {
    $("files").hidden = true;
    filesOf = null;
  });
  const saved = sessionStorage.getItem(KEY_STORE);
  if (saved) login(saved);
});
