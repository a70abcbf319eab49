"""Helper for perftest_check.sh: report and delete a queue PerfTest left behind.

usage: perftest_queue.py QUEUE EXPECTED_READY_COUNT
Exits 0 if the queue exists and holds exactly EXPECTED_READY_COUNT ready
messages (it is deleted either way), 1 otherwise.
"""
import os
import sys

import pika
import pika.exceptions

url = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
queue, expected = sys.argv[1], int(sys.argv[2])
conn = pika.BlockingConnection(pika.URLParameters(url))
try:
    ch = conn.channel()
    try:
        ok = ch.queue_declare(queue, passive=True).method
    except pika.exceptions.ChannelClosedByBroker as e:
        print("perftest_queue: queue %s: %s" % (queue, e))
        sys.exit(1)
    print("perftest_queue: queue %s ready=%d consumers=%d (expected ready=%d)"
          % (queue, ok.message_count, ok.consumer_count, expected))
    ch.queue_delete(queue)
    sys.exit(0 if ok.message_count == expected else 1)
finally:
    if conn.is_open:
        conn.close()
