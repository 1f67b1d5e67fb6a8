"""A PyTorch training-style job, unmodified for sim/: torchrun's environment in, torch.distributed
with the NCCL backend, every collective checked exactly.

Run under `ncclsim-run --preload -n 8 --nodes 2 -- python torch_job.py`. Kernels do not run on sim/,
so data moves only through copies (inputs are built on the CPU and copied in, results copied out)
and NCCL; each check compares with the value computed on the CPU. Prints one `checksum` line and,
on rank 0, the `calls` line per collective and size (for the tuning check) and `PASS`.
"""
import hashlib
import os
import sys

import torch
import torch.distributed as dist

ITERS = int(os.environ.get("TORCH_JOB_ITERS", "120"))
N = 1024  # elements per rank of the repeated all-reduce and all-gather (float32: 4 KiB)

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
# Each simulated node has NCCLSIM_DEVICES GPUs (the test sets 4: 2 nodes x 4 GPUs).
if "NCCLSIM_DEVICES" in os.environ:
    assert torch.cuda.device_count() == int(os.environ["NCCLSIM_DEVICES"]), torch.cuda.device_count()
torch.cuda.set_device(local_rank)
dev = torch.device("cuda", local_rank)
digest = hashlib.sha256()


def to_dev(t):
    return t.to(dev)  # a host-to-device copy, no kernel


def check(name, got, want):
    got = got.cpu()  # a device-to-host copy, no kernel
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[:5].flatten().tolist()
        sys.exit(f"rank {rank}: {name}: wrong result at {bad}: got {got.flatten()[:8].tolist()}, "
                 f"want {want.flatten()[:8].tolist()}")
    digest.update(name.encode())
    digest.update(got.numpy().tobytes())


def rank_data(r, n, salt):
    # Small integers: float32 sums of them are exact in any order.
    return ((torch.arange(n, dtype=torch.int64) * 7 + r * 13 + salt) % 1000).to(torch.float32)


dist.init_process_group("nccl")
assert dist.get_rank() == rank and dist.get_world_size() == world

# all_reduce, repeated: one key for the tuner to converge on
want_ar = sum(rank_data(r, N, 1) for r in range(world))
for i in range(ITERS):
    t = to_dev(rank_data(rank, N, 1))
    dist.all_reduce(t)
    if i == 0 or i == ITERS - 1:
        check("all_reduce", t, want_ar)

# all_gather_into_tensor, repeated
want_ag = torch.cat([rank_data(r, N, 2) for r in range(world)])
out = torch.empty(world * N, dtype=torch.float32, device=dev)
for i in range(ITERS):
    dist.all_gather_into_tensor(out, to_dev(rank_data(rank, N, 2)))
    if i == 0 or i == ITERS - 1:
        check("all_gather_into_tensor", out, want_ag)

# reduce_scatter_tensor
full = [rank_data(r, world * 256, 3) for r in range(world)]
rs = torch.empty(256, dtype=torch.float32, device=dev)
dist.reduce_scatter_tensor(rs, to_dev(full[rank]))
check("reduce_scatter_tensor", rs, sum(full)[rank * 256:(rank + 1) * 256])

# broadcast from a rank on the second node
root = world - 3
b = to_dev(rank_data(rank, 512, 4))
dist.broadcast(b, src=root)
check("broadcast", b, rank_data(root, 512, 4))

dist.barrier()

# a subgroup: the even ranks (both nodes), created by every rank as new_group requires
members = list(range(0, world, 2))
sub = dist.new_group(members)
if rank in members:
    s = to_dev(rank_data(rank, 300, 5))
    dist.all_reduce(s, group=sub)
    check("new_group all_reduce", s, sum(rank_data(r, 300, 5) for r in members))

# async work
a = to_dev(rank_data(rank, 2048, 6))
work = dist.all_reduce(a, async_op=True)
work.wait()
check("async all_reduce", a, sum(rank_data(r, 2048, 6) for r in range(world)))

# one collective captured in a CUDA graph and replayed, with new data copied in before each replay
static = torch.empty(N, dtype=torch.float32, device=dev)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up outside the capture, as torch's docs advise
    static.copy_(rank_data(rank, N, 7))
    dist.all_reduce(static)
torch.cuda.current_stream().wait_stream(side)
check("graph warm-up", static, sum(rank_data(r, N, 7) for r in range(world)))
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    dist.all_reduce(static)
for salt in (8, 9):
    static.copy_(rank_data(rank, N, salt))
    graph.replay()
    check(f"graph replay {salt}", static, sum(rank_data(r, N, salt) for r in range(world)))

# The graph goes before the process group: destroying it releases the user object through which
# ProcessGroupNCCL cleans up after the graph, and that callback reads the process group. (On a GPU
# the callback runs later, on a CUDA thread, so the reverse order usually goes unnoticed.)
graph.reset()
torch.cuda.synchronize()
dist.destroy_process_group()


def say(line):
    """One line on stdout in one write(2): eight ranks share the file, and print() under
    PYTHONUNBUFFERED (set on CI runners) writes the text and its newline separately, so another
    rank's line could land between them."""
    os.write(1, (line + "\n").encode())


say(f"checksum rank={rank} {digest.hexdigest()}")
if rank == 0:
    # What the report must show: one key per collective and size (tune=1: issued often enough for
    # the tuner to converge).
    for nranks, coll, nbytes, n, tune in ((world, "allreduce", N * 4, ITERS, 1),
                                          (world, "allgather", N * 4, ITERS, 1),
                                          (world, "reducescatter", 256 * 4, 1, 0),
                                          (world, "broadcast", 512 * 4, 1, 0),
                                          (len(members), "allreduce", 300 * 4, 1, 0),
                                          (world, "allreduce", 2048 * 4, 1, 0)):
        say(f"calls nranks={nranks} coll={coll} bytes={nbytes} n={n} tune={tune}")
    say(f"PASS: {world} ranks, every collective exact")
