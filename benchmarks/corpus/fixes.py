"""Hand fixes for the corpus scripts: what a user would change after reading the verdict.

Each fix is a few exact substring replacements in the script's own files (``PATCHES[source][kind]``:
``(file relative to the repo root, old, new)``), applied to a copy; each ``old`` must occur
exactly once or the patch refuses (the script changed upstream: re-check the patch). Kinds:

* ``bf16``: the FP32-compute prescription: TF32 for what stays fp32, ``cudnn.benchmark`` and
  ``channels_last`` for conv nets, bf16 autocast around the forward and the loss (no GradScaler).
  Losses that autocast refuses (``BCELoss``) get the model output cast to float first.
* ``channels_last``: conv nets: ``channels_last`` model and input, ``cudnn.benchmark = True``.
* ``loader``: ``num_workers=W`` (default 8: what the data-loader finding prints, and
  ``min(8, cores - 1)`` on a 16-core H200 host), ``pin_memory``, ``persistent_workers``,
  ``prefetch_factor=4`` on the loader the training loop iterates.
* ``nosync``: no ``.item()`` (or printing a CUDA tensor) every step: the running loss stays on
  the GPU and is read every N steps, as the host-sync finding prescribes.
* ``batch``: launch-bound: a 4x larger default batch (the first line of that prescription; the
  comparison is in samples/s).
* ``compile``: launch-bound, second line: ``torch.compile(model)``.
* ``nonblocking``: blocking or pageable copies: ``non_blocking=True`` (+ ``pin_memory``).
* ``epochwork``: stalls at each epoch boundary from the script's own per-epoch work: image dumps
  and checkpoints every 10 epochs instead of every epoch (the periodic-stall prescription's
  first line).
* ``persistent``: stalls at each epoch boundary with workers restarted each epoch:
  ``persistent_workers=True`` on the loader, nothing else (the periodic-stall prescription).
* ``epochboundary``: the periodic-stall prescription whole, at once: ``persistent`` and
  ``epochwork`` together (the finding names both parts of dcgan's epoch boundary: the restarted
  workers' data wait and the script's per-epoch syncs, image dumps and checkpoints).

``KIND_FOR_CODE`` maps a finding code to the kind that applies its prescription.
"""

from __future__ import annotations

from pathlib import Path

BATCH_FACTOR = 4

# finding code (substring) -> fix kind, first match wins
KIND_FOR_CODE: tuple[tuple[str, str], ...] = (
    ("PERIODIC-STALL", "epochboundary"),
    ("FP32", "bf16"),
    ("AUTOCAST", "bf16"),
    ("MIXED-PRECISION", "bf16"),
    ("CHANNELS", "channels_last"),
    ("MEMORY-FORMAT", "channels_last"),
    ("CUDNN", "channels_last"),
    ("DATALOADER", "loader"),
    ("LOADER", "loader"),
    ("HOST-SYNC", "nosync"),
    ("SYNC", "nosync"),
    ("LAUNCH", "batch"),
    ("PAGEABLE", "nonblocking"),
    ("H2D-BLOCKING", "nonblocking"),
)

IMAGENET = "imagenet/main.py"
TF32 = "torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True"
AC = "torch.autocast({dev}, dtype=torch.bfloat16)"
LOADER_KW = "num_workers={W}, pin_memory=True, persistent_workers=True, prefetch_factor=4"

_imagenet_cl = [
    (IMAGENET, "def main_worker(gpu, ngpus_per_node, args):\n    global best_acc1\n",
     "def main_worker(gpu, ngpus_per_node, args):\n    global best_acc1\n    cudnn.benchmark = True\n"),
    (IMAGENET, "            model = torch.nn.DataParallel(model).cuda()\n",
     "            model = torch.nn.DataParallel(model).cuda().to(memory_format=torch.channels_last)\n"),
    (IMAGENET, "\n        images = images.to(device, non_blocking=True)\n",
     "\n        images = images.to(device, non_blocking=True, memory_format=torch.channels_last)\n"),
]

_dcgan_epochwork = [
    ("dcgan/main.py", "        if i % 100 == 0:\n", "        if i % 100 == 0 and epoch % 10 == 0:\n"),
    ("dcgan/main.py", "    torch.save(netG.state_dict()", "    if epoch % 10 == 9: torch.save(netG.state_dict()"),
    ("dcgan/main.py", "    torch.save(netD.state_dict()", "    if epoch % 10 == 9: torch.save(netD.state_dict()"),
]
_dcgan_persistent = [("dcgan/main.py", "shuffle=True, num_workers=int(opt.workers))",
                      "shuffle=True, num_workers=int(opt.workers), persistent_workers=True)")]

PATCHES: dict[str, dict[str, list[tuple[str, str, str]]]] = {
    "imagenet": {
        "bf16": _imagenet_cl + [
            (IMAGENET, "    global best_acc1\n    cudnn.benchmark = True\n",
             f"    global best_acc1\n    cudnn.benchmark = True\n    {TF32}\n"),
            (IMAGENET, "\n        # compute output\n        output = model(images)\n        loss = criterion(output, target)\n",
             "\n        # compute output\n        with " + AC.format(dev="device.type") + ":\n"
             "            output = model(images)\n            loss = criterion(output, target)\n"),
        ],
        "channels_last": _imagenet_cl,
        "loader": [(IMAGENET, "num_workers=args.workers, pin_memory=True, sampler=train_sampler)",
                    LOADER_KW + ", sampler=train_sampler)")],
        "nosync": [(IMAGENET, "\n        losses.update(loss.item(), images.size(0))\n",
                    "\n        losses.update(loss.detach(), images.size(0))  # read when printed\n")],
    },
    "dcgan": {
        "epochwork": _dcgan_epochwork,
        "persistent": _dcgan_persistent,
        "epochboundary": _dcgan_persistent + _dcgan_epochwork,
        "loader": [("dcgan/main.py", "shuffle=True, num_workers=int(opt.workers))",
                    "shuffle=True, " + LOADER_KW + ")"),
                   ("dcgan/main.py", "real_cpu = data[0].to(device)", "real_cpu = data[0].to(device, non_blocking=True)")],
        "nosync": [
            ("dcgan/main.py", "D_x = output.mean().item()", "D_x = output.mean().detach()"),
            ("dcgan/main.py", "D_G_z1 = output.mean().item()", "D_G_z1 = output.mean().detach()"),
            ("dcgan/main.py", "D_G_z2 = output.mean().item()", "D_G_z2 = output.mean().detach()"),
            ("dcgan/main.py", "\n        print('[%d/%d][%d/%d] Loss_D", "\n        if i % 50 == 0: print('[%d/%d][%d/%d] Loss_D"),
        ],
        "batch": [("dcgan/main.py", "'--batchSize', type=int, default=64,",
                   f"'--batchSize', type=int, default={64 * BATCH_FACTOR},")],
        "bf16": [
            ("dcgan/main.py", "cudnn.benchmark = True\n", f"cudnn.benchmark = True\n{TF32}\n"),
            ("dcgan/main.py", "netG = Generator(ngpu).to(device)", "netG = Generator(ngpu).to(device, memory_format=torch.channels_last)"),
            ("dcgan/main.py", "netD = Discriminator(ngpu).to(device)", "netD = Discriminator(ngpu).to(device, memory_format=torch.channels_last)"),
            # BCELoss refuses autocast: the discriminator's output goes to the loss as float
            ("dcgan/main.py", "        output = netD(real_cpu)\n",
             "        with " + AC.format(dev="device.type") + ":\n            output = netD(real_cpu).float()\n"),
            ("dcgan/main.py", "        fake = netG(noise)\n",
             "        with " + AC.format(dev="device.type") + ":\n            fake = netG(noise)\n"),
            ("dcgan/main.py", "        output = netD(fake.detach())\n",
             "        with " + AC.format(dev="device.type") + ":\n            output = netD(fake.detach()).float()\n"),
            ("dcgan/main.py", "        output = netD(fake)\n",
             "        with " + AC.format(dev="device.type") + ":\n            output = netD(fake).float()\n"),
        ],
    },
    "mnist": {
        "loader": [("mnist/main.py", "accel_kwargs = {'num_workers': 1,", "accel_kwargs = {'num_workers': {W}, 'prefetch_factor': 4,")],
        "batch": [("mnist/main.py", "'--batch-size', type=int, default=64,", f"'--batch-size', type=int, default={64 * BATCH_FACTOR},")],
        "bf16": [
            ("mnist/main.py", "    model = Net().to(device)\n",
             f"    {TF32}; torch.backends.cudnn.benchmark = True\n"
             "    model = Net().to(device, memory_format=torch.channels_last)\n"),
            ("mnist/main.py", "        output = model(data)\n        loss = F.nll_loss(output, target)\n",
             "        with " + AC.format(dev="device.type") + ":\n"
             "            output = model(data)\n            loss = F.nll_loss(output, target)\n"),
        ],
        "compile": [("mnist/main.py", "    model = Net().to(device)\n", "    model = torch.compile(Net().to(device))\n")],
        "nonblocking": [("mnist/main.py", "\n        data, target = data.to(device), target.to(device)\n        optimizer.zero_grad()",
                         "\n        data, target = data.to(device, non_blocking=True), target.to(device, non_blocking=True)\n        optimizer.zero_grad()")],
    },
    "siamese": {
        "loader": [("siamese_network/main.py", "accel_kwargs = {'num_workers': 1,",
                    "accel_kwargs = {'num_workers': {W}, 'persistent_workers': True, 'prefetch_factor': 4,")],
        "batch": [("siamese_network/main.py", "'--batch-size', type=int, default=64,", f"'--batch-size', type=int, default={64 * BATCH_FACTOR},")],
        "bf16": [
            ("siamese_network/main.py", "    model = SiameseNetwork().to(device)\n",
             f"    {TF32}; torch.backends.cudnn.benchmark = True\n"
             "    model = SiameseNetwork().to(device, memory_format=torch.channels_last)\n"),
            # BCELoss refuses autocast: the output goes to the loss as float
            ("siamese_network/main.py", "        outputs = model(images_1, images_2).squeeze()\n        loss = criterion(outputs, targets)\n",
             "        with " + AC.format(dev="device.type") + ":\n"
             "            outputs = model(images_1, images_2).squeeze().float()\n        loss = criterion(outputs, targets)\n"),
        ],
        "nonblocking": [("siamese_network/main.py",
                         "\n        images_1, images_2, targets = images_1.to(device), images_2.to(device), targets.to(device)\n        optimizer",
                         "\n        images_1, images_2, targets = images_1.to(device, non_blocking=True), images_2.to(device, non_blocking=True), targets.to(device, non_blocking=True)\n        optimizer")],
    },
    "mnist_rnn": {
        "loader": [("mnist_rnn/main.py", "kwargs = {'num_workers': 1, 'pin_memory': True} if args.accel else {}",
                    "kwargs = {'num_workers': {W}, 'pin_memory': True, 'persistent_workers': True, 'prefetch_factor': 4} if args.accel else {}")],
        "batch": [("mnist_rnn/main.py", "'--batch-size', type=int, default=64,", f"'--batch-size', type=int, default={64 * BATCH_FACTOR},")],
        "bf16": [
            ("mnist_rnn/main.py", "    model = Net().to(device)\n", f"    {TF32}\n    model = Net().to(device)\n"),
            ("mnist_rnn/main.py", "        output = model(data)\n        loss = F.nll_loss(output, target)\n",
             "        with " + AC.format(dev="device.type") + ":\n"
             "            output = model(data)\n            loss = F.nll_loss(output, target)\n"),
        ],
        "nonblocking": [("mnist_rnn/main.py", "\n        data, target = data.to(device), target.to(device)\n        optimizer.zero_grad()",
                         "\n        data, target = data.to(device, non_blocking=True), target.to(device, non_blocking=True)\n        optimizer.zero_grad()")],
    },
    "super_resolution": {
        "loader": [("super_resolution/main.py",
                    "training_data_loader = DataLoader(dataset=train_set, num_workers=opt.threads,",
                    "training_data_loader = DataLoader(dataset=train_set, " + LOADER_KW + ",")],
        "nosync": [
            ("super_resolution/main.py", "        epoch_loss += loss.item()\n", "        epoch_loss += loss.detach()\n"),
            ("super_resolution/main.py", "\n        print(\"===> Epoch[{}]({}/{}): Loss:",
             "\n        if iteration % 10 == 0: print(\"===> Epoch[{}]({}/{}): Loss:"),
        ],
        "bf16": [
            ("super_resolution/main.py", "model = Net(upscale_factor=opt.upscale_factor).to(device)\n",
             f"{TF32}; torch.backends.cudnn.benchmark = True\n"
             "model = Net(upscale_factor=opt.upscale_factor).to(device, memory_format=torch.channels_last)\n"),
            ("super_resolution/main.py", "        loss = criterion(model(input), target)\n",
             "        with " + AC.format(dev="device.type") + ":\n            loss = criterion(model(input), target)\n"),
        ],
    },
    "ddp_single_gpu": {
        "batch": [("distributed/ddp-tutorial-series/single_gpu.py", "'--batch_size', default=32,",
                   f"'--batch_size', default={32 * BATCH_FACTOR},")],
        "loader": [("distributed/ddp-tutorial-series/single_gpu.py", "        pin_memory=True,\n        shuffle=True\n",
                    "        pin_memory=True,\n        shuffle=True,\n        num_workers={W}, persistent_workers=True, prefetch_factor=4\n")],
        "compile": [("distributed/ddp-tutorial-series/single_gpu.py", "        self.model = model.to(gpu_id)\n",
                     "        self.model = torch.compile(model.to(gpu_id))\n")],
        "nonblocking": [
            ("distributed/ddp-tutorial-series/single_gpu.py", "source = source.to(self.gpu_id)", "source = source.to(self.gpu_id, non_blocking=True)"),
            ("distributed/ddp-tutorial-series/single_gpu.py", "targets = targets.to(self.gpu_id)", "targets = targets.to(self.gpu_id, non_blocking=True)"),
        ],
    },
    "mingpt": {
        "batch": [("mingpt/trainer.py", "C.batch_size = 64", f"C.batch_size = {64 * BATCH_FACTOR}")],
        "loader": [("mingpt/trainer.py", "            pin_memory=True,\n",
                    "            pin_memory=True, persistent_workers=config.num_workers > 0,\n"
                    "            prefetch_factor=4 if config.num_workers > 0 else None,\n"),
                   ("mingpt/trainer.py", "C.num_workers = 4", "C.num_workers = {W}")],
        "bf16": [
            ("mingpt/trainer.py", "        model.train()\n        self.iter_num = 0\n",
             f"        {TF32}\n        model.train()\n        self.iter_num = 0\n"),
            ("mingpt/trainer.py", "            logits, self.loss = model(x, y)\n",
             "            with " + AC.format(dev="self.device") + ":\n                logits, self.loss = model(x, y)\n"),
        ],
        "compile": [("mingpt/trainer.py", "            logits, self.loss = model(x, y)\n",
                     "            if not hasattr(self, '_compiled'):\n                self._compiled = torch.compile(model)\n"
                     "            logits, self.loss = self._compiled(x, y)\n")],
        "nonblocking": [("mingpt/trainer.py", "batch = [t.to(self.device) for t in batch]",
                         "batch = [t.to(self.device, non_blocking=True) for t in batch]")],
    },
    "word_lm": {
        "nosync": [("word_language_model/main.py", "        total_loss += loss.item()\n",
                    "        total_loss += loss.detach()  # read at the log interval\n")],
        "batch": [("word_language_model/main.py", "'--batch_size', type=int, default=20,",
                   f"'--batch_size', type=int, default={20 * BATCH_FACTOR},")],
        "bf16": [
            ("word_language_model/main.py", "criterion = nn.NLLLoss()\n", f"criterion = nn.NLLLoss()\n{TF32}\n"),
            ("word_language_model/main.py",
             "            hidden = repackage_hidden(hidden)\n            output, hidden = model(data, hidden)\n        loss = criterion(output, targets)\n",
             "            hidden = repackage_hidden(hidden)\n            with " + AC.format(dev="device.type") + ":\n"
             "                output, hidden = model(data, hidden)\n        loss = criterion(output.float(), targets)\n"),
        ],
    },
    "vae": {
        "loader": [("vae/main.py", "kwargs = {'num_workers': 1, 'pin_memory': True} if use_accel else {}",
                    "kwargs = {'num_workers': {W}, 'pin_memory': True, 'persistent_workers': True, 'prefetch_factor': 4} if use_accel else {}")],
        "nosync": [("vae/main.py", "        train_loss += loss.item()\n", "        train_loss += loss.detach()\n")],
        "batch": [("vae/main.py", "'--batch-size', type=int, default=128,", f"'--batch-size', type=int, default={128 * BATCH_FACTOR},")],
    },
}


class PatchError(RuntimeError):
    pass


def kind_for(code: str | None) -> str | None:
    """The fix kind that applies the prescription of finding ``code`` (None: no hand fix)."""
    if not code:
        return None
    for key, kind in KIND_FOR_CODE:
        if key in code.upper():
            return kind
    return None


def patch_text(source: str, kind: str, path: str, text: str, *, workers: int = 8) -> str:
    """``text`` (the file ``path`` of script ``source``) with fix ``kind`` applied.

    Raises :class:`PatchError` when an expected snippet does not occur exactly once.
    """
    for rel, old, new in PATCHES[source][kind]:
        if rel != path:
            continue
        count = text.count(old)
        if count != 1:
            raise PatchError(f"{source}/{kind}: {rel}: expected 1 occurrence of {old!r}, found {count}")
        text = text.replace(old, new.replace("{W}", str(workers)))
    return text


def apply(source: str, kind: str, repo_root: Path, *, workers: int = 8) -> list[str]:
    """Apply fix ``kind`` to the copy of the repository at ``repo_root``; return the files changed."""
    if kind not in PATCHES.get(source, {}):
        raise PatchError(f"no {kind!r} fix for {source!r}; known: {', '.join(PATCHES.get(source, {}))}")
    changed = []
    for rel in dict.fromkeys(p for p, _, _ in PATCHES[source][kind]):
        path = repo_root / rel
        text = path.read_text()
        path.write_text(patch_text(source, kind, rel, text, workers=workers))
        changed.append(rel)
    return changed
