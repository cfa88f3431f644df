"""Small reference models used by the tests and the benchmark: an MLP, a one-layer
transformer encoder and a conv net. Sizes are arguments so the benchmark can scale them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d: int = 32, hidden: int = 64, out: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyTransformer(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, ff: int = 64, vocab: int = 50) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=ff, dropout=0.0,
                                                batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.layer(self.emb(tokens))))


class ConvNet(nn.Module):
    def __init__(self, c: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, 2 * c, 3, padding=1, stride=2)
        self.fc = nn.Linear(2 * c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.c1(x)))
        x = F.relu(self.c2(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class RobotPolicy(nn.Module):
    """A small visuomotor policy, the kind an edge chip on a robot runs: a conv encoder of
    the camera image, its features joined with the proprioceptive state, and an MLP action
    head with a LayerNorm; actions in [-1, 1]."""

    def __init__(self, channels: int = 16, state: int = 8, hidden: int = 64, actions: int = 7) -> None:
        super().__init__()
        c = channels
        self.encoder = nn.Sequential(
            nn.Conv2d(3, c, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * c, 2 * c, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fuse = nn.Linear(2 * c + state, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, actions), nn.Tanh())

    def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        features = torch.cat([self.encoder(image), state], dim=1)
        return self.head(self.norm(F.relu(self.fuse(features))))
