// signin.js - the sign-in form: POST /v1/auth/cookie with user and
// password; the answer sets the HttpOnly session cookie and gives the
// CSRF token.  Where GET /v1/auth/oidc answers (browser sign-in
// configured), a single sign-on button starts the authorization code
// flow with PKCE; the IdP sends the browser back to /ui/?code=...&state=
// and the code goes to POST /v1/auth/cookie {"code", "code_verifier",
// "redirect_uri"} (docs/dashboard.md: the contract's OIDC extension).
import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { api, setCsrf } from '../api.js';

function b64url(bytes) {
  let s = '';
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

async function startOidc(cfg) {
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
  const challenge = b64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
  sessionStorage.setItem('cnlab_oidc', JSON.stringify({ verifier, state }));
  const u = new URL(cfg.authorization_endpoint);
  u.searchParams.set('response_type', 'code');
  u.searchParams.set('client_id', cfg.client_id);
  u.searchParams.set('redirect_uri', `${location.origin}/ui/`);
  u.searchParams.set('scope', cfg.scope || 'openid');
  u.searchParams.set('state', state);
  u.searchParams.set('code_challenge', challenge);
  u.searchParams.set('code_challenge_method', 'S256');
  location.assign(u.toString());
}

export function SignIn({ onSignedIn }) {
  const [user, setUser] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [oidc, setOidc] = useState(null);

  const done = (r) => {
    setCsrf(r.csrf);
    onSignedIn({ user: r.user, role: r.role });
  };

  useEffect(() => {
    fetch('/v1/auth/oidc', { credentials: 'same-origin' })
      .then((r) => (r.ok ? r.json() : null))
      .then((c) => c && c.authorization_endpoint && setOidc(c))
      .catch(() => {});
    // Back from the IdP: finish the code flow.
    const q = new URLSearchParams(location.search);
    const saved = sessionStorage.getItem('cnlab_oidc');
    if (q.get('code') && saved) {
      sessionStorage.removeItem('cnlab_oidc');
      const { verifier, state } = JSON.parse(saved);
      history.replaceState(null, '', '/ui/');
      if (q.get('state') !== state) {
        setError('Single sign-on answered with the wrong state: try again.');
        return;
      }
      api('POST', '/v1/auth/cookie', {
        code: q.get('code'),
        code_verifier: verifier,
        redirect_uri: `${location.origin}/ui/`,
      })
        .then(done)
        .catch((e) => setError(e.message));
    }
  }, []);

  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      done(await api('POST', '/v1/auth/cookie', { user, password }));
    } catch (err) {
      setError(err.status === 401 ? 'Wrong user name or password.' : err.message);
      setBusy(false);
    }
  };

  return html`
    <main id="main" class="signin">
      <h1>Sign in to CNLab</h1>
      <form onSubmit=${submit} aria-describedby=${error ? 'signin-error' : undefined}>
        <label for="signin-user">User</label>
        <input id="signin-user" name="user" autocomplete="username" required
          value=${user} onInput=${(e) => setUser(e.target.value)} />
        <label for="signin-password">Password</label>
        <input id="signin-password" name="password" type="password" autocomplete="current-password" required
          value=${password} onInput=${(e) => setPassword(e.target.value)} />
        ${error && html`<p id="signin-error" class="notice error" role="alert">${error}</p>`}
        <button type="submit" disabled=${busy}>${busy ? 'Signing in…' : 'Sign in'}</button>
      </form>
      ${oidc && html`<p class="or">or</p>
        <button type="button" class="secondary" onClick=${() => startOidc(oidc).catch((e) => setError(e.message))}>
          Sign in with single sign-on (${new URL(oidc.issuer || oidc.authorization_endpoint).host})
        </button>`}
    </main>`;
}
