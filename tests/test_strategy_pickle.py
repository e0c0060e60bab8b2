"""A strategy on an object that is pickled (submitit's Checkpointable, Ray, spawn) is a typed error naming the fix,
not pickle's bare WeakSet error; ``copy.deepcopy`` of an object holding one still works."""

import copy
import pickle

import pytest

import allgpu
from allgpu.errors import UnsupportedError

pytestmark = pytest.mark.unit


class Trainer:  # submitit's Checkpointable shape: the strategy kept on self
    def __init__(self):
        self.strategy = allgpu.OneDeviceStrategy("/cpu:0")
        self.epochs = 3


def test_pickling_an_object_that_holds_a_strategy_names_the_strategy_and_the_fix():
    with pytest.raises(UnsupportedError, match=r"a OneDeviceStrategy cannot be pickled.*create the strategy where"):
        pickle.dumps(Trainer())


def test_deepcopy_still_copies_the_object_and_its_strategy():
    trainer = Trainer()
    clone = copy.deepcopy(trainer)
    assert clone.epochs == 3 and type(clone.strategy) is allgpu.OneDeviceStrategy
    assert clone.strategy is not trainer.strategy and clone.strategy.device == trainer.strategy.device
