"""The one CPU-thread policy (allgpu/runtime/threads.py)."""


def test_one_thread_policy_divides_the_cores_among_local_replicas_and_honours_omp_num_threads():
    import os

    from allgpu.runtime.threads import threads_per_replica

    cores = os.cpu_count() or 1
    assert threads_per_replica(1, env={}) == cores
    assert threads_per_replica(cores * 2, env={}) == 1  # never 0
    assert threads_per_replica(2, env={"OMP_NUM_THREADS": "3"}) == 3
    assert threads_per_replica(2, env={"OMP_NUM_THREADS": "x"}) == max(1, cores // 2)
