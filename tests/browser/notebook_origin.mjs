// notebook_origin.mjs - a tenant's notebook must not act as the dashboard's
// viewer.  In a real browser (Debian's Chromium, headless, playwright-core)
// against a real all-in-one plus a second node agent whose servers run
// tests/integration/proxy_server.py (a small http.server page, as in
// tests/integration/proxy.sh):
//
//   node tests/browser/notebook_origin.mjs CNLABD CNLAB CNLAB-AGENT OUTDIR
//
// The attack: the administrator signs in to the dashboard, then opens a
// tenant's (alice's) server, as the dashboard lets an administrator do.
// The server's page runs a script that fetches a CSRF token from
// /v1/auth/csrf (on its own origin, then on the API's, with credentials)
// and POSTs a project and a user with it (and again as "simple" requests
// that need no preflight).  What it checks, as "ok"/"FAIL" lines; exit 1 on
// any failure:
//   - the server's URL (and the owner's Open link on the dashboard) is on
//     the notebook origin, not the API's;
//   - the page's script read no CSRF token and none of its POSTs got a 2xx;
//     the CLI sees no such project or user afterwards;
//   - a tenant's Set-Cookie for cnlabd's cookie names never lands in the
//     browser: the dashboard's cookie is the one cnlabd set, and the
//     dashboard is still signed in afterwards;
//   - the page's script cannot overwrite the HttpOnly session cookie, and
//     its own session planted with a longer Path (sent first) signs the
//     viewer out (401), never in as the tenant.
// On the old layout (notebooks on the API's origin) the script reads the
// token and creates the project: this test fails there.  A missing
// chromium or web/node_modules fails the test (it never skips).
import { spawn, spawnSync, execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { CHROMIUM, args, bad, check, finish, loadChromium, ok, root, scratch } from './lib.mjs';

const [cnlabd, cnlab, agentBin, outdir] = args('notebook_origin.mjs', ['CNLABD', 'CNLAB', 'CNLAB-AGENT', 'OUTDIR']);
const chromium = await loadChromium();
const { tmp, home, env } = scratch('cnlab-browser-nb-');
fs.chmodSync(tmp, 0o755);
fs.mkdirSync(outdir, { recursive: true });

let daemon = null;
let agent = null;
let browser = null;
let url = null;
let adminTok = null;
let srvId = null;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Wait (a guard against a hung platform, never a speed check) until fn()
// is truthy; its value or null.
async function until(fn, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) return null;
    await sleep(100);
  }
}

async function api(method, p, tok, body) {
  const r = await fetch(`${url}${p}`, {
    method,
    headers: tok ? { Authorization: `Bearer ${tok}` } : {},
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let v = null;
  try {
    v = await r.json();
  } catch {
    /* no JSON */
  }
  return { status: r.status, v };
}

async function stopAll() {
  if (browser) await browser.close().catch(() => {});
  // The server outlives its agent: stop it while the agent is there.
  if (srvId && adminTok) {
    await api('POST', `/v1/servers/${srvId}/stop`, adminTok, {}).catch(() => {});
    await until(async () => {
      const r = await api('GET', `/v1/servers/${srvId}`, adminTok).catch(() => null);
      return !r || !r.v || ['stopped', 'failed'].includes(r.v.state);
    }, 30000);
  }
  for (const p of [agent, daemon]) {
    if (!p || p.exitCode !== null) continue;
    const gone = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    await Promise.race([gone, sleep(30000)]);
    if (p.exitCode === null && p.signalCode === null) {
      p.kill('SIGKILL');
      await gone;
    }
  }
}
process.on('exit', () => {
  for (const p of [agent, daemon]) if (p && p.exitCode === null) p.kill('SIGTERM');
  try {
    const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
      .map((l) => l.split(' ')[4]).filter((m) => m && m.startsWith(`${tmp}/`)).sort().reverse();
    for (const m of mounts) spawnSync('umount', ['-l', m], { stdio: 'ignore' });
  } catch {
    /* nothing mounted */
  }
  if (!process.env.KEEP) fs.rmSync(tmp, { recursive: true, force: true });
});

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
  daemon = spawn(cnlabd, ['--all-in-one', '--data-dir', path.join(tmp, 'data'),
    '--listen', '127.0.0.1:0', '--gpus', 'fake:1xH100-80GB-SXM', '--log-level', 'warn'],
  { env, stdio: ['ignore', out, err] });
  for (let i = 0; i < 400; i++) {
    const m = /^CNLab is running at (\S+)/m.exec(fs.readFileSync(path.join(tmp, 'out'), 'utf8'));
    if (m) return m[1];
    if (daemon.exitCode !== null) break;
    await sleep(50);
  }
  console.error(fs.readFileSync(path.join(tmp, 'out'), 'utf8'), fs.readFileSync(path.join(tmp, 'err'), 'utf8'));
  throw new Error('cnlabd did not start');
}

async function signIn(page, user, password) {
  await page.goto(`${url}/`);
  await page.getByLabel('User').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  return until(async () => (await page.locator('[data-testid=whoami]').count()) > 0, 15000);
}

async function main() {
  url = await startPlatform();
  ok(`all-in-one started at ${url}`);
  const adminPw = fs.readFileSync(path.join(tmp, 'data/admin.password'), 'utf8').trim();
  let r = await cli(['login', '--server', url, '--user', 'admin', '--password-stdin'], `${adminPw}\n`);
  check(r.code === 0, 'cnlab login as admin', r.err);
  adminTok = (await api('POST', '/v1/auth/login', null, { user: 'admin', password: adminPw })).v.token;
  r = await cli(['user', 'create', 'alice', '--password-stdin'], 'alice-password-1\n');
  check(r.code === 0, 'cnlab user create alice', r.err);
  r = await cli(['project', 'member', 'add', 'default', 'alice']);
  check(r.code === 0, 'cnlab project member add default alice', r.err);
  const aliceTok = (await api('POST', '/v1/auth/login', null, { user: 'alice', password: 'alice-password-1' })).v.token;

  // A second node whose servers run proxy_server.py, the tenant's page.
  const join = await api('POST', '/v1/nodes/join-tokens', adminTok, { node: 'probe' });
  const itest = path.join(root, 'tests/integration');
  agent = spawn(agentBin, ['--server', url, '--name', 'probe', '--gpus', 'fake:2xA100-80GB',
    '--work-dir', path.join(tmp, 'probe'), '--mounts', `${itest}:${itest}:ro`,
    '--server-command', `exec python3 ${itest}/proxy_server.py`],
  { env: { ...env, CNLAB_AGENT_TOKEN: join.v.token }, stdio: ['ignore', 'ignore', fs.openSync(path.join(tmp, 'agent.err'), 'w')] });
  const registered = await until(() => /msg=registered/.test(fs.readFileSync(path.join(tmp, 'agent.err'), 'utf8')), 30000);
  check(registered, 'the probe agent registered', fs.readFileSync(path.join(tmp, 'agent.err'), 'utf8').slice(-500));
  const projects = (await api('GET', '/v1/projects', aliceTok)).v.items;
  const proj = projects.find((p) => p.name === 'default').id;
  const made = await api('POST', `/v1/projects/${proj}/servers`, aliceTok,
    { name: 'nb', image: 'host', profile: 'a100-50pct' });
  srvId = made.v && made.v.id;
  check(srvId, 'alice creates a server on the probe node', JSON.stringify(made));
  const surl = await until(async () => {
    const s = await api('GET', `/v1/servers/${srvId}`, adminTok);
    return s.v && s.v.state === 'running' && s.v.url;
  }, 60000);
  check(surl, 'the server runs, its URL shown to the administrator', surl);
  const apiOrigin = new URL(url).origin;
  const nbOrigin = new URL(surl).origin;
  check(nbOrigin !== apiOrigin && surl.startsWith(`${nbOrigin}/s/${srvId}/?token=`),
    'the server\'s URL is on the notebook origin, not the API\'s', `${surl} vs ${apiOrigin}`);

  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  check(await signIn(page, 'admin', adminPw), 'the administrator signs in to the dashboard');
  const uiCookie = (await ctx.cookies(url)).find((c) => c.name === 'cnlab_ui');
  check(uiCookie && uiCookie.httpOnly, 'the dashboard\'s session cookie is set (HttpOnly)');

  // The dashboard's Open link, on the owner's page of her servers.
  {
    const actx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const ap = await actx.newPage();
    check(await signIn(ap, 'alice', 'alice-password-1'), 'alice signs in to the dashboard');
    await ap.goto(`${url}/ui/#/servers`);
    const btn = ap.locator(`button[data-open="${srvId}"]`);
    await until(async () => (await btn.count()) > 0, 15000);
    try {
      const [tab] = await Promise.all([actx.waitForEvent('page', { timeout: 15000 }), btn.click({ timeout: 15000 })]);
      const opened = await until(async () => (/^http/.test(tab.url()) ? tab.url() : null), 15000);
      check(opened && opened.startsWith(`${nbOrigin}/s/${srvId}/`),
        'the dashboard\'s Open button opens the server on the notebook origin', opened);
    } catch (e) {
      bad(`the dashboard's Open button: ${e.message}`);
    }
    const snap = await ap.evaluate(async () => (await fetch('/v1/dashboard')).text());
    check(!/token=/.test(snap), 'the dashboard\'s snapshot carries no server token', snap.slice(0, 300));
    await actx.close();
  }

  // --- the attack ---------------------------------------------------------
  const nb = await ctx.newPage();
  await nb.goto(`${nbOrigin}/s/${srvId}/attack?token=${surl.split('token=')[1]}&api=${encodeURIComponent(apiOrigin)}`);
  const result = await until(async () => {
    const t = await nb.locator('#result').textContent().catch(() => null);
    return t && t !== 'running' ? t : null;
  }, 30000);
  await nb.screenshot({ path: path.join(outdir, 'notebook-origin-attack.png'), fullPage: true });
  console.log(`screenshot ${path.join(outdir, 'notebook-origin-attack.png')}`);
  let got = null;
  try {
    got = JSON.parse(result);
  } catch {
    /* checked below */
  }
  check(got, 'the tenant\'s script ran to its end', result);
  if (got) {
    console.log(`note the script saw ${JSON.stringify(got)}`);
    check(got.tokens.length === 0, 'the tenant\'s script read no CSRF token', got.tokens.join(', '));
    const won = got.posts.filter((p) => / 2\d\d$/.test(p));
    check(won.length === 0, 'none of its POSTs succeeded', won.join(', '));
  }
  r = await cli(['project', 'list', '-o', 'json']);
  check(r.code === 0 && !/pwned/.test(r.out), 'the CLI sees no project the script made', r.out + r.err);
  r = await cli(['user', 'list', '-o', 'json']);
  check(r.code === 0 && !/mallory/.test(r.out), 'the CLI sees no user the script made', r.out + r.err);

  // --- cookie tossing through the proxy -------------------------------------
  await nb.goto(`${nbOrigin}/s/${srvId}/cookies`);
  const all = await ctx.cookies([url, `${nbOrigin}/s/${srvId}/`]);
  const tossed = all.filter((c) => c.value === 'tossed' || c.name === 'wide');
  check(tossed.length === 0, 'a tenant\'s Set-Cookie for cnlabd\'s names (or with a Domain) is not in the browser',
    JSON.stringify(tossed));
  check(all.some((c) => c.name === 'mine'), 'the tenant\'s own host-only cookie is', JSON.stringify(all));
  const ui2 = (await ctx.cookies(url)).find((c) => c.name === 'cnlab_ui');
  check(ui2 && uiCookie && ui2.value === uiCookie.value, 'the dashboard\'s cookie is still the one cnlabd set');
  await page.goto(`${url}/ui/#/map`);
  await page.reload();
  check(await until(async () => (await page.locator('[data-testid=whoami]').count()) > 0, 15000),
    'the dashboard is still signed in');

  // --- cookie tossing from the notebook page's script -----------------------
  // Cookies ignore ports: the tenant's script writes cnlab_ui on the shared
  // host, once over the HttpOnly cookie (the browser refuses) and once with
  // a longer Path and the tenant's own valid session (sent first).
  await nb.evaluate((v) => {
    document.cookie = 'cnlab_ui=tossed; path=/';
    document.cookie = `cnlab_ui=${v}; path=/v1/`;
  }, aliceTok);
  const jar = (await ctx.cookies(url)).filter((c) => c.name === 'cnlab_ui');
  check(jar.some((c) => c.path === '/' && c.value === uiCookie.value),
    'a script cannot overwrite the HttpOnly session cookie', JSON.stringify(jar));
  const who = await page.evaluate(async () => {
    const r = await fetch('/v1/auth/whoami');
    return `${r.status} ${await r.text()}`;
  });
  check(/^401 /.test(who), 'a planted second session cookie signs the viewer out, never in as the tenant', who);
}

try {
  await main();
} catch (e) {
  bad(`exception: ${e.stack || e}`);
}
await stopAll();
finish();
