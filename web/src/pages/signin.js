// signin.js - the sign-in form: POST /v1/auth/cookie with user and
// password; the answer sets the HttpOnly session cookie and gives the
// CSRF token.  Where GET /v1/auth/oidc answers (browser sign-in
// configured), a single sign-on link leads to GET /v1/auth/oidc/start:
// cnlabd runs the authorization code flow with PKCE itself (the code
// verifier never reaches the page), sets the session cookie at its
// callback and sends the browser back here, where the page asks
// /v1/auth/whoami and /v1/auth/csrf as after a reload.  A refused
// callback sends a browser to /ui/?sso_error=REASON, shown in the form's
// alert line.
import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { api, setCsrf } from '../api.js';

// Why cnlabd's callback refused a single sign-on (/ui/?sso_error=REASON):
// fixed words per reason, nothing from the address is shown.
const SSO_ERRORS = {
  cookie: 'Single sign-on did not start in this browser (or its cookie was blocked): try again.',
  used: 'This single sign-on expired or was already used: try again.',
  state: 'Single sign-on came back for another sign-in: try again.',
  denied: 'The identity provider refused the sign-in.',
  code: "The identity provider's answer could not be used: try again.",
  token: "The identity provider's answer could not be used: try again.",
  unreachable: 'The identity provider could not be reached: try again later.',
  disabled: 'This account is disabled: ask an administrator.',
  config: 'Single sign-on is not configured on this server.',
};

function ssoError() {
  const r = new URLSearchParams(location.search).get('sso_error');
  if (r === null) return null;
  history.replaceState(null, '', `/ui/${location.hash}`);
  return SSO_ERRORS[r] || 'Single sign-on failed: try again.';
}

// The single sign-on address, back to the page the user was on (made
// again at the click: the hash may have changed since the render).
function oidcStart() {
  return `/v1/auth/oidc/start?return_to=${encodeURIComponent(`/ui/${location.hash}`)}`;
}

export function SignIn({ onSignedIn }) {
  const [user, setUser] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState(ssoError);
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
        <a class="button secondary" href=${oidcStart()} data-testid="sso"
          onClick=${(e) => { e.currentTarget.href = oidcStart(); }}>
          Sign in with single sign-on (${new URL(oidc.issuer || oidc.authorization_endpoint).host})
        </a>`}
    </main>`;
}
