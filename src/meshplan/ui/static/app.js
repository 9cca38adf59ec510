// meshplan web app: builds the page's form from the request model's JSON schema
// (/openapi.json), keeps the inputs in the URL, runs the job and shows tables, plots, downloads.
"use strict";
const page = JSON.parse(document.body.dataset.page);
const $ = (id) => document.getElementById(id);
const F = window.meshplanFormat;
let schemas = {}, catalog = {models: [], gpus: [], engines: []}, running = null;

async function getJSON(url, options) {
  const response = await fetch(url, options);
  const data = await response.json().catch(() => ({detail: `HTTP ${response.status}`}));
  if (!response.ok) throw new Error(data.detail || `HTTP ${response.status}`);
  return data;
}

// A property's schema with its $ref / allOf / nullable anyOf resolved; the property's own label
// (title), help (description) and default stay the property's, not the referenced model's.
function resolve(s) {
  const own = {title: s.title, description: s.description, default: s.default};
  if (s.$ref) return {...resolve(schemas[s.$ref.split("/").pop()]), ...own};
  if (s.allOf && s.allOf.length === 1) return {...resolve(s.allOf[0]), ...s, allOf: undefined};
  if (s.anyOf) {
    const real = s.anyOf.filter((x) => x.type !== "null");
    if (real.length === 1) return {...resolve(real[0]), ...own, nullable: true};
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
      head.textContent = s.title || name;
      box.append(head);
      buildForm(s, key, box, s.required || []);
      parent.append(box);
    } else {
      parent.append(field(key, name, s, (required || []).includes(name)));
    }
  }
}

// A simulation given GPUs and none of these gets a layout chosen (serve simulate --num-gpus).
const LAYOUT_KEYS = ["plan.tp", "plan.pp", "plan.ep", "plan.dp", "plan.replicas"];

function field(key, name, s, required) {
  const div = document.createElement("div"), label = document.createElement("label");
  div.className = "field" + (required ? " req" : "");
  label.textContent = s.title || name;  // the field's label with its unit (meshplan/ui/labels.py)
  label.htmlFor = key;
  let input;
  const picker = catalogChoices(name, s);
  if (picker) {
    input = document.createElement("select");
    input.multiple = name === "gpus";
    if (!input.multiple) input.append(new Option(placeholder(s, required, picker.what), ""));
    for (const [value, text] of picker.options) input.append(new Option(text, value));
  } else if (s.enum || s.type === "boolean") {
    input = document.createElement("select");
    const options = s.enum || [true, false];
    input.append(new Option(placeholder(s, required), ""));
    for (const v of options) input.append(new Option(String(v), String(v)));
  } else {
    input = document.createElement("input");
    input.type = s.type === "integer" || s.type === "number" ? "number" : "text";
    if (input.type === "number") input.step = "any";
    if (name === "model") input.setAttribute("list", "model-list");
    if (s.default != null && typeof s.default !== "object") input.placeholder = String(s.default);
    if (page.schema === "SimulateRequest" && LAYOUT_KEYS.includes(key)) input.placeholder = "chosen for the GPUs";
    if (s.type === "array") input.placeholder = "comma-separated";
    if (s.type === "object") input.placeholder = "name=value, ...";
  }
  input.id = input.name = key;
  input.dataset.kind = s.type === "array" ? `array-${resolve(s.items || {}).type}` : (s.type || "string");
  input.title = s.description || "";
  const help = document.createElement("small");
  help.className = "help";
  help.id = `help-${key}`;
  help.textContent = F.help(s.description);
  input.setAttribute("aria-describedby", help.id);
  div.append(label, input, help);
  return div;
}

// GPU and engine fields pick from the catalogs (GET /api/gpus, /api/engines); a model is typed
// (a catalog name from the list, hf:ORG/NAME, or an uploaded config).
function catalogChoices(name, s) {
  if ((name === "gpu" || name === "gpus") && !s.enum)
    return {what: "a GPU", options: catalog.gpus.map((g) => [g.name, `${g.name} (${g.vendor}, ${F.num(g.hbm_bytes / 2 ** 30)} GiB)`])};
  if (name === "engine" && !s.enum) return {what: "an engine", options: catalog.engines.map((e) => [e, e])};
  return null;
}

function placeholder(s, required, what) {
  if (required) return `(choose ${what || "one"})`;
  return `(default${s.default != null && typeof s.default !== "object" ? ": " + s.default : ""})`;
}

function datalists() {
  const list = document.createElement("datalist");
  list.id = "model-list";
  for (const item of catalog.models) list.append(new Option(item.description || "", item.name));
  document.body.append(list);
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
    if (input.tagName === "SELECT")  // a name not in the catalog still reaches the server, which says why
      for (const v of values) if (![...input.options].some((o) => o.value === v)) input.append(new Option(v, v));
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
  const report = result.report, out = $("result");
  const reasons = extrapolating(result);
  if (reasons.length) out.append(warning("extrapolating", "Extrapolating: this question lies outside what the "
      + "calibration records span, so its p10-p90 band is twice as wide", reasons));
  if (report) out.append(keyTable("Headline", headline(report.headline, result), "headline"));
  const said = notes(result);
  if (said.length) out.append(noteList(said));
  const sectionTexts = ((report || {}).sections || []).map((s) => s.text);
  if (result.why && !sectionTexts.includes(result.why))
    out.append(paragraph(result.why, result.fits === false ? "why warning" : "why"));
  noPlanReasons(result, out);
  render(result, out, "Details", null);
  for (const section of (report || {}).sections || []) {
    $("plots").append(heading(section.title));
    if (section.text) $("plots").append(paragraph(section.text, "why"));
    if (section.figure) plot(section.figure);
  }
}

// The reasons a training answer (or the winning plan) extrapolates beyond the calibration records.
function extrapolating(result) {
  const winner = (result.plans || [])[0] || {};
  return [...new Set([...(result.extrapolating || []), ...(winner.extrapolating || [])])];
}

// The report's headline rows. Those the page names (page.headline: row -> paths in the answer)
// are written from the answer's numbers exactly as the details write the same field (one format
// per quantity), with their band; a row named by a key of a `.*` object gets that key's label.
function headline(rows, result) {
  const spec = page.headline || [];
  const named = Object.fromEntries(spec.filter(([, p]) => !p.endsWith(".*")));
  const groups = spec.filter(([, p]) => p.endsWith(".*")).map(([, p]) => p.slice(0, -2));
  const texts = (paths) => { const t = paths.map((p) => F.pathText(result, p)); return t.includes(null) ? null : t.join(" / "); };
  return rows.filter(([name]) => !name.endsWith(", p10-p90")).map(([name, text]) => {
    if (named[name]) return [name, texts(named[name].split(" / ")) ?? text];
    const group = groups.find((g) => name in (pick(result, g) || {}));
    return group ? [F.label(name), texts([`${group}.${name}`]) ?? text] : [name, text];
  });
}

// Every note of an answer, once each: the report's (what was chosen; extrapolation is a warning
// of its own), the answer's `notes` (a chosen layout, the engine release read) and each row's
// (a validation record's), the row's id first.
function notes(result) {
  const all = ((result.report || {}).notes || []).filter((n) => !n.startsWith("Extrapolating"));
  all.push(...(Array.isArray(result.notes) ? result.notes : []));
  for (const rows of Object.values(result).filter(isRows))
    for (const row of rows) for (const n of (Array.isArray(row.notes) ? row.notes : [])) all.push(row.id ? `${row.id}: ${n}` : n);
  return [...new Set(all)];
}

// A plan search with a cluster size where nothing fits: the closest plans and what they miss by.
function noPlanReasons(result, parent) {
  const searches = Array.isArray(result.search) ? result.search : result.search ? [result.search] : [];
  for (const s of searches) {
    if (s.num_gpus === undefined || (result.plans || []).some((p) => (p.hardware || {}).num_gpus === s.num_gpus)) continue;
    const why = [...(s.closest || []).map((c) => `closest: ${c}`), ...(s.invalid_reasons || []).slice(0, 3)];
    parent.append(warning(`no-plan-${s.num_gpus}`, `No plan fits on ${s.num_gpus} GPUs: ${s.rejected_memory} of `
        + `${s.evaluated} candidate layouts need more memory than the GPU has`, why));
  }
}

function warning(id, headline, items) { return listBox(id, "warning", headline, items); }

function noteList(items) { return listBox("notes", "notes", "Notes", items); }

function listBox(id, cls, headline, items) {
  const box = document.createElement("div"), list = document.createElement("ul");
  box.className = cls;
  box.id = id;
  box.append(paragraph(headline, `${cls}-head`));
  for (const item of items) { const li = document.createElement("li"); li.textContent = item; list.append(li); }
  box.append(list);
  return box;
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
                                                         {type: "application/json"})),
                 `meshplan-${page.path.replace("/", "-")}.json`);
  if (job && (result.plans || []).length)
    for (const target of page.exports) link(`${target} launch config`, `/api/jobs/${job.id}/export/${target}?index=1`);
  box.hidden = false;
}

const shown = (data, key) => !F.HIDDEN.has(key) && !F.merged(data, key);
const isRows = (v) => Array.isArray(v) && v.length > 0 && typeof v[0] === "object" && v[0] !== null;

// Scalars as one key-value table, then each nested object (its own table) and list of rows;
// an object the answer repeats (a memory estimate's plan inside a step estimate) shows once.
function render(data, parent, name, parentKey, seen = new Set()) {
  // empty, or a long series the report plots (a simulation's timeseries): not a table row
  const empty = (v) => v === null || v === "" || (Array.isArray(v) && (!v.length || (v.length > 12 && !isRows(v))));
  const scalars = Object.keys(data).filter((k) => shown(data, k) && !empty(data[k])
      && (typeof data[k] !== "object" || (Array.isArray(data[k]) && !isRows(data[k]))));
  if (scalars.length) parent.append(keyTable(name, scalars.map((k) => [F.label(k), F.valueText(data, k, parentKey)])));
  for (const key of Object.keys(data).filter((k) => shown(data, k) && !empty(data[k]) && typeof data[k] === "object")) {
    const id = `${key}:${JSON.stringify(data[key])}`;
    if (seen.has(id)) continue;
    seen.add(id);
    if (isRows(data[key])) parent.append(rowTable(key, data[key]));
    else if (!Array.isArray(data[key])) render(data[key], parent, F.title(key), key, seen);
  }
}

function heading(text) { const h = document.createElement("h3"); h.textContent = text; return h; }

function keyTable(title, entries, id) {
  const box = document.createElement("div"), table = document.createElement("table");
  if (id) table.id = `table-${id}`;
  for (const [k, v] of entries) {
    const tr = table.insertRow();
    tr.insertCell().textContent = k;
    tr.cells[0].className = "key";
    tr.insertCell().textContent = v;
  }
  box.append(heading(title), table);
  return box;
}

function rowTable(key, rows) {
  const box = document.createElement("div"), table = document.createElement("table");
  table.id = `table-${key}`;
  const paths = key === "plans" && page.columns.length ? [...page.columns]
      : Object.keys(rows[0]).filter((k) => shown(rows[0], k));
  if (key !== "plans" && rows.some((r) => (r.extrapolating || []).length)) paths.push("extrapolating");
  const cellable = (v) => v != null && (typeof v !== "object" || (Array.isArray(v) && v.length > 0));
  const columns = paths.map((p) => F.column(rows, p)).filter((c, i) => rows.some((r) => cellable(pick(r, paths[i]))));
  const head = table.createTHead().insertRow();
  for (const c of [{header: "#"}, ...columns]) { const th = document.createElement("th"); th.textContent = c.header; head.append(th); }
  const body = table.createTBody();
  rows.forEach((row, i) => {
    const tr = body.insertRow();
    if (i === 0 && key === "plans") tr.className = "best";
    tr.insertCell().textContent = i + 1;
    for (const c of columns) {
      const td = tr.insertCell();
      td.textContent = c.cells[i];
      if (!c.numeric) td.className = "text";
    }
  });
  box.append(heading(F.title(key)), table);
  return box;
}

const pick = (row, path) => path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), row);

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
  const [api, models, gpus, engines] = await Promise.all([getJSON("/openapi.json"), getJSON("/api/models"),
                                                          getJSON("/api/gpus"), getJSON("/api/engines")]);
  schemas = api.components.schemas;
  catalog = {models, gpus, engines};
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
