// The page: the token field, the views (#/jobs, #/jobs/ID, #/devices,
// #/cluster), polling of the shown view every POLL_MS, and the banner for
// errors. Runs once the document is parsed (the script is deferred).

const POLL_MS = 2000;
const byId = (id) => document.getElementById(id);

const page = {view: '', jobId: '', detail: null, timer: 0, table: null};

// The banner: one message at a time; `kind` "auth" for a missing or wrong
// token, "error" for anything else.
function showBanner(kind, text) {
  const b = byId('banner');
  b.dataset.kind = kind;
  b.className = 'banner banner-' + kind;
  setText(b, text);
  b.hidden = false;
}

function clearBanner(kind) {
  const b = byId('banner');
  if (!b.hidden && (!kind || b.dataset.kind === kind)) b.hidden = true;
}

function reportError(err, what) {
  if (err && err.name === 'AbortError') return;
  if (err && err.status === 401) return;  // onUnauthorized said it
  showBanner('error', (what ? what + ': ' : '') + (err && err.message ? err.message : String(err)));
}

auth.onUnauthorized = (err) => {
  showBanner('auth', 'Unauthorized: ' + err.message + '. This server needs a bearer token: ' +
             'enter it in the Token field above.');
};

async function runAction(name, id) {
  try {
    const job = await apiJson('POST', jobPath(id, '/' + name));
    page.table.updateJob(job);
    if (page.detail && page.detail.id === id) page.detail.applyJob(job);
    clearBanner('error');
  } catch (e) {
    reportError(e, name + ' ' + id);
  }
}

async function refresh() {
  clearTimeout(page.timer);
  try {
    if (page.view === 'jobs') {
      page.table.update((await apiJson('GET', '/v1/jobs')).jobs || []);
    } else if (page.view === 'devices') {
      renderDevices(byId('devices-table').tBodies[0], await apiJson('GET', '/v1/devices'));
    } else if (page.view === 'cluster') {
      renderCluster(byId('cluster-table').tBodies[0], await apiJson('GET', '/v1/cluster'));
    }
    clearBanner('auth');
    clearBanner('load');
  } catch (e) {
    if (e.status !== 401) showBanner('load', 'Loading ' + page.view + ': ' + e.message);
  }
  page.timer = setTimeout(refresh, POLL_MS);
}

// Shows what location.hash names; `force` reopens the job detail.
function route(force) {
  const m = /^#\/(jobs|devices|cluster)(?:\/(.+))?$/.exec(location.hash);
  const view = m ? m[1] : 'jobs';
  let jobId = '';
  if (m && m[1] === 'jobs' && m[2]) {
    try { jobId = decodeURIComponent(m[2]); } catch (e) { jobId = m[2]; }
  }
  for (const v of ['jobs', 'devices', 'cluster']) {
    byId('view-' + v).hidden = v !== view;
    const a = document.querySelector('nav a[data-view="' + v + '"]');
    a.classList.toggle('active', v === view);
  }
  if (force || jobId !== page.jobId || view !== page.view) {
    if (page.detail) page.detail.close();
    page.detail = null;
    if (view === 'jobs' && jobId) {
      page.detail = new JobDetail(byId('job-detail'), jobId, {
        onAction: runAction,
        onJob: (job) => page.table.updateJob(job),
        error: (e) => reportError(e),
      });
      page.detail.open();
    }
  }
  page.jobId = jobId;
  page.table.select(jobId);
  const changed = view !== page.view;
  page.view = view;
  if (changed || force) refresh();
}

function showTokenState() {
  setText(byId('token-state'), auth.token() || auth.memory ? 'token set (this tab only)' : 'no token');
}

function start() {
  page.table = new JobsTable(byId('jobs-table').tBodies[0], byId('jobs-empty'), runAction);
  byId('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = byId('token');
    auth.set(input.value.trim());
    input.value = '';
    showTokenState();
    clearBanner('auth');
    route(true);
  });
  byId('token-clear').addEventListener('click', () => {
    auth.set('');
    showTokenState();
    route(true);
  });
  window.addEventListener('hashchange', () => route(false));
  showTokenState();
  route(true);
}

// A read-only look at the live charts, for tests and the browser console:
// flowstateConsole.chart('loss' | 'eval') is the uPlot instance (its .data
// holds the points) of the open job, or null.
window.flowstateConsole = Object.freeze({
  chart: (name) => (page.detail && page.detail.charts[name] ? page.detail.charts[name].u : null),
  jobId: () => page.jobId,
});

start();
