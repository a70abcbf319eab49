"""The short run of the Jepsen-style harness (tools/jepsen.py) that ./test.sh includes: a fixed
seed, faults drawn from it for WARREN_JEPSEN_SECONDS (default 40) against a 3-node cluster of
real processes (partitions and faults between two nodes through the fault proxy too where
network namespaces work), a quorum queue under confirmed publishers and manual-ack consumers on
every node, definitions changes through every node; the checkers must find nothing lost,
nothing unexpected and no consumer cancelled, every acknowledged definitions change on every
node, and every node must agree on the queue's leader afterwards. The long run is `just jepsen MINUTES`."""
import json
import os
import sys

import pytest

from cluster_nodes import netns_unavailable
from own_broker import needs_warren_bin

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tools"))
import jepsen  # noqa: E402

SECONDS = float(os.environ.get("WARREN_JEPSEN_SECONDS", "40"))
SEEDS = [20261128]

pytestmark = [pytest.mark.own_brokers, needs_warren_bin,
              pytest.mark.timeout(int(300 + SECONDS * 4))]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_fault_schedule_loses_nothing(seed):
    result = jepsen.run(SECONDS, seed, netns=netns_unavailable() is None, tag="jt")
    print(json.dumps(result))
    assert result["ok"], json.dumps({k: v for k, v in result.items()})
    assert result["faults"] >= 2, result["schedule"]
