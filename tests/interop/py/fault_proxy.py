"""A fault-injecting TCP proxy in front of every cluster node's cluster port (our equivalent of
Toxiproxy, run inside the test process): each node advertises the proxy's port for it, so
every cluster connection — Raft, forwarding links, the failure detector's — crosses the proxy,
which knows both ends of it (a node in a network namespace is told apart by its source
address). Faults apply to one pair of nodes, or to one direction of a pair:

- `cut(a, b)`: nothing crosses between a and b in either direction; connections stay open and
  silent (no reset, as when packets are dropped), a new connection between them is accepted
  by the proxy and then hangs (a half-open connection for the dialer); `heal(a, b)` lets the
  held bytes through and new connections reach their node. With `cut` of two pairs out of
  three one node is isolated; with one pair, the third node is a bridge both halves see;
- `cut(a, b, one_way=True)`: only a's bytes to b are held; b's to a flow (an asymmetric fault:
  a hears b, b stops hearing a);
- `delay(a, b, ms)`: every read between a and b waits `ms` before it is passed on (order
  kept; what arrives meanwhile goes with the next read, so a byte waits `ms` to 2 `ms`);
- `reset(a)`: every connection of a is closed with a TCP reset (both sides see the error).

Bytes are held, never dropped: TCP never delivers a stream with a hole in it, so a healed
connection carries on where it stopped (or the node gave up on it and dialled again).
"""
import asyncio
import socket
import struct
import threading


class _Pipe:
    """One proxied connection: `dialer` connected to `target` through the proxy."""

    def __init__(self, dialer, target, client_writer):
        self.dialer = dialer
        self.target = target
        self.writers = [client_writer]


class FaultProxy:
    """`targets[i]` = (host, port) of node i's cluster port; `source_node(ip)` names the node a
    connection comes from. Listens on `listen_host`, one port per node (`port(i)`)."""

    def __init__(self, listen_host, targets, source_node):
        self.listen_host = listen_host
        self.targets = targets
        self.source_node = source_node
        self._ports = {}
        # (from, to) held directions, and delays per unordered pair.
        self._held = set()
        self._delay_ms = {}
        self._pipes = set()
        self._changed = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="fault-proxy")
        self._servers = []

    # -- control, from the test's thread --------------------------------------------------

    def start(self):
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def close(self):
        async def stop():
            for server in self._servers:
                server.close()
            for pipe in list(self._pipes):
                for writer in pipe.writers:
                    writer.close()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def port(self, i):
        return self._ports[i]

    def cut(self, a, b, one_way=False):
        self._call(self._set_held, [(a, b)] if one_way else [(a, b), (b, a)], True)

    def heal(self, a=None, b=None):
        """Heals the pair a-b (both directions), or with no arguments every cut and delay."""
        if a is None:
            self._call(self._clear)
        else:
            self._call(self._set_held, [(a, b), (b, a)], False)

    def delay(self, a, b, ms):
        self._call(self._set_delay, frozenset((a, b)), ms)

    def reset(self, node):
        self._call(self._reset, node)

    def _call(self, fn, *args):
        async def run():
            fn(*args)
        asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    # -- the proxy's own loop -------------------------------------------------------------

    def _set_held(self, directions, held):
        for d in directions:
            (self._held.add if held else self._held.discard)(d)
        self._wake()

    def _set_delay(self, pair, ms):
        if ms:
            self._delay_ms[pair] = ms
        else:
            self._delay_ms.pop(pair, None)

    def _clear(self):
        self._held.clear()
        self._delay_ms.clear()
        self._wake()

    def _wake(self):
        # Every waiting pump looks again at what it may pass.
        self._changed.set()
        self._changed = asyncio.Event()

    def _reset(self, node):
        for pipe in list(self._pipes):
            if node in (pipe.dialer, pipe.target):
                for writer in pipe.writers:
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        # SO_LINGER 0: close sends a reset.
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                        struct.pack("ii", 1, 0))
                    writer.transport.abort()

    async def _listen(self):
        self._changed = asyncio.Event()
        for i in self.targets:
            server = await asyncio.start_server(
                lambda r, w, i=i: self._accept(r, w, i), self.listen_host, 0)
            self._servers.append(server)
            self._ports[i] = server.sockets[0].getsockname()[1]

    async def _passable(self, source, target):
        while (source, target) in self._held:
            await self._changed.wait()

    async def _accept(self, reader, writer, target):
        dialer = self.source_node(writer.get_extra_info("peername")[0])
        if dialer is None:
            writer.close()
            return
        pipe = _Pipe(dialer, target, writer)
        self._pipes.add(pipe)
        try:
            # A connection made while the pair is cut hangs here, accepted and silent.
            await self._passable(dialer, target)
            await self._passable(target, dialer)
            host, port = self.targets[target]
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
            except OSError:
                return
            pipe.writers.append(up_writer)
            await asyncio.gather(
                self._pump(reader, up_writer, dialer, target),
                self._pump(up_reader, writer, target, dialer),
                return_exceptions=True)
        finally:
            self._pipes.discard(pipe)
            for w in pipe.writers:
                w.close()

    async def _pump(self, reader, writer, source, target):
        """Passes `source`'s bytes to `target`, holding them while that direction is cut and
        delaying them by the pair's delay."""
        pair = frozenset((source, target))
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                delay_ms = self._delay_ms.get(pair)
                if delay_ms:
                    await asyncio.sleep(delay_ms / 1000.0)
                await self._passable(source, target)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # One side ended: the other is ended too, as a proxied connection would be.
            writer.close()
