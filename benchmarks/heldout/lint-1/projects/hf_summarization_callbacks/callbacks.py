import logging

import torch
from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class ReleaseMemoryCallback(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        torch.cuda.empty_cache()
        return control


class PreviewSummariesCallback(TrainerCallback):
    """Writes a few summaries to the log after every evaluation."""

    def __init__(self, tokenizer, articles, max_new_tokens=96):
        self.tokenizer = tokenizer
        self.articles = articles
        self.max_new_tokens = max_new_tokens

    def _greedy(self, model, enc):
        start = model.config.decoder_start_token_id
        dec = torch.full((enc["input_ids"].size(0), 1), start, device=model.device, dtype=torch.long)
        encoder_outputs = model.get_encoder()(**enc)
        for _ in range(self.max_new_tokens):
            logits = model(encoder_outputs=encoder_outputs, attention_mask=enc["attention_mask"],
                           decoder_input_ids=dec).logits
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            dec = torch.cat([dec, nxt], dim=1)
        return dec

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if model is None or not state.is_world_process_zero:
            return control
        enc = self.tokenizer(self.articles, return_tensors="pt", padding=True, truncation=True,
                             max_length=512).to(model.device)
        out = self._greedy(model, enc)
        for art, summ in zip(self.articles, self.tokenizer.batch_decode(out, skip_special_tokens=True)):
            logger.info("step %d | %s... -> %s", state.global_step, art[:80], summ)
        return control


class BeamPreviewCallback(PreviewSummariesCallback):
    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if model is None or not state.is_world_process_zero:
            return control
        enc = self.tokenizer(self.articles, return_tensors="pt", padding=True, truncation=True,
                             max_length=512).to(model.device)
        out = model.generate(**enc, num_beams=4, max_new_tokens=self.max_new_tokens, early_stopping=True)
        for summ in self.tokenizer.batch_decode(out, skip_special_tokens=True):
            logger.info("step %d beam | %s", state.global_step, summ)
        return control
