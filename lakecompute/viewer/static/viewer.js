// The viewer's pages, drawn from the JSON API under /api/ (the pages' twins): no build step, no library,
// no request anywhere but this server. A page's state is its URL: version, expr, page (and a, b for the
// diff), so a link or a reload shows the same thing. Text from the dataset is always set as text
// (textContent), never as HTML.
"use strict";

const query = new URLSearchParams(location.search);
const state = {
  version: query.get("version") || "",
  expr: query.get("expr") || "",
  page: Math.max(1, parseInt(query.get("page") || "1", 10) || 1),
  a: query.get("a") || "",
  b: query.get("b") || "",
};

// -- small helpers ---------------------------------------------------------------------------------
function link(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== "" && v !== null && v !== undefined) q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

class ApiError extends Error {
  constructor(body, status) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.name = body && body.error ? body.error : "Error";
    this.status = status;
  }
}

async function api(path, params) {
  const response = await fetch(link(path, params), { credentials: "same-origin" });
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) throw new ApiError(body, response.status);
  return body;
}

function showError(err, where) {
  const box = document.getElementById("error");
  const line = `${err.name || "Error"}: ${err.message}`;
  box.textContent = box.hidden ? line : `${box.textContent}\n${line}`;
  box.hidden = false;
  if (where) where.replaceChildren(el("p", { class: "muted", text: "Nothing to show (see the message above)." }));
}

function clear(node) { node.replaceChildren(); return node; }
function fill(node, ...children) { node.replaceChildren(...children.filter((c) => c !== null && c !== undefined)); }
const main = () => document.getElementById("main");
const versionParam = () => state.version;

// -- the header: the dataset, the version picker, the active page -------------------------------------
async function header(info) {
  document.getElementById("dataset").textContent = `${info.path}  ·  ${info.length} rows`;
  document.title = `${info.path} · lakecompute viewer`;
  const select = document.getElementById("version");
  const options = [["", `default (${info.default})`]];
  for (const b of info.branches) options.push([b, `branch ${b}`]);
  for (const [t, v] of Object.entries(info.tags)) options.push([t, `tag ${t} (${v})`]);
  if (state.version && !options.some(([v]) => v === state.version)) options.push([state.version, `version ${state.version}`]);
  clear(select).append(...options.map(([v, label]) => el("option", { value: v, text: label, selected: v === state.version })));
  select.addEventListener("change", () => { location.href = link(location.pathname, { version: select.value, expr: state.expr }); });
  for (const id of ["nav-grid", "nav-versions", "nav-diff"]) {
    const a = document.getElementById(id);
    a.href = link(a.getAttribute("href"), { version: state.version });
  }
  const active = location.pathname.startsWith("/versions") ? "nav-versions"
    : location.pathname.startsWith("/diff") ? "nav-diff" : "nav-grid";
  document.getElementById(active).classList.add("active");
}

// -- the grid and its sidebar ----------------------------------------------------------------------
// Where `text` stands in `expr` as a whole clause (not the tail of a longer name: "labels == 'a'" is not
// in "xlabels == 'a'"), or -1.
function findClause(expr, text) {
  for (let at = expr.indexOf(text); at >= 0; at = expr.indexOf(text, at + 1)) {
    if (at === 0 || !/[A-Za-z0-9_`]/.test(expr[at - 1])) return at;
  }
  return -1;
}
function clausesIn(expr, clauses) { return clauses.filter((c) => findClause(expr, c) >= 0); }
function group(selected) { return selected.length === 1 ? selected[0] : `(${selected.join(" or ")})`; }

function withoutGroup(expr, g) {
  if (expr === g) return "";
  for (const candidate of [` and ${g}`, `${g} and `]) {
    const at = findClause(expr, candidate.startsWith(" ") ? g : candidate);
    if (at < 0) continue;
    const start = candidate.startsWith(" ") ? at - 5 : at;
    if (expr.slice(start, start + candidate.length) === candidate) return expr.slice(0, start) + expr.slice(start + candidate.length);
  }
  return expr;
}

function toggled(expr, clauses, clause, on) {
  // One group per tensor: its selected values' clauses joined by "or", and-ed with the rest.
  const before = clausesIn(expr, clauses);
  let rest = before.length ? withoutGroup(expr, group(before)) : expr;
  const after = on ? [...before.filter((c) => c !== clause), clause] : before.filter((c) => c !== clause);
  if (!after.length) return rest;
  return rest ? `${rest} and ${group(after)}` : group(after);
}

async function countsOf(tensor, box) {
  try {
    const data = await api("/api/count", { tensor, version: versionParam(), expr: state.expr });
    const list = el("ul", { class: "counts", "data-tensor": tensor });
    data.counts.forEach(([value, n], k) => {
      const clause = data.clauses[k];
      if (clause === null) {  // no text of the language selects this value: no toggle
        list.append(el("li", {}, el("label", {}, ` ${value}`), el("span", { class: "n", text: String(n) })));
        return;
      }
      const on = findClause(state.expr, clause) >= 0;
      const input = el("input", { type: "checkbox", checked: on, "data-clause": clause });
      input.addEventListener("change", () => {
        const expr = toggled(state.expr, data.clauses, clause, input.checked);
        location.href = link("/", { version: state.version, expr });
      });
      list.append(el("li", {}, el("label", {}, input, ` ${value}`), el("span", { class: "n", text: String(n) })));
    });
    box.replaceChildren(list);
  } catch (err) {
    box.replaceChildren(el("p", { class: "bad", text: `${err.name}: ${err.message}` }));
  }
}

function sidebar(info) {
  const expr = el("textarea", { id: "expr", name: "expr", spellcheck: "false", placeholder: "labels == 'cat' and score > 0.5" });
  expr.value = state.expr;
  const form = el("form", { id: "expr-form" },
    el("h3", { text: "Expression" }), expr,
    el("div", { class: "buttons" }, el("button", { type: "submit", text: "Apply" }),
      el("button", { type: "button", id: "expr-clear", text: "Clear", onclick: () => { location.href = link("/", { version: state.version }); } })));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.href = link("/", { version: state.version, expr: expr.value.trim() });
  });
  expr.addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); } });
  const aside = el("aside", {}, form);
  for (const tensor of info.labels) {
    const box = el("div", {}, el("p", { class: "muted", text: "counting…" }));
    aside.append(el("h3", { text: tensor }), box);
    countsOf(tensor, box);
  }
  return aside;
}

function thumbError(img, url, holder) {
  // An <img> that fails says nothing: ask the same URL for its JSON message and show it in the cell.
  img.addEventListener("error", async () => {
    let text = "the thumbnail did not load";
    try { await api(url); } catch (err) { text = `${err.name}: ${err.message}`; }
    holder.replaceChildren(el("div", { class: "cell-error", text }));
  });
}

function cell(row) {
  const sample = link(`/sample/${row.index}`, { version: state.version, expr: state.expr });
  const names = Object.values(row.captions).flat();
  const holder = el("a", { class: "thumb", href: sample });
  if (row.thumb) {
    const img = el("img", { src: row.thumb, loading: "lazy", alt: `row ${row.index}` });
    thumbError(img, row.thumb, holder);
    holder.append(img);
  } else {
    holder.append(el("span", { class: "muted", text: "no image" }));
  }
  const caption = el("figcaption", { text: names.length ? `${row.index} · ${names.join(", ")}` : String(row.index) });
  return el("figure", { class: "cell", "data-index": String(row.index) }, holder, caption);
}

function pager(data, size) {
  const pages = Math.max(1, Math.ceil(data.total / size));
  const first = data.total ? data.offset + 1 : 0;
  const last = data.offset + data.rows.length;
  const to = (p) => link("/", { version: state.version, expr: state.expr, page: p });
  return el("div", { class: "pager" },
    state.page > 1 ? el("a", { href: to(state.page - 1), id: "prev-page", text: "← previous" }) : null,
    el("span", { id: "summary", text: `rows ${first}–${last} of ${data.total} · page ${state.page} of ${pages}` }),
    state.page < pages ? el("a", { href: to(state.page + 1), id: "next-page", text: "next →" }) : null);
}

async function gridPage(info) {
  const content = el("div", { class: "content" }, el("p", { class: "muted", text: "Loading samples…" }));
  main().replaceChildren(el("div", { class: "layout" }, sidebar(info), content));
  try {
    const size = info.page_size;
    const data = await api("/api/samples", { version: versionParam(), expr: state.expr, offset: (state.page - 1) * size, limit: size });
    for (const e of data.errors) showError({ name: e.error, message: e.message });
    content.replaceChildren(pager(data, size), el("div", { class: "grid", id: "grid" }, ...data.rows.map(cell)));
  } catch (err) {
    showError(err, content);
  }
}

// -- the sample page -------------------------------------------------------------------------------
function leaves(value) { return Array.isArray(value) ? value.flat(Infinity) : [value]; }

function valueText(entry) {
  if (entry.missing) return "(no sample at this row)";
  const all = entry.shape ? leaves(entry.value) : [];
  if (all.length > 64) { // a mask or a long array: its shape and what it holds, not every number
    const trues = all.every((v) => typeof v === "boolean") ? `, ${all.filter((v) => v).length} true` : "";
    return `array of shape ${JSON.stringify(entry.shape)}${trues}${entry.truncated ? " (first values only)" : ""}: ` +
      `${JSON.stringify(all.slice(0, 16))}…`;
  }
  const nested = entry.value !== null && typeof entry.value === "object" && !Array.isArray(entry.value);
  const shown = JSON.stringify(entry.value, null, nested ? 1 : 0);
  const names = entry.names ? `  ${JSON.stringify(entry.names)}` : "";
  return (shown === undefined ? "" : shown) + names + (entry.truncated ? `  … (first values of shape ${JSON.stringify(entry.shape)})` : "");
}

function sampleImages(data) {
  const figures = [];
  for (const [name, entry] of Object.entries(data.tensors)) {
    if (!entry.image || entry.error) continue;
    const img = el("img", { src: entry.url, alt: `${name}[${data.index}]`, "data-tensor": name });
    const toggle = el("input", { type: "checkbox" });
    toggle.addEventListener("change", () => { img.src = toggle.checked ? entry.overlay_url : entry.url; });
    figures.push(el("figure", {}, img, el("figcaption", {}, `${name} · ${entry.shape.join("×")} `,
      el("label", {}, toggle, " boxes, masks and keypoints"))));
  }
  return el("div", { class: "sample-images" }, ...figures);
}

function valuesTable(data) {
  const rows = Object.entries(data.tensors).map(([name, entry]) => {
    const value = entry.error ? el("td", { class: "bad", text: `${entry.error}: ${entry.message}` })
      : entry.image ? el("td", { text: `image ${JSON.stringify(entry.shape)}` })
      : el("td", {}, el("pre", { text: valueText(entry) }));
    return el("tr", { "data-tensor": name }, el("th", { text: name }), el("td", { class: "muted", text: `${entry.htype} · ${entry.dtype}` }), value);
  });
  return el("table", { class: "values" }, el("tr", {}, el("th", { text: "tensor" }), el("th", { text: "htype" }), el("th", { text: "value" })), ...rows);
}

async function samplePage(info, index) {
  try {
    const data = await api(`/api/sample/${index}`, { version: versionParam(), expr: state.expr });
    const to = (i) => link(`/sample/${i}`, { version: state.version, expr: state.expr });
    const page = data.position === null ? 1 : Math.floor(data.position / info.page_size) + 1;
    const where = data.position === null ? "not kept by the expression" : `${data.position + 1} of ${data.total}`;
    const nav = el("div", { class: "pager" },
      data.prev !== null ? el("a", { id: "prev", href: to(data.prev), text: `← ${data.prev}` }) : null,
      el("span", { text: `row ${data.index} · ${where}${data.expr ? ` · ${data.expr}` : ""}` }),
      data.next !== null ? el("a", { id: "next", href: to(data.next), text: `${data.next} →` }) : null,
      el("a", { href: link("/", { version: state.version, expr: state.expr, page }), text: "back to the grid" }));
    for (const entry of Object.values(data.tensors)) if (entry.error) showError({ name: entry.error, message: entry.message });
    main().replaceChildren(nav, sampleImages(data), valuesTable(data));
  } catch (err) {
    showError(err, main());
  }
}

// -- the versions page: a lane per branch, a dot per version, a line to each parent ----------------
const ROW = 32;
const LANE = 18;

function graphSvg(entries, lanes) {
  const ns = "http://www.w3.org/2000/svg";
  const width = LANE * (lanes.size + 1);
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(ROW * entries.length));
  const y = new Map(entries.map((e, k) => [e.version, k * ROW + ROW / 2]));
  const x = (e) => LANE * (lanes.get(e.branch) + 1);
  const byVersion = new Map(entries.map((e) => [e.version, e]));
  const colour = (e) => `hsl(${(lanes.get(e.branch) * 67) % 360} 60% 42%)`;
  for (const e of entries) {
    for (const p of e.parents) {
      if (!byVersion.has(p)) continue;
      const line = document.createElementNS(ns, "path");
      const parent = byVersion.get(p);
      line.setAttribute("d", `M${x(e)} ${y.get(e.version)} C${x(e)} ${y.get(p) - ROW / 2} ${x(parent)} ${y.get(e.version) + ROW / 2} ${x(parent)} ${y.get(p)}`);
      line.setAttribute("stroke", colour(e));
      line.setAttribute("fill", "none");
      line.setAttribute("stroke-width", "2");
      svg.append(line);
    }
  }
  for (const e of entries) {
    const dot = document.createElementNS(ns, "circle");
    dot.setAttribute("cx", String(x(e)));
    dot.setAttribute("cy", String(y.get(e.version)));
    dot.setAttribute("r", "5");
    dot.setAttribute("fill", colour(e));
    svg.append(dot);
  }
  return svg;
}

function versionRow(e) {
  const evalText = e.eval ? `eval: ${e.eval.label || (e.eval.functions || []).join(" → ")}${e.eval.status ? ` (${e.eval.status})` : ""}` : "";
  const parent = e.parents.length ? e.parents[0] : null;
  return el("div", { class: "row", "data-version": String(e.version) },
    el("a", { href: link("/", { version: e.version }), text: `v${e.version}` }),
    ...e.branches.map((b) => el("span", { class: "badge branch", text: b })),
    ...e.tags.map((t) => el("span", { class: "badge tag", text: t })),
    el("span", { class: "muted", text: `on ${e.branch}` }),
    el("span", { class: "msg", text: e.message }),
    evalText ? el("span", { class: "eval", text: evalText }) : null,
    el("span", { class: "muted", text: new Date(e.time * 1000).toLocaleString() }),
    parent !== null ? el("a", { href: link("/diff", { a: parent, b: e.version }), text: "diff" }) : null);
}

async function versionsPage() {
  try {
    const data = await api("/api/log", { version: versionParam() });
    const entries = [...data.entries].reverse();
    const lanes = new Map();
    for (const e of [...data.entries]) if (!lanes.has(e.branch)) lanes.set(e.branch, lanes.size);
    const summary = el("p", {}, `${data.entries.length} versions · branches: ${data.branches.join(", ")}` +
      ` · tags: ${Object.keys(data.tags).join(", ") || "none"}`);
    main().replaceChildren(summary, el("div", { class: "graph", id: "graph" }, graphSvg(entries, lanes),
      el("div", { class: "rows" }, ...entries.map(versionRow))));
  } catch (err) {
    showError(err, main());
  }
}

// -- the diff page ---------------------------------------------------------------------------------
function side(url, captions, label) {
  const box = el("div", { class: "side" });
  if (url) {
    const img = el("img", { src: url, loading: "lazy", alt: label });
    thumbError(img, url, box);
    box.append(img);
  } else {
    box.append(el("span", { text: "no image" }));
  }
  box.append(el("span", { text: `${label}${Object.values(captions).flat().length ? ": " + Object.values(captions).flat().join(", ") : ""}` }));
  return box;
}

function countsTable(data) {
  const rows = Object.entries(data.counts).map(([name, c]) => {
    const t = data.diff.tensors[name];
    const flags = [t.created ? "created" : "", t.deleted ? "deleted" : "", t.renamed_from ? `renamed from ${t.renamed_from}` : "",
      t.spec.length ? `${t.spec.join(", ")} changed` : "", t.info.length ? `info ${t.info.join(", ")} changed` : ""].filter(Boolean).join("; ");
    return el("tr", { "data-tensor": name }, el("th", { text: name }), el("td", { text: String(c.appended) }),
      el("td", { text: String(c.replaced) }), el("td", { text: String(c.removed) }), el("td", { text: flags }));
  });
  const head = el("tr", {}, ...["tensor", "appended", "replaced", "removed", ""].map((h) => el("th", { text: h })));
  return el("table", { class: "values", id: "diff-counts" }, head, ...rows);
}

async function diffPage() {
  const size = 48;
  try {
    const data = await api("/api/diff", { version: versionParam(), a: state.a, b: state.b, offset: (state.page - 1) * size, limit: size });
    for (const e of data.errors) showError({ name: e.error, message: e.message });
    const a = el("input", { name: "a", value: String(data.a), size: "8" });
    const b = el("input", { name: "b", value: String(data.b), size: "8" });
    const form = el("form", { class: "diff-form", method: "get", action: "/diff" }, "from ", a, " to ", b,
      el("button", { type: "submit", text: "Compare" }));
    const pairs = data.replaced.rows.map((r) => el("figure", { class: "pair", "data-index": String(r.index) },
      el("div", { class: "sides" }, side(r.old, r.old_captions, `v${data.a}`), side(r.new, r.new_captions, `v${data.b}`)),
      el("figcaption", {}, el("a", { href: link(`/sample/${r.index}`, { version: data.b }), text: `row ${r.index}` }))));
    const more = data.replaced.total > data.replaced.offset + pairs.length
      ? el("a", { href: link("/diff", { a: data.a, b: data.b, page: state.page + 1 }), text: "more replaced rows →" }) : null;
    fill(main(), form, el("pre", { class: "diff-text", text: data.text }), countsTable(data),
      el("h3", { text: `Replaced rows (${data.replaced.total}), v${data.a} | v${data.b}` }),
      el("div", { class: "pairs", id: "pairs" }, ...pairs), more);
  } catch (err) {
    showError(err, main());
  }
}

// -- start -----------------------------------------------------------------------------------------
async function start() {
  let info;
  try {
    info = await api("/api/info", { version: versionParam() });
  } catch (err) {
    showError(err, main());
    document.body.dataset.ready = "1";
    return;
  }
  await header(info);
  const sample = location.pathname.match(/^\/sample\/([0-9]+)$/);
  if (sample) await samplePage(info, sample[1]);
  else if (location.pathname === "/versions") await versionsPage();
  else if (location.pathname === "/diff") await diffPage();
  else await gridPage(info);
  document.body.dataset.ready = "1"; // drawn: what a test (or a screenshot) waits for
}

start();
