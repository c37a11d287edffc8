from datasets import load_dataset
from torch.utils.data import DataLoader
from transformers import DataCollatorForLanguageModeling


def group_texts(examples, block_size):
    concatenated = {k: sum(examples[k], []) for k in examples.keys()}
    total = (len(concatenated["input_ids"]) // block_size) * block_size
    return {
        k: [t[i: i + block_size] for i in range(0, total, block_size)]
        for k, t in concatenated.items()
    }


def build_dataloaders(tokenizer, cfg):
    raw = load_dataset(cfg.dataset_name, cfg.dataset_config)
    tokenized = raw.map(lambda b: tokenizer(b["text"]), batched=True,
                        remove_columns=raw["train"].column_names, num_proc=cfg.preprocess_workers)
    lm = tokenized.map(lambda b: group_texts(b, cfg.block_size), batched=True,
                       num_proc=cfg.preprocess_workers)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    train_dl = DataLoader(lm["train"], batch_size=cfg.batch_size, shuffle=True,
                          collate_fn=collator, num_workers=4, pin_memory=True)
    eval_dl = DataLoader(lm["validation"], batch_size=cfg.batch_size, collate_fn=collator,
                         num_workers=4, pin_memory=True)
    return train_dl, eval_dl
