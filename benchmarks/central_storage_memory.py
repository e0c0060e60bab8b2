"""GPU memory of MirroredStrategy vs CentralStorageStrategy for a 16.8M-parameter MLP with Adam (needs CUDA)."""
import subprocess, sys
import torch, allgpu
if len(sys.argv) == 1:  # one process per strategy, so neither measurement holds the other's memory
    for kind in ("mirrored", "central"):
        subprocess.run([sys.executable, __file__, kind], check=True)
    sys.exit()
for kind in sys.argv[1:]:
    s = allgpu.CentralStorageStrategy() if kind == "central" else allgpu.MirroredStrategy()
    torch.manual_seed(0)
    with s.scope():
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        x = torch.randn(64, 4096, device=s.device); y = torch.randint(0, 10, (64,), device=s.device)
        torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    devs = sorted({str(t.device) for st in opt.state.values() for t in st.values() if t.dim() > 0})
    print(kind, s.device, "GPU MiB allocated", round(torch.cuda.memory_allocated() / 2**20), "optimizer state on", devs,
          "param device", next(model.parameters()).device)
    s.close(); del model, opt; torch.cuda.empty_cache()
