// The live dashboard of `tidal serve`: plain DOM and uPlot (loaded before this file as the
// global `uPlot`), fed by the server-sent events of /dashboard/events. No build step: this file
// is served as it is.
(() => {
  'use strict';

  const $ = (id) => document.getElementById(id);

  // The chain's refusal reasons first, in chain order; tidal's own error codes after them.
  const CHAIN_REASONS = ['inflight', 'adaptive', 'tenant', 'permits', 'period'];
  const PALETTE = ['#dc2626', '#ea580c', '#ca8a04', '#7c3aed', '#db2777', '#0891b2', '#4b5563', '#65a30d'];
  const CHART_HEIGHT = 200;

  let historySeconds = 300;
  let lastT = -Infinity;
  const data = { t: [], inFlight: [], offered: [], goodput: [], p50: [], p99: [] };
  // reason → per-sample rates, aligned with data.t (0 where a sample did not name the reason).
  const refusals = new Map();
  let latest = null;

  const fmt = (v) => {
    if (typeof v !== 'number' || !Number.isFinite(v)) return '–';
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    if (a < 1) return v.toFixed(2);
    if (a < 100) return v.toFixed(1);
    return String(Math.round(v));
  };

  const width = (el) => Math.max(200, el.clientWidth);

  function lineChart(el, series) {
    return new uPlot(
      {
        width: width(el),
        height: CHART_HEIGHT,
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
        series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.stroke, width: 2, points: { show: false } }))],
        axes: [{}, { size: 50 }],
        legend: { live: false },
      },
      [data.t, ...series.map((s) => s.values())],
      el,
    );
  }

  const charts = {};

  function buildRefusalsChart() {
    charts.refusals?.destroy();
    const reasons = [...refusals.keys()];
    $('refusals-none').hidden = reasons.length > 0;
    charts.refusals = lineChart(
      $('chart-refusals'),
      reasons.map((r, i) => ({ label: r, stroke: PALETTE[i % PALETTE.length], values: () => refusals.get(r) })),
    );
  }

  function buildCharts() {
    charts.inFlight = lineChart($('chart-inflight'), [{ label: 'in flight', stroke: '#2563eb', values: () => data.inFlight }]);
    charts.throughput = lineChart($('chart-throughput'), [
      { label: 'offered', stroke: '#9ca3af', values: () => data.offered },
      { label: 'goodput', stroke: '#16a34a', values: () => data.goodput },
    ]);
    charts.latency = lineChart($('chart-latency'), [
      { label: 'p50', stroke: '#2563eb', values: () => data.p50 },
      { label: 'p99', stroke: '#dc2626', values: () => data.p99 },
    ]);
    buildRefusalsChart();
  }

  function orderReasons() {
    const known = CHAIN_REASONS.filter((r) => refusals.has(r));
    const other = [...refusals.keys()].filter((r) => !CHAIN_REASONS.includes(r)).sort();
    const ordered = new Map();
    for (const r of [...known, ...other]) ordered.set(r, refusals.get(r));
    refusals.clear();
    for (const [r, v] of ordered) refusals.set(r, v);
  }

  let reasonsChanged = false;

  function push(s) {
    // A reconnect may replay samples the page already has.
    if (typeof s.t !== 'number' || s.t <= lastT) return;
    lastT = s.t;
    latest = s;
    data.t.push(s.t / 1000);
    data.inFlight.push(s.inFlight);
    data.offered.push(s.offeredPerSec);
    data.goodput.push(s.goodputPerSec);
    data.p50.push(s.p50Ms);
    data.p99.push(s.p99Ms);
    const by = s.refusedPerSec ?? {};
    for (const reason of Object.keys(by)) {
      if (!refusals.has(reason)) {
        refusals.set(reason, new Array(data.t.length - 1).fill(0));
        reasonsChanged = true;
      }
    }
    for (const [reason, values] of refusals) values.push(by[reason] ?? 0);
    // Keep the last historySeconds, as the server does.
    const oldest = s.t / 1000 - historySeconds;
    let drop = 0;
    while (drop < data.t.length && data.t[drop] < oldest) drop++;
    if (drop > 0) {
      for (const k of Object.keys(data)) data[k].splice(0, drop);
      for (const values of refusals.values()) values.splice(0, drop);
    }
  }

  function renderNow() {
    if (latest === null) return;
    const s = latest;
    const level = $('level');
    level.textContent = s.level;
    level.dataset.level = s.level;
    $('inflight').textContent = fmt(s.inFlight);
    $('goodput').textContent = fmt(s.goodputPerSec);
    $('offered').textContent = fmt(s.offeredPerSec);
    const refused = Object.values(s.refusedPerSec ?? {}).reduce((a, b) => a + b, 0);
    $('refused').textContent = fmt(refused);
    $('p50').textContent = fmt(s.p50Ms);
    $('p99').textContent = fmt(s.p99Ms);
    $('window').textContent = String(s.windowSeconds);
    document.body.dataset.lastT = String(s.t);
    document.body.dataset.samples = String(data.t.length);
  }

  let scheduled = false;

  function render() {
    scheduled = false;
    if (reasonsChanged) {
      reasonsChanged = false;
      orderReasons();
      buildRefusalsChart();
    }
    charts.inFlight.setData([data.t, data.inFlight]);
    charts.throughput.setData([data.t, data.offered, data.goodput]);
    charts.latency.setData([data.t, data.p50, data.p99]);
    charts.refusals.setData([data.t, ...refusals.values()]);
    renderNow();
  }

  // The backlog arrives as a burst of events: draw once per frame, not once per sample.
  function schedule() {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(render);
  }

  function setStatus(state, text) {
    const el = $('status');
    el.dataset.state = state;
    el.textContent = text;
  }

  function connect() {
    const es = new EventSource('/dashboard/events');
    es.addEventListener('config', (e) => {
      const config = JSON.parse(e.data);
      if (Number.isInteger(config.historySeconds)) historySeconds = config.historySeconds;
    });
    es.onopen = () => setStatus('live', 'live');
    es.onmessage = (e) => {
      push(JSON.parse(e.data));
      schedule();
    };
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        // A non-200 answer: too many pages open, or the server is shutting down.
        setStatus('refused', 'the server refused the event stream (too many dashboards open, or shutting down); reload to retry');
      } else {
        setStatus('lost', 'connection lost, reconnecting…');
      }
    };
  }

  buildCharts();
  new ResizeObserver(() => {
    for (const c of Object.values(charts)) {
      const el = c.root.parentElement;
      if (el && width(el) !== c.width) c.setSize({ width: width(el), height: CHART_HEIGHT });
    }
  }).observe(document.querySelector('main'));
  connect();
})();
