"""Where a classic queue lives, set by policy: `queue-leader-locator` (RabbitMQ 3.10+) and the
3.x `queue-master-locator` place queues declared on one node of a three-node cluster across
the nodes (`balanced`, `min-masters`) or on the declaring node (`client-local`). Precedence:
`queue-leader-locator` first (a classic queue takes no `x-queue-leader-locator` argument, as in
RabbitMQ 3.10.8), then the 3.x key, its `x-queue-master-locator` argument winning over its
policy (3.10's `rabbit_queue_master_location_misc`). Bad values are refused with RabbitMQ
3.10.8's texts."""
import pytest

from cluster_nodes import eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]


def set_policy(node, name, pattern, definition):
    response = node.request("PUT", "/api/policies/%%2F/%s" % name,
                            json={"pattern": pattern, "definition": definition,
                                  "apply-to": "queues"})
    assert response.status_code in (201, 204), response.text


def homes(node, names):
    """The home node of each queue, as `node` sees it."""
    return [node.queue(n)["node"] for n in names]


@pytest.fixture(scope="module")
def cluster():
    with started_cluster("locate", timeout=120) as cluster:
        a, b, c = cluster.nodes
        # Node a places queues only on nodes it has a live forwarding link to: one queue
        # homed on each other node, seen running from a, shows the links are up.
        for node in (b, c):
            conn = node.connect()
            conn.channel().queue_declare("probe-%s" % node.name.split("@")[0], durable=True)
            conn.close()
        for node in (b, c):
            name = "probe-%s" % node.name.split("@")[0]
            eventually("%s running on a" % name,
                       lambda name=name, node=node: (a.queue(name) or {}).get("state")
                       == "running" and a.queue(name)["node"] == node.name, timeout=60)
        yield cluster


def declare_on(node, names, arguments=None):
    conn = node.connect()
    ch = conn.channel()
    for name in names:
        ch.queue_declare(name, durable=True, arguments=arguments)
    conn.close()


def test_a_leader_locator_policy_places_queues(cluster):
    a, _, _ = cluster.nodes
    set_policy(a, "balance", r"^bal\.", {"queue-leader-locator": "balanced"})
    set_policy(a, "local", r"^pin\.", {"queue-leader-locator": "client-local"})
    balanced = ["bal.%d" % i for i in range(6)]
    declare_on(a, balanced)
    # Spread over the nodes serving the fewest queues (other tests' queues count too).
    assert len(set(homes(a, balanced))) >= 2, homes(a, balanced)
    # The 3.10 key wins over the 3.x argument.
    pinned = ["pin.%d" % i for i in range(4)]
    declare_on(a, pinned, {"x-queue-master-locator": "min-masters"})
    assert homes(a, pinned) == [a.name] * 4


def test_a_master_locator_policy_places_queues_unless_the_argument_says_otherwise(cluster):
    a, _, _ = cluster.nodes
    set_policy(a, "masters", r"^mm\.", {"queue-master-locator": "min-masters"})
    spread = ["mm.spread.%d" % i for i in range(6)]
    declare_on(a, spread)
    assert len(set(homes(a, spread))) >= 2, homes(a, spread)
    # The 3.x argument wins over the 3.x policy...
    local = ["mm.local.%d" % i for i in range(4)]
    declare_on(a, local, {"x-queue-master-locator": "client-local"})
    assert homes(a, local) == [a.name] * 4
    # ...and a policy's `queue-leader-locator` over its `queue-master-locator`.
    set_policy(a, "both", r"^both\.", {"queue-leader-locator": "client-local",
                                        "queue-master-locator": "min-masters"})
    both = ["both.%d" % i for i in range(4)]
    declare_on(a, both)
    assert homes(a, both) == [a.name] * 4


def test_bad_locator_values_get_rabbitmq_texts(cluster):
    a, _, _ = cluster.nodes
    cases = [
        ({"queue-leader-locator": "min-masters"},
         '<<"min-masters">> is not a valid queue leader locator value'),
        ({"queue-master-locator": "balanced"},
         '<<"balanced">> invalid queue-master-locator value'),
    ]
    for definition, text in cases:
        response = a.request("PUT", "/api/policies/%2F/bad-locator",
                             json={"pattern": ".*", "definition": definition})
        assert response.status_code == 400, response.text
        assert response.json()["reason"] == "Validation failed\n\n%s\n" % text
