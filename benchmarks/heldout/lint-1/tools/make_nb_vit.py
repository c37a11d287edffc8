import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "projects"))
from mknb import nb
cells = [
("markdown", "# Fine-tune a ViT-B/16 on the flowers dataset\nExported from Colab."),
("code", "!pip install -q timm==1.0.9 albumentations\n%matplotlib inline"),
("code", """import os
import glob
import numpy as np
import torch
import torch.nn as nn
import timm
import albumentations as A
import matplotlib.pyplot as plt
from PIL import Image
from torch.utils.data import Dataset, DataLoader
from tqdm.auto import tqdm

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DATA = "/content/flowers"
print(device, torch.__version__)"""),
("code", """class FlowerDataset(Dataset):
    def __init__(self, files, labels, aug):
        self.files, self.labels, self.aug = files, labels, aug

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        img = np.array(Image.open(self.files[i]).convert("RGB"))
        img = self.aug(image=img)["image"].astype(np.float32) / 255.0
        img = (img - 0.5) / 0.5
        return torch.from_numpy(img.transpose(2, 0, 1)), self.labels[i]

classes = sorted(os.listdir(f"{DATA}/train"))
def collect(split):
    files, labels = [], []
    for ci, c in enumerate(classes):
        fs = sorted(glob.glob(f"{DATA}/{split}/{c}/*.jpg"))
        files += fs
        labels += [ci] * len(fs)
    return files, labels

train_aug = A.Compose([A.RandomResizedCrop(size=(224, 224), scale=(0.6, 1.0)), A.HorizontalFlip(),
                       A.ColorJitter(0.3, 0.3, 0.3, 0.05), A.GaussNoise(p=0.2)])
val_aug = A.Compose([A.Resize(256, 256), A.CenterCrop(224, 224)])
train_ds = FlowerDataset(*collect("train"), train_aug)
val_ds = FlowerDataset(*collect("valid"), val_aug)
train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, drop_last=True)
val_loader = DataLoader(val_ds, batch_size=128, num_workers=2)
len(train_ds), len(val_ds)"""),
("code", """model = timm.create_model("vit_base_patch16_224", pretrained=True, num_classes=len(classes)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.05)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
EPOCHS = 5
history = {"train_loss": [], "val_acc": []}"""),
("code", """%%time
for epoch in range(EPOCHS):
    model.train()
    running, seen = torch.zeros((), device=device), 0
    pbar = tqdm(train_loader, desc=f"epoch {epoch}")
    for x, y in pbar:
        x, y = x.to(device), y.to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running += loss.detach() * x.size(0)
        seen += x.size(0)
        pbar.set_description(f"epoch {epoch} loss {loss:.4f}")
    history["train_loss"].append((running / seen).item())"""),
("code", """model.eval()
correct = torch.zeros((), device=device)
for x, y in val_loader:
    logits = model(x.to(device))
    correct += (logits.argmax(1) == y.to(device)).sum()
acc = correct.item() / len(val_ds)
history["val_acc"].append(acc)
print(f"val acc {acc:.4f}")"""),
("code", """plt.plot(history["train_loss"])
plt.title("train loss")
plt.show()
torch.save(model.state_dict(), "vit_flowers.pt")"""),
]
nb(cells, "notebook_vit_finetune/finetune_vit.ipynb")
