// servers.js - the viewer's servers from the snapshot: open (in a new tab,
// the URL GET /v1/servers/{id} gives this viewer: the notebook origin's,
// with the server's token only for those who may use it), stop (POST /v1/servers/{id}/stop), start (.../start) and
// resize (PATCH /v1/servers/{id} {"blocks": N}, a block slice in flight).
// The snapshot brings the new state; nothing here polls.
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { get, post, patch, seg } from '../api.js';
import { Notice, dash } from '../util.js';

function Row({ s, onMsg }) {
  const label = s.name || s.id;
  const [blocks, setBlocks] = useState('');
  const [busy, setBusy] = useState(false);
  const act = async (what, fn) => {
    setBusy(true);
    onMsg(null);
    try {
      await fn();
      onMsg({ text: `${what} ${label}: done.` });
    } catch (e) {
      onMsg({ text: `${what} ${label}: ${e.message}`, error: true });
    }
    setBusy(false);
  };
  const base = `/v1/servers/${seg(s.id)}`;
  const running = s.state === 'running' || s.state === 'pending' || s.state === 'starting';
  // The tab opens within the click (no popup blocker), blank and with no
  // opener, and is sent to the URL once the API has given it.
  const open = async () => {
    const w = window.open('', '_blank');
    if (w) w.opener = null;
    try {
      const doc = await get(base);
      if (!doc.url) throw new Error('it has no URL yet');
      if (w) w.location.href = doc.url;
    } catch (e) {
      if (w) w.close();
      onMsg({ text: `Open ${label}: ${e.message}`, error: true });
    }
  };
  const resize = (e) => {
    e.preventDefault();
    const n = Number(blocks);
    if (!Number.isInteger(n) || n < 1 || n > 100) {
      onMsg({ text: 'Blocks: a whole number from 1 to 100.', error: true });
      return;
    }
    act('Resize', () => patch(base, { blocks: n }));
  };
  return html`<tr data-server=${label} data-server-id=${s.id} data-state=${s.state}>
    <td>${label}</td><td>${dash(s.project)}</td><td><span class=${`state ${s.state}`}>${s.state}</span></td><td>${dash(s.gpu)}</td>
    <td class="actions">
      ${s.state === 'running' ? html`<button type="button" data-open=${s.id} onClick=${open}>Open<span class="sr-only"> ${label}</span></button>` : ''}
      ${running
        ? html`<button type="button" disabled=${busy} onClick=${() => act('Stop', () => post(`${base}/stop`))}>Stop<span class="sr-only"> ${label}</span></button>`
        : html`<button type="button" disabled=${busy} onClick=${() => act('Start', () => post(`${base}/start`))}>Start<span class="sr-only"> ${label}</span></button>`}
      <form class="inline" onSubmit=${resize}>
        <label for=${`rs-${s.id}`} class="sr-only">Blocks for ${label}</label>
        <input id=${`rs-${s.id}`} type="number" min="1" max="100" inputmode="numeric" placeholder="blocks" value=${blocks} onInput=${(e) => setBlocks(e.target.value)} />
        <button type="submit" disabled=${busy}>Resize</button>
      </form>
    </td>
  </tr>`;
}

export function Servers({ snap }) {
  const [msg, setMsg] = useState(null);
  if (!snap) return html`<section><h1 tabindex="-1">My servers</h1><p role="status">Waiting for the first snapshot…</p></section>`;
  const mine = (snap.servers || []).filter((s) => !snap.viewer || s.user === snap.viewer.user);
  return html`<section class="servers">
    <h1 tabindex="-1">My servers</h1>
    <${Notice} msg=${msg} />
    <div class="table-wrap"><table data-testid="servers">
      <caption class="sr-only">Your servers</caption>
      <thead><tr><th scope="col">Name</th><th scope="col">Project</th><th scope="col">State</th><th scope="col">GPU</th><th scope="col">Actions</th></tr></thead>
      <tbody>
        ${mine.length === 0 && html`<tr><td colspan="5">No servers. Create one with <code>cnlab server create</code>.</td></tr>`}
        ${mine.map((s) => html`<${Row} key=${s.id} s=${s} onMsg=${setMsg} />`)}
      </tbody>
    </table></div>
  </section>`;
}
