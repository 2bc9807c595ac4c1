// dashboard_actions.mjs - the dashboard's sign-on and actions in a real
// browser (Debian's Chromium, headless, playwright-core) against a real
// all-in-one (cnlabd --all-in-one, fake pool of two H100s) configured for
// OIDC with the fake identity provider (tests/integration/fake_idp.py).
// Each action done on the page is checked afterwards through the CLI
// (`cnlab ... -o json`), not through the page.
//
//   node tests/browser/dashboard_actions.mjs CNLABD CNLAB OUTDIR
//
// What it checks, as "ok"/"FAIL" lines; exit 1 on any failure:
//   - single sign-on: the sign-in page's link runs the code flow through
//     cnlabd (start, the provider, the callback) and lands signed in on the
//     page the user was on, with the HttpOnly session cookie (cnlab_ui) and
//     the pre-login cookie gone; the user exists for the CLI with its OIDC
//     link; the page's POSTs work (CSRF token fetched after the redirect);
//   - my servers: resize a server (the CLI sees the new size), and stop it
//     with the keyboard only (Tab to the button, Enter);
//   - a job's page: cancel a running job (the CLI sees it cancelled);
//   - admin: drain a node and put it back, disable a user whose dashboard
//     is open (the CLI sees the user disabled; that open page loses
//     access: its next request is a 401 and it falls back to the sign-in
//     form) and enable him again, add and delete a profile, edit the
//     burst policy, revoke the node (the CLI sees each);
//   - a phone-sized window: no sideways scrolling, screenshot;
//   - no page errors, no CSP violations, no console errors on the admin's
//     page (the disabled user's page logs its 401s, which is the point).
// Screenshots go to OUTDIR.  A missing chromium or web/node_modules fails
// the test (it never skips).
import { spawn, spawnSync, execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { CHROMIUM, args, bad, check, finish, loadChromium, ok, root, scratch } from './lib.mjs';

const [cnlabd, cnlab, outdir] = args('dashboard_actions.mjs', ['CNLABD', 'CNLAB', 'OUTDIR']);
const chromium = await loadChromium();
const { tmp, home, env } = scratch('cnlab-browser-act-');
fs.mkdirSync(outdir, { recursive: true });

let daemon = null;
let idp = null;
let browser = null;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function stopDaemon() {
  if (idp && idp.exitCode === null) idp.kill('SIGTERM');
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
  if (daemon && daemon.exitCode === null) daemon.kill('SIGTERM');
  if (idp && idp.exitCode === null) idp.kill('SIGTERM');
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
// `cnlab ARGS -o json`, parsed (null when it failed or is not JSON).
async function cliJson(args) {
  const r = await cli([...args, '-o', 'json']);
  try {
    return { v: JSON.parse(r.out), raw: r.out + r.err };
  } catch {
    return { v: null, raw: r.out + r.err };
  }
}

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

async function startIdp() {
  const key = path.join(tmp, 'idp.pem');
  spawnSync('openssl', ['genrsa', '-out', key, '2048'], { stdio: 'ignore' });
  const pub = crypto.createPublicKey(fs.readFileSync(key)).export({ format: 'jwk' });
  fs.writeFileSync(path.join(tmp, 'jwks.json'),
    JSON.stringify({ keys: [{ kty: 'RSA', kid: 'k1', use: 'sig', alg: 'RS256', n: pub.n, e: pub.e }] }));
  fs.writeFileSync(path.join(tmp, 'who'), 'sub-olga olga\n');
  const portfile = path.join(tmp, 'idp.port');
  idp = spawn('python3', [path.join(root, 'tests/integration/fake_idp.py'), portfile, key, 'cnlab-web',
    path.join(tmp, 'who')], { stdio: 'ignore' });
  const port = await until(() => fs.existsSync(portfile) && fs.readFileSync(portfile, 'utf8').trim(), 20000);
  if (!port) throw new Error('the fake IdP did not start');
  return `http://127.0.0.1:${port}`;
}

async function startPlatform(idpUrl) {
  const conf = path.join(tmp, 'cnlabd.conf');
  fs.writeFileSync(conf, [`oidc_issuer = ${idpUrl}`, 'oidc_audience = cnlab-web',
    `oidc_jwks_file = ${path.join(tmp, 'jwks.json')}`, `oidc_authorization_endpoint = ${idpUrl}/authorize`,
    `oidc_token_endpoint = ${idpUrl}/token`, ''].join('\n'));
  const out = fs.openSync(path.join(tmp, 'out'), 'w');
  const err = fs.openSync(path.join(tmp, 'err'), 'w');
  daemon = spawn(cnlabd, ['--all-in-one', '--config', conf, '--data-dir', path.join(tmp, 'data'),
    '--listen', '127.0.0.1:0', '--gpus', 'fake:2xH100-80GB-SXM', '--log-level', 'warn'],
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

async function watchedPage(context, name, allow401 = false) {
  const page = await context.newPage();
  const rec = { console: [], pageErrors: [], name, page };
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) =>
      window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const url = (m.location() && m.location().url) || '';
    // Signed out, the page asks who is signed in (401): the browser logs it.
    if (/Failed to load resource/.test(m.text()) && /\/v1\/auth\/whoami$/.test(url)) return;
    // The forged callback's refusal (a 400 page, on purpose).
    if (/Failed to load resource/.test(m.text()) && /\/v1\/auth\/oidc\/callback\?code=made-up/.test(url)) return;
    if (allow401 && /401|Unauthorized|EventSource/.test(m.text())) return;
    rec.console.push(`${m.text()} ${url}`);
  });
  page.on('pageerror', (e) => rec.pageErrors.push(e.message));
  page.on('dialog', (d) => d.accept());
  return rec;
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

const errorShown = async (page) =>
  (await page.locator('.notice.error').count()) ? page.locator('.notice.error').first().textContent() : '';

async function main() {
  const idpUrl = await startIdp();
  const url = await startPlatform(idpUrl);
  ok(`all-in-one with OIDC started at ${url} (IdP ${idpUrl})`);
  const adminPw = fs.readFileSync(path.join(tmp, 'data/admin.password'), 'utf8').trim();
  let r = await cli(['login', '--server', url, '--user', 'admin', '--password-stdin'], `${adminPw}\n`);
  check(r.code === 0, 'cnlab login as admin', r.err);
  r = await cli(['user', 'create', 'bob', '--password-stdin'], 'bob-password-1\n');
  check(r.code === 0, 'cnlab user create bob', r.err);
  r = await cli(['project', 'member', 'add', 'default', 'bob']);
  check(r.code === 0, 'cnlab project member add default bob', r.err);
  const image = '/var/cache/cnlab/images/debian-12-python.tar';
  if (!fs.existsSync(image)) bad(`no test image ${image}: run scripts/bootstrap (it builds it)`);
  r = await cli(['image', 'import', image, '--name', 'pytorch:2.4-cuda12.4']);
  check(r.code === 0, 'cnlab image import', r.err);
  // A cloud account: the burst policy names its provider.
  r = await cli(['cloud', 'add', 'aws', '--account', '123456789012', '--region', 'us-east-1',
    '--instance-types', 'g5.xlarge']);
  check(r.code === 0, 'cnlab cloud add aws', r.out + r.err);

  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
  const recs = [];

  // --- single sign-on ---------------------------------------------------------
  const ctxO = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const o = await watchedPage(ctxO, 'olga (single sign-on)');
  recs.push(o);
  // A callback this browser never started: back to the form, told why.
  await o.page.goto(`${url}/v1/auth/oidc/callback?code=made-up&state=made-up`);
  const why = await until(async () => {
    const al = o.page.locator('[role=alert]');
    return (await al.count()) ? al.first().textContent() : null;
  }, 15000);
  check(/did not start in this browser/.test(why || ''), 'a forged callback lands on the sign-in form with the reason',
    `${why} at ${o.page.url()}`);
  check(!/sso_error/.test(o.page.url()), 'the reason is taken off the address', o.page.url());
  await o.page.goto(`${url}/ui/`);
  const sso = o.page.getByRole('link', { name: /single sign-on/ });
  check(await until(async () => (await sso.count()) > 0, 15000), 'the sign-in page offers single sign-on');
  // The user moves to another page (a hash change, no reload) before the
  // click: the sign-on must bring them back there.
  await o.page.evaluate(() => {
    location.hash = '#/queues';
  });
  await sso.click();
  const who = await until(async () => {
    const w = o.page.locator('[data-testid=whoami]');
    return (await w.count()) ? w.textContent() : null;
  }, 20000);
  check(who === 'olga', 'single sign-on lands signed in as the IdP\'s user', `${who} at ${o.page.url()}`);
  check(/\/ui\/#\/queues$/.test(o.page.url()), 'back on the page the user was on (#/queues)', o.page.url());
  const cookies = await ctxO.cookies();
  const ui = cookies.find((c) => c.name === 'cnlab_ui');
  check(ui && ui.httpOnly && ui.sameSite === 'Strict' && ui.path === '/', 'session cookie cnlab_ui: HttpOnly, SameSite=Strict, Path=/',
    JSON.stringify(cookies));
  check(!cookies.find((c) => c.name === 'cnlab_oidc'), 'the pre-login cookie is gone', JSON.stringify(cookies));
  check(!cookies.find((c) => c.name === 'cnlab_session'), 'no cookie named as the notebook proxy\'s');
  check(await o.page.evaluate(() => !document.cookie.includes('cnlab_')), "the page's script cannot read either cookie");
  let j = await cliJson(['user', 'show', 'olga']);
  check(j.v && JSON.stringify(j.v.oidc || '').includes('sub-olga'), 'the CLI sees olga, linked to her OIDC subject', j.raw);
  await shot(o.page, 'sso-signed-in');
  // A POST after the redirect: the page fetched its CSRF token itself.
  await o.page.getByRole('button', { name: 'Sign out' }).click();
  check(await until(async () => (await o.page.getByLabel('Password').count()) > 0), 'olga signs out (a POST with the CSRF token)');
  const st = (await ctxO.request.get(`${url}/v1/auth/whoami`)).status();
  check(st === 401, 'her session is over', `${st}`);

  // --- the admin, and bob with his dashboard open --------------------------------
  const ctxA = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const a = await watchedPage(ctxA, 'admin');
  recs.push(a);
  const page = a.page;
  check(await signIn(page, url, 'admin', adminPw), 'admin signs in');
  const ctxB = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const b = await watchedPage(ctxB, 'bob', true);
  check(await signIn(b.page, url, 'bob', 'bob-password-1'), 'bob signs in and keeps his dashboard open');

  // --- my servers: resize, then stop with the keyboard ------------------------
  // A tenth of an H100: placed as a block slice (blocks resize in flight;
  // a MIG instance does not).
  r = await cli(['profile', 'create', 'nb-10', '--gpu', 'h100-10']);
  check(r.code === 0, 'cnlab profile create nb-10 --gpu h100-10', r.out + r.err);
  r = await cli(['server', 'create', '--name', 'act-nb', '--image', 'pytorch:2.4-cuda12.4',
    '--profile', 'nb-10', '--storage', '1gb']);
  check(r.code === 0, 'cnlab server create act-nb (10 blocks)', r.out + r.err);
  await page.click('nav >> text=My servers');
  const row = 'tr[data-server="act-nb"]';
  check(await until(async () => (await page.locator(`${row}[data-state=running]`).count()) > 0),
    'the server shows as running');
  await page.getByLabel('Blocks for act-nb').fill('20');
  await page.locator(row).getByRole('button', { name: 'Resize' }).click();
  const resized = await until(async () => {
    j = await cliJson(['server', 'show', 'act-nb']);
    return j.v && j.v.status && j.v.status.blocks === 20;
  }, 60000);
  check(resized, 'resized from the page: the CLI sees 20 blocks', `${j.raw} ${await errorShown(page)}`);
  await shot(page, 'servers-resized');
  // Keyboard only: Tab from the top of the page to the Stop button, Enter.
  await page.locator('body').focus();
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  let reached = false;
  for (let i = 0; i < 80 && !reached; i++) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => {
      const e = document.activeElement;
      return !!(e && e.tagName === 'BUTTON' && e.closest('tr[data-server="act-nb"]') && /^Stop/.test(e.textContent.trim()));
    });
  }
  check(reached, 'Tab reaches the server\'s Stop button (focus visible on the way)');
  if (reached) {
    const ring = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
    check(ring && ring !== 'none', 'the focused button shows a focus ring', ring);
    await page.keyboard.press('Enter');
    const stopped = await until(async () => {
      j = await cliJson(['server', 'show', 'act-nb']);
      return j.v && j.v.state === 'stopped';
    }, 60000);
    check(stopped, 'stopped with Enter: the CLI sees it stopped', j.raw);
  }

  // --- a job's page: cancel ------------------------------------------------------
  fs.writeFileSync(path.join(tmp, 'long.py'), 'import time\nprint("waiting", flush=True)\ntime.sleep(600)\n');
  r = await cli(['run', 'long.py', '--gpu', 'h100-25', '--detach', '-o', 'json']);
  let job = null;
  try {
    job = JSON.parse(r.out).id;
  } catch {
    job = (/(job_[0-9A-Za-z]+)/.exec(r.out + r.err) || [])[1];
  }
  check(r.code === 0 && job, 'cnlab run --detach submits a long job', r.out + r.err);
  if (job) {
    const running = await until(async () => {
      j = await cliJson(['jobs', 'show', job]);
      return j.v && j.v.state === 'running';
    }, 60000);
    check(running, 'the job runs', j.raw);
    await page.goto(`${url}/ui/#/jobs/${job}`);
    await page.getByRole('button', { name: 'Cancel job' }).click();
    const cancelled = await until(async () => {
      j = await cliJson(['jobs', 'show', job]);
      return j.v && /^cancel/.test(j.v.state);
    }, 60000);
    check(cancelled, 'cancelled from its page: the CLI sees it cancelled', `${j.raw} ${await errorShown(page)}`);
    await shot(page, 'job-cancelled');
  }

  // --- admin: drain, uncordon ----------------------------------------------------
  await page.goto(`${url}/ui/#/admin`);
  const nodeRow = page.locator('[data-testid=admin-nodes] tr[data-node]').first();
  check(await until(async () => (await nodeRow.count()) > 0), 'the admin page lists the node');
  const node = await nodeRow.getAttribute('data-node');
  await nodeRow.getByRole('button', { name: /^Drain/ }).click();
  let drained = await until(async () => {
    j = await cliJson(['node', 'show', node]);
    return j.v && j.v.state === 'draining';
  });
  check(drained, `drain ${node} from the page: the CLI sees it draining`, j.raw);
  await nodeRow.getByRole('button', { name: /^Uncordon/ }).click();
  drained = await until(async () => {
    j = await cliJson(['node', 'show', node]);
    return j.v && j.v.state === 'up';
  });
  check(drained, `uncordon ${node}: the CLI sees it in service`, j.raw);

  // --- admin: disable bob while his dashboard is open ----------------------------
  await page.locator('[data-testid=admin-users] tr[data-user="bob"]').getByRole('button', { name: /^Disable/ }).click();
  const disabled = await until(async () => {
    j = await cliJson(['user', 'show', 'bob']);
    return j.v && j.v.disabled === true;
  });
  check(disabled, 'disable bob from the page: the CLI sees him disabled', j.raw);
  const bst = (await ctxB.request.get(`${url}/v1/dashboard`)).status();
  check(bst === 401, "bob's cookie: his next request is a 401", `${bst}`);
  check(await until(async () => (await b.page.getByLabel('Password').count()) > 0, 60000),
    "bob's open dashboard loses access (its stream ends; back to the sign-in form)");
  await shot(b.page, 'disabled-user');
  await page.locator('[data-testid=admin-users] tr[data-user="bob"]').getByRole('button', { name: /^Enable/ }).click();
  const enabled = await until(async () => {
    j = await cliJson(['user', 'show', 'bob']);
    return j.v && j.v.disabled === false;
  });
  check(enabled, 'enable bob again from the page: the CLI sees him enabled', j.raw);
  check(await signIn(b.page, url, 'bob', 'bob-password-1'), 'bob signs in again on the page');

  // --- admin: a profile, the burst policy ----------------------------------------
  await page.getByLabel('Name', { exact: true }).fill('browser-prof');
  await page.getByLabel('GPU shape').fill('h100-50');
  await page.getByLabel('Description').fill('made in the browser');
  await page.getByRole('button', { name: 'Save profile' }).click();
  const prof = await until(async () => {
    j = await cliJson(['profiles', 'list']);
    return j.v && JSON.stringify(j.v).includes('browser-prof');
  });
  check(prof, 'a profile added on the page: the CLI lists it', `${j.raw} ${await errorShown(page)}`);
  await page.getByRole('button', { name: 'Delete browser-prof' }).click();
  const gone = await until(async () => {
    j = await cliJson(['profiles', 'list']);
    return j.v && !JSON.stringify(j.v).includes('browser-prof');
  });
  check(gone, 'the profile deleted on the page: the CLI no longer lists it', `${j.raw} ${await errorShown(page)}`);
  await page.getByLabel(/^Threshold/).fill('0.75');
  await page.getByLabel('Provider').selectOption('aws');
  await page.getByRole('button', { name: 'Save policy' }).click();
  const pol = await until(async () => {
    j = await cliJson(['policy', 'burst']);
    return j.v && Number(j.v.threshold) === 0.75;
  });
  check(pol, 'burst policy threshold 0.75 saved on the page: the CLI shows it', `${j.raw} ${await errorShown(page)}`);
  await shot(page, 'admin-edited');

  // --- a phone-sized window ---------------------------------------------------------
  const ctxP = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const p = await watchedPage(ctxP, 'admin (phone)');
  recs.push(p);
  check(await signIn(p.page, url, 'admin', adminPw), 'admin signs in on a phone-sized window');
  for (const route of ['map', 'servers', 'admin']) {
    await p.page.goto(`${url}/ui/#/${route}`);
    await p.page.waitForSelector('main h1');
    await sleep(300);
    // With isMobile the layout viewport grows to fit what overflows:
    // compare with the device's 390 px, and name what sticks out.
    const wide = await p.page.evaluate(() => {
      const out = [];
      for (const e of document.querySelectorAll('body *')) {
        const r = e.getBoundingClientRect();
        if (r.right > 391 && !e.closest('.table-wrap')) out.push(`${e.tagName}.${e.className} ${Math.round(r.right)}`);
      }
      return { w: document.documentElement.scrollWidth, out: out.slice(0, 8) };
    });
    check(wide.w <= 391, `phone #/${route}: no sideways scrolling of the page (390 px)`, `${wide.w}px wide: ${wide.out.join(', ')}`);
    await shot(p.page, `phone-${route}`);
  }

  // --- admin: revoke the node (last: its agent is cut off) ---------------------------
  await page.goto(`${url}/ui/#/admin`);
  await until(async () => (await nodeRow.count()) > 0);
  await nodeRow.getByRole('button', { name: /^Revoke/ }).click();
  const revoked = await until(async () => {
    j = await cliJson(['node', 'show', node]);
    return j.v && j.v.state === 'lost';
  }, 60000);
  check(revoked, `revoke ${node} from the page (confirmed): the CLI sees it lost (revoked)`, `${j.raw} ${await errorShown(page)}`);
  await shot(page, 'admin-revoked');

  for (const x of recs) {
    const csp = await x.page.evaluate(() => window.__csp || []);
    check(csp.length === 0, `${x.name}: no CSP violations`, csp.join('; '));
    check(x.console.length === 0, `${x.name}: no console errors`, x.console.join('; '));
    check(x.pageErrors.length === 0, `${x.name}: no page errors`, x.pageErrors.join('; '));
  }
  check(b.pageErrors.length === 0, 'bob: no page errors', b.pageErrors.join('; '));
}

try {
  await main();
} catch (e) {
  bad(`test aborted: ${e.stack || e}`);
}
if (browser) await browser.close();
await stopDaemon();
finish();
