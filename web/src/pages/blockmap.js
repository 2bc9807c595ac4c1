// blockmap.js - every node and GPU with its slices drawn to scale.
//
// A GPU in blocks mode is 100 blocks of 1%: a slice sits at its "start"
// and is "blocks" wide.  A GPU in MIG mode is cut into instances by
// profile: "3g.40gb" on an 80 GB GPU takes 4 of its 8 memory slots from
// its "mig_start" (without a placement: 3 of its 7 compute slices, laid
// out by GPU-instance id).  What no slice
// takes is free and drawn striped and labelled, so free capacity shows at
// a glance.  Each slice is focusable: hover or focus shows its project,
// user, workload and live VRAM/compute use in the details panel (an
// aria-live region); the same facts are in the table below the map, for
// screen readers and small screens.
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { projectColor, fmtMiB, fmtPct, dash } from '../util.js';

const MIG_SLICES = 7; /* compute slices of a MIG GPU */
const MIG_SLOTS = 8; /* memory slices: where an instance sits */

// A MIG instance's width in memory slices, from its profile's memory
// ("2g.20gb" on an 80 GB GPU: 20 of 80 GB, 2 of its 8 slots).
function migSlots(profile, gpu) {
  const m = /\.(\d+)gb/.exec(profile || '');
  if (!m || !gpu.vram_mib) return null;
  return Math.max(1, Math.round((Number(m[1]) * 1024) / (gpu.vram_mib / MIG_SLOTS)));
}

function migWidth(profile) {
  const m = /^(\d+)g\./.exec(profile || '');
  return m ? (Number(m[1]) / MIG_SLICES) * 100 : 0;
}

// Where each slice goes, in percent of the GPU's width.  A MIG instance
// with its placement ("mig_start", the first of the GPU's 8 memory
// slots) is drawn there, as wide as its memory; without one, instances
// are laid side by side by GPU-instance id, as wide as their compute.
function layout(gpu) {
  const slices = gpu.slices || [];
  if (gpu.mode === 'mig') {
    let x = 0;
    return [...slices]
      .sort((a, b) => (a.mig_start ?? a.gi ?? 0) - (b.mig_start ?? b.gi ?? 0))
      .map((s) => {
        const slots = migSlots(s.mig_profile, gpu);
        if (s.mig_start !== null && s.mig_start !== undefined && slots)
          return { s, left: (s.mig_start / MIG_SLOTS) * 100, width: (slots / MIG_SLOTS) * 100 };
        const w = migWidth(s.mig_profile);
        const r = { s, left: x, width: w };
        x += w;
        return r;
      });
  }
  return slices.map((s) => ({ s, left: s.start || 0, width: s.blocks || 0 }));
}

function freePct(gpu, placed) {
  if (gpu.free_blocks !== null && gpu.free_blocks !== undefined) return gpu.free_blocks;
  const used = placed.reduce((a, p) => a + p.width, 0);
  return Math.max(0, Math.round(100 - used));
}

function sliceLabel(s) {
  const size = s.mig_profile ? `MIG ${s.mig_profile}` : `${s.blocks} blocks`;
  if (s.kind === 'other') return `another project's slice, ${size}`;
  return `${s.kind} ${s.name || s.id}, project ${dash(s.project)}, user ${dash(s.user)}, ${size}, VRAM ${fmtMiB(s.vram_used_mib)} of ${fmtMiB(s.vram_mib)}, compute ${fmtPct(s.util_pct)}`;
}

function Details({ sel }) {
  if (!sel) return html`<p>Hover over or focus a slice to see who uses it.</p>`;
  const { node, gpu, s } = sel;
  if (s.kind === 'other')
    return html`<p><strong>${node.name} GPU ${gpu.index}</strong>: another project's slice (${s.mig_profile || `${s.blocks} blocks`}).</p>`;
  return html`<dl class="facts">
    <dt>Where</dt><dd>${node.name} GPU ${gpu.index}</dd>
    <dt>Workload</dt><dd>${s.kind === 'job' ? html`<a href=${`#/jobs/${encodeURIComponent(s.id)}`}>${s.name || s.id}</a>` : s.name || s.id} (${s.kind})</dd>
    <dt>Project</dt><dd>${dash(s.project)}</dd>
    <dt>User</dt><dd>${dash(s.user)}</dd>
    <dt>Size</dt><dd>${s.mig_profile ? `MIG ${s.mig_profile}${s.mig_start !== null && s.mig_start !== undefined ? ` at slot ${s.mig_start}` : ''}${s.gi !== null && s.gi !== undefined ? ` (GI ${s.gi})` : ''}` : `${s.blocks} blocks from ${s.start}`}</dd>
    <dt>VRAM</dt><dd>${fmtMiB(s.vram_used_mib)} used of ${fmtMiB(s.vram_mib)}</dd>
    <dt>Compute</dt><dd>${fmtPct(s.util_pct)}</dd>
  </dl>`;
}

function Gpu({ node, gpu, onSel }) {
  const placed = layout(gpu);
  const free = freePct(gpu, placed);
  const title = `${node.name} GPU ${gpu.index}`;
  return html`<div class="gpu" data-gpu=${`${node.name}/${gpu.index}`}>
    <div class="gpu-head">
      <span class="gpu-name">GPU ${gpu.index}</span>
      <span class="gpu-model">${dash(gpu.model)}</span>
      <span class="badge">${gpu.mode === 'mig' ? 'MIG' : 'blocks'}</span>
      <span class="gpu-use">VRAM ${fmtMiB(gpu.vram_used_mib)} / ${fmtMiB(gpu.vram_mib)} · ${fmtPct(gpu.util_pct)} busy</span>
      ${gpu.util_pct !== null && gpu.util_pct !== undefined && html`<meter class="gpu-util" min="0" max="100" value=${gpu.util_pct} aria-label=${`${title} utilisation ${gpu.util_pct}%`}></meter>`}
      <span class=${free > 0 ? 'free-count has-free' : 'free-count'}>${free}% free</span>
    </div>
    <div class="bar" role="list" aria-label=${`${title}: ${placed.length} slices, ${free}% free`}>
      ${placed.map(
        ({ s, left, width }) => html`<div role="listitem" tabindex="0"
          class=${`slice ${s.kind}`} data-kind=${s.kind} data-id=${s.id || ''}
          style=${{ left: `${left}%`, width: `${width}%`, background: s.kind === 'other' ? undefined : projectColor(s.project) }}
          aria-label=${sliceLabel(s)} title=${sliceLabel(s)}
          onMouseEnter=${() => onSel({ node, gpu, s })} onFocus=${() => onSel({ node, gpu, s })}>
          <span class="slice-text">${s.kind === 'other' ? '' : s.project || ''}</span>
        </div>`,
      )}
    </div>
  </div>`;
}

export function BlockMap({ snap }) {
  const [sel, setSel] = useState(null);
  if (!snap) return html`<section><h1 tabindex="-1">Block map</h1><p role="status">Waiting for the first snapshot…</p></section>`;
  const nodes = snap.nodes || [];
  let gpus = 0;
  let freeSum = 0;
  const rows = [];
  for (const n of nodes)
    for (const g of n.gpus || []) {
      gpus++;
      const placed = layout(g);
      freeSum += freePct(g, placed);
      for (const p of placed) rows.push({ n, g, s: p.s });
    }
  const projects = [...new Set(rows.map((r) => r.s.project).filter(Boolean))].sort();
  return html`<section class="blockmap">
    <h1 tabindex="-1">Block map</h1>
    <p class="summary" data-testid="map-summary">${nodes.length} node${nodes.length === 1 ? '' : 's'}, ${gpus} GPU${gpus === 1 ? '' : 's'}, <strong>${gpus ? Math.round(freeSum / gpus) : 0}% free</strong> overall.</p>
    ${projects.length > 0 && html`<ul class="legend" aria-label="Projects">
      ${projects.map((p) => html`<li><span class="swatch" style=${{ background: projectColor(p) }}></span>${p}</li>`)}
      <li><span class="swatch other"></span>other projects</li><li><span class="swatch free"></span>free</li>
    </ul>`}
    <div class="details" aria-live="polite"><${Details} sel=${sel} /></div>
    ${nodes.map(
      (n) => html`<article class="node" aria-labelledby=${`node-${n.name}`}>
        <h2 id=${`node-${n.name}`}>${n.name} <span class=${`state ${n.state}`}>${n.state}</span>${n.cluster && n.cluster !== 'default' ? html` <span class="badge">${n.cluster}</span>` : ''}</h2>
        ${(n.gpus || []).map((g) => html`<${Gpu} node=${n} gpu=${g} onSel=${setSel} />`)}
      </article>`,
    )}
    <h2>All slices</h2>
    <div class="table-wrap"><table>
      <caption class="sr-only">Every slice on every GPU</caption>
      <thead><tr><th scope="col">Node</th><th scope="col">GPU</th><th scope="col">Mode</th><th scope="col">Size</th><th scope="col">Workload</th><th scope="col">Project</th><th scope="col">User</th><th scope="col">VRAM used</th><th scope="col">Compute</th></tr></thead>
      <tbody>
        ${rows.length === 0 && html`<tr><td colspan="9">No slices: every GPU is free.</td></tr>`}
        ${rows.map(({ n, g, s }) => html`<tr>
          <td>${n.name}</td><td>${g.index}</td><td>${g.mode}</td>
          <td>${s.mig_profile ? s.mig_profile : `${s.blocks} blocks @${s.start}`}</td>
          <td>${s.kind === 'other' ? 'another project' : s.kind === 'job' ? html`<a href=${`#/jobs/${encodeURIComponent(s.id)}`}>${s.name || s.id}</a>` : `${s.kind} ${s.name || s.id}`}</td>
          <td>${dash(s.project)}</td><td>${dash(s.user)}</td>
          <td>${fmtMiB(s.vram_used_mib)} / ${fmtMiB(s.vram_mib)}</td><td>${fmtPct(s.util_pct)}</td>
        </tr>`)}
      </tbody>
    </table></div>
  </section>`;
}
