// The report page's chart: live device memory per device, drawn by hand as SVG from the JSON
// embedded in the page (no library, nothing fetched). Bands stack what each holder held at the
// end of each stretch of events; the grey envelope spans the lowest and highest value inside
// each stretch, so a short peak between two samples still shows. The x axis counts steps (each
// step the same width, so a long start-up does not squeeze the run) or wall time; steps, NVTX
// ranges and marks, allocation failures, the tracer's alerts and the analysis' phases are drawn
// on it. Clicking a band, a legend entry or a table row shows the stack behind it.
(function () {
  'use strict';
  const errors = [];
  window.addEventListener('error', (e) => {
    errors.push(String(e.message));
    document.body.dataset.errors = errors.join(' | ');
  });

  const SVG = 'http://www.w3.org/2000/svg';
  const COLORS = ['#4e79a7', '#f28e2c', '#e15759', '#76b7b2', '#59a14f', '#edc949',
    '#af7aa1', '#ff9da7', '#9c755f', '#6b8fd6'];
  const OTHER_COLOR = '#c9c9c9';
  const W = 1000;
  const PLOT_H = 280;
  const LEFT = 78;
  const RIGHT = 12;
  const TOP = 12;

  const data = JSON.parse(document.getElementById('vramtrace-data').textContent);

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) {
      node.setAttribute(k, String(v));
    }
    if (parent) {
      parent.appendChild(node);
    }
    return node;
  }

  function fmtBytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let v = Math.abs(n);
    let u = 0;
    while (v >= 1024 && u + 1 < units.length) {
      v /= 1024;
      u += 1;
    }
    const sign = n < 0 ? '-' : '';
    return u === 0 ? `${sign}${v} B` : `${sign}${v.toFixed(1)} ${units[u]}`;
  }

  function fmtTime(us) {
    if (us === 0) {
      return '0';
    }
    const s = us / 1e6;
    if (s >= 100) {
      return `${s.toFixed(0)} s`;
    }
    if (s >= 1) {
      return `${s.toFixed(2)} s`;
    }
    if (us >= 1000) {
      return `${(us / 1000).toFixed(1)} ms`;
    }
    return `${Number(us.toFixed(1))} µs`;
  }

  // Tick labels of a time axis up to `end` microseconds, `step` apart: one unit for the whole
  // axis (the one `end` reads best in), with the decimals that tell the ticks apart.
  function timeLabel(end, step) {
    const [div, unit] = end >= 1e6 ? [1e6, 's'] : end >= 1e3 ? [1e3, 'ms'] : [1, 'µs'];
    const decimals = Math.max(0, Math.min(6, Math.ceil(-Math.log10(step / div) - 1e-9)));
    return (us) => (us === 0 ? '0' : `${(us / div).toFixed(decimals)} ${unit}`);
  }

  // Round tick steps: 1, 2 or 5 times a power of `base`.
  function ticks(max, count, base) {
    if (!(max > 0)) {
      return [0];
    }
    const raw = max / count;
    let p = 1;
    while (p * base <= raw) {
      p *= base;
    }
    while (p > raw && p > 1e-9) {
      p /= base;
    }
    let step = p;
    for (const m of [1, 2, 5, 10, 20, 50, 100, 200, 500]) {
      if (p * m >= raw) {
        step = p * m;
        break;
      }
    }
    const out = [];
    for (let v = 0; v <= max * 1.0001; v += step) {
      out.push(v);
    }
    return out;
  }

  function showStack(key, title) {
    const panel = document.getElementById('stack');
    const lines = data.stacks[key];
    document.getElementById('stack-title').textContent = title;
    document.getElementById('stack-lines').textContent = lines && lines.length
      ? lines.join('\n')
      : 'No stack was recorded for this holder.';
    panel.hidden = false;
  }

  document.addEventListener('click', (e) => {
    const target = e.target.closest('[data-stack]');
    if (!target) {
      return;
    }
    e.preventDefault();
    showStack(target.dataset.stack, target.dataset.title || target.textContent);
    document.getElementById('stack').scrollIntoView({block: 'nearest'});
  });

  // The index of the last x at or before `us` (0 when none is).
  function indexAt(xs, us) {
    let lo = 0;
    let hi = xs.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (xs[mid] <= us) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }

  // The piecewise-linear function through the knots (xs ascending, ys ascending) at x. Where two
  // knots share an x (a step that began with the trace), the later one counts.
  function interpolate(xs, ys, x) {
    if (x <= xs[0] && xs[0] !== xs[1]) {
      return ys[0];
    }
    const j = indexAt(xs, x);
    if (j >= xs.length - 1) {
      return ys[ys.length - 1];
    }
    const dx = xs[j + 1] - xs[j];
    return dx > 0 ? ys[j] + ((x - xs[j]) / dx) * (ys[j + 1] - ys[j]) : ys[j];
  }

  // Round tick steps for a count: 1, 2 or 5 times a power of ten, at least 1.
  function countTicks(max, count) {
    let step = 1;
    for (let p = 1; step * count < max; p *= 10) {
      step = [1, 2, 5].map((m) => m * p).find((s) => s * count >= max) || p * 10;
    }
    const out = [];
    for (let v = 0; v <= max; v += step) {
      out.push(v);
    }
    return out;
  }

  // The x axis: `pos` maps microseconds since the first event to a position in [0, max],
  // `time` maps back. On the steps axis position k is the start of step k (step 0 is the
  // start-up before the first step; the last step runs to the end of the trace).
  function makeAxis(kind, end) {
    if (kind === 'steps' && data.steps.length) {
      const times = [0];
      const steps = [0];
      data.steps.forEach((t, i) => {
        times.push(t);
        steps.push(i * data.steps_every + 1);
      });
      times.push(Math.max(end, times[times.length - 1]));
      steps.push(data.steps_total + 1);
      const max = data.steps_total + 1;
      return {
        kind: 'steps',
        name: 'step',
        max: max,
        pos: (us) => interpolate(times, steps, us),
        time: (p) => interpolate(steps, times, p),
        ticks: countTicks(data.steps_total, 10),
        // Read from a snapshot, position 0 is the step under way then, `steps_first`.
        label: (v) => String(v + data.steps_first),
        at: (us) => `step ${Math.floor(interpolate(times, steps, us)) + data.steps_first}, ${fmtTime(us)}`,
      };
    }
    const timeTicks = ticks(end, 8, 10);
    return {
      kind: 'time',
      name: 'time',
      max: end,
      pos: (us) => us,
      time: (p) => p,
      ticks: timeTicks,
      label: timeLabel(end, timeTicks[1] || end),
      at: fmtTime,
    };
  }

  function drawDevice(container, dev, by, axisKind) {
    const xs = data.x;
    const duration = Math.max(data.duration_us, xs.length ? xs[xs.length - 1] : 0, 1);
    const axis = makeAxis(axisKind, duration);
    const bands = (dev.bands[by] || []);
    const phases = data.phases.filter((p) => p.device === dev.device);
    const alerts = data.alerts.filter((a) => a.device === dev.device);
    const depth = Math.min(data.range_depth, 4);
    const lanes = {phases: phases.length ? 16 : 0, steps: data.steps.length ? 10 : 0,
      ranges: depth * 9, events: 12};
    const laneTop = TOP + PLOT_H + 22;
    const H = laneTop + lanes.phases + lanes.steps + lanes.ranges + lanes.events + 6;
    const plotW = W - LEFT - RIGHT;
    let ymax = 0;
    for (const v of dev.max) {
      ymax = Math.max(ymax, v);
    }
    ymax = ymax > 0 ? ymax * 1.06 : 1;
    // Pixels of a position on the axis, and of a time.
    const px = (p) => LEFT + (p / axis.max) * plotW;
    const sx = (us) => px(axis.pos(us));
    const sy = (b) => TOP + PLOT_H - (b / ymax) * PLOT_H;

    const figure = document.createElement('figure');
    figure.className = 'device-chart';
    const caption = document.createElement('figcaption');
    caption.textContent = `Device ${dev.device}: peak ${fmtBytes(dev.peak_bytes)}` +
      `, ${fmtBytes(dev.end_bytes)} at the end`;
    figure.appendChild(caption);
    const svg = el('svg', {
      id: `chart-device-${dev.device}`,
      class: 'chart',
      viewBox: `0 0 ${W} ${H}`,
      role: 'img',
      'aria-label': `live bytes on device ${dev.device} over ${axis.kind}`,
      'data-axis': axis.kind,
    }, figure);
    let points = 0;

    // Warm-up and teardown shaded behind everything else.
    for (const p of phases) {
      if (p.kind === 'warm-up' || p.kind === 'teardown') {
        const x0 = sx(p.start_us);
        el('rect', {class: `phase phase-${p.kind}`, x: x0, y: TOP,
          width: Math.max(sx(p.end_us) - x0, 0.5), height: PLOT_H}, svg);
      }
    }

    // Step boundaries, where there are few enough to tell apart.
    if (data.steps.length <= 60) {
      for (const s of data.steps) {
        el('line', {class: 'step-grid', x1: sx(s), x2: sx(s), y1: TOP, y2: TOP + PLOT_H}, svg);
      }
    }

    for (const t of ticks(ymax, 5, 2)) {
      el('line', {class: 'grid', x1: LEFT, x2: W - RIGHT, y1: sy(t), y2: sy(t)}, svg);
      const label = el('text', {class: 'axis', x: LEFT - 6, y: sy(t) + 4, 'text-anchor': 'end'}, svg);
      label.textContent = fmtBytes(t);
    }
    for (const t of axis.ticks) {
      el('line', {class: 'tick', x1: px(t), x2: px(t), y1: TOP + PLOT_H, y2: TOP + PLOT_H + 4}, svg);
      const label = el('text', {class: 'axis x-tick', x: px(t), y: TOP + PLOT_H + 16,
        'text-anchor': 'middle'}, svg);
      label.textContent = axis.label(t);
    }
    const axisName = el('text', {class: 'axis-name', x: LEFT - 14, y: TOP + PLOT_H + 16,
      'text-anchor': 'end'}, svg);
    axisName.textContent = axis.name;

    // The envelope: lowest to highest value within each stretch.
    if (xs.length) {
      const top = xs.map((x, i) => `${sx(x).toFixed(1)},${sy(dev.max[i]).toFixed(1)}`);
      const bottom = xs.map((x, i) => `${sx(x).toFixed(1)},${sy(dev.min[i]).toFixed(1)}`).reverse();
      el('polygon', {class: 'envelope', points: top.concat(bottom).join(' ')}, svg);
      points += xs.length * 2;
    }

    // Stacked bands, largest holder at the bottom.
    const base = xs.map(() => 0);
    bands.forEach((band, k) => {
      const lower = base.slice();
      band.values.forEach((v, i) => {
        base[i] += v;
      });
      const top = xs.map((x, i) => `${sx(x).toFixed(1)},${sy(base[i]).toFixed(1)}`);
      const bottom = xs.map((x, i) => `${sx(x).toFixed(1)},${sy(lower[i]).toFixed(1)}`).reverse();
      const color = band.stack ? COLORS[k % COLORS.length] : OTHER_COLOR;
      const area = el('polygon', {class: 'band', points: top.concat(bottom).join(' '), fill: color},
        svg);
      if (band.stack) {
        area.dataset.stack = band.stack;
        area.dataset.title = band.label;
      }
      const title = el('title', {}, area);
      title.textContent = band.label;
      band.color = color;
      points += xs.length * 2;
    });

    // The highest value of each stretch as a line: peaks between two band samples stay visible.
    if (xs.length) {
      const line = xs.map((x, i) => `${sx(x).toFixed(1)},${sy(dev.max[i]).toFixed(1)}`);
      el('polyline', {class: 'max-line', points: line.join(' ')}, svg);
      points += xs.length;
    }

    if (dev.peak_bytes > 0) {
      const x = sx(dev.peak_us);
      const y = sy(dev.peak_bytes);
      el('circle', {class: 'peak', cx: x, cy: y, r: 4}, svg);
      const label = el('text', {class: 'peak-label', x: Math.min(x + 6, W - 140), y: Math.max(y - 6, TOP + 10)}, svg);
      label.textContent = `peak ${fmtBytes(dev.peak_bytes)}`;
    }

    // The tracer's alerts: a line through the plot and a flag above it.
    for (const a of alerts) {
      const x = sx(a.t_us);
      el('line', {class: 'alert-line', x1: x, x2: x, y1: TOP, y2: TOP + PLOT_H}, svg);
      const flag = el('g', {class: 'alert-marker'}, svg);
      el('path', {d: `M${x},${TOP} l0,14 M${x},${TOP} l-7,4 l7,4 z`}, flag);
      const label = el('text', {class: 'alert-label', x: x - 10, y: TOP + 10, 'text-anchor': 'end'},
        flag);
      label.textContent = `ALERT at step ${a.step}` + (a.signal ? `, ${a.signal} sent` : '');
      const title = el('title', {}, flag);
      title.textContent = `alerted ${a.text}`;
    }

    // Lanes under the plot: phases, steps, NVTX ranges by depth, marks, failures and alerts.
    const laneLabel = (text, y) => {
      const t = el('text', {class: 'lane-label', x: LEFT - 6, y: y, 'text-anchor': 'end'}, svg);
      t.textContent = text;
    };
    if (phases.length) {
      laneLabel('phases', laneTop + 10);
    }
    for (const p of phases) {
      const x0 = sx(p.start_us);
      const width = sx(p.end_us) - x0;
      const mark = el('g', {class: `phase-span phase-span-${p.kind}`}, svg);
      if (p.kind === 'growth') {
        el('path', {d: `M${x0},${laneTop} l4,6 l-4,6 l-4,-6 z`}, mark);
      } else {
        el('rect', {x: x0, y: laneTop + 1, width: Math.max(width, 0.5), height: 12}, mark);
      }
      const title = el('title', {}, mark);
      title.textContent = p.label;
      // A label only where it fits: the growth marker's to its right, over the steady bar.
      const room = p.kind === 'growth' ? px(axis.max) - x0 : width;
      if (room > p.label.length * 6 + 8) {
        const text = el('text', {class: 'phase-label', x: x0 + (p.kind === 'growth' ? 7 : 4),
          y: laneTop + 10}, mark);
        text.textContent = p.label;
      }
    }
    const stepTop = laneTop + lanes.phases;
    if (data.steps.length) {
      laneLabel('steps', stepTop + 8);
    }
    for (const s of data.steps) {
      el('line', {class: 'step', x1: sx(s), x2: sx(s), y1: stepTop, y2: stepTop + lanes.steps}, svg);
    }
    const rangeTop = stepTop + lanes.steps + 2;
    if (depth > 0) {
      laneLabel('NVTX', rangeTop + 8);
    }
    for (const r of data.ranges) {
      if (r.depth >= depth) {
        continue;
      }
      const x0 = sx(r.start_us);
      const rect = el('rect', {class: 'range', x: x0, y: rangeTop + r.depth * 9, height: 8,
        width: Math.max(sx(r.end_us) - x0, 0.8)}, svg);
      const title = el('title', {}, rect);
      title.textContent = `${r.name} (thread ${r.thread}, ${fmtTime(r.end_us - r.start_us)})`;
    }
    const eventTop = rangeTop + lanes.ranges + 2;
    for (const m of data.marks) {
      const mark = el('path', {class: 'mark', d: `M${sx(m.t_us)},${eventTop} l4,8 l-8,0 z`}, svg);
      const title = el('title', {}, mark);
      title.textContent = `mark: ${m.name}`;
    }
    for (const f of data.failures) {
      if (f.device !== dev.device) {
        continue;
      }
      const x = sx(f.t_us);
      el('line', {class: 'failure-line', x1: x, x2: x, y1: TOP, y2: TOP + PLOT_H}, svg);
      const marker = el('circle', {class: f.oom ? 'failure oom' : 'failure', cx: x, cy: eventTop + 5,
        r: 4}, svg);
      const title = el('title', {}, marker);
      title.textContent = `${f.api} of ${fmtBytes(f.bytes)} failed (${f.oom ? 'out of memory' : `error ${f.result}`})`;
    }

    // Hover: the values at the stretch under the pointer.
    const cursor = el('line', {class: 'cursor', x1: 0, x2: 0, y1: TOP, y2: TOP + PLOT_H,
      visibility: 'hidden'}, svg);
    const readout = document.createElement('div');
    readout.className = 'readout';
    readout.textContent = 'Point at the chart for the values at a moment.';
    svg.addEventListener('mousemove', (e) => {
      if (!xs.length) {
        return;
      }
      const box = svg.getBoundingClientRect();
      const vx = ((e.clientX - box.left) / box.width) * W;
      const us = axis.time(((vx - LEFT) / plotW) * axis.max);
      const i = indexAt(xs, us);
      cursor.setAttribute('x1', sx(xs[i]));
      cursor.setAttribute('x2', sx(xs[i]));
      cursor.setAttribute('visibility', 'visible');
      const parts = bands.filter((band) => band.values[i] > 0).slice(0, 4)
        .map((band) => `${band.label}: ${fmtBytes(band.values[i])}`);
      readout.textContent = `${axis.at(xs[i])}: ${fmtBytes(dev.last[i])} live` +
        ` (${fmtBytes(dev.min[i])}..${fmtBytes(dev.max[i])} in this stretch)` +
        (parts.length ? ` · ${parts.join(' · ')}` : '');
    });
    figure.appendChild(readout);

    const legend = document.createElement('ul');
    legend.className = 'legend';
    for (const band of bands) {
      const item = document.createElement('li');
      const swatch = document.createElement('span');
      swatch.className = 'swatch';
      swatch.style.background = band.color;
      item.appendChild(swatch);
      const name = document.createElement(band.stack ? 'a' : 'span');
      name.textContent = band.label;
      if (band.stack) {
        name.href = '#stack';
        name.dataset.stack = band.stack;
        name.dataset.title = band.label;
      }
      item.appendChild(name);
      legend.appendChild(item);
    }
    figure.appendChild(legend);
    svg.dataset.points = String(points);
    container.appendChild(figure);
    return points;
  }

  // What the chart shows now: the grouping of its bands and its x axis; the page's address
  // may ask for others (`report.html#axis=time&by=module`).
  const view = {by: data.by, axis: data.axis};
  for (const [key, value] of new URLSearchParams(location.hash.slice(1))) {
    if (key === 'axis' && (value === 'time' || (value === 'steps' && data.steps.length))) {
      view.axis = value;
    } else if (key === 'by' && ['python', 'module', 'function'].includes(value)) {
      view.by = value;
    }
  }

  function draw() {
    const charts = document.getElementById('charts');
    charts.replaceChildren();
    let points = 0;
    for (const dev of data.devices) {
      points += drawDevice(charts, dev, view.by, view.axis);
    }
    if (!data.devices.length) {
      const p = document.createElement('p');
      p.textContent = 'No device memory was ever live in this trace.';
      charts.appendChild(p);
    }
    document.body.dataset.chartPoints = String(points);
    document.getElementById('axis-name').textContent = view.axis;
    for (const b of document.querySelectorAll('.controls button')) {
      b.classList.toggle('on', b.dataset.by === view.by || b.dataset.axis === view.axis);
    }
  }

  for (const b of document.querySelectorAll('.controls button')) {
    b.addEventListener('click', () => {
      if (b.dataset.by) {
        view.by = b.dataset.by;
      } else {
        view.axis = b.dataset.axis;
      }
      draw();
    });
  }
  draw();
  document.body.dataset.chart = 'drawn';
})();
