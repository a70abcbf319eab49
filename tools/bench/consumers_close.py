#!/usr/bin/env python3
"""Times how long a broker takes to release many consumers at connection close (issue 30).

One connection, one channel, N consumers on one queue (basic.consume one after another),
then connection.close: the time to close-ok is the broker cancelling every consumer (since
8ec7e14 Warren releases the channels before close-ok, as rabbit_reader does). A queue-wide
structure that forgets each consumer in O(n) makes this quadratic.

Usage: tools/bench/consumers_close.py AMQP_URL N [N ...]
  prints "N consumers: consume S s, close S s" per N (needs pika: tests/interop/.venv).
"""

import sys
import time

import pika


def run(url: str, n: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    queue = f"consumers-close-{n}"
    ch.queue_declare(queue, auto_delete=False)
    started = time.monotonic()
    for i in range(n):
        ch.basic_consume(queue, lambda *a: None, consumer_tag=f"c{i}")
    consumed = time.monotonic() - started
    started = time.monotonic()
    conn.close()
    closed = time.monotonic() - started
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_delete(queue)
    conn.close()
    print(f"{n} consumers: consume {consumed:.2f} s, close {closed:.3f} s", flush=True)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    for n in sys.argv[2:]:
        run(sys.argv[1], int(n))


if __name__ == "__main__":
    main()
