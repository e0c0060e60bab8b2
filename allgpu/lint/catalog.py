"""The rule catalogue: every rule's id, severity, message and the explanation ``--explain`` prints."""

from __future__ import annotations

from dataclasses import replace

from allgpu.errors import UnknownRuleError
from allgpu.lint.findings import Rule

_R = [
    Rule("E999", "error", "unparseable-file", "file could not be parsed or compiled; only the parts that parse were checked",
         "The file is not valid Python 3 (often Python 2 code: `print x`, `except E, e:`), Python parses it but\n"
         "refuses to compile it (`return` outside a function, `break` outside a loop, a duplicate argument...),\n"
         "or it is a notebook whose JSON cannot be read. Python would not run it. What can be checked still is:\n"
         "the code before a syntax error (the finding says which lines were not checked), the whole of a file\n"
         "that parses but does not compile, and every notebook cell that parses.\n"
         "Fix: port the file to Python 3 (`2to3 -w FILE`), or exclude it with --ignore E999."),
    # ---- TensorFlow / Keras --------------------------------------------------------------------------
    Rule("TF001", "error", "created-outside-scope",
         "model/optimizer/metric created outside strategy.scope() while a tf.distribute strategy exists",
         "Variables are mirrored only when created under `with strategy.scope():`. A model, optimizer or metric\n"
         "built outside it lives on one device, and training runs there: the other GPUs stay idle (or Keras\n"
         "raises a 'created outside the scope' error later). Reported only when that very object is then\n"
         "trained (fit, train_on_batch, apply_gradients, its trainable_variables, a step given to strategy.run,\n"
         "an optimizer or metric written into `model.compile(...)`, through helpers that return it, across the\n"
         "project's files, and in a library's uncalled `train()` that makes its own strategy): a model built\n"
         "outside the scope for "
         "single-device evaluation, export, a summary, on the single-device branch of `if multi_gpu: strategy =\n"
         "... else:`, by a function handed to a library with the strategy (`kt.Hyperband(build_model,\n"
         "distribution_strategy=strategy)`), or rebuilt under the scope before training is not reported.\n"
         "Also a moving average whose first ExponentialMovingAverage.apply() (it creates the shadow variables)\n"
         "is reached from outside the scope, not from a strategy.run step.\n"
         "Fix:\n    strategy = tf.distribute.MirroredStrategy()\n    with strategy.scope():\n"
         "        model = build_model()\n        model.compile(optimizer='adam', loss=...)\n    model.fit(dataset)"),
    Rule("TF002", "warning", "pinned-to-one-device",
         "training pinned to a single device with tf.device() while more devices are meant to be used",
         "`with tf.device('/gpu:0'):` places everything inside on GPU 0. Training under it uses one GPU, no\n"
         "matter how many there are. Reported when such a block trains while several devices are wanted (a\n"
         "strategy, multi_gpu_model, a num_gpus setting), when it holds a script's whole computation and the\n"
         "script names no other GPU, and when Keras trains under `tf.device('/cpu:0')` (no GPU at all). Placing\n"
         "variables on /cpu:0 with per-tower `tf.device('/gpu:%d' % i)` (the TF1 multi-tower pattern) is not.\n"
         "Fix: remove the device pin and let a strategy place the replicas:\n"
         "    strategy = tf.distribute.MirroredStrategy()\n    with strategy.scope():\n        model = ..."),
    Rule("TF003", "error", "visible-devices-narrowed",
         "only one GPU made visible in code (CUDA_VISIBLE_DEVICES / tf.config.set_visible_devices)",
         "Setting CUDA_VISIBLE_DEVICES to a single id, or `tf.config.set_visible_devices(gpus[0], 'GPU')`,\n"
         "hides every other GPU from the process: a MirroredStrategy then has one replica. So does calling\n"
         "set_visible_devices once per GPU in a loop (each call replaces the last).\n"
         "Fix: delete the line and choose devices when launching (`CUDA_VISIBLE_DEVICES=0,1 python train.py`),\n"
         "or list several: `MirroredStrategy(devices=['/gpu:0', '/gpu:1'])`. '-1' (hide all) is not flagged, nor\n"
         "a script with no multi-device intent (no multi-device strategy, multi_gpu_model or num_gpus setting)."),
    Rule("TF004", "error", "dataset-not-distributed",
         "strategy.run fed from a dataset that was not distributed",
         "In a custom loop, each replica must get its own slice of the global batch. Iterating a plain\n"
         "tf.data.Dataset gives every replica the same full batch (or fails on PerReplica values).\n"
         "Also `strategy.run(fn, args=(next(iterator),))` whose iterator, through the step's callers and dicts of\n"
         "iterators or loaders, is iter() of such a pipeline or of a loader asked for batches without the strategy.\n"
         "Fix:\n    dist_ds = strategy.experimental_distribute_dataset(dataset)\n    for batch in dist_ds:\n"
         "        strategy.run(train_step, args=(batch,))\n"
         "(or `strategy.distribute_datasets_from_function(fn)`). Keras `fit` needs neither."),
    Rule("TF005", "error", "step-called-directly",
         "training step called directly in a loop while a strategy exists (not through strategy.run)",
         "A step function called directly runs once, on the default device, in the cross-replica context:\n"
         "the strategy's replicas do nothing.\n"
         "Fix:\n    @tf.function\n    def distributed_step(batch):\n"
         "        per_replica = strategy.run(train_step, args=(batch,))\n"
         "        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)"),
    Rule("TF006", "error", "loss-not-scaled-globally",
         "per-replica loss uses the default Keras reduction; scale by the global batch instead",
         "Inside strategy.run each replica sees B/N examples. A Keras loss with the default reduction divides\n"
         "by the per-replica batch, so after the gradient sum across replicas the loss is N times too large\n"
         "(TensorFlow refuses AUTO/SUM_OVER_BATCH_SIZE here).\n"
         "Fix:\n    loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(\n"
         "        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)\n"
         "    loss = tf.nn.compute_average_loss(loss_obj(y, pred), global_batch_size=GLOBAL_BATCH)"),
    Rule("TF007", "warning", "batch-not-scaled",
         "batch size is a constant: not scaled by strategy.num_replicas_in_sync",
         "With N replicas the batch given to the dataset or to fit() is the *global* batch: each GPU gets B/N.\n"
         "A constant tuned for one GPU leaves every GPU underfed (and changes the optimisation). Followed into\n"
         "helpers (`load_data(32)` that batches by its argument), `fit(**kwargs)` dicts, command-line defaults\n"
         "(`FLAGS.batch_size`, `args.batch_size`), `ds.apply(dense_to_ragged_batch(n))` and a library loader's\n"
         "`batch_size=` feeding fit, a batch size read from a configuration mapping (`cfg[\"batch_size\"]`)\n"
         "when the file never mentions the replica count, and a pipeline handed to a project trainer that\n"
         "distributes it under the strategy it makes (`trainer(dataset)`, `experimental_distribute_dataset` in the\n"
         "trainer's module) when its configured batch is not scaled by a device count; unit-test modules are\n"
         "left alone; a pipeline that is only evaluated on (evaluate, predict, validation_data) is not\n"
         "reported, nor, when the pipelines\n"
         "training consumes are known, a batch outside them (a vocabulary, a metric's candidates).\n"
         "Fix:\n    BATCH_PER_REPLICA = 64\n"
         "    GLOBAL_BATCH = BATCH_PER_REPLICA * strategy.num_replicas_in_sync\n"
         "    dataset = dataset.batch(GLOBAL_BATCH)"),
    Rule("TF008", "warning", "no-prefetch",
         "tf.data pipeline feeds training without .prefetch()",
         "Without prefetch, input preparation and the training step take turns: the GPUs wait for each batch.\n"
         "Found for pipelines that training consumes: fit's input, a training loop's iterable, an iterator drawn\n"
         "with next()/get_next() in a training script, an Estimator input_fn's return, and, in a data module\n"
         "that trains nothing itself, what its training loaders return (batched). Pipelines given to\n"
         "strategy.experimental_distribute_dataset are not reported: it adds a prefetch to the devices itself.\n"
         "A pipeline prefetched before a later map/interleave/flat_map (a loader prefetches, the script maps\n"
         "again) is reported too; batching or shuffling after the prefetch is not.\n"
         "Fix: end the pipeline with `dataset = dataset.prefetch(tf.data.AUTOTUNE)`."),
    Rule("TF009", "warning", "map-serial",
         "tf.data .map() without num_parallel_calls runs on one CPU thread",
         "`Dataset.map(fn)` without num_parallel_calls processes one element at a time; with several GPUs the\n"
         "input pipeline becomes the bottleneck.\n"
         "Fix: `dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)`."),
    Rule("TF010", "error", "accumulation-applies-every-step",
         "'gradient accumulation' loop applies gradients on every micro-step",
         "Accumulation means summing gradients over k micro-batches and applying once. Calling\n"
         "apply_gradients inside the micro-step loop updates k times per batch: no accumulation happens and\n"
         "the effective batch stays small.\n"
         "Fix: sum into accumulators and apply when `(step + 1) % accum_steps == 0`:\n"
         "    accum = [a + g for a, g in zip(accum, grads)]\n"
         "    if (step + 1) % accum_steps == 0:\n"
         "        optimizer.apply_gradients(zip([a / accum_steps for a in accum], model.trainable_variables))"),
    Rule("TF011", "warning", "step-not-tf-function",
         "strategy.run called from eager code: the step is not wrapped in tf.function",
         "Run eagerly, strategy.run executes the replicas one after another in Python; wrapped in\n"
         "tf.function, the replicas run in parallel from one graph.\n"
         "Fix:\n    @tf.function\n    def distributed_step(batch):\n"
         "        return strategy.run(train_step, args=(batch,))"),
    Rule("TF012", "warning", "multiworker-no-cluster",
         "MultiWorkerMirroredStrategy with no cluster configuration (TF_CONFIG or a cluster resolver) in sight",
         "Without TF_CONFIG (or a cluster resolver) each worker believes it is alone: N independent\n"
         "single-worker jobs train N different models.\n"
         "Fix: set TF_CONFIG on every worker, e.g.\n"
         "    os.environ['TF_CONFIG'] = json.dumps({'cluster': {'worker': [...]}, 'task': {'type': 'worker', 'index': i}})\n"
         "or pass `cluster_resolver=tf.distribute.cluster_resolver.SlurmClusterResolver()`."),
    # ---- PyTorch -------------------------------------------------------------------------------------
    Rule("PT001", "warning", "data-parallel",
         "nn.DataParallel: single-process, GIL-bound, GPU 0 does extra work",
         "DataParallel scatters each batch from GPU 0 and gathers outputs there every step, in one Python\n"
         "process; it scales poorly and is not recommended by PyTorch.\n"
         "Fix: one process per GPU with DistributedDataParallel (torchrun) or allgpu:\n"
         "    strategy = allgpu.MirroredStrategy()\n    with strategy.scope():\n        model = Net()"),
    Rule("PT002", "error", "hard-coded-device",
         "device hard-coded in a torch.distributed script: every rank uses the same GPU",
         "`.cuda()`, `.to('cuda:0')` or `torch.device('cuda:0')` put every process on GPU 0 (bare `.cuda()` is\n"
         "GPU 0 unless torch.cuda.set_device was called).\n"
         "Fix:\n    local_rank = int(os.environ['LOCAL_RANK'])\n    torch.cuda.set_device(local_rank)\n"
         "    device = torch.device('cuda', local_rank)"),
    Rule("PT003", "error", "loader-not-sharded",
         "DataLoader under DDP without a DistributedSampler: every rank trains on the whole dataset",
         "Each DDP rank iterates its own DataLoader. Without a DistributedSampler they all see all the data,\n"
         "so an epoch does N times the work and gains nothing. Found in functions `mp.spawn` runs, through\n"
         "`DataLoader(**kw)` dicts, and for the project's own IterableDataset when nothing in its class reads\n"
         "a rank or splits the stream.\n"
         "Fix:\n    sampler = DistributedSampler(dataset)\n"
         "    loader = DataLoader(dataset, batch_size=B, sampler=sampler, num_workers=4)"),
    Rule("PT004", "warning", "sampler-no-set-epoch",
         "DistributedSampler without set_epoch() in the epoch loop: the same order every epoch",
         "DistributedSampler seeds its shuffle with the epoch number; without `sampler.set_epoch(epoch)` every\n"
         "epoch uses the same permutation. A sampler built and never used (the loader gets `sampler=None`)\n"
         "is reported too: nothing can set its epoch, and it shards nothing. So is set_epoch called once (at\n"
         "setup, or before the epoch loop) instead of at each epoch's start, and a trainer's epoch loop over a\n"
         "training loader that another module of the project builds on a DistributedSampler (its caller, or a\n"
         "data module beside it) when neither sets the epoch. Not reported: set_epoch in any loop, an epoch\n"
         "hook or event handler, a sampler rebuilt each epoch with a seed that names the epoch, or under\n"
         "Lightning/Accelerate, which set it themselves.\n"
         "Fix:\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for batch in loader: ..."),
    Rule("PT005", "warning", "loader-no-workers",
         "DataLoader with no worker processes (num_workers missing or 0) in a training script",
         "With num_workers=0 the training process loads and augments every batch itself, between steps; the\n"
         "GPUs wait.\nFix: `DataLoader(..., num_workers=4, pin_memory=True, persistent_workers=True)`."),
    Rule("PT006", "warning", "accumulation-without-no-sync",
         "gradient accumulation under DDP without model.no_sync(): gradients all-reduced every micro-step",
         "DDP all-reduces in every backward(). Accumulating k micro-batches without no_sync() pays k\n"
         "all-reduces instead of one. Also found when backward() runs inside a loss-scaler wrapper that steps\n"
         "on a flag (`loss_scaler(loss, opt, update_grad=(i + 1) % k == 0)`, the timm/MAE/Swin convention), and\n"
         "for a micro-step loop (`for _ in range(grad_accum_every): ... backward()`, the step after it) under\n"
         "DDP, Accelerate (there: without `with accelerator.accumulate(model):`) or Lightning Fabric (without\n"
         "`with fabric.no_backward_sync(model, enabled=...):`), also when the optimizer steps every k\n"
         "micro-steps through a trainer's own methods, or in a per-batch step method (`loss.backward()`,\n"
         "then `if idx % k == k - 1: optimizer.step()`) a framework calls each batch; and when no_sync()\n"
         "holds the backward but not the forward (DDP arms the all-reduce in the forward).\n"
         "Fix:\n    ctx = model.no_sync() if (i + 1) % k else contextlib.nullcontext()\n"
         "    with ctx:\n        loss = loss_fn(model(x), y)\n        loss.backward()"),
    Rule("PT007", "warning", "save-on-every-rank",
         "torch.save not guarded by a rank check: every rank writes the same file",
         "Every process runs the same script; unguarded, N processes write one checkpoint path at once and\n"
         "can leave it corrupt. A function handed to `mp.spawn` runs on every rank; the `else:` of\n"
         "`if rank == 0:` is every other rank; a method of a class that tests the rank elsewhere, left\n"
         "unguarded, is reported; so is a call of a project object's method that reaches torch.save\n"
         "(`checkpoint_handler.save(...)`, the class in another module of the project) from code that runs\n"
         "on every rank. A per-node guard (`local_rank == 0`, `rank % ngpus_per_node == 0`) is not\n"
         "enough: on several machines one process per node writes the same path on a shared filesystem.\n"
         "Fix:\n    if dist.get_rank() == 0:\n        torch.save(model.module.state_dict(), path)"),
    Rule("PT008", "info", "batchnorm-not-synced",
         "BatchNorm under DDP without SyncBatchNorm: statistics from the per-GPU batch only",
         "Under DDP each rank normalises with its own small batch; with small per-GPU batches this hurts\n"
         "accuracy. Found for BatchNorm layers in the file and for torchvision/timm BatchNorm models (resnet,\n"
         "densenet, efficientnet...) that DDP wraps.\n"
         "Fix: `model = nn.SyncBatchNorm.convert_sync_batchnorm(model)` before wrapping in DDP."),
    Rule("PT009", "error", "distributed-model-not-wrapped",
         "torch.distributed initialised but the model is neither wrapped (DDP/FSDP) nor synced",
         "init_process_group starts the group, but nothing averages gradients: each rank trains its own model.\n"
         "Fix: `model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])`."),
    Rule("PT010", "error", "visible-devices-narrowed",
         "CUDA_VISIBLE_DEVICES narrowed to one GPU in code",
         "Setting CUDA_VISIBLE_DEVICES to a single id in the script hides all the other GPUs from it.\n"
         "Fix: remove the line; choose devices at launch (`CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun ...`).\n"
         "Setting it per process from the local rank, to '-1', or to several GPUs is not flagged."),
    Rule("PT011", "warning", "torch-load-unsafe",
         "torch.load without weights_only=True can run arbitrary code from the file",
         "torch.load unpickles; a crafted checkpoint executes code on load. torch 2.6 changed the default to\n"
         "weights_only=True, so a call without the argument is unsafe on torch < 2.6 only (the message says so);\n"
         "weights_only=False is unsafe on every version.\n"
         "Fix: `torch.load(path, map_location='cpu', weights_only=True)`."),
    Rule("PT012", "error", "sharded-forward-under-rank-guard",
         "forward of a sharded model (FullyShardedStrategy / FSDP) run under a rank guard",
         "A sharded model's forward is a collective: every layer all-gathers its parameters from all replicas.\n"
         "Run on some replicas only (`if is_chief:`, `if rank == 0:`, `if master_process:`, or the `else:` of\n"
         "such a test), the others never join the all-gather: the job hangs (allgpu stops it, naming the\n"
         "collective). Found for models built under a FullyShardedStrategy's scope, wrapped in FSDP or passed to\n"
         "fully_shard, called directly, through `.generate()`, or through a local helper (nanoGPT's\n"
         "`estimate_loss()` under `if master_process:`).\n"
         "Fix: run the forward on every replica and reduce the metric; keep only printing and saving guarded:\n"
         "    loss = evaluate(model, val_loader)                 # every replica\n"
         "    loss = strategy.reduce('MEAN', loss, axis=None)    # or dist.all_reduce(loss); loss /= world_size\n"
         "    if strategy.is_chief:\n        print(f'val loss {loss:.3f}')"),
    # ---- allgpu --------------------------------------------------------------------------------------
    Rule("AG001", "error", "allgpu-created-outside-scope",
         "model built outside strategy.scope() in a script that uses an allgpu strategy",
         "allgpu mirrors only the modules created inside `with strategy.scope():`; a model built outside is\n"
         "not mirrored and allgpu refuses to train it (NotMirroredError).\n"
         "Fix:\n    strategy = allgpu.MirroredStrategy()\n    with strategy.scope():\n        model = Net()\n"
         "        optimizer = torch.optim.AdamW(model.parameters())\n"
         "    allgpu.fit(model, optimizer, loss_fn, data, epochs=3, global_batch_size=256, strategy=strategy)"),
    Rule("AG002", "error", "allgpu-loss-divided-by-global-batch",
         "loss summed and divided by the global batch by hand in an allgpu script",
         "TensorFlow sums gradients across replicas, so its tutorials scale the loss as\n"
         "`sum(per_example_loss) / GLOBAL_BATCH`. allgpu averages gradients (as DDP does): the same line makes\n"
         "every gradient num_replicas_in_sync times too small, which divides the learning rate by N.\n"
         "Fix:\n    loss = allgpu.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)\n"
         "or the mean over the replica's batch: `loss = loss_fn(model(x), y)` with reduction='mean'."),
    Rule("AG003", "warning", "allgpu-model-too-large-to-mirror",
         "model too large to mirror: parameters, gradients and optimizer state exceed an 80 GiB GPU",
         "MirroredStrategy (and OneDevice, MultiWorkerMirrored, CentralStorage) keeps a whole copy of the\n"
         "parameters, their gradients and the optimizer state on every device: per float32 parameter 4 bytes\n"
         "each, Adam adding two moments (16 bytes a parameter). The rule reads the model's size from the source:\n"
         "a checkpoint name that states it (`from_pretrained(\"meta-llama/Llama-2-7b-hf\")`: 7B; a literal, a\n"
         "module constant or an argparse default), or nn.Linear / nn.Embedding / nn.Conv sizes spelled out\n"
         "(int literals, module constants, __init__ defaults and arguments, config-class fields, repeated with\n"
         "range(N)), through the script's own nn.Module classes. It counts what it can read (a lower bound),\n"
         "the dtype (16-bit with torch_dtype=torch.bfloat16/float16/'auto' or a .half()/.bfloat16() in the\n"
         "file, else float32) and the optimizer the file builds (none seen: none counted; an allgpu.fit script\n"
         "without one is judged on parameters and gradients), and reports when that exceeds 90% of an 80 GiB\n"
         "GPU (A100/H100 80GB, the largest common one), the rest being left for activations: such a model fits\n"
         "no common GPU mirrored. Not reported when parameters are frozen (requires_grad), adapters (peft) or\n"
         "quantisation / device_map are used, or the script already builds FullyShardedStrategy.\n"
         "Fix: shard parameters, gradients and optimizer state across the replicas (ZeRO-3, FSDP2):\n"
         "    strategy = allgpu.FullyShardedStrategy()     # the same API as MirroredStrategy\n"
         "    with strategy.scope():\n        model = AutoModelForCausalLM.from_pretrained(NAME)\n"
         "        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)\n"
         "Each replica then holds 1/N; the message says how many 80 GiB GPUs that takes. When the parameters\n"
         "alone exceed one GPU, build the model under `with strategy.scope(), torch.device('meta'):` so that\n"
         "only the shards are ever allocated. On your own devices,\n"
         "`allgpu doctor --run train.py` (or `--device-memory 24GiB` to plan for other GPUs) and the step\n"
         "monitor report the same arithmetic from the real model (finding `needs-sharding`)."),
    Rule("AG004", "info", "allgpu-oom-handled-while-mirrored",
         "out-of-memory errors caught under a mirroring strategy: sharding may free the memory instead",
         "The script catches torch.cuda.OutOfMemoryError (or a RuntimeError it tests for 'out of memory'),\n"
         "typically to lower the batch size and retry, while MirroredStrategy (or OneDevice, MultiWorkerMirrored,\n"
         "CentralStorage) keeps a whole copy of parameters, gradients and optimizer state on every device\n"
         "(16 bytes a float32 parameter under Adam). When that state takes much of the device, a smaller batch\n"
         "only trades speed for it; sharding frees (N-1)/N of it on each of N replicas.\n"
         "Find out which it is: `allgpu doctor --run train.py` (finding `needs-sharding` when the state does not\n"
         "fit with room for activations; `--device-memory 24GiB` plans for another GPU).\n"
         "Fix, when the state is the problem:\n"
         "    strategy = allgpu.FullyShardedStrategy()     # the same API as MirroredStrategy\n"
         "When activations are (long sequences, large batches): keep the global batch and split it,\n"
         "    allgpu.fit(..., accumulation_steps=4)        # or strategy.accumulate(4)\n"
         "or recompute them in backward (torch.utils.checkpoint). Not reported when the script already builds\n"
         "FullyShardedStrategy. Info only: an OOM handler alone does not say what fills the device."),
    Rule("AG005", "error", "allgpu-loss-divided-by-accumulation-steps",
         "loss divided by the micro-batch count that strategy.accumulate(k) already averages over",
         "DDP's accumulation (`no_sync()`, nanoGPT's `model.require_backward_grad_sync`) sums the micro-batches'\n"
         "gradients, so DDP scripts divide each micro-batch's loss by k. allgpu's `strategy.accumulate(k)` divides\n"
         "the summed gradients by k itself (k micro-batches equal one batch k times larger): with the DDP line\n"
         "kept, every gradient is k times too small, silently (the learning rate divided by k; under Adam less,\n"
         "through eps and gradient clipping).\n"
         "Fix:\n    with strategy.accumulate(k):\n        loss = model(x, y)             # no `/ k`\n"
         "        loss.backward()\n"
         "or keep the division and DDP's form: `with strategy.no_sync():` on all but the k-th backward."),
]

# The fix in one line: every finding's message ends with ``Fix: <this>`` (``--explain`` gives it in full).
_FIX = {
    "E999": "port the file to Python 3 (`2to3 -w FILE`) or correct the line",
    "TF001": "create it under `with strategy.scope():` (model, optimizer, metrics and compile), then train",
    "TF002": "remove the `tf.device` pin and build the model under `with tf.distribute.MirroredStrategy().scope():`",
    "TF003": "delete the line; choose GPUs at launch (`CUDA_VISIBLE_DEVICES=0,1 python train.py`) or list several",
    "TF004": "iterate `strategy.experimental_distribute_dataset(dataset)` and call `strategy.run` on its batches",
    "TF005": "call it through `strategy.run(step, args=(batch,))` inside a `@tf.function`",
    "TF006": "use `reduction=tf.keras.losses.Reduction.NONE` and "
             "`tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)`",
    "TF007": "`GLOBAL_BATCH = BATCH_PER_REPLICA * strategy.num_replicas_in_sync` and batch by GLOBAL_BATCH",
    "TF008": "end the pipeline with `.prefetch(tf.data.AUTOTUNE)`",
    "TF009": "`.map(fn, num_parallel_calls=tf.data.AUTOTUNE)`",
    "TF010": "sum the gradients into accumulators and call apply_gradients once every k micro-steps",
    "TF011": "wrap the function that calls `strategy.run` in `@tf.function`",
    "TF012": "set TF_CONFIG on every worker, or pass a cluster resolver (`SlurmClusterResolver()`)",
    "PT001": "one process per GPU: DistributedDataParallel under torchrun, or `allgpu.MirroredStrategy()`",
    "PT002": "`torch.cuda.set_device(local_rank)` and `device = torch.device('cuda', local_rank)` "
             "(local_rank = int(os.environ['LOCAL_RANK']))",
    "PT003": "`DataLoader(dataset, sampler=DistributedSampler(dataset), ...)` (and no shuffle=True)",
    "PT004": "call `sampler.set_epoch(epoch)` at the start of every epoch",
    "PT005": "`DataLoader(..., num_workers=4, pin_memory=True, persistent_workers=True)`",
    "PT006": "run the forward and backward of the non-final micro-steps in `with model.no_sync():`",
    "PT007": "save under `if dist.get_rank() == 0:` (the global rank)",
    "PT008": "`model = nn.SyncBatchNorm.convert_sync_batchnorm(model)` before wrapping in DDP",
    "PT009": "`model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])`",
    "PT010": "delete the line; choose GPUs at launch (`CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun ...`)",
    "PT011": "`torch.load(path, map_location='cpu', weights_only=True)`",
    "PT012": "run the forward (evaluation, sampling) on every replica and reduce the metric; "
             "print or save under the rank guard only",
    "AG001": "create the model and optimizer under `with strategy.scope():`",
    "AG002": "`loss = allgpu.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)` or a plain mean",
    "AG003": "`strategy = allgpu.FullyShardedStrategy()` (the same API as MirroredStrategy)",
    "AG004": "check with `allgpu doctor --run train.py`; shard with `allgpu.FullyShardedStrategy()` if the "
             "state is the problem",
    "AG005": "drop the division: `with strategy.accumulate(k): loss.backward()` averages over the k micro-batches",
}

RULES: dict[str, Rule] = {r.id: replace(r, fix=_FIX.get(r.id, "")) for r in _R}

# Rules off by default: they run only when ``--select`` names them (by id or by a prefix such as ``TF``).
# Every rule is on unless its precision on the held-out half of the corpus is below 0.9; docs/lint.md and the
# README say why for each one left here.
# TF012: real multi-worker scripts get TF_CONFIG from their launcher's environment (Kubernetes TFJob, Slurm
# wrappers), which no static check sees: on the corpus's tuning half it was wrong every time it fired (0 of 3).
DEFAULT_OFF: frozenset[str] = frozenset({"TF012"})


def explain(rule_id: str) -> str:
    """The full text for ``allgpu lint --explain ID``.

    Raises:
        UnknownRuleError: (a ``KeyError`` and a ``ValueError``) ``rule_id`` is not a known rule (the message
            lists the known ids).
    """
    rule = RULES.get(rule_id.upper())
    if rule is None:
        raise UnknownRuleError(f"unknown rule {rule_id!r}; known rules: {', '.join(RULES)}. "
                               "Fix: `allgpu lint --list-rules` lists them.")
    return f"{rule.id} ({rule.severity}, {rule.title}): {rule.message}\n\n{rule.explanation}\n"
