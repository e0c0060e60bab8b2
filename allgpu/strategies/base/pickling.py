"""A strategy is not pickled: it stands for this process's place in a running job.

submitit's ``Checkpointable.checkpoint()`` pickles the callable it requeues, Ray and ``multiprocessing``'s spawn
pickle what they send, and a user's ``pickle.dump(trainer)`` pickles what the trainer holds. A strategy on such an
object failed with pickle's bare ``Can't pickle local object 'WeakSet.__init__.<locals>._remove'``, naming nothing
of the user's. Its replica group, device and scope bookkeeping mean nothing in another process; what travels is
the recipe (build the strategy where the code runs). ``copy.deepcopy`` keeps its earlier meaning (a copy of the
object, as TensorFlow's ``StrategyBase.__deepcopy__`` allows), so an object holding a strategy can still be
deep-copied in the same process.
"""

from __future__ import annotations

import copy

from allgpu.errors import UnsupportedError


class NotPickled:
    """Mixin: ``pickle`` of a strategy is an :class:`~allgpu.errors.UnsupportedError` naming the fix;
    ``copy.deepcopy`` copies the instance's ``__dict__`` deeply, as Python's default does."""

    def __reduce_ex__(self, protocol):
        name = type(self).__name__
        raise UnsupportedError(
            f"a {name} cannot be pickled: it stands for this process's place in a running job (its replica group "
            f"and device), which means nothing in another process. Something being pickled holds it (submitit's "
            f"Checkpointable.checkpoint() pickles its callable; Ray and spawn pickle what they send). Fix: create "
            f"the strategy where the code runs (inside the function or __call__ that is sent, e.g. "
            f"`strategy = allgpu.{name}()` at its top) and keep it off objects that are pickled; pickle settings "
            f"(a replica count, a checkpoint folder) instead.")

    def __deepcopy__(self, memo):
        new = object.__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        return new
