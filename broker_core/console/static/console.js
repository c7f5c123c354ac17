// The console's browser side: write actions and live charts, all through /api/.
"use strict";

const csrf = () => document.querySelector('meta[name="csrf-token"]').content;

async function api(method, url, body) {
  const init = { method, headers: { "X-CSRF-Token": csrf() }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function formBody(form) {
  const body = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.type === "checkbox") body[el.name] = el.checked;
    else if (el.value !== "") body[el.name] = el.value;
  }
  return body;
}

function fill(template, body) {
  return template.replace(/\{(\w+)\}/g, (_, k) => encodeURIComponent(body[k] ?? ""));
}

async function submitAction(event) {
  event.preventDefault();
  const form = event.target;
  const result = form.querySelector("[data-result]");
  if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
  const body = formBody(form);
  result.className = "result pending";
  result.textContent = "working…";
  try {
    const url = fill(form.dataset.api, body);
    const data = await api(form.dataset.method || "POST", url,
      form.dataset.method === "DELETE" ? undefined : body);
    result.className = "result ok";
    result.textContent = "done: " + JSON.stringify(data);
    const then = form.dataset.then;
    if (then === "reload") window.location.reload();
    else if (then && then.startsWith("goto:")) window.location.assign(fill(then.slice(5), body));
  } catch (error) {
    result.className = "result error";
    result.textContent = "refused: " + error.message;
  }
}

function liveChart(canvas) {
  if (typeof Chart === "undefined") {
    canvas.replaceWith(Object.assign(document.createElement("p"),
      { className: "muted", textContent: "chart library not installed (./dev sets it up)" }));
    return;
  }
  const chart = new Chart(canvas, {
    type: "line",
    data: { labels: [], datasets: [] },
    options: { animation: false, responsive: true, maintainAspectRatio: false,
               scales: { y: { beginAtZero: true } } },
  });
  const series = (label) => {
    let set = chart.data.datasets.find((d) => d.label === label);
    if (!set) {
      set = { label, data: [], tension: 0.2, pointRadius: 1 };
      chart.data.datasets.push(set);
    }
    return set;
  };
  const points = {
    overview: (data) => data.brokers.flatMap((b) => [
      [b.broker + " put TPS", b.put_tps ?? 0], [b.broker + " get TPS", b.get_tps ?? 0]]),
    lag: (data) => Object.entries(data.lag_by_topic).map(([t, lag]) => ["lag " + t, lag])
      .concat([["total lag", data.total_lag]]),
  }[canvas.dataset.chart];
  async function tick() {
    try {
      const data = await (await fetch(canvas.dataset.source, { credentials: "same-origin" })).json();
      chart.data.labels.push(new Date().toLocaleTimeString());
      for (const [label, value] of points(data)) series(label).data.push(value);
      if (chart.data.labels.length > 60) {
        chart.data.labels.shift();
        chart.data.datasets.forEach((d) => d.data.shift());
      }
      chart.update();
      canvas.dataset.points = String(chart.data.labels.length);
    } catch (error) {
      canvas.title = "update failed: " + error.message;
    }
  }
  tick();
  setInterval(tick, Number(canvas.dataset.everyMs || 2000));
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form[data-api]").forEach((f) => f.addEventListener("submit", submitAction));
  document.querySelectorAll("canvas[data-chart]").forEach(liveChart);
  document.querySelectorAll("button[data-logout]").forEach((b) => b.addEventListener("click", async () => {
    await api("POST", "/api/logout", {});
    window.location.assign("/login");
  }));
});
