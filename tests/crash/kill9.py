#!/usr/bin/env python3
"""Crash-consistency check for Warren's durable message store.

Publishes persistent messages (delivery_mode=2) with publisher confirms while a consumer
takes them with manual acks, SIGKILLs the broker at a random moment of every round,
restarts it on the same data directory, and after the last round drains the queue. Then:

  lost        = confirmed numbers never received in any round or the drain   (must be 0)
  unexpected  = received bodies that were never published                    (must be 0)
  duplicates  = numbers received more than once   (allowed: acks and deliveries that did
                not reach the disk before the kill come back; counted and printed)

It also fails if the durable queue is missing after a restart, or if nothing at all was
confirmed (the run would prove nothing). The last line is `1 passed, 0 failed` or
`0 passed, 1 failed`.

  python tests/crash/kill9.py --warren target/release/warren [--rounds 20]
      [--seconds-per-round 1.5] [--port auto] [--data-dir DIR] [--seed N]
  python tests/crash/kill9.py --broker-cmd 'path/to/broker --port {port} --dir {data_dir}'
  python tests/crash/kill9.py --no-kill --url amqp://guest:guest@127.0.0.1:5682/%2F

Needs pika; when it is missing the script re-runs itself with tests/interop/.venv/bin/python.
See tests/crash/README.md.
"""

import argparse
import atexit
import collections
import logging
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(HERE, "..", "interop", ".venv")
VENV_PY = os.path.join(VENV, "bin", "python")

try:
    import pika
    import pika.exceptions
except ImportError:  # re-run with the interop suite's venv, which has pika
    if os.path.exists(VENV_PY) and os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])
    sys.stderr.write("kill9: needs pika (pip install -r tests/interop/requirements.txt)\n")
    sys.exit(2)

# pika logs every lost connection at ERROR; losing connections is the point here.
logging.getLogger("pika").addHandler(logging.NullHandler())
logging.getLogger("pika").propagate = False

START_TIMEOUT_S = 15.0  # broker must accept connections within this after (re)start (--start-timeout)
JOIN_TIMEOUT_S = 15.0  # client threads must finish within this after a round ends


def log(msg):
    print(msg, flush=True)


# ------------------------------------------------------------------------------ cleanup


class Cleanup:
    """Kills the broker and removes temp dirs, once, from atexit, signals or the watchdog."""

    def __init__(self):
        self.lock = threading.Lock()
        self.broker = None
        self.tmp_dirs = []
        self.done = False

    def run(self):
        with self.lock:
            if self.done:
                return
            self.done = True
            if self.broker is not None:
                self.broker.kill(quiet=True)
            for d in self.tmp_dirs:
                shutil.rmtree(d, ignore_errors=True)


CLEANUP = Cleanup()


def fail_now(msg):
    """Unrecoverable: report, clean up and exit from any thread."""
    log(f"kill9: FAIL: {msg}")
    if CLEANUP.broker is not None:
        CLEANUP.broker.print_log_tail()
    log("0 passed, 1 failed")
    CLEANUP.run()
    os._exit(1)


class Watchdog:
    """Turns any hang (a blocking pika call that never returns, a broker that never comes
    back) into a clear failure instead of a stuck test run."""

    def __init__(self):
        self.cond = threading.Condition()
        self.deadline = None
        self.what = None
        threading.Thread(target=self._run, name="watchdog", daemon=True).start()

    def arm(self, seconds, what):
        with self.cond:
            self.deadline = time.monotonic() + seconds
            self.what = f"{what} (>{seconds:.0f}s)"
            self.cond.notify()

    def disarm(self):
        with self.cond:
            self.deadline = None
            self.cond.notify()

    def _run(self):
        with self.cond:
            while True:
                if self.deadline is None:
                    self.cond.wait()
                    continue
                left = self.deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
        fail_now(f"timed out: {self.what}")


# ------------------------------------------------------------------------------ broker


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, cmd_template, port, data_dir, log_path):
        self.cmd_template = cmd_template
        self.port = port
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc = None
        self.starts = 0

    def argv(self):
        cmd = self.cmd_template.format(port=self.port, data_dir=shlex.quote(self.data_dir))
        return shlex.split(cmd)

    def start(self):
        if self.accepting():
            fail_now(f"port {self.port} already accepts connections before start "
                     f"#{self.starts + 1}: another process is listening there")
        self.starts += 1
        with open(self.log_path, "ab") as f:
            f.write(f"\n===== kill9: start #{self.starts}: {shlex.join(self.argv())}\n".encode())
            f.flush()
            # Own session so the kill reaches a wrapper script's children too.
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                start_new_session=True, env=dict(os.environ, NO_COLOR="1"))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                fail_now(f"broker exited with status {self.proc.returncode} during start #{self.starts}")
            if self.accepting():
                return
            time.sleep(0.05)
        fail_now(f"broker did not accept connections on port {self.port} within "
                 f"{START_TIMEOUT_S:.0f}s of start #{self.starts}")

    def accepting(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def kill(self, quiet=False):
        """SIGKILL the broker: its process group and every descendant (a wrapper like `su`
        may put the real broker in a session of its own), then make sure the port is dead."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        pids = descendants(p.pid)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in [p.pid] + pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            if not quiet:
                fail_now(f"broker pid {p.pid} still alive 10s after SIGKILL")
        if quiet:
            return
        deadline = time.monotonic() + 10
        while self.accepting():
            if time.monotonic() > deadline:
                fail_now(f"port {self.port} still accepts connections 10s after the SIGKILL: the "
                         "kill did not reach the broker (does the broker command daemonize?)")
            time.sleep(0.05)

    def print_log_tail(self, lines=30):
        try:
            with open(self.log_path, "rb") as f:
                text = re.sub(r"\x1b\[[0-9;]*m", "", f.read().decode(errors="replace"))
                tail = text.splitlines()[-lines:]
        except OSError:
            return
        log(f"--- last {len(tail)} lines of the broker log ({self.log_path}):")
        for line in tail:
            log("    " + line)


def descendants(root):
    """All live descendants of `root`, from /proc (Linux)."""
    children = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children[ppid].append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


# ------------------------------------------------------------------------------ bookkeeping


class Book:
    """Everything the clients saw, across all rounds. One lock; the clients are slow enough."""

    def __init__(self):
        self.lock = threading.Lock()
        self.next_n = 1
        self.published = set()  # numbers handed to basic_publish (confirmed or not)
        self.confirmed = set()  # basic_publish returned normally in confirm mode
        self.nacked = 0
        self.unroutable = 0
        self.seen = collections.Counter()  # number -> deliveries
        self.deliveries = 0
        self.unexpected = []  # bodies that are not a published number
        self.redelivered_flag_missing = 0  # a repeat delivery with redelivered=False

    def take_number(self):
        with self.lock:
            n = self.next_n
            self.next_n += 1
            self.published.add(n)
            return n

    def confirm(self, n):
        with self.lock:
            self.confirmed.add(n)

    def received(self, body, redelivered):
        with self.lock:
            self.deliveries += 1
            try:
                n = int(body)
            except ValueError:
                self.unexpected.append(body[:40])
                return
            if n in self.seen and not redelivered:
                self.redelivered_flag_missing += 1
            self.seen[n] += 1


def describe(exc):
    if exc is None:
        return "-"
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text[:80]}" if text else type(exc).__name__


def connect_until(params, stop):
    """Connect, retrying for up to the start timeout (the broker may still be starting)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            return pika.BlockingConnection(params)
        except pika.exceptions.AMQPError:
            if stop.is_set() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Publisher(threading.Thread):
    def __init__(self, params, queue, book, stop):
        super().__init__(name="publisher", daemon=True)
        self.params, self.queue, self.book, self.stop = params, queue, book, stop
        self.published = self.confirmed = 0
        self.error = None
        self.error_at = None

    def run(self):
        conn = None
        try:
            conn = connect_until(self.params, self.stop)
            ch = conn.channel()
            ch.confirm_delivery()
            props = pika.BasicProperties(delivery_mode=2)
            while not self.stop.is_set():
                n = self.book.take_number()
                self.published += 1
                try:
                    # mandatory: a message the broker drops as unroutable is not "confirmed"
                    ch.basic_publish("", self.queue, b"%d" % n, props, mandatory=True)
                except pika.exceptions.UnroutableError:
                    self.book.unroutable += 1
                    continue
                except pika.exceptions.NackError:
                    self.book.nacked += 1
                    continue
                self.book.confirm(n)
                self.confirmed += 1
        except Exception as e:  # connection lost: the broker was killed
            self.error, self.error_at = e, time.monotonic()
        finally:
            close_quietly(conn)


class Consumer(threading.Thread):
    """Starts `delay` seconds into the round (so a backlog builds up and has to survive the
    kill) and acks with multiple=true every `ack_every` messages (so some recorded messages
    are unacked at the kill and come back as duplicates)."""

    def __init__(self, params, queue, book, stop, prefetch, delay, ack_every):
        super().__init__(name="consumer", daemon=True)
        self.params, self.queue, self.book, self.stop = params, queue, book, stop
        self.prefetch, self.delay, self.ack_every = prefetch, delay, ack_every
        self.deliveries = 0
        self.started = False
        self.error = None
        self.error_at = None

    def run(self):
        conn = None
        try:
            if self.stop.wait(self.delay):
                return
            self.started = True
            conn = connect_until(self.params, self.stop)
            ch = conn.channel()
            ch.basic_qos(prefetch_count=self.prefetch)
            last_tag, pending = 0, 0
            for method, props, body in ch.consume(self.queue, inactivity_timeout=0.1):
                if self.stop.is_set():
                    # this delivery is neither recorded nor acked: it goes back to the queue
                    if pending:
                        ch.basic_ack(last_tag, multiple=True)
                    break
                if method is not None:
                    # record first, then ack: a number is "received" once the client has it
                    self.book.received(body, method.redelivered)
                    self.deliveries += 1
                    last_tag, pending = method.delivery_tag, pending + 1
                if pending and (pending >= self.ack_every or method is None):
                    ch.basic_ack(last_tag, multiple=True)
                    pending = 0
            ch.cancel()  # unrecorded prefetched messages go back to the queue
        except Exception as e:
            self.error, self.error_at = e, time.monotonic()
        finally:
            close_quietly(conn)


def close_quietly(conn):
    if conn is None:
        return
    try:
        if conn.is_open:
            conn.close()
    except Exception:
        pass


def queue_check(params, queue):
    """Message count of the queue, or None if it does not exist (it is then re-declared so
    the run can go on and count what else was lost)."""
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        try:
            return ch.queue_declare(queue, passive=True).method.message_count
        except pika.exceptions.ChannelClosedByBroker as e:
            if e.reply_code != 404:
                raise
        ch = conn.channel()
        declare(ch, queue)
        return None
    finally:
        close_quietly(conn)


# Set from --lazy: a lazy queue keeps persistent messages on disk only (paged back on delivery).
QUEUE_ARGS = {}


def declare(ch, queue):
    ch.queue_declare(queue, durable=True, exclusive=False, auto_delete=False,
                     arguments=QUEUE_ARGS)


def drain(params, queue, book):
    """Consume until the queue stays empty for ~1 s and a passive declare says 0 ready."""
    conn = pika.BlockingConnection(params)
    n = 0
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        while True:
            for method, props, body in ch.consume(queue, inactivity_timeout=1.0):
                if method is None:
                    break
                book.received(body, method.redelivered)
                n += 1
                ch.basic_ack(method.delivery_tag)
            ch.cancel()
            if ch.queue_declare(queue, passive=True).method.message_count == 0:
                return n
    finally:
        close_quietly(conn)


def ranges(numbers, limit=12):
    """[1,2,3,7,9,10] -> '1-3, 7, 9-10' (first `limit` ranges)."""
    out, nums = [], sorted(numbers)
    i = 0
    while i < len(nums) and len(out) < limit:
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    more = " ..." if i < len(nums) else ""
    return ", ".join(out) + more


# ------------------------------------------------------------------------------ main


def parse_args():
    p = argparse.ArgumentParser(
        description="kill -9 the broker while publishing persistent messages with confirms "
                    "and consuming with manual acks; check that nothing confirmed is lost.")
    p.add_argument("--warren", help="path to the warren binary (started as "
                   "'WARREN server --bind 127.0.0.1 --amqp-port PORT --data-dir DIR')")
    p.add_argument("--broker-cmd", help="broker command line instead of --warren; "
                   "{port} and {data_dir} are substituted")
    p.add_argument("--url", help="use an already running broker at this AMQP URL "
                   "(only with --no-kill; nothing is started)")
    p.add_argument("--no-kill", action="store_true",
                   help="end rounds by stopping the clients instead of killing the broker "
                        "(checks the bookkeeping itself)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--seconds-per-round", type=float, default=1.5)
    p.add_argument("--port", default="auto", help="AMQP port for the started broker (default: a free one)")
    p.add_argument("--data-dir", help="broker data dir (default: a temp dir, removed at exit; "
                   "a given dir is kept)")
    p.add_argument("--seed", type=int, help="seed for the kill moments (default: random, printed)")
    p.add_argument("--start-timeout", type=float, default=START_TIMEOUT_S,
                   help="seconds the broker gets to accept connections after each (re)start")
    p.add_argument("--queue", default="crash-test")
    p.add_argument("--prefetch", type=int, default=50)
    p.add_argument("--lazy", action="store_true",
                   help="declare the queue with x-queue-mode=lazy (messages paged to disk)")
    a = p.parse_args()
    if a.url:
        if not a.no_kill:
            p.error("--url is a broker this script did not start and cannot kill: add --no-kill")
        if a.warren or a.broker_cmd:
            p.error("--url excludes --warren/--broker-cmd")
    elif not (a.warren or a.broker_cmd):
        p.error("one of --warren, --broker-cmd or --url (with --no-kill) is required")
    if a.warren and a.broker_cmd:
        p.error("--warren and --broker-cmd are exclusive")
    if a.rounds < 1 or a.seconds_per_round <= 0:
        p.error("--rounds must be >= 1 and --seconds-per-round > 0")
    return a


def main():
    global START_TIMEOUT_S
    args = parse_args()
    if args.lazy:
        QUEUE_ARGS["x-queue-mode"] = "lazy"
    START_TIMEOUT_S = args.start_timeout
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    atexit.register(CLEANUP.run)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: fail_now(f"interrupted by signal {s}"))
    wd = Watchdog()

    broker = None
    if args.url:
        params = pika.URLParameters(args.url)
        where = args.url
    else:
        tmp = tempfile.mkdtemp(prefix="warren-kill9-")
        CLEANUP.tmp_dirs.append(tmp)
        data_dir = os.path.abspath(args.data_dir) if args.data_dir else os.path.join(tmp, "data")
        os.makedirs(data_dir, exist_ok=True)
        port = free_port() if args.port == "auto" else int(args.port)
        template = args.broker_cmd or (
            shlex.quote(os.path.abspath(args.warren))
            + " server --bind 127.0.0.1 --amqp-port {port} --data-dir {data_dir}"
            + " --management-port 0 --prometheus-port 0")
        broker = Broker(template, port, data_dir, os.path.join(tmp, "broker.log"))
        CLEANUP.broker = broker
        params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/%2F")
        where = f"{shlex.join(broker.argv())}"
    params.heartbeat = 10
    params.socket_timeout = 5
    params.stack_timeout = 10
    params.blocked_connection_timeout = 10
    params.connection_attempts = 1

    mode = "no-kill" if args.no_kill else "kill -9"
    log(f"kill9: {args.rounds} rounds x {args.seconds_per_round}s, {mode}, seed {seed}, "
        f"queue {args.queue!r}, prefetch {args.prefetch}")
    log(f"kill9: broker: {where}")

    if broker:
        wd.arm(START_TIMEOUT_S + 5, "first broker start")
        broker.start()
    wd.arm(START_TIMEOUT_S, "declaring the queue")
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_delete(args.queue)  # leftovers of an earlier run would count as unexpected
    declare(ch, args.queue)
    close_quietly(conn)
    wd.disarm()

    book = Book()
    failures = []
    missing_queue_rounds = []
    kill_times = []
    t_start = time.monotonic()
    for r in range(1, args.rounds + 1):
        stop = threading.Event()
        pub = Publisher(params, args.queue, book, stop)
        delay = 0.0 if rng.random() < 0.5 else rng.uniform(0.2, 1.0) * args.seconds_per_round
        ack_every = rng.choice([1, 5, min(25, args.prefetch)])
        con = Consumer(params, args.queue, book, stop, args.prefetch, delay, ack_every)
        t0 = time.monotonic()
        pub.start()
        con.start()
        if args.no_kill:
            time.sleep(args.seconds_per_round)
            stop.set()
            killed_at = float("inf")
            end = "stopped"
        else:
            kill_at = rng.uniform(0.05, 1.0) * args.seconds_per_round
            time.sleep(max(0.0, kill_at - (time.monotonic() - t0)))
            t_kill = time.monotonic() - t0
            wd.arm(15, f"round {r}: killing the broker")
            killed_at = time.monotonic()
            broker.kill()
            stop.set()
            kill_times.append(t_kill)
            end = f"killed at {t_kill:.2f}s"
        wd.arm(JOIN_TIMEOUT_S + 1, f"round {r}: client threads to finish")
        for t in (pub, con):
            t.join(JOIN_TIMEOUT_S)
            if t.is_alive():
                fail_now(f"round {r}: {t.name} thread stuck after the round ended")
        after = ""
        if not args.no_kill:
            wd.arm(START_TIMEOUT_S + 5, f"round {r}: broker restart")
            broker.start()
            wd.arm(START_TIMEOUT_S, f"round {r}: checking the queue after restart")
            count = queue_check(params, args.queue)
            if count is None:
                missing_queue_rounds.append(r)
                after = ", QUEUE MISSING after restart (re-declared)"
            else:
                after = f", {count} ready after restart"
        wd.disarm()
        # Without a kill no client may fail; with one, only after the SIGKILL went out.
        early = [t for t in (pub, con) if t.error is not None
                 and (args.no_kill or t.error_at < killed_at)]
        errs = "".join(f" [{t.name} failed before the round ended: {describe(t.error)}]" for t in early)
        consumer = (f"consumer from {delay:.2f}s acking every {ack_every}" if con.started
                    else "consumer did not start")
        log(f"round {r:2d}: {end}, published {pub.published}, confirmed {pub.confirmed}, "
            f"delivered {con.deliveries} ({consumer}){after}{errs}")
        if early:
            failures.append(f"round {r}: {', '.join(t.name for t in early)} failed before the round ended")

    wd.arm(max(60.0, len(book.published) / 500.0), "draining the queue")
    drained = drain(params, args.queue, book)
    if args.url:
        try:
            conn = pika.BlockingConnection(params)
            conn.channel().queue_delete(args.queue)
            close_quietly(conn)
        except Exception:
            pass
    wd.disarm()
    elapsed = time.monotonic() - t_start

    # ---------------------------------------------------------------- verdict
    seen = set(book.seen)
    lost = book.confirmed - seen
    unexpected_nums = seen - book.published
    unexpected = len(unexpected_nums) + len(book.unexpected)
    dups = {n: c for n, c in book.seen.items() if c > 1}
    extra = sum(c - 1 for c in dups.values())
    unconfirmed_seen = len((seen & book.published) - book.confirmed)

    log(f"drain: {drained} messages")
    if kill_times:
        log("kill times (s into round): " + " ".join(f"{t:.2f}" for t in kill_times))
    log(f"published {len(book.published)}, confirmed {len(book.confirmed)}, "
        f"nacked {book.nacked}, unroutable {book.unroutable}, "
        f"deliveries {book.deliveries}, received-unique {len(seen)} "
        f"(of which {unconfirmed_seen} published but unconfirmed), {elapsed:.1f}s")
    log(f"duplicates: {len(dups)} numbers delivered more than once ({extra} extra deliveries)"
        + (f", max {max(dups.values())}x" if dups else ""))
    if book.redelivered_flag_missing:
        log(f"note: {book.redelivered_flag_missing} repeat deliveries had redelivered=false")
    if lost:
        log(f"LOST {len(lost)} confirmed messages: {ranges(lost)}")
        failures.append(f"{len(lost)} confirmed messages lost")
    if unexpected:
        log(f"UNEXPECTED {unexpected} received: {ranges(unexpected_nums)} "
            f"{book.unexpected[:5] if book.unexpected else ''}")
        failures.append(f"{unexpected} unexpected messages")
    if missing_queue_rounds:
        failures.append(f"durable queue missing after restart in rounds {missing_queue_rounds}")
    if not book.confirmed:
        failures.append("nothing was confirmed; the run proves nothing")

    log(f"kill9: {args.rounds} rounds, {len(book.confirmed)} confirmed, {len(lost)} lost, "
        f"{unexpected} unexpected, {len(dups)} duplicates")
    if failures:
        for f in failures:
            log(f"kill9: FAIL: {f}")
        if broker:
            broker.print_log_tail(15)
        log("0 passed, 1 failed")
        return 1
    log("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    try:
        rc = main()
    except SystemExit:
        raise
    except BaseException as e:  # a client call failed outside the rounds
        import traceback
        traceback.print_exc()
        fail_now(f"unexpected error: {describe(e)}")
    CLEANUP.run()
    sys.exit(rc)
