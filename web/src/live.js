// live.js - the dashboard snapshot, kept current by one EventSource on
// GET /v1/dashboard/events (event "snapshot", data: the whole snapshot).
//
// No polling: the stream sends the snapshot at connect and on every
// change.  EventSource reconnects by itself after a dropped connection;
// when it gives up (readyState CLOSED, e.g. after a 401 or a restart that
// refused it) we open a new one after a back-off of 1 s doubling to 30 s,
// first checking whether the session still holds (a 401 there means the
// user must sign in again).  Subscribers get (snapshot, status) where
// status is 'connecting' | 'live' | 'reconnecting'.

let es = null;
let snap = null;
let status = 'connecting';
let retry = 1000;
let timer = null;
let onAuthLost = null;
const subs = new Set();

function emit() {
  for (const f of subs) f(snap, status);
}

export function subscribe(f) {
  subs.add(f);
  f(snap, status);
  return () => subs.delete(f);
}

export function current() {
  return snap;
}

function open() {
  clearTimeout(timer);
  timer = null;
  es = new EventSource('/v1/dashboard/events', { withCredentials: true });
  es.addEventListener('snapshot', (ev) => {
    try {
      snap = JSON.parse(ev.data);
    } catch {
      return;
    }
    retry = 1000;
    status = 'live';
    window.__cnlabSnapshotAt = performance.now();
    emit();
  });
  es.addEventListener('open', () => {
    status = 'live';
    emit();
  });
  es.addEventListener('error', () => {
    status = 'reconnecting';
    emit();
    if (es && es.readyState === EventSource.CLOSED) {
      es.close();
      es = null;
      timer = setTimeout(recheck, retry);
      retry = Math.min(retry * 2, 30000);
    }
  });
}

async function recheck() {
  try {
    const r = await fetch('/v1/auth/whoami', { credentials: 'same-origin' });
    if (r.status === 401) {
      stop();
      if (onAuthLost) onAuthLost();
      return;
    }
  } catch {
    /* the server is away: try the stream again anyway */
  }
  open();
}

export function start(authLost) {
  onAuthLost = authLost;
  if (!es && !timer) open();
}

export function stop() {
  clearTimeout(timer);
  timer = null;
  if (es) es.close();
  es = null;
  snap = null;
  status = 'connecting';
  retry = 1000;
}
