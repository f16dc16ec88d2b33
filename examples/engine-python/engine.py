#!/usr/bin/env python3
"""An example delivery engine for the deliverysim protocol (runtime/PROTOCOL.md).

Written from PROTOCOL.md, README.md and `deliverysim chaos --help` alone (stdlib
and SQLite) to show that an engine that is not the reference can be certified.
Design: every (bot, event) a stream follower sees is inserted into one SQLite
table in the same transaction that moves the stream's durable cursor, so the
cursor never passes an event that is not handed off. Senders claim rows, sign
and POST them, mark a row delivered only after a 2xx, and retry with backoff
until max attempts, when the row becomes a dead letter. After SIGKILL the
process resumes from the cursors and rows in its database. DSIM_PY_BUG plants
a known bug (README.md) so that tests can show the harness catches each one.
"""
import argparse, base64, hashlib, hmac, json, os, random, re, signal, sqlite3
import sys, tempfile, threading, time, urllib.error, urllib.parse, urllib.request, uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BUG = os.environ.get("DSIM_PY_BUG", "")
BUGS = ("", "cursor-before-queue", "no-retry", "reserialise-signature", "ignore-key",
        "retry-forever", "requeue-replays", "stale-secret", "resume-from-head", "ignore-leave",
        "retry-gone", "head-if-stale", "dead-early",
        "no-backoff", "ignore-in-flight-limit", "overcount-acked", "resume-from-start",
        "snapshot-skip-deletes", "snapshot-shared-baseline")
POLL = "10s"  # long-poll wait; the servers bound it anyway


def duration(text):  # a Go duration ("500ms", "1m0s", "2s") in seconds
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"([0-9.]+)(ns|us|µs|ms|s|m|h)", text)
    if text != "0" and "".join(a + b for a, b in parts) != text:
        raise ValueError(f"bad duration {text!r} (want e.g. 500ms, 2s, 1m0s)")
    return sum(float(n) * units[u] for n, u in parts)


def settings(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("upstream", "registry", "listen", "dsn", "schema", "node"):
        p.add_argument("--" + flag, default="")
    # Each setting is a flag or DELIVERYSIM_<FLAG> in the environment; the
    # defaults are those `deliverysim chaos -h` lists.
    spec = {"max-attempts": (int, "8"), "initial-backoff": (duration, "100ms"),
            "max-backoff": (duration, "1s"), "backoff-multiplier": (float, "2"),
            "jitter": (float, "0.3"), "webhook-timeout": (duration, "500ms"),
            "max-in-flight-per-bot": (int, "8"), "timestamp-lookback": (duration, "5s")}
    for flag, (conv, dflt) in spec.items():
        env = "DELIVERYSIM_" + flag.upper().replace("-", "_")
        if conv is duration and os.environ.get(env + "_MS"):  # chaos declares durations in ms
            dflt = os.environ[env + "_MS"] + "ms"
        p.add_argument("--" + flag, default=os.environ.get(env, dflt))
    a, _unknown = p.parse_known_args(argv)
    for flag, (conv, _) in spec.items():
        key = flag.replace("-", "_")
        try:
            setattr(a, key, conv(getattr(a, key)))
        except ValueError as e:
            p.exit(2, f"engine.py: --{flag}: {e}\n")
    if not a.upstream or not a.registry:
        p.exit(2, "engine.py: --upstream and --registry are required (deliverysim chaos passes them)\n")
    if BUG not in BUGS:
        p.exit(2, f"engine.py: DSIM_PY_BUG={BUG!r} is not one of {', '.join(BUGS[1:])}\n")
    return a


def get_json(url, timeout):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def pos_of(p):
    return (int(p.get("major", 0)), int(p.get("minor", 0)), p.get("id", "") or "")


class Engine:
    def __init__(self, cfg, stopping):
        self.cfg = cfg
        # chaos gives file-keeping engines DELIVERYSIM_STATE_DIR (kept across
        # restarts, removed with the run); older harnesses give nothing.
        path = os.environ.get("DSIM_PY_DB") or os.path.join(
            os.environ.get("DELIVERYSIM_STATE_DIR") or tempfile.gettempdir(),
            f"dsim-py-{cfg.schema or 'default'}.sqlite")
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript("""
          CREATE TABLE IF NOT EXISTS cursor(stream TEXT PRIMARY KEY, major INT, minor INT, id TEXT);
          CREATE TABLE IF NOT EXISTS msg(bot TEXT, stream TEXT, eid TEXT, major INT, minor INT,
            pid TEXT, payload BLOB, attempts INT DEFAULT 0, next_at REAL, state TEXT,
            PRIMARY KEY(bot, stream, eid));
          CREATE INDEX IF NOT EXISTS msg_due ON msg(state, bot, next_at);
          CREATE TABLE IF NOT EXISTS seen(stream TEXT, bot TEXT, major INT, minor INT, id TEXT,
            member INT, PRIMARY KEY(stream, bot, major, minor, id, member));
          CREATE TABLE IF NOT EXISTS backfill(stream TEXT, bot TEXT, major INT, minor INT, id TEXT,
            PRIMARY KEY(stream, bot, major, minor, id));
          CREATE TABLE IF NOT EXISTS first_secret(bot TEXT PRIMARY KEY, secret BLOB); -- stale-secret
          CREATE TABLE IF NOT EXISTS cursor_at(stream TEXT PRIMARY KEY, at REAL); -- head-if-stale
          -- Snapshot sources: what each app holds of each repository (sure=0:
          -- it may hold the file or not, a change's answer was never learned),
          -- and the one change being sent to it, written before its first send.
          CREATE TABLE IF NOT EXISTS snap_have(app TEXT, repo TEXT, file TEXT, version TEXT, sure INT,
            PRIMARY KEY(app, repo, file));
          CREATE TABLE IF NOT EXISTS snap_send(app TEXT, repo TEXT, file TEXT, op TEXT, version TEXT,
            wid TEXT, attempts INT, PRIMARY KEY(app, repo));""")
        self.lock = threading.RLock()        # guards the connection and the registry view
        self.wake = threading.Condition(self.lock)
        self.bots, self.members, self.kinds, self.version = {}, {}, {}, -1
        self.followers, self.backfills = set(), set()
        self.inflight, self.per_bot = set(), {}
        self.pool = ThreadPoolExecutor(max_workers=64)
        self.stopping = stopping
        self.counters = dict.fromkeys(("sent", "acked", "failed", "dead_lettered", "enqueued"), 0)
        self.memory = []                     # cursor-before-queue: hand-offs not yet written

    # --- registry -------------------------------------------------------
    def registry_loop(self):
        while not self.stopping.is_set():
            q = "" if self.version < 0 else f"?after={self.version}&wait={POLL}"
            try:
                self.apply_registry(get_json(self.cfg.registry + "/v1/registry" + q, 40))
            except Exception as e:  # the registry may be briefly away: ask again
                log(f"registry: {e}")
                time.sleep(0.2)

    def catch_up(self, ans):
        # Who is owed these events is decided by the registry they were produced
        # under: read it now if the long poll has not brought it yet.
        if (ans.get("registry_version") or -1) > self.version:
            self.apply_registry(get_json(self.cfg.registry + "/v1/registry", 40))

    def apply_registry(self, ans):
        with self.lock:
            if ans["version"] < self.version:
                return  # an older answer that raced a newer one
            self.version = ans["version"]
            for b in ans.get("bots") or []:
                secret = base64.b64decode(b["secret"])
                self.db.execute("INSERT OR IGNORE INTO first_secret VALUES(?,?)", (b["id"], secret))
                self.bots[b["id"]] = {"url": b["url"], "secret": secret, "has_key": b.get("has_key", False)}
            members = {}
            for m in ans.get("memberships") or []:
                self.kinds[m["stream"]] = m.get("kind", "log")
                members.setdefault(m["stream"], {}).setdefault(m["bot"], []).append(
                    (pos_of(m["from"]), bool(m.get("member", True))))
            self.members = members
            self.db.execute("BEGIN")
            for s, per in members.items():
                cur = self.cursor(s)
                for bot, entries in per.items():
                    for frm, member in entries:
                        if self.db.execute("INSERT OR IGNORE INTO seen VALUES(?,?,?,?,?,?)",
                                           (s, bot, *frm, member)).rowcount and member \
                                and cur is not None and frm < cur:
                            # A join from behind what this stream already handed off:
                            # replay from its start for it, durably (a kill may come first).
                            self.db.execute("INSERT OR IGNORE INTO backfill VALUES(?,?,?,?,?)", (s, bot, *frm))
            self.db.execute("COMMIT")
            for s in members:
                if s not in self.followers:
                    self.followers.add(s)
                    threading.Thread(target=self.follow, args=(s,), daemon=True).start()
            for row in self.db.execute("SELECT stream, major, minor, id FROM backfill").fetchall():
                if row not in self.backfills:
                    self.backfills.add(row)
                    threading.Thread(target=self.backfill, args=row, daemon=True).start()
            self.wake.notify_all()

    def member(self, stream, bot, pos):
        for frm, member in reversed(self.members.get(stream, {}).get(bot, [])):
            if frm < pos:
                return member or BUG == "ignore-leave"  # planted: every entry read as a join
        return False

    def cursor(self, stream):
        row = self.db.execute("SELECT major, minor, id FROM cursor WHERE stream=?", (stream,)).fetchone()
        return tuple(row) if row else None

    # --- upstream -------------------------------------------------------
    def start_query(self, stream, pos):
        if self.kinds[stream] == "timestamp":
            back = int(self.cfg.timestamp_lookback * 1000)
            return f"since={pos[0] - back}"
        return f"after={pos[0]}.{pos[1]}"

    def follow(self, stream):
        base = f"{self.cfg.upstream}/v1/streams/{urllib.parse.quote(stream, safe='')}/events?"
        with self.lock:
            resumed = self.cursor(stream) is not None
        while not self.stopping.is_set():
            with self.lock:
                cur = self.cursor(stream)
                froms = [f for es in self.members[stream].values() for f, m in es if m]
                if cur is None and froms:
                    # No cursor yet: start where the earliest membership starts, so
                    # nothing a member is owed was produced before the subscription.
                    cur = min(froms)
                    self.db.execute("INSERT INTO cursor VALUES(?,?,?,?)", (stream, *cur))
            if cur is None:
                time.sleep(0.2)
                continue
            url = base + self.start_query(stream, cur)
            if BUG == "resume-from-head" and resumed:
                url = base + "from=head"  # planted: a restart forgets where it was
            if BUG == "head-if-stale":
                with self.lock:
                    at = self.db.execute("SELECT at FROM cursor_at WHERE stream=?", (stream,)).fetchone()
                if at and time.time() - at[0] > 5:
                    url = base + "from=head"  # planted: a cursor older than 5 s is deemed useless
            if BUG == "resume-from-start" and resumed:  # planted: a restart replays everything
                url = base + ("since=0" if self.kinds[stream] == "timestamp" else "after=0.0")
            resumed = True
            try:
                while not self.stopping.is_set():
                    ans = get_json(url + f"&wait={POLL}", 40)
                    self.catch_up(ans)
                    self.hand_off(stream, ans.get("events") or [], advance=True)
                    url = base + f"next={ans['next']}"
            except Exception as e:  # resubscribe from the durable cursor
                log(f"stream {stream}: {e}")
                time.sleep(0.2)

    def backfill(self, stream, major, minor, eid):
        base = f"{self.cfg.upstream}/v1/streams/{urllib.parse.quote(stream, safe='')}/events?"
        url = base + (f"since={major}" if self.kinds.get(stream) == "timestamp" else f"after={major}.{minor}")
        while not self.stopping.is_set():
            try:
                ans = get_json(url, 40)
                evs = ans.get("events") or []
                if not evs:  # caught up with the upstream: the follower has the rest
                    with self.lock:
                        self.db.execute("DELETE FROM backfill WHERE stream=? AND major=? AND minor=? AND id=?",
                                        (stream, major, minor, eid))
                    return
                self.catch_up(ans)
                self.hand_off(stream, evs, advance=False)
                url = base + f"next={ans['next']}"
            except Exception as e:
                log(f"backfill {stream}: {e}")
                time.sleep(0.2)

    def hand_off(self, stream, events, advance):
        if BUG == "cursor-before-queue" and advance:
            return self.hand_off_buggy(stream, events)
        with self.lock:
            cur = self.cursor(stream)
            kind = self.kinds[stream]
            self.db.execute("BEGIN")
            top = cur
            for ev in events:
                pos = pos_of(ev["pos"])
                if advance and kind == "log" and cur is not None and pos <= cur \
                        and BUG != "requeue-replays":
                    continue  # the upstream replays a little before a resume point
                payload = base64.b64decode(ev.get("payload") or "")
                # Only a row dropped when its bot left is queued again (a rejoin from
                # behind it owes it again). Planted requeue-replays: any row is.
                only = "" if BUG == "requeue-replays" else "WHERE state='left'"
                for bot in self.bots:
                    if self.member(stream, bot, pos):
                        n = self.db.execute(
                            "INSERT INTO msg VALUES(?,?,?,?,?,?,?,0,0,'q') ON CONFLICT(bot, stream, eid) "
                            f"DO UPDATE SET state='q', attempts=0, next_at=0, payload=excluded.payload {only}",
                            (bot, stream, ev["id"], pos[0], pos[1], pos[2], payload)).rowcount
                        self.counters["enqueued"] += n
                top = pos if top is None or pos > top else top
            if advance and top is not None and top != cur:
                self.db.execute("INSERT OR REPLACE INTO cursor VALUES(?,?,?,?)", (stream, *top))
                if BUG == "head-if-stale":
                    self.db.execute("INSERT OR REPLACE INTO cursor_at VALUES(?,?)", (stream, time.time()))
            self.db.execute("COMMIT")
            self.wake.notify_all()

    def hand_off_buggy(self, stream, events):
        # Planted: the cursor is written as soon as a batch is read; its rows are
        # buffered in memory and written with the next batch. A kill loses them.
        with self.lock:
            top = max([pos_of(e["pos"]) for e in events] + [self.cursor(stream)])
            self.db.execute("INSERT OR REPLACE INTO cursor VALUES(?,?,?,?)", (stream, *top))
            pending, self.memory = self.memory, [(stream, events)]
            for s, evs in pending:
                self.hand_off(s, evs, advance=False)

    # --- delivery -------------------------------------------------------
    def dispatch_loop(self):
        while not self.stopping.is_set():
            with self.lock:
                now = time.time()
                for bot, b in self.bots.items():
                    if not b["has_key"] and BUG != "ignore-key":
                        continue  # held: queued, not sent, until the key is published
                    busy = self.per_bot.get(bot, 0)
                    limit = self.cfg.max_in_flight_per_bot
                    if BUG == "ignore-in-flight-limit":
                        limit = 8  # planted: its own number, whatever was declared
                    free = limit - busy
                    rows = self.db.execute(
                        "SELECT stream, eid, major, minor, pid, payload, attempts FROM msg "
                        "WHERE state='q' AND bot=? AND next_at<=? ORDER BY next_at, major, minor LIMIT ?",
                        (bot, now, free + busy)).fetchall()
                    for stream, eid, major, minor, pid, payload, attempts in rows:
                        key = (bot, stream, eid)
                        if key in self.inflight or free <= 0:
                            continue
                        if not self.member(stream, bot, (major, minor, pid)):
                            # The bot left from before this event: it is owed nothing.
                            self.db.execute("UPDATE msg SET state='left' WHERE bot=? AND stream=? AND eid=?", key)
                            continue
                        self.inflight.add(key)
                        self.per_bot[bot] = self.per_bot.get(bot, 0) + 1
                        free -= 1
                        self.pool.submit(self.send, key, payload, attempts)
                self.wake.wait(0.05)

    def sign(self, bot, eid, ts, body):
        secret = self.bots[bot]["secret"]
        if BUG == "stale-secret":  # planted: the first secret ever seen, kept across restarts
            secret = self.db.execute("SELECT secret FROM first_secret WHERE bot=?", (bot,)).fetchone()[0]
        if BUG == "reserialise-signature":
            try:
                body = json.dumps(json.loads(body)).encode()
            except ValueError:
                pass
        mac = hmac.new(secret, f"{eid}.{ts}.".encode() + body, hashlib.sha256).digest()
        return "v1," + base64.b64encode(mac).decode()

    def send(self, key, payload, attempts):
        bot, stream, eid = key
        try:
            with self.lock:  # the registry's current URL and secret (moves, rotations)
                url, ts = self.bots[bot]["url"], str(int(time.time()))
                sig = self.sign(bot, eid, ts, payload)
                self.counters["sent"] += 1
            req = urllib.request.Request(url, data=payload, method="POST", headers={
                "webhook-id": eid, "webhook-timestamp": ts, "webhook-signature": sig,
                "content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=self.cfg.webhook_timeout) as r:
                ok = 200 <= r.status < 300
        except urllib.error.HTTPError as e:  # a non-2xx answer: a failed attempt
            ok, gone = False, e.code == 410
        except Exception:  # refused, timed out: a failed attempt
            ok, gone = False, False
        else:
            gone = False
        with self.lock:
            # Planted retry-gone: a 410 is taken for a passing outage and not counted.
            self.finish(key, ok, attempts + (0 if gone and BUG == "retry-gone" else 1))
            self.inflight.discard(key)
            self.per_bot[bot] -= 1
            self.wake.notify_all()

    def finish(self, key, ok, attempts):
        cfg = self.cfg
        self.counters["acked" if ok else "failed"] += 1
        if ok and BUG == "overcount-acked":
            self.counters["acked"] += 1  # planted: each 2xx counted twice
        if ok or BUG == "no-retry":
            # Delivered (or, planted, given up on its first failure as if it were).
            self.db.execute("UPDATE msg SET state='done', payload=NULL, attempts=? "
                            "WHERE bot=? AND stream=? AND eid=? AND state='q'", (attempts, *key))
            return
        # Planted dead-early: gives up one attempt before max attempts.
        limit = cfg.max_attempts - 1 if BUG == "dead-early" else cfg.max_attempts
        dead = attempts >= limit and BUG != "retry-forever"
        self.counters["dead_lettered"] += dead
        wait = min(cfg.initial_backoff * cfg.backoff_multiplier ** (attempts - 1), cfg.max_backoff)
        wait += wait * cfg.jitter * random.random()
        if BUG == "no-backoff":
            wait = 0  # planted: retried at once
        self.db.execute("UPDATE msg SET attempts=?, next_at=?, state=? WHERE bot=? AND stream=? AND eid=?",
                        (attempts, time.time() + wait, "dead" if dead else "q", *key))

    # --- observation ----------------------------------------------------
    def observe(self):
        """PROTOCOL.md "Observation": durable cursors, dead letters, queue depth."""
        with self.lock:
            cursors = [{"stream": s, "pos": {"major": a, "minor": b, "id": i}}
                       for s, a, b, i in self.db.execute("SELECT stream, major, minor, id FROM cursor")]
            dead = [{"bot": b, "event": e, "attempts": n} for b, e, n in
                    self.db.execute("SELECT bot, eid, attempts FROM msg WHERE state='dead'")]
            depth = self.db.execute("SELECT count(*) FROM msg WHERE state='q'").fetchone()[0]
        return json.dumps({"cursors": cursors, "dead_letters": dead, "queue_depth": depth})

    def metrics(self):  # the names chaos looks for: deliverysim_engine_{sent,acked}_total
        with self.lock:
            lines = [f"deliverysim_engine_{k}_total {v}" for k, v in self.counters.items()]
        return "\n".join(lines) + "\n"


class Snapshots:
    """PROTOCOL.md "Snapshot sources": each app is sent, one change at a time,
    what takes it from its own delivered state (snap_have) to the repository's
    latest state. A change is written to snap_send before its first send and
    retried under the same webhook-id until a 2xx (which applies it to
    snap_have in the same transaction) or max attempts (the app may then hold
    the file or not: sure=0, so the next change of it is a CREATE or a DELETE,
    never an UPDATE of a file it may never have had)."""
    WAIT = "5s"  # a repository's long poll: the rescan that retries a change given up

    def __init__(self, engine):
        self.e = engine
        self.states, self.reads, self.workers = {}, {}, set()

    def base(self, app):  # whose delivered state a change is computed from
        return "" if BUG == "snapshot-shared-baseline" else app  # planted: one per repository

    def list_loop(self):
        pollers = set()
        while not self.e.stopping.is_set():
            try:
                for repo in get_json(self.e.cfg.upstream + "/v1/repos", 40).get("repos") or []:
                    if repo not in pollers:
                        pollers.add(repo)
                        threading.Thread(target=self.poll, args=(repo,), daemon=True).start()
            except urllib.error.HTTPError as e:
                if e.code != 404:  # 404: this upstream has no repositories (yet)
                    log(f"repos: {e}")
            except Exception as e:
                log(f"repos: {e}")
            self.e.stopping.wait(5)

    def poll(self, repo):
        url, after = f"{self.e.cfg.upstream}/v1/repos/{urllib.parse.quote(repo, safe='')}", None
        while not self.e.stopping.is_set():
            try:
                ans = get_json(url + ("" if after is None else f"?after={after}&wait={self.WAIT}"), 40)
            except Exception as e:
                log(f"repo {repo}: {e}")
                time.sleep(0.5)
                continue
            after = ans["version"]
            with self.e.lock:
                self.states[repo] = {i["id"]: i["version"] for i in ans.get("items") or []}
                self.reads[repo] = self.reads.get(repo, 0) + 1
                for app in ans.get("apps") or []:
                    if (app, repo) not in self.workers:
                        self.workers.add((app, repo))
                        threading.Thread(target=self.work, args=(app, repo), daemon=True).start()
                self.e.wake.notify_all()

    def next_change(self, app, repo):
        have = {f: (v, sure) for f, v, sure in self.e.db.execute(
            "SELECT file, version, sure FROM snap_have WHERE app=? AND repo=?", (self.base(app), repo))}
        cur = self.states[repo]
        for f in sorted(set(have) | set(cur)):
            h = have.get(f)
            if f in cur and (h is None or not h[1]):
                return "CREATE", f, cur[f]
            if f in cur and h[0] != cur[f]:
                return "UPDATE", f, cur[f]
            if f not in cur:
                return "DELETE", f, None
        return None

    def applied(self, app, repo, op, f, version):
        if op == "DELETE":
            self.e.db.execute("DELETE FROM snap_have WHERE app=? AND repo=? AND file=?", (self.base(app), repo, f))
        else:
            self.e.db.execute("INSERT OR REPLACE INTO snap_have VALUES(?,?,?,?,1)", (self.base(app), repo, f, version))

    def claim(self, app, repo, given_up_at):
        """The change to send next (resumed after a restart, or decided now), or None."""
        row = self.e.db.execute("SELECT file, op, version, wid, attempts FROM snap_send WHERE app=? AND repo=?",
                                (app, repo)).fetchone()
        if row or given_up_at == self.reads.get(repo):
            return row  # after a give-up, nothing new until the repository is read again
        while True:
            ch = self.next_change(app, repo)
            if ch is None:
                return None
            op, f, version = ch
            if op == "DELETE" and BUG == "snapshot-skip-deletes":
                self.applied(app, repo, op, f, version)  # planted: taken as delivered, never sent
                continue
            row = (f, op, version, "snap-" + uuid.uuid4().hex, 0)
            self.e.db.execute("INSERT INTO snap_send VALUES(?,?,?,?,?,?,?)", (app, repo, *row))
            return row

    def work(self, app, repo):
        given_up_at = None
        while not self.e.stopping.is_set():
            with self.e.lock:
                row = self.claim(app, repo, given_up_at) if app in self.e.bots else None
                if row is None:
                    self.e.wake.wait(1)
                    continue
                f, op, version, wid, attempts = row
                body = {"source": repo, "op": op, "id": f}
                if version is not None:
                    body["version"] = version
                body = json.dumps(body).encode()
                url, ts = self.e.bots[app]["url"], str(int(time.time()))
                sig = self.e.sign(app, wid, ts, body)
                self.e.counters["sent"] += 1
            req = urllib.request.Request(url, data=body, method="POST", headers={
                "webhook-id": wid, "webhook-timestamp": ts, "webhook-signature": sig,
                "content-type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.e.cfg.webhook_timeout) as r:
                    ok = 200 <= r.status < 300
            except Exception:  # a non-2xx answer, refused, timed out: a failed attempt
                ok = False
            wait = 0
            with self.e.lock:
                self.e.db.execute("BEGIN")
                if ok:
                    self.e.counters["acked"] += 1
                    self.applied(app, repo, op, f, version)
                    self.e.db.execute("DELETE FROM snap_send WHERE app=? AND repo=?", (app, repo))
                elif attempts + 1 >= self.e.cfg.max_attempts:
                    # Given up: the app may hold the file or not. Sent again (a CREATE or
                    # a DELETE) once the repository is read again.
                    self.e.db.execute("DELETE FROM snap_send WHERE app=? AND repo=?", (app, repo))
                    self.e.db.execute("INSERT OR REPLACE INTO snap_have VALUES(?,?,?,?,0)",
                                      (self.base(app), repo, f, version))
                    given_up_at = self.reads.get(repo)
                else:
                    self.e.db.execute("UPDATE snap_send SET attempts=? WHERE app=? AND repo=?",
                                      (attempts + 1, app, repo))
                    cfg = self.e.cfg
                    wait = min(cfg.initial_backoff * cfg.backoff_multiplier ** attempts, cfg.max_backoff)
                self.e.db.execute("COMMIT")
            if wait:
                self.e.stopping.wait(wait)


def log(msg):  # chaos keeps the tail of the engine's stderr in its report
    print(f"engine.py: {msg}", file=sys.stderr, flush=True)


def serve_http(engine, listen):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            pages = {"/metrics": (engine.metrics, "text/plain; version=0.0.4"),
                     "/v1/observe": (engine.observe, "application/json"),
                     "/healthz": (lambda: "ok\n", "text/plain"), "/readyz": (lambda: "ok\n", "text/plain")}
            page, ctype = pages.get(self.path.split("?")[0], (None, ""))
            if page is None:
                return self.send_error(404)
            body = page().encode()
            self.send_response(200)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet: chaos keeps the engine's stderr
            pass

    host, _, port = (listen or "127.0.0.1:0").rpartition(":")
    srv = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()


def main():
    stopping = threading.Event()  # first: a SIGTERM during start-up still exits 0
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    cfg = settings(sys.argv[1:])
    engine = Engine(cfg, stopping)
    serve_http(engine, cfg.listen)
    threading.Thread(target=engine.registry_loop, daemon=True).start()
    threading.Thread(target=engine.dispatch_loop, daemon=True).start()
    threading.Thread(target=Snapshots(engine).list_loop, daemon=True).start()
    engine.stopping.wait()
    # Drain: requests in flight finish (their answers recorded) before exit.
    deadline = time.time() + cfg.webhook_timeout + 1
    while engine.inflight and time.time() < deadline:
        time.sleep(0.02)
    os._exit(0)


if __name__ == "__main__":
    main()
