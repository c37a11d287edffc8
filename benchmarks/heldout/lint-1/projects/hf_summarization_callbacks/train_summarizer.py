import argparse
import logging

import numpy as np
from datasets import load_dataset
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

from callbacks import BeamPreviewCallback, PreviewSummariesCallback, ReleaseMemoryCallback

logging.basicConfig(level=logging.INFO)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="google/flan-t5-base")
    p.add_argument("--out", default="out/t5-xsum")
    p.add_argument("--beam-preview", action="store_true")
    args = p.parse_args()

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model)
    raw = load_dataset("EdinburghNLP/xsum")

    def prep(batch):
        enc = tok(["summarize: " + d for d in batch["document"]], max_length=512, truncation=True)
        enc["labels"] = tok(text_target=batch["summary"], max_length=64, truncation=True)["input_ids"]
        return enc

    tokenized = raw.map(prep, batched=True, remove_columns=raw["train"].column_names, num_proc=8)
    preview_docs = raw["validation"]["document"][:4]

    targs = Seq2SeqTrainingArguments(
        output_dir=args.out,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        learning_rate=3e-4,
        num_train_epochs=3,
        bf16=True,
        eval_strategy="steps",
        eval_steps=2000,
        save_steps=2000,
        logging_steps=100,
        predict_with_generate=False,
        dataloader_num_workers=4,
        report_to="none",
    )
    preview = BeamPreviewCallback if args.beam_preview else PreviewSummariesCallback
    trainer = Seq2SeqTrainer(
        model=model,
        args=targs,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"].select(range(2000)),
        data_collator=DataCollatorForSeq2Seq(tok, model=model),
        processing_class=tok,
        callbacks=[ReleaseMemoryCallback(), preview(tok, preview_docs)],
    )
    trainer.train()
    trainer.save_model(args.out)
    print(np.round(trainer.evaluate()["eval_loss"], 4))


if __name__ == "__main__":
    main()
