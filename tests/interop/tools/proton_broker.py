"""A minimal AMQP 1.0 broker on python-qpid-proton (after proton's examples/broker.py): a
queue per link address, created on attach; messages are accepted on arrival and handed to
the address's receivers as their credit allows. It is not Warren and shares none of its
code, so `warren perf`'s own AMQP 1.0 client (many-pairs --protocol amqp10) can be checked
against an independent implementation of the protocol:

    tests/interop/.venv/bin/python tests/interop/tools/proton_broker.py 127.0.0.1:PORT &
    WARREN_PERF_TEST_AMQP10_URI=amqp://127.0.0.1:PORT cargo test -p warren-perf \\
        --test scenarios the_amqp10_client_works_with_another_amqp10_broker
"""
import collections
import sys

from proton import Endpoint
from proton.handlers import MessagingHandler
from proton.reactor import Container


class Queue:
    def __init__(self):
        self.messages = collections.deque()
        self.consumers = []

    def publish(self, message):
        self.messages.append(message)
        self.dispatch()

    def dispatch(self, consumer=None):
        consumers = [consumer] if consumer else self.consumers
        progressed = True
        while progressed and self.messages:
            progressed = False
            for c in consumers:
                if c.credit and self.messages:
                    c.send(self.messages.popleft())
                    progressed = True


class Broker(MessagingHandler):
    def __init__(self, address):
        super().__init__()
        self.address = address
        self.queues = {}

    def queue(self, address):
        return self.queues.setdefault(address, Queue())

    def on_start(self, event):
        event.container.listen(self.address)
        print("listening on", self.address, flush=True)

    def on_link_opening(self, event):
        link = event.link
        if link.is_sender and link.remote_source.address:
            link.source.address = link.remote_source.address
            self.queue(link.source.address).consumers.append(link)
        elif link.is_receiver and link.remote_target.address:
            link.target.address = link.remote_target.address

    def forget(self, link):
        q = self.queues.get(link.source.address)
        if q and link in q.consumers:
            q.consumers.remove(link)

    def on_link_closing(self, event):
        if event.link.is_sender:
            self.forget(event.link)

    def forget_connection(self, connection):
        link = connection.link_head(Endpoint.REMOTE_ACTIVE)
        while link:
            if link.is_sender:
                self.forget(link)
            link = link.next(Endpoint.REMOTE_ACTIVE)

    def on_connection_closing(self, event):
        self.forget_connection(event.connection)

    def on_disconnected(self, event):
        self.forget_connection(event.connection)

    def on_sendable(self, event):
        self.queue(event.link.source.address).dispatch(event.link)

    def on_message(self, event):
        # auto_accept: the delivery is accepted once this returns.
        self.queue(event.link.target.address).publish(event.message)


if __name__ == "__main__":
    Container(Broker(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:5672")).run()
