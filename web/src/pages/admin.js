// admin.js - for administrators only (the navigation hides it from
// others, and the API refuses them anyway): nodes (drain = PATCH
// /v1/nodes/{id} {"state": "draining"}, back up = {"state": "up"},
// revoke = POST /v1/nodes/{id}/revoke), users (POST
// /v1/users/{name}/disable|enable), profiles (GET/POST /v1/profiles,
// DELETE /v1/profiles/{name}) and the burst policy (GET/PUT
// /v1/policy/burst).  These lists are not in the snapshot: each section
// loads its list when shown and again after each action, and the node
// list again when the snapshot's version changes.
import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { get, post, patch, put, del, seg } from '../api.js';
import { Notice, dash } from '../util.js';

function useList(path, dep) {
  const [items, setItems] = useState(null);
  const [err, setErr] = useState(null);
  const load = () =>
    get(path)
      .then((d) => {
        setItems(d.items || []);
        setErr(null);
      })
      .catch((e) => setErr(e.message));
  useEffect(() => {
    load();
  }, [dep]);
  return [items, err, load];
}

function useAction(reload) {
  const [msg, setMsg] = useState(null);
  const run = async (what, fn) => {
    setMsg(null);
    try {
      await fn();
      setMsg({ text: `${what}: done.` });
    } catch (e) {
      setMsg({ text: `${what}: ${e.message}`, error: true });
    }
    reload();
  };
  return [msg, run];
}

function Nodes({ version }) {
  const [items, err, load] = useList('/v1/nodes', version);
  const [msg, run] = useAction(load);
  return html`<section aria-labelledby="adm-nodes"><h2 id="adm-nodes">Nodes</h2>
    <${Notice} msg=${msg} />${err && html`<p class="notice error" role="alert">${err}</p>`}
    <div class="table-wrap"><table data-testid="admin-nodes">
      <thead><tr><th scope="col">Node</th><th scope="col">State</th><th scope="col">GPUs</th><th scope="col">Blocks used</th><th scope="col">Workloads</th><th scope="col">Last seen</th><th scope="col">Actions</th></tr></thead>
      <tbody>${(items || []).map((n) => html`<tr data-node=${n.name}>
        <td>${n.name}</td><td><span class=${`state ${n.state}`}>${n.state}</span></td><td>${n.gpus} × ${dash(n.gpu_type)}</td>
        <td>${dash(n.blocks_used)} / ${dash(n.blocks_total)}</td><td>${dash(n.workloads)}</td><td>${dash(n.last_seen_s_ago)} s ago</td>
        <td class="actions">
          ${n.state === 'draining' || n.state === 'cordoned'
            ? html`<button type="button" onClick=${() => run(`Uncordon ${n.name}`, () => patch(`/v1/nodes/${seg(n.id)}`, { state: 'up' }))}>Uncordon<span class="sr-only"> ${n.name}</span></button>`
            : html`<button type="button" onClick=${() => run(`Drain ${n.name}`, () => patch(`/v1/nodes/${seg(n.id)}`, { state: 'draining' }))}>Drain<span class="sr-only"> ${n.name}</span></button>`}
          <button type="button" class="danger" onClick=${() => confirm(`Revoke node ${n.name}? Its agent's credential stops working and its work ends.`) && run(`Revoke ${n.name}`, () => post(`/v1/nodes/${seg(n.id)}/revoke`))}>Revoke<span class="sr-only"> ${n.name}</span></button>
        </td></tr>`)}</tbody>
    </table></div></section>`;
}

function Users() {
  const [items, err, load] = useList('/v1/users', 0);
  const [msg, run] = useAction(load);
  return html`<section aria-labelledby="adm-users"><h2 id="adm-users">Users</h2>
    <${Notice} msg=${msg} />${err && html`<p class="notice error" role="alert">${err}</p>`}
    <div class="table-wrap"><table data-testid="admin-users">
      <thead><tr><th scope="col">User</th><th scope="col">State</th><th scope="col">Actions</th></tr></thead>
      <tbody>${(items || []).map((u) => html`<tr data-user=${u.name}>
        <td>${u.name}</td><td>${u.disabled ? 'disabled' : 'active'}</td>
        <td class="actions">${u.disabled
          ? html`<button type="button" onClick=${() => run(`Enable ${u.name}`, () => post(`/v1/users/${seg(u.name)}/enable`))}>Enable<span class="sr-only"> ${u.name}</span></button>`
          : html`<button type="button" class="danger" onClick=${() => run(`Disable ${u.name}`, () => post(`/v1/users/${seg(u.name)}/disable`))}>Disable<span class="sr-only"> ${u.name}</span></button>`}</td>
      </tr>`)}</tbody>
    </table></div></section>`;
}

function Profiles() {
  const [items, err, load] = useList('/v1/profiles', 0);
  const [msg, run] = useAction(load);
  const [f, setF] = useState({ name: '', gpu: '', description: '' });
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const add = (e) => {
    e.preventDefault();
    run(`Save profile ${f.name}`, () => post('/v1/profiles', f));
  };
  return html`<section aria-labelledby="adm-profiles"><h2 id="adm-profiles">Profiles</h2>
    <${Notice} msg=${msg} />${err && html`<p class="notice error" role="alert">${err}</p>`}
    <div class="table-wrap"><table>
      <thead><tr><th scope="col">Name</th><th scope="col">GPU</th><th scope="col">Description</th><th scope="col">Actions</th></tr></thead>
      <tbody>${(items || []).map((p) => html`<tr>
        <td>${p.name}</td><td>${dash(p.gpu)}</td><td>${dash(p.description)}</td>
        <td><button type="button" class="danger" onClick=${() => run(`Delete profile ${p.name}`, () => del(`/v1/profiles/${seg(p.name)}`))}>Delete<span class="sr-only"> ${p.name}</span></button></td>
      </tr>`)}</tbody>
    </table></div>
    <form class="grid" onSubmit=${add}>
      <label for="pf-name">Name</label><input id="pf-name" required value=${f.name} onInput=${set('name')} />
      <label for="pf-gpu">GPU shape</label><input id="pf-gpu" required placeholder="h100-25" value=${f.gpu} onInput=${set('gpu')} />
      <label for="pf-desc">Description</label><input id="pf-desc" value=${f.description} onInput=${set('description')} />
      <button type="submit">Save profile</button>
    </form></section>`;
}

function Burst() {
  const [pol, setPol] = useState(null);
  const [err, setErr] = useState(null);
  const load = () => get('/v1/policy/burst').then((p) => setPol({
    enabled: !!p.enabled, threshold: p.threshold ?? 0.9, provider: p.provider ?? '',
    strategy: p.strategy ?? 'spot', max_cloud_budget: p.max_cloud_budget ?? 0,
  })).catch((e) => setErr(e.message));
  useEffect(() => {
    load();
  }, []);
  const [msg, run] = useAction(load);
  if (!pol) return html`<section aria-labelledby="adm-burst"><h2 id="adm-burst">Burst policy</h2>${err ? html`<p class="notice error" role="alert">${err}</p>` : html`<p role="status">Loading…</p>`}</section>`;
  const set = (k, conv) => (e) => setPol({ ...pol, [k]: conv ? conv(e.target) : e.target.value });
  const save = (e) => {
    e.preventDefault();
    run('Save burst policy', () => put('/v1/policy/burst', {
      enabled: pol.enabled, threshold: Number(pol.threshold), provider: pol.provider,
      strategy: pol.strategy, max_cloud_budget: Number(pol.max_cloud_budget),
    }));
  };
  return html`<section aria-labelledby="adm-burst"><h2 id="adm-burst">Burst policy</h2>
    <${Notice} msg=${msg} />
    <form class="grid" onSubmit=${save}>
      <label for="bp-en">Enabled</label><input id="bp-en" type="checkbox" checked=${pol.enabled} onChange=${set('enabled', (t) => t.checked)} />
      <label for="bp-th">Threshold (0–1 of on-premises capacity)</label><input id="bp-th" type="number" step="0.01" min="0" max="1" required value=${pol.threshold} onInput=${set('threshold')} />
      <label for="bp-pr">Provider</label>
      <select id="bp-pr" required value=${pol.provider} onChange=${set('provider')}>
        <option value="">choose…</option><option value="aws">aws</option><option value="gcp">gcp</option><option value="azure">azure</option>
      </select>
      <label for="bp-st">Strategy</label>
      <select id="bp-st" value=${pol.strategy} onChange=${set('strategy')}>
        <option value="spot">spot</option><option value="on-demand">on-demand</option><option value="spot-then-on-demand">spot-then-on-demand</option>
      </select>
      <label for="bp-bu">Cloud budget</label><input id="bp-bu" type="number" min="0" step="any" required value=${pol.max_cloud_budget} onInput=${set('max_cloud_budget')} />
      <button type="submit">Save policy</button>
    </form></section>`;
}

export function Admin({ snap }) {
  return html`<section class="admin">
    <h1 tabindex="-1">Admin</h1>
    <${Nodes} version=${snap ? snap.version : 0} />
    <${Users} />
    <${Profiles} />
    <${Burst} />
  </section>`;
}
