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
//
// At scale (a hundred nodes, ~800 GPUs) the page stays fast by drawing
// only what is near the viewport: every node is listed with a compact
// text summary (GPUs, free %, GPUs with free blocks, a meter), but its
// GPU bars are drawn only once the node comes within a screen of the
// viewport (one shared IntersectionObserver); until then a placeholder
// of the same height keeps the scroll position honest.  Filters (node
// name, project, free capacity only) narrow the nodes and GPUs shown; the
// slice table is filtered alike and shows its first rows with a button
// for the rest.
import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
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

// One IntersectionObserver for every node: a node's callback runs once,
// when it first comes within a screen of the viewport.
let io = null;
const pending = new Map();
function whenNear(el, cb) {
  if (typeof IntersectionObserver === 'undefined') {
    cb();
    return () => {};
  }
  if (!io)
    io = new IntersectionObserver(
      (entries) => {
        for (const e of entries) {
          if (!e.isIntersecting) continue;
          const f = pending.get(e.target);
          pending.delete(e.target);
          io.unobserve(e.target);
          if (f) f();
        }
      },
      { rootMargin: '100% 0px' },
    );
  pending.set(el, cb);
  io.observe(el);
  return () => {
    pending.delete(el);
    io.unobserve(el);
  };
}

// A node: its header and compact summary always; its GPU bars once near
// the viewport (see whenNear).
function Node({ n, gpus, onSel }) {
  const ref = useRef(null);
  const [near, setNear] = useState(false);
  useEffect(() => (near || !ref.current ? undefined : whenNear(ref.current, () => setNear(true))), [near]);
  const all = n.gpus || [];
  const free = all.map((g) => freePct(g, layout(g)));
  const avg = all.length ? Math.round(free.reduce((a, b) => a + b, 0) / all.length) : 0;
  const withFree = free.filter((f) => f > 0).length;
  const sum = `${all.length} GPU${all.length === 1 ? '' : 's'}, ${avg}% free, ${withFree} with free blocks`;
  return html`<article class="node" ref=${ref} data-node=${n.name} data-drawn=${near ? 'yes' : 'no'} aria-labelledby=${`node-${n.name}`}>
    <h2 id=${`node-${n.name}`}>${n.name} <span class=${`state ${n.state}`}>${n.state}</span>${n.cluster && n.cluster !== 'default' ? html` <span class="badge">${n.cluster}</span>` : ''}
      <span class="node-sum" data-testid="node-sum">${sum}</span>
      <meter min="0" max="100" value=${avg} aria-label=${`${n.name}: ${avg}% free`}></meter></h2>
    ${near
      ? gpus.map((g) => html`<${Gpu} key=${g.index} node=${n} gpu=${g} onSel=${onSel} />`)
      : html`<div class="gpus-later" style=${{ height: `${gpus.length * 3.6}rem` }}><span class="sr-only">${gpus.length} GPUs, drawn when scrolled into view; every slice is in the table below.</span></div>`}
  </article>`;
}

const TABLE_ROWS = 200;

export function BlockMap({ snap }) {
  const [sel, setSel] = useState(null);
  const [q, setQ] = useState('');
  const [proj, setProj] = useState('');
  const [freeOnly, setFreeOnly] = useState(false);
  const [allRows, setAllRows] = useState(false);
  if (!snap) return html`<section><h1 tabindex="-1">Block map</h1><p role="status">Waiting for the first snapshot…</p></section>`;
  const nodes = snap.nodes || [];
  let gpus = 0;
  let freeSum = 0;
  const projSet = new Set();
  const shown = [];
  const rows = [];
  const needle = q.trim().toLowerCase();
  for (const n of nodes) {
    const keep = [];
    for (const g of n.gpus || []) {
      gpus++;
      const placed = layout(g);
      const free = freePct(g, placed);
      freeSum += free;
      for (const p of placed) if (p.s.project) projSet.add(p.s.project);
      if (needle && !n.name.toLowerCase().includes(needle)) continue;
      if (freeOnly && free <= 0) continue;
      if (proj && !placed.some((p) => p.s.project === proj)) continue;
      keep.push(g);
      for (const p of placed) if (!proj || p.s.project === proj) rows.push({ n, g, s: p.s });
    }
    if (keep.length) shown.push({ n, gpus: keep });
  }
  const projects = [...projSet].sort();
  const filtered = needle || proj || freeOnly;
  const tableRows = allRows ? rows : rows.slice(0, TABLE_ROWS);
  return html`<section class="blockmap">
    <h1 tabindex="-1">Block map</h1>
    <p class="summary" data-testid="map-summary">${nodes.length} node${nodes.length === 1 ? '' : 's'}, ${gpus} GPU${gpus === 1 ? '' : 's'}, <strong>${gpus ? Math.round(freeSum / gpus) : 0}% free</strong> overall.</p>
    <form class="filters" role="search" aria-label="Filter the block map" onSubmit=${(e) => e.preventDefault()}>
      <label for="map-node">Node</label>
      <input id="map-node" type="search" value=${q} placeholder="name contains…" onInput=${(e) => setQ(e.currentTarget.value)} />
      <label for="map-project">Project</label>
      <select id="map-project" value=${proj} onChange=${(e) => setProj(e.currentTarget.value)}>
        <option value="">all projects</option>
        ${projects.map((p) => html`<option value=${p}>${p}</option>`)}
      </select>
      <label class="check"><input id="map-free" type="checkbox" checked=${freeOnly} onChange=${(e) => setFreeOnly(e.currentTarget.checked)} /> only GPUs with free capacity</label>
    </form>
    <p class="filter-count" role="status" data-testid="map-shown">${filtered ? `Showing ${shown.reduce((a, x) => a + x.gpus.length, 0)} of ${gpus} GPUs on ${shown.length} of ${nodes.length} nodes.` : ''}</p>
    ${projects.length > 0 && html`<ul class="legend" aria-label="Projects">
      ${projects.map((p) => html`<li><span class="swatch" style=${{ background: projectColor(p) }}></span>${p}</li>`)}
      <li><span class="swatch other"></span>other projects</li><li><span class="swatch free"></span>free</li>
    </ul>`}
    <div class="details" aria-live="polite"><${Details} sel=${sel} /></div>
    ${shown.length === 0 && html`<p>No GPU matches the filters.</p>`}
    ${shown.map(({ n, gpus: gs }) => html`<${Node} key=${n.name} n=${n} gpus=${gs} onSel=${setSel} />`)}
    <h2>All slices</h2>
    <div class="table-wrap"><table>
      <caption class="sr-only">Every slice on every GPU${filtered ? ' that matches the filters' : ''}</caption>
      <thead><tr><th scope="col">Node</th><th scope="col">GPU</th><th scope="col">Mode</th><th scope="col">Size</th><th scope="col">Workload</th><th scope="col">Project</th><th scope="col">User</th><th scope="col">VRAM used</th><th scope="col">Compute</th></tr></thead>
      <tbody>
        ${rows.length === 0 && html`<tr><td colspan="9">${filtered ? 'No slices on the GPUs shown.' : 'No slices: every GPU is free.'}</td></tr>`}
        ${tableRows.map(({ n, g, s }) => html`<tr>
          <td>${n.name}</td><td>${g.index}</td><td>${g.mode}</td>
          <td>${s.mig_profile ? s.mig_profile : `${s.blocks} blocks @${s.start}`}</td>
          <td>${s.kind === 'other' ? 'another project' : s.kind === 'job' ? html`<a href=${`#/jobs/${encodeURIComponent(s.id)}`}>${s.name || s.id}</a>` : `${s.kind} ${s.name || s.id}`}</td>
          <td>${dash(s.project)}</td><td>${dash(s.user)}</td>
          <td>${fmtMiB(s.vram_used_mib)} / ${fmtMiB(s.vram_mib)}</td><td>${fmtPct(s.util_pct)}</td>
        </tr>`)}
      </tbody>
    </table></div>
    ${rows.length > tableRows.length && html`<p><button type="button" class="secondary" onClick=${() => setAllRows(true)}>Show all ${rows.length} slices</button> (the first ${tableRows.length} are listed)</p>`}
  </section>`;
}
