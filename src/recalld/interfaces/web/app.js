// The recalld inspector: one more client of the HTTP API (/v1/...), served from the
// package. Memory content is untrusted text: it only ever reaches the page through
// text nodes (el() and textContent), never as markup.

const KEY = "recalld.key";
const TYPES = ["insight", "event", "raw", "turn", "chunk"];
const SVG = "http://www.w3.org/2000/svg";
const $ = (selector) => document.querySelector(selector);

// -- small DOM helpers -------------------------------------------------------------------

/** An element with attributes; string children become text nodes. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

const fixed = (value, digits = 4) => Number(value).toFixed(digits);
const day = (iso) => (iso ? String(iso).slice(0, 10) : "");
const when = (iso) => (iso ? String(iso).slice(0, 16).replace("T", " ") : "");
const list = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);
/** Whether a memory is no longer current: replaced by another, or past its valid_until. */
const superseded = (m) =>
  Boolean(m.superseded_by) || (Boolean(m.valid_until) && Date.parse(m.valid_until) <= Date.now());

function notify(message, kind = "error") {
  const notice = $("#notice");
  notice.textContent = message;
  notice.className = kind;
  notice.hidden = !message;
}

// -- the API -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
  });
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    let message = data?.error?.message ?? `${response.status} ${response.statusText}`;
    if (response.status === 401) message += " (enter an API key above)";
    throw new ApiError(response.status, message);
  }
  return data;
}

/** Run an action; its error (if any) shows in the notice line. */
async function attempt(action) {
  try {
    await action();
  } catch (error) {
    notify(error.message || String(error));
  }
}

// -- the key -----------------------------------------------------------------------------

function showKeyState() {
  $("#key-state").textContent = sessionStorage.getItem(KEY) ? "key set for this tab" : "no key";
}

// -- filters shared by search and browse ---------------------------------------------------

/** The filter fields search and browse share, put first in the form's filters fieldset. */
function filterFields(form) {
  const fieldset = form.querySelector("fieldset.filters");
  const text = (label, name, placeholder) =>
    el("label", {}, `${label} `, el("input", { name, placeholder }));
  const fields = [
    el("span", { class: "types" }, TYPES.map((type) => el("label", {},
      el("input", { type: "checkbox", name: "types", value: type }), ` ${type}`))),
    text("tags", "tags", "a, b"),
    text("project", "project"),
    text("session", "session_id"),
    text("since", "since", "ISO date"),
    text("until", "until", "ISO date"),
  ];
  const legend = fieldset.querySelector("legend");
  if (legend) legend.after(...fields);
  else fieldset.prepend(...fields);
}

function filtersOf(form) {
  const data = new FormData(form);
  const filters = {};
  const types = data.getAll("types");
  if (types.length) filters.types = types;
  const tags = list(String(data.get("tags") || ""));
  if (tags.length) filters.tags = tags;
  for (const name of ["project", "session_id", "since", "until"]) {
    const value = String(data.get(name) || "").trim();
    if (value) filters[name] = value;
  }
  return filters;
}

// -- search --------------------------------------------------------------------------------

async function search(event) {
  event?.preventDefault();
  const form = $("#search-form");
  const data = new FormData(form);
  const query = String(data.get("query") || "").trim();
  if (!query) return;
  const asked = {
    query,
    mode: data.get("mode"),
    filters: filtersOf(form),
  };
  const asOf = String(data.get("as_of") || "").trim();
  if (asOf) asked.as_of = asOf;
  const body = {
    ...asked,
    limit: Number(data.get("limit") || 10),
    near_misses: Number(data.get("near_misses") || 0),
    explain: true,
  };
  notify("");
  const result = await api("POST", "/v1/search", body);
  $("#welcome").hidden = true;
  const scale = barScale([...result.hits, ...result.near_misses]);
  $("#search-summary").textContent =
    `${result.hits.length} hit(s), mode ${result.mode}, ${result.query_type} query, ` +
    `${result.details?.candidates ?? "?"} candidates, ${fixed(result.took_ms, 1)} ms`;
  $("#hits").replaceChildren(...result.hits.map((hit) => hitItem(hit, scale, false)));
  $("#near-misses").replaceChildren(...result.near_misses.map((hit) => hitItem(hit, scale, true)));
  $("#near-title").hidden = result.near_misses.length === 0;
  const tokens = Number(data.get("max_tokens") || 0);
  if (tokens > 0) {
    const context = await api("POST", "/v1/context", { ...asked, max_tokens: tokens });
    $("#context").textContent = context.text || "(nothing fits)";
    $("#context-tokens").textContent = `${context.tokens} of ${context.budget} tokens, ` +
      `${context.hits.length} memories`;
  }
  $("#context").hidden = $("#context-title").hidden = tokens <= 0;
}

/** The largest fusion contribution and the largest |log factor|, shared by every bar. */
function barScale(hits) {
  let fusion = 0;
  let factor = 0;
  for (const hit of hits) {
    for (const value of Object.values(hit.trace?.fusion ?? {})) fusion = Math.max(fusion, value);
    for (const value of Object.values(hit.trace?.adjustments ?? {})) {
      if (value > 0) factor = Math.max(factor, Math.abs(Math.log(value)));
    }
  }
  return { fusion: fusion || 1, factor: factor || 1 };
}

function hitItem(hit, scale, missed) {
  const memory = hit.memory;
  const trace = hit.trace;
  const reason = trace?.filters?.join("; ") ?? "";
  const details = el("div", { class: "trace", hidden: true }, trace ? traceView(trace, scale) : "");
  const toggle = el("button", {
    type: "button",
    class: "explain",
    "aria-expanded": "false",
    onclick: () => {
      details.hidden = !details.hidden;
      toggle.setAttribute("aria-expanded", String(!details.hidden));
    },
  }, "Why?");
  return el("li", { class: missed ? "hit missed" : "hit", "data-id": memory.id },
    el("div", { class: "meta" },
      el("b", { class: "rank" }, `#${hit.rank}`),
      el("span", { class: "score", "data-score": hit.score }, fixed(hit.score)),
      el("span", {}, day(memory.event_time ?? memory.created_at)),
      el("span", { class: "type" }, memory.type),
      memory.session_id ? el("span", { class: "dim" }, `session ${memory.session_id}`) : null,
      memory.pinned ? el("span", { class: "flag" }, "pinned") : null,
      superseded(memory) ? el("span", { class: "flag" }, "superseded") : null,
      el("button", { type: "button", class: "link", onclick: () => attempt(() => openMemory(memory.id)) },
        memory.id),
      toggle),
    el("p", { class: "content" }, memory.content),
    inCollection(hit.collection),
    missed ? el("p", { class: "lost" }, `lost: ${reason}`) : null,
    details);
}

// A hit from a collection's file: its NAME/PATH, then each context line that applies.
function inCollection(label) {
  if (!label) return null;
  return el("p", { class: "collection", "data-collection": label.name },
    el("span", { class: "path" }, `${label.name}/${label.path}`),
    label.context.map((line) => el("span", { class: "context" }, line)));
}

function traceView(trace, scale) {
  const channels = el("p", { class: "dim" }, "found by: ",
    trace.channels.length ? trace.channels.map((c) => `${c.channel} #${c.rank} (raw ${fixed(c.score, 3)})`).join(", ")
      : "no channel");
  const fusion = Object.entries(trace.fusion).map(([name, value]) =>
    el("div", { class: "bar", "data-channel": name, "data-value": value },
      el("span", { class: "name" }, name),
      el("span", { class: "track" }, sized(el("span", { class: "fill" }), value / scale.fusion)),
      el("span", { class: "num" }, fixed(value))));
  const adjustments = Object.entries(trace.adjustments).map(([name, value]) => {
    const strength = value > 0 ? Math.abs(Math.log(value)) / scale.factor : 0;
    return el("div", { class: "bar factor", "data-adjustment": name, "data-value": value },
      el("span", { class: "name" }, name),
      el("span", { class: "track centered" },
        sized(el("span", { class: value >= 1 ? "fill up" : "fill down" }), strength / 2)),
      el("span", { class: "num" }, `x${fixed(value, 3)}`));
  });
  const rerank = Object.keys(trace.rerank ?? {}).length
    ? el("p", { class: "dim" }, "rerank: ", Object.entries(trace.rerank)
      .map(([k, v]) => `${k} ${fixed(v)}`).join(", "))
    : null;
  return [
    channels,
    el("h4", {}, "channel contributions (fusion)"),
    ...fusion,
    el("p", { class: "sum" }, `fused score ${fixed(trace.fused_score)}`),
    rerank,
    el("h4", {}, "adjustments (factors; 1 = no effect)"),
    ...(adjustments.length ? adjustments : [el("p", { class: "dim" }, "none")]),
    el("p", { class: "sum" }, `final score ${fixed(trace.final_score)}`),
    trace.promises?.length
      ? el("p", { class: "promises" }, `promises kept: ${trace.promises.join("; ")}`) : null,
    el("p", { class: "dim" }, `filters: ${trace.filters.join("; ")}`),
  ];
}

function sized(node, fraction) {
  node.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return node;
}

// -- browse and curate -------------------------------------------------------------------------

const page = { offset: 0, limit: 25, filters: {}, forgotten: false, count: 0 };
let current = null;

function listPath(params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (Array.isArray(value)) value.forEach((v) => query.append(name, v));
    else if (value !== undefined && value !== null && value !== "") query.append(name, String(value));
  }
  return `/v1/memories?${query}`;
}

async function browse(event) {
  event?.preventDefault();
  const form = $("#browse-form");
  if (event) page.offset = 0;
  const f = filtersOf(form);
  page.limit = Number(new FormData(form).get("limit") || 25);
  page.forgotten = form.elements.include_forgotten.checked;
  const path = listPath({
    limit: page.limit, offset: page.offset, include_forgotten: page.forgotten,
    type: f.types ?? [], tag: f.tags ?? [], project: f.project, session_id: f.session_id,
    since: f.since, until: f.until,
  });
  const { memories } = await api("GET", path);
  page.count = memories.length;
  $("#memories tbody").replaceChildren(...memories.map((m) =>
    el("tr", {
      "data-id": m.id,
      "data-superseded": superseded(m) ? "true" : null,
      class: [m.forgotten_at ? "forgotten" : "", superseded(m) ? "superseded" : ""].join(" ").trim(),
      onclick: () => attempt(() => openMemory(m.id)),
    },
      el("td", {}, when(m.event_time ?? m.created_at)),
      el("td", {}, m.type),
      el("td", { class: "content" },
        superseded(m) ? el("span", { class: "flag", title: supersededTitle(m) }, "superseded") : null,
        superseded(m) ? " " : null,
        m.content.length > 240 ? `${m.content.slice(0, 240)} …` : m.content),
      el("td", {}, m.tags.join(", ")))));
  $("#page-state").textContent = memories.length
    ? `${page.offset + 1}-${page.offset + memories.length}` : "no memories";
  $("#prev").disabled = page.offset === 0;
  $("#next").disabled = memories.length < page.limit;
}

/** What a superseded row's flag says on hover: by what, or since when. */
function supersededTitle(m) {
  return m.superseded_by ? `replaced by ${m.superseded_by}` : `no longer current since ${when(m.valid_until)}`;
}

async function openMemory(id) {
  const memory = await api("GET", `/v1/memories/${encodeURIComponent(id)}`);
  current = memory;
  showTab("browse");
  $("#detail").hidden = false;
  $("#detail-id").textContent = memory.id;
  $("#detail-content").textContent = memory.content;
  $("#lineage").replaceChildren(el("p", { class: "dim" }, "reading…"));
  $("#session").replaceChildren();
  $("#pin").textContent = memory.pinned ? "Unpin" : "Pin";
  $("#forget").textContent = memory.forgotten_at ? "Forgotten" : "Forget";
  $("#forget").disabled = Boolean(memory.forgotten_at);
  delete $("#forget").dataset.armed;
  const edit = $("#edit-form").elements;
  edit.content.value = memory.content;
  edit.type.value = memory.type;
  edit.tags.value = memory.tags.join(", ");
  edit.project.value = memory.project ?? "";
  edit.event_time.value = memory.event_time ?? "";
  $("#record").replaceChildren(...Object.entries(memory).flatMap(([name, value]) => [
    el("dt", {}, name),
    el("dd", {}, typeof value === "string" ? value : JSON.stringify(value)),
  ]));
  await Promise.all([showLineage(memory), showSession(memory)]);
}

async function showLineage(memory) {
  const holder = $("#lineage");
  const parts = [];
  if (memory.superseded_by) {
    const newer = await api("GET", `/v1/memories/${encodeURIComponent(memory.superseded_by)}`)
      .catch(() => null);
    parts.push(el("p", {}, "superseded by ", memoryLink(memory.superseded_by),
      newer && !newer.forgotten_at ? el("span", { class: "quote" }, newer.content)
        : newer ? " (forgotten)" : " (not visible)"));
  }
  if (memory.valid_until) parts.push(el("p", {}, `valid until ${when(memory.valid_until)}`));
  const { memories } = await api("GET", listPath({ superseded_by: memory.id, limit: 100 }));
  for (const older of memories) {
    parts.push(el("p", {}, "supersedes ", memoryLink(older.id),
      el("span", { class: "quote" }, older.content)));
  }
  holder.replaceChildren(...(parts.length ? parts : [el("p", { class: "dim" }, "current; supersedes nothing")]));
}

async function showSession(memory) {
  const holder = $("#session");
  if (!memory.session_id) {
    holder.replaceChildren(el("li", { class: "dim" }, "no session"));
    return;
  }
  const { memories } = await api("GET", listPath({
    session_id: memory.session_id, newest_first: false, limit: 1000,
  }));
  const at = memories.findIndex((m) => m.id === memory.id);
  const around = memories.slice(Math.max(0, at - 4), at < 0 ? 9 : at + 5);
  holder.replaceChildren(...around.map((m) => el("li", { class: m.id === memory.id ? "here" : "" },
    el("span", { class: "dim" }, `${when(m.event_time ?? m.created_at)} `),
    m.id === memory.id ? m.content : el("button", { type: "button", class: "link", onclick: () => attempt(() => openMemory(m.id)) }, m.content))));
}

function memoryLink(id) {
  return el("button", { type: "button", class: "link", onclick: () => attempt(() => openMemory(id)) }, id);
}

async function saveEdit(event) {
  event.preventDefault();
  if (!current) return;
  const form = event.target.elements;
  const changes = {};
  if (form.content.value !== current.content) changes.content = form.content.value;
  if (form.type.value !== current.type) changes.type = form.type.value;
  const tags = list(form.tags.value);
  if (tags.join("\u0000") !== current.tags.join("\u0000")) changes.tags = tags;
  const project = form.project.value.trim() || null;
  if (project !== (current.project ?? null)) changes.project = project;
  const eventTime = form.event_time.value.trim() || null;
  if (eventTime !== (current.event_time ?? null)) changes.event_time = eventTime;
  if (!Object.keys(changes).length) {
    notify("nothing changed", "info");
    return;
  }
  await api("PATCH", `/v1/memories/${encodeURIComponent(current.id)}`, changes);
  await Promise.all([openMemory(current.id), browse()]);
  notify("saved", "info");
}

async function togglePin() {
  if (!current) return;
  await api("PATCH", `/v1/memories/${encodeURIComponent(current.id)}`, { pinned: !current.pinned });
  await Promise.all([openMemory(current.id), browse()]);
}

async function forget() {
  const button = $("#forget");
  if (!current) return;
  if (!button.dataset.armed) { // a second click confirms (no modal dialogs on this page)
    button.dataset.armed = "1";
    button.textContent = "Click again to forget";
    return;
  }
  await api("DELETE", `/v1/memories/${encodeURIComponent(current.id)}`);
  notify(`forgotten: ${current.id}`, "info");
  $("#detail").hidden = true;
  current = null;
  await browse();
}

async function supersede(body) {
  if (!current) return;
  await api("POST", `/v1/memories/${encodeURIComponent(current.id)}/supersede`, body);
  await openMemory(current.id);
  notify("supersession saved", "info");
}

function supersedeForm(event) {
  event.preventDefault();
  const form = event.target.elements;
  const body = {};
  if (form.by.value.trim()) body.by = form.by.value.trim();
  if (form.until.value.trim()) body.until = form.until.value.trim();
  return supersede(body);
}

// -- the store at a glance -------------------------------------------------------------------

async function store() {
  const status = await api("GET", "/v1/status");
  const stats = status.store;
  const facts = [
    ["memories", stats.memories], ["forgotten", stats.forgotten], ["sessions", stats.sessions],
    ["with vectors", stats.with_vectors], ["embedder", status.embedder],
    ["fingerprint", fingerprintText(stats.fingerprint)],
    ["fingerprint matches", status.fingerprint_matches === null ? "not checked" : status.fingerprint_matches ? "yes" : "NO: reindex"],
    ["oldest", when(stats.oldest)], ["newest", when(stats.newest)],
    ["size", `${(stats.size_bytes / 1048576).toFixed(1)} MB`],
  ];
  if (stats.path) facts.push(["store", stats.path]);
  if (stats.vector_index) facts.push(["vector index", stats.vector_index === "own" ? "the tenant's own" : "the table's, shared"]);
  for (const line of stats.advice ?? []) facts.push(["advice", line]);
  $("#facts").replaceChildren(...facts.map(([name, value]) =>
    el("div", { class: "card", "data-fact": name }, el("span", { class: "dim" }, name), el("b", {}, String(value)))));
  countTable($("#by-type"), stats.by_type ?? {});
  countTable($("#by-source"), stats.by_source ?? {});
  const sources = status.sources;
  $("#sources").replaceChildren(...(sources ? [
    ["roots", sources.roots.join(", ") || "none"], ["files", sources.files],
    ["indexed", sources.indexed], ["chunks", sources.chunks],
    ["stale (changed since)", sources.stale.length], ["not indexed yet", sources.unindexed.length],
    ["missing from disk", sources.missing.length], ["unfinished", sources.pending.length],
    ["errors", sources.errors.length],
  ] : [["indexed folders", "none"]]).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
  growthChart($("#growth"), stats.added_by_day ?? {});
}

/** The stored vectors' fingerprint in short: the model and its dimension. */
function fingerprintText(fingerprint) {
  if (!fingerprint) return "none yet";
  try {
    const parsed = JSON.parse(fingerprint);
    return `${parsed.model_id ?? "?"} (${parsed.dimension ?? "?"} dimensions)`;
  } catch {
    return fingerprint;
  }
}

function countTable(table, counts) {
  const rows = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  table.replaceChildren(...(rows.length ? rows : [["none", 0]]).map(([name, n]) =>
    el("tr", {}, el("td", {}, name), el("td", { class: "num" }, String(n)))));
}

/** Memories stored per day as bars, and the running total as a line (a week at least,
 * ending on the last day a memory was stored). */
function growthChart(chart, perDay) {
  const width = 720;
  const height = 180;
  const pad = { left: 48, right: 12, top: 28, bottom: 24 };
  const plot = { width: width - pad.left - pad.right, height: height - pad.top - pad.bottom };
  chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const days = Object.keys(perDay).sort();
  if (!days.length) {
    chart.replaceChildren(svg("text", { x: pad.left, y: height / 2 }, "no memories yet"));
    return;
  }
  const DAY = 86400000;
  const time = (d) => Date.parse(`${d}T00:00:00Z`);
  const last = time(days[days.length - 1]);
  // A week at least, ending on the last day stored: never a day that has not come yet.
  const first = Math.min(time(days[0]), last - 6 * DAY);
  const slots = Math.round((last - first) / DAY) + 1;
  const slot = plot.width / slots;
  const x = (d) => pad.left + (Math.round((time(d) - first) / DAY) + 0.5) * slot;
  const bottom = height - pad.bottom;
  let total = 0;
  const totals = days.map((d) => (total += perDay[d]));
  const y = (n) => bottom - (n / total) * plot.height;
  const most = Math.max(...days.map((d) => perDay[d]));
  const barWidth = Math.max(1, Math.min(24, slot * 0.8));
  const barHeight = (n) => (n / most) * plot.height * 0.5;
  const line = [`${pad.left},${bottom}`];
  days.forEach((d, i) => line.push(`${x(d)},${y(i ? totals[i - 1] : 0)}`, `${x(d)},${y(totals[i])}`));
  line.push(`${width - pad.right},${y(total)}`);
  const lastDay = days[days.length - 1];
  chart.replaceChildren(
    svg("line", { x1: pad.left, y1: bottom, x2: width - pad.right, y2: bottom, class: "axis" }),
    ...days.map((d) => svg("rect", {
      x: x(d) - barWidth / 2, y: bottom - barHeight(perDay[d]), width: barWidth,
      height: barHeight(perDay[d]), class: "day", "data-day": d, "data-count": perDay[d],
    })),
    svg("polyline", { class: "total", points: line.join(" ") }),
    svg("text", { x: 4, y: pad.top + 4 }, String(total)),
    svg("text", { x: 4, y: bottom }, "0"),
    svg("text", { x: pad.left, y: height - 6 }, new Date(first).toISOString().slice(0, 10)),
    svg("text", { x: width - pad.right, y: height - 6, "text-anchor": "end" }, lastDay),
    svg("text", { x: width - pad.right, y: 14, "text-anchor": "end" },
      `${total} in all; most in a day: ${most}`),
  );
}

// -- the first view -------------------------------------------------------------------------

/** Before any search: how many memories there are and the newest, or how to add some. */
async function welcome() {
  const holder = $("#welcome");
  let status;
  try {
    status = await api("GET", "/v1/status");
  } catch (error) {
    holder.replaceChildren(el("p", {}, error.message));
    return;
  }
  const count = status.store.memories;
  if (!count) {
    holder.replaceChildren(
      el("h2", {}, "This store holds no memory yet"),
      el("p", {}, "Add some, then search them here:"),
      el("pre", {}, [
        'recalld add "Prefers tea over coffee." --type insight',
        "recalld import chat.jsonl          # a conversation transcript",
        "recalld index ~/notes              # a folder of notes or docs",
      ].join("\n")),
      el("p", { class: "dim" }, "or POST /v1/memories, or the memory_add tool over MCP."));
    return;
  }
  const { memories } = await api("GET", listPath({ limit: 5 }));
  holder.replaceChildren(
    el("h2", {}, `${count} memories `, el("span", { class: "dim" },
      `stored ${day(status.store.oldest)} to ${day(status.store.newest)}; ask a question above`)),
    el("h3", {}, "Newest"),
    el("ol", { class: "hits" }, memories.map((m) => el("li", { class: "hit", "data-id": m.id },
      el("div", { class: "meta" },
        el("span", {}, when(m.event_time ?? m.created_at)),
        el("span", { class: "type" }, m.type),
        superseded(m) ? el("span", { class: "flag" }, "superseded") : null,
        el("button", { type: "button", class: "link", onclick: () => attempt(() => openMemory(m.id)) },
          m.id)),
      el("p", { class: "content" }, m.content.length > 240 ? `${m.content.slice(0, 240)} …` : m.content)))));
}

// -- tabs and wiring -------------------------------------------------------------------------------

function showTab(name) {
  for (const button of document.querySelectorAll(".tab")) {
    button.setAttribute("aria-selected", String(button.dataset.tab === name));
  }
  for (const section of document.querySelectorAll("main > section")) {
    section.hidden = section.id !== `tab-${name}`;
  }
}

function start() {
  filterFields($("#search-form"));
  filterFields($("#browse-form"));
  const select = $("#edit-form").elements.type;
  select.replaceChildren(...TYPES.map((t) => el("option", { value: t }, t)));
  showKeyState();
  $("#key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("#key").value.trim();
    if (key) sessionStorage.setItem(KEY, key);
    $("#key").value = "";
    showKeyState();
    notify("");
    attempt(welcome);
  });
  $("#key-clear").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    showKeyState();
  });
  for (const button of document.querySelectorAll(".tab")) {
    button.addEventListener("click", () => {
      showTab(button.dataset.tab);
      if (button.dataset.tab === "browse") attempt(browse);
      if (button.dataset.tab === "store") attempt(store);
    });
  }
  $("#search-form").addEventListener("submit", (event) => attempt(() => search(event)));
  $("#browse-form").addEventListener("submit", (event) => attempt(() => browse(event)));
  $("#prev").addEventListener("click", () => {
    page.offset = Math.max(0, page.offset - page.limit);
    attempt(browse);
  });
  $("#next").addEventListener("click", () => {
    page.offset += page.limit;
    attempt(browse);
  });
  $("#edit-form").addEventListener("submit", (event) => attempt(() => saveEdit(event)));
  $("#supersede-form").addEventListener("submit", (event) => attempt(() => supersedeForm(event)));
  $("#supersede-clear").addEventListener("click", () => attempt(() => supersede({ clear: true })));
  $("#pin").addEventListener("click", () => attempt(togglePin));
  $("#forget").addEventListener("click", () => attempt(forget));
  document.body.dataset.ready = "true";
  attempt(welcome);
}

start();
