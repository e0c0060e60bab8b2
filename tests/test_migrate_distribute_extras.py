"""`allgpu migrate` on the tf.distribute names public training code uses beside the strategies
(docs/tf_names_usage.md): all-reduce and input tuning objects, `strategy.extended` members, `merge_call`."""

import textwrap

from allgpu.migrate import migrate_source
from allgpu.migrate import names
from allgpu.migrate.notes import CHANGED, NOT_CONVERTED
from allgpu.strategies.base.extended import StrategyExtended


def _migrate(code: str):
    return migrate_source(textwrap.dedent(code), "s.py")


def test_all_reduce_and_input_tuning_objects_become_none_with_why():
    m = _migrate("""\
        import tensorflow as tf
        cdo = tf.distribute.HierarchicalCopyAllReduce(num_packs=2)
        strategy = tf.distribute.MirroredStrategy(cross_device_ops=cdo)
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.NCCL)
        ring = tf.distribute.experimental.CollectiveCommunication.RING
        dist = strategy.experimental_distribute_dataset(ds, options=tf.distribute.InputOptions(
            experimental_fetch_to_device=False))
        """)
    assert "cdo = None" in m.result and "options = None" in m.result and "ring = None" in m.result
    assert "experimental_distribute_dataset(ds, options=None)" in m.result and "tensorflow" not in m.result
    changed = dict(_kinds(m, CHANGED))
    assert "HierarchicalCopyAllReduce(...) -> None (how TensorFlow all-reduces" in changed[2]
    assert "InputOptions(...) -> None (how TensorFlow feeds input" in changed[7]
    assert not _kinds(m, NOT_CONVERTED) and m.complete


def test_extended_members_allgpu_has_pass_and_the_others_are_reported():
    m = _migrate("""\
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        strategy.extended.experimental_enable_get_next_as_optional = True
        n = len(strategy.extended.worker_devices)

        def merge_fn(strategy, var, value):
            value = strategy.extended.reduce_to(tf.distribute.ReduceOp.MEAN, value, var)
            return strategy.extended.update(var, lambda a, b: a.assign(b), args=(value,))

        def step(var, value):
            if strategy.extended._in_multi_worker_mode():
                pass
            tf.distribute.get_replica_context().merge_call(merge_fn, args=(var, value))
        """)
    assert "allgpu.get_replica_context().merge_call(merge_fn" in m.result
    assert "n = strategy.num_replicas_in_sync" in m.result
    assert "len(strategy.extended.worker_devices) -> strategy.num_replicas_in_sync" in dict(_kinds(m, CHANGED))[4]
    left = dict(_kinds(m, NOT_CONVERTED))
    assert set(left) == {3, 11}
    assert "always have get_next_as_optional" in left[3] and "private member" in left[11]


def test_a_batch_sized_by_the_local_device_list_is_sized_by_the_replica_count():
    # fixmatch's training.py shape: TF's one-process MirroredStrategy lists every local GPU in worker_devices
    m = _migrate("""\
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        batch = 64 * len(strategy.extended.worker_devices)
        devices = strategy.extended.worker_devices
        """)
    assert "batch = 64 * strategy.num_replicas_in_sync" in m.result
    assert "devices = strategy.extended.worker_devices" in m.result


def test_the_member_table_is_strategy_extended_s():
    public = {n for n in dir(StrategyExtended) if not n.startswith("_")} | {"strategy"}
    assert set(names.EXTENDED_MEMBERS) == public


def _kinds(migration, kind):
    return [(n.line, n.message) for n in migration.notes if n.kind == kind]
