import logging

import torch
from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class CudaMemoryCallback(TrainerCallback):
    """Reports peak memory and releases cached blocks at logging boundaries."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % args.logging_steps == 0 and torch.cuda.is_available():
            peak = torch.cuda.max_memory_allocated() / 2**30
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            if state.is_world_process_zero:
                logger.info("step %d peak mem %.2f GiB", state.global_step, peak)
        return control


class FreezeEmbeddingsCallback(TrainerCallback):
    def __init__(self, unfreeze_at_epoch: int = 1):
        self.unfreeze_at_epoch = unfreeze_at_epoch

    def on_epoch_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            return control
        frozen = state.epoch is not None and state.epoch < self.unfreeze_at_epoch
        for p in model.get_input_embeddings().parameters():
            p.requires_grad_(not frozen)
        return control
