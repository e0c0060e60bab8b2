"""What ``allgpu migrate`` maps, and why it leaves the rest alone: the tables, no logic.

Qualified names are TensorFlow's (``tensorflow.distribute.MirroredStrategy``), whatever alias the script imported
TensorFlow under. Each target is the text written in its place.
"""

from __future__ import annotations

# A TensorFlow name with a direct allgpu or Keras 3 equivalent: the call's meaning is unchanged.
RENAMES: dict[str, str] = {
    "tensorflow.keras": "keras",
    # TensorFlow 2's own aliases of tf.keras modules
    "tensorflow.optimizers": "keras.optimizers",
    "tensorflow.losses": "keras.losses",
    "tensorflow.metrics": "keras.metrics",
    "tensorflow.initializers": "keras.initializers",
    "tensorflow.distribute.MirroredStrategy": "allgpu.MirroredStrategy",
    "tensorflow.distribute.MultiWorkerMirroredStrategy": "allgpu.MultiWorkerMirroredStrategy",
    "tensorflow.distribute.experimental.MultiWorkerMirroredStrategy": "allgpu.MultiWorkerMirroredStrategy",
    "tensorflow.distribute.OneDeviceStrategy": "allgpu.OneDeviceStrategy",
    "tensorflow.distribute.experimental.CentralStorageStrategy": "allgpu.CentralStorageStrategy",
    "tensorflow.distribute.ParameterServerStrategy": "allgpu.ParameterServerStrategy",
    "tensorflow.distribute.experimental.ParameterServerStrategy": "allgpu.ParameterServerStrategy",
    "tensorflow.distribute.cluster_resolver.TFConfigClusterResolver":
        "allgpu.cluster_resolver.TFConfigClusterResolver",
    "tensorflow.distribute.ReduceOp": "allgpu.ReduceOp",
    "tensorflow.distribute.InputContext": "allgpu.InputContext",
    "tensorflow.distribute.get_strategy": "allgpu.get_strategy",
    "tensorflow.distribute.has_strategy": "allgpu.has_strategy",
    "tensorflow.distribute.in_cross_replica_context": "allgpu.in_cross_replica_context",
    "tensorflow.distribute.get_replica_context": "allgpu.get_replica_context",
    "tensorflow.distribute.ReplicaContext": "allgpu.ReplicaContext",
    "tensorflow.distribute.StrategyExtended": "allgpu.StrategyExtended",
    # get_next() past the end of a distributed dataset raises allgpu's (a StopIteration), not TensorFlow's
    "tensorflow.errors.OutOfRangeError": "allgpu.errors.OutOfRangeError",
    "tensorflow.train.Checkpoint": "allgpu.checkpoint.Checkpoint",
    "tensorflow.train.CheckpointManager": "allgpu.checkpoint.CheckpointManager",
    "tensorflow.train.latest_checkpoint": "allgpu.checkpoint.latest_checkpoint",
    "tensorflow.nn.compute_average_loss": "allgpu.compute_average_loss",
    "tensorflow.nn.scale_regularization_loss": "allgpu.scale_regularization_loss",
    "tensorflow.add_n": "sum",
    # TensorFlow's seed also drew a TF Keras model's initial weights; Keras 3's helper seeds TensorFlow (tf.data's
    # shuffles) and the PyTorch backend (weights, Dropout), Python and NumPy.
    "tensorflow.random.set_seed": "keras.utils.set_random_seed",
    # Keras 3 takes the reduction as a string; the Reduction enum is gone.
    "tensorflow.keras.losses.Reduction.NONE": '"none"',
    "tensorflow.keras.losses.Reduction.SUM": '"sum"',
    "tensorflow.keras.losses.Reduction.SUM_OVER_BATCH_SIZE": '"sum_over_batch_size"',
    "tensorflow.keras.losses.Reduction.AUTO": '"sum_over_batch_size"',
}
# Constructors of tf.distribute objects that only choose how TensorFlow communicates or feeds input: the call is
# written as None (the strategy argument that takes it is dropped, and experimental_distribute_dataset's options=
# accepts None), with why.
NONE_CALLS: dict[str, str] = {
    **dict.fromkeys(("tensorflow.distribute.HierarchicalCopyAllReduce", "tensorflow.distribute.NcclAllReduce",
                     "tensorflow.distribute.ReductionToOneDevice", "tensorflow.distribute.CrossDeviceOps",
                     "tensorflow.distribute.experimental.CommunicationOptions",
                     "tensorflow.distribute.experimental.CollectiveHints"),
                    "how TensorFlow all-reduces; allgpu all-reduces with NCCL on GPUs and Gloo on CPUs"),
    "tensorflow.distribute.InputOptions": "how TensorFlow feeds input; allgpu prefetches each replica's batches "
                                          "to its device with pinned memory",
}
for _enum in ("CommunicationImplementation", "CollectiveCommunication"):
    for _member in ("AUTO", "RING", "NCCL"):
        RENAMES[f"tensorflow.distribute.experimental.{_enum}.{_member}"] = "None"
# strategy.extended's members allgpu has (allgpu.strategies.base.extended.StrategyExtended), and why others are not.
EXTENDED_MEMBERS = ("worker_devices", "parameter_devices", "should_checkpoint", "should_save_summary", "reduce_to",
                    "batch_reduce_to", "update", "call_for_each_replica", "strategy")
WORKER_DEVICES_WHY = ("TensorFlow's MirroredStrategy lists every local GPU of its one process there, so the count "
                      "is the replica count; allgpu runs one replica per process and lists its one device (a batch "
                      "sized by len(worker_devices) would stay one replica's)")
EXTENDED_WHY = {
    "experimental_enable_get_next_as_optional": "allgpu's distributed iterators always have get_next_as_optional(): "
                                                "delete this line",
    "_": "a private member of TensorFlow's StrategyExtended has no allgpu equivalent: allgpu runs one replica per "
         "process (ask strategy.num_replicas_in_sync, strategy.is_chief)",
    "": "allgpu's strategy.extended has worker_devices, parameter_devices, should_checkpoint, should_save_summary, "
        "reduce_to, batch_reduce_to, update and call_for_each_replica (one replica per process; TPU and variable "
        "placement members are not offered)",
}

# Renamed functions whose positional parameters differ after the first N: more positional arguments than N are
# not converted (TensorFlow's compute_average_loss takes sample_weight second, allgpu's global_batch_size).
POSITIONAL_LIMIT = {"allgpu.compute_average_loss": 1}

# Keyword arguments each strategy constructor takes in TensorFlow -> allgpu's name; None: dropped with a note
# (an implementation choice that does not change what is computed). A keyword missing here is not converted.
STRATEGY_ARGS: dict[str, dict[str, str | None]] = {
    "allgpu.MirroredStrategy": {"devices": "devices", "cross_device_ops": None},
    "allgpu.MultiWorkerMirroredStrategy": {"cluster_resolver": "cluster_resolver", "communication_options": None},
    "allgpu.OneDeviceStrategy": {"device": "device"},
    "allgpu.CentralStorageStrategy": {"compute_devices": "devices", "parameter_device": "central_device"},
    "allgpu.ParameterServerStrategy": {"cluster_resolver": None},
}
# TensorFlow's positional parameters of each, in order; more positional arguments than these are not converted.
STRATEGY_POSITIONAL: dict[str, tuple[str, ...]] = {
    "allgpu.MirroredStrategy": ("devices", "cross_device_ops"),
    "allgpu.MultiWorkerMirroredStrategy": ("cluster_resolver", "communication_options"),
    "allgpu.OneDeviceStrategy": ("device",),
    "allgpu.CentralStorageStrategy": ("compute_devices", "parameter_device"),
    "allgpu.ParameterServerStrategy": ("cluster_resolver",),
}
DROPPED_WHY = {
    "cross_device_ops": "the all-reduce implementation: allgpu all-reduces with NCCL on GPUs and Gloo on CPUs",
    "communication_options": "collective tuning: allgpu all-reduces with NCCL on GPUs and Gloo on CPUs",
    "cluster_resolver": "allgpu's parameter-server job comes from torchrun's variables",
}
PS_NOTE = ("allgpu's ParameterServerStrategy reads the job from torchrun's variables (start it with `allgpu run "
           "--cpu-replicas K`; the last num_ps ranks serve) and its workers run the training loop themselves: "
           "pass num_ps= the number of 'ps' tasks your TF_CONFIG had")

# Keras 2 names that Keras 3 removed: `tf.keras.X` -> `keras.X` would fail, so these are not converted.
KERAS3_MISSING = {
    "tensorflow.keras.optimizers.legacy": "Keras 3 has no legacy optimizers: use keras.optimizers.<Name>",
    "tensorflow.keras.layers.experimental": "Keras 3 moved these layers to keras.layers.<Name>",
    "tensorflow.keras.mixed_precision.experimental": "use keras.mixed_precision.set_global_policy",
    "tensorflow.keras.estimator": "Keras 3 has no estimators",
    "tensorflow.keras.utils.multi_gpu_model": "Keras 3 has no multi_gpu_model (TensorFlow removed it in 2.4 for "
                                              "tf.distribute): build and compile the model inside "
                                              "allgpu.MirroredStrategy().scope() (or pass it to strategy.mirror) "
                                              "and fit it instead of the parallel copy",
    "tensorflow.keras.preprocessing.image.ImageDataGenerator": "Keras 3 has no ImageDataGenerator: use "
                                                               "keras.utils.image_dataset_from_directory and "
                                                               "preprocessing layers",
}

# TensorFlow names that stay as they are: allgpu reads tf.data pipelines (TensorFlow must be installed).
KEPT_PREFIXES = ("tensorflow.data",)
PRINT_NOTE = ("print: runs on every replica (one process each, where TensorFlow ran one process for all local GPUs), "
              "so it prints once per replica; guard it with `if strategy.is_chief:` to print once (Keras' own "
              "progress bar and messages already print on replica 0 only)")
# Dataset methods whose function argument TensorFlow runs as input code (tf ops are at home there).
PIPELINE_METHODS = ("map", "filter", "flat_map", "interleave", "parallel_interleave")
KEPT_NOTE = ("tf.data kept as it is: allgpu's datasets and Keras' fit read tf.data pipelines and hand each replica "
             "torch tensors (needs TensorFlow installed: pip install 'allgpu[tf]')")

TPU_WHY = ("allgpu has no TPU strategy (it trains on PyTorch's CUDA and CPU devices). Without a TPU, TensorFlow's "
           "TPUClusterResolver() raises ValueError, so a Kaggle-style `try`/`except` runs its other branch, as it "
           "did in TensorFlow: write allgpu.MirroredStrategy() there to train on every GPU (allgpu.get_strategy() is "
           "one device)")
DEVICES_WHY = ("TensorFlow's own view of the devices: with the tensorflow-cpu wheel (allgpu[tf]'s) it lists no GPU "
               "even where PyTorch sees them, so an `if gpus: MirroredStrategy() else: ...` branch silently takes the "
               "one-device path; count them with torch.cuda.device_count() (allgpu.MirroredStrategy() finds every "
               "GPU itself and falls back to one device, with a warning saying why)")
# Notes added to a rename whose result may not be what a user moving to several GPUs expects.
RENAME_WHY: dict[str, str] = {
    "tensorflow.distribute.get_strategy": "outside a strategy's scope it is the default strategy, one replica on one "
                                          "device, as TensorFlow's (a Kaggle 'TPU, else get_strategy()' block's "
                                          "fallback); to train on every GPU write allgpu.MirroredStrategy() there",
    "allgpu.OneDeviceStrategy": "one replica on that one device, as in TensorFlow: on a machine with several GPUs "
                                "allgpu.MirroredStrategy() trains on all of them (started as N processes by allgpu "
                                "run, each would train alone: allgpu warns)",
}

# Why a TensorFlow name left in the script was not converted, by longest matching prefix.
WHY_NOT: dict[str, str] = {
    "tensorflow.device": "tf.device pins ops to one device; under allgpu each replica already runs on its own "
                         "device: remove the `with tf.device(...)` block's pinning (torch places tensors with "
                         ".to(device))",
    "tensorflow.config": "TensorFlow runtime configuration has no allgpu equivalent: choose devices with "
                         "CUDA_VISIBLE_DEVICES or the strategy's devices=, memory growth is PyTorch's default",
    "tensorflow.function": "tf.function with arguments (input_signature, jit_compile, ...) or called as a function: "
                           "its graph semantics have no direct equivalent; remove it (eager PyTorch) or use "
                           "strategy.compile / torch.compile",
    "tensorflow.GradientTape": "a GradientTape that is not the single-tape step (`grads = tape.gradient(loss, "
                               "model.trainable_variables)` then `optimizer.apply_gradients(zip(grads, "
                               "model.trainable_variables))`): write loss.backward() and optimizer.apply(...) by hand",
    "tensorflow.distribute.experimental.coordinator": "allgpu's parameter-server workers run the loop themselves; "
                                                      "there is no ClusterCoordinator",
    "tensorflow.distribute": "no allgpu equivalent of this tf.distribute name",
    "tensorflow.config.list_physical_devices": DEVICES_WHY,
    "tensorflow.config.experimental.list_physical_devices": DEVICES_WHY,
    "tensorflow.config.list_logical_devices": DEVICES_WHY,
    "tensorflow.distribute.TPUStrategy": TPU_WHY,
    "tensorflow.distribute.experimental.TPUStrategy": TPU_WHY,
    "tensorflow.distribute.cluster_resolver.TPUClusterResolver": TPU_WHY,
    "tensorflow.tpu": TPU_WHY,
    "tensorflow.train.latest_checkpoint": "without a tf.train.Checkpoint in the script it finds Keras' weights "
                                          "files: Keras 3 names them itself (`.weights.h5`, `.keras`); load "
                                          "them by name",
    "tensorflow.train": "no allgpu equivalent of this tf.train name (allgpu.checkpoint has Checkpoint, "
                        "CheckpointManager and latest_checkpoint)",
    "tensorflow.compat": "TensorFlow 1 graph and session code has no allgpu equivalent: port it to TF2 / Keras "
                         "first",
    "tensorflow.summary": "TensorBoard summaries: use keras.callbacks.TensorBoard or "
                          "torch.utils.tensorboard.SummaryWriter",
    "tensorflow.saved_model": "SavedModel export has no allgpu equivalent: save with model.save('model.keras')",
    "tensorflow.keras": "not in the installed Keras 3 (a Keras 2 name it dropped): see "
                        "keras.io/guides/migrating_to_keras_3",
    "tensorflow.__version__": "TensorFlow's version string, not a TensorFlow op: the migrated script runs on Keras 3 "
                              "and PyTorch; drop it, or print keras.__version__ / torch.__version__",
    "tensorflow.io.gfile": "TensorFlow's file API, not an op on tensors: it works unchanged while TensorFlow is "
                           "installed (allgpu[tf], which tf.data needs too); without TensorFlow write "
                           "os.makedirs(path, exist_ok=True), shutil.rmtree(path), open(path), glob.glob(pattern)",
    "tensorflow.Variable": "a TensorFlow variable: as a counter saved in a checkpoint (an epoch, a step) it works "
                           "unchanged while TensorFlow is installed (allgpu.checkpoint.Checkpoint saves anything with "
                           "numpy() and assign()), or write keras.Variable(0, dtype='int64'), which has the same "
                           "numpy(), assign() and assign_add(); a trained weight must be a layer's, built in "
                           "strategy.scope()",
    "tensorflow.nn.compute_average_loss": "TensorFlow's sample_weight is its second positional argument, "
                                          "allgpu's is global_batch_size: pass them by keyword",
}
# tf.function's arguments that only steer tracing: a decorator with no others is removed like a bare one.
TRACING_HINTS = ("experimental_relax_shapes", "reduce_retracing", "autograph", "experimental_autograph_options",
                 "experimental_follow_type_hints", "experimental_implements", "name")
# Keras 2 model attributes a custom train_step uses that Keras 3 removed (reported wherever they appear).
KERAS2_ATTRIBUTES = {
    "compiled_loss": "Keras 3 has no compiled_loss: call self.compute_loss(x=x, y=y, y_pred=y_pred)",
    "compiled_metrics": "Keras 3 has no compiled_metrics: update each of self.metrics (or "
                        "self.compute_metrics(x, y, y_pred))",
}
DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "string", "complex64"}
WHY_DTYPE = "a TensorFlow dtype: write the Keras name ('float32') or torch's (torch.float32)"
WHY_OP = ("a raw TensorFlow op: it runs on TensorFlow tensors only (fine where it merely builds tf.data input); on "
          "the model's torch tensors it fails, and allgpu does not translate ops: rewrite it with keras.ops or torch")


def why_not(qualified: str) -> str:
    """The reason a TensorFlow name left in a script was not converted (longest matching prefix)."""
    for table in (KERAS3_MISSING, WHY_NOT):
        for prefix in sorted(table, key=len, reverse=True):
            if qualified == prefix or qualified.startswith(prefix + "."):
                return table[prefix]
    if qualified.rsplit(".", 1)[-1] in DTYPES:
        return WHY_DTYPE
    return WHY_OP


# Keras model constructors: a model built by one of these outside strategy.scope() is mirrored by migrate.
KERAS_MODEL_CALLS = ("keras.Sequential", "keras.Model", "keras.models.Sequential", "keras.models.Model",
                     "keras.models.load_model", "keras.saving.load_model")
KERAS_MODEL_PREFIXES = ("keras.applications.",)
