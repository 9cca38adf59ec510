// meshplan web app: how a result's fields read. Every JSON field name carries its unit
// (peak_bytes, step_time_s, ttft_ms, tokens_per_s_per_gpu, mfu); here it becomes a label and one
// number format per unit: bytes as GiB, fractions as %, seconds as s or ms, rates with thousands
// separators, never an exponent. A value with a p10-p90 band beside it (an `intervals` entry,
// `KEY_low`/`KEY_high` siblings, or `low`/`high` in its own object) shows as "412 (380-441)".
// The JSON is the CLI's; only its display is decided here.
"use strict";
const GIB = 2 ** 30;

const UNITS = [  // [pattern on a field name, kind]; the first match wins
  [/^n$|_count$|^num_|^completed$|^requests$|^iterations$/, "count"],
  [/rel_error/, "%"],
  [/(^|_)bytes$|_bytes_per_/, "bytes"],
  [/_gib$/, "GiB"],
  [/_s_per_\w*_s$/, "x"],
  [/_ms($|_)/, "ms"],
  [/tokens_per_s/, "tokens/s"],
  [/requests_per_s|^goodput_per_gpu$|^request_rate$/, "req/s"],
  [/^(mfu|hfu|attainment)$|_ratio$|_fraction$|utilization|hit_rate$/, "%"],
  [/(^|_)usd($|_)|^cost_per/, "USD"],
  [/_days$|^days_/, "days"],
  [/gpu_hours/, "GPU-hours"],
  [/(^|_)s$|^seconds$/, "s"],
];
const PARENT_UNITS = {breakdown: "s", slo_margins: "%", misses: "%"};
// Names read as words; the rest: underscores to spaces, unit suffix dropped, acronyms in capitals.
const LABELS = {
  tp: "TP", pp: "PP", vpp: "VPP", dp: "DP", cp: "CP", ep: "EP", etp: "expert TP",
  num_gpus: "GPUs", gpus: "GPUs", gpu: "GPU", micro_batch_size: "micro-batch", global_batch_size: "global batch",
  seq_len: "sequence length", dp_sharding: "DP sharding", tokens_per_s_per_gpu: "tokens/s per GPU",
  tokens_per_s: "tokens/s (all GPUs)", peak_bytes: "peak memory", gpu_memory_bytes: "GPU memory",
  headroom_bytes: "headroom", usd_per_million_tokens: "USD per million tokens", usd_per_step: "USD per step",
  time_to_train_days: "days to train", capacity_requests_per_s: "capacity", goodput_per_gpu: "goodput per GPU",
  goodput_requests_per_s: "goodput", cost_per_million_output_tokens: "USD per million output tokens",
  e2e_ms: "end-to-end latency", seconds: "search time", simulated_s_per_wall_s: "simulated time per wall time",
  rel_error: "error",
};
const ACRONYMS = {gpu: "GPU", gpus: "GPUs", mfu: "MFU", hfu: "HFU", kv: "KV", slo: "SLO", ttft: "TTFT", tpot: "TPOT",
                  itl: "ITL", e2e: "E2E", tp: "TP", pp: "PP", dp: "DP", cp: "CP", ep: "EP", moe: "MoE", lora: "LoRA",
                  cuda: "CUDA", cpu: "CPU", nvme: "NVMe", mtbf: "MTBF", usd: "USD", fsdp: "FSDP", p50: "p50", p90: "p90", p99: "p99"};
const BAND_VALUE_KEYS = ["value", "predicted", "mean", "p50", "median"];
// Fields a person does not read: the ranking's internal score, what is shown elsewhere (bands,
// warnings, notes, the report, the closest misses) and the plan object each ranked entry repeats.
const HIDDEN = new Set(["report", "why", "notes", "score", "score_unit", "intervals", "extrapolating", "tied_with_winner",
                        "closest", "invalid_reasons", "ties", "low", "high"]);

function unitOf(key, parent) {
  for (const [pattern, kind] of UNITS) if (pattern.test(key)) return kind;
  if (parent && PARENT_UNITS[parent]) return PARENT_UNITS[parent];
  if (parent && parent !== key) return unitOf(parent, null);
  return "";
}

function label(key) {
  if (LABELS[key]) return LABELS[key];
  const words = key.replace(/_(bytes|ms|gib)$|(?<!_per)_s$|_ms(?=_p\d+$)/, "").split("_");
  return words.map((w) => ACRONYMS[w] || w).join(" ").replace(/ per s\b/g, "/s");
}

function title(key) { const text = label(key); return text.charAt(0).toUpperCase() + text.slice(1); }

function num(v) {
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) || Math.abs(v) >= 1000) return Math.round(v).toLocaleString("en");
  if (v === 0) return "0";
  return v.toLocaleString("en", {minimumSignificantDigits: 3, maximumSignificantDigits: 3});
}

// A column's (or a lone value's) display unit and how one number of it reads (without the unit).
function scale(kind, values) {
  const finite = values.filter((v) => typeof v === "number" && Number.isFinite(v));
  switch (kind) {
    case "bytes": return {unit: "GiB", show: (v) => num(v / GIB)};
    case "%": return {unit: "%", show: (v) => num(v * 100)};
    case "s": return finite.length && finite.every((v) => Math.abs(v) < 1)
      ? {unit: "ms", show: (v) => num(v * 1000)} : {unit: "s", show: num};
    case "USD": return {unit: "USD", show: (v) => (Math.abs(v) < 1 ? v.toFixed(4) : num(v))};
    case "count": return {unit: "", show: num};
    default: return {unit: kind, show: num};
  }
}

function withUnit(text, unit) {
  if (!unit) return text;
  return unit === "%" ? `${text}%` : unit === "x" ? `${text}x` : unit === "USD" ? `$${text}` : `${text} ${unit}`;
}

function bandText(band, sc) {
  return band ? ` (${sc.show(band.low)}-${sc.show(band.high)})` : "";
}

// The band of `obj[key]`, from the three places a band may sit beside its value.
function bandOf(obj, key) {
  if (!obj || typeof obj !== "object") return null;
  const given = (obj.intervals || {})[key];
  if (given && typeof given.low === "number" && typeof given.high === "number") return given;
  if (typeof obj[`${key}_low`] === "number" && typeof obj[`${key}_high`] === "number")
    return {low: obj[`${key}_low`], high: obj[`${key}_high`]};
  if (typeof obj.low === "number" && typeof obj.high === "number" && key === bandValueKey(obj))
    return {low: obj.low, high: obj.high};
  return null;
}

function bandValueKey(obj) {
  const found = BAND_VALUE_KEYS.find((k) => typeof obj[k] === "number");
  if (found) return found;
  const numbers = Object.keys(obj).filter((k) => k !== "low" && k !== "high" && typeof obj[k] === "number");
  return numbers.length === 1 ? numbers[0] : null;
}

// Keys merged into another's cell: KEY_low / KEY_high beside KEY.
function merged(obj, key) {
  const m = key.match(/^(.*)_(low|high)$/);
  return Boolean(m && m[1] in obj);
}

function text(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (Array.isArray(v)) return v.length > 12 ? `${v.length} values (in the JSON download)` : v.map(text).join(", ");
  return String(v);
}

// One value with its unit (and band) as a key-value table shows it; the values of one unit in
// one object share a scale (a step's breakdown reads all in s, or all in ms).
function valueText(obj, key, parent) {
  const v = obj[key];
  if (typeof v !== "number") return text(v);
  const kind = unitOf(key, parent);
  const peers = Object.keys(obj).filter((k) => typeof obj[k] === "number" && unitOf(k, parent) === kind);
  const sc = scale(kind, peers.map((k) => obj[k]));
  return withUnit(sc.show(v), sc.unit) + bandText(bandOf(obj, key), sc);
}

// A table column: its header (label and unit) and each row's cell text, one unit for the column.
function column(rows, path) {
  const keys = path.split("."), key = keys.at(-1), parent = keys.at(-2) || null;
  const holder = (row) => keys.slice(0, -1).reduce((o, k) => (o || {})[k], row);
  const values = rows.map((row) => (holder(row) || {})[key]);
  const kind = unitOf(key, parent), sc = scale(kind, values);
  const unit = sc.unit && !(sc.unit.includes("/") && label(key).includes(sc.unit)) ? sc.unit : "";
  const header = label(key) + (unit ? ` (${unit === "USD" ? "$" : unit})` : "");
  const band = (i) => bandText(bandOf(holder(rows[i]), key), sc);
  const cells = values.map((v, i) => (typeof v === "number" ? sc.show(v) + band(i) : text(v)));
  const texts = values.map((v, i) => (typeof v === "number" ? withUnit(sc.show(v), sc.unit) + band(i) : text(v)));
  return {header, cells, texts, numeric: values.some((v) => typeof v === "number")};
}

const at = (obj, keys) => keys.reduce((o, k) => (o == null ? undefined : o[k]), obj);

// The text of the value at `path` ("metrics.ttft_ms.p50", "plans.0.mfu") in an answer, as the
// details show that value: a key-value entry's format (valueText), or a row's in its table's
// column; an error-statistics object (validate) as one line. null when there is no value.
function pathText(answer, path) {
  const keys = path.split("."), key = keys.at(-1), up = keys.slice(0, -1), holder = at(answer, up);
  const v = (holder || {})[key];
  if (v && typeof v === "object" && "median_abs_rel_error" in v) return statsText(v);
  if (typeof v !== "number") return null;
  const row = up.findIndex((k) => /^\d+$/.test(k));
  if (row >= 0 && Array.isArray(at(answer, up.slice(0, row))))
    return column(at(answer, up.slice(0, row)), keys.slice(row + 1).join(".")).texts[Number(up[row])];
  return valueText(holder, key, up.at(-1) || null);
}

function statsText(s) {
  if (!s.n) return "no rows";
  return `n=${num(s.n)}, median |error| ${valueText(s, "median_abs_rel_error", null)}, `
    + `p90 |error| ${valueText(s, "p90_abs_rel_error", null)}`;
}

// A form field's short help: the first sentence of its description (the field's docstring),
// without the "; None: ..." of what an empty field means or the docstring's code quotes, and a
// sentence over HELP_CHARS only up to its first "; " or ": " (the list of choices after it is in
// the picker). The whole description is the input's tooltip.
const HELP_CHARS = 120;

function help(description) {
  const first = (description || "").replace(/\s+/g, " ").trim().split(/(?<=[a-z0-9)])\. (?=[A-Z])/)[0];
  let text = first.split("; None:")[0].replace(/\.$/, "").replace(/`/g, "");
  if (text.length > HELP_CHARS) text = text.split(/; |: /)[0];
  return text;
}

window.meshplanFormat = {help, pathText, label, title, valueText, column, bandOf, merged, HIDDEN, scale, unitOf, withUnit, num};
