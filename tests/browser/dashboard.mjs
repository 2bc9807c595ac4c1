// dashboard.mjs - the dashboard in a real browser (Debian's Chromium,
// headless, driven by playwright-core) against a real all-in-one
// platform: cnlabd --all-in-one with its embedded agent on the fake pool
// of two H100s, started as tests/integration/lib.sh does, the admin
// signed in to the CLI as the README shows (cnlab login).
//
//   node tests/browser/dashboard.mjs CNLABD CNLAB OUTDIR
//
// What it checks, each as "ok"/"FAIL" lines; exit 1 on any failure:
//   - GET / leads to the dashboard, sign-in through the page's form sets
//     the session cookie (HttpOnly: the page's script cannot read it);
//   - the block map shows the fake pool's node and both its GPUs;
//   - at scale (40 more nodes of 8 GPUs): every node is listed but only
//     those near the viewport are drawn; one far down is drawn once
//     filtered to by name or scrolled to; the free capacity shown
//     (overall, per node, per GPU, and the free-only filter) is the
//     snapshot's;
//   - a job submitted with `cnlab run` appears on the queues page and
//     finishes there with no reload (the page's own state survives), its
//     page shows its six decisions and its live log;
//   - a server created with `cnlab server create` is stopped from the
//     page (the CLI then sees it stopped: the POST carried X-CSRF-Token,
//     which cnlabd demands of cookie sessions);
//   - a non-admin sees no admin page and the API refuses them the admin
//     routes;
//   - no console errors (beyond the 401/404 of the signed-out probes on
//     the sign-in page), no page errors, no CSP violations.
// Screenshots go to OUTDIR (their paths are printed).  A missing chromium
// or web/node_modules fails the test (it never skips).
import { spawn, spawnSync, execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { CHROMIUM, args, bad, check, finish, loadChromium, ok, root, scratch } from './lib.mjs';

const [cnlabd, cnlab, outdir] = args('dashboard.mjs', ['CNLABD', 'CNLAB', 'OUTDIR']);
const chromium = await loadChromium();
const { tmp, home, env } = scratch('cnlab-browser-');
fs.mkdirSync(outdir, { recursive: true });

let daemon = null;
let browser = null;
function cleanup() {
  if (daemon && daemon.exitCode === null) daemon.kill('SIGTERM');
}
// cnlabd stops its embedded agent before it exits: wait for that (or
// give up after 30 s of a hung shutdown) before the folder goes.
async function stopDaemon() {
  if (!daemon || daemon.exitCode !== null) return;
  const gone = new Promise((r) => daemon.once('exit', r));
  daemon.kill('SIGTERM');
  await Promise.race([gone, sleep(30000)]);
  if (daemon.exitCode === null && daemon.signalCode === null) {
    bad('cnlabd did not stop within 30 s of SIGTERM: killed');
    daemon.kill('SIGKILL');
    await gone;
  }
}
process.on('exit', () => {
  cleanup();
  // A server's workspace volume stays mounted for the agent's next
  // start; this test's go with it (deepest first), then its folder.
  try {
    const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
      .map((l) => l.split(' ')[4]).filter((m) => m && m.startsWith(`${tmp}/`)).sort().reverse();
    for (const m of mounts) spawnSyncQuiet('umount', ['-l', m]);
  } catch {
    /* nothing mounted */
  }
  if (!process.env.KEEP) fs.rmSync(tmp, { recursive: true, force: true });
});
function spawnSyncQuiet(cmd, args) {
  spawnSync(cmd, args, { stdio: 'ignore' });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function cli(args, input) {
  return new Promise((resolve) => {
    const p = execFile(cnlab, args, { env, cwd: tmp, timeout: 120000 }, (err, stdout, stderr) =>
      resolve({ code: err ? (err.code ?? 1) : 0, out: stdout, err: stderr }));
    if (input !== undefined) p.stdin.end(input);
  });
}

async function startPlatform() {
  const out = fs.openSync(path.join(tmp, 'out'), 'w');
  const err = fs.openSync(path.join(tmp, 'err'), 'w');
  daemon = spawn(cnlabd, ['--all-in-one', '--data-dir', path.join(tmp, 'data'), '--listen', '127.0.0.1:0',
    '--gpus', 'fake:2xH100-80GB-SXM', '--log-level', 'warn'], { env, stdio: ['ignore', out, err] });
  for (let i = 0; i < 400; i++) {
    const m = /^CNLab is running at (\S+)/m.exec(fs.readFileSync(path.join(tmp, 'out'), 'utf8'));
    if (m) return m[1];
    if (daemon.exitCode !== null) break;
    await sleep(50);
  }
  console.error(fs.readFileSync(path.join(tmp, 'out'), 'utf8'), fs.readFileSync(path.join(tmp, 'err'), 'utf8'));
  throw new Error('cnlabd did not start');
}

// Wait (up to a timeout for a hung platform, never as a speed check)
// until fn() is truthy; returns its value or null.
async function until(fn, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) return null;
    await sleep(100);
  }
}

// One page with everything recorded that must not happen.
async function watchedPage(context, name) {
  const page = await context.newPage();
  const rec = { console: [], pageErrors: [], name };
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) =>
      window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const url = (m.location() && m.location().url) || '';
    // Signed out, the page asks who is signed in (401) and whether single
    // sign-on is configured (404 here): the browser logs both.
    if (/Failed to load resource/.test(m.text()) && /\/v1\/auth\/(whoami|oidc)$/.test(url)) return;
    rec.console.push(`${m.text()} ${url}`);
  });
  page.on('pageerror', (e) => rec.pageErrors.push(e.message));
  return { page, rec };
}

async function shot(page, name) {
  const p = path.join(outdir, `${name}.png`);
  await page.screenshot({ path: p, fullPage: true });
  console.log(`screenshot ${p}`);
}

async function signIn(page, url, user, password) {
  await page.goto(`${url}/`);
  await page.getByLabel('User').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  return until(async () => (await page.locator('[data-testid=whoami]').count()) > 0, 15000);
}

// Every element with text of its own: the contrast of its colour on the
// first solid background behind it (WCAG: 4.5:1, 3:1 for large text).
// Returns the offenders.
function lowContrast(page) {
  return page.evaluate(() => {
    const rgb = (c) => (c.match(/[\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => {
      const f = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const bad = [];
    for (const el of document.querySelectorAll('body *')) {
      if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
      const cs = getComputedStyle(el);
      if (cs.visibility === 'hidden' || cs.display === 'none' || el.closest('.sr-only, .skip')) continue;
      let bg = null;
      for (let e = el; e && !bg; e = e.parentElement) {
        const c = rgb(getComputedStyle(e).backgroundColor);
        if (c.length >= 3 && (c.length === 3 || c[3] > 0.99)) bg = c;
      }
      bg = bg || [255, 255, 255];
      const [a, b] = [lum(rgb(cs.color)), lum(bg)].sort((x, y) => y - x);
      const ratio = (a + 0.05) / (b + 0.05);
      const size = parseFloat(cs.fontSize);
      const large = size >= 24 || (size >= 18.66 && Number(cs.fontWeight) >= 700);
      if (ratio < (large ? 3 : 4.5)) bad.push(`${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
    }
    return bad;
  });
}

async function rowState(page, table, id) {
  return page.evaluate(([t, j]) => {
    const r = document.querySelector(`[data-testid=${t}] tr[data-job="${j}"]`);
    return r ? (r.dataset.state || 'shown') : null;
  }, [table, id]);
}

async function main() {
  const url = await startPlatform();
  ok(`all-in-one started at ${url}`);
  const adminPw = fs.readFileSync(path.join(tmp, 'data/admin.password'), 'utf8').trim();
  let r = await cli(['login', '--server', url, '--user', 'admin', '--password-stdin'], `${adminPw}\n`);
  check(r.code === 0, 'cnlab login as admin', r.err);
  r = await cli(['user', 'create', 'bob', '--password-stdin'], 'bob-password-1\n');
  check(r.code === 0, 'cnlab user create bob', r.err);
  r = await cli(['project', 'member', 'add', 'default', 'bob']);
  check(r.code === 0, 'cnlab project member add default bob', r.err);
  // A server for the page to stop, created the Quickstart's way.
  const image = '/var/cache/cnlab/images/debian-12-python.tar';
  if (!fs.existsSync(image)) bad(`no test image ${image}: run scripts/bootstrap (it builds it)`);
  r = await cli(['image', 'import', image, '--name', 'pytorch:2.4-cuda12.4']);
  check(r.code === 0, 'cnlab image import', r.err);

  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const { page, rec } = await watchedPage(ctx, 'admin');

  // --- sign in -----------------------------------------------------------
  check(await signIn(page, url, 'admin', adminPw), 'admin signs in on the page');
  check(/\/ui\/(#.*)?$/.test(page.url()), 'GET / leads to /ui/', page.url());
  const cookies = await ctx.cookies();
  const sess = cookies.find((c) => c.name === 'cnlab_ui');
  check(sess && sess.httpOnly && sess.sameSite === 'Strict', 'session cookie is HttpOnly, SameSite=Strict', JSON.stringify(sess));
  check(await page.evaluate(() => !document.cookie.includes('cnlab_ui')), "the page's script cannot read the session");

  // --- block map -----------------------------------------------------------
  const gpus = await until(async () => {
    const n = await page.locator('.gpu[data-gpu]').count();
    return n >= 2 ? n : 0;
  });
  check(gpus === 2, 'block map shows the fake pool\'s 2 GPUs', `saw ${gpus}`);
  const models = await page.locator('.gpu .gpu-model').allTextContents();
  check(models.length === 2 && models.every((m) => /H100/.test(m)), 'both GPUs are H100s', models.join(', '));
  await shot(page, 'blockmap');
  const lc = await lowContrast(page);
  check(lc.length === 0, 'block map: text contrast at least 4.5:1 (3:1 large)', lc.join('; '));
  // Keyboard: Tab reaches the navigation, and a slice (when there is one)
  // takes focus and fills the details panel.
  await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.activeElement && document.activeElement.textContent.trim()) === 'Skip to content',
    'the first Tab reaches "Skip to content"');

  // --- a job from the CLI, watched on the queues page --------------------------
  await page.click('nav >> text=Queues');
  await page.waitForSelector('[data-testid=pending]');
  await page.evaluate(() => {
    window.__noReload = 'still here';
  });
  fs.writeFileSync(path.join(tmp, 'train.py'),
    'import time\nprint("browser-test output line")\ntime.sleep(3)\nprint("finished")\n');
  r = await cli(['run', 'train.py', '--gpu', 'h100-25', '--detach', '-o', 'json']);
  let job = null;
  try {
    job = JSON.parse(r.out).id;
  } catch {
    job = (/(job_[0-9A-Z]+)/.exec(r.out + r.err) || [])[1];
  }
  check(r.code === 0 && job, 'cnlab run --detach submits a job', r.out + r.err);
  if (!job) throw new Error('no job to watch');
  const seen = await until(async () => (await rowState(page, 'pending', job)) || (await rowState(page, 'running', job)));
  check(seen, 'the job appears (pending or running) without a reload');
  if (seen) await shot(page, 'queues-running');
  const ended = await until(async () => rowState(page, 'recent', job), 60000);
  check(ended === 'succeeded', 'the job finishes (recent ends: succeeded) without a reload', ended);
  check(await page.evaluate(() => window.__noReload) === 'still here', 'the page was never reloaded');
  await shot(page, 'queues-done');
  const lq = await lowContrast(page);
  check(lq.length === 0, 'queues: text contrast at least 4.5:1 (3:1 large)', lq.join('; '));

  // --- its page: decisions and log (opened from its row, or by its
  // address when the row never came: the log is checked either way) ----
  const link = page.locator(`tr[data-job="${job}"] a`).first();
  if (await link.count()) await link.click();
  else await page.goto(`${url}/ui/#/jobs/${job}`);
  const log = await until(async () => {
    const t = await page.locator('[data-testid=job-log]').textContent().catch(() => '');
    return /browser-test output line/.test(t) && /finished/.test(t) ? t : null;
  });
  check(log, "the job's page shows its log", await page.locator('main').textContent().catch(() => ''));
  const stages = await until(async () => {
    const n = await page.locator('.stages li.done').count();
    return n === 6 ? n : 0;
  });
  check(stages === 6, "the job's page shows its six decisions", `${stages}`);
  await shot(page, 'job');

  // --- a server created by the CLI, stopped from the page --------------------
  r = await cli(['server', 'create', '--name', 'browser-nb', '--image', 'pytorch:2.4-cuda12.4',
    '--profile', 'h100-25pct', '--storage', '1gb']);
  check(r.code === 0, 'cnlab server create', r.out + r.err);
  r = await cli(['server', 'show', 'browser-nb', '-o', 'json']);
  let sid = '';
  try {
    sid = JSON.parse(r.out).id;
  } catch {
    bad(`cnlab server show -o json: ${r.out}${r.err}`);
  }
  await page.click('nav >> text=My servers');
  const row = sid ? `tr[data-server-id="${sid}"]` : 'tr[data-server="browser-nb"]';
  const isRunning = async () => (await page.locator(`${row}[data-state=running]`).count()) > 0;
  let running = await until(isRunning);
  check(running, 'the server shows as running (live)');
  if (!running) {
    // Already failed; a reload still lets the stop below be tried.
    await page.reload();
    running = await until(isRunning);
  }
  await shot(page, 'servers-running');
  await page.locator(row).getByRole('button', { name: 'Stop' }).click();
  const stoppedState = async () => {
    const st2 = await page.locator(row).getAttribute('data-state', { timeout: 1000 }).catch(() => null);
    return st2 && st2 !== 'running' && st2 !== 'stopping' ? st2 : null;
  };
  const stopped = await until(stoppedState, 60000);
  check(stopped === 'stopped', 'stopping it from the page: the page shows it stopped (live)', stopped);
  check(!(await page.locator('.notice.error').count()), 'the stop was accepted (X-CSRF-Token sent)',
    await page.locator('.notice.error').textContent().catch(() => ''));
  const shown = await until(async () => {
    r = await cli(['server', 'show', 'browser-nb']);
    return /stopped/i.test(r.out);
  });
  check(shown, 'the CLI sees it stopped', r.out + r.err);
  await shot(page, 'servers-stopped');

  // --- admin page (admin) -----------------------------------------------------
  await page.click('nav >> text=Admin');
  check(await until(async () => (await page.locator('[data-testid=admin-nodes] tr[data-node]').count()) === 1),
    'admin page lists the node');
  await shot(page, 'admin');

  // --- a non-admin ------------------------------------------------------------
  const ctx2 = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const { page: bob, rec: rec2 } = await watchedPage(ctx2, 'bob');
  check(await signIn(bob, url, 'bob', 'bob-password-1'), 'bob (not an admin) signs in (phone-sized window)');
  check(await bob.locator('nav >> text=Admin').count() === 0, 'bob has no Admin link');
  await bob.goto(`${url}/ui/#/admin`);
  await bob.waitForSelector('main h1');
  check(await bob.locator('[data-testid=admin-nodes]').count() === 0 &&
    /for administrators/.test(await bob.locator('main').textContent()), 'bob gets no admin page at #/admin');
  // With bob's cookie, from outside the page (the browser would log the
  // 403 of a fetch as a console error).
  const st = (await ctx2.request.get(`${url}/v1/nodes`)).status();
  check(st === 403, "the API refuses bob the admin's node list", `${st}`);
  await shot(bob, 'nonadmin');

  // --- sign out ---------------------------------------------------------------
  await bob.getByRole('button', { name: 'Sign out' }).click();
  check(await until(async () => (await bob.getByLabel('Password').count()) > 0), 'sign out goes back to the form');
  const after = (await ctx2.request.get(`${url}/v1/auth/whoami`)).status();
  check(after === 401, 'after sign-out the session no longer works', `${after}`);

  // --- the block map at scale -------------------------------------------------
  // EXTRA more nodes of 8 GPUs (registered through join tokens, cordoned:
  // no work goes to them).  The map lists every node with its summary but
  // draws only the nodes near the viewport; one far down is drawn once
  // filtered to or scrolled to, and the free capacity shown is the
  // snapshot's.
  const EXTRA = 40;
  const tok = (await (await fetch(`${url}/v1/auth/login`, {
    method: 'POST', body: JSON.stringify({ user: 'admin', password: adminPw }),
  })).json()).token;
  const call = async (method, p, body, t = tok) => {
    const res = await fetch(url + p, {
      method,
      headers: { Authorization: `Bearer ${t}`, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const txt = await res.text();
    if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${txt}`);
    return txt ? JSON.parse(txt) : null;
  };
  const scaleName = (i) => `scale-${String(i).padStart(3, '0')}`;
  for (let i = 1; i <= EXTRA; i++) {
    const jt = await call('POST', '/v1/nodes/join-tokens', { node: scaleName(i) });
    const n = await call('POST', '/v1/nodes', {
      protocol: 6, name: scaleName(i), gpu_type: 'H100-80GB-SXM', gpus: 8, cpu_milli: 64000, mem_mib: 1 << 19,
      devices: Array.from({ length: 8 }, (_, d) => ({ index: d, uuid: `GPU-scale-${i}-${d}`, mem_mib: 81559, healthy: true })),
    }, jt.token);
    await call('PATCH', `/v1/nodes/${n.id}`, { state: 'cordoned' });
  }
  await page.click('nav >> text=Block map');
  const listed = await until(async () => (await page.locator('.node').count()) === EXTRA + 1);
  check(listed, `the block map lists all ${EXTRA + 1} nodes`, `${await page.locator('.node').count()}`);
  const last = page.locator(`.node[data-node="${scaleName(EXTRA)}"]`);
  const drawnNow = await page.locator('.gpu[data-gpu]').count();
  check(await last.getAttribute('data-drawn') === 'no' && (await last.locator('.gpu').count()) === 0 &&
    drawnNow < 2 + 8 * EXTRA,
  'only the nodes near the viewport are drawn', `${drawnNow} GPUs drawn, last node ${await last.getAttribute('data-drawn')}`);
  // Free capacity shown = the snapshot's, overall and per node.
  const snap = await call('GET', '/v1/dashboard');
  const sgpus = snap.nodes.flatMap((n) => n.gpus);
  const want = Math.round(sgpus.reduce((a, g) => a + g.free_blocks, 0) / sgpus.length);
  const summary = await page.locator('[data-testid=map-summary]').textContent();
  check(summary.includes(`${sgpus.length} GPUs, ${want}% free`), 'overall free capacity shown equals the snapshot\'s', `${summary} vs ${want}%`);
  const sl = snap.nodes.find((n) => n.name === scaleName(EXTRA));
  const slFree = Math.round(sl.gpus.reduce((a, g) => a + g.free_blocks, 0) / sl.gpus.length);
  const slWith = sl.gpus.filter((g) => g.free_blocks > 0).length;
  const lastSum = await last.locator('[data-testid=node-sum]').textContent();
  check(lastSum === `8 GPUs, ${slFree}% free, ${slWith} with free blocks`,
    'an undrawn node\'s summary shows its free capacity (the snapshot\'s)', lastSum);
  // Filtering by name draws the node far down.
  await page.fill('#map-node', scaleName(EXTRA));
  const filtered = await until(async () => (await last.locator('.gpu[data-gpu]').count()) === 8 &&
    (await page.locator('.node').count()) === 1);
  check(filtered, 'filtering by node name shows only that node, its 8 GPUs drawn',
    `${await page.locator('.node').count()} nodes, ${await last.locator('.gpu[data-gpu]').count()} GPUs`);
  const frees = await last.locator('.free-count').allTextContents();
  check(frees.length === 8 && frees.every((t, k) => t === `${sl.gpus[k].free_blocks}% free`),
    'each drawn GPU shows the snapshot\'s free blocks', frees.join(', '));
  await page.fill('#map-node', '');
  await until(async () => (await page.locator('.node').count()) === EXTRA + 1);
  // Scrolling draws another node far down.
  const far = page.locator(`.node[data-node="${scaleName(EXTRA - 1)}"]`);
  const farBefore = await far.getAttribute('data-drawn');
  await far.scrollIntoViewIfNeeded();
  const scrolled = await until(async () => (await far.locator('.gpu[data-gpu]').count()) === 8);
  check(farBefore === 'no' && scrolled, 'a node far down is drawn once scrolled into view', `before ${farBefore}`);
  await shot(page, 'blockmap-scale');
  // Free capacity only: every GPU shown has some; as many as the snapshot has.
  await page.fill('#map-node', 'scale-');
  await page.check('#map-free');
  const withFree = sgpus.filter((g) => g.free_blocks > 0).length;
  const shownText = await until(async () => {
    const t = await page.locator('[data-testid=map-shown]').textContent();
    return /^Showing/.test(t) ? t : null;
  });
  const scaleWithFree = snap.nodes.filter((n) => n.name.startsWith('scale-')).flatMap((n) => n.gpus).filter((g) => g.free_blocks > 0).length;
  check(shownText && shownText.startsWith(`Showing ${scaleWithFree} of ${sgpus.length} GPUs`),
    'the free-capacity filter keeps the GPUs with free blocks', `${shownText}; snapshot ${withFree} overall`);
  await page.uncheck('#map-free');
  await page.fill('#map-node', '');

  for (const x of [rec, rec2]) {
    const p = x === rec ? page : bob;
    const csp = await p.evaluate(() => window.__csp || []);
    check(csp.length === 0, `${x.name}: no CSP violations`, csp.join('; '));
    check(x.console.length === 0, `${x.name}: no console errors`, x.console.join('; '));
    check(x.pageErrors.length === 0, `${x.name}: no page errors`, x.pageErrors.join('; '));
  }
}

try {
  await main();
} catch (e) {
  bad(`test aborted: ${e.stack || e}`);
}
if (browser) await browser.close();
await stopDaemon();
finish();
