import logging
import os

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def init_distributed():
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    return dist.get_rank(), dist.get_world_size(), torch.device("cuda", local_rank)


def is_main():
    return not dist.is_initialized() or dist.get_rank() == 0


def save_checkpoint(path, model, optimizer, epoch):
    if is_main():
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": epoch}, path)
    dist.barrier()


def load_checkpoint(path, model, optimizer):
    if not os.path.exists(path):
        return 0
    ckpt = torch.load(path)
    model.module.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    log.info("resumed from %s (epoch %d)", path, ckpt["epoch"])
    return ckpt["epoch"] + 1
