"""TF_CONFIG parsing: good descriptions, the rank rule, and every malformed case with its message."""

from __future__ import annotations

import json

import pytest

from allgpu.runtime.cluster import ClusterSpec, from_env
from allgpu.errors import ClusterConfigError
from allgpu.runtime.cluster import from_tf_config_env, parse_tf_config


def tf(cluster, task) -> str:
    return json.dumps({"cluster": cluster, "task": task})


def test_workers_only():
    c = parse_tf_config(tf({"worker": ["h0:2222", "h1:2222", "h2:2223"]}, {"type": "worker", "index": 2}))
    assert c.num_workers == 3
    assert c.worker_index == 2 and c.task_index == 2 and c.task_type == "worker"
    assert c.rendezvous == "h0:2222"
    assert (c.rendezvous_host, c.rendezvous_port) == ("h0", 2222)


def test_chief_is_worker_zero():
    cluster = {"chief": ["c:1000"], "worker": ["w0:1001", "w1:1002"]}
    chief = parse_tf_config(tf(cluster, {"type": "chief", "index": 0}))
    w1 = parse_tf_config(tf(cluster, {"type": "worker", "index": 1}))
    assert chief.num_workers == w1.num_workers == 3
    assert chief.worker_index == 0 and w1.worker_index == 2 and w1.task_index == 1
    assert chief.rendezvous == w1.rendezvous == "c:1000"
    assert chief.workers == ("c:1000", "w0:1001", "w1:1002")


def test_chief_only_and_string_index_and_ipv6():
    c = parse_tf_config(tf({"chief": ["[::1]:2222"]}, {"type": "chief"}))
    assert c.num_workers == 1 and c.worker_index == 0
    assert (c.rendezvous_host, c.rendezvous_port) == ("::1", 2222)
    c = parse_tf_config(tf({"worker": ["a:1", "b:2"]}, {"type": "worker", "index": "1"}))
    assert c.worker_index == 1


def test_to_cluster_spec_rank_rule():
    c = parse_tf_config(tf({"chief": ["c:1000"], "worker": ["w0:1001", "w1:1002"]}, {"type": "worker", "index": 1}))
    spec = c.to_cluster_spec(local_world_size=4, local_rank=3)
    assert spec == ClusterSpec(
        rank=2 * 4 + 3, world_size=12, local_rank=3, local_world_size=4,
        master_addr="c", master_port=1000, source="TF_CONFIG",
    )
    # every (worker, local rank) pair gets a distinct rank covering 0..world-1
    ranks = sorted(
        parse_tf_config(tf({"worker": ["a:1", "b:1", "c:1"]}, {"type": "worker", "index": i}))
        .to_cluster_spec(2, lr).rank
        for i in range(3) for lr in range(2)
    )
    assert ranks == list(range(6))
    with pytest.raises(ClusterConfigError, match="local_rank=2"):
        c.to_cluster_spec(2, 2)
    with pytest.raises(ClusterConfigError, match="local_world_size=0"):
        c.to_cluster_spec(0, 0)


def test_env_reading_and_precedence():
    assert from_tf_config_env({}) is None
    assert from_tf_config_env({"TF_CONFIG": "  "}) is None
    text = tf({"worker": ["a:1", "b:2"]}, {"type": "worker", "index": 1})
    spec = from_env({"TF_CONFIG": text}, local_world_size=2, local_rank=1)
    assert (spec.rank, spec.world_size, spec.source) == (3, 4, "TF_CONFIG")
    torchrun = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "x", "MASTER_PORT": "5"}
    assert from_env({**torchrun, "TF_CONFIG": text}).source == "torchrun"  # the launcher already placed it
    assert from_env({}) is None


@pytest.mark.parametrize(
    "text, needles",
    [
        ("{not json", ["not valid JSON", "Fix"]),
        ("[1, 2]", ["expected a JSON object"]),
        (json.dumps({"task": {"type": "worker", "index": 0}}), ['no "cluster" field']),
        (json.dumps({"cluster": {"worker": ["a:1"]}}), ['no "task" field']),
        (json.dumps({"cluster": ["a:1"], "task": {"type": "worker"}}), ["cluster is ['a:1']", "JSON object"]),
        (tf({"worker": ["a:1"]}, {"index": 0}), ['no "type"']),
        (tf({"worker": ["a:1"]}, {"type": "chief", "index": 0}), ["task.type is 'chief'", "no 'chief' list"]),
        (tf({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 2}), ["task.index is 2", "2 entries", "0 <= index < 2"]),
        (tf({"worker": ["a:1"]}, {"type": "worker", "index": -1}), ["task.index is -1"]),
        (tf({"worker": ["a:1"]}, {"type": "worker", "index": 0.5}), ["task.index is 0.5"]),
        (tf({"worker": ["a"]}, {"type": "worker", "index": 0}), ["cluster.worker[0]", "'a'", "no port", "host:port"]),
        (tf({"worker": ["a:1", "b:99999"]}, {"type": "worker", "index": 0}), ["cluster.worker[1]", "'99999'", "1..65535"]),
        (tf({"worker": ["a:1", ":5"]}, {"type": "worker", "index": 0}), ["cluster.worker[1]", "no host"]),
        (tf({"worker": ["a:1", 7]}, {"type": "worker", "index": 0}), ["cluster.worker[1]", "not a \"host:port\""]),
        (tf({"worker": ["::1:5"]}, {"type": "worker", "index": 0}), ["IPv6 host in brackets"]),
        (tf({"worker": []}, {"type": "worker", "index": 0}), ["cluster.worker is []", "non-empty list"]),
        (tf({"worker": "a:1"}, {"type": "worker", "index": 0}), ["cluster.worker is 'a:1'"]),
        (tf({"worker": ["a:1", "b:2", "a:1"]}, {"type": "worker", "index": 0}), ["'a:1' twice", "workers 0 and 2"]),
        (tf({"chief": ["a:1"], "worker": ["a:1"]}, {"type": "worker", "index": 0}), ["'a:1' twice"]),
        (tf({"chief": ["a:1", "b:1"]}, {"type": "chief", "index": 0}), ["at most one chief"]),
        (tf({"worker": ["a:1"], "ps": ["p:1"]}, {"type": "worker", "index": 0}), ["'ps'", "ParameterServerStrategy"]),
        (tf({"worker": ["a:1"]}, {"type": "ps", "index": 0}), ["task.type is 'ps'", "ParameterServerStrategy"]),
        (tf({"worker": ["a:1"], "evaluator": ["e:1"]}, {"type": "worker", "index": 0}), ["'evaluator'", "not supported yet"]),
        (tf({"worker": ["a:1"]}, {"type": "evaluator", "index": 0}), ["task.type is 'evaluator'", "not supported yet"]),
        (tf({"master": ["a:1"]}, {"type": "master", "index": 0}), ["'master'", "'chief'"]),
        (tf({}, {"type": "worker", "index": 0}), ["lists no \"worker\""]),
    ],
)
def test_bad_descriptions_name_the_field_and_the_fix(text, needles):
    with pytest.raises(ClusterConfigError) as info:
        parse_tf_config(text)
    message = str(info.value)
    for needle in needles:
        assert needle in message, (needle, message)


def test_env_error_propagates():
    with pytest.raises(ClusterConfigError, match="not valid JSON"):
        from_env({"TF_CONFIG": "worker=a:1"})
