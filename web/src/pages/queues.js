// queues.js - pending work per priority (with its reason and estimated
// start), running work and recent ends, all from the snapshot's
// "queues"; each job links to its page.
import { html } from 'htm/preact';
import { JobLink, dash, fmtTime } from '../util.js';

const PRIO = ['critical', 'high', 'normal', 'low'];

function prioOrder(a, b) {
  const ia = PRIO.indexOf(a);
  const ib = PRIO.indexOf(b);
  return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || String(a).localeCompare(String(b));
}

export function Queues({ snap }) {
  if (!snap) return html`<section><h1 tabindex="-1">Queues</h1><p role="status">Waiting for the first snapshot…</p></section>`;
  const q = snap.queues || {};
  const counts = q.pending_counts || {};
  const pending = q.pending || [];
  const running = q.running || [];
  const recent = q.recent || [];
  const prios = Object.keys(counts).sort(prioOrder);
  return html`<section class="queues">
    <h1 tabindex="-1">Queues</h1>
    <ul class="counts" aria-label="Pending per priority">
      ${prios.length === 0 && html`<li>Nothing pending.</li>`}
      ${prios.map((p) => html`<li><span class="count">${counts[p]}</span> ${p}</li>`)}
      <li><span class="count">${running.length}</span> running</li>
    </ul>
    <h2 id="pending-h">Pending</h2>
    <div class="table-wrap"><table aria-labelledby="pending-h" data-testid="pending">
      <thead><tr><th scope="col">Job</th><th scope="col">Project</th><th scope="col">User</th><th scope="col">Priority</th><th scope="col">GPU</th><th scope="col">Reason</th><th scope="col">Estimated start</th><th scope="col">Submitted</th></tr></thead>
      <tbody>
        ${pending.length === 0 && html`<tr><td colspan="8">No pending work you can see.</td></tr>`}
        ${pending.map((j) => html`<tr data-job=${j.id}>
          <td><${JobLink} id=${j.id} name=${j.name} /></td><td>${dash(j.project)}</td><td>${dash(j.user)}</td>
          <td>${dash(j.priority)}</td><td>${dash(j.gpu)}</td><td>${dash(j.reason)}</td>
          <td>${fmtTime(j.estimated_start)}</td><td>${fmtTime(j.submitted_at)}</td>
        </tr>`)}
      </tbody>
    </table></div>
    <h2 id="running-h">Running</h2>
    <div class="table-wrap"><table aria-labelledby="running-h" data-testid="running">
      <thead><tr><th scope="col">Job</th><th scope="col">Project</th><th scope="col">User</th><th scope="col">Priority</th><th scope="col">GPU</th><th scope="col">Node</th><th scope="col">Started</th></tr></thead>
      <tbody>
        ${running.length === 0 && html`<tr><td colspan="7">Nothing running that you can see.</td></tr>`}
        ${running.map((j) => html`<tr data-job=${j.id}>
          <td><${JobLink} id=${j.id} name=${j.name} /></td><td>${dash(j.project)}</td><td>${dash(j.user)}</td>
          <td>${dash(j.priority)}</td><td>${dash(j.gpu)}</td><td>${dash(j.node)}</td><td>${fmtTime(j.started_at)}</td>
        </tr>`)}
      </tbody>
    </table></div>
    <h2 id="recent-h">Recent ends</h2>
    <div class="table-wrap"><table aria-labelledby="recent-h" data-testid="recent">
      <thead><tr><th scope="col">Job</th><th scope="col">Project</th><th scope="col">User</th><th scope="col">State</th><th scope="col">Exit code</th><th scope="col">Ended</th></tr></thead>
      <tbody>
        ${recent.length === 0 && html`<tr><td colspan="6">No recent ends.</td></tr>`}
        ${recent.map((j) => html`<tr data-job=${j.id} data-state=${j.state}>
          <td><${JobLink} id=${j.id} name=${j.name} /></td><td>${dash(j.project)}</td><td>${dash(j.user)}</td>
          <td><span class=${`state ${j.state}`}>${j.state}</span></td><td>${dash(j.exit_code)}</td><td>${fmtTime(j.ended_at)}</td>
        </tr>`)}
      </tbody>
    </table></div>
  </section>`;
}
