"""ResNet-50 as an image-embedding model: torchvision's ``resnet50(weights=None)`` when torchvision is
installed, else the same network (bottleneck blocks of 3, 4, 6, 3; 25.6 M parameters) written here in
plain torch. The classifier is dropped: the model maps a batch of images to 2048-d embeddings."""

from __future__ import annotations

from typing import Any


def resnet50_features() -> Any:
    """An untrained ResNet-50 without its classifier: a ``torch.nn.Module``, ``(B, 3, H, W) -> (B, 2048)``."""
    import torch

    try:
        from torchvision.models import resnet50
    except ImportError:
        return plain_resnet50()
    model = resnet50(weights=None)
    model.fc = torch.nn.Identity()
    return model


def plain_resnet50() -> Any:
    """The network in plain torch (what `resnet50_features` gives without torchvision)."""
    return _make_plain()()


def _make_plain() -> type:
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        """1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4, plus the shortcut."""

        def __init__(self, inputs: int, width: int, stride: int) -> None:
            super().__init__()
            out = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
            )  # fmt: skip
            self.shortcut: nn.Module = nn.Identity()
            if stride != 1 or inputs != out:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out)
                )
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu(self.body(x) + self.shortcut(x))

    class PlainResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = [
                nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2, 1),
            ]  # fmt: skip
            inputs = 64
            for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for k in range(blocks):
                    layers.append(Bottleneck(inputs, width, stride if k == 0 else 1))
                    inputs = width * 4
            layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
            self.net = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.net(x)
            return out

    return PlainResNet50
