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
  // The degradation levels from best to cheapest, as the samples name them, each with its colour:
  // green to red as quality steps down.
  const LEVELS = [
    { name: 'Full', fill: '#22c55e' },
    { name: 'ReducedCandidates', fill: '#facc15' },
    { name: 'CoarseAggregates', fill: '#f97316' },
    { name: 'NoDiversity', fill: '#991b1b' },
  ];
  const ACCEPTOR_PALETTE = ['#2563eb', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#db2777', '#65a30d', '#4b5563'];

  let historySeconds = 300;
  let lastT = -Infinity;
  const data = { t: [], inFlight: [], offered: [], goodput: [], p50: [], p99: [] };
  // reason → per-sample rates, aligned with data.t (0 where a sample did not name the reason).
  const refusals = new Map();
  // level name → per-sample rates of 2xx query answers at that level, aligned with data.t.
  const levels = Object.fromEntries(LEVELS.map((l) => [l.name, []]));
  // acceptor id → per-sample offered rates, aligned with data.t (null where a sample did not name it).
  const acceptors = new Map();
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

  // The level mix as a stack: the chart holds running sums, best level at the bottom. Its series
  // run from the top of the stack down (NoDiversity's edge is the total, Full's the lowest), each
  // filled down to zero over the one before it, so every band shows one level's own rate and the
  // legend reads as the stack does.
  const STACK = [...LEVELS].reverse();

  function stacked() {
    const sums = [];
    let below = null;
    for (const l of LEVELS) {
      const v = levels[l.name];
      below = below === null ? v.slice() : below.map((b, i) => b + v[i]);
      sums.push(below);
    }
    return sums.reverse();
  }

  function buildLevelsChart() {
    const el = $('chart-levels');
    charts.levels = new uPlot(
      {
        width: width(el),
        height: CHART_HEIGHT,
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
        series: [{}, ...STACK.map((l) => ({ label: l.name, stroke: l.fill, fill: l.fill, width: 1, points: { show: false } }))],
        axes: [{}, { size: 50 }],
        legend: { live: false },
      },
      [data.t, ...stacked()],
      el,
    );
  }

  function buildAcceptorsChart() {
    charts.acceptors?.destroy();
    delete charts.acceptors;
    const ids = [...acceptors.keys()].sort((a, b) => a - b);
    // One acceptor is the whole server, already drawn above: the chart is for comparing several.
    $('acceptors').hidden = ids.length < 2;
    if (ids.length < 2) return;
    charts.acceptors = lineChart(
      $('chart-acceptors'),
      ids.map((id, i) => ({
        label: `acceptor ${id}`,
        stroke: ACCEPTOR_PALETTE[i % ACCEPTOR_PALETTE.length],
        values: () => acceptors.get(id),
      })),
    );
  }

  function acceptorData() {
    return [...acceptors.keys()].sort((a, b) => a - b).map((id) => acceptors.get(id));
  }

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
    buildLevelsChart();
    buildAcceptorsChart();
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
  let acceptorsChanged = false;

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
    const mix = s.levelsPerSec ?? {};
    for (const l of LEVELS) levels[l.name].push(typeof mix[l.name] === 'number' ? mix[l.name] : 0);
    const perAcceptor = new Map();
    if (Array.isArray(s.acceptors)) for (const a of s.acceptors) if (a && Number.isInteger(a.id)) perAcceptor.set(a.id, a.offeredPerSec);
    for (const id of perAcceptor.keys()) {
      if (!acceptors.has(id)) {
        acceptors.set(id, new Array(data.t.length - 1).fill(null));
        acceptorsChanged = true;
      }
    }
    for (const [id, values] of acceptors) values.push(perAcceptor.get(id) ?? null);
    // Keep the last historySeconds, as the server does.
    const oldest = s.t / 1000 - historySeconds;
    let drop = 0;
    while (drop < data.t.length && data.t[drop] < oldest) drop++;
    if (drop > 0) {
      for (const k of Object.keys(data)) data[k].splice(0, drop);
      for (const values of refusals.values()) values.splice(0, drop);
      for (const values of Object.values(levels)) values.splice(0, drop);
      for (const values of acceptors.values()) values.splice(0, drop);
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
    charts.levels.setData([data.t, ...stacked()]);
    if (acceptorsChanged) {
      acceptorsChanged = false;
      buildAcceptorsChart();
    }
    charts.acceptors?.setData([data.t, ...acceptorData()]);
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

  // For tests and for a console: what the charts were given, read back from the charts themselves.
  window.__tidalDashboard = Object.freeze({
    /** Per level, the rates the level-mix chart draws (its bands, unstacked), with their times. */
    levelMix() {
      const d = charts.levels.data;
      const out = { t: Array.from(d[0]) };
      // Series k + 1 is STACK[k]'s upper edge; the band below it is the next series' edge, or zero.
      STACK.forEach((l, k) => {
        const upper = d[k + 1];
        const lower = d[k + 2];
        out[l.name] = Array.from(upper, (v, i) => v - (lower === undefined ? 0 : lower[i]));
      });
      return out;
    },
    /** A chart's series labels and data (`inFlight`, `throughput`, `levels`, `refusals`, `latency`, `acceptors`), or null when it is not shown. */
    chart(name) {
      const c = charts[name];
      if (c === undefined) return null;
      return { labels: c.series.slice(1).map((x) => x.label), data: c.data.map((v) => Array.from(v)) };
    },
  });

  buildCharts();
  new ResizeObserver(() => {
    for (const c of Object.values(charts)) {
      const el = c.root.parentElement;
      if (el && width(el) !== c.width) c.setSize({ width: width(el), height: CHART_HEIGHT });
    }
  }).observe(document.querySelector('main'));
  connect();
})();
