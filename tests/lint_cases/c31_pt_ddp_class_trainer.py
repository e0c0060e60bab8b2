"""A Trainer class around DDP (the PyTorch multi-GPU tutorial's layout)."""
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            snapshot = torch.load(snapshot_path, map_location=f"cuda:{self.gpu_id}", weights_only=True)
            self.model.module.load_state_dict(snapshot["MODEL_STATE"])
            self.epochs_run = snapshot["EPOCHS_RUN"]

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))

    def _save_snapshot(self, epoch):
        torch.save({"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}, self.snapshot_path)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def main(total_epochs=10, save_every=2, batch_size=32):
    init_process_group(backend="nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dataset = MyTrainDataset(2048)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=batch_size, pin_memory=True, shuffle=False,
                        sampler=DistributedSampler(dataset), num_workers=4)
    Trainer(model, loader, optimizer, save_every, "snapshot.pt").train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()
