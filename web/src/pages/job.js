// job.js - one job's page: its document (GET /v1/jobs/{id}), its six
// stage decisions (GET .../decisions), its artifacts (GET .../artifacts,
// each a link to GET .../artifact?path=), cancel (POST .../cancel), and
// its live log from GET .../events (EventSource: "job" when the document
// changes, "log" per output chunk with an id to resume from, "end" once
// the job is over and all of its output was sent: then the stream is
// closed, else EventSource would open it again).
import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { get, post, seg } from '../api.js';
import { Notice, dash, fmtTime } from '../util.js';

const FINAL = new Set(['succeeded', 'failed', 'cancelled', 'canceled', 'lost', 'preempted']);
const STAGES = ['auth', 'quota', 'queue', 'admission', 'cluster', 'slice'];

function decodeChunk(c) {
  if (c.data !== undefined) return c.data;
  if (c.data_base64) {
    try {
      return new TextDecoder().decode(Uint8Array.from(atob(c.data_base64), (ch) => ch.charCodeAt(0)));
    } catch {
      return '';
    }
  }
  return '';
}

export function JobPage({ id }) {
  const [job, setJob] = useState(null);
  const [err, setErr] = useState(null);
  const [decisions, setDecisions] = useState(null);
  const [artifacts, setArtifacts] = useState(null);
  const [log, setLog] = useState([]);
  const [streaming, setStreaming] = useState(false);
  const [msg, setMsg] = useState(null);
  const logRef = useRef(null);
  const p = `/v1/jobs/${seg(id)}`;

  const loadSide = () => {
    get(`${p}/decisions`).then((d) => setDecisions(d.items || [])).catch(() => setDecisions([]));
    get(`${p}/artifacts`).then((d) => setArtifacts(d.items || [])).catch(() => setArtifacts([]));
  };

  useEffect(() => {
    setJob(null);
    setLog([]);
    setErr(null);
    get(p).then(setJob).catch((e) => setErr(e.message));
    loadSide();
    const es = new EventSource(`${p}/events`, { withCredentials: true });
    setStreaming(true);
    es.addEventListener('job', (ev) => setJob(JSON.parse(ev.data)));
    es.addEventListener('log', (ev) => {
      const c = JSON.parse(ev.data);
      setLog((l) => [...l, c]);
    });
    es.addEventListener('end', (ev) => {
      setJob(JSON.parse(ev.data));
      es.close();
      setStreaming(false);
      loadSide();
    });
    return () => es.close();
  }, [id]);

  useEffect(() => {
    if (logRef.current) logRef.current.scrollTop = logRef.current.scrollHeight;
  }, [log]);

  const cancel = async () => {
    setMsg(null);
    try {
      await post(`${p}/cancel`);
      setMsg({ text: 'Cancel requested.' });
    } catch (e) {
      setMsg({ text: e.message, error: true });
    }
  };

  if (err) return html`<section><h1 tabindex="-1">Job ${id}</h1><p class="notice error" role="alert">${err}</p></section>`;
  if (!job) return html`<section><h1 tabindex="-1">Job ${id}</h1><p role="status">Loading…</p></section>`;
  const st = job.status || {};
  const pl = job.placement || {};
  const over = FINAL.has(job.state);
  const byStage = new Map();
  for (const d of decisions || []) byStage.set(d.stage, d);
  return html`<section class="job" data-state=${job.state}>
    <h1 tabindex="-1">Job <code>${job.id}</code></h1>
    <p><span class=${`state ${job.state}`} data-testid="job-state">${job.state}</span>
      ${job.exit_code !== null && job.exit_code !== undefined && over ? html` exit code ${job.exit_code}` : ''}
      ${!over && html` <button type="button" class="danger" onClick=${cancel}>Cancel job</button>`}</p>
    <${Notice} msg=${msg} />
    <dl class="facts">
      <dt>Command</dt><dd><code>${dash(job.command)}</code></dd>
      <dt>GPU</dt><dd>${dash(job.gpu || job.profile)}</dd>
      <dt>Priority</dt><dd>${dash(job.priority)}</dd>
      <dt>Node</dt><dd>${dash(pl.node)}</dd>
      <dt>Reason</dt><dd>${dash(st.reason || pl.reason_text)}</dd>
      <dt>Estimated start</dt><dd>${fmtTime(st.estimated_start)}</dd>
      <dt>Submitted</dt><dd>${fmtTime(job.created_at)}</dd>
      <dt>Updated</dt><dd>${fmtTime(job.updated_at)}</dd>
    </dl>
    <h2>Decisions</h2>
    ${decisions === null ? html`<p role="status">Loading…</p>` : html`<ol class="stages">
      ${STAGES.map((s) => {
        const d = byStage.get(s);
        return html`<li class=${d ? 'done' : 'todo'}><strong>${s}</strong>: ${d ? html`${d.decision} <small>(${d.actor}, ${fmtTime(d.time)})</small>` : 'not decided yet'}</li>`;
      })}
    </ol>`}
    <h2 id="log-h">Log ${streaming ? html`<small class="live live">live</small>` : ''}</h2>
    <pre class="log" ref=${logRef} tabindex="0" role="log" aria-labelledby="log-h" data-testid="job-log">${log.length === 0 ? (over ? '(no output)' : '(waiting for output)') : log.map((c) => html`<span class=${c.stream === 'stderr' ? 'stderr' : ''}>${decodeChunk(c)}</span>`)}</pre>
    <h2>Artifacts</h2>
    ${artifacts === null ? html`<p role="status">Loading…</p>` : artifacts.length === 0 ? html`<p>No artifacts.</p>` : html`<ul>
      ${artifacts.map((a) => html`<li><a href=${`${p}/artifact?path=${encodeURIComponent(a.path)}`} download>${a.path}</a> (${a.size} bytes)</li>`)}
    </ul>`}
  </section>`;
}
