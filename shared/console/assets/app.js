// The fleet console: a single page over /api/fleet. Hash routes
// (#/fleet, #/jobs, #/job/<id>, #/new, #/alerts, #/profiles, #/profile/<name>, #/budgets) keep the token out of
// every URL; views re-fetch in place on every live tick, so the page never
// reloads, and a failed call shows its error instead of an empty page.
import { api, get, session, loadRoutes, has, streamEvents, fetchBlob } from './api.js';

const PRIORITIES = ['low', 'normal', 'high', 'critical'];
const POLL_MS = 2000;
const PAGE = 25;

// The stage machine is the server's (stages.json beside this file, built
// from package fleet), so a stage or action added there shows here as is:
// { stages: [...] in lifecycle order, terminal: [...], actions: [{ name,
// from: [stages it applies in] }] in the order to offer them }. Read once;
// a failed read is tried again by the next view that needs it.
let machineP = null;
function stageMachine() {
  machineP ||= fetch(new URL('stages.json', import.meta.url), { cache: 'no-cache' }).then(r => {
    if (!r.ok) throw new Error(`stage machine (stages.json): HTTP ${r.status}`);
    return r.json();
  }).catch(e => { machineP = null; throw e; });
  return machineP;
}

const $ = sel => document.querySelector(sel);
const main = $('#main');

// h builds DOM nodes; text is always set as text, never parsed as HTML.
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
// fill replaces el's children, skipping absent ones (replaceChildren itself
// would show a null as the text "null").
const fill = (el, ...kids) => el.replaceChildren(...kids.flat().filter(k => k !== null && k !== undefined && k !== false));
const badge = (cls, text) => h('span', { class: 'badge ' + cls }, text);
const stageBadge = s => badge('s-' + s, s.replace('_', ' '));
const jobLink = id => h('a', { href: '#/job/' + encodeURIComponent(id), class: 'mono' }, id);
const errorBox = e => h('p', { class: 'error', role: 'alert' }, String(e.message || e));
const dash = v => (v === undefined || v === null || v === '' ? '–' : v);
const list = a => (a && a.length ? a.join(', ') : '–');
// unchanged says whether el already shows data, and records data as shown
// otherwise. A refresh comes with every event of the product: a region
// rebuilt with the same content replaces its buttons and links, and a press
// on one that is replaced before its release loses the click (the console
// test's clicks once failed so). Ages in <time> count on by themselves.
const shown = new WeakMap();
function unchanged(el, data) {
  const key = JSON.stringify(data);
  if (shown.get(el) === key) return true;
  shown.set(el, key);
  return false;
}

function ago(iso) {
  if (!iso) return '–';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + 's ago';
  if (s < 3600) return Math.floor(s / 60) + 'm ago';
  if (s < 172800) return Math.floor(s / 3600) + 'h ago';
  return Math.floor(s / 86400) + 'd ago';
}
const time = iso => h('time', { datetime: iso, title: iso }, ago(iso));
// Ages count on between refreshes, and while the coordinator is away: a
// heartbeat 5 s old is 20 s old 15 s later whether or not a refresh came.
setInterval(() => {
  for (const t of document.querySelectorAll('main time[datetime]')) {
    const text = ago(t.getAttribute('datetime'));
    if (t.textContent !== text) t.textContent = text;
  }
}, 1000);

function table(headers, rows, empty) {
  if (!rows.length) return h('p', { class: 'note' }, empty);
  return h('table', {},
    h('thead', {}, h('tr', {}, headers.map(x => h('th', { scope: 'col', class: x.num ? 'num' : null }, x.label || x)))),
    h('tbody', {}, rows));
}

// ---- live updates -----------------------------------------------------

// The current view's refresh runs on every tick (polling) and on every
// event of the product's stream once GET /fleet/events/stream exists.
const live = {
  refresh: null, timer: null, stopStream: null, busy: false, pending: false, mode: 'polling',
  setState(text, ok) {
    const el = $('#live');
    el.textContent = text;
    el.className = 'live ' + (ok ? 'ok' : 'bad');
  },
  async tick() {
    if (!this.refresh) return;
    if (this.busy) { this.pending = true; return; }
    this.busy = true;
    try {
      await this.refresh();
      banner('');
      if (this.mode === 'polling') this.setState('live · polling', true);
    } catch (e) {
      banner('Refresh failed: ' + e.message + ' (retrying)');
      if (this.mode === 'polling') this.setState('reconnecting…', false);
    } finally {
      this.busy = false;
      if (this.pending) { this.pending = false; this.tick(); }
    }
  },
  start() {
    this.stop();
    if (has('/events/stream')) {
      this.mode = 'stream';
      this.setState('connecting…', false);
      let debounce = null;
      this.stopStream = streamEvents('/events/stream', () => {
        clearTimeout(debounce);
        debounce = setTimeout(() => this.tick(), 150);
      }, (state, detail) => {
        if (state === 'live') this.setState('live · stream', true);
        else this.setState('reconnecting…' + (detail ? ' (' + detail + ')' : ''), false);
      });
      // A slow poll as a safety net: a missed event heals within 15 s.
      this.timer = setInterval(() => this.tick(), 15000);
    } else {
      this.mode = 'polling';
      this.setState('live · polling', true);
      this.timer = setInterval(() => this.tick(), POLL_MS);
    }
  },
  stop() {
    clearInterval(this.timer); this.timer = null;
    if (this.stopStream) { this.stopStream(); this.stopStream = null; }
  },
};

function banner(text) {
  const b = $('#banner');
  b.textContent = text;
  b.hidden = !text;
}

// ---- routing ----------------------------------------------------------

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, qs] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { name: parts[0] || 'fleet', arg: parts[1], query: new URLSearchParams(qs || '') };
}

const views = { fleet: fleetView, jobs: jobsView, job: jobView, new: newJobView, alerts: alertsView, profiles: profilesView, profile: profileView, budgets: budgetsView };
// Detail pages light up their list's nav entry.
const SECTION = { job: 'jobs', profile: 'profiles' };

let routeSeq = 0;
// notice is said once, on the next page shown (the page's own banner
// clears otherwise).
let notice = '';
// route renders the page the hash names; quiet (a live retry of a page
// that failed) keeps the current content until there is something new.
async function route(quiet) {
  const seq = ++routeSeq;
  live.refresh = null;
  if (!session.token) { signIn(); return; }
  $('#nav').hidden = false;
  $('#session').hidden = false;
  const r = parseHash();
  const view = views[r.name] || fleetView;
  for (const a of document.querySelectorAll('#nav a')) {
    a.toggleAttribute('aria-current', a.dataset.section === (SECTION[r.name] || r.name));
    if (a.hasAttribute('aria-current')) a.setAttribute('aria-current', 'page');
  }
  if (quiet !== true) {
    banner(notice);
    notice = '';
    main.replaceChildren(h('p', { class: 'note' }, 'Loading…'));
  }
  let refresh;
  try {
    refresh = await view(r);
  } catch (e) {
    if (seq !== routeSeq) return;
    if (e.status === 401) { signOut('Your token was refused: ' + e.message); return; }
    main.replaceChildren(h('h2', {}, 'Something went wrong'), errorBox(e),
      h('button', { type: 'button', onclick: route }, 'Retry'));
    live.refresh = () => route(true);
    return;
  }
  if (seq !== routeSeq) return;
  live.refresh = refresh || null;
}

// ---- session ----------------------------------------------------------

function signIn(message) {
  live.stop();
  $('#nav').hidden = true;
  $('#session').hidden = true;
  const token = h('input', { id: 'token', type: 'password', autocomplete: 'off', required: true, spellcheck: 'false' });
  const product = h('input', { id: 'signin-product', type: 'text', autocomplete: 'off', value: session.product, placeholder: 'optional: the first one the token sees' });
  const status = h('div', { role: 'alert' }, message ? errorBox({ message }) : null);
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h('form', { class: 'card signin', 'aria-labelledby': 'signin-title' },
    h('h2', { id: 'signin-title' }, 'Sign in'),
    h('p', { class: 'note' }, 'The operator token stays in this tab (sessionStorage) and is sent only as an Authorization header.'),
    h('div', { class: 'row' }, h('label', { for: 'token' }, 'Operator token'), token),
    h('div', { class: 'row' }, h('label', { for: 'signin-product' }, 'Product'), product),
    status, submit);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    submit.disabled = true;
    session.token = token.value.trim();
    session.product = product.value.trim();
    try {
      // Any operator route proves the token; the products it sees are
      // the ones to pick from, and one typed that does not exist is said
      // to be unknown rather than shown as an empty product.
      const known = await visibleProducts();
      if (session.product && !known.includes(session.product) && !(await productExists(session.product))) {
        throw new Error(`Product ${session.product} is unknown: ` +
          (known.length ? `this token sees ${known.join(', ')}.` : 'this token sees no product yet.'));
      }
      token.value = '';
      await start();
    } catch (e) {
      session.token = '';
      status.replaceChildren(errorBox(e));
      submit.disabled = false;
    }
  });
  main.replaceChildren(form);
  token.focus();
}

function signOut(message) {
  session.token = '';
  live.refresh = null;
  history.replaceState(null, '', location.pathname + '#/fleet');
  signIn(message);
}

// visibleProducts lists the products the token can see: owners of repos
// and products the factories serve, sorted.
async function visibleProducts() {
  const names = new Set();
  const [repos, factories] = await Promise.all([get('/repos', { product: '' }), get('/factories', { product: '' })]);
  for (const r of repos.items || []) for (const p of r.products || []) names.add(p);
  for (const f of factories.items || []) for (const p of f.products || []) names.add(p);
  return [...names].sort();
}

// productExists asks the coordinator about a product no repo or factory
// names yet (declared, but empty).
async function productExists(p) {
  try {
    await get('/products/' + encodeURIComponent(p), { product: '' });
    return true;
  } catch (e) {
    if (e.status === 404) return false;
    throw e;
  }
}

// refreshProducts fills the product picker with the products the token
// sees; a remembered product that is gone is said to be unknown, and the
// first one is picked instead.
async function refreshProducts() {
  const sel = $('#product');
  const names = await visibleProducts();
  if (session.product && !names.includes(session.product)) {
    if (await productExists(session.product)) names.push(session.product);
    else {
      notice = `Product ${session.product} is unknown` + (names.length ? `: showing ${names[0]}.` : '.');
      session.product = '';
    }
  }
  if (!session.product && names.length) session.product = names[0];
  sel.replaceChildren(...names.map(n => h('option', { value: n, selected: n === session.product }, n)));
  if (!names.length) sel.append(h('option', { value: '' }, '(no products yet)'));
}

async function start() {
  await loadRoutes();
  // Sections whose routes this server does not serve stay out of the nav.
  for (const a of document.querySelectorAll('#nav a[data-route]')) a.hidden = !has(a.dataset.route);
  await refreshProducts();
  live.start();
  if (!location.hash || location.hash === '#' || location.hash === '#/') location.hash = '#/fleet';
  else route();
}

// ---- views ------------------------------------------------------------

function needProduct() {
  if (!session.product) throw new Error('Pick a product first: no product is selected (x-product-id).');
}

// drainingBadge marks a factory an operator drains (no new assignments;
// POST /fleet/factories/{id}/drain).
const drainingBadge = f => (f.draining ? [' ', badge('h-draining', 'draining')] : null);

// coolingBadges name each engine the factory's account is rate-limited on,
// until when (heartbeat cooldowns; jobs needing that engine go elsewhere).
const coolingBadges = f => Object.entries(f.cooldowns || {})
  .filter(([, until]) => new Date(until) > new Date())
  .sort(([a], [b]) => a.localeCompare(b))
  .map(([c, until]) => [' ', h('span', { class: 'badge h-cooling', title: `rate limited: no ${c} job until ${until}` },
    `cooling ${c.replace(/^engine:/, '')} until ${new Date(until).toLocaleTimeString()}`)]);

// Fleet map: every factory with health, seats, load, capabilities, repos,
// last heartbeat, kind, and the jobs it runs.
async function fleetView() {
  const region = h('div');
  main.replaceChildren(h('h2', {}, 'Fleet map'), region);
  async function refresh() {
    const [fs, metrics, running] = await Promise.all([
      get('/factories'), get('/metrics'), runningJobs()]);
    const byHolder = {};
    for (const j of running) (byHolder[j.holderFactoryId] ||= []).push(j);
    const f = metrics.factories || {};
    // Cooldowns end by the clock, so the ones still running are part of what is shown.
    const cooling = (fs.items || []).map(x => Object.values(x.cooldowns || {}).filter(until => new Date(until) > new Date()));
    const shownJobs = running.map(j => [j.id, j.stage, j.title, j.holderFactoryId]);
    if (unchanged(region, [fs.items, f, (metrics.alerts || []).length, shownJobs, cooling])) return;
    const stats = h('div', { class: 'stats' },
      stat('Factories', f.total), stat('Seats used', `${f.load || 0} / ${f.seats || 0}`),
      stat('Running jobs', running.length), stat('Alerts', (metrics.alerts || []).length));
    const rows = (fs.items || []).map(x => h('tr', {},
      h('th', { scope: 'row' }, h('span', { class: 'mono' }, x.id)),
      h('td', {}, x.kind),
      h('td', {}, badge('h-' + x.health, x.health), drainingBadge(x), coolingBadges(x)),
      h('td', {}, h('span', { class: 'seats', role: 'img', 'aria-label': `${x.load} of ${x.seatLimit} seats used` },
        h('span')), ` ${x.load}/${x.seatLimit}`),
      h('td', {}, list(x.capabilities)),
      h('td', {}, list(x.repos)),
      h('td', {}, time(x.lastHeartbeatAt)),
      h('td', {}, (byHolder[x.id] || []).length ? h('ul', { class: 'timeline' }, byHolder[x.id].map(j =>
        h('li', {}, jobLink(j.id), ' ', stageBadge(j.stage), ' ', j.title))) : '–')));
    // Seat bars are sized through the CSSOM: the policy forbids inline style attributes.
    region.replaceChildren(stats, h('h3', {}, 'Factories'),
      table(['Factory', 'Kind', 'Health', 'Seats', 'Capabilities', 'Repos', 'Last heartbeat', 'Running jobs'], rows,
        'No factory serves this product yet. Enroll one (fleetctl factories enroll) and start it.'));
    region.querySelectorAll('.seats').forEach((el, i) => {
      const x = fs.items[i];
      el.firstChild.style.width = (x.seatLimit ? Math.min(100, 100 * x.load / x.seatLimit) : 0) + '%';
    });
  }
  needProduct();
  await refresh();
  return refresh;
}
const stat = (label, value) => h('div', { class: 'card' }, h('div', { class: 'note' }, label), h('div', { class: 'stat' }, dash(value)));

async function runningJobs() {
  const [a, b] = await Promise.all([get('/jobs?stage=assigned&limit=500'), get('/jobs?stage=building&limit=500')]);
  return [...(a.items || []), ...(b.items || [])];
}

// Jobs by stage, filtered by repo, priority and text, a page at a time.
async function jobsView(r) {
  needProduct();
  const state = { stage: r.query.get('stage') || '', repo: '', priority: '', text: '', cursors: [''], page: 0, next: '' };
  const [repos, metrics, { stages }] = await Promise.all([get('/repos'), get('/metrics'), stageMachine()]);
  const tabs = h('div', { class: 'tabs', role: 'group', 'aria-label': 'Stage' });
  const repoSel = h('select', { id: 'f-repo' }, h('option', { value: '' }, 'any'),
    (repos.items || []).map(x => h('option', { value: x.repo }, x.repo)));
  const prioSel = h('select', { id: 'f-priority' }, h('option', { value: '' }, 'any'), PRIORITIES.map(p => h('option', { value: p }, p)));
  const text = h('input', { id: 'f-text', type: 'search', placeholder: 'title, id, body…' });
  const region = h('div', { 'aria-live': 'polite' });
  const pager = h('div', { class: 'pager' });
  function drawTabs(counts) {
    if (unchanged(tabs, [state.stage, counts])) return;
    tabs.replaceChildren(...['', ...stages].map(s => h('button', {
      type: 'button', 'aria-pressed': String(state.stage === s),
      onclick: () => { state.stage = s; state.cursors = ['']; state.page = 0; history.replaceState(null, '', '#/jobs' + (s ? '?stage=' + s : '')); refresh(); },
    }, s ? s.replace('_', ' ') : 'all', counts && counts[s] !== undefined ? ` (${counts[s]})` : '')));
  }
  drawTabs(metrics.jobs);
  const onFilter = () => { state.repo = repoSel.value; state.priority = prioSel.value; state.text = text.value.trim().toLowerCase(); state.cursors = ['']; state.page = 0; refresh(); };
  repoSel.addEventListener('change', onFilter);
  prioSel.addEventListener('change', onFilter);
  text.addEventListener('input', onFilter);
  main.replaceChildren(h('h2', {}, 'Jobs'), tabs,
    h('div', { class: 'filters' },
      h('div', {}, h('label', { for: 'f-repo' }, 'Repo'), repoSel),
      h('div', {}, h('label', { for: 'f-priority' }, 'Priority'), prioSel),
      h('div', {}, h('label', { for: 'f-text' }, 'Text'), text),
      h('a', { href: '#/new' }, 'New job…')),
    region, pager);
  const match = j => (!state.repo || j.repo === state.repo) && (!state.priority || j.priority === state.priority) &&
    (!state.text || (j.title + ' ' + j.id + ' ' + j.body + ' ' + j.repo).toLowerCase().includes(state.text));
  async function refresh() {
    // The API filters by stage; repo, priority and text filter here, page
    // after page, until a page's worth matches or the listing ends.
    const items = [];
    let cursor = state.cursors[state.page], next = '';
    for (let guard = 0; guard < 20; guard++) {
      const q = new URLSearchParams({ limit: String(PAGE) });
      if (state.stage) q.set('stage', state.stage);
      if (cursor) q.set('cursor', cursor);
      const page = await get('/jobs?' + q);
      items.push(...(page.items || []).filter(match));
      next = page.cursor || '';
      if (items.length >= PAGE || !next) break;
      cursor = next;
    }
    state.next = next;
    const rows = items.map(j => h('tr', {},
      h('td', {}, jobLink(j.id)), h('td', {}, j.title), h('td', {}, stageBadge(j.stage)), h('td', {}, j.priority),
      h('td', {}, j.repo), h('td', {}, dash(j.holderFactoryId)), h('td', { class: 'num' }, j.attempts), h('td', {}, time(j.updatedAt))));
    if (!unchanged(region, [state.stage, items.map(j => [j.id, j.title, j.stage, j.priority, j.repo, j.holderFactoryId, j.attempts, j.updatedAt])])) {
      region.replaceChildren(table(['Id', 'Title', 'Stage', 'Priority', 'Repo', 'Holder', { label: 'Attempts', num: true }, 'Updated'], rows,
        'No jobs match' + (state.stage ? ' in ' + state.stage : '') + '.'));
    }
    if (!unchanged(pager, [state.page, state.next])) pager.replaceChildren(
      h('button', { type: 'button', disabled: state.page === 0, onclick: () => { state.page--; refresh(); } }, '← Newer'),
      h('span', { class: 'note' }, 'Page ' + (state.page + 1)),
      h('button', { type: 'button', disabled: !state.next, onclick: () => { state.cursors[state.page + 1] = state.next; state.page++; refresh(); } }, 'Older →'));
    const m = await get('/metrics');
    drawTabs(m.jobs);
  }
  await refresh();
  return refresh;
}

// yamlString quotes a value for the manifest's front matter: JSON strings
// are YAML strings, so user text can never break the document.
const yamlString = s => JSON.stringify(String(s));

// New job: the repo and capability choices come from live data (the
// product's repos and what the factories serving it offer), so a job can
// only ask for what some factory has.
async function newJobView() {
  needProduct();
  const [repos, factories, profiles] = await Promise.all([
    get('/repos'), get('/factories'), has('/profiles') ? get('/profiles').catch(() => ({ items: [] })) : { items: [] }]);
  const owned = (repos.items || []).filter(r => (r.products || []).includes(session.product));
  const offered = {};
  for (const f of factories.items || []) for (const c of f.capabilities || []) (offered[c] ||= new Set()).add(f.id);
  const caps = Object.keys(offered).sort();
  const status = h('div', { role: 'status', 'aria-live': 'polite', class: 'outcome' });
  const title = h('input', { id: 'n-title', required: true, size: 60 });
  const repo = h('select', { id: 'n-repo', required: true }, owned.map(r => h('option', { value: r.repo }, r.repo + (r.factories && r.factories.length ? '' : ' (no factory has it checked out)'))));
  const prio = h('select', { id: 'n-priority' }, PRIORITIES.map(p => h('option', { value: p, selected: p === 'normal' }, p)));
  const persona = h('select', { id: 'n-persona' }, h('option', { value: '' }, 'none'), (profiles.items || []).map(p => h('option', { value: p.name }, `${p.name} (v${p.version})`)));
  const body = h('textarea', { id: 'n-body', required: true });
  const capBoxes = caps.map(c => h('label', {}, h('input', { type: 'checkbox', name: 'cap', value: c }), c,
    h('span', { class: 'note' }, ` (${offered[c].size} factor${offered[c].size === 1 ? 'y' : 'ies'})`)));
  const submit = h('button', { type: 'submit', class: 'primary', disabled: !owned.length }, 'Submit job');
  const form = h('form', { class: 'card', 'aria-labelledby': 'new-title' },
    h('h2', { id: 'new-title' }, 'New job'),
    owned.length ? null : errorBox({ message: `Product ${session.product} owns no repo yet: declare one (fleetctl products put ${session.product} --repo NAME).` }),
    h('div', { class: 'row' }, h('label', { for: 'n-title' }, 'Title'), title),
    h('div', { class: 'row' }, h('label', { for: 'n-repo' }, 'Repo'), repo),
    h('fieldset', { class: 'row' }, h('legend', {}, 'Capabilities (offered by factories serving this product)'),
      capBoxes.length ? h('div', { class: 'chips' }, capBoxes) : h('p', { class: 'note' }, 'No factory serves this product yet: the job will wait until one does.')),
    h('div', { class: 'row' }, h('label', { for: 'n-priority' }, 'Priority'), prio),
    (profiles.items || []).length ? h('div', { class: 'row' }, h('label', { for: 'n-persona' }, 'Persona'), persona) : null,
    h('div', { class: 'row' }, h('label', { for: 'n-body' }, 'Task (Markdown)'), body),
    h('div', { class: 'actions' }, submit), status);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const chosen = [...form.querySelectorAll('input[name=cap]:checked')].map(x => x.value);
    const lines = ['---', 'title: ' + yamlString(title.value), 'repo: ' + yamlString(repo.value),
      'capabilities: [' + chosen.map(yamlString).join(', ') + ']', 'priority: ' + prio.value];
    if (persona.value) lines.push('persona: ' + yamlString(persona.value));
    lines.push('---', body.value, '');
    submit.disabled = true;
    status.replaceChildren('Submitting…');
    try {
      const { data } = await api('POST', '/jobs', { body: lines.join('\n'), ctype: 'text/markdown' });
      status.replaceChildren('Submitted ', jobLink(data.id), ' — ', stageBadge(data.stage),
        ...(data.warnings || []).map(w => h('p', { class: 'error submit-warning' }, 'Warning: ' + w + '. The job waits until the fleet changes.')));
      form.reset();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    } finally {
      submit.disabled = false;
    }
  });
  main.replaceChildren(form);
  title.focus();
  return null;
}

// Job detail: fields, actions with their outcome, the explain panel, runs
// and the event timeline, all refreshed live.
async function jobView(r) {
  const id = r.arg;
  const head = h('div');
  const actions = h('div', { class: 'actions' });
  const outcome = h('div', { class: 'outcome', role: 'status', 'aria-live': 'polite', id: 'outcome' });
  const details = h('div');
  const explain = h('div');
  const runs = h('div');
  const events = h('div');
  const review = h('div', { class: 'card', id: 'review-card', hidden: true });
  const diff = h('div', { class: 'card', id: 'diff-card', hidden: true });
  const dag = h('div', { class: 'card', id: 'dag-card', hidden: true });
  const artifacts = h('div', { class: 'card', id: 'artifacts-card', hidden: true });
  const tracker = h('div', { class: 'card', id: 'tracker-card', hidden: true });
  main.replaceChildren(head, h('div', { class: 'card' }, h('h3', {}, 'Actions'), actions, outcome), review, diff, dag, tracker, liveLogPanel(id),
    h('div', { class: 'card' }, h('h3', {}, 'Details'), details),
    h('div', { class: 'card' }, h('h3', {}, 'Where it can run (explain)'), explain),
    h('div', { class: 'card' }, h('h3', {}, 'Runs'), runs), artifacts,
    h('div', { class: 'card' }, h('h3', {}, 'Timeline'), events));
  let job = null;
  async function act(action) {
    outcome.replaceChildren(`${action}…`);
    try {
      const { status, data } = await api('POST', `/jobs/${encodeURIComponent(id)}/actions/${action}`, { body: {} });
      if (status === 202) outcome.replaceChildren(`${action} requested: cancelling until the factory acknowledges (or the grace runs out).`);
      else outcome.replaceChildren(`${action}: job is now `, stageBadge(data.stage));
      await refresh();
    } catch (e) {
      outcome.replaceChildren(errorBox(e));
    }
  }
  async function refresh() {
    const p = encodeURIComponent(id);
    // The job first, then what hangs off it: read together, the events
    // could predate the job and the badge show a stage the timeline lacks.
    const [j, { actions: operatorActions, terminal }] = await Promise.all([get(`/jobs/${p}`), stageMachine()]);
    const [ev, rn, ex] = await Promise.all([get(`/jobs/${p}/events`), get(`/jobs/${p}/runs`),
      get(`/jobs/${p}/explain`).catch(e => ({ error: e }))]);
    job = j;
    // The badge and the timeline change together, before the cards below
    // fetch more: between two awaits the page once showed a stage its
    // timeline did not have yet.
    fill(events, timeline(ev.items || [], rn.items || [], j, terminal || []));
    head.replaceChildren(h('h2', {}, j.title, ' ', h('span', { id: 'job-stage' }, stageBadge(j.stage)),
      j.cancelRequested ? h('span', {}, ' ', badge('s-cancelled', 'cancelling')) : null),
    h('p', { class: 'note' }, h('span', { class: 'mono' }, j.id), ' · ', j.repo, ' · ', j.priority, ...jobCost(rn.items || [])));
    // A review-gated job leaves review through its votes only: the server
    // refuses to ship it past the gate, so the button says why instead.
    const gated = j.review && j.stage === 'review';
    const gateNote = gated ? `Held at the review gate: ${j.review.approvals || 0} of ${j.review.quorum || 1} approvals; vote below.` : null;
    if (!unchanged(actions, [operatorActions, j.stage, j.cancelRequested, gateNote])) {
      actions.replaceChildren(...operatorActions.map(({ name: a, from }) => h('button', {
        type: 'button', class: a === 'ship' ? 'primary' : (a === 'reject' || a === 'cancel' ? 'danger' : null),
        disabled: !from.includes(j.stage) || (a === 'cancel' && j.cancelRequested) || (a === 'ship' && gated), onclick: () => act(a),
        id: 'act-' + a, title: a === 'ship' && gated ? gateNote : null,
      }, a)), ...(gateNote ? [' ', h('span', { class: 'note', id: 'gate-note' }, gateNote)] : []));
    }
    details.replaceChildren(h('dl', { class: 'kv' }, ...[
      ['Stage', stageBadge(j.stage)], ['Holder', dash(j.holderFactoryId)], ['Lease epoch', j.leaseEpoch],
      ['Attempts', `${j.attempts} of ${j.maxAttempts}`], ['Capabilities', list(j.capabilities)],
      ['Persona', j.profile ? `${j.profile.name} v${j.profile.version}` : dash(j.persona)],
      ['Checkpoint', dash(j.checkpoint)], ['Deps', list(j.deps)], ['Parent', j.parentId ? jobLink(j.parentId) : '–'],
      ['Last failure', j.lastFailure ? j.lastFailure.reason : '–'], ...pullRequestRows(j),
      ['Created', time(j.createdAt)], ['Updated', time(j.updatedAt)],
    ].flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])), h('details', {}, h('summary', {}, 'Task'), h('pre', {}, j.body)),
    ...feedbackList(j));
    explain.replaceChildren(...explainPanel(ex, j, rn.items || []));
    renderReview(review, j, refresh);
    await renderTracker(tracker, j);
    if (has('/jobs/{id}/dag')) {
      const d = await get(`/jobs/${p}/dag`);
      dag.hidden = (d.nodes || []).length < 2;
      if (!dag.hidden) dag.replaceChildren(h('h3', {}, 'DAG'), dagGraph(d, j.id), ...dagTree(d, j.id));
    }
    runs.replaceChildren(runsTable(rn.items || []));
    const arts = await renderArtifacts(artifacts, j.id);
    await renderDiff(diff, j, rn.items || [], arts);
  }
  await refresh();
  return refresh;
}

// duration says how long ms is, coarser as it grows.
function duration(ms) {
  const s = Math.max(0, ms) / 1000;
  if (s < 10) return s.toFixed(1) + 's';
  if (s < 60) return Math.floor(s) + 's';
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor(s % 3600 / 60)}m`;
}
// stamp is an absolute time for a tooltip: UTC to the millisecond.
const stamp = iso => (iso ? new Date(iso).toISOString().replace('T', ' ').replace('Z', ' UTC') : '');
// runDuration is how long a run took, or has taken so far.
const runDuration = x => duration((x.endedAt ? Date.parse(x.endedAt) : Date.now()) - Date.parse(x.startedAt)) + (x.endedAt ? '' : ' so far');

// timeline lists the job's events, each with its absolute time on hover,
// and each stage change with how long the job stayed in that stage (until
// the next change, or so far when it is the current, unfinished one), then
// how long each run took.
function timeline(items, runs, j, terminal) {
  const changes = items.filter(e => e.to);
  const next = new Map(changes.map((e, i) => [e, changes[i + 1]]));
  const stayed = e => {
    const n = next.get(e);
    if (n) return duration(Date.parse(n.at) - Date.parse(e.at));
    if (e.to !== j.stage || terminal.includes(e.to)) return '';
    return duration(Date.now() - Date.parse(e.at)) + ' so far';
  };
  const at = iso => h('time', { datetime: iso, title: stamp(iso) }, ago(iso));
  return [h('ol', { class: 'timeline', id: 'timeline' }, items.map(e => {
    const d = e.to ? stayed(e) : '';
    return h('li', { 'data-to': e.to || '' },
      h('span', { class: 'mono' }, '#' + e.seq), ' ', at(e.at), ' ', h('strong', {}, e.type), ' ',
      e.to ? [e.from ? stageBadge(e.from) : '', ' → ', stageBadge(e.to)] : '', ' ',
      d ? h('span', { class: 'stage-duration', title: `in ${e.to.replace('_', ' ')} for ${d}` }, `${d} in ${e.to.replace('_', ' ')}`) : null, ' ',
      h('span', { class: 'note' }, `by ${e.actor}${e.actorId ? ' ' + e.actorId : ''}`), e.message ? ' — ' + e.message : '');
  })),
  runs.length ? h('ul', { class: 'timeline', id: 'run-durations' }, runs.map(x => h('li', { 'data-run': x.id },
    h('strong', {}, `Run ${x.id}`), ` on ${x.factoryId}: `, h('span', { class: 'run-duration' }, runDuration(x)), ` (${x.result}), `,
    h('span', { title: stamp(x.startedAt) }, 'from ', utc(x.startedAt)), x.endedAt ? h('span', { title: stamp(x.endedAt) }, ' to ', utc(x.endedAt)) : null))) : null];
}

// liveLogPanel follows the job's run log (GET …/log/stream): it follows the
// end while the reader is at the bottom and pauses when they scroll up, a
// search shows only the lines that match, ANSI escapes are stripped, and
// the text only ever goes in as text, never as HTML. The stream stops when
// the page is left or the run has ended (its end event).
function liveLogPanel(jobId) {
  const pre = h('pre', { id: 'live-log', class: 'mono', tabindex: '0', 'aria-live': 'off' });
  const state = h('span', { class: 'note', id: 'live-log-state' }, 'connecting…');
  const search = h('input', { type: 'search', id: 'live-log-search', placeholder: 'search the log', 'aria-label': 'Search the log' });
  const card = h('div', { class: 'card', id: 'live-log-card' }, h('h3', {}, 'Live output ', state), search, pre);
  if (!has('/jobs/{id}/log/stream')) { card.hidden = true; return card; }
  const MAX_CHARS = 2 << 20; // the browser keeps the last 2 MiB or so
  // CSI sequences (colours, cursor moves), OSC (titles, links) and lone ESCs.
  const ansi = /\x1b\[[0-9;?]*[ -\/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]/g;
  let text = '', follow = true, stop = null;
  const render = () => {
    const q = search.value.trim().toLowerCase();
    pre.textContent = q ? text.split('\n').filter(l => l.toLowerCase().includes(q)).join('\n') : text;
    if (follow && !q) pre.scrollTop = pre.scrollHeight;
  };
  pre.addEventListener('scroll', () => {
    follow = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    state.textContent = follow ? 'following' : 'paused (scroll to the end to follow)';
  });
  search.addEventListener('input', render);
  const done = why => { if (stop) { stop(); stop = null; } if (why) state.textContent = why; };
  window.addEventListener('hashchange', () => done(''), { once: true });
  stop = streamEvents(`/jobs/${encodeURIComponent(jobId)}/log/stream`, ev => {
    if (!card.isConnected) { done(''); return; }
    if (ev.type === 'end') { done(text === '' ? 'no output: the job has not run, or its run printed nothing' : 'the run has ended'); return; }
    let chunk = '';
    try { chunk = JSON.parse(ev.data); } catch { return; }
    text = (text + chunk.replace(ansi, '').replace(/\r(?!\n)/g, '\n')).slice(-MAX_CHARS);
    render();
  }, (st, detail) => {
    if (!card.isConnected) { done(''); return; }
    state.textContent = st === 'live' ? (follow ? 'following' : 'paused (scroll to the end to follow)') : 'reconnecting…' + (detail ? ` (${detail})` : '');
  });
  return card;
}

// webLink links only http(s) URLs (a forge's URL is data, never script).
const webLink = (url, text) => (/^https?:\/\//i.test(url || '') ? h('a', { href: url, target: '_blank', rel: 'noopener noreferrer' }, text) : text);

// pullRequestRows are the job's pull request (a link, its state, a sync the
// forge keeps failing) and its iteration, when it has a forge.
function pullRequestRows(j) {
  const rows = [];
  const pr = j.pullRequest;
  if (pr) {
    rows.push(['Pull request', h('span', { id: 'pull-request' },
      webLink(pr.url, `${pr.repo}#${pr.number}`), ' ', pr.state)]);
  }
  if (j.prSync && j.prSync.attempts > 0) {
    rows.push(['Pull request sync', `failed ${j.prSync.attempts}×: ${j.prSync.lastError || ''}`]);
  }
  if (pr || (j.iteration || 0) > 1) rows.push(['Iteration', String(Math.max(j.iteration || 0, 1))]);
  return rows;
}

// feedbackList shows what the forge sent back, each item beside the
// iteration it asked for: who or which check, and its text.
function feedbackList(j) {
  const items = j.feedback || [];
  if (!items.length) return [];
  return [h('details', { open: true, id: 'feedback' }, h('summary', {}, `Feedback (${items.length})`),
    h('ul', { class: 'timeline' }, items.map(f => h('li', { 'data-iteration': f.iteration },
      h('strong', {}, `Iteration ${f.iteration}`), ' · ',
      f.source === 'check' ? `check ${f.name || ''}` : `review by ${f.author || '?'}`,
      f.url ? [' · ', webLink(f.url, 'open')] : null,
      ' · ', time(f.at), h('pre', {}, f.body)))))];
}

// runsTable lists a job's runs with what each cost and delivered: usage
// (usd, tokens), the head it pushed and its diffstat; for a structured
// engine also its model and turns (the session in the tooltip) and how its
// process ended when the factory ended it.
function runsTable(items) {
  const usage = u => (u && (u.usd || u.inputTokens || u.outputTokens)
    ? `$${(u.usd || 0).toFixed(2)} · ${u.inputTokens || 0} in / ${u.outputTokens || 0} out` +
      (u.cacheReadTokens || u.cacheWriteTokens ? ` · ${(u.cacheReadTokens || 0) + (u.cacheWriteTokens || 0)} cached` : '') : '–');
  const engine = x => h('span', { class: 'run-engine', title: x.engineSession ? `session ${x.engineSession}` : '' },
    [x.engine || '–', x.model, x.turns ? `${x.turns} turn${x.turns === 1 ? '' : 's'}` : null].filter(Boolean).join(' · '));
  const result = x => (x.exit && x.exit.reason !== 'exited' ? `${x.result} (${x.exit.reason.replace('_', ' ')})` : x.result);
  const diff = d => (d ? `${d.files} file${d.files === 1 ? '' : 's'}, +${d.insertions} −${d.deletions}` : '–');
  return table(['Run', 'Factory', 'Engine', 'Result', 'Usage', 'Head', 'Diff', 'Started', 'Ended', 'Took', 'Reason'], items.map(x => h('tr', { 'data-run': x.id },
    h('td', { class: 'mono' }, x.id), h('td', {}, x.factoryId), h('td', {}, engine(x)), h('td', {}, result(x)),
    h('td', { class: 'run-usage' }, usage(x.usage)), h('td', { class: 'mono run-head', title: x.head || '' }, x.head ? x.head.slice(0, 12) : '–'),
    h('td', { class: 'run-diff' }, diff(x.diff)), h('td', {}, time(x.startedAt)),
    h('td', {}, x.endedAt ? time(x.endedAt) : '–'), h('td', { class: 'run-duration' }, runDuration(x)), h('td', {}, dash(x.reason)))), 'No run yet.');
}

// renderArtifacts lists a job's artifacts (the engine log, the diff, the
// usage report of each run) with a download that sends the bearer header
// and saves through a blob: URL, checking the bytes against the sha256.
async function renderArtifacts(card, jobId) {
  if (!has('/jobs/{id}/artifacts')) return [];
  const { items = [] } = await get(`/jobs/${encodeURIComponent(jobId)}/artifacts`);
  card.hidden = items.length === 0;
  const outcome = card.querySelector('#artifact-outcome') || h('div', { id: 'artifact-outcome', class: 'outcome', role: 'status', 'aria-live': 'polite' });
  async function download(a) {
    outcome.replaceChildren(`downloading ${a.name}…`);
    try {
      const blob = await fetchBlob(`/artifacts/${encodeURIComponent(a.id)}/content`);
      const sum = [...new Uint8Array(await crypto.subtle.digest('SHA-256', await blob.arrayBuffer()))]
        .map(b => b.toString(16).padStart(2, '0')).join('');
      if (sum !== a.sha256) throw new Error(`${a.name}: sha256 ${sum} does not match ${a.sha256}`);
      const url = URL.createObjectURL(blob);
      const link = h('a', { href: url, download: a.name });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      outcome.replaceChildren(`saved ${a.name} (${blob.size} bytes, sha256 verified)`);
    } catch (e) {
      outcome.replaceChildren(errorBox(e));
    }
  }
  if (unchanged(card, items)) return items;
  card.replaceChildren(h('h3', {}, 'Artifacts'), table(['Name', 'Kind', 'Size', 'sha256', 'Run', 'Created', ''], items.map(a => h('tr', { 'data-artifact': a.id, 'data-kind': a.kind },
    h('td', {}, a.name), h('td', {}, a.kind), h('td', {}, `${a.size} B`), h('td', { class: 'mono', title: a.sha256 }, a.sha256.slice(0, 12)),
    h('td', { class: 'mono' }, dash(a.runId)), h('td', {}, time(a.createdAt)),
    h('td', {}, h('button', { type: 'button', class: 'artifact-download', onclick: () => download(a) }, 'Download')))), 'No artifacts.'), outcome);
  return items;
}

// jobCost is the job's cost for its header: what its runs reported, summed.
function jobCost(runs) {
  if (!runs.length) return [];
  const sum = k => runs.reduce((t, x) => t + ((x.usage || {})[k] || 0), 0);
  const tokens = sum('inputTokens') + sum('outputTokens');
  return [' · ', h('span', { id: 'job-cost', title: `${runs.length} run${runs.length === 1 ? '' : 's'}: ${sum('inputTokens')} tokens in, ${sum('outputTokens')} out` },
    `$${sum('usd').toFixed(2)} · ${tokens.toLocaleString('en')} tokens`)];
}

// parseDiff reads a unified diff (git diff's, --binary included) into its
// files: {name, from, to, binary, added, removed, hunks: [{header, lines:
// [{kind: '+' | '-' | ' ' | '\\', text}]}]}. A hunk ends when its header's
// line counts are used up, so a removed line that begins "--" or an added
// one "++" is never taken for a file header.
function parseDiff(text) {
  const files = [];
  let f = null, hunk = null, oldLeft = 0, newLeft = 0;
  const strip = p => p.replace(/^"?[ab]\//, '').replace(/"$/, '').replace(/\t.*$/, '');
  const start = () => { f = { name: '', from: '', to: '', binary: false, added: 0, removed: 0, hunks: [] }; files.push(f); hunk = null; };
  for (const line of text.split('\n')) {
    if (hunk && (oldLeft > 0 || newLeft > 0 || line.startsWith('\\'))) {
      const kind = line[0] || ' ';
      if (kind === '\\') { hunk.lines.push({ kind, text: line }); continue; }
      if (kind === '+') { f.added++; newLeft--; } else if (kind === '-') { f.removed++; oldLeft--; } else { oldLeft--; newLeft--; }
      hunk.lines.push({ kind: kind === '+' || kind === '-' ? kind : ' ', text: line.slice(1) });
      continue;
    }
    hunk = null;
    let m;
    if ((m = /^diff --git a\/(.*) b\/(.*)$/.exec(line))) { start(); f.from = m[1]; f.to = m[2]; f.name = m[2]; continue; }
    if (!f && (line.startsWith('--- ') || line.startsWith('@@'))) start();
    if (!f) continue;
    if (line.startsWith('--- ')) { const n = strip(line.slice(4)); if (n !== '/dev/null') f.from = n; }
    else if (line.startsWith('+++ ')) { const n = strip(line.slice(4)); f.to = n === '/dev/null' ? '' : n; f.name = f.to || f.from; }
    else if (line.startsWith('rename to ')) f.name = f.to = line.slice(10);
    else if (line.startsWith('Binary files ') || line === 'GIT binary patch') f.binary = true;
    else if ((m = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/.exec(line))) {
      oldLeft = m[1] === undefined ? 1 : Number(m[1]);
      newLeft = m[2] === undefined ? 1 : Number(m[2]);
      hunk = { header: line, lines: [] };
      f.hunks.push(hunk);
    }
  }
  for (const x of files) if (!x.name) x.name = x.to || x.from;
  return files;
}

// The diff shown inline: files longer than this are collapsed, and a diff
// larger than MAX_DIFF_BYTES is left to the download.
const LONG_FILE_LINES = 200;
const MAX_DIFF_BYTES = 4 << 20;

// diffView draws parsed files: a list with each file's +/- counts, then
// each file's hunks with its added and removed lines marked; a long file
// starts collapsed, a binary one is only named. Text goes in as text only.
function diffView(files) {
  const count = x => [h('span', { class: 'diff-add' }, `+${x.added}`), ' ', h('span', { class: 'diff-del' }, `−${x.removed}`)];
  const total = { added: files.reduce((t, x) => t + x.added, 0), removed: files.reduce((t, x) => t + x.removed, 0) };
  const file = x => {
    if (x.binary) return h('div', { class: 'diff-file', 'data-file': x.name }, h('p', {}, h('code', {}, x.name), ' ', h('span', { class: 'note' }, '(binary)')));
    const n = x.hunks.reduce((t, k) => t + k.lines.length, 0);
    return h('details', { class: 'diff-file', 'data-file': x.name, open: n <= LONG_FILE_LINES },
      h('summary', {}, h('code', {}, x.name), ' ', count(x), n > LONG_FILE_LINES ? h('span', { class: 'note' }, ` (${n} lines, collapsed)`) : null),
      h('pre', { class: 'diff' }, x.hunks.flatMap(k => [h('span', { class: 'diff-hunk' }, k.header + '\n'),
        ...k.lines.map(l => h('span', { class: l.kind === '+' ? 'diff-add' : l.kind === '-' ? 'diff-del' : l.kind === '\\' ? 'note' : 'diff-ctx' },
          (l.kind === '\\' ? '' : l.kind) + l.text + '\n'))])));
  };
  return [h('p', { id: 'diff-summary' }, `${files.length} file${files.length === 1 ? '' : 's'} changed, `, count(total)),
    h('ul', { class: 'diff-files', id: 'diff-files' }, files.map(x => h('li', { 'data-file': x.name },
      h('code', {}, x.name), ' ', x.binary ? h('span', { class: 'note' }, 'binary') : count(x)))),
    ...files.map(file)];
}

// renderDiff shows, beside the review card, the diff (change.diff) of the
// run whose head is under review, or else of the newest run that uploaded
// one. It is fetched once per artifact: a live refresh keeps what the
// reader expanded.
async function renderDiff(card, j, runs, artifacts) {
  const diffs = artifacts.filter(a => a.kind === 'diff');
  const sha = j.review && j.review.head ? j.review.head.split('@').pop() : '';
  const reviewed = sha ? runs.find(x => x.head && x.head === sha) : null;
  const a = (reviewed && diffs.find(d => d.runId === reviewed.id)) ||
    diffs.slice().sort((x, y) => Date.parse(x.createdAt) - Date.parse(y.createdAt)).pop();
  card.hidden = !a;
  if (!a || card.dataset.artifact === a.id) return;
  const run = runs.find(x => x.id === a.runId);
  const title = h('h3', {}, 'Diff ', h('span', { class: 'note' }, run ? `of run ${run.id}${run.head ? ' @ ' + run.head.slice(0, 12) : ''}` : a.name));
  if (a.size > MAX_DIFF_BYTES) {
    fill(card, title, h('p', { class: 'note' }, `${a.name} is ${a.size} bytes, too large to show here: download it under Artifacts.`));
  } else {
    try {
      const text = await (await fetchBlob(`/artifacts/${encodeURIComponent(a.id)}/content`)).text();
      fill(card, title, text.trim() ? diffView(parseDiff(text)) : h('p', { class: 'note' }, 'The run changed nothing.'));
    } catch (e) {
      fill(card, title, errorBox(e));
      return; // tried again on the next refresh
    }
  }
  card.dataset.artifact = a.id;
}

// renderReview shows the review gate: reviewers, quorum, the head under
// review, votes, and approve/reject for the head while the job is in review.
function renderReview(card, j, refresh) {
  const r = j.review;
  card.hidden = !r;
  if (!r) return;
  const canVote = j.stage === 'review' && r.head && has('/jobs/{id}/review');
  // A comment being typed keeps its focus while nothing here changed, and
  // its text when something did.
  if (unchanged(card, [j.id, r, canVote])) return;
  const prev = card.querySelector('#review-comment');
  const comment = h('input', { id: 'review-comment', type: 'text', size: 50, value: prev ? prev.value : '' });
  const outcome = card.querySelector('#review-outcome') || h('div', { id: 'review-outcome', class: 'outcome', role: 'status', 'aria-live': 'polite' });
  async function vote(approve) {
    outcome.replaceChildren(approve ? 'approving…' : 'rejecting…');
    try {
      const { data } = await api('POST', `/jobs/${encodeURIComponent(j.id)}/review`, { body: { approve, comment: comment.value, head: r.head } });
      outcome.replaceChildren(`${approve ? 'approved' : 'rejected'}: job is now `, stageBadge(data.stage));
      comment.value = '';
      await refresh();
    } catch (e) {
      outcome.replaceChildren(errorBox(e));
    }
  }
  fill(card, h('h3', {}, 'Review'),
    h('dl', { class: 'kv' }, ...[
      ['Head', r.head ? h('code', {}, r.head) : '–'], ['Reviewers', list(r.reviewers)],
      ['Approvals', `${r.approvals || 0} of ${r.quorum || 1}`], ['Awaiting', list(r.awaiting)],
      ['On reject', r.onReject || 'requeue'], ['Feedback', dash(r.feedback)],
    ].flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    h('h4', {}, 'Votes'),
    (r.votes || []).length ? h('ul', { class: 'timeline' }, r.votes.map(v => h('li', {},
      badge(v.approve ? 's-shipped' : 's-failed', v.approve ? 'approve' : 'reject'), ' ', h('strong', {}, v.reviewer), ' ',
      time(v.at), v.comment ? ' — ' + v.comment : ''))) : h('p', { class: 'note' }, 'No votes on this head yet.'),
    canVote ? h('div', { class: 'actions' }, h('label', { for: 'review-comment' }, 'Comment'), comment,
      h('button', { type: 'button', class: 'primary', id: 'review-approve', onclick: () => vote(true) }, 'Approve'),
      h('button', { type: 'button', class: 'danger', id: 'review-reject', onclick: () => vote(false) }, 'Reject')) : null,
    outcome);
}

// renderTracker shows, for a job ingested from a tracker item, the item,
// how far its events got to the product's webhook, and a Re-send button
// whose outcome stays shown across live refreshes.
async function renderTracker(card, j) {
  const t = j.tracker;
  card.hidden = !t || !has('/jobs/{id}/echo');
  if (card.hidden) return;
  const outcome = card.querySelector('#echo-outcome') || h('div', { id: 'echo-outcome', class: 'outcome', role: 'status', 'aria-live': 'polite' });
  let state = null;
  let stateError = null;
  try {
    state = await get(`/jobs/${encodeURIComponent(j.id)}/echo`);
  } catch (e) {
    stateError = e;
  }
  async function resend() {
    outcome.replaceChildren('re-sending…');
    try {
      const { data } = await api('POST', '/tracker/echo', { body: { jobId: j.id } });
      outcome.replaceChildren(`re-send started: every event from seq 1 goes again (${data.latestSeq} events).`);
    } catch (e) {
      outcome.replaceChildren(errorBox(e));
    }
  }
  if (unchanged(card, [t, state, stateError && String(stateError.message || stateError)])) return;
  const echo = state ? [
    ['Delivered', h('span', { id: 'echo-delivered' }, `${state.deliveredSeq} of ${state.latestSeq}`)],
    ['Pending', dash(state.pendingSeq)], ['Attempts', state.attempts],
    ['Last error', h('span', { id: 'echo-error' }, dash(state.lastError))],
    ['Next attempt', state.nextAttemptAt ? time(state.nextAttemptAt) : '–'],
  ] : [];
  fill(card, h('h3', {}, 'Tracker'),
    h('dl', { class: 'kv' }, ...[
      ['Source', t.source], ['Item', h('span', { class: 'mono', id: 'tracker-item' }, t.itemId)], ['Revision', t.revision], ...echo,
    ].flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    stateError ? errorBox(stateError) : null,
    has('/tracker/echo') ? h('div', { class: 'actions' },
      h('button', { type: 'button', id: 'echo-resend', onclick: resend }, 'Re-send to tracker')) : null,
    outcome);
}

// dagTree draws a job's DAG as a nested list from its root, with the
// dependencies of each node and the jobs outside the tree they point at.
function dagTree(d, current) {
  const kids = {};
  const ids = new Set(d.nodes.map(n => n.id));
  const roots = [];
  for (const n of d.nodes) {
    if (n.parentId && ids.has(n.parentId)) (kids[n.parentId] ||= []).push(n);
    else roots.push(n);
  }
  roots.sort((a, b) => (a.id === d.rootId ? -1 : b.id === d.rootId ? 1 : 0));
  const item = n => h('li', {},
    n.id === current ? h('strong', {}, n.title) : h('a', { href: '#/job/' + encodeURIComponent(n.id) }, n.title), ' ', stageBadge(n.stage),
    n.kind === 'composite' ? h('span', { class: 'note' }, ' composite') : '',
    (n.deps || []).length ? h('span', { class: 'note' }, ` waits on ${n.deps.length} (${n.depsMode})`) : '',
    kids[n.id] ? h('ul', {}, kids[n.id].map(item)) : null);
  const counts = Object.entries(d.counts || {}).filter(([, c]) => c > 0).map(([s, c]) => `${s} ${c}`).join(' · ');
  return [h('ul', { class: 'dag' }, roots.map(item)), h('p', { class: 'note' }, counts)];
}

// dagGraph draws a job's DAG as layered boxes: a node's layer is the
// longest chain of edges (child or dependency) leading to it, so every edge
// points down; each box links to its job and shows its stage.
function dagGraph(d, current) {
  const NW = 190, NH = 46, GX = 24, GY = 44, PAD = 8;
  const ids = new Set(d.nodes.map(n => n.id));
  const edges = (d.edges || []).filter(e => ids.has(e.from) && ids.has(e.to) && e.from !== e.to);
  const depth = new Map(d.nodes.map(n => [n.id, 0]));
  // Relaxed at most once per node: a cycle (which the server refuses)
  // could not loop forever.
  for (let i = 0, moved = true; moved && i < d.nodes.length; i++) {
    moved = false;
    for (const e of edges) {
      if (depth.get(e.to) < depth.get(e.from) + 1) { depth.set(e.to, depth.get(e.from) + 1); moved = true; }
    }
  }
  const layers = [];
  for (const n of d.nodes) (layers[depth.get(n.id)] ||= []).push(n);
  const rows = layers.filter(Boolean);
  const widest = Math.max(...rows.map(r => r.length));
  const W = widest * (NW + GX) - GX + 2 * PAD, H = rows.length * (NH + GY) - GY + 2 * PAD;
  const pos = new Map();
  rows.forEach((r, y) => {
    const left = PAD + (W - 2 * PAD - (r.length * (NW + GX) - GX)) / 2;
    r.forEach((n, x) => pos.set(n.id, { x: left + x * (NW + GX), y: PAD + y * (NH + GY) }));
  });
  const cut = (t, n) => (t.length > n ? t.slice(0, n - 1) + '…' : t);
  const edge = e => {
    const a = pos.get(e.from), b = pos.get(e.to);
    const x1 = a.x + NW / 2, y1 = a.y + NH, x2 = b.x + NW / 2, y2 = b.y, my = (y1 + y2) / 2;
    return svgEl('path', { d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`, class: 'dag-edge dag-' + e.kind, 'marker-end': 'url(#dag-arrow)',
      'data-from': e.from, 'data-to': e.to });
  };
  const node = n => {
    const { x, y } = pos.get(n.id);
    return svgEl('a', { href: '#/job/' + encodeURIComponent(n.id), class: 'dag-node s-' + n.stage + (n.id === current ? ' current' : ''), 'data-job': n.id },
      svgEl('title', {}, `${n.title} (${n.id}): ${n.stage.replace('_', ' ')}`),
      svgEl('rect', { x, y, width: NW, height: NH, rx: 6 }),
      svgEl('text', { x: x + 8, y: y + 18, class: 'dag-title' }, cut(n.title, 26)),
      svgEl('text', { x: x + 8, y: y + 36, class: 'dag-stage' }, n.stage.replace('_', ' ') + (n.kind === 'composite' ? ' · composite' : '')));
  };
  return svgEl('svg', { viewBox: `0 0 ${W} ${H}`, width: W, class: 'dag-graph', id: 'dag-graph', role: 'img', 'aria-label': `DAG of ${d.nodes.length} jobs` },
    svgEl('defs', {}, svgEl('marker', { id: 'dag-arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto' },
      svgEl('path', { d: 'M0,0 L10,5 L0,10 z', class: 'dag-arrow' }))),
    edges.map(edge), d.nodes.map(node));
}

// whereItRan says where a job that holds a lease runs, or where one that
// ran last ran: for such a job, the scheduler's view of the fleet now
// (a full factory is "not routable") answers a question nobody asked.
function whereItRan(j, runs) {
  if (j.holderFactoryId) return ['Running on ', h('strong', {}, j.holderFactoryId), ` (${j.stage}, lease epoch ${j.leaseEpoch}).`];
  const last = runs.length ? runs[runs.length - 1] : null;
  if (!last || j.stage === 'queued' || j.stage === 'blocked') return null;
  return ['Ran on ', h('strong', {}, last.factoryId), ` (run ${last.leaseEpoch}, ${last.result}); now ${j.stage.replace('_', ' ')}.`];
}

function explainPanel(ex, j, runs) {
  if (ex.error) return [errorBox(ex.error)];
  const s = ex.schedule || {};
  const ran = whereItRan(j, runs);
  const verdict = s.routable ? ['Routable; best factory: ', h('strong', {}, dash(s.best))] : ['Not routable: ', h('strong', {}, dash(s.reason))];
  const out = [h('p', { id: 'explain-where' }, ran || verdict)];
  if (ran) out.push(h('p', { class: 'note' }, 'Were it queued now: ', ...verdict));
  if (ex.dispatch && ex.dispatch.unroutable) out.push(h('p', { class: 'note' }, 'Dispatcher: ' + ex.dispatch.unroutable));
  if (ex.profile) out.push(h('p', { class: 'note' }, `Profile ${ex.profile.name} v${ex.profile.version} adds ${list(ex.profile.capabilities)}`));
  out.push(h('p', { class: 'note' }, 'Requires: ' + list(s.required)));
  const fmt = v => (typeof v === 'number' ? v.toFixed(3) : '–');
  out.push(table(['Factory', 'Eligible', { label: 'Total', num: true }, { label: 'Cap fit', num: true }, { label: 'Affinity', num: true },
    { label: 'Load', num: true }, { label: 'Cost fit', num: true }, { label: 'Health', num: true }, { label: 'Starvation', num: true }, 'Why not'],
  (s.candidates || []).map(c => {
    const t = c.terms || {};
    return h('tr', {}, h('td', {}, c.factoryId), h('td', {}, c.eligible ? 'yes' : 'no'),
      ...(c.eligible ? [c.total, t.capabilityFit, t.affinity, t.load, t.costFit, t.health, t.starvation] : Array(7).fill(null))
        .map(v => h('td', { class: 'num' }, fmt(v))), h('td', {}, dash(c.reason)));
  }), 'No factory serves this product.'));
  return out;
}

// Alerts: starving jobs, stale factories, dead letters, jobs blocked on
// failed dependencies (and budget alerts once budgets exist).
async function alertsView() {
  const region = h('div');
  main.replaceChildren(h('h2', {}, 'Alerts'), region);
  async function refresh() {
    const m = await get('/metrics');
    const rows = (m.alerts || []).map(a => h('tr', {},
      h('td', {}, badge('sev-' + a.severity, a.severity)), h('td', {}, a.kind.replace(/_/g, ' ')), h('td', {}, a.subject),
      h('td', {}, time(a.since)), h('td', {}, linkJobs(a.message))));
    region.replaceChildren(table(['Severity', 'Kind', 'Subject', 'Since', 'Message'], rows, 'No alerts: nothing failed or dead-lettered in the last 24 h, nothing is unroutable, starving or stale.'));
  }
  await refresh();
  return refresh;
}

// ---- persona profiles ---------------------------------------------------

const profileLink = (name, version) => h('a', { href: '#/profile/' + encodeURIComponent(name) + (version ? '?version=' + version : '') }, name);
const budgetText = b => [b && b.wall ? 'wall ' + b.wall : '', b && b.usd ? '$' + b.usd : ''].filter(Boolean).join(', ') || '–';

// profileDocument rebuilds a version's Markdown document from its fields,
// the starting point for the next version. JSON strings are YAML strings.
function profileDocument(p) {
  const lines = ['---', 'capabilities: [' + (p.capabilities || []).map(yamlString).join(', ') + ']'];
  if (p.engine) lines.push('engine: ' + yamlString(p.engine));
  const b = p.budget || {};
  const budget = [b.wall ? 'wall: ' + yamlString(b.wall) : '', b.usd ? 'usd: ' + b.usd : ''].filter(Boolean);
  if (budget.length) lines.push('budget: {' + budget.join(', ') + '}');
  lines.push('---', p.body || '');
  return lines.join('\n');
}

// profileEditor is the form that PUTs a new version of a profile: the name
// (fixed when editing one) and the Markdown document. It shows the new
// version, or the API's error with its field, and then calls onSaved.
function profileEditor({ name, doc, onSaved }) {
  const nameInput = h('input', { id: 'p-name', required: true, autocomplete: 'off', spellcheck: 'false', value: name || '', readonly: !!name,
    'aria-describedby': 'p-name-note' });
  const text = h('textarea', { id: 'p-doc', required: true, spellcheck: 'false', rows: 12, 'aria-describedby': 'p-doc-note' });
  text.value = doc || '---\ncapabilities: []\n---\nYou are …\n';
  const outcome = h('div', { id: 'p-outcome', class: 'outcome', role: 'status', 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit', class: 'primary', id: 'p-save' }, name ? 'Save a new version' : 'Save profile');
  const form = h('form', { class: 'card', 'aria-labelledby': 'p-edit-title' },
    h('h3', { id: 'p-edit-title' }, name ? 'Edit (saves a new version)' : 'New profile or new version'),
    h('div', { class: 'row' }, h('label', { for: 'p-name' }, 'Name'), nameInput,
      h('p', { class: 'note', id: 'p-name-note' }, 'Versions are immutable: saving never changes one, it adds the next.')),
    h('div', { class: 'row' }, h('label', { for: 'p-doc' }, 'Profile (Markdown with front matter)'), text,
      h('p', { class: 'note', id: 'p-doc-note' }, 'Front matter: capabilities, engine, budget ({wall, usd}); the body is the persona\'s instructions.')),
    h('div', { class: 'actions' }, submit), outcome);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const n = nameInput.value.trim();
    submit.disabled = true;
    outcome.replaceChildren('Saving…');
    try {
      const { data } = await api('PUT', '/profiles/' + encodeURIComponent(n), { body: text.value, ctype: 'text/markdown' });
      outcome.replaceChildren('Saved ', profileLink(data.name, data.version), ' ', h('strong', { id: 'p-saved-version' }, 'v' + data.version), '.');
      await onSaved(data);
    } catch (e) {
      outcome.replaceChildren(errorBox(e));
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

// Profiles: the product's personas (latest version of each) and a form
// for a new profile or a new version of one.
async function profilesView() {
  needProduct();
  const region = h('div', { id: 'profiles-list' });
  async function refresh() {
    const res = await get('/profiles');
    if (unchanged(region, res.items)) return;
    region.replaceChildren(table(['Profile', { label: 'Latest version', num: true }, 'Capabilities', 'Engine', 'Budget', 'Saved'],
      (res.items || []).map(p => h('tr', { 'data-name': p.name },
        h('th', { scope: 'row' }, profileLink(p.name)), h('td', { class: 'num' }, 'v' + p.version), h('td', {}, list(p.capabilities)),
        h('td', {}, dash(p.engine)), h('td', {}, budgetText(p.budget)), h('td', {}, time(p.createdAt)))),
    'No profile yet: save one below, or with fleetctl profiles put.'));
  }
  await refresh();
  main.replaceChildren(h('h2', {}, 'Profiles'), region, profileEditor({ onSaved: refresh }));
  return refresh;
}

// Profile detail: one version's front matter and body (the latest, or
// ?version=), its version history, and the form for the next version.
async function profileView(r) {
  needProduct();
  const name = r.arg;
  const state = { version: Number(r.query.get('version')) || 0, loaded: null };
  const head = h('div');
  const fields = h('div', { id: 'profile-fields' });
  const versions = h('div', { id: 'profile-versions' });
  const editor = h('div');
  main.replaceChildren(head, h('div', { class: 'card' }, h('h3', {}, 'Version'), fields),
    h('div', { class: 'card' }, h('h3', {}, 'Versions'), versions), editor);
  async function refresh() {
    const p = encodeURIComponent(name);
    const [prof, vs] = await Promise.all([get(`/profiles/${p}` + (state.version ? '?version=' + state.version : '')), get(`/profiles/${p}/versions`)]);
    head.replaceChildren(h('h2', {}, 'Profile ', name, ' ', h('span', { id: 'profile-version' }, 'v' + prof.version)),
      h('p', {}, h('a', { href: '#/profiles' }, '← All profiles')));
    fields.replaceChildren(h('dl', { class: 'kv' }, ...[
      ['Name', prof.name], ['Version', prof.version], ['Capabilities', list(prof.capabilities)], ['Engine', dash(prof.engine)],
      ['Budget', budgetText(prof.budget)], ['Saved by', dash(prof.createdBy)], ['Saved', time(prof.createdAt)],
    ].flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])), h('h4', {}, 'Instructions'), h('pre', { id: 'profile-body' }, prof.body));
    const items = (vs.items || []).slice().sort((a, b) => b.version - a.version);
    if (!unchanged(versions, [prof.version, items])) versions.replaceChildren(table([{ label: 'Version', num: true }, 'Capabilities', 'Engine', 'Budget', { label: 'Body bytes', num: true }, 'Saved by', 'Saved'],
      items.map(v => h('tr', { 'data-version': v.version },
        h('th', { scope: 'row', class: 'num' }, v.version === prof.version ? h('strong', { 'aria-current': 'true' }, 'v' + v.version)
          : h('a', { href: '#/profile/' + p + '?version=' + v.version }, 'v' + v.version)),
        h('td', {}, list(v.capabilities)), h('td', {}, dash(v.engine)), h('td', {}, budgetText(v.budget)),
        h('td', { class: 'num' }, v.bodyBytes), h('td', {}, dash(v.createdBy)), h('td', {}, time(v.createdAt)))), 'No version.'));
    // The form starts from the shown version, once: a live refresh must not
    // overwrite what is being typed.
    if (state.loaded !== prof.version) {
      state.loaded = prof.version;
      editor.replaceChildren(profileEditor({ name, doc: profileDocument(prof), onSaved: saved }));
    }
  }
  async function saved(data) {
    // Show what was just saved; keep the outcome the form reports.
    state.version = 0;
    state.loaded = data.version;
    history.replaceState(null, '', '#/profile/' + encodeURIComponent(name));
    await refresh();
  }
  await refresh();
  return refresh;
}

// ---- budgets --------------------------------------------------------------

const usd = v => '$' + Number(v || 0).toFixed(2);
const pct = (v, of) => (of > 0 ? Math.round(100 * v / of) + '%' : '–');
const utc = iso => (iso ? new Date(iso).toISOString().replace('T', ' ').replace(/:\d\d\.\d+Z$/, ' UTC') : '–');
// The SVG namespace, as the HTML parser assigns it (an <svg> in HTML needs
// no xmlns), so the assets name no URL at all.
const SVG = (() => { const t = document.createElement('template'); t.innerHTML = '<svg></svg>'; return t.content.firstChild.namespaceURI; })();

// svgEl builds an SVG node (attributes only: the policy forbids inline styles).
function svgEl(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const kid of kids.flat()) if (kid !== undefined && kid !== null) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}

// burndownChart draws the period's cumulative spend against the ceiling,
// with the forecast's straight line to the moment it reaches it. The
// title and description say in words what the lines show; the table
// after the chart holds the same figures.
function burndownChart(bd) {
  const W = 720, H = 260, L = 56, R = 16, T = 16, B = 36;
  const pts = (bd.points || []).map(p => ({ t: Date.parse(p.at), v: p.spentUsd }));
  const fc = bd.forecastExhaustedAt ? Date.parse(bd.forecastExhaustedAt) : null;
  // The axis spans the data: from the period's start (or an earlier point)
  // to now (or a later point), with a margin, a minute at least. A forecast
  // months away does not squeeze the data into the left edge: its line is
  // cut at the axis's end.
  const start = Math.min(Date.parse(bd.periodStart), ...pts.map(p => p.t));
  const last_t = Math.max(Date.now(), ...pts.map(p => p.t));
  const end = start + 1.1 * Math.max(60e3, last_t - start);
  const top = Math.max(bd.ceilingUsd, ...pts.map(p => p.v)) * 1.1 || 1;
  const x = t => L + (W - L - R) * (t - start) / (end - start);
  const y = v => T + (H - T - B) * (1 - v / top);
  const last = pts.length ? pts[pts.length - 1] : { t: start, v: 0 };
  // The forecast runs straight from the last point to the ceiling at fc,
  // drawn as far as the axis goes.
  const forecastLine = (from, at) => {
    const to = Math.min(at, end);
    const v = from.v + (bd.ceilingUsd - from.v) * (to - from.t) / (at - from.t);
    return svgEl('line', { x1: x(from.t), y1: y(from.v), x2: x(to), y2: y(v), class: 'forecast', id: 'bd-forecast' });
  };
  const line = [{ t: start, v: 0 }, ...pts].map(p => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ');
  const desc = `Spend ${usd(last.v)} of a ${usd(bd.ceilingUsd)} ceiling since ${utc(bd.periodStart)}, over ${pts.length} settled run(s). ` +
    (fc ? `At this rate the ceiling is reached ${utc(bd.forecastExhaustedAt)}.` : 'At this rate the ceiling is not reached this period.');
  return svgEl('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-labelledby': 'bd-title bd-desc', id: 'burndown-chart' },
    svgEl('title', { id: 'bd-title' }, 'Burndown: spend against the ceiling'),
    svgEl('desc', { id: 'bd-desc' }, desc),
    svgEl('line', { x1: L, y1: y(0), x2: W - R, y2: y(0), class: 'axis' }),
    svgEl('line', { x1: L, y1: T, x2: L, y2: y(0), class: 'axis' }),
    svgEl('line', { x1: L, y1: y(bd.ceilingUsd), x2: W - R, y2: y(bd.ceilingUsd), class: 'ceiling' }),
    svgEl('text', { x: L - 6, y: y(bd.ceilingUsd) + 4, 'text-anchor': 'end', class: 'label' }, usd(bd.ceilingUsd)),
    svgEl('text', { x: L - 6, y: y(0) + 4, 'text-anchor': 'end', class: 'label' }, '$0'),
    svgEl('text', { x: L, y: H - 10, class: 'label' }, utc(new Date(start).toISOString())),
    svgEl('text', { x: W - R, y: H - 10, 'text-anchor': 'end', class: 'label' }, utc(new Date(end).toISOString())),
    svgEl('polyline', { points: line, class: 'spend' }),
    pts.map(p => svgEl('circle', { cx: x(p.t).toFixed(1), cy: y(p.v).toFixed(1), r: 3, class: 'spend-dot' })),
    fc && fc > last.t ? forecastLine(last, fc) : null);
}

// Budgets: the product's budget (spent, reserved, remaining, ceiling,
// period, pause), the burndown with its forecast, pause and resume with
// their outcome, and the product's seat cap.
async function budgetsView() {
  needProduct();
  const p = encodeURIComponent(session.product);
  const figures = h('div', { id: 'budget-figures' });
  const chart = h('div', { id: 'budget-chart' });
  const seats = h('div', { id: 'budget-seats' });
  const outcome = h('div', { id: 'b-outcome', class: 'outcome', role: 'status', 'aria-live': 'polite' });
  const reason = h('input', { id: 'b-reason', type: 'text', autocomplete: 'off', placeholder: 'why (optional)' });
  const pauseBtn = h('button', { type: 'button', class: 'danger', id: 'b-pause' }, 'Pause');
  const resumeBtn = h('button', { type: 'button', class: 'primary', id: 'b-resume' }, 'Resume');
  async function act(path, body, done) {
    pauseBtn.disabled = resumeBtn.disabled = true;
    outcome.replaceChildren(path.endsWith('pause') ? 'Pausing…' : 'Resuming…');
    try {
      const { data } = await api('POST', `/budgets/${p}/${path}`, { body: JSON.stringify(body || {}) });
      outcome.replaceChildren(h('strong', { id: 'b-done' }, done(data)));
      await refresh();
    } catch (e) {
      outcome.replaceChildren(errorBox(e));
    } finally {
      setControls(state.paused);
    }
  }
  // Pause applies to a product that assigns, Resume to a paused one.
  const state = { paused: false };
  function setControls(paused) {
    state.paused = paused;
    pauseBtn.disabled = paused;
    resumeBtn.disabled = !paused;
  }
  pauseBtn.addEventListener('click', () => act('pause', { reason: reason.value.trim() },
    b => `Paused (${b.pausedReason || 'operator'}): no job of ${b.productId} is assigned until resumed; running jobs finish.`));
  resumeBtn.addEventListener('click', () => act('resume', {},
    b => (b.paused ? 'Still paused.' : `Resumed: ${b.productId}'s queued jobs flow again (${usd(b.remainingUsd)} left).`)));
  const controls = h('div', { class: 'card', id: 'budget-controls' }, h('h3', {}, 'Pause and resume'),
    h('div', { class: 'row' }, h('label', { for: 'b-reason' }, 'Reason for a pause'), reason),
    h('div', { class: 'actions' }, pauseBtn, resumeBtn), outcome);
  main.replaceChildren(h('h2', {}, 'Budget of ', session.product), figures, chart, controls, seats);
  async function refresh() {
    let b;
    try {
      b = await get(`/budgets/${p}`);
    } catch (e) {
      if (e.status !== 404) throw e;
      figures.replaceChildren(h('p', { class: 'note', id: 'budget-none' },
        `Product ${session.product} has no budget: set one with fleetctl budgets set --ceiling USD, or PUT /api/fleet/budgets/${session.product}.`));
      chart.replaceChildren();
      controls.hidden = true;
      await drawSeats();
      return;
    }
    controls.hidden = false;
    setControls(!!b.paused);
    const bd = await get(`/budgets/${p}/burndown`);
    const pausedText = b.paused ? badge('sev-critical', 'paused · ' + (b.pausedReason || 'operator')) : badge('h-ok', 'assigning');
    figures.replaceChildren(h('div', { class: 'stats' },
      stat('Spent', `${usd(b.spentUsd)} (${pct(b.spentUsd, b.ceilingUsd)})`), stat('Reserved', usd(b.reservedUsd)),
      stat('Remaining', usd(b.remainingUsd)), stat('Ceiling', `${usd(b.ceilingUsd)} / ${b.period}`)),
    h('dl', { class: 'kv card', id: 'budget-kv' }, ...[
      ['State', h('span', { id: 'budget-state' }, pausedText, b.pauseMessage ? ' ' + b.pauseMessage : '')],
      ['Period', `${b.period}, since ${utc(b.periodStart)}`], ['Alert at', pct(b.alertAt, 1) + ' of the ceiling'],
      ['Auto pause', b.autoPause ? 'at the ceiling' : 'off'], ['Default job estimate', usd(b.defaultJobUsd)], ['Updated', time(b.updatedAt)],
    ].flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])));
    const rows = (bd.points || []).map(pt => h('tr', {}, h('td', {}, utc(pt.at)), h('td', { class: 'num' }, usd(pt.spentUsd)),
      h('td', { class: 'num' }, pct(pt.spentUsd, bd.ceilingUsd))));
    chart.replaceChildren(h('div', { class: 'card' }, h('h3', {}, 'Burndown'), burndownChart(bd),
      h('p', { class: 'note', id: 'bd-forecast-text' }, bd.forecastExhaustedAt ? `Forecast: the ceiling is reached ${utc(bd.forecastExhaustedAt)}.`
        : 'Forecast: at this rate the ceiling is not reached this period.'),
      h('details', { id: 'bd-data' }, h('summary', {}, 'Burndown data (table)'),
        table(['Settled at', { label: 'Spent so far', num: true }, { label: 'Of ceiling', num: true }], rows, 'No run has settled this period.'))));
    await drawSeats();
  }
  async function drawSeats() {
    const prod = await get(`/products/${p}`, { product: '' });
    const running = Object.keys(prod.seats || {}).length;
    seats.replaceChildren(h('div', { class: 'card' }, h('h3', {}, 'Seat cap'),
      h('p', { id: 'seat-cap' }, prod.maxRunning ? `At most ${prod.maxRunning} of ${session.product}'s jobs run at once; ${running} running now.`
        : `Uncapped: ${session.product}'s jobs run wherever seats are free.`),
      h('p', { class: 'note' }, 'Set it with fleetctl products put ', session.product, ' --max-running N.')));
  }
  await refresh();
  return refresh;
}

// linkJobs turns job ids in a message into links.
function linkJobs(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(/\b(j[0-9a-f]{29}|k[0-9a-f]{24})\b/g)) {
    out.push(text.slice(last, m.index), jobLink(m[0]));
    last = m.index + m[0].length;
  }
  out.push(text.slice(last));
  return out;
}

// ---- boot ---------------------------------------------------------------

$('#signout').addEventListener('click', () => signOut());
$('#product').addEventListener('change', ev => { session.product = ev.target.value; route(); });
window.addEventListener('hashchange', route);
if (session.token) start().catch(e => signOut(e.message)); else signIn();
