#!/usr/bin/env node
// A delivery engine for runtime/PROTOCOL.md, written from that document
// alone, in Node.js with only the standard library.
//
// Design: one event loop; every durable fact is a JSON line appended to
// one journal file in $DELIVERYSIM_STATE_DIR and fdatasync'd (group
// commit: whatever was appended while the previous write was on disk goes
// in the next). The journal is replayed at start and rewritten compactly
// (temp file, fsync, rename, fsync of the directory), which also drops a
// line torn by a SIGKILL. A stream's cursor is appended in the same write
// as, and after, the hand-offs it covers, so a prefix of the file never
// holds a cursor past an event that was not queued.
//
// Planted bugs (for the harness's own tests; see README.md) are chosen
// with --bug NAME or DSIM_NODE_BUG=NAME.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const path = require('path');

// ---------------------------------------------------------------- settings

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    if (!a.startsWith('--')) continue;
    a = a.slice(2);
    const eq = a.indexOf('=');
    if (eq >= 0) {
      out[a.slice(0, eq)] = a.slice(eq + 1);
    } else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) {
      out[a] = argv[++i];
    } else {
      out[a] = 'true';
    }
  }
  return out;
}

const args = parseArgs(process.argv.slice(2));

function envNum(name, dflt) {
  const v = process.env['DELIVERYSIM_' + name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  return Number.isFinite(n) ? n : dflt;
}

const BUGS = new Set(['retry-gone', 'reserialise-signature', 'head-if-stale', 'cursor-before-queue', 'dead-early',
  'no-backoff', 'ignore-in-flight-limit', 'overcount-acked', 'resume-from-start',
  'snapshot-skip-deletes', 'snapshot-shared-baseline']);
const BUG = args.bug || process.env.DSIM_NODE_BUG || '';
if (BUG && !BUGS.has(BUG)) {
  console.error(`engine-node: unknown bug ${JSON.stringify(BUG)} (known: ${[...BUGS].join(', ')})`);
  process.exit(2);
}

const cfg = {
  upstream: trimSlash(args.upstream || ''),
  registry: trimSlash(args.registry || ''),
  listen: args.listen || '',
  node: args.node || 'node-engine',
  stateDir: process.env.DELIVERYSIM_STATE_DIR || path.join(process.cwd(), 'engine-node-state'),
  maxAttempts: envNum('MAX_ATTEMPTS', 8),
  initialBackoff: envNum('INITIAL_BACKOFF_MS', 100),
  multiplier: envNum('BACKOFF_MULTIPLIER', 2),
  maxBackoff: envNum('MAX_BACKOFF_MS', 1000),
  jitter: envNum('JITTER', 0.3),
  webhookTimeout: envNum('WEBHOOK_TIMEOUT_MS', 500),
  lookback: envNum('TIMESTAMP_LOOKBACK_MS', 5000),
  maxInFlight: Math.max(1, envNum('MAX_IN_FLIGHT_PER_BOT', 8)),
  longPoll: '10s',
};

if (!cfg.upstream || !cfg.registry) {
  console.error('usage: engine.js --upstream URL --registry URL [--listen ADDR] [--bug NAME]');
  process.exit(2);
}

function trimSlash(s) {
  return s.replace(/\/+$/, '');
}

function log(...a) {
  console.error(new Date().toISOString(), `engine-node[${cfg.node}]`, ...a);
}

// Permanent statuses (PROTOCOL.md, Webhooks): dead-lettered at once.
const PERMANENT = new Set([400, 404, 405, 410, 413, 415, 422]);

// ---------------------------------------------------------------- positions

// A position is {major, minor, id}; ordered by major, minor, id bytewise.
function cmpPos(a, b) {
  if (a.major !== b.major) return a.major < b.major ? -1 : 1;
  if (a.minor !== b.minor) return a.minor < b.minor ? -1 : 1;
  return Buffer.compare(Buffer.from(a.id || ''), Buffer.from(b.id || ''));
}

function normPos(p) {
  return { major: Number(p && p.major) || 0, minor: Number(p && p.minor) || 0, id: (p && p.id) || '' };
}

// The position of an event as served: its own `pos` when present, else
// derived from the stream's kind (timestamp: created_at ms, 0, id).
function eventPos(kind, ev) {
  if (kind === 'timestamp') {
    const ms = ev.pos && ev.pos.major !== undefined ? Number(ev.pos.major) : Date.parse(ev.created_at);
    return { major: ms, minor: 0, id: ev.id };
  }
  return normPos(ev.pos);
}

// ---------------------------------------------------------------- journal

class Journal {
  constructor(dir) {
    this.dir = dir;
    this.file = path.join(dir, 'journal.jsonl');
    this.pending = [];
    this.waiters = [];
    this.writing = false;
    this.fd = -1;
    this.size = 0;
  }

  // Reads every intact line; a torn or garbled line is skipped (only the
  // tail of an appended write can be torn, and compaction removes it).
  readAll() {
    let text = '';
    try {
      text = fs.readFileSync(this.file, 'utf8');
    } catch (e) {
      if (e.code !== 'ENOENT') throw e;
    }
    const recs = [];
    for (const line of text.split('\n')) {
      if (!line) continue;
      try {
        recs.push(JSON.parse(line));
      } catch (_) {
        log('journal: skipping a torn line');
      }
    }
    return recs;
  }

  // Replaces the journal with these records, durably.
  rewrite(recs) {
    const tmp = this.file + '.tmp';
    const fd = fs.openSync(tmp, 'w');
    const body = recs.map((r) => JSON.stringify(r) + '\n').join('');
    fs.writeSync(fd, body);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    if (this.fd >= 0) fs.closeSync(this.fd);
    fs.renameSync(tmp, this.file);
    const dfd = fs.openSync(this.dir, 'r');
    fs.fsyncSync(dfd);
    fs.closeSync(dfd);
    this.fd = fs.openSync(this.file, 'a');
    this.size = Buffer.byteLength(body);
  }

  // Appends records; the promise resolves once they are on disk (it never
  // rejects: a failed write is retried).
  append(...recs) {
    for (const r of recs) this.pending.push(JSON.stringify(r) + '\n');
    const p = new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
    if (!this.writing) this.flush();
    return p;
  }

  // Writes and syncs until nothing is pending. A failed write is retried
  // (after 200 ms) with what was appended since, never dropped: its
  // records may now be in the file twice, which replay tolerates (every
  // record sets state), and the retry starts with a newline, so a line
  // the failure tore stays a line of its own, skipped at replay.
  async flush() {
    this.writing = true;
    let retry = false;
    while (this.pending.length || this.waiters.length) {
      const lines = this.pending;
      const waiters = this.waiters;
      this.pending = [];
      this.waiters = [];
      if (!lines.length) {
        // idle()'s waiter: everything appended before it is on disk.
        for (const w of waiters) w.resolve();
        continue;
      }
      const buf = Buffer.from((retry ? '\n' : '') + lines.join(''));
      try {
        await writeAll(this.fd, buf);
        await new Promise((res, rej) => fs.fdatasync(this.fd, (e) => (e ? rej(e) : res())));
        this.size += buf.length;
        retry = false;
        for (const w of waiters) w.resolve();
      } catch (e) {
        metrics.storeErrors++;
        log('journal write failed, retrying:', e.message);
        retry = true;
        this.pending = lines.concat(this.pending);
        this.waiters = waiters.concat(this.waiters);
        await sleep(200);
      }
    }
    this.writing = false;
  }

  idle() {
    if (!this.writing && !this.pending.length) return Promise.resolve();
    return this.append();
  }
}

function writeAll(fd, buf) {
  return new Promise((resolve, reject) => {
    const step = (off) => {
      if (off >= buf.length) return resolve();
      fs.write(fd, buf, off, buf.length - off, null, (e, n) => (e ? reject(e) : step(off + n)));
    };
    step(0);
  });
}

// ---------------------------------------------------------------- state

const metrics = { sent: 0, acked: 0, storeErrors: 0 };

const state = {
  // stream -> {kind, pos, at}: durable cursors (on disk).
  durable: new Map(),
  // messages still owed: key "event|bot" -> message
  pending: new Map(),
  // every (event, bot) ever handed off (queued, delivered or dead)
  handed: new Set(),
  // dead letters: key -> {bot, event, attempts}
  dead: new Map(),
  // backfills not yet finished: id -> {id, stream, kind, bot, from}
  backfills: new Map(),
  // membership entries (in registry order) whose backfill duty is settled
  covered: 0,
  nextBackfill: 1,
  // Snapshot sources: "app|repo" -> Map file -> {version, sure} (what the
  // app holds; sure false: it may hold the file or not), and "app|repo" ->
  // the one change being sent to it (journaled before its first send).
  snapHave: new Map(),
  snapSend: new Map(),
};

const reg = { version: -1, bots: new Map(), memberships: [], streams: new Map() };

const journal = new Journal(cfg.stateDir);

function msgKey(ev, bot) {
  return ev + '|' + bot;
}

function loadJournal() {
  fs.mkdirSync(cfg.stateDir, { recursive: true });
  for (const r of journal.readAll()) {
    switch (r.t) {
      case 'q':
        state.handed.add(r.k);
        if (!state.dead.has(r.k)) state.pending.set(r.k, { ...r, attempts: r.attempts || 0, ready: true });
        break;
      case 'f': {
        const m = state.pending.get(r.k);
        if (m) m.attempts = Math.max(m.attempts, r.attempts);
        break;
      }
      case 'ack':
        state.handed.add(r.k);
        state.pending.delete(r.k);
        break;
      case 'dead':
        state.handed.add(r.k);
        state.pending.delete(r.k);
        state.dead.set(r.k, { bot: r.bot, event: r.ev, attempts: r.attempts });
        break;
      case 'h':
        for (const k of r.keys) state.handed.add(k);
        break;
      case 'cur':
        state.durable.set(r.stream, { kind: r.kind, pos: normPos(r.pos), at: r.at });
        break;
      case 'bf':
        state.backfills.set(r.id, r);
        state.nextBackfill = Math.max(state.nextBackfill, r.id + 1);
        break;
      case 'bfdone':
        state.backfills.delete(r.id);
        break;
      case 'cov':
        state.covered = Math.max(state.covered, r.n);
        break;
      case 'sh':
        snapHaveOf(r.key).set(r.file, { version: r.version, sure: r.sure });
        break;
      case 'shd':
        snapHaveOf(r.key).delete(r.file);
        break;
      case 'ss':
        state.snapSend.set(r.key, r);
        break;
      case 'ssd':
        state.snapSend.delete(r.key);
        break;
      default:
    }
  }
  journal.rewrite(snapshot());
  log(`journal: ${state.pending.size} owed, ${state.dead.size} dead, ${state.durable.size} cursors, ` +
    `${state.backfills.size} backfills, ${state.handed.size} handed off`);
}

// The whole state as journal records (compaction).
function snapshot() {
  const recs = [];
  const done = [];
  for (const k of state.handed) if (!state.pending.has(k) && !state.dead.has(k)) done.push(k);
  for (let i = 0; i < done.length; i += 500) recs.push({ t: 'h', keys: done.slice(i, i + 500) });
  for (const [k, d] of state.dead) recs.push({ t: 'dead', k, bot: d.bot, ev: d.event, attempts: d.attempts });
  for (const m of state.pending.values()) recs.push(queueRecord(m));
  for (const b of state.backfills.values()) recs.push(b);
  for (const [stream, c] of state.durable) recs.push({ t: 'cur', stream, kind: c.kind, pos: c.pos, at: c.at });
  recs.push({ t: 'cov', n: state.covered });
  for (const [key, files] of state.snapHave) {
    for (const [file, h] of files) recs.push({ t: 'sh', key, file, version: h.version, sure: h.sure });
  }
  for (const d of state.snapSend.values()) recs.push(d);
  return recs;
}

function queueRecord(m) {
  return { t: 'q', k: m.k, ev: m.ev, bot: m.bot, stream: m.stream, payload: m.payload, attempts: m.attempts };
}

// Rewrites the journal when it has grown well past its live content.
let compacting = false;
async function maybeCompact() {
  if (compacting || journal.size < 8 << 20) return;
  compacting = true;
  try {
    await journal.idle();
    if (!journal.writing && !journal.pending.length) journal.rewrite(snapshot());
  } catch (e) {
    metrics.storeErrors++;
    log('compaction failed:', e.message);
  } finally {
    compacting = false;
  }
}

// ---------------------------------------------------------------- HTTP client

const pollAgent = new http.Agent({ keepAlive: true, maxSockets: 16 });
const stopping = { now: false };
const openPolls = new Set();

function getJSON(url, timeoutMs) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: pollAgent }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        clearTimeout(timer);
        openPolls.delete(req);
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode !== 200) {
          const e = new Error(`GET ${url}: ${res.statusCode} ${text.trim().slice(0, 200)}`);
          e.status = res.statusCode;
          return reject(e);
        }
        try {
          resolve(JSON.parse(text));
        } catch (e) {
          reject(e);
        }
      });
      res.on('error', reject);
    });
    openPolls.add(req);
    const timer = setTimeout(() => req.destroy(new Error(`GET ${url}: timed out`)), timeoutMs);
    req.on('error', (e) => {
      clearTimeout(timer);
      openPolls.delete(req);
      reject(e);
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- registry

function applyRegistry(doc) {
  if (typeof doc.version !== 'number' || doc.version <= reg.version) return;
  reg.version = doc.version;
  let keyPublished = false;
  for (const b of doc.bots || []) {
    const old = reg.bots.get(b.id);
    if (b.has_key && (!old || !old.has_key)) keyPublished = true;
    reg.bots.set(b.id, { id: b.id, url: b.url, key: Buffer.from(b.secret || '', 'base64'), has_key: !!b.has_key });
  }
  const entries = (doc.memberships || []).map((m) => ({
    stream: m.stream, kind: m.kind, bot: m.bot, from: normPos(m.from), member: m.member !== false,
  }));
  const before = reg.memberships.length;
  reg.memberships = entries;
  for (const e of entries) if (!reg.streams.has(e.stream)) reg.streams.set(e.stream, e.kind);

  // Memberships only grow: entries past `covered` are new to the journal.
  // One starting behind what this stream's reader already handed off owes
  // a backfill; the record is journaled with the `cov` mark after it.
  const recs = [];
  for (let i = state.covered; i < entries.length; i++) {
    const e = entries[i];
    const r = readers.get(e.stream);
    const seen = r ? r.handled : (state.durable.get(e.stream) || {}).pos;
    if (e.member && seen && cmpPos(e.from, seen) < 0) {
      const b = { t: 'bf', id: state.nextBackfill++, stream: e.stream, kind: e.kind, bot: e.bot, from: e.from };
      state.backfills.set(b.id, b);
      recs.push(b);
      log(`backfill ${b.id}: ${e.bot} on ${e.stream} from ${JSON.stringify(e.from)}`);
    }
  }
  if (entries.length > state.covered) {
    state.covered = entries.length;
    recs.push({ t: 'cov', n: entries.length });
    journal.append(...recs);
    for (const b of recs) if (b.t === 'bf') startBackfill(b);
  }
  for (const [stream, kind] of reg.streams) if (!readers.has(stream)) startReader(stream, kind);
  if (keyPublished || entries.length !== before) schedulePump();
  for (const w of regWaiters.splice(0)) w();
}

const regWaiters = [];

async function waitRegistry(version) {
  while (reg.version < version && !stopping.now) {
    await new Promise((r) => {
      regWaiters.push(r);
      setTimeout(r, 1000);
    });
    if (reg.version < version) {
      try {
        applyRegistry(await getJSON(`${cfg.registry}/v1/registry`, 5000));
      } catch (e) {
        log('registry:', e.message);
      }
    }
  }
}

async function registryLoop() {
  while (!stopping.now) {
    try {
      applyRegistry(await getJSON(`${cfg.registry}/v1/registry?after=${reg.version}&wait=${cfg.longPoll}`, 40000));
    } catch (e) {
      if (stopping.now) return;
      log('registry poll:', e.message);
      await sleep(200);
    }
  }
}

// For an event at `pos`, the last entry for (stream, bot) with from < pos
// decides.
function membersAt(stream, pos) {
  const last = new Map();
  for (const e of reg.memberships) {
    if (e.stream !== stream) continue;
    if (cmpPos(e.from, pos) < 0) last.set(e.bot, e.member);
  }
  const out = [];
  for (const [bot, member] of last) if (member) out.push(bot);
  return out;
}

// ---------------------------------------------------------------- upstream readers

const readers = new Map();

function startReader(stream, kind) {
  const cur = state.durable.get(stream);
  const r = { stream, kind, handled: cur ? cur.pos : null };
  readers.set(stream, r);
  readLoop(r).catch((e) => log(`reader ${stream} died:`, e.stack));
}

function startQuery(r) {
  const cur = state.durable.get(r.stream);
  const froms = reg.memberships.filter((e) => e.stream === r.stream).map((e) => e.from);
  froms.sort(cmpPos);
  const first = froms[0] || { major: 0, minor: 0, id: '' };
  if (cur && BUG === 'head-if-stale' && Date.now() - cur.at > 5000) {
    // Planted bug: a cursor older than 5 s is deemed useless.
    log(`${r.stream}: cursor is ${Date.now() - cur.at} ms old, resuming from the head`);
    return 'from=head';
  }
  if (cur && BUG === 'resume-from-start') {
    // Planted bug: a restart reads the stream from its start.
    return r.kind === 'timestamp' ? 'since=0' : 'after=0.0';
  }
  if (r.kind === 'timestamp') {
    const ms = cur ? cur.pos.major : first.major;
    return `since=${Math.max(0, ms - cfg.lookback)}`;
  }
  const p = cur ? cur.pos : first;
  return `after=${p.major}.${p.minor}`;
}

async function readLoop(r) {
  let query = startQuery(r);
  if (!r.handled && r.kind === 'log' && query.startsWith('after=')) {
    const [M, m] = query.slice(6).split('.').map(Number);
    r.handled = { major: M, minor: m, id: '' };
  }
  log(`reader ${r.stream} (${r.kind}): ${query}`);
  while (!stopping.now) {
    let ans;
    try {
      ans = await getJSON(`${cfg.upstream}/v1/streams/${encodeURIComponent(r.stream)}/events?${query}&wait=${cfg.longPoll}`, 40000);
    } catch (e) {
      if (stopping.now) return;
      log(`reader ${r.stream}:`, e.message);
      await sleep(e.status === 404 ? 1000 : 200);
      continue;
    }
    if (typeof ans.registry_version === 'number') await waitRegistry(ans.registry_version);
    if (stopping.now) return;
    handOffBatch(r, ans.events || []);
    query = `next=${ans.next}`;
  }
}

// Hands off one answer's events to every member at each event's position,
// then moves the cursor to the highest position handed off, in the same
// journal write.
function handOffBatch(r, events) {
  if (!events.length) return;
  const recs = [];
  const fresh = [];
  let top = r.handled;
  for (const ev of events) {
    const pos = eventPos(r.kind, ev);
    for (const bot of membersAt(r.stream, pos)) {
      const m = enqueue(r.stream, ev, bot);
      if (m) {
        recs.push(queueRecord(m));
        fresh.push(m);
      }
    }
    if (!top || cmpPos(pos, top) > 0) top = pos;
  }
  r.handled = top;
  const cur = { t: 'cur', stream: r.stream, kind: r.kind, pos: top, at: Date.now() };
  if (BUG === 'cursor-before-queue') {
    // Planted bug: the cursor is committed now, the messages only when
    // their first attempt is answered (they live in memory until then).
    for (const m of fresh) {
      m.volatile = true;
      m.ready = true;
    }
    journal.append(cur).then(() => setDurable(cur));
    schedulePump();
    return;
  }
  // A message is sent only once its `q` line is on disk, and with it the
  // cursor that covers it: a bot never handles an event the durable
  // cursor (as /v1/observe reports it) has not reached.
  journal.append(...recs, cur).then(() => {
    setDurable(cur);
    markReady(fresh);
  });
}

function markReady(msgs) {
  for (const m of msgs) m.ready = true;
  if (msgs.length) schedulePump();
}

function setDurable(cur) {
  const old = state.durable.get(cur.stream);
  if (!old || cmpPos(cur.pos, old.pos) >= 0) state.durable.set(cur.stream, { kind: cur.kind, pos: cur.pos, at: cur.at });
  maybeCompact();
}

function enqueue(stream, ev, bot) {
  const k = msgKey(ev.id, bot);
  if (state.handed.has(k)) return null;
  state.handed.add(k);
  const m = { k, ev: ev.id, bot, stream, payload: ev.payload, attempts: 0, ready: false };
  state.pending.set(k, m);
  return m;
}

// ---------------------------------------------------------------- backfill

function startBackfill(b) {
  backfillLoop(b).catch((e) => log(`backfill ${b.id} died:`, e.stack));
}

// Reads the stream again from the membership's `from`, without waiting,
// until an answer holds no event: beyond that the live reader (which has
// the membership applied) covers the bot. Events already handed off to
// the bot are skipped; no other member is sent anything.
async function backfillLoop(b) {
  const from = normPos(b.from);
  let query = b.kind === 'timestamp' ? `since=${Math.max(0, from.major)}` : `after=${from.major}.${from.minor}`;
  while (!stopping.now) {
    let ans;
    try {
      ans = await getJSON(`${cfg.upstream}/v1/streams/${encodeURIComponent(b.stream)}/events?${query}`, 20000);
    } catch (e) {
      if (stopping.now) return;
      log(`backfill ${b.id}:`, e.message);
      await sleep(200);
      continue;
    }
    if (typeof ans.registry_version === 'number') await waitRegistry(ans.registry_version);
    const events = ans.events || [];
    const recs = [];
    const fresh = [];
    for (const ev of events) {
      const pos = eventPos(b.kind, ev);
      if (cmpPos(pos, from) <= 0) continue;
      if (!membersAt(b.stream, pos).includes(b.bot)) continue;
      const m = enqueue(b.stream, ev, b.bot);
      if (m) {
        recs.push(queueRecord(m));
        fresh.push(m);
      }
    }
    if (!events.length) {
      await journal.append({ t: 'bfdone', id: b.id });
      state.backfills.delete(b.id);
      log(`backfill ${b.id} done`);
      return;
    }
    if (recs.length) journal.append(...recs).then(() => markReady(fresh));
    query = `next=${ans.next}`;
  }
}

// ---------------------------------------------------------------- delivery

const inflight = new Map(); // bot -> count
const inflightReqs = new Set();
let pumpScheduled = false;
let wakeTimer = null;
let wakeAt = Infinity;

function schedulePump() {
  if (pumpScheduled || stopping.now) return;
  pumpScheduled = true;
  setImmediate(pump);
}

function pump() {
  pumpScheduled = false;
  if (stopping.now) return;
  const now = Date.now();
  let next = Infinity;
  const full = new Set();
  for (const m of state.pending.values()) {
    if (m.inflight || !m.ready || full.has(m.bot)) continue;
    const bot = reg.bots.get(m.bot);
    if (!bot || !bot.has_key) continue; // held until the key is published
    if (m.nextAt && m.nextAt > now) {
      if (m.nextAt < next) next = m.nextAt;
      continue;
    }
    // Planted ignore-in-flight-limit: its own number, whatever is declared.
    if ((inflight.get(m.bot) || 0) >= (BUG === 'ignore-in-flight-limit' ? 8 : cfg.maxInFlight)) {
      full.add(m.bot);
      continue;
    }
    send(m, bot);
  }
  if (next < Infinity && next < wakeAt) {
    if (wakeTimer) clearTimeout(wakeTimer);
    wakeAt = next;
    wakeTimer = setTimeout(() => {
      wakeTimer = null;
      wakeAt = Infinity;
      schedulePump();
    }, Math.max(1, next - now));
  }
}

function sign(key, id, ts, body) {
  const h = crypto.createHmac('sha256', key);
  h.update(`${id}.${ts}.`);
  h.update(body);
  return 'v1,' + h.digest('base64');
}

function signedBody(body) {
  if (BUG !== 'reserialise-signature') return body;
  // Planted bug: signs the payload as JSON re-serialised, not the bytes sent.
  try {
    return Buffer.from(JSON.stringify(JSON.parse(body.toString('utf8'))));
  } catch (_) {
    return body;
  }
}

function send(m, bot) {
  m.inflight = true;
  inflight.set(m.bot, (inflight.get(m.bot) || 0) + 1);
  postWebhook(bot, m.ev, Buffer.from(m.payload || '', 'base64'), (status) => {
    m.inflight = false;
    inflight.set(m.bot, inflight.get(m.bot) - 1);
    if (stopping.now) return; // abandoned: not an attempt we learned of
    outcome(m, status);
    schedulePump();
  });
}

// Signs and POSTs one webhook; done(status) once, status 0 for a refused,
// reset or timed-out request.
function postWebhook(bot, id, body, done) {
  const ts = Math.floor(Date.now() / 1000);
  let finished = false;
  let req = null;
  let timer = null;
  const finish = (status) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    inflightReqs.delete(req);
    done(status);
  };
  try {
    req = http.request(bot.url, {
      method: 'POST',
      agent: false,
      headers: {
        'content-type': 'application/json',
        'content-length': body.length,
        'webhook-id': id,
        'webhook-timestamp': String(ts),
        'webhook-signature': sign(bot.key, id, ts, signedBody(body)),
      },
    }, (res) => {
      res.resume();
      finish(res.statusCode);
    });
  } catch (e) {
    // A malformed URL: a failed attempt, like a refused connection.
    log(`send ${id}:`, e.message);
    setImmediate(() => finish(0));
    return;
  }
  metrics.sent++;
  inflightReqs.add(req);
  const sentAt = Date.now();
  timer = setTimeout(() => {
    // Timers run before the loop reads sockets: after a stall (a loaded
    // machine descheduling the process) an answer may already be waiting.
    // Give the I/O phase one turn to read it before calling it a timeout.
    setImmediate(() => {
      if (finished) return;
      const late = Date.now() - sentAt;
      if (late > 2 * cfg.webhookTimeout) log(`webhook timeout for ${id} noticed after ${late} ms`);
      req.destroy(new Error('webhook timeout'));
    });
  }, cfg.webhookTimeout);
  req.on('error', () => finish(0));
  req.end(body);
}

// status 0: refused, reset or timed out.
function outcome(m, status) {
  if (status >= 200 && status < 300) {
    metrics.acked += BUG === 'overcount-acked' ? 2 : 1; // planted: each 2xx counted twice
    state.pending.delete(m.k);
    const recs = m.volatile ? [queueRecord(m), { t: 'ack', k: m.k }] : [{ t: 'ack', k: m.k }];
    journal.append(...recs);
    return;
  }
  if (BUG === 'retry-gone' && status === 410) {
    // Planted bug: 410 is taken for a passing outage and never counted.
    m.nextAt = Date.now() + backoff(1);
    return;
  }
  m.attempts++;
  const limit = BUG === 'dead-early' ? cfg.maxAttempts - 1 : cfg.maxAttempts;
  const recs = [];
  if (m.volatile) {
    recs.push(queueRecord(m));
    m.volatile = false;
  }
  if (PERMANENT.has(status) || m.attempts >= limit) {
    state.pending.delete(m.k);
    state.dead.set(m.k, { bot: m.bot, event: m.ev, attempts: m.attempts });
    recs.push({ t: 'dead', k: m.k, bot: m.bot, ev: m.ev, attempts: m.attempts });
  } else {
    m.nextAt = Date.now() + backoff(m.attempts);
    recs.push({ t: 'f', k: m.k, attempts: m.attempts });
  }
  journal.append(...recs);
}

function backoff(attempts) {
  if (BUG === 'no-backoff') return 0; // planted: retried at once
  const base = Math.min(cfg.maxBackoff, cfg.initialBackoff * Math.pow(cfg.multiplier, attempts - 1));
  return base + Math.random() * cfg.jitter * base;
}

// ---------------------------------------------------------------- snapshot sources

// PROTOCOL.md "Snapshot sources": each app is sent, one change at a time
// per repository, what takes it from its own delivered state
// (state.snapHave) to the repository's latest state. A change is journaled
// before its first send and retried under the same webhook-id until a 2xx
// (which applies it) or max attempts; the app may then hold the file or
// not (sure: false), so the next change of it is a CREATE or a DELETE,
// never an UPDATE of a file it may never have had.

const snap = { states: new Map(), reads: new Map(), workers: new Set(), waiters: [] };
const SNAP_WAIT = '5s'; // a repository's long poll: the rescan that retries a change given up

function snapHaveOf(key) {
  if (!state.snapHave.has(key)) state.snapHave.set(key, new Map());
  return state.snapHave.get(key);
}

// Whose delivered state an app's changes are computed from.
function snapBase(app, repo) {
  return (BUG === 'snapshot-shared-baseline' ? '' : app) + '|' + repo; // planted: one per repository
}

function snapWake() {
  for (const w of snap.waiters.splice(0)) w();
}

async function snapListLoop() {
  const pollers = new Set();
  while (!stopping.now) {
    try {
      const ans = await getJSON(`${cfg.upstream}/v1/repos`, 40000);
      for (const repo of ans.repos || []) {
        if (pollers.has(repo)) continue;
        pollers.add(repo);
        snapPoll(repo).catch((e) => log(`repo ${repo} died:`, e.stack));
      }
    } catch (e) {
      if (e.status !== 404) log('repos:', e.message); // 404: no repositories (yet)
    }
    await sleep(5000);
  }
}

async function snapPoll(repo) {
  const url = `${cfg.upstream}/v1/repos/${encodeURIComponent(repo)}`;
  let after = null;
  while (!stopping.now) {
    let ans;
    try {
      ans = await getJSON(url + (after === null ? '' : `?after=${after}&wait=${SNAP_WAIT}`), 40000);
    } catch (e) {
      if (stopping.now) return;
      log(`repo ${repo}:`, e.message);
      await sleep(500);
      continue;
    }
    after = ans.version;
    snap.states.set(repo, new Map((ans.items || []).map((i) => [i.id, i.version])));
    snap.reads.set(repo, (snap.reads.get(repo) || 0) + 1);
    for (const app of ans.apps || []) {
      const key = app + '|' + repo;
      if (snap.workers.has(key)) continue;
      snap.workers.add(key);
      snapWork(app, repo).catch((e) => log(`snapshot ${key} died:`, e.stack));
    }
    snapWake();
  }
}

// The next change for an app, from its delivered state, or null.
function snapNext(app, repo) {
  const have = snapHaveOf(snapBase(app, repo));
  const cur = snap.states.get(repo);
  const files = [...new Set([...have.keys(), ...cur.keys()])].sort();
  for (const file of files) {
    const h = have.get(file);
    if (cur.has(file) && (!h || !h.sure)) return { op: 'CREATE', file, version: cur.get(file) };
    if (cur.has(file) && h.version !== cur.get(file)) return { op: 'UPDATE', file, version: cur.get(file) };
    if (!cur.has(file)) return { op: 'DELETE', file, version: null };
  }
  return null;
}

// Applies a change to the delivered state; returns its journal record.
function snapApply(app, repo, c, sure) {
  const key = snapBase(app, repo);
  if (c.op === 'DELETE' && sure) {
    snapHaveOf(key).delete(c.file);
    return { t: 'shd', key, file: c.file };
  }
  snapHaveOf(key).set(c.file, { version: c.version, sure });
  return { t: 'sh', key, file: c.file, version: c.version, sure };
}

// The change to send next: one resumed from the journal, or one decided
// now and journaled before it is sent.
async function snapClaim(app, repo, givenUpAt) {
  const key = app + '|' + repo;
  if (state.snapSend.has(key)) return state.snapSend.get(key);
  if (!snap.states.has(repo) || givenUpAt === snap.reads.get(repo)) return null;
  for (;;) {
    const c = snapNext(app, repo);
    if (!c) return null;
    if (c.op === 'DELETE' && BUG === 'snapshot-skip-deletes') {
      journal.append(snapApply(app, repo, c, true)); // planted: taken as delivered, never sent
      continue;
    }
    const d = { t: 'ss', key, app, repo, op: c.op, file: c.file, version: c.version, wid: 'snap-' + crypto.randomUUID(), attempts: 0 };
    state.snapSend.set(key, d);
    await journal.append(d);
    return d;
  }
}

async function snapWork(app, repo) {
  let givenUpAt = null;
  while (!stopping.now) {
    const bot = reg.bots.get(app);
    const d = bot ? await snapClaim(app, repo, givenUpAt) : null;
    if (!d) {
      await new Promise((r) => {
        snap.waiters.push(r);
        setTimeout(r, 1000);
      });
      continue;
    }
    const change = { source: repo, op: d.op, id: d.file };
    if (d.op !== 'DELETE') change.version = d.version;
    const status = await new Promise((r) => postWebhook(bot, d.wid, Buffer.from(JSON.stringify(change)), r));
    if (stopping.now) return;
    if (status >= 200 && status < 300) {
      metrics.acked++;
      state.snapSend.delete(d.key);
      journal.append(snapApply(app, repo, d, true), { t: 'ssd', key: d.key });
      continue;
    }
    d.attempts++;
    if (d.attempts >= cfg.maxAttempts) {
      // Given up: sent again (a CREATE or a DELETE) once the repository is
      // read again.
      state.snapSend.delete(d.key);
      journal.append(snapApply(app, repo, d, false), { t: 'ssd', key: d.key });
      givenUpAt = snap.reads.get(repo);
      continue;
    }
    journal.append(d);
    await sleep(Math.min(cfg.maxBackoff, cfg.initialBackoff * Math.pow(cfg.multiplier, d.attempts - 1)));
  }
}

// ---------------------------------------------------------------- observation

function parseListen(s) {
  if (!s) return null;
  if (/^[a-z]+:\/\//i.test(s)) {
    const u = new URL(s);
    return { host: u.hostname || '127.0.0.1', port: Number(u.port) || 0 };
  }
  const i = s.lastIndexOf(':');
  if (i < 0) return { host: '127.0.0.1', port: Number(s) };
  return { host: s.slice(0, i).replace(/^\[|\]$/g, '') || '127.0.0.1', port: Number(s.slice(i + 1)) };
}

function serveObservation() {
  const addr = parseListen(cfg.listen);
  if (!addr) return null;
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (req.method === 'GET' && url.pathname === '/v1/observe') {
      // The main readings' cursors; a pending backfill is left out
      // (PROTOCOL.md allows either), so a settle that ends while its
      // last record is being written does not see a cursor behind.
      const cursors = [...state.durable].map(([stream, c]) => ({ stream, pos: c.pos }));
      const body = JSON.stringify({
        cursors,
        dead_letters: [...state.dead.values()],
        queue_depth: state.pending.size,
      });
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(body);
    }
    if (req.method === 'GET' && url.pathname === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      return res.end(
        '# TYPE deliverysim_engine_acked_total counter\n' +
        `deliverysim_engine_acked_total ${metrics.acked}\n` +
        '# TYPE deliverysim_engine_sent_total counter\n' +
        `deliverysim_engine_sent_total ${metrics.sent}\n` +
        '# TYPE deliverysim_engine_store_errors_total counter\n' +
        `deliverysim_engine_store_errors_total ${metrics.storeErrors}\n`);
    }
    res.writeHead(404);
    res.end();
  });
  server.listen(addr.port, addr.host, () => log(`listening on ${addr.host}:${server.address().port}`));
  return server;
}

// ---------------------------------------------------------------- main

async function main() {
  // The handlers first: a SIGTERM while the journal loads still exits 0
  // (Node's default for it is to die by the signal).
  let server = null;
  let terminating = false;
  const shutdown = async (sig) => {
    if (terminating) return;
    terminating = true;
    log(`${sig}: shutting down`);
    stopping.now = true;
    // `chaos --smoke` wants the exit within 3 s, a run within 15 s.
    setTimeout(() => process.exit(0), 2000).unref();
    for (const req of inflightReqs) req.destroy(new Error('shutdown'));
    for (const req of openPolls) req.destroy(new Error('shutdown'));
    try {
      await journal.idle();
    } catch (_) {
      // abandoned: the journal keeps what reached the disk
    }
    if (server) server.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  loadJournal();
  server = serveObservation();

  // The registry first: it names the streams and who is owed what.
  // Backfills from the journal start after it (those it adds start there).
  const journaled = [...state.backfills.values()];
  for (;;) {
    try {
      applyRegistry(await getJSON(`${cfg.registry}/v1/registry`, 5000));
      break;
    } catch (e) {
      log('registry:', e.message);
      await sleep(200);
    }
  }
  for (const b of journaled) startBackfill(b);
  registryLoop();
  snapListLoop();
  schedulePump();
  if (BUG) log(`planted bug: ${BUG}`);
}

main().catch((e) => {
  log('fatal:', e.stack);
  process.exit(1);
});
