"""Memory estimate accuracy: estimated peak vs the peak of real training steps, on one GPU.

Bar (issue 9): within ±15% for ResNet-18, ResNet-50 (224×224) and GPT-124M (seq 1024) at three
batch sizes each, bf16 autocast, AdamW. The estimate runs two small probe batches; the truth
trains two real steps at the target batch (``measure_point``), each in a fresh model.

    PYTHONPATH=src python3 benchmarks/memory_estimate.py --out benchmarks/results/memory_estimate-h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import loss_is_output  # noqa: E402
from models import GPT  # noqa: E402  (benchmarks/models.py, shared with the engine benchmark)

from gpudoctor.memory.estimate import EstimateConfig, estimate_memory, measure_point  # noqa: E402
from gpudoctor.memory.inputs import batch_factory  # noqa: E402
from gpudoctor.records.units import GIB  # noqa: E402
from gpudoctor.records.atomic import write_text_atomic  # noqa: E402



def gpt_batch(batch: int, device):
    tokens = torch.randint(0, 50257, (batch, 1024), device=device)
    return (tokens, torch.roll(tokens, -1, dims=1)), None


def cases():
    import torchvision

    image = batch_factory("image:3x224x224:1000")
    yield "resnet18", torchvision.models.resnet18, image, None, (32, 64, 128)
    yield "resnet50", torchvision.models.resnet50, image, None, (32, 64, 128)
    yield "gpt124m", GPT, gpt_batch, loss_is_output, (4, 8, 16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    rows = []
    for name, factory, make, loss_fn, batches in cases():
        for batch in batches:
            config = EstimateConfig(batch_size=batch, precision="bf16", optimizer="adamw")
            start = time.perf_counter()
            kwargs = {"loss_fn": loss_fn} if loss_fn else {}
            est = estimate_memory(factory, make, config, model_name=name, **kwargs)
            estimate_s = time.perf_counter() - start
            truth = measure_point(factory, make, batch, config, device, loss_fn).peak_allocated_bytes
            error = (est.peak_bytes - truth) / truth
            rows.append({"model": name, "batch": batch, "estimate_gib": est.peak_bytes / GIB,
                         "measured_gib": truth / GIB, "error": error, "within_15pct": abs(error) <= 0.15,
                         "probes": [p.batch_size for p in est.points], "estimate_s": estimate_s,
                         "activation_mib_per_sample": est.activation_bytes_per_sample / (1 << 20)})
            print(f"{name:9s} batch {batch:4d}: estimate {est.peak_bytes / GIB:7.2f} GiB  "
                  f"measured {truth / GIB:7.2f} GiB  error {error:+6.1%}  "
                  f"(probes {rows[-1]['probes']}, {estimate_s:.1f} s)", flush=True)
    result = {
        "command": "PYTHONPATH=src python3 benchmarks/memory_estimate.py --out " + str(args.out),
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "precision": "bf16 autocast", "optimizer": "AdamW", "rows": rows,
        "all_within_15pct": all(r["within_15pct"] for r in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    return 0 if result["all_within_15pct"] else 1


if __name__ == "__main__":
    sys.exit(main())
