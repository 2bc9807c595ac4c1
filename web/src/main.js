// main.js - the dashboard's entry point (esbuild bundles it as app.js).
//
// One page application on hash routes (#/map, #/queues, #/jobs/ID,
// #/quotas, #/servers, #/admin), so cnlabd serves one index.html and
// needs no fallback route.  Who is signed in comes from GET
// /v1/auth/whoami (the HttpOnly cookie travels by itself); until then the
// sign-in form is all there is.  Once signed in, live.js keeps the shared
// snapshot from GET /v1/dashboard/events and every page renders from it;
// pages fetch from /v1 only what the snapshot does not carry (a job's
// decisions and log, the admin lists).
import { html, render } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import './app.css';
import { get, post, setCsrf, refreshCsrf } from './api.js';
import * as live from './live.js';
import { SignIn } from './pages/signin.js';
import { BlockMap } from './pages/blockmap.js';
import { Queues } from './pages/queues.js';
import { JobPage } from './pages/job.js';
import { Quotas } from './pages/quotas.js';
import { Servers } from './pages/servers.js';
import { Admin } from './pages/admin.js';

function route() {
  const h = location.hash.replace(/^#\/?/, '');
  const parts = h.split('/').filter(Boolean).map(decodeURIComponent);
  return parts.length ? parts : ['map'];
}

const NAV = [
  ['map', 'Block map'],
  ['queues', 'Queues'],
  ['quotas', 'Quotas'],
  ['servers', 'My servers'],
  ['admin', 'Admin', true],
];

function Shell({ me, onSignOut }) {
  const [r, setR] = useState(route());
  const [snap, setSnap] = useState(live.current());
  const [status, setStatus] = useState('connecting');
  useEffect(() => {
    const f = () => {
      setR(route());
      // Move focus to the new page's heading for keyboard and screen
      // reader users, as a page load would.
      setTimeout(() => {
        const h1 = document.querySelector('main h1');
        if (h1) h1.focus();
      }, 0);
    };
    window.addEventListener('hashchange', f);
    return () => window.removeEventListener('hashchange', f);
  }, []);
  useEffect(() => live.subscribe((s, st) => {
    setSnap(s);
    setStatus(st);
  }), []);
  const isAdmin = me.role === 'admin';
  const page = r[0];
  let body;
  if (page === 'jobs' && r[1]) body = html`<${JobPage} id=${r[1]} snap=${snap} />`;
  else if (page === 'queues') body = html`<${Queues} snap=${snap} />`;
  else if (page === 'quotas') body = html`<${Quotas} snap=${snap} />`;
  else if (page === 'servers') body = html`<${Servers} snap=${snap} />`;
  else if (page === 'admin')
    body = isAdmin
      ? html`<${Admin} snap=${snap} />`
      : html`<section><h1 tabindex="-1">Admin</h1><p role="alert">This page is for administrators.</p></section>`;
  else body = html`<${BlockMap} snap=${snap} />`;
  return html`
    <a class="skip" href="#main" onClick=${(e) => {
      e.preventDefault();
      document.getElementById('main').focus();
    }}>Skip to content</a>
    <header class="top">
      <span class="brand">CNLab</span>
      <nav aria-label="Dashboard">
        <ul>
          ${NAV.filter((n) => !n[2] || isAdmin).map(
            ([k, label]) => html`<li><a href=${`#/${k}`} aria-current=${page === k ? 'page' : undefined}>${label}</a></li>`,
          )}
        </ul>
      </nav>
      <span class="who">
        <span class=${`live ${status}`} role="status" aria-live="polite">${status === 'live' ? 'Live' : status === 'connecting' ? 'Connecting…' : 'Reconnecting…'}</span>
        <span data-testid="whoami">${me.user}${isAdmin ? ' (admin)' : ''}</span>
        <button type="button" onClick=${onSignOut}>Sign out</button>
      </span>
    </header>
    <main id="main" tabindex="-1">${body}</main>`;
}

function App() {
  const [me, setMe] = useState(undefined);
  const signedIn = (who) => {
    setMe(who);
    live.start(() => setMe(null));
  };
  useEffect(() => {
    get('/v1/auth/whoami')
      .then(async (w) => {
        await refreshCsrf();
        signedIn({ user: w.name, role: w.admin ? 'admin' : 'user' });
      })
      .catch(() => setMe(null));
  }, []);
  const signOut = async () => {
    try {
      await post('/v1/auth/logout');
    } catch {
      /* the session may be gone already */
    }
    live.stop();
    setCsrf(null);
    setMe(null);
    location.hash = '#/map';
  };
  if (me === undefined) return html`<main id="main"><p role="status">Loading…</p></main>`;
  if (me === null) return html`<${SignIn} onSignedIn=${signedIn} />`;
  return html`<${Shell} me=${me} onSignOut=${signOut} />`;
}

render(html`<${App} />`, document.getElementById('app'));
