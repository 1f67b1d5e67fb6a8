"""A PyTorch training loop for the hang diagnosis (tests/diag/run_culprit_shapes.sh): every step
all-reduces a gradient and reads the loss back with `.item()`, which waits for the step's work on
the host, as every loop that logs its loss does. With TORCH_DIAG_SLEEP=R:S, rank R sleeps for good
at the start of step S (a data loader that stopped, a deadlock in the input pipeline), so the other
ranks wait for it in the step's all-reduce. Each rank says so once its second step is done (every
rank has joined the communicator by then), for a test that strikes only a running job. Run under
`ncclsim-run --preload`.
"""
import os
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
steps = int(os.environ.get("TORCH_DIAG_STEPS", "100000"))
sleep_rank, sleep_step = (int(x) for x in os.environ.get("TORCH_DIAG_SLEEP", "-1:0").split(":"))
torch.cuda.set_device(local_rank)
dev = torch.device("cuda", local_rank)
dist.init_process_group("nccl")
grad = torch.ones(1 << 16, dtype=torch.float32).to(dev)  # built on the CPU: sim/ runs no kernel
for step in range(steps):
    if rank == sleep_rank and step == sleep_step:
        os.write(2, b"torch_diag: rank %d sleeps at step %d\n" % (rank, step))
        while True:
            time.sleep(3600)
    dist.all_reduce(grad)
    loss = grad[:1].cpu().item()  # the host waits for the step
    if step == 1:
        os.write(2, b"torch_diag: rank %d runs its steps\n" % rank)
dist.destroy_process_group()
