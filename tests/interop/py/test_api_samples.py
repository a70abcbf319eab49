"""HTTP API: /api/overview's `samples` for RabbitMQ's range queries (msg_rates_age/_incr,
lengths_age/_incr), which the console's overview charts draw at once after a reload, and
what a definitions import left out (Warren's 200 {"skipped"}), which the console lists."""
import time
import uuid

import pytest

from api_helpers import Api, needs_api, poll, q
from conftest import connect

pytestmark = needs_api

RANGES = "?msg_rates_age=60&msg_rates_incr=5&lengths_age=60&lengths_incr=5"


@pytest.fixture
def api():
    return Api()


def check_samples(details):
    """RabbitMQ's shape: [{"sample", "timestamp"}] newest first, a point every 5 s back from
    now rounded down to 5 s, at most 13 in a minute; avg_rate and avg with more than one."""
    samples = details["samples"]
    assert 1 <= len(samples) <= 13, samples
    stamps = [s["timestamp"] for s in samples]
    assert all(t % 5000 == 0 for t in stamps), stamps
    assert all(a - b == 5000 for a, b in zip(stamps, stamps[1:])), stamps
    assert abs(stamps[0] - time.time() * 1000) < 15000, stamps[0]
    assert all(isinstance(s["sample"], int) for s in samples), samples
    if len(samples) > 1:
        assert "avg_rate" in details and "avg" in details, details
    return samples


def test_overview_samples_count_publishes_and_queued_messages(api):
    queue = "samples.q." + uuid.uuid4().hex[:8]
    conn = connect()
    try:
        ch = conn.channel()
        ch.queue_declare(queue, auto_delete=True)
        ch.confirm_delivery()
        # RabbitMQ leaves out what nothing has counted yet (a fresh node: no publish_details).
        publish = api.json("/api/overview" + RANGES)["message_stats"].get("publish_details")
        before = check_samples(publish)[0]["sample"] if publish else 0
        for i in range(25):
            ch.basic_publish("", queue, b"sampled %d" % i)

        def sampled():
            overview = api.json("/api/overview" + RANGES)
            if "publish_details" not in overview["message_stats"] or "messages_details" not in overview["queue_totals"]:
                return False  # RabbitMQ: not until its next stats event
            publish = check_samples(overview["message_stats"]["publish_details"])
            queued = check_samples(overview["queue_totals"]["messages_details"])
            ready = check_samples(overview["queue_totals"]["messages_ready_details"])
            check_samples(overview["queue_totals"]["messages_unacknowledged_details"])
            return publish[0]["sample"] - before >= 25 and queued[0]["sample"] >= 25 and ready[0]["sample"] >= 25
        # The sampler takes a round every 5 s; the newest point may be up to two rounds old.
        assert poll(sampled, timeout=20, step=0.5, conn=conn)
        # Every counter with a rate has its samples (the console draws RabbitMQ's series);
        # Warren shows every counter, RabbitMQ only those something has counted.
        overview = api.json("/api/overview" + RANGES)
        stats = overview["message_stats"]
        for counter in ("confirm", "deliver", "deliver_no_ack", "ack", "redeliver", "get", "get_no_ack",
                        "get_empty", "return_unroutable", "drop_unroutable"):
            if overview.get("product_name") == "Warren" or counter + "_details" in stats:
                check_samples(stats[counter + "_details"])
    finally:
        conn.close()


def test_overview_without_a_range_has_no_samples_and_a_bad_range_is_refused(api):
    overview = api.json("/api/overview")
    assert "samples" not in overview["message_stats"].get("publish_details", {})
    assert "samples" not in overview["queue_totals"].get("messages_details", {})
    for bad in ("msg_rates_age=0&msg_rates_incr=5", "lengths_age=60&lengths_incr=-5", "lengths_age=6000&lengths_incr=1"):
        r = api.get("/api/overview?" + bad)
        assert r.status_code == 400, (bad, r.status_code, r.text)


def test_an_import_lists_what_it_left_out(api):
    if api.json("/api/overview").get("product_name") != "Warren":
        pytest.skip("RabbitMQ imports stream queues; Warren leaves them out and says so")
    suffix = uuid.uuid4().hex[:8]
    kept, stream = "import.kept." + suffix, "import.stream." + suffix
    doc = {"queues": [
        {"name": kept, "durable": True, "auto_delete": False, "arguments": {}},
        {"name": stream, "durable": True, "auto_delete": False, "arguments": {"x-queue-type": "stream"}},
    ]}
    try:
        r = api.post("/api/definitions/%2F", doc)
        assert r.status_code == 200, (r.status_code, r.text)
        skipped = r.json()["skipped"]
        assert len(skipped) == 1 and stream in skipped[0] and "stream" in skipped[0], skipped
        assert api.get("/api/queues/%2F/" + q(kept)).status_code == 200
        assert api.get("/api/queues/%2F/" + q(stream)).status_code == 404
        # Everything imported: RabbitMQ's 204 without a body.
        assert api.post("/api/definitions/%2F", {"queues": [doc["queues"][0]]}).status_code == 204
    finally:
        api.delete("/api/queues/%2F/" + q(kept))
