// The jobs table and a job's detail: live curves, metrics per evaluation,
// checkpoints with export links, events, errors and the job's view.

// What each button does, and in which states the server takes it.
const ACTIONS = [
  {name: 'pause', label: 'Pause', when: (s) => s === 'RUNNING' || s === 'QUEUED'},
  {name: 'resume', label: 'Resume', when: (s) => s === 'PAUSED'},
  {name: 'cancel', label: 'Cancel', when: (s) => !TERMINAL.has(s)},
];

// Pause, resume and cancel buttons for `job`; onAction(name, id) runs one.
function actionButtons(job, onAction) {
  return el('span', {class: 'actions'}, ACTIONS.map((a) => el('button', {
    type: 'button', class: 'action action-' + a.name, 'data-action': a.name, 'data-job': job.job_id,
    disabled: !a.when(job.state), text: a.label,
    onclick: (ev) => { ev.stopPropagation(); onAction(a.name, job.job_id); },
  })));
}

// Shows the job's progress in `cell` (a bar, steps of the total, the
// epoch), updating the elements it made the first time.
function showProgress(cell, job) {
  if (!cell.firstChild) cell.append(el('progress'), el('span', {class: 'steps'}), el('span', {class: 'muted'}));
  const [bar, steps, epoch] = cell.children;
  const total = isNum(job.total_steps) && job.total_steps > 0 ? job.total_steps : 0;
  bar.max = total || 1;
  bar.value = total ? Math.min(job.step, total) : 0;
  setText(steps, fmtInt(job.step) + (total ? ' / ' + fmtInt(total) : ''));
  setText(epoch, job.epochs > 0 ? 'epoch ' + Math.min(job.epoch + 1, job.epochs) + '/' + job.epochs : '');
}

class JobsTable {
  constructor(tbody, emptyNote, onAction) {
    this.tbody = tbody;
    this.emptyNote = emptyNote;
    this.onAction = onAction;
    this.rows = new Map();  // job id -> {tr, state}
    this.selected = '';
  }

  update(jobs) {
    const ids = new Set(jobs.map((j) => j.job_id));
    for (const [id, row] of this.rows) {
      if (!ids.has(id)) { row.tr.remove(); this.rows.delete(id); }
    }
    for (const j of jobs) this.updateJob(j);
    // Newest first, in submission order reversed.
    const order = jobs.map((j) => this.rows.get(j.job_id).tr).reverse();
    order.forEach((tr, i) => { if (this.tbody.children[i] !== tr) this.tbody.insertBefore(tr, this.tbody.children[i] || null); });
    this.emptyNote.hidden = jobs.length > 0;
  }

  updateJob(j) {
    let row = this.rows.get(j.job_id);
    if (!row) {
      const tr = el('tr', {'data-job': j.job_id});
      tr.addEventListener('click', () => { location.hash = '#/jobs/' + encodeURIComponent(j.job_id); });
      for (let i = 0; i < 7; ++i) tr.append(el('td'));
      tr.children[3].className = tr.children[4].className = tr.children[5].className = 'num';
      fill(tr.children[0], el('a', {href: '#/jobs/' + encodeURIComponent(j.job_id), class: 'job-id', text: j.job_id}),
           el('div', {class: 'job-name', text: j.name || ''}));
      row = {tr, state: null};
      this.rows.set(j.job_id, row);
      this.tbody.prepend(tr);
    }
    // Cells change in place; the buttons only with the state, so that an
    // update never replaces what the pointer is on.
    const c = row.tr.children;
    showProgress(c[2], j);
    setText(c[3], fmtNum(j.loss));
    setText(c[4], fmtRate(j.examples_per_sec));
    setText(c[5], TERMINAL.has(j.state) ? '' : fmtSeconds(j.eta_seconds));
    if (row.state !== j.state) {
      fill(c[1], stateBadge(j.state));
      fill(c[6], actionButtons(j, this.onAction));
      row.state = j.state;
    }
    row.tr.classList.toggle('selected', j.job_id === this.selected);
  }

  select(id) {
    this.selected = id || '';
    for (const [rid, row] of this.rows) row.tr.classList.toggle('selected', rid === this.selected);
  }
}

const MAX_LOGGED_EVENTS = 200;

// One job's detail under the table, alive from open() until close().
class JobDetail {
  constructor(container, id, ui) {
    this.container = container;
    this.id = id;
    this.ui = ui;  // {onAction(name, id), onJob(job), error(err)}
    this.abort = new AbortController();
    this.closed = false;
    this.job = null;
    this.shownState = null;
    this.evalSteps = new Set();
    this.charts = {};
  }

  async open() {
    let job;
    try {
      job = await apiJson('GET', jobPath(this.id), {signal: this.abort.signal});
    } catch (e) {
      if (e.name === 'AbortError') return;
      fill(this.container, el('div', {class: 'error', text: 'Job ' + this.id + ': ' + e.message}));
      return;
    }
    this.render();
    this.applyJob(job);
    await this.loadHistory();
    this.loadCheckpoints();
    this.loadSpec();
    this.follow();
  }

  close() {
    this.closed = true;
    this.abort.abort();
    for (const c of Object.values(this.charts)) c.destroy();
    fill(this.container);
  }

  section(title, ...body) {
    return el('section', {class: 'panel'}, el('h3', {text: title}), ...body);
  }

  render() {
    const n = this.nodes = {
      title: el('h2'),
      actions: el('span'),
      errors: el('div', {class: 'errors'}),
      summary: el('dl', {class: 'summary'}),
      lossChart: el('div', {class: 'chart', id: 'chart-loss'}),
      evalChart: el('div', {class: 'chart', id: 'chart-eval'}),
      historyNote: el('p', {class: 'muted'}),
      metrics: el('table', {class: 'grid', id: 'metrics-table'}),
      checkpoints: el('div', {id: 'checkpoints'}),
      events: el('ol', {class: 'events', id: 'events', reversed: true}),
      streamState: el('span', {class: 'muted', id: 'stream-state'}),
      config: el('pre', {class: 'config'}),
      spec: el('pre', {class: 'config', id: 'job-spec'}),
    };
    fill(this.container,
         el('div', {class: 'detail-head'}, n.title, n.actions,
            el('a', {href: '#/jobs', class: 'close', text: 'close'})),
         n.errors,
         n.summary,
         el('div', {class: 'charts'},
            this.section('Training loss', n.lossChart),
            this.section('Evaluation', n.evalChart)),
         n.historyNote,
         this.section('Metrics per evaluation', n.metrics),
         this.section('Checkpoints', n.checkpoints),
         this.section('Events', n.streamState, n.events),
         el('details', {class: 'panel', id: 'job-spec-panel'},
            el('summary', {text: 'Configuration (the job as submitted)'}), n.spec),
         el('details', {class: 'panel'},
            el('summary', {text: 'Job (as GET /v1/jobs/{id} reports it)'}), n.config));
    this.charts.loss = new StepChart(n.lossChart, 'loss', false);
    this.charts.loss.ensure(['train loss']);
    this.charts.eval = new StepChart(n.evalChart, 'metric', true);
    fill(n.metrics, el('thead'), el('tbody'));
  }

  applyJob(job) {
    this.job = job;
    const n = this.nodes;
    // Rebuilt only when the state changes, so that a button is never
    // replaced under the pointer by a step event.
    if (this.shownState !== job.state) {
      fill(n.title, el('span', {class: 'job-name', text: job.name || job.job_id}), ' ',
           el('span', {class: 'muted', text: job.job_id}), ' ', stateBadge(job.state));
      fill(n.actions, actionButtons(job, this.ui.onAction));
      this.shownState = job.state;
    }
    const errs = [];
    if (job.error) errs.push(el('div', {class: 'error', text: 'Error: ' + job.error}));
    if (job.checkpoint_error) {
      errs.push(el('div', {class: 'error', text: 'Checkpoint error: ' + job.checkpoint_error}));
    }
    fill(n.errors, errs);
    const progress = el('span');
    showProgress(progress, job);
    const rows = [
      ['Progress', progress],
      ['Loss', fmtNum(job.loss)],
      ['Examples/s', fmtRate(job.examples_per_sec)],
      ['ETA', TERMINAL.has(job.state) ? '–' : fmtSeconds(job.eta_seconds)],
      ['Created', fmtTime(job.created)],
      ['Started', fmtTime(job.started)],
      ['Finished', fmtTime(job.finished)],
      ['Last checkpoint', job.checkpoint ? 'step ' + fmtInt(job.checkpoint.step) + ', ' +
                          fmtBytes(job.checkpoint.bytes) + ', ' + fmtTime(job.checkpoint.time) : '–'],
      ['Checkpoint failures', fmtInt(job.checkpoint_failures)],
      ['Skipped steps (NaN)', fmtInt(job.skipped_steps)],
    ];
    if (job.resumed_from_step !== null && job.resumed_from_step !== undefined) {
      rows.push(['Resumed from step', fmtInt(job.resumed_from_step)]);
    }
    if (job.replicas > 1) {
      // Alive of asked for (fewer after a lost task, until it rejoins), and restarts.
      rows.push(['Replicas', (job.state === 'RUNNING' ? fmtInt(job.replicas_alive) + ' of ' : '') +
                 fmtInt(job.replicas) + (job.restarts ? ', ' + fmtInt(job.restarts) + ' restart(s)' : '')]);
    } else if (job.restarts) {
      rows.push(['Restarts', fmtInt(job.restarts)]);
    }
    if (this.replicaNote) rows.push(['Replicas', this.replicaNote]);
    if (job.placement && job.placement.length) {
      // Where each replica runs; the ones outside the current membership marked.
      rows.push(['Placement', job.placement.map((r, i) =>
          i + ': ' + (r.device || 'default device') + (r.alive ? '' : ' (not training)')).join('; ')]);
    }
    fill(n.summary, rows.map(([k, v]) => [el('dt', {text: k}), el('dd', {}, v)]));
    setText(n.config, JSON.stringify(job, null, 2));
    this.ui.onJob(job);
  }

  async loadHistory() {
    let h;
    try {
      h = await apiJson('GET', jobPath(this.id, '/history'), {signal: this.abort.signal});
    } catch (e) {
      if (e.name === 'AbortError') return;
      setText(this.nodes.historyNote, e.status === 404
          ? 'No history on this server: the curves start when the page opened the job.'
          : 'History not loaded: ' + e.message);
      return;
    }
    for (const s of h.steps || []) this.charts.loss.add(s.step, {'train loss': s.loss});
    for (const e of h.evals || []) this.addEval(e.step, e.epoch, e.time, e.metrics || {});
    setText(this.nodes.historyNote, h.downsampled ? 'Older steps are downsampled.' : '');
  }

  addEval(step, epoch, time, metrics) {
    this.charts.eval.add(step, metrics);
    if (this.evalSteps.has(step)) return;
    this.evalSteps.add(step);
    const table = this.nodes.metrics;
    const names = Object.keys(metrics);
    const head = table.tHead;
    const known = Array.from(head.querySelectorAll('th.metric')).map((th) => th.textContent);
    if (head.rows.length === 0 || names.some((m) => !known.includes(m))) {
      const all = known.concat(names.filter((m) => !known.includes(m)));
      fill(head, el('tr', {}, el('th', {text: 'Step'}), el('th', {text: 'Epoch'}), el('th', {text: 'Time'}),
                    all.map((m) => el('th', {class: 'metric', text: m}))));
    }
    const cols = Array.from(head.querySelectorAll('th.metric')).map((th) => th.textContent);
    const tr = el('tr', {}, el('td', {class: 'num', text: fmtInt(step)}),
                  el('td', {class: 'num', text: isNum(epoch) ? String(epoch + 1) : '–'}),
                  el('td', {text: typeof time === 'number' ? fmtTime(time * 1000) : fmtTime(time)}),
                  cols.map((m) => el('td', {class: 'num', text: fmtNum(metrics[m])})));
    const body = table.tBodies[0];
    const after = Array.from(body.rows).find((r) => Number(r.dataset.step) > step);
    tr.dataset.step = String(step);
    body.insertBefore(tr, after || null);
  }

  async loadSpec() {
    try {
      const spec = await apiJson('GET', jobPath(this.id, '/spec'), {signal: this.abort.signal});
      setText(this.nodes.spec, JSON.stringify(spec, null, 2));
    } catch (e) {
      if (e.name === 'AbortError') return;
      setText(this.nodes.spec, 'The configuration is not available: ' + e.message);
    }
  }

  async loadCheckpoints() {
    const box = this.nodes.checkpoints;
    let list;
    try {
      list = await apiJson('GET', jobPath(this.id, '/checkpoints'), {signal: this.abort.signal});
    } catch (e) {
      if (e.name === 'AbortError') return;
      fill(box, el('p', {class: 'muted', text: e.status === 501
          ? 'This server keeps no checkpoints (no store).' : 'Checkpoints: ' + e.message}));
      return;
    }
    const cps = list.checkpoints || [];
    if (cps.length === 0) { fill(box, el('p', {class: 'muted', text: 'No checkpoint yet.'})); return; }
    fill(box, el('table', {class: 'grid'},
        el('thead', {}, el('tr', {}, ['Step', 'Time', 'Size', 'Tensors', 'Export'].map((t) => el('th', {text: t})))),
        el('tbody', {}, cps.slice().reverse().map((c) => {
          // .fsck (re-importable) and .npz (numpy.load) of the same checkpoint.
          const links = ['fsck', 'npz'].map((format) => {
            const path = jobPath(this.id, '/checkpoints/export?step=' + encodeURIComponent(c.step) +
                                          (format === 'fsck' ? '' : '&format=' + format));
            const file = this.id + '-' + c.step + '.' + format;
            return el('a', {href: path, download: file, class: 'export export-' + format, text: file,
              onclick: (ev) => {
                if (!auth.headers().Authorization) return;  // a plain download works
                ev.preventDefault();
                download(path, file).catch((e) => this.ui.error(e));
              }});
          });
          return el('tr', {}, el('td', {class: 'num', text: fmtInt(c.step)}), el('td', {text: fmtTime(c.time)}),
                    el('td', {class: 'num', text: fmtBytes(c.bytes)}), el('td', {class: 'num', text: fmtInt(c.tensors)}),
                    el('td', {}, links[0], ' ', links[1]));
        }))));
  }

  log(kind, job) {
    let text;
    if (kind === 'state') text = 'state ' + job.state + (job.error ? ': ' + job.error : '');
    else if (kind === 'eval') text = Object.entries(job.metrics || {}).map(([k, v]) => k + ' ' + fmtNum(v)).join(', ');
    else text = job.message || '';
    const li = el('li', {class: 'event event-' + kind},
                  el('span', {class: 'event-kind', text: kind}), ' ',
                  el('span', {class: 'muted', text: 'step ' + fmtInt(job.step) +
                                                  (job.time ? ', ' + fmtTime(job.time) : '')}), ' ', text);
    const list = this.nodes.events;
    list.prepend(li);
    while (list.children.length > MAX_LOGGED_EVENTS) list.lastChild.remove();
  }

  onEvent(kind, job) {
    if (this.closed || job.job_id !== this.id) return;
    if (kind === 'step') {
      this.charts.loss.add(job.step, {'train loss': job.loss});
      if (job.message) this.replicaNote = job.message;
    } else {
      this.log(kind, job);
    }
    if (kind === 'eval') {
      // Every event carries the job as it was then and its own time, the
      // replayed past ones (?history=1) too: each evaluation plots and
      // lists its own metrics at its own step.
      this.addEval(job.step, job.epoch, job.time || null, job.metrics || {});
    }
    if (kind === 'checkpoint' || (kind === 'state' && TERMINAL.has(job.state))) this.loadCheckpoints();
    this.applyJob(job);
  }

  // Follows the job's events until it ends or the detail closes; reconnects
  // after a lost connection.
  async follow() {
    let first = true;
    while (!this.closed) {
      setText(this.nodes.streamState, 'live');
      try {
        await streamEvents(jobPath(this.id, first ? '/events?history=1' : '/events'),
                           (kind, job) => this.onEvent(kind, job), this.abort.signal);
      } catch (e) {
        if (e.name === 'AbortError' || this.closed) return;
        if (e.status >= 400 && e.status < 500) {  // gone, or no token: retrying will not help
          setText(this.nodes.streamState, 'no event stream: ' + e.message);
          return;
        }
        setText(this.nodes.streamState, 'event stream lost (' + e.message + '); reconnecting');
      }
      first = false;
      if (this.job && TERMINAL.has(this.job.state)) {
        setText(this.nodes.streamState, 'the job has ended');
        return;
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}
