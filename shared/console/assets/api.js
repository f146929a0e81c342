// The console's client of /api/fleet. The operator token lives in
// sessionStorage (gone when the tab closes) and travels only in the
// Authorization header: never in a URL, never in a log line.

const TOKEN_KEY = 'fleet.console.token';
const PRODUCT_KEY = 'fleet.console.product';

export const session = {
  get token() { return sessionStorage.getItem(TOKEN_KEY) || ''; },
  set token(v) { v ? sessionStorage.setItem(TOKEN_KEY, v) : sessionStorage.removeItem(TOKEN_KEY); },
  get product() { return sessionStorage.getItem(PRODUCT_KEY) || ''; },
  set product(v) { v ? sessionStorage.setItem(PRODUCT_KEY, v) : sessionStorage.removeItem(PRODUCT_KEY); },
};

// What each error code means to a person: the lead of the sentence a
// failed call shows.
const LEADS = {
  invalid_argument: 'Not accepted', too_large: 'Too large', not_found: 'Not found', conflict: 'Conflict',
  fenced: 'Stale lease', unauthenticated: 'Not signed in', forbidden: 'Not allowed', throttled: 'Too many requests',
  unavailable: 'Unavailable', repo_not_owned: 'Refused', budget_exceeded: 'Refused', paused: 'Refused',
};

// sentence makes one sentence of an error: its lead, the field at fault
// and the server's message, capitalised and closed with a full stop.
function sentence(code, message, field) {
  let text = String(message || '').trim() || 'the request failed';
  if (field) text = field + ': ' + text;
  text = (LEADS[code] || 'Failed') + ': ' + text;
  return /[.!?)]$/.test(text) ? text : text + '.';
}

// ApiError carries the API's error shape ({error: {code, message, field}})
// as a sentence for people (no method or route path: they mean nothing to
// an operator reading the page); the call is kept apart for the console's
// log.
export class ApiError extends Error {
  constructor(method, path, status, code, message, field) {
    super(sentence(code, message, field));
    this.status = status; this.code = code; this.field = field; this.call = `${method} ${path}`;
  }
}

// api calls one route below /api/fleet. opts: body (object -> JSON, string
// -> as is), ctype, product (overrides the session's; '' sends none).
export async function api(method, path, opts = {}) {
  const headers = { 'Accept': 'application/json' };
  if (session.token) headers['Authorization'] = 'Bearer ' + session.token;
  const product = opts.product !== undefined ? opts.product : session.product;
  if (product) headers['X-Product-Id'] = product;
  let body;
  if (opts.body !== undefined) {
    body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
    headers['Content-Type'] = opts.ctype || 'application/json';
  }
  let resp;
  try {
    resp = await fetch('/api/fleet' + path, { method, headers, body, cache: 'no-store' });
  } catch (e) {
    throw new ApiError(method, path, 0, 'unavailable', 'the coordinator cannot be reached');
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!resp.ok) {
    const e = data && data.error;
    if (e && e.code) throw new ApiError(method, path, resp.status, e.code, e.message || '', e.field || '');
    throw new ApiError(method, path, resp.status, resp.status >= 500 ? 'unavailable' : 'error', resp.statusText || 'HTTP ' + resp.status);
  }
  return { status: resp.status, data };
}

export async function get(path, opts) { return (await api('GET', path, opts)).data; }

// Routes the server serves, from its public OpenAPI document: pages for
// features whose routes have not landed stay hidden.
let routes = null;
export async function loadRoutes() {
  if (routes) return routes;
  try {
    const r = await fetch('/api/openapi.json', { cache: 'no-store' });
    const doc = await r.json();
    routes = new Set(Object.keys(doc.paths || {}));
  } catch {
    routes = new Set();
  }
  return routes;
}
// The document's paths are below its server URL, /api.
export function has(path) { return !!routes && routes.has('/fleet' + path); }

// streamEvents reads a text/event-stream with fetch (EventSource cannot send
// an Authorization header, and the token must not go in the URL). It
// reconnects with Last-Event-ID after a lost stream and reports its state:
// onState('live' | 'reconnecting', detail). Returns a stop function.
export function streamEvents(path, onEvent, onState) {
  let stopped = false, lastId = '', ctrl = null, delay = 1000;
  async function loop() {
    while (!stopped) {
      ctrl = new AbortController();
      try {
        const headers = { 'Accept': 'text/event-stream', 'Authorization': 'Bearer ' + session.token };
        if (session.product) headers['X-Product-Id'] = session.product;
        if (lastId) headers['Last-Event-ID'] = lastId;
        const resp = await fetch('/api/fleet' + path, { headers, signal: ctrl.signal, cache: 'no-store' });
        if (!resp.ok || !resp.body) throw new Error('stream answered ' + resp.status);
        onState('live', '');
        delay = 1000;
        const reader = resp.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i); buf = buf.slice(i + 2);
            const ev = { id: '', type: 'message', data: '' };
            for (const line of block.split('\n')) {
              if (line.startsWith(':')) continue;
              const c = line.indexOf(':');
              const k = c < 0 ? line : line.slice(0, c);
              const v = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
              if (k === 'id') ev.id = v; else if (k === 'event') ev.type = v; else if (k === 'data') ev.data += (ev.data ? '\n' : '') + v;
            }
            if (ev.id) lastId = ev.id;
            // A bare id only moves the resume point.
            if (ev.data) onEvent(ev);
          }
        }
        if (!stopped) onState('reconnecting', 'the stream ended');
      } catch (e) {
        if (stopped) return;
        onState('reconnecting', e.message);
      }
      await new Promise(r => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15000);
    }
  }
  loop();
  return () => { stopped = true; if (ctrl) ctrl.abort(); };
}

// fetchBlob reads a route's bytes with the bearer header (a plain link
// could not send it, and the token must not go in the URL): the caller
// saves them through a blob: URL.
export async function fetchBlob(path) {
  const headers = { 'Authorization': 'Bearer ' + session.token };
  if (session.product) headers['X-Product-Id'] = session.product;
  let resp;
  try {
    resp = await fetch('/api/fleet' + path, { headers, cache: 'no-store' });
  } catch (e) {
    throw new ApiError('GET', path, 0, 'unavailable', 'the coordinator cannot be reached');
  }
  if (!resp.ok) {
    let e = null;
    try { e = (await resp.json()).error; } catch { e = null; }
    throw new ApiError('GET', path, resp.status, (e && e.code) || 'error', (e && e.message) || resp.statusText, (e && e.field) || '');
  }
  return resp.blob();
}
