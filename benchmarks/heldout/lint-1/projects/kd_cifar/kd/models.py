import torch
import torchvision


def resnet_cifar(depth_name="resnet18", num_classes=100):
    m = torchvision.models.__dict__[depth_name](num_classes=num_classes)
    m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = torch.nn.Identity()
    return m


def load_teacher(path, device, arch="resnet50"):
    teacher = resnet_cifar(arch)
    state = torch.load(path, map_location="cpu", weights_only=True)
    teacher.load_state_dict(state["model"] if "model" in state else state)
    teacher.requires_grad_(False)
    return teacher.to(device).eval()
