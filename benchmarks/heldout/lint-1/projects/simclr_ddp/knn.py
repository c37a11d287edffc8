import torch
import torch.nn.functional as F


@torch.no_grad()
def extract(backbone, loader, device):
    feats, labels = [], []
    for x, y in loader:
        feats.append(F.normalize(backbone(x.to(device, non_blocking=True)), dim=1))
        labels.append(y.to(device, non_blocking=True))
    return torch.cat(feats), torch.cat(labels)


@torch.no_grad()
def knn_accuracy(backbone, memory_loader, test_loader, device, k=200, t=0.1, num_classes=10):
    was_training = backbone.training
    backbone.eval()
    bank, bank_y = extract(backbone, memory_loader, device)
    correct, total = torch.zeros((), device=device), 0
    for x, y in test_loader:
        f = F.normalize(backbone(x.to(device, non_blocking=True)), dim=1)
        sim, idx = (f @ bank.t()).topk(k, dim=1)
        w = (sim / t).exp()
        votes = torch.zeros(f.size(0), num_classes, device=device)
        votes.scatter_add_(1, bank_y[idx], w)
        correct += (votes.argmax(1) == y.to(device)).sum()
        total += y.size(0)
    backbone.train(was_training)
    return correct.item() / total
