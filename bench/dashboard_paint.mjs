// dashboard_paint.mjs - the dashboard's first paint and its live-update
// latency on a full platform, each beside a baseline from the same run.
//
//   node bench/dashboard_paint.mjs CNLABD CNLAB [--nodes 100] [--jobs 1000]
//        [--runs 5] [--updates 20]
//
// The platform: cnlabd --all-in-one (its embedded agent on the fake pool
// of two H100s) plus NODES-1 more nodes of 8 H100s registered through
// join tokens (POST /v1/nodes) and kept alive with heartbeats, and JOBS
// jobs submitted through the API (1,000 by default: a mix of running and
// pending).  Then, in Debian's Chromium (headless, playwright-core):
//
//   first paint     first-contentful-paint (Performance API) of /ui/
//                   signed in; the time until the block map lists every
//                   node and has drawn the GPUs of every node in the
//                   viewport (the page draws the others as they scroll
//                   in), and the page's element count then; then the
//                   time from scrolling the last node into view until
//                   its GPUs are drawn;
//                   baseline: first-contentful-paint of the same bytes
//                   (/ui/app.js, shown as a text document) from the same
//                   server, i.e. the cost of fetching and painting a page
//                   of that size with no application behind it;
//   update latency  from just before `cnlab run --detach` to the job's
//                   row on the open queues page (SSE: no polling, no
//                   reload); baseline: the same `cnlab run --detach`
//                   returning (the submission alone).
//
// Medians (and min/max) over the runs.  Figures only: nothing is asserted.
import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  if (i < 0) return def;
  const v = Number(args[i + 1]);
  if (!Number.isInteger(v) || v < 1) {
    console.error(`dashboard_paint: ${name}: a positive whole number`);
    process.exit(2);
  }
  args.splice(i, 2);
  return v;
};
const NODES = opt('--nodes', 100);
const JOBS = opt('--jobs', 1000);
const RUNS = opt('--runs', 5);
const UPDATES = opt('--updates', 20);
if (args.length !== 2) {
  console.error('usage: node bench/dashboard_paint.mjs CNLABD CNLAB [--nodes N] [--jobs N] [--runs N] [--updates N]');
  process.exit(2);
}
const [cnlabd, cnlab] = args.map((p) => path.resolve(p));
const { chromium } = await import(path.join(root, 'web/node_modules/playwright-core/index.mjs')).catch(() => {
  console.error('dashboard_paint: web/node_modules missing: run scripts/bootstrap');
  process.exit(1);
});

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cnlab-paint-'));
const home = path.join(tmp, 'home');
fs.mkdirSync(home);
const env = { ...process.env, HOME: home };
for (const k of ['CNLAB_JWT_SECRET', 'CNLAB_ADMIN_PASSWORD', 'CNLAB_SERVER', 'CNLAB_TOKEN', 'CNLAB_CONFIG'])
  delete env[k];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let daemon = null;
let beat = null;
process.on('exit', () => {
  clearInterval(beat);
  if (daemon && daemon.exitCode === null) {
    daemon.removeAllListeners('exit');
    daemon.kill('SIGKILL');
  }
  if (!process.env.KEEP) fs.rmSync(tmp, { recursive: true, force: true });
});

const out = fs.openSync(path.join(tmp, 'out'), 'w');
const errf = fs.openSync(path.join(tmp, 'err'), 'w');
daemon = spawn(cnlabd, ['--all-in-one', '--data-dir', path.join(tmp, 'data'), '--listen', '127.0.0.1:0',
  '--gpus', 'fake:2xH100-80GB-SXM', '--log-level', 'warn'], { env, stdio: ['ignore', out, errf] });
daemon.on('exit', (code, sig) => {
  console.error(`dashboard_paint: cnlabd exited (${code ?? sig}); its last words:`);
  console.error(fs.readFileSync(path.join(tmp, 'err'), 'utf8').split('\n').slice(-15).join('\n'));
  process.exit(1);
});
let url = null;
for (let i = 0; i < 400 && !url; i++) {
  url = (/^CNLab is running at (\S+)/m.exec(fs.readFileSync(path.join(tmp, 'out'), 'utf8')) || [])[1];
  if (!url) await sleep(50);
}
if (!url) {
  console.error('dashboard_paint: cnlabd did not start');
  process.exit(1);
}
const adminPw = fs.readFileSync(path.join(tmp, 'data/admin.password'), 'utf8').trim();

async function call(method, p, body, token) {
  const r = await fetch(url + p, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const t = await r.text();
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${t}`);
  return t ? JSON.parse(t) : null;
}
const login = await fetch(`${url}/v1/auth/login`, { method: 'POST', body: JSON.stringify({ user: 'admin', password: adminPw }) });
const tok = (await login.json()).token;

// --- the platform: nodes ----------------------------------------------------
// The embedded agent's node is cordoned first: the filling jobs stay on
// the registered nodes (whose agents are only heartbeats), so nothing of
// them runs on this machine, and nothing outlives the bench.
let own = [];
for (let i = 0; i < 100 && own.length === 0; i++) {
  own = (await call('GET', '/v1/nodes', undefined, tok)).items || [];
  if (own.length === 0) await sleep(100);
}
for (const n of own) await call('PATCH', `/v1/nodes/${n.id}`, { state: 'cordoned' }, tok);
const creds = [];
for (let i = 1; i < NODES; i++) {
  const name = `bench-${String(i).padStart(3, '0')}`;
  const jt = await call('POST', '/v1/nodes/join-tokens', { node: name }, tok);
  const devices = Array.from({ length: 8 }, (_, d) => ({
    index: d, uuid: `GPU-bench-${i}-${d}`, mem_mib: 81559, healthy: true,
  }));
  const n = await call('POST', '/v1/nodes', {
    protocol: 6,
    name, gpu_type: 'H100-80GB-SXM', gpus: 8, cpu_milli: 128000, mem_mib: 1 << 20, devices,
  }, jt.token);
  creds.push({ id: n.id, token: n.credential, epoch: n.epoch ?? 1 });
}
// Keep them alive: a heartbeat each every 5 s (the lease is longer), 16
// at a time (cnlabd takes at most 128 connections from one address).
async function inBatches(items, fn) {
  for (let i = 0; i < items.length; i += 16) await Promise.all(items.slice(i, i + 16).map(fn));
}
let beating = false;
const heartbeat = async () => {
  if (beating) return;
  beating = true;
  await inBatches(creds, (c) =>
    call('POST', `/v1/nodes/${c.id}/heartbeat`, { epoch: c.epoch, running: [] }, c.token).catch(() => {}));
  beating = false;
};
await heartbeat();
beat = setInterval(heartbeat, 5000);
console.error(`dashboard_paint: ${NODES} nodes registered`);

// --- the platform: jobs -----------------------------------------------------
const proj = (await call('GET', '/v1/projects', undefined, tok)).items.find((p) => p.name === 'default').id;
await inBatches(Array.from({ length: JOBS }, (_, k) => k), (k) =>
  call('POST', `/v1/projects/${proj}/jobs`, { command: `sleep 3600 # fill ${k}`, gpu: 'h100-25' }, tok));

console.error(`dashboard_paint: ${JOBS} jobs submitted`);
// The CLI signed in as the README shows.
await new Promise((res) => {
  const p = execFile(cnlab, ['login', '--server', url, '--user', 'admin', '--password-stdin'], { env }, res);
  p.stdin.end(`${adminPw}\n`);
});

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true });
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const signin = await ctx.request.post(`${url}/v1/auth/cookie`, { data: { user: 'admin', password: adminPw } });
if (!signin.ok()) {
  console.error(`dashboard_paint: POST /v1/auth/cookie: ${signin.status()} ${await signin.text()}`);
  process.exit(1);
}
console.error('dashboard_paint: signed in; loading the dashboard');
// What the snapshot holds: the embedded agent's node is there only if
// its agent started (a cnlabd without cnlab-agent beside it has none).
const snap0 = await call('GET', '/v1/dashboard', undefined, tok);
const nodesShown = snap0.nodes.length;
const gpusTotal = snap0.nodes.reduce((a, n) => a + (n.gpus || []).length, 0);

const fcp = (page) => page.evaluate(() => new Promise((res) => {
  const e = performance.getEntriesByName('first-contentful-paint')[0];
  if (e) return res(e.startTime);
  new PerformanceObserver((l) => res(l.getEntries()[0].startTime)).observe({ type: 'paint', buffered: true });
}));

const paint = [];
const mapDone = [];
const scrollDone = [];
const domSize = [];
const base = [];
for (let r = 0; r < RUNS; r++) {
  let page = await ctx.newPage();
  await page.goto(`${url}/ui/app.js`);
  base.push(await fcp(page));
  await page.close();
  page = await ctx.newPage();
  await page.goto(`${url}/ui/#/map`);
  paint.push(await fcp(page));
  // Every node listed, and every node within the viewport drawn (a
  // build that draws all nodes at once has no data-drawn="no").
  const t = await page.waitForFunction((n) => {
    const nodes = document.querySelectorAll('.node');
    if (nodes.length < n || !document.querySelector('.gpu[data-gpu]')) return false;
    for (const el of nodes)
      if (el.getBoundingClientRect().top < innerHeight && el.dataset.drawn === 'no') return false;
    return performance.now();
  }, nodesShown, { polling: 'raf', timeout: 120000 }).catch(async (e) => {
    const seen = await page.evaluate(() => `${document.querySelectorAll('.node').length} nodes, ` +
      `${document.querySelectorAll('.gpu[data-gpu]').length} GPUs drawn; ` +
      `${(document.querySelector('main') || document.body).textContent.slice(0, 300)}`);
    console.error(`dashboard_paint: the block map was not drawn: ${seen}`);
    throw e;
  });
  mapDone.push(await t.jsonValue());
  domSize.push(await page.evaluate(() => document.getElementsByTagName('*').length));
  // Then the last node scrolled into view, until its GPUs are drawn.
  const s = await page.evaluate(() => {
    const all = document.querySelectorAll('.node');
    const last = all[all.length - 1];
    const t0 = performance.now();
    last.scrollIntoView();
    return new Promise((res) => {
      const poll = () => (last.querySelector('.gpu[data-gpu]') ? res(performance.now() - t0) : requestAnimationFrame(poll));
      poll();
    });
  });
  scrollDone.push(s);
  await page.close();
}

// --- update latency -----------------------------------------------------------
const page = await ctx.newPage();
await page.goto(`${url}/ui/#/queues`);
await page.waitForSelector('[data-testid=running]');
fs.writeFileSync(path.join(tmp, 'tick.py'), 'print("tick")\n');
const lat = [];
const submit = [];
for (let u = 0; u < UPDATES; u++) {
  // The page notes when a row for a job it has not seen before appears.
  await page.evaluate(() => {
    const seen = new Set([...document.querySelectorAll('tr[data-job]')].map((r) => r.dataset.job));
    window.__appeared = new Map();
    window.__obs && window.__obs.disconnect();
    window.__obs = new MutationObserver(() => {
      for (const r of document.querySelectorAll('tr[data-job]'))
        if (!seen.has(r.dataset.job) && !window.__appeared.has(r.dataset.job))
          window.__appeared.set(r.dataset.job, performance.timeOrigin + performance.now());
    });
    window.__obs.observe(document.querySelector('main'), { childList: true, subtree: true });
  });
  const t0 = Date.now();
  const job = await new Promise((res) => execFile(cnlab, ['run', 'tick.py', '--gpu', 'h100-25', '--priority', 'high', '--detach', '-o', 'json'],
    { env, cwd: tmp }, (err, stdout) => {
      submit.push(Date.now() - t0);
      try {
        res(JSON.parse(stdout).id);
      } catch {
        res(null);
      }
    }));
  if (!job) continue;
  const h = await page.waitForFunction((j) => window.__appeared.get(j), job, { timeout: 60000 }).catch(() => null);
  if (!h) {
    console.error(`dashboard_paint: job ${job} not shown within 60 s: no live update, stopping the latency runs`);
    break;
  }
  lat.push((await h.jsonValue()) - t0);
}
await browser.close();

const med = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length ? s[Math.floor(s.length / 2)] : NaN;
};
const row = (name, a, b, bname) => !a.length ? console.log(`${name.padEnd(34)}    n/a (none measured)   baseline ${bname}: ${med(b).toFixed(0)} ms`) :
  console.log(`${name.padEnd(34)} ${med(a).toFixed(0).padStart(6)} ms (min ${Math.min(...a).toFixed(0)}, max ${Math.max(...a).toFixed(0)})   ` +
    `baseline ${bname}: ${med(b).toFixed(0)} ms`);
console.log(`dashboard_paint: ${NODES} nodes (${nodesShown} with ${gpusTotal} GPUs on the map), ${JOBS} jobs, ${RUNS} loads, ${UPDATES} updates, ${url}`);
row('first-contentful-paint /ui/', paint, base, 'FCP of the same bytes as text');
row('block map drawn (nodes in view)', mapDone, base, 'FCP of the same bytes as text');
row('last node scrolled in, drawn', scrollDone, base, 'FCP of the same bytes as text');
console.log(`${'map page DOM elements when drawn'.padEnd(34)} ${med(domSize).toFixed(0).padStart(6)}`);
row('cnlab run -> row on the page', lat, submit, 'cnlab run --detach returns');
process.exit(0);
