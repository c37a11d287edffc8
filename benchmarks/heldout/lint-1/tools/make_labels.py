"""Regenerates ../labels.toml from the entries below.

Each entry names its line by a unique code snippet (`at`), so line numbers stay right if a file
is edited. `nth` picks the n-th (0-based) occurrence when a snippet repeats. `also` lists other
snippets whose lines a reviewer could fairly point at instead.
For notebooks the snippet is searched cell by cell; `cell` is the 0-based index in the
notebook's `cells` list and `line` is 1-based within that cell's source.
"""
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PROJ = os.path.join(ROOT, "projects")

P = "pitfall"
N = "near_miss"

E = [
# ---------------- hf_trainer_distill
(P, "hf_trainer_distill", "distill_trainer.py", "teacher_outputs = self.teacher(**inputs)", 0, [],
 "frozen_net_with_grad",
 "the teacher is only put in eval() (train.py never calls requires_grad_(False) and compute_loss has no "
 "no_grad), so every step builds a full autograd graph through the large teacher and backward flows "
 "into its parameters through the KD term"),
(P, "hf_trainer_distill", "distill_trainer.py", 'self.losses["kd"] += kd', 0, [],
 "loss_graph_accumulated",
 "the undetached KD loss tensor is summed into an attribute dict across logging_steps steps, keeping "
 "every step's graph (student and teacher activations) alive until log() resets it"),
(N, "hf_trainer_distill", "distill_trainer.py", 'self.losses["ce"] += ce.detach()', 0, [],
 "loss_graph_accumulated", "the CE term is detached before it is summed into the dict"),
(N, "hf_trainer_distill", "distill_trainer.py", 'logs[f"{name}_loss"] = round(float(total / self._loss_steps), 4)', 0, [],
 "sync_per_step", "float() runs in Trainer.log, i.e. only every logging_steps steps, not every step"),
(N, "hf_trainer_distill", "callbacks.py", "torch.cuda.empty_cache()", 0,
 ["if state.global_step % args.logging_steps == 0 and torch.cuda.is_available():"],
 "empty_cache_in_loop", "on_step_end only releases the cache when global_step hits a logging boundary (every 50 steps)"),

# ---------------- lightning_gan_manual
(P, "lightning_gan_manual", "gan_module.py", "d_fake = self.discriminator(fake)", 0, [],
 "gan_fake_not_detached",
 "the discriminator loss uses the generator output without .detach(), so manual_backward(d_loss) "
 "backpropagates through the whole generator (wasted compute, and G grads polluted until g_opt.zero_grad)"),
(P, "lightning_gan_manual", "gan_module.py", "self.manual_backward(d_loss)", 0,
 ["d_opt.step()", "def training_step(self, batch, batch_idx):"],
 "missing_zero_grad",
 "manual optimization: d_opt.zero_grad() is never called, so discriminator grads from every previous "
 "d_loss and g_loss backward keep accumulating into d_opt.step()"),
(N, "lightning_gan_manual", "gan_module.py", "g_loss = self.adversarial_loss(self.discriminator(gen), True)", 0, [],
 "gan_fake_not_detached", "the generator loss must backpropagate through D(G(z)); no detach is correct here"),
(N, "lightning_gan_manual", "gan_module.py", "samples = self.generator(self.fixed_z)", 0,
 ["def on_validation_epoch_end(self):"],
 "eval_no_grad", "Lightning runs on_validation_epoch_end inside the validation loop with grad disabled and the module in eval mode"),

# ---------------- accelerate_lm
(P, "accelerate_lm", "train.py", "progress.set_postfix(loss=loss.item(), lr=scheduler.get_last_lr()[0])", 0, [],
 "sync_per_step", "loss.item() on every micro-batch for the tqdm postfix forces a GPU sync each step"),
(P, "accelerate_lm", "train.py", 'torch.save(model.state_dict(), os.path.join(cfg.output_dir, f"model_epoch{epoch}.bin"))', 0, [],
 "save_wrapper_state_dict",
 "model is the object returned by accelerator.prepare (DDP wrapper on multi-GPU), so keys get the "
 "'module.' prefix; should use accelerator.unwrap_model(model).state_dict() / accelerator.save_model"),
(N, "accelerate_lm", "train.py", "optimizer.zero_grad()", 0, [],
 "missing_zero_grad",
 "zero_grad every micro-step is correct inside accelerator.accumulate(): the prepared optimizer only "
 "steps/zeros when gradients are synced"),
(N, "accelerate_lm", "train.py", "accelerator.clip_grad_norm_(model.parameters(), 1.0)", 0, [],
 "scaler_unscale_before_clip", "accelerator.clip_grad_norm_ unscales gradients itself (and mixed precision is bf16)"),

# ---------------- hydra_seg
(P, "hydra_seg", "src/train.py", "for epoch in range(cfg.epochs):", 0, [],
 "sampler_set_epoch",
 "the DistributedSampler is built in data.py build_train_loader; the epoch loop in train.py never calls "
 "train_loader.sampler.set_epoch(epoch), so every epoch uses the same shuffle order"),
(P, "hydra_seg", "src/train.py", "images = images.to(device)", 0, ["masks = masks.to(device)"],
 "pin_without_non_blocking",
 "data.py builds the loader with pin_memory=True but the loop copies without non_blocking=True, so the "
 "pinned H2D copies cannot overlap compute"),
(N, "hydra_seg", "src/train.py", "torch.backends.cudnn.benchmark = True", 0, [],
 "cudnn_benchmark_dynamic_shapes", "training inputs are fixed-size random crops (cfg.data.crop) with drop_last=True; val images all have the same resolution"),
(N, "hydra_seg", "src/train.py", 'log.info("epoch %d step %d loss %.4f lr %.5f", epoch, step, loss.item(), lr)', 0, [],
 "sync_per_step", "loss.item() only under `step % cfg.log_every == 0 and rank == 0`"),
(N, "hydra_seg", "src/train.py", 'save_checkpoint({"model": model.module.state_dict(), "epoch": epoch},', 0, [],
 "save_wrapper_state_dict", "saves model.module.state_dict(), the inner module of the DDP wrapper"),
(N, "hydra_seg", "src/utils.py", "def evaluate(model, loader, num_classes, device):", 0,
 ['cm.update(model(images)["out"], masks)'],
 "eval_no_grad", "no_grad comes from the @torch.no_grad() decorator on evaluate; model.eval() is called and train.py calls model.train() at the start of each epoch"),
(N, "hydra_seg", "src/utils.py", "self.mat += torch.bincount(", 0, ["def update(self, logits, target):"],
 "sync_per_step", "the metric's update(logits) keeps the confusion matrix on the GPU; the only .item() is in miou() once per evaluation"),

# ---------------- diffusion_ema
(P, "diffusion_ema", "train.py", "total += diffusion.loss(net, x).item()", 0,
 ["def validate(net, diffusion, loader, device, max_batches=20):", "val = validate(ema.shadow, diffusion, val_loader, device)"],
 "frozen_net_with_grad",
 "the EMA copy (deepcopy, params still require grad) is run for validation with autograd on: no "
 "no_grad/inference_mode in validate(), so each batch records a graph through the UNet"),
(P, "diffusion_ema", "sample.py", 'state = torch.load(args.ckpt, map_location="cpu")', 0, [],
 "load_unsafe", "checkpoint loaded without weights_only=True (full pickle); it only holds tensors and ints"),
(P, "diffusion_ema", "sample.py", "imgs = diffusion.p_sample_loop(net, (b, 3, 32, 32), device)", 0,
 ["while done < args.n:"],
 "sampling_loop_with_grad",
 "the 1000-step reverse-diffusion loop (model.py p_sample_loop, no decorator) is called here with autograd "
 "on, so graph/activations of all steps are kept; train.py wraps the same call in inference_mode, sample.py does not"),
(N, "diffusion_ema", "train.py", "imgs = diffusion.p_sample_loop(ema.shadow, (16, 3, 32, 32), device)", 0,
 ["with torch.inference_mode():"],
 "sampling_loop_with_grad", "the preview sampling call is inside torch.inference_mode()"),
(N, "diffusion_ema", "train.py", 'with torch.autocast("cuda", dtype=torch.bfloat16):', 0, [],
 "fp16_without_scaler", "bfloat16 autocast does not need a GradScaler"),
(N, "diffusion_ema", "ema.py", "ema_p.mul_(d).add_(p, alpha=1 - d)", 0, ["def update(self, model):"],
 "frozen_net_with_grad", "the EMA parameter update runs under the @torch.no_grad() decorator on EMA.update"),

# ---------------- rl_dqn_replay
(P, "rl_dqn_replay", "dqn_atari.py", "next_q = self.target(next_obs).max(dim=1).values", 0, [],
 "frozen_net_with_grad",
 "the target network forward for the TD target runs with autograd on (no no_grad, no detach), so "
 "backward goes through the target net and accumulates .grad in its parameters every update"),
(P, "rl_dqn_replay", "dqn_atari.py", "episode_losses.append(loss)", 0, [],
 "loss_graph_accumulated",
 "learn() returns the undetached loss; appending it every update keeps each step's graph alive until the episode ends"),
(N, "rl_dqn_replay", "dqn_atari.py", "return int(q.argmax(dim=1).item())", 0, [],
 "sync_per_step", "the greedy action must be a Python int for env.step; this sync is inherent to acting, under no_grad"),

# ---------------- fsdp_llm_pretrain
(P, "fsdp_llm_pretrain", "train.py", "gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)", 0, [],
 "fsdp_clip_grad_norm",
 "model is FSDP FULL_SHARD; torch.nn.utils.clip_grad_norm_ only sees the local shards, so the norm and "
 "clipping differ per rank; must use model.clip_grad_norm_(max_norm)"),
(P, "fsdp_llm_pretrain", "ckpt.py", "ckpt = torch.load(path, weights_only=True)", 0, [],
 "load_every_rank_no_map_location",
 "load_checkpoint runs on every rank; the full state dict was saved from rank 0 without CPU offload "
 "(cuda:0 tensors), and torch.load has no map_location, so every rank materialises the full model on GPU 0"),
(N, "fsdp_llm_pretrain", "train.py", "return x.to(device, non_blocking=True), y.to(device, non_blocking=True)", 0,
 ["x, y = torch.from_numpy(x).pin_memory(), torch.from_numpy(y).pin_memory()"],
 "non_blocking_unpinned", "no DataLoader here; the batch tensors are pinned explicitly right before the non_blocking copies"),
(N, "fsdp_llm_pretrain", "ckpt.py", "state = model.state_dict()", 0, [],
 "save_wrapper_state_dict", "FSDP.state_dict() under FULL_STATE_DICT returns the unwrapped parameter names; this is the documented way to save an FSDP model"),
(N, "fsdp_llm_pretrain", "train.py", 'print(f"step {step} loss {stats[0].item():.4f} gnorm {stats[1].item():.3f} {dt:.2f}s/it")', 0, [],
 "sync_per_step", "item() only every log_interval steps on rank 0"),

# ---------------- ddp_torchrun_cls
(P, "ddp_torchrun_cls", "train_ddp.py", "model = build_model(args).cuda()", 0,
 ['device = torch.device("cuda")', "model = DDP(model)"],
 "ddp_no_set_device",
 "torchrun DDP without torch.cuda.set_device(local_rank) (and device='cuda'): every rank puts its model and batches on GPU 0"),
(P, "ddp_torchrun_cls", "train_ddp.py", "train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, shuffle=True,", 0, [],
 "shuffle_with_sampler", "shuffle=True passed together with a DistributedSampler (DataLoader raises; shuffling belongs to the sampler)"),
(P, "ddp_torchrun_cls", "train_ddp.py", 'torch.save({"epoch": epoch, "state_dict": model.state_dict(),', 0, [],
 "save_wrapper_state_dict", "model is the DDP wrapper at this point; its state_dict keys carry the 'module.' prefix"),
(N, "ddp_torchrun_cls", "train_ddp.py", "val_sampler = DistributedSampler(val_set, shuffle=False)", 0, [],
 "sampler_set_epoch", "the validation sampler does not shuffle, so set_epoch has no effect on it"),
(N, "ddp_torchrun_cls", "train_ddp.py", "for epoch in range(args.epochs):", 0,
 ["run_epoch(model, train_loader, criterion, optimizer, epoch, device, args)", "loader.sampler.set_epoch(epoch)"],
 "sampler_set_epoch", "set_epoch(epoch) is called at the top of run_epoch, which the epoch loop calls every epoch"),

# ---------------- kfold_tabular
(P, "kfold_tabular", "cv_train.py", "optimizer.zero_grad()", 0,
 ["for xn, xc, yb in train_loader:", "optimizer.step()"],
 "missing_zero_grad",
 "zero_grad is called once per epoch, before the batch loop, so gradients accumulate across all batches of the epoch"),
(P, "kfold_tabular", "cv_train.py", "for epoch in range(args.epochs):", 0,
 ["        model.train()", "val_pred = predict(model, val_loader, device)"],
 "eval_mode_missing",
 "model.train() is called once per fold before the epoch loop; predict() switches to eval() after epoch 0, "
 "so later epochs train with dropout off and BatchNorm frozen"),
(N, "kfold_tabular", "cv_train.py", "preds.append(torch.sigmoid(logits).detach().cpu())", 0, [],
 "loss_graph_accumulated", "predictions are appended detached, on CPU, under no_grad in predict()"),
(N, "kfold_tabular", "cv_train.py", "return DataLoader(ds, batch_size=bs, shuffle=shuffle, drop_last=shuffle)", 0, [],
 "loader_no_workers", "TensorDataset of pre-built tensors: no per-sample CPU work, workers would only add overhead"),

# ---------------- notebook_vit_finetune
(P, "notebook_vit_finetune", "finetune_vit.ipynb", "train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, drop_last=True)", 0, [],
 "loader_no_workers", "PIL decode + albumentations per sample in the main process (num_workers default 0) feeding a ViT-B on GPU"),
(P, "notebook_vit_finetune", "finetune_vit.ipynb", 'pbar.set_description(f"epoch {epoch} loss {loss:.4f}")', 0, [],
 "sync_per_step", "formatting the loss tensor with :.4f calls .item() every step"),
(P, "notebook_vit_finetune", "finetune_vit.ipynb", "for x, y in val_loader:", 0,
 ["logits = model(x.to(device))"],
 "eval_no_grad", "validation cell runs model.eval() but no torch.no_grad()/inference_mode"),
(N, "notebook_vit_finetune", "finetune_vit.ipynb", "running += loss.detach() * x.size(0)", 0, [],
 "loss_graph_accumulated", "loss is detached before accumulation; .item() once per epoch"),

# ---------------- notebook_dcgan
(P, "notebook_dcgan", "dcgan_anime.ipynb", "output = netD(fake).view(-1)", 0,
 ["errD_fake.backward(retain_graph=True)"],
 "gan_fake_not_detached",
 "D loss on netG(noise) without .detach(); backward runs through the generator (retain_graph=True was added to make the G step work)"),
(P, "notebook_dcgan", "dcgan_anime.ipynb", "G_losses.append(errG.item())", 0, [],
 "sync_per_step", "errG.item() every iteration"),
(P, "notebook_dcgan", "dcgan_anime.ipynb", 'torch.save(netG, "netG_anime.pth")', 0, [],
 "save_whole_module", "pickles the whole generator module instead of its state_dict"),
(N, "notebook_dcgan", "dcgan_anime.ipynb", "output = netD(fake).view(-1)", 1, [],
 "gan_fake_not_detached", "generator step: D(G(z)) must not be detached"),
(N, "notebook_dcgan", "dcgan_anime.ipynb", "D_losses.append(errD.detach())", 0, [],
 "loss_graph_accumulated", "appended detached"),
(N, "notebook_dcgan", "dcgan_anime.ipynb", 'print(f"[{epoch}/{num_epochs}][{i}/{len(dataloader)}] Loss_D {errD.item():.4f} Loss_G {G_losses[-1]:.4f}")', 0, [],
 "sync_per_step", "only under `if i % 50 == 0`"),

# ---------------- asr_ctc
(P, "asr_ctc", "train.py", "torch.backends.cudnn.benchmark = True", 0, [],
 "cudnn_benchmark_dynamic_shapes",
 "utterances are padded to the longest in each batch (data.py collate, no bucketing), so the conv frontend sees a new time length nearly every batch"),
(P, "asr_ctc", "train.py", "torch.cuda.empty_cache()", 0, [],
 "empty_cache_in_loop", "train_step, called for every batch, ends with torch.cuda.empty_cache()"),
(N, "asr_ctc", "train.py", "scaler.unscale_(optimizer)", 0, ["gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"],
 "scaler_unscale_before_clip", "unscale_ is called before clipping"),
(N, "asr_ctc", "train.py", "feats = feats.to(device, non_blocking=True)", 0, [],
 "non_blocking_unpinned", "data.py build_loader uses pin_memory=True"),
(N, "asr_ctc", "train.py", "loss_sum += loss", 0, [],
 "loss_graph_accumulated", "train_step returns loss.detach()"),

# ---------------- amp_detector
(P, "amp_detector", "engine.py", "images = [img.to(device, non_blocking=True) for img in images]", 0,
 ["targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]"],
 "non_blocking_unpinned", "data.py build_loader never sets pin_memory, so non_blocking copies come from pageable memory"),
(P, "amp_detector", "engine.py", "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)", 0, [],
 "scaler_unscale_before_clip", "gradients are clipped while still multiplied by the GradScaler scale (no scaler.unscale_(optimizer) first)"),
(N, "amp_detector", "engine.py", "meter.update(loss=losses, **loss_dict)", 0,
 ["self.pending.append({k: v.detach() for k, v in tensors.items()})"],
 "sync_per_step", "MetricLogger.update stores detached tensors and converts to float only every print_freq updates"),
(N, "amp_detector", "engine.py", "def evaluate(model, loader, device, iou_thresh=0.5):", 0, ["outputs = model(images)"],
 "eval_no_grad", "evaluate is decorated with @torch.inference_mode() and calls model.eval(); train_one_epoch calls model.train()"),

# ---------------- fp16_bert_cls
(P, "fp16_bert_cls", "finetune.py", 'with torch.autocast(device_type="cuda", dtype=torch.float16):', 0, [],
 "fp16_without_scaler", "float16 autocast training with no GradScaler: small gradients underflow"),
(P, "fp16_bert_cls", "finetune.py", 'state = torch.load(args.init_ckpt, map_location="cpu")', 0, [],
 "load_unsafe", "state dict loaded without weights_only=True"),
(N, "fp16_bert_cls", "finetune.py", 'log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())', 0, [],
 "sync_per_step", "only every args.log_steps steps"),

# ---------------- video_feature_cache
(P, "video_feature_cache", "dataset.py", "clip = torch.from_numpy(frames).cuda().permute(3, 0, 1, 2).float() / 255.0", 0,
 ["clip = (clip - MEAN.to(clip.device)) / STD.to(clip.device)"],
 "cuda_in_dataset_worker", "__getitem__ moves frames to CUDA, and extract.py runs the loader with num_workers=8 worker processes"),
(N, "video_feature_cache", "extract.py", "def run(model, loader, out_dir):", 0, ["feats = model(clips).float().cpu().numpy()"],
 "eval_no_grad", "run() is decorated with @torch.no_grad() and calls model.eval()"),
(N, "video_feature_cache", "extract.py", "feats = model(clips).float().cpu().numpy()", 0, [],
 "sync_per_step", "feature extraction: every batch has to come back to the host to be written to disk"),

# ---------------- meters_cls
(P, "meters_cls", "train.py", "losses.update(loss, images.size(0))", 0, [],
 "loss_graph_accumulated",
 "AverageMeter.update (utils/meters.py) does self.sum += val * n with the undetached loss tensor, keeping every step's graph for the whole epoch"),
(P, "meters_cls", "utils/meters.py", "self.correct[k] += hit[:, :k].any(dim=1).sum().item()", 0, [],
 "sync_per_step", "the metric's update(logits, target) calls .item() for every k on every training step"),
(P, "meters_cls", "train.py", "@timed", 0, ["def train_step(model, images, target, criterion, optimizer):"],
 "sync_per_step", "the @timed decorator (utils/timing.py) calls torch.cuda.synchronize() before and after every train_step call"),
(N, "meters_cls", "train.py", "@timed", 1, ["def validate(model, loader, criterion, device):"],
 "sync_per_step", "@timed on validate: two synchronizes once per epoch"),
(N, "meters_cls", "train.py", "losses.update(criterion(output, target).detach(), images.size(0))", 0, [],
 "loss_graph_accumulated", "val loss detached (and under no_grad) before going into the meter"),

# ---------------- two_tower_recsys
(P, "two_tower_recsys", "train.py", "running = running + loss", 0, [],
 "loss_graph_accumulated", "undetached loss summed over the epoch keeps every step's graph"),
(P, "two_tower_recsys", "train.py", "def evaluate_recall(model, loader, device, k=50):", 0,
 ["with torch.no_grad():", "recall = evaluate_recall(model, val_loader, device)"],
 "eval_mode_missing", "recall evaluation under no_grad but without model.eval(): the towers' Dropout stays active"),
(N, "two_tower_recsys", "train.py", "model.to(device)", 0, ["optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)"],
 "model_to_after_optimizer", "Module.to moves parameters in place, so the optimizer (with no state yet) still holds the right tensors"),

# ---------------- srgan_perceptual
(P, "srgan_perceptual", "train.py", "for lr, hr in loader:", 0,
 ["def validate(generator, loader, device):", "sr = generator(lr.to(device))"],
 "eval_no_grad", "PSNR validation over full 384x384 crops with autograd on; the graphs of all batches are kept in `scores`"),
(P, "srgan_perceptual", "train.py", 'torch.save({"G": G, "D": D, "epoch": epoch}, os.path.join(args.out, f"srgan_e{epoch}.pth"))', 0, [],
 "save_whole_module", "the dict holds the nn.Module objects themselves, so the whole modules are pickled"),
(N, "srgan_perceptual", "losses.py", "f_sr = self.vgg((sr - self.mean) / self.std)", 0, [],
 "frozen_net_with_grad", "perceptual loss: gradients must flow through the frozen VGG to sr; the HR branch is under no_grad"),
(N, "srgan_perceptual", "train.py", "adv = F.binary_cross_entropy_with_logits(D(sr), torch.ones_like(d_real))", 0, [],
 "gan_fake_not_detached", "generator adversarial term; the D step uses sr.detach()"),

# ---------------- hf_summarization_callbacks
(P, "hf_summarization_callbacks", "callbacks.py", "torch.cuda.empty_cache()", 0, ["def on_step_end(self, args, state, control, **kwargs):"],
 "empty_cache_in_loop", "a TrainerCallback.on_step_end that empties the CUDA cache after every optimizer step"),
(P, "hf_summarization_callbacks", "callbacks.py", "for _ in range(self.max_new_tokens):", 0,
 ["def _greedy(self, model, enc):", "out = self._greedy(model, enc)"],
 "sampling_loop_with_grad", "manual 96-step greedy decoding loop (and the encoder pass) with autograd on"),
(N, "hf_summarization_callbacks", "callbacks.py", "out = model.generate(**enc, num_beams=4, max_new_tokens=self.max_new_tokens, early_stopping=True)", 0, [],
 "sampling_loop_with_grad", "generate() runs under torch.no_grad() internally"),

# ---------------- lightning_seg_dm
(P, "lightning_seg_dm", "datamodule.py", "return DataLoader(self.train_ds, batch_size=self.batch_size, shuffle=True, drop_last=True)", 0, [],
 "loader_no_workers", "cv2 decode + elastic/colour augmentation per sample, train_dataloader uses the default num_workers=0"),
(P, "lightning_seg_dm", "module.py", "self.train_losses.append(loss)", 0, [],
 "loss_graph_accumulated", "undetached training loss appended to an attribute list for the whole epoch"),
(N, "lightning_seg_dm", "module.py", "logits = self(x)", 1, ["def validation_step(self, batch, batch_idx):"],
 "eval_no_grad", "Lightning runs validation_step with grad disabled and the module in eval mode"),
(N, "lightning_seg_dm", "module.py", "self.val_dice.append(1 - dice_loss(logits, y))", 0, [],
 "loss_graph_accumulated", "appended in validation_step, where no graph is built"),
(N, "lightning_seg_dm", "train.py", 'precision="16-mixed",', 0, ["gradient_clip_val=1.0,"],
 "fp16_without_scaler", "Lightning's 16-mixed precision plugin creates the GradScaler and unscales before gradient_clip_val"),

# ---------------- ppo_rollouts
(P, "ppo_rollouts", "ppo.py", "for _ in range(storage.num_steps):", 0,
 ["def collect_rollout(envs, policy, storage, obs, device):", "storage.insert(obs, action, logprob, value,"],
 "sampling_loop_with_grad",
 "the 2048-step rollout loop runs the policy with autograd on and stores logprob/value with their graphs; "
 "the old log-probs then carry gradient in the PPO ratio"),
(N, "ppo_rollouts", "ppo.py", "next_obs, reward, term, trunc, _ = envs.step(action.cpu().numpy())", 0, [],
 "sync_per_step", "the environment needs the action on the host every step"),

# ---------------- kd_cifar
(P, "kd_cifar", "kd/train.py", 'self.history.append({"step": global_step, "loss": float(loss)})', 0, [],
 "sync_per_step", "float(loss) on every training step"),
(N, "kd_cifar", "kd/train.py", "t = self.teacher_logits(x)", 0, ["def teacher_logits(self, x):"],
 "frozen_net_with_grad", "teacher_logits is decorated with @torch.no_grad(); the teacher is also requires_grad_(False) and eval() in models.py"),
(N, "kd_cifar", "kd/models.py", 'state = torch.load(path, map_location="cpu", weights_only=True)', 0, [],
 "load_unsafe", "weights_only=True"),
(N, "kd_cifar", "kd/train.py", 'self.meters["kd"] += kd.detach()', 0, ['self.meters["ce"] += ce.detach()'],
 "loss_graph_accumulated", "losses kept in a dict are detached before accumulation"),

# ---------------- ddp_resume_regression
(P, "ddp_resume_regression", "train.py", "loader = DataLoader(ds, batch_size=args.bs, shuffle=True, num_workers=6, pin_memory=True,", 0, [],
 "ddp_no_distributed_sampler", "DDP training under torchrun with a plain shuffled DataLoader: every rank iterates the full dataset"),
(P, "ddp_resume_regression", "utils.py", "ckpt = torch.load(path)", 0, [],
 "load_every_rank_no_map_location", "load_checkpoint runs on every rank; the checkpoint holds cuda:0 tensors saved by rank 0, no map_location"),
(P, "ddp_resume_regression", "utils.py", "ckpt = torch.load(path)", 0, [],
 "load_unsafe", "no weights_only=True"),
(N, "ddp_resume_regression", "utils.py", 'torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),', 0, [],
 "save_wrapper_state_dict", "saves model.module.state_dict()"),
(N, "ddp_resume_regression", "train.py", "total[0] += loss.detach() * x.size(0)", 0, [],
 "loss_graph_accumulated", "detached; all_reduce + .item() once per epoch"),

# ---------------- gpu_preloaded_mnist
(P, "gpu_preloaded_mnist", "fast_mnist.py", "def sgd_step(model, optimizer, x, y):", 0,
 ["loss.backward()", "optimizer.step()", "losses.append(sgd_step(model, optimizer, x, y))"],
 "missing_zero_grad", "the step helper never zeroes gradients and neither does the loop, so grads accumulate over all steps"),
(N, "gpu_preloaded_mnist", "fast_mnist.py", "train_loader = DataLoader(train_ds, batch_size=args.bs, shuffle=True, num_workers=0, drop_last=True)", 0, [],
 "loader_no_workers", "the dataset is preloaded as CUDA tensors, no per-sample CPU work; workers must not touch CUDA"),
(N, "gpu_preloaded_mnist", "fast_mnist.py", "x = ds.data.to(device).float().div_(255).sub_(0.1307).div_(0.3081).unsqueeze(1)", 0, [],
 "cuda_in_dataset_worker", "CUDA tensors in a TensorDataset read with num_workers=0: no worker processes"),
(N, "gpu_preloaded_mnist", "fast_mnist.py", "losses.append(sgd_step(model, optimizer, x, y))", 0, [],
 "loss_graph_accumulated", "sgd_step returns loss.detach()"),

# ---------------- simclr_ddp
(P, "simclr_ddp", "train.py", "for epoch in range(start_epoch, args.epochs):", 0, ["sampler.set_epoch(start_epoch)"],
 "sampler_set_epoch", "set_epoch is called once before the epoch loop, never per epoch, so the shuffle order repeats"),
(P, "simclr_ddp", "train.py", "if not torch.isfinite(loss):", 0, [],
 "sync_per_step", "the NaN guard evaluates a CUDA bool tensor in `if` every step (implicit .item())"),
(N, "simclr_ddp", "train.py", "train_loader = DataLoader(train_set, batch_size=args.bs, sampler=sampler, shuffle=(sampler is None),", 0, [],
 "shuffle_with_sampler", "shuffle is only True when no sampler is given"),
(N, "simclr_ddp", "train.py", 'state = torch.load(args.ckpt, map_location=device, weights_only=True)', 0, [],
 "load_every_rank_no_map_location", "map_location is the rank's own device and weights_only=True"),
(N, "simclr_ddp", "train.py", 'torch.save({"model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),', 0, [],
 "save_wrapper_state_dict", "unwrap() returns model.module for the DDP wrapper"),
(N, "simclr_ddp", "train.py", "nn.utils.clip_grad_norm_(model.parameters(), 3.0)", 0, ["scaler.unscale_(optimizer)"],
 "scaler_unscale_before_clip", "scaler.unscale_(optimizer) is called right before clipping"),
(N, "simclr_ddp", "knn.py", "backbone.eval()", 0, ["backbone.train(was_training)"],
 "eval_mode_missing", "knn_accuracy restores the previous training mode at the end (and the epoch loop calls model.train())"),
]


# other kinds a reviewer could fairly file the same pitfall under
ALT_KINDS = {
    ("diffusion_ema", "total += diffusion.loss(net, x).item()"): ["eval_no_grad"],
    ("ppo_rollouts", "for _ in range(storage.num_steps):"): ["loss_graph_accumulated"],
    ("hf_summarization_callbacks", "for _ in range(self.max_new_tokens):"): ["eval_no_grad"],
    ("srgan_perceptual", "for lr, hr in loader:"): ["loss_graph_accumulated"],
}


def find_py(path, snippet, nth):
    lines = open(path).read().split("\n")
    hits = [i + 1 for i, l in enumerate(lines) if snippet in l]
    if len(hits) <= nth:
        sys.exit(f"snippet not found ({len(hits)} hits, nth={nth}): {path}: {snippet!r}")
    if nth == 0 and len(hits) > 1:
        # the first occurrence is meant; make sure this was a conscious choice
        pass
    return None, hits[nth], lines[hits[nth] - 1]


def find_nb(path, snippet, nth):
    nb = json.load(open(path))
    hits = []
    for ci, c in enumerate(nb["cells"]):
        if c["cell_type"] != "code":
            continue
        src = "".join(c["source"]).split("\n")
        for li, l in enumerate(src):
            if snippet in l:
                hits.append((ci, li + 1, l))
    if len(hits) <= nth:
        sys.exit(f"snippet not found: {path}: {snippet!r}")
    return hits[nth]


def locate(project, file, snippet, nth):
    path = os.path.join(PROJ, project, file)
    if file.endswith(".ipynb"):
        return find_nb(path, snippet, nth)
    return find_py(path, snippet, nth)


def q(s):
    return json.dumps(s, ensure_ascii=False)


def main():
    out = ["# Labels for the lint-1 held-out set. Generated by tools/make_labels.py; see README.md.", ""]
    check = []
    counts = {P: 0, N: 0}
    for kind_tab, project, file, snippet, nth, also, kind, why in E:
        cell, line, text = locate(project, file, snippet, nth)
        extra = []
        for a in also:
            c2, l2, _ = locate(project, file, a, 0)
            if c2 != cell:
                sys.exit(f"alt line in another cell: {project}/{file}: {a!r}")
            if l2 != line and l2 not in extra:
                extra.append(l2)
        out.append(f"[[{kind_tab}]]")
        out.append(f"project = {q(project)}")
        out.append(f"file = {q(file)}")
        if cell is not None:
            out.append(f"cell = {cell}")
        out.append(f"line = {line}")
        if extra:
            out.append(f"lines = [{', '.join(str(x) for x in extra)}]")
        out.append(("kind" if kind_tab == P else "looks_like") + f" = {q(kind)}")
        alt = ALT_KINDS.get((project, snippet)) if kind_tab == P else None
        if alt:
            out.append(f"alt_kinds = [{', '.join(q(a) for a in alt)}]")
        out.append(f"why = {q(why)}")
        out.append("")
        counts[kind_tab] += 1
        check.append((kind_tab, project, file, cell, line, kind, text.strip()))
    with open(os.path.join(ROOT, "labels.toml"), "w") as f:
        f.write("\n".join(out))
    for c in check:
        print(c)
    print(counts)


if __name__ == "__main__":
    main()
