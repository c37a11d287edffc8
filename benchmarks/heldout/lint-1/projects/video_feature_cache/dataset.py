import os

import decord
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

decord.bridge.set_bridge("native")

MEAN = torch.tensor([0.45, 0.45, 0.45]).view(3, 1, 1, 1)
STD = torch.tensor([0.225, 0.225, 0.225]).view(3, 1, 1, 1)


class ClipDataset(Dataset):
    """Uniformly samples `num_frames` frames from each video and resizes them."""

    def __init__(self, video_dir, list_file, num_frames=16, size=224):
        with open(list_file) as f:
            self.videos = [line.split()[0] for line in f if line.strip()]
        self.video_dir = video_dir
        self.num_frames = num_frames
        self.size = size

    def __len__(self):
        return len(self.videos)

    def __getitem__(self, idx):
        path = os.path.join(self.video_dir, self.videos[idx])
        vr = decord.VideoReader(path, num_threads=1)
        ix = np.linspace(0, len(vr) - 1, self.num_frames).astype(np.int64)
        frames = vr.get_batch(ix).asnumpy()
        clip = torch.from_numpy(frames).cuda().permute(3, 0, 1, 2).float() / 255.0
        clip = F.interpolate(clip, size=(self.size, self.size), mode="bilinear", align_corners=False)
        clip = (clip - MEAN.to(clip.device)) / STD.to(clip.device)
        return clip, idx
