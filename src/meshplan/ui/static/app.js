// meshplan web app: builds the page's form from the request model's JSON schema
// (/openapi.json), keeps the inputs in the URL, runs the job and shows tables, plots, downloads.
"use strict";
const page = JSON.parse(document.body.dataset.page);
const $ = (id) => document.getElementById(id);
let schemas = {}, catalog = {models: [], gpus: []}, running = null;

async function getJSON(url, options) {
  const response = await fetch(url, options);
  const data = await response.json().catch(() => ({detail: `HTTP ${response.status}`}));
  if (!response.ok) throw new Error(data.detail || `HTTP ${response.status}`);
  return data;
}

function resolve(s) {
  if (s.$ref) return resolve(schemas[s.$ref.split("/").pop()]);
  if (s.allOf && s.allOf.length === 1) return {...resolve(s.allOf[0]), ...s, allOf: undefined};
  if (s.anyOf) {
    const real = s.anyOf.filter((x) => x.type !== "null");
    if (real.length === 1) return {...resolve(real[0]), description: s.description, default: s.default, nullable: true};
  }
  return s;
}

// ---- form -------------------------------------------------------------------------------
function buildForm(schema, path, parent, required) {
  const entries = Object.entries(schema.properties || {});
  const first = (name) => ((required || []).includes(name) ? 0 : 1);  // required fields lead
  entries.sort((a, b) => first(a[0]) - first(b[0]));
  for (const [name, raw] of entries) {
    const s = resolve(raw), key = path ? `${path}.${name}` : name;
    if (s.type === "object" && s.properties) {
      const box = document.createElement(name === "hardware" ? "fieldset" : "details");
      const head = document.createElement(name === "hardware" ? "legend" : "summary");
      head.textContent = name;
      box.append(head);
      buildForm(s, key, box, s.required || []);
      parent.append(box);
    } else {
      parent.append(field(key, name, s, (required || []).includes(name)));
    }
  }
}

function field(key, name, s, required) {
  const div = document.createElement("div"), label = document.createElement("label");
  div.className = "field" + (required ? " req" : "");
  label.textContent = name;
  label.htmlFor = key;
  let input;
  if (s.enum || s.type === "boolean") {
    input = document.createElement("select");
    const options = s.enum || [true, false];
    input.append(new Option(required ? "" : `(default${s.default != null ? ": " + s.default : ""})`, ""));
    for (const v of options) input.append(new Option(String(v), String(v)));
  } else if (name === "gpus") {
    input = document.createElement("select");
    input.multiple = true;
    for (const g of catalog.gpus) input.append(new Option(g.name, g.name));
  } else {
    input = document.createElement("input");
    input.type = s.type === "integer" || s.type === "number" ? "number" : "text";
    if (input.type === "number") input.step = "any";
    if (name === "model") input.setAttribute("list", "model-list");
    if (name === "gpu") input.setAttribute("list", "gpu-list");
    if (s.default != null && typeof s.default !== "object") input.placeholder = String(s.default);
    if (s.type === "array") input.placeholder = "comma-separated";
    if (s.type === "object") input.placeholder = "name=value, ...";
  }
  input.id = input.name = key;
  input.dataset.kind = s.type === "array" ? `array-${resolve(s.items || {}).type}` : (s.type || "string");
  input.title = s.description || "";
  div.append(label, input);
  return div;
}

function datalists() {
  for (const [id, items] of [["model-list", catalog.models], ["gpu-list", catalog.gpus]]) {
    const list = document.createElement("datalist");
    list.id = id;
    for (const item of items) list.append(new Option(item.description || item.vendor || "", item.name));
    document.body.append(list);
  }
}

function convert(input) {
  const kind = input.dataset.kind, text = input.value.trim();
  if (input.multiple) return [...input.selectedOptions].map((o) => o.value);
  if (kind === "boolean") return text === "true";
  if (kind === "integer" || kind === "number") return Number(text);
  if (kind.startsWith("array-")) return text.split(",").map((x) => x.trim()).filter(Boolean)
      .map((x) => (kind === "array-integer" || kind === "array-number" ? Number(x) : x));
  if (kind === "object") return Object.fromEntries(text.split(",").filter(Boolean)
      .map((pair) => { const [k, v] = pair.split("="); return [k.trim(), Number(v)]; }));
  return text;
}

function inputs() { return [...$("fields").querySelectorAll("input, select")]; }

function collect() {
  const body = {};
  for (const input of inputs()) {
    const empty = input.multiple ? !input.selectedOptions.length : input.value.trim() === "";
    if (empty) continue;
    const parts = input.name.split(".");
    let at = body;
    for (const p of parts.slice(0, -1)) at = at[p] = at[p] || {};
    at[parts.at(-1)] = convert(input);
  }
  return body;
}

function query() {
  const params = new URLSearchParams();
  for (const input of inputs()) {
    if (input.multiple) for (const o of input.selectedOptions) params.append(input.name, o.value);
    else if (input.value.trim() !== "") params.set(input.name, input.value.trim());
  }
  return params;
}

function refill(params) {
  for (const input of inputs()) {
    const values = params.getAll(input.name);
    if (!values.length) continue;
    if (input.multiple) for (const o of input.options) o.selected = values.includes(o.value);
    else input.value = values[0];
  }
}

function shareURL(run) {
  const params = query();
  if (run) params.set("run", "1");
  return `${location.pathname}?${params}`;
}

// ---- running ----------------------------------------------------------------------------
function clear() {
  $("error").hidden = true;
  $("downloads").hidden = true;
  $("downloads").replaceChildren();
  $("result").replaceChildren();
  $("plots").replaceChildren();
  $("status").textContent = "";
}

function fail(message) {
  $("error").textContent = message;
  $("error").hidden = false;
  $("status").textContent = "";
  $("progress").hidden = true;
  $("cancel").hidden = true;
}

async function run(event) {
  if (event) event.preventDefault();
  clear();
  history.replaceState(null, "", shareURL(true));
  $("share").href = shareURL(true);
  try {
    if (page.upload === "records") return await startJob(await uploadBody($("records"), page.endpoint));
    const body = JSON.stringify(collect());
    const options = {method: "POST", headers: {"Content-Type": "application/json"}, body};
    if (!page.job) {
      $("status").textContent = "computing…";
      const result = await getJSON(`${page.endpoint}?plots=true`, options);
      $("status").textContent = "done";
      return show(result, null);
    }
    await startJob(await getJSON(page.endpoint, options));
  } catch (err) {
    fail(err.message);
  }
}

async function uploadBody(input, url) {
  const file = input.files[0];
  if (!file) throw new Error("choose a file to upload");
  return getJSON(`${url}?filename=${encodeURIComponent(file.name)}`, {method: "POST", body: file});
}

function startJob(job) {
  running = job.id;
  $("cancel").hidden = false;
  $("progress").hidden = false;
  $("progress").removeAttribute("value");
  $("status").textContent = `job ${job.id} ${job.state}`;
  return new Promise((done) => {
    const source = new EventSource(`/api/jobs/${job.id}/events`);
    source.addEventListener("progress", (e) => progress(JSON.parse(e.data)));
    source.addEventListener("end", async (e) => {
      source.close();
      await finished(JSON.parse(e.data));
      done();
    });
    source.onerror = () => { source.close(); fail("lost the connection to the server"); done(); };
  });
}

function progress(job) {
  const bar = $("progress");
  if (job.total) { bar.max = job.total; bar.value = job.done; }
  const counts = job.total ? ` ${job.done} / ${job.total}` : "";
  $("status").textContent = `job ${job.id} ${job.state}${counts}`;
}

async function finished(view) {
  $("progress").hidden = true;
  $("cancel").hidden = true;
  running = null;
  if (view.state === "cancelled") return fail(`job ${view.id} cancelled`);
  if (view.state === "failed") return fail(view.error);
  const job = await getJSON(`/api/jobs/${view.id}`);
  $("status").textContent = `job ${job.id} done in ${(job.finished_s - job.started_s).toFixed(1)} s`;
  show(job.result, job);
}

async function cancel() {
  if (running) await getJSON(`/api/jobs/${running}`, {method: "DELETE"}).catch((e) => fail(e.message));
}

// ---- results ----------------------------------------------------------------------------
function show(result, job) {
  downloads(result, job);
  const report = result.report;
  if (report) {
    $("result").append(keyTable("headline", report.headline));
    for (const note of report.notes) $("result").append(paragraph(note, "note"));
  } else if (result.why) {
    $("result").append(paragraph(result.why, "why"));
  }
  render(result, $("result"), "result");
  for (const section of (report || {}).sections || []) {
    $("plots").append(heading(section.title));
    if (section.text) $("plots").append(paragraph(section.text, "why"));
    if (section.figure) plot(section.figure);
  }
}

function paragraph(text, cls) {
  const p = document.createElement("p");
  p.className = cls;
  p.textContent = text;
  return p;
}

function downloads(result, job) {
  const box = $("downloads");
  const data = {...result};
  delete data.report;
  delete data.why;
  const link = (text, href, name) => {
    const a = document.createElement("a");
    a.textContent = text;
    a.href = href;
    if (name) a.download = name;
    box.append(a);
  };
  if (job) link("JSON (--json)", `/api/jobs/${job.id}/json`);
  else link("JSON (--json)", URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)],
                                                         {type: "application/json"})), "meshplan.json");
  if (job && (result.plans || []).length)
    for (const target of page.exports) link(`${target} launch config`, `/api/jobs/${job.id}/export/${target}?index=1`);
  box.hidden = false;
}

function cell(v) {
  if (typeof v === "number") return Number.isInteger(v) ? v.toLocaleString("en") : v.toPrecision(4);
  if (v === null || v === undefined) return "";
  if (Array.isArray(v) && v.length > 12) return `${v.length} values (in the JSON download)`;
  return Array.isArray(v) ? v.map(cell).join(", ") : String(v);
}

function render(data, parent, title) {
  const scalars = Object.entries(data).filter(([k]) => k !== "why" && k !== "report").filter(([, v]) => v === null || typeof v !== "object" ||
      (Array.isArray(v) && v.every((x) => typeof x !== "object")));
  if (scalars.length) parent.append(keyTable(title, scalars));
  for (const [key, value] of Object.entries(data)) {
    if (key === "report" || value === null || typeof value !== "object") continue;
    if (Array.isArray(value) && value.length && typeof value[0] === "object") parent.append(rowTable(key, value));
    else if (!Array.isArray(value)) render(value, parent, key);
  }
}

function heading(text) { const h = document.createElement("h3"); h.textContent = text; return h; }

function keyTable(title, entries) {
  const box = document.createElement("div"), table = document.createElement("table");
  for (const [k, v] of entries) {
    const tr = table.insertRow();
    tr.insertCell().textContent = k;
    tr.cells[0].className = "key";
    tr.insertCell().textContent = cell(v);
  }
  box.append(heading(title), table);
  return box;
}

function rowTable(title, rows) {
  const box = document.createElement("div"), table = document.createElement("table");
  table.id = `table-${title}`;
  const chosen = title === "plans" && page.columns.length ? page.columns : Object.keys(rows[0]);
  const columns = chosen.filter((k) => rows.some((r) => r[k] != null && typeof r[k] !== "object"));
  const head = table.createTHead().insertRow();
  for (const c of ["#", ...columns]) { const th = document.createElement("th"); th.textContent = c; head.append(th); }
  rows.forEach((row, i) => {
    const tr = table.insertRow();
    if (i === 0 && title === "plans") tr.className = "best";
    tr.insertCell().textContent = i + 1;
    for (const c of columns) tr.insertCell().textContent = cell(row[c]);
  });
  box.append(heading(title), table);
  return box;
}

function plot(json) {
  const div = document.createElement("div");
  div.className = "plot";
  $("plots").append(div);
  const fig = JSON.parse(json);
  if (window.Plotly) Plotly.newPlot(div, fig.data, fig.layout, {responsive: true});
}

// ---- start ------------------------------------------------------------------------------
async function uploadConfig() {
  try {
    const up = await uploadBody($("config"), "/api/configs");
    catalog.models.push({name: up.model, description: `${up.name} (uploaded)`});
    $("model-list").append(new Option(`${up.name} (uploaded)`, up.model));
    $("model").value = up.model;
    $("status").textContent = `uploaded ${up.name}: ${up.parameters.toLocaleString("en")} parameters, model ${up.model}`;
  } catch (err) {
    fail(err.message);
  }
}

async function main() {
  const [api, models, gpus] = await Promise.all([getJSON("/openapi.json"), getJSON("/api/models"), getJSON("/api/gpus")]);
  schemas = api.components.schemas;
  catalog = {models, gpus};
  datalists();
  if (page.schema) buildForm(schemas[page.schema], "", $("fields"), schemas[page.schema].required);
  const params = new URLSearchParams(location.search);
  refill(params);
  $("share").href = shareURL(true);
  $("form").addEventListener("submit", run);
  $("form").addEventListener("input", () => { $("share").href = shareURL(true); });
  $("cancel").addEventListener("click", cancel);
  if ($("config")) $("config").addEventListener("change", uploadConfig);
  document.body.dataset.ready = "1";
  if (params.get("run") === "1" && page.upload !== "records") run();
}

main().catch((err) => fail(err.message));
