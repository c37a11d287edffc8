import argparse
import logging

import numpy as np
from datasets import load_dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    TrainingArguments,
)

from callbacks import CudaMemoryCallback, FreezeEmbeddingsCallback
from distill_trainer import DistillTrainer

logging.basicConfig(level=logging.INFO)
logger = logging.getLogger("distill")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--teacher", default="textattack/roberta-large-SST-2")
    p.add_argument("--student", default="distilroberta-base")
    p.add_argument("--output_dir", default="runs/distill")
    p.add_argument("--alpha", type=float, default=0.7)
    p.add_argument("--temperature", type=float, default=4.0)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--bs", type=int, default=32)
    return p.parse_args()


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def main():
    args = parse_args()
    tok = AutoTokenizer.from_pretrained(args.student)
    raw = load_dataset("glue", "sst2")
    enc = raw.map(lambda b: tok(b["sentence"], truncation=True, max_length=128), batched=True)
    enc = enc.rename_column("label", "labels").remove_columns(["sentence", "idx"])

    student = AutoModelForSequenceClassification.from_pretrained(args.student, num_labels=2)
    teacher = AutoModelForSequenceClassification.from_pretrained(args.teacher, num_labels=2)
    teacher.eval()

    targs = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.bs,
        per_device_eval_batch_size=args.bs * 2,
        num_train_epochs=args.epochs,
        learning_rate=5e-5,
        bf16=True,
        logging_steps=50,
        eval_strategy="epoch",
        save_strategy="epoch",
        dataloader_num_workers=4,
        report_to="none",
    )
    teacher.to(targs.device)

    trainer = DistillTrainer(
        model=student,
        args=targs,
        train_dataset=enc["train"],
        eval_dataset=enc["validation"],
        data_collator=DataCollatorWithPadding(tok),
        compute_metrics=compute_metrics,
        teacher=teacher,
        alpha=args.alpha,
        temperature=args.temperature,
        callbacks=[CudaMemoryCallback(), FreezeEmbeddingsCallback(1)],
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    logger.info("done: %s", trainer.evaluate())


if __name__ == "__main__":
    main()
