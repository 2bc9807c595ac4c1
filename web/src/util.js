// util.js - small helpers the pages share: formatting and project colours.
import { html } from 'htm/preact';

// Slice colours, one per project by a hash of its name.  Each carries
// white text at a contrast of at least 4.5:1 (WCAG AA); "other" (another
// tenant's slice) is a neutral grey, free capacity is drawn light with a
// dark label, so the two are never confused.
const PALETTE = [
  '#0b5cad', '#1a7f37', '#8250df', '#a3480a', '#a40e26',
  '#0a6b6b', '#6e3f9e', '#7a5300', '#3b5b92', '#b3245f',
];

export function projectColor(name) {
  if (!name) return '#59636e';
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 16777619) >>> 0;
  }
  return PALETTE[h % PALETTE.length];
}

export function fmtTime(s) {
  if (!s) return '—';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return String(s);
  return d.toLocaleString();
}

export function fmtMiB(m) {
  if (m === null || m === undefined) return '—';
  if (m >= 1024) return `${(m / 1024).toFixed(1)} GiB`;
  return `${m} MiB`;
}

export function fmtPct(p) {
  return p === null || p === undefined ? '—' : `${p}%`;
}

export const dash = (v) => (v === null || v === undefined || v === '' ? '—' : String(v));

export function JobLink({ id, name }) {
  if (!id) return html`<span>${dash(name)}</span>`;
  return html`<a href=${`#/jobs/${encodeURIComponent(id)}`}>${name || id}</a>`;
}

// A status line for actions: role=status so screen readers hear it.
export function Notice({ msg }) {
  if (!msg) return null;
  return html`<p class=${msg.error ? 'notice error' : 'notice'} role=${msg.error ? 'alert' : 'status'}>${msg.text}</p>`;
}
