// The REST API as the console uses it. The token lives in this tab's
// sessionStorage only (gone when the tab closes; never sent to the server
// except as `Authorization: Bearer` on API calls). The event stream is read
// with fetch() and a stream parser rather than EventSource, which cannot
// send an Authorization header.

const TOKEN_KEY = 'flowstate.token';

const auth = {
  token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
  },
  set(t) {
    try {
      if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage off: the token lasts until the page reloads */ }
    auth.memory = t;
  },
  headers(extra) {
    const h = Object.assign({}, extra || {});
    const t = auth.token() || auth.memory || '';
    if (t) h.Authorization = 'Bearer ' + t;
    return h;
  },
  memory: '',
  // Called with an ApiError whenever the server answers 401.
  onUnauthorized: null,
};

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;   // HTTP status, 0 when the server was not reached
    this.code = code;       // "UNAUTHENTICATED", "NOT_FOUND", ...
  }
}

async function errorFrom(resp) {
  let code = 'HTTP_' + resp.status, message = resp.statusText || ('HTTP ' + resp.status);
  try {
    const body = await resp.json();
    if (body && body.error) {
      code = String(body.error.code || code);
      message = String(body.error.message || message);
    }
  } catch (e) { /* not JSON */ }
  const err = new ApiError(resp.status, code, message);
  if (resp.status === 401 && auth.onUnauthorized) auth.onUnauthorized(err);
  return err;
}

// fetch() with the token; throws ApiError for a transport failure or a 4xx/5xx.
async function apiFetch(method, path, init) {
  let resp;
  try {
    resp = await fetch(path, Object.assign({
      method, headers: auth.headers(init && init.headers), cache: 'no-store',
    }, init ? {signal: init.signal} : {}));
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError(0, 'UNAVAILABLE', 'the server did not answer (' + e.message + ')');
  }
  if (!resp.ok) throw await errorFrom(resp);
  return resp;
}

async function apiJson(method, path, init) {
  const resp = await apiFetch(method, path, init);
  return resp.json();
}

function jobPath(id, rest) {
  return '/v1/jobs/' + encodeURIComponent(id) + (rest || '');
}

// Reads a text/event-stream response: calls onEvent(kind, data) for every
// event whose data parses as JSON, until the stream ends (resolves), the
// signal aborts (rejects with AbortError) or the connection fails (rejects).
async function streamEvents(path, onEvent, signal) {
  const resp = await apiFetch('GET', path, {headers: {Accept: 'text/event-stream'}, signal});
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = '', kind = 'message', data = [];
  const line = (l) => {
    if (l === '') {
      if (data.length > 0) {
        let parsed = null;
        try { parsed = JSON.parse(data.join('\n')); } catch (e) { /* not JSON: skip it */ }
        if (parsed !== null) onEvent(kind, parsed);
      }
      kind = 'message';
      data = [];
      return;
    }
    if (l[0] === ':') return;  // a comment (": keep-alive")
    const colon = l.indexOf(':');
    const field = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? '' : l.slice(colon + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'event') kind = value;
    else if (field === 'data') data.push(value);
  };
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += decoder.decode(value, {stream: true});
    let nl;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      const len = buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1;
      if (buf[nl] === '\r' && nl + 1 === buf.length) break;  // a \r\n may be split
      line(buf.slice(0, nl));
      buf = buf.slice(nl + len);
    }
  }
  if (buf) line(buf);
  line('');
}

// Downloads `path` with the token as `filename` (a plain link cannot send
// the Authorization header).
async function download(path, filename) {
  const resp = await apiFetch('GET', path);
  const url = URL.createObjectURL(await resp.blob());
  const a = el('a', {href: url, download: filename});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
