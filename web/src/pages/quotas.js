// quotas.js - per project and user: GPUs held now, GPU-hours used of the
// quota (gpu_hours / gpu_limit), the fair
// share order now (rank 1 is served first), and each project's 7-day
// usage curve (GPU-hours per day, oldest first) drawn with uPlot.
import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import { projectColor, dash } from '../util.js';

function Use({ used, limit }) {
  const u = Number((used ?? 0).toFixed(2));
  if (limit === null || limit === undefined)
    return html`<span>${u} <small>(no limit)</small></span>`;
  const pct = limit > 0 ? Math.min(100, Math.round((u / limit) * 100)) : 100;
  return html`<span class="use">
    <meter min="0" max=${limit} value=${u} high=${limit * 0.9} aria-label=${`${u} of ${limit} GPU-hours`}></meter>
    ${u} / ${limit} <small>(${pct}%)</small></span>`;
}

function days() {
  const out = [];
  const now = new Date();
  now.setUTCHours(0, 0, 0, 0);
  for (let i = 6; i >= 0; i--) out.push(now.getTime() / 1000 - i * 86400);
  return out;
}

function UsageChart({ projects }) {
  const ref = useRef(null);
  const plot = useRef(null);
  const key = projects.map((p) => `${p.name}:${(p.usage_7d || []).join(',')}`).join('|');
  useEffect(() => {
    if (!ref.current) return undefined;
    const width = Math.max(280, Math.min(ref.current.clientWidth || 600, 900));
    const data = [days(), ...projects.map((p) => {
      const u = p.usage_7d || [];
      return Array.from({ length: 7 }, (_, i) => (u[i] === undefined ? null : u[i]));
    })];
    const opts = {
      width,
      height: 240,
      series: [{}, ...projects.map((p) => ({ label: p.name, stroke: projectColor(p.name), width: 2 }))],
      axes: [{}, { label: 'GPU-hours / day' }],
      scales: { x: { time: true } },
    };
    if (plot.current) plot.current.destroy();
    plot.current = new uPlot(opts, data, ref.current);
    return () => {
      if (plot.current) plot.current.destroy();
      plot.current = null;
    };
  }, [key]);
  return html`<figure class="chart">
    <div ref=${ref} role="img" aria-label="GPU-hours per day over the last 7 days, per project (the table below has the numbers)"></div>
    <figcaption>GPU-hours per day, last 7 days.</figcaption>
  </figure>`;
}

export function Quotas({ snap }) {
  if (!snap) return html`<section><h1 tabindex="-1">Quotas and fair share</h1><p role="status">Waiting for the first snapshot…</p></section>`;
  const projects = [...(snap.projects || [])].sort((a, b) => (a.fair_share_rank ?? 1e9) - (b.fair_share_rank ?? 1e9));
  const users = [...(snap.users || [])].sort((a, b) => (a.fair_share_rank ?? 1e9) - (b.fair_share_rank ?? 1e9));
  return html`<section class="quotas">
    <h1 tabindex="-1">Quotas and fair share</h1>
    ${projects.length > 0 && html`<${UsageChart} projects=${projects} />`}
    <h2 id="proj-h">Projects, in fair-share order</h2>
    <div class="table-wrap"><table aria-labelledby="proj-h">
      <thead><tr><th scope="col">Rank</th><th scope="col">Project</th><th scope="col">GPUs now</th><th scope="col">GPU-hours used / quota</th><th scope="col">GPU-hours, last 7 days (oldest first)</th></tr></thead>
      <tbody>
        ${projects.length === 0 && html`<tr><td colspan="5">No projects.</td></tr>`}
        ${projects.map((p) => html`<tr>
          <td>${dash(p.fair_share_rank)}</td><td>${p.name}</td><td>${dash(p.gpu_used)}</td><td><${Use} used=${p.gpu_hours} limit=${p.gpu_limit} /></td>
          <td>${(p.usage_7d || []).map((v) => (v === null ? '—' : Number(v).toFixed(1))).join(' · ') || '—'}</td>
        </tr>`)}
      </tbody>
    </table></div>
    <h2 id="users-h">Users, in fair-share order</h2>
    <div class="table-wrap"><table aria-labelledby="users-h">
      <thead><tr><th scope="col">Rank</th><th scope="col">User</th><th scope="col">Project</th><th scope="col">GPUs now</th><th scope="col">GPU-hours used / quota</th></tr></thead>
      <tbody>
        ${users.length === 0 && html`<tr><td colspan="5">No users.</td></tr>`}
        ${users.map((u) => html`<tr><td>${dash(u.fair_share_rank)}</td><td>${u.name}</td><td>${dash(u.project)}</td><td>${dash(u.gpu_used)}</td><td><${Use} used=${u.gpu_hours} limit=${u.gpu_limit} /></td></tr>`)}
      </tbody>
    </table></div>
  </section>`;
}
