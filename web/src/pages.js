// The devices and cluster pages: tables refreshed while they are shown.

function memoryCell(m) {
  if (!m) return '–';
  const limit = isNum(m.bytes_limit) && m.bytes_limit > 0 ? m.bytes_limit : 0;
  return [
    limit ? el('progress', {max: limit, value: Math.min(m.bytes_in_use, limit)}) : null,
    el('span', {text: fmtBytes(m.bytes_in_use) + (limit ? ' of ' + fmtBytes(limit) : '')}),
  ];
}

function jobLinks(ids) {
  const out = [];
  (ids || []).forEach((id, i) => {
    if (i) out.push(', ');
    out.push(el('a', {href: '#/jobs/' + encodeURIComponent(id), text: id}));
  });
  return out.length ? out : '–';
}

function renderDevices(tbody, body) {
  const devices = body.devices || [];
  fill(tbody, devices.map((d) => {
    const m = d.memory || {};
    return el('tr', {'data-device': d.name},
              el('td', {}, el('div', {text: d.name}), el('div', {class: 'muted', text: d.description || ''})),
              el('td', {text: d.type}),
              el('td', {class: 'memory'}, memoryCell(m)),
              el('td', {class: 'num', text: fmtBytes(m.peak_bytes_in_use)}),
              el('td', {class: 'num', text: fmtBytes(m.bytes_cached)}),
              el('td', {}, jobLinks(d.jobs)));
  }));
  if (devices.length === 0) fill(tbody, el('tr', {}, el('td', {colspan: 6, class: 'muted', text: 'No devices.'})));
}

function renderCluster(tbody, body) {
  const tasks = body.tasks || [];
  fill(tbody, tasks.map((t) => el('tr', {'data-task': t.name},
      el('td', {}, el('span', {text: t.name}), t.is_self ? el('span', {class: 'muted', text: ' (this server)'}) : null),
      el('td', {text: t.address || '–'}),
      el('td', {}, el('span', {class: 'state state-' + String(t.state).toLowerCase(), text: t.state})),
      el('td', {class: 'mono', text: t.incarnation || '–'}),
      el('td', {text: t.last_heartbeat ? fmtTime(t.last_heartbeat) + ' (' + fmtSeconds(t.heartbeat_age_seconds) + ' ago)' : '–'}),
      el('td', {}, (t.devices || []).map((d) => el('div', {text: d.name + ': ' + fmtBytes((d.memory || {}).bytes_in_use) + ' in use'}))),
      el('td', {class: 'error-text', text: t.error || ''}))));
  if (tasks.length === 0) fill(tbody, el('tr', {}, el('td', {colspan: 7, class: 'muted', text: 'No tasks.'})));
}
