// dockyard view: the page's logic (vanilla JS, no build step).
//
// Routes (the URL's hash): #/run/R, #/run/R/step/KEY?filters, #/run/R/step/KEY/ep/ROW,
// #/compare/R/KEY/R2/KEY2/TASK. Data comes from this server's /api (read-only).
// Safety: a trajectory is untrusted text. Every value is put into the page with el() below,
// which makes text nodes (textContent), never HTML; the only HTML inserted is diff2html's
// output, which escapes the diff's content and file names itself. Charts: uPlot; tables:
// Grid.js (which renders cells as text); diffs: diff2html.
"use strict";

const state = { runs: [], chart: null, metricRows: {}, route: "", timer: null, keysSeen: "" };

// --- DOM helpers: text only ------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
const $ = (sel) => document.querySelector(sel);
const fmt = (x, d = 3) => (x === null || x === undefined ? "" : Number(x).toFixed(d));

async function api(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

function stepLabel(key) {
  return key.startsWith("step_") ? `step ${Number(key.slice(5))}` : key.replace(/^eval_/, "eval ");
}

// --- runs, metrics chart, live updates ---------------------------------------------------
async function loadRuns() {
  state.runs = await api("/api/runs");
  const ul = $("#runs");
  ul.replaceChildren(
    ...state.runs.map((r) =>
      el("li", {},
        el("a", { href: `#/run/${r.id}`, class: "run-link" }, r.name),
        el("span", { class: r.live ? "live" : "finished" }, r.live ? "● live" : "finished"),
        el("div", { class: "legend" }, `${r.keys.length} logged steps`)))
  );
  const keys = JSON.stringify(state.runs.map((r) => r.keys));
  const changed = keys !== state.keysSeen;
  state.keysSeen = keys;
  return changed;
}

async function loadMetrics() {
  for (const r of state.runs) state.metricRows[r.id] = await api(`/api/runs/${r.id}/metrics`);
  const names = new Set();
  for (const rows of Object.values(state.metricRows))
    for (const row of rows) for (const k of Object.keys(row)) if (k !== "step") names.add(k);
  const sel = $("#metric");
  const current = sel.value || (names.has("reward/mean") ? "reward/mean" : [...names][0]);
  sel.replaceChildren(...[...names].sort().map((n) => el("option", { value: n }, n)));
  if (current) sel.value = current;
  drawChart();
}

function drawChart() {
  const key = $("#metric").value;
  const box = $("#chart");
  if (state.chart) state.chart.destroy();
  box.replaceChildren();
  if (!key) return;
  const steps = new Set();
  const series = state.runs.map((r) => {
    const m = new Map();
    for (const row of state.metricRows[r.id] || []) if (key in row) { m.set(row.step, row[key]); steps.add(row.step); }
    return m;
  });
  const xs = [...steps].sort((a, b) => a - b);
  const data = [xs, ...series.map((m) => xs.map((x) => (m.has(x) ? m.get(x) : null)))];
  const colours = ["#3257d6", "#d63232", "#0a7d32", "#c77700", "#7a32d6", "#333"];
  state.chart = new uPlot({
    width: 350, height: 220, scales: { x: { time: false } },
    series: [{ label: "step" }, ...state.runs.map((r, i) => ({
      label: r.name, stroke: colours[i % colours.length], spanGaps: true, points: { show: true },
    }))],
    axes: [{ label: "step" }, { label: key, size: 60 }],
  }, data, box);
}

// --- routing -----------------------------------------------------------------------------
async function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  state.route = hash;
  const [path, query] = hash.split("?");
  const p = path.split("/").filter(Boolean).map(decodeURIComponent);
  const content = $("#content");
  try {
    if (p[0] === "run" && p.length === 2) return await showRun(+p[1]);
    if (p[0] === "run" && p[2] === "step" && p.length === 4)
      return await showStep(+p[1], p[3], new URLSearchParams(query || ""));
    if (p[0] === "run" && p[4] === "ep") return await showEpisode(+p[1], p[3], +p[5]);
    if (p[0] === "compare") return await showCompare(+p[1], p[2], +p[3], p[4], p[5]);
    if (state.runs.length) return await showRun(state.runs[0].id);
    content.replaceChildren(el("p", {}, "No runs."));
  } catch (e) {
    content.replaceChildren(el("p", { class: "error" }, String(e)));
  }
}

function crumbs(...items) {
  $("#crumbs").replaceChildren(...items.map(([text, href]) => el("a", { href }, text)));
}

async function showRun(rid) {
  const run = state.runs.find((r) => r.id === rid);
  if (!run) throw new Error(`no run ${rid}`);
  crumbs([run.name, `#/run/${rid}`]);
  const rows = state.metricRows[rid] || [];
  const byStep = new Map(rows.map((r) => [r.step, r]));
  const box = el("div", { id: "steps" });
  $("#content").replaceChildren(
    el("h2", { id: "run-title" }, run.name),
    el("p", { class: "legend" }, run.path, " · ", run.live ? "live: new steps appear" : "finished or stopped"),
    box);
  const data = run.keys.map((k) => {
    const m = byStep.get(Number(k.slice(5))) || {};
    return [k, stepLabel(k), fmt(m["reward/mean"]), fmt(m["pass_rate"]), fmt(m["staleness/mean"], 2), fmt(m["time/step_s"], 1)];
  });
  const grid = new gridjs.Grid({
    columns: [{ name: "key", hidden: true }, "step", "reward/mean", "pass_rate", "staleness", "s/step"],
    data, sort: true, pagination: { limit: 25 }, className: { tr: "step-row" },
  }).render(box);
  grid.on("rowClick", (_e, row) => { location.hash = `#/run/${rid}/step/${row.cells[0].data}`; });
}

const FILTERS = ["verdict", "env", "flag", "infra", "min_reward", "max_reward", "q", "task_id"];

async function showStep(rid, key, params) {
  const run = state.runs.find((r) => r.id === rid);
  crumbs([run.name, `#/run/${rid}`], [stepLabel(key), `#/run/${rid}/step/${key}`]);
  const all = await api(`/api/runs/${rid}/steps/${key}`);
  const q = new URLSearchParams();
  for (const f of FILTERS) if (params.get(f)) q.set(f, params.get(f));
  const shown = q.toString() ? await api(`/api/runs/${rid}/steps/${key}?${q}`) : all;
  const uniq = (xs) => [...new Set(xs)].filter((x) => x !== "").sort();
  const select = (name, values, label) => el("label", {}, label,
    el("select", { name }, el("option", { value: "" }, "all"),
      ...values.map((v) => el("option", { value: v, selected: params.get(name) === v }, v))));
  const form = el("form", { class: "filters", id: "filters", onsubmit: (e) => {
    e.preventDefault();
    const fd = new URLSearchParams();
    for (const [k, v] of new FormData(e.target)) if (v !== "") fd.set(k, v);
    location.hash = `#/run/${rid}/step/${key}?${fd}`;
  } },
    select("verdict", uniq(all.map((r) => r.verdict)), "verdict"),
    select("env", uniq(all.map((r) => r.env)), "environment"),
    select("flag", ["any", ...uniq(all.flatMap((r) => r.flags))], "integrity flag"),
    select("infra", ["only", "none"], "infra error"),
    el("label", {}, "reward ≥", el("input", { type: "number", step: "any", name: "min_reward", value: params.get("min_reward") || "" })),
    el("label", {}, "reward ≤", el("input", { type: "number", step: "any", name: "max_reward", value: params.get("max_reward") || "" })),
    el("label", {}, "text", el("input", { type: "search", name: "q", value: params.get("q") || "", placeholder: "search turns, verifier, diff" })),
    params.get("task_id") ? el("input", { type: "hidden", name: "task_id", value: params.get("task_id") }) : null,
    el("button", { type: "submit", id: "apply" }, "filter"));
  const groups = new Map();
  for (const r of all) {
    const g = groups.get(r.group) || { task: r.task_id, rewards: [], adv: [] };
    g.rewards.push(r.reward); g.adv.push(r.advantage); groups.set(r.group, g);
  }
  const groupBox = el("div", { id: "groups" });
  const epBox = el("div", { id: "episodes" });
  $("#content").replaceChildren(
    el("h2", {}, `${run.name} · ${stepLabel(key)}`),
    el("h3", {}, `Groups (${groups.size})`), groupBox,
    el("h3", {}, `Episodes (${shown.length} of ${all.length})`), form, epBox);
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);
  const gg = new gridjs.Grid({
    columns: ["group", "task", "samples", "mean reward", "min", "max", "advantages"],
    data: [...groups].map(([i, g]) => [i, g.task, g.rewards.length, fmt(mean(g.rewards)),
      fmt(Math.min(...g.rewards)), fmt(Math.max(...g.rewards)), g.adv.map((a) => fmt(a, 2)).join(" ")]),
    sort: true, pagination: { limit: 10 },
  }).render(groupBox);
  gg.on("rowClick", (_e, row) => { location.hash = `#/run/${rid}/step/${key}?task_id=${encodeURIComponent(row.cells[1].data)}`; });
  const eg = new gridjs.Grid({
    columns: [{ name: "row", hidden: true }, "group", "sample", "task", "reward", "advantage", "verdict",
      "flags", "infra", "finish", "tokens", "turns", "logged because"],
    data: shown.map((r) => [r.row, r.group, r.sample, r.task_id, fmt(r.reward), fmt(r.advantage),
      r.verdict, r.flags.join(" "), r.infra_error ? "yes" : "", r.finish_reason, r.response_tokens,
      r.num_turns, r.logged_because.join(" ")]),
    sort: true, search: false, pagination: { limit: 20 }, className: { tr: "episode-row" },
  }).render(epBox);
  eg.on("rowClick", (_e, row) => { location.hash = `#/run/${rid}/step/${key}/ep/${row.cells[0].data}`; });
}

// --- one episode -----------------------------------------------------------------------
function metaTable(ep) {
  const rows = [
    ["task", ep.task_id], ["environment", ep.env], ["group / sample", `${ep.group} / ${ep.sample}`],
    ["reward", fmt(ep.reward)],
    ["components", Object.entries(ep.rewards || {}).map(([k, v]) => `${k} ${fmt(v)}`).join(", ")],
    ["advantage", fmt(ep.advantage)], ["verdict", ep.verdict], ["flags", (ep.flags || []).join(", ")],
    ["infra error", ep.infra_error ? "yes" : "no"], ["finish", ep.finish_reason],
    ["policy versions", `${ep.policy_version_min}–${ep.policy_version_max} (staleness ${ep.staleness})`],
    ["timings", `generation ${fmt(ep.gen_s, 2)} s (group), environment ${fmt(ep.env_s, 2)} s`],
    ["logged because", (ep.logged_because || []).join(", ")],
  ];
  return el("table", { class: "meta" }, ...rows.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v))));
}

function conversation(ep) {
  let a = -1;
  return el("div", { class: "conversation" }, ...(ep.turns || []).map((t) => {
    const idx = t.role === "assistant" ? ++a : -1;
    const calls = (ep.tool_calls || []).filter((c) => c.turn === idx);
    return el("div", { class: `turn ${t.role}` },
      el("div", { class: "role" }, t.role === "prompt" ? "prompt (system + user, as rendered)" : t.role),
      el("pre", {}, t.text),
      ...calls.map((c) => el("div", { class: `toolcall ${c.valid ? "" : "invalid"}` },
        c.valid ? `tool call ${c.name}(${c.arguments})` : `invalid tool call: ${c.error} — ${c.arguments}`)));
  }));
}

function verifier(ep) {
  const parts = [["stdout", ep.verifier_stdout], ["stderr", ep.verifier_stderr], ["detail", ep.verifier_detail]]
    .filter(([, v]) => v);
  const out = el("div", { id: "verifier" }, el("h3", {}, "Verifier"),
    parts.length ? null : el("p", { class: "legend" }, "no verifier output logged"),
    ...parts.map(([k, v]) => el("div", {}, el("div", { class: "legend" }, k), el("pre", {}, v))));
  if (ep.diff) {
    const box = el("div", { id: "diff" });
    // diff2html escapes the diff's lines and file names (asserted by the browser test)
    box.innerHTML = Diff2Html.html(ep.diff, { drawFileList: true, outputFormat: "line-by-line", matching: "lines" });
    out.append(el("h3", {}, "Diff"), box);
  }
  const files = Object.entries(ep.files || {});
  if (files.length) out.append(el("h3", {}, "Files"),
    ...files.map(([name, body]) => el("div", { class: "file" }, el("div", { class: "badge" }, name), el("pre", {}, body))));
  if (ep.metadata_json && ep.metadata_json !== "{}") out.append(el("h3", {}, "Environment metadata"), el("pre", {}, ep.metadata_json));
  return out;
}

// token colours: logprob (red = unlikely), entropy (orange = uncertain; 2 nats and more is
// full colour), mismatch |trainer − engine| (purple = 0.5 apart and more)
function tokenColour(mode, lp, tlp, h) {
  if (mode === "logprob") {
    const p = Math.exp(lp);
    return `rgba(220, 40, 40, ${(1 - p).toFixed(3)})`;
  }
  if (mode === "entropy") {
    if (h === null || h === undefined) return "transparent";
    return `rgba(235, 140, 0, ${Math.min(h / 2, 1).toFixed(3)})`;
  }
  if (tlp === null || tlp === undefined) return "transparent";
  const d = Math.min(Math.abs(tlp - lp) / 0.5, 1);
  return `rgba(130, 40, 210, ${d.toFixed(3)})`;
}

function tokenView(ep, mode) {
  const box = el("div", { id: "tokens" });
  const tlp = ep.trainer_logprobs;
  const ent = ep.entropy;
  const missing = { mismatch: [tlp, "trainer logprobs were not logged for this run: set logger.rollouts.trainer_logprobs=true"],
                    entropy: [ent, "token entropies were not logged for this run: set logger.rollouts.entropy=true"] }[mode];
  if (missing && !missing[0]) box.append(el("p", { class: "legend", id: "token-missing" }, missing[1]));
  (ep.token_texts || []).forEach((text, i) => {
    if (!ep.policy_mask[i]) { box.append(el("span", { class: "ctx" }, text)); return; }
    const lp = ep.gen_logprobs[i];
    const t = tlp ? tlp[i] : null;
    const h = ent ? ent[i] : null;
    const title = `token ${ep.token_ids[i]} · engine logprob ${fmt(lp)}` + (t === null ? "" : ` · trainer ${fmt(t)} · Δ ${fmt(t - lp)}`)
      + (h === null ? "" : ` · entropy ${fmt(h)} nats`) + ` · version ${ep.policy_versions[i]}`;
    const span = el("span", { class: "tok", title }, text);
    span.style.background = tokenColour(mode, lp, t, h);
    box.append(span);
  });
  return box;
}

async function showEpisode(rid, key, row) {
  const run = state.runs.find((r) => r.id === rid);
  const ep = await api(`/api/runs/${rid}/steps/${key}/${row}`);
  crumbs([run.name, `#/run/${rid}`], [stepLabel(key), `#/run/${rid}/step/${key}`], [`episode ${ep.group}.${ep.sample}`, location.hash]);
  const modes = [["logprob", "engine logprob"], ["entropy", "entropy"], ["mismatch", "trainer − engine mismatch"]];
  const tokenBox = el("div", {});
  const modeSel = el("select", { id: "token-mode", onchange: () => tokenBox.replaceChildren(tokenView(ep, modeSel.value)) },
    ...modes.map(([v, l]) => el("option", { value: v }, l)));
  tokenBox.append(tokenView(ep, "logprob"));
  const others = state.runs.flatMap((r) => r.keys.map((k) => [`${r.id}|${k}`, `${r.name} · ${stepLabel(k)}`]));
  const cmpSel = el("select", { id: "compare-with" }, ...others.map(([v, l]) => el("option", { value: v }, l)));
  const copy = el("button", { id: "copy-task", onclick: async () => {
    try { await navigator.clipboard.writeText(ep.task_id); copy.textContent = "copied"; }
    catch { copy.textContent = "select the id to copy"; }
  } }, "copy task id");
  $("#content").replaceChildren(
    el("h2", { id: "episode-title" }, `${stepLabel(key)} · group ${ep.group} · sample ${ep.sample}`),
    el("div", {}, el("code", { id: "task-id" }, ep.task_id), " ", copy,
      el("span", { class: "legend" }, " (for `dockyard eval`: the task's id in its data file)")),
    metaTable(ep),
    el("div", {}, "compare this task with ", cmpSel, " ",
      el("button", { id: "compare", onclick: () => {
        const [r2, k2] = cmpSel.value.split("|");
        location.hash = `#/compare/${rid}/${key}/${r2}/${k2}/${encodeURIComponent(ep.task_id)}`;
      } }, "side by side")),
    el("h3", {}, "Conversation"), conversation(ep),
    verifier(ep),
    el("h3", {}, "Tokens"),
    el("div", { class: "legend" }, "colour by ", modeSel, " · grey: prompt and observation tokens (not the policy's) · hover a token for its numbers"),
    tokenBox);
}

// --- the same task in two runs or two steps ---------------------------------------------
async function showCompare(r1, k1, r2, k2, task) {
  crumbs(["compare", location.hash]);
  const side = async (rid, key) => {
    const run = state.runs.find((r) => r.id === rid);
    const eps = await api(`/api/runs/${rid}/steps/${key}?task_id=${encodeURIComponent(task)}`);
    const head = el("h3", {}, `${run.name} · ${stepLabel(key)}`);
    if (!eps.length) return el("div", {}, head, el("p", {}, "this task was not logged there"));
    const ep = await api(`/api/runs/${rid}/steps/${key}/${eps[0].row}`);
    return el("div", { class: "side" }, head,
      el("p", { class: "legend" }, `${eps.length} samples, rewards ${eps.map((e) => fmt(e.reward, 2)).join(" ")}; first shown`),
      metaTable(ep), conversation(ep));
  };
  $("#content").replaceChildren(
    el("h2", {}, "Task ", el("code", {}, task)),
    el("div", { class: "compare", id: "compare-view" }, await side(r1, k1), await side(r2, k2)));
}

// --- start, and follow a live run ---------------------------------------------------------
async function refresh() {
  try {
    if (await loadRuns()) {
      await loadMetrics();
      if (!state.route.includes("/ep/") && !state.route.startsWith("/compare")) await route();
    }
    const live = state.runs.some((r) => r.live);
    $("#status").textContent = `${state.runs.length} run(s)${live ? " · following live" : ""} · updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    $("#status").textContent = `cannot reach the server: ${e}`;
  }
}

async function start() {
  $("#metric").addEventListener("change", drawChart);
  window.addEventListener("hashchange", route);
  await loadRuns();
  await loadMetrics();
  await route();
  $("#status").textContent = `${state.runs.length} run(s)`;
  document.body.dataset.ready = "1";
  state.timer = setInterval(refresh, 5000);
}

start();
