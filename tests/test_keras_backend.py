"""A Keras model on another backend than PyTorch built in ``strategy.scope()`` is refused (it would train alone on
every replica), at the user's construction line; outside any strategy Keras is left untouched."""

import types

import pytest

import allgpu
from allgpu.errors import UnsupportedError
from tests.harness import run_python

SCRIPT = r'''
import sys
import keras, numpy as np, allgpu

x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
alone = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])  # no strategy: Keras untouched
alone.compile(optimizer="sgd", loss="mse")
print("ALONE", keras.backend.backend(), len(alone.fit(x, y, epochs=2, verbose=0).history["loss"]), flush=True)
strategy = allgpu.MirroredStrategy(devices=[f"/cpu:{i}" for i in range(int(sys.argv[1]))])
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])  # the user's line
    model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, epochs=1, verbose=2)
print("TRAINED WITHOUT ALLGPU", flush=True)
'''


def fake_keras(backend: str) -> types.ModuleType:
    """The two things allgpu reads of an imported Keras: ``keras.Model`` and ``keras.backend.backend()``."""
    module = types.ModuleType("keras")

    class Model:
        def __init__(self, name="model"):
            self.name = name

    module.Model = module.Layer = Model
    module.backend = types.SimpleNamespace(backend=lambda: backend)
    return module


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_model_on_another_backend_is_refused_in_scope_and_untouched_outside(monkeypatch, backend):
    keras = fake_keras(backend)
    monkeypatch.setitem(__import__("sys").modules, "keras", keras)
    original = keras.Model.__init__
    strategy = allgpu.OneDeviceStrategy("/cpu:0")
    with pytest.raises(UnsupportedError) as raised:
        with strategy.scope():
            keras.Model()
    message = str(raised.value)
    assert repr(backend) in message and 'os.environ["KERAS_BACKEND"] = "torch"' in message
    assert "allgpu migrate" in message
    assert keras.Model.__init__ is original  # the scope put Keras back
    assert keras.Model(name="outside").name == "outside"
    with pytest.raises(UnsupportedError, match=backend):
        strategy.mirror(keras.Model())


@pytest.mark.replicas
@pytest.mark.timeout(180)
@pytest.mark.parametrize("replicas", [1, 2])
def test_tensorflow_keras_script_fails_at_the_users_line_on_every_replica(monkeypatch, tmp_path, replicas):
    pytest.importorskip("tensorflow")
    monkeypatch.delenv("KERAS_BACKEND", raising=False)  # unset: Keras picks TensorFlow
    script = tmp_path / "mnist_like.py"
    script.write_text(SCRIPT)
    proc = run_python([str(script), str(replicas)], timeout=150, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "ALONE tensorflow 2" in proc.stdout  # the model built with no strategy trained as before
    assert "TRAINED WITHOUT ALLGPU" not in out
    refusals = [l for l in out.splitlines() if "UnsupportedError: allgpu distributes Keras models" in l]
    assert len(refusals) >= replicas and all("'tensorflow'" in l for l in refusals), out[-3000:]
    line = 1 + SCRIPT.splitlines().index(next(l for l in SCRIPT.splitlines() if l.endswith("# the user's line")))
    at_line = [l for l in out.splitlines() if f'"{script}", line {line}' in l]
    assert len(at_line) >= replicas, out[-3000:]  # each replica's traceback names the user's line
