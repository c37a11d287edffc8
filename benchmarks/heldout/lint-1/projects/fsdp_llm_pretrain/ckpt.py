import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def save_checkpoint(model, step, out_dir):
    cfg = FullStateDictConfig(rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
        state = model.state_dict()
    if dist.get_rank() == 0:
        os.makedirs(out_dir, exist_ok=True)
        torch.save({"model": state, "step": step}, os.path.join(out_dir, f"step_{step:07d}.pt"))
    dist.barrier()


def load_checkpoint(model, path):
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        ckpt = torch.load(path, weights_only=True)
        model.load_state_dict(ckpt["model"])
    return ckpt["step"]
