"""Round two of ``fix_wild.py`` (``--set 2``): public scripts none of round one's 14.

Held out from round one's rule changes: ``wild2-cpu-before.md`` is the picture before round two's.
Kept apart from the harness, as rounds three and four (``fix_wild.py`` makes its ``Wild`` rows of
them): name, mirror (owner/name), script path, why it is not run on this CPU.
"""

from __future__ import annotations

WILD2: tuple[tuple[str, str, str, str], ...] = (
    ("yt_cnn", "yunjey/pytorch-tutorial",
     "tutorials/02-intermediate/convolutional_neural_network/main.py", "downloads MNIST"),
    ("yt_resnet", "yunjey/pytorch-tutorial",
     "tutorials/02-intermediate/deep_residual_network/main.py", "downloads CIFAR-10"),
    ("yt_language_model", "yunjey/pytorch-tutorial",
     "tutorials/02-intermediate/language_model/main.py", "needs its data/train.txt"),
    ("yt_gan", "yunjey/pytorch-tutorial",
     "tutorials/03-advanced/generative_adversarial_network/main.py", "downloads MNIST"),
    ("yt_vae", "yunjey/pytorch-tutorial",
     "tutorials/03-advanced/variational_autoencoder/main.py", "downloads MNIST"),
    ("gan_wgan_gp", "eriklindernoren/PyTorch-GAN",
     "implementations/wgan_gp/wgan_gp.py", "downloads MNIST"),
    ("gan_cyclegan", "eriklindernoren/PyTorch-GAN",
     "implementations/cyclegan/cyclegan.py", "needs an image-pair data set"),
    ("gan_dcgan", "eriklindernoren/PyTorch-GAN",
     "implementations/dcgan/dcgan.py", "downloads MNIST"),
    ("simsiam", "facebookresearch/simsiam",
     "main_simsiam.py", "NCCL, ImageNet folders"),
    ("barlowtwins", "facebookresearch/barlowtwins",
     "main.py", "NCCL, ImageNet folders"),
    ("vicreg", "facebookresearch/vicreg",
     "main_vicreg.py", "NCCL, ImageNet folders"),
)

# each plan's diff read by hand after round two's rule changes ("was": before them)
JUDGED2: dict[str, tuple[str, str]] = {
    "yt_cnn": ("yes", "loader on train_loader (test_loader untouched); channels_last on ConvNet + images; bf16 over "
               "model(images)+criterion; compile after model = ConvNet(...).to(device)"),
    "yt_resnet": ("yes", "as yt_cnn: loader on train_loader, ResNet convs channels_last, bf16 over forward+loss"),
    "yt_language_model": ("yes", "no DataLoader (Corpus ids sliced): loader advice; bf16 over model(inputs, states)"
                          "+criterion; cudnn_benchmark only because this plan forces it (an LSTM)"),
    "yt_gan": ("yes", "bf16 advice: nn.BCELoss, which CUDA autocast refuses (was patched: raises at step 1); "
               "compile on D and G, after each one's .to(device) (was D only); channels_last advice: no conv"),
    "yt_vae": ("yes", "non_blocking on x.to(device) only (was also on the chained .view(): TypeError); bf16 advice: "
               "F.binary_cross_entropy (was patched: CUDA autocast raises)"),
    "gan_wgan_gp": ("yes", "compile advice: autograd.grad(create_graph=True) gradient penalty, no double backward "
                    "through compiled modules (was discriminator.compile()); bf16 over the critic's loss incl. the "
                    "penalty: runs, numerics unmeasured; tf32/cudnn lines between the two models (harmless)"),
    "gan_cyclegan": ("yes", "loader via the --n_cpu default (argparse) + persistent on the training loader "
                     "(val_dataloader untouched); three models, two optimizers: everything else advice"),
    "gan_dcgan": ("yes", "bf16 advice: nn.BCELoss (was patched: CUDA autocast raises); channels_last and compile "
                  "on the generator and the discriminator (was G only), real_imgs converted before D's first call, "
                  "z guarded (2-D: a no-op), gen_imgs not (G's output)"),
    "simsiam": ("yes", "loader via the -j default (32 -> 8) + persistent; bf16 over model(x1, x2)+criterion; compile "
                "after the DDP wrap; channels_last advice: torchvision model built by name"),
    "barlowtwins": ("yes", "num_workers=args.workers kept: args traced through mp.spawn(main_worker, (args,), n) "
                    "to --workers, whose default is 8 already (was replaced by a literal 8); persistent and "
                    "prefetch guarded by args.workers > 0; set_epoch not added: the epoch loop calls it (was "
                    "added twice); bf16 advice: autocast already"),
    "vicreg": ("yes", "channels_last and compile on the inner module before the DDP wrap (was after it: DDP's "
               "buckets laid out for the contiguous params; PyTorch's docs compile the module passed to DDP); "
               "set_epoch not added: the loop calls it (was added twice); loader via the --num-workers default "
               "(10 -> 8)"),
}
