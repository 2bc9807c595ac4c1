// api.js - the dashboard's one door to cnlabd's /v1 API.
//
// The session is the HttpOnly cookie cnlab_ui that POST
// /v1/auth/cookie sets (the page never sees the JWT).  Every request other
// than GET/HEAD carries X-CSRF-Token: the value the sign-in answered, or,
// after a reload, GET /v1/auth/csrf.  Errors come back as thrown
// ApiError with the server's status and message (its JSON "message" or
// "error"), so a page can show what the server said.

let csrf = null;

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export function setCsrf(v) {
  csrf = v;
}

async function parse(res) {
  const text = await res.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && method !== 'HEAD' && path !== '/v1/auth/cookie') {
    if (!csrf) await refreshCsrf();
    if (csrf) headers['X-CSRF-Token'] = csrf;
  }
  const res = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await parse(res);
  if (!res.ok) {
    const msg =
      (data && typeof data === 'object' && data.error && data.error.message) ||
      (data && typeof data === 'object' && typeof data.error === 'string' && data.error) ||
      `${method} ${path}: HTTP ${res.status}`;
    throw new ApiError(res.status, msg, data);
  }
  return data;
}

export const get = (p) => api('GET', p);
export const post = (p, b) => api('POST', p, b === undefined ? {} : b);
export const patch = (p, b) => api('PATCH', p, b);
export const put = (p, b) => api('PUT', p, b);
export const del = (p) => api('DELETE', p);

export async function refreshCsrf() {
  try {
    const r = await fetch('/v1/auth/csrf', { credentials: 'same-origin' });
    if (!r.ok) return false;
    csrf = (await r.json()).csrf || null;
    return !!csrf;
  } catch {
    return false;
  }
}

// The path segment, escaped: ids and names go into URLs through this.
export const seg = (s) => encodeURIComponent(String(s));
