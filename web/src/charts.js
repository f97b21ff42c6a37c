// Line charts against the training step, drawn by uPlot (the global that
// the bundle's first part defines). A StepChart keeps its columns (steps,
// then one array per series, null where a series has no value at a step)
// and redraws at most every REDRAW_MS; past MAX_POINTS it keeps every
// other point, so a long job's chart stays light.

const PALETTE = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#0891b2', '#be185d'];
const REDRAW_MS = 200;
const MAX_POINTS = 4000;

class StepChart {
  // parent: the element to draw in; yLabel: the y axis's label; showPoints:
  // mark each value (for sparse series such as evaluations).
  constructor(parent, yLabel, showPoints) {
    this.parent = parent;
    this.yLabel = yLabel;
    this.showPoints = !!showPoints;
    this.names = [];
    this.xs = [];
    this.cols = [];
    this.u = null;
    this.timer = 0;
    this.resize = new ResizeObserver(() => this.fitWidth());
    this.resize.observe(parent);
  }

  width() { return Math.max(280, this.parent.clientWidth - 8); }

  build() {
    if (this.u) this.u.destroy();
    const series = [{label: 'step'}];
    this.names.forEach((n, i) => series.push({
      label: n,
      stroke: PALETTE[i % PALETTE.length],
      width: 1.5,
      spanGaps: true,
      points: {show: this.showPoints, size: 5},
      value: (u, v) => fmtNum(v),
    }));
    this.u = new uPlot({
      width: this.width(),
      height: 220,
      scales: {x: {time: false}},
      axes: [{label: 'step'}, {label: this.yLabel, size: 60}],
      series,
      legend: {live: true},
    }, [this.xs, ...this.cols], this.parent);
  }

  fitWidth() {
    if (this.u && Math.abs(this.u.width - this.width()) > 2) {
      this.u.setSize({width: this.width(), height: 220});
    }
  }

  // Adds the series it does not have yet (a new metric): rebuilds the chart.
  ensure(names) {
    const fresh = names.filter((n) => !this.names.includes(n));
    if (fresh.length === 0 && this.u) return;
    for (const n of fresh) {
      this.names.push(n);
      this.cols.push(this.xs.map(() => null));
    }
    this.build();
  }

  // One point at `step` with {series: value}; a step not after the last
  // one replaces the values of that step, or is dropped when it is older.
  add(step, values) {
    if (!isNum(step)) return;
    this.ensure(Object.keys(values));
    const last = this.xs.length - 1;
    let i;
    if (last >= 0 && step <= this.xs[last]) {
      if (step < this.xs[last]) return;
      i = last;
    } else {
      this.xs.push(step);
      for (const c of this.cols) c.push(null);
      i = this.xs.length - 1;
    }
    for (const [name, v] of Object.entries(values)) {
      this.cols[this.names.indexOf(name)][i] = isNum(v) ? v : null;
    }
    if (this.xs.length > MAX_POINTS) this.thin();
    this.schedule();
  }

  thin() {
    const keep = (a) => a.filter((_, i) => i % 2 === 0 || i === a.length - 1);
    this.xs = keep(this.xs);
    this.cols = this.cols.map(keep);
    this.build();
  }

  schedule() {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = 0;
      if (this.u) this.u.setData([this.xs, ...this.cols]);
    }, REDRAW_MS);
  }

  points() { return this.xs.length; }

  destroy() {
    clearTimeout(this.timer);
    this.resize.disconnect();
    if (this.u) this.u.destroy();
    this.u = null;
  }
}
