// DOM helpers and number formats. Every string that comes from the server
// (job names, errors, metric names, messages) enters the page as text
// (textContent, text nodes, attribute values), never as markup: the
// console never hands a string to the HTML parser.

// el('td', {class: 'num', text: '3'}, child, 'text', ...): an element with
// properties and children (nodes, or strings that become text nodes).
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = String(v);
    else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Replaces the children of `parent` with `children`.
function fill(parent, ...children) {
  parent.replaceChildren();
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return parent;
}

// Sets an element's text only when it changed (keeps selections and focus).
function setText(e, text) {
  const t = String(text);
  if (e.textContent !== t) e.textContent = t;
}

function isNum(x) { return typeof x === 'number' && Number.isFinite(x); }

function fmtNum(x, digits) {
  if (!isNum(x)) return '–';
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(2);
  return x.toFixed(digits === undefined ? 4 : digits);
}

function fmtInt(x) { return isNum(x) ? Math.round(x).toLocaleString('en-US') : '–'; }

function fmtRate(x) {
  if (!isNum(x)) return '–';
  return x >= 100 ? fmtInt(x) : x.toFixed(1);
}

function fmtBytes(x) {
  if (!isNum(x)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = x, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; ++u; }
  return (u === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + units[u];
}

function fmtSeconds(s) {
  if (!isNum(s)) return '–';
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  const m = Math.floor(s / 60), h = Math.floor(m / 60);
  if (h > 0) return h + ' h ' + String(m % 60).padStart(2, '0') + ' min';
  return m + ' min ' + String(Math.round(s % 60)).padStart(2, '0') + ' s';
}

// An RFC 3339 time from the server as local time ("–" for null).
function fmtTime(t) {
  if (!t) return '–';
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? String(t) : d.toLocaleString();
}

const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

function stateBadge(state) {
  return el('span', {class: 'state state-' + String(state).toLowerCase(), text: state});
}
