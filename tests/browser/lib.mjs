// lib.mjs - what the browser tests share: their arguments, Debian's
// Chromium and playwright-core (both from scripts/bootstrap: a missing one
// fails the test, it never skips), the ok/FAIL report and its exit status,
// and a scratch folder with a HOME and an environment free of the
// caller's CNLab settings.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CHROMIUM = process.env.CNLAB_CHROMIUM || '/usr/bin/chromium';

// The script's arguments (@names, for the usage line), as absolute paths;
// a wrong count exits 2.
export function args(script, names) {
  if (process.argv.length !== names.length + 2) {
    console.error(`usage: node tests/browser/${script} ${names.join(' ')}`);
    process.exit(2);
  }
  return process.argv.slice(2).map((p) => path.resolve(p));
}

// playwright-core's chromium, or exit 1 naming what is missing.
export async function loadChromium() {
  if (!fs.existsSync(CHROMIUM)) {
    console.error(`FAIL ${CHROMIUM} missing: run scripts/bootstrap (it installs chromium)`);
    process.exit(1);
  }
  try {
    const { chromium } = await import(path.join(root, 'web/node_modules/playwright-core/index.mjs'));
    return chromium;
  } catch (e) {
    console.error(`FAIL web/node_modules missing (${e.message}): run scripts/bootstrap`);
    process.exit(1);
  }
}

let fails = 0;
export const ok = (m) => console.log(`ok   ${m}`);
export const bad = (m) => {
  console.log(`FAIL ${m}`);
  fails++;
};
export const check = (cond, m, why) => (cond ? ok(m) : bad(why ? `${m}: ${why}` : m));
// The summary line, and exit 1 if any check failed.
export function finish() {
  console.log(fails ? `${fails} failed` : 'all ok');
  process.exit(fails ? 1 : 0);
}

// A fresh folder (@prefix), its home/ and an environment with HOME there
// and none of the caller's CNLab settings.
export function scratch(prefix) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const home = path.join(tmp, 'home');
  fs.mkdirSync(home);
  const env = { ...process.env, HOME: home };
  for (const k of ['CNLAB_JWT_SECRET', 'CNLAB_ADMIN_PASSWORD', 'CNLAB_SERVER', 'CNLAB_TOKEN', 'CNLAB_CONFIG', 'XDG_CONFIG_HOME'])
    delete env[k];
  return { tmp, home, env };
}
