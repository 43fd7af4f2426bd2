"""A YOLOv8n-sized detector written from the public architecture (Ultralytics YOLOv8, ``n``
scale: width 0.25, depth 0.33), with random weights: Conv-BN-SiLU blocks, C2f, SPPF, an
upsample-and-concat FPN/PAN neck and the decoupled head with its DFL box decoding over anchors
made from the feature maps' sizes (so height and width stay dynamic). No NMS: the output is
``(batch, 4 + classes, anchors)`` as Ultralytics' ONNX export gives it. Imports torch.
"""

from __future__ import annotations

import torch
from torch import nn


class Conv(nn.Sequential):
    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1):
        super().__init__(nn.Conv2d(c1, c2, k, s, k // 2, bias=False), nn.BatchNorm2d(c2),
                         nn.SiLU())


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool):
        super().__init__()
        self.cv1, self.cv2 = Conv(c, c, 3), Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c1: int, c2: int, n: int, shortcut: bool):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c)
        self.cv2 = Conv((2 + n) * self.c, c2)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 5):
        super().__init__()
        self.cv1, self.cv2 = Conv(c1, c1 // 2), Conv(c1 // 2 * 4, c2)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class Detect(nn.Module):
    def __init__(self, nc: int, ch: tuple[int, ...], strides=(8, 16, 32), reg_max: int = 16):
        super().__init__()
        self.nc, self.reg_max, self.strides = nc, reg_max, strides
        c2, c3 = max(16, ch[0] // 4, reg_max * 4), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3),
                                               nn.Conv2d(c2, 4 * reg_max, 1)) for x in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3),
                                               nn.Conv2d(c3, nc, 1)) for x in ch)
        self.register_buffer("proj", torch.arange(reg_max, dtype=torch.float32))

    def forward(self, xs):
        b = xs[0].shape[0]
        outs, anchors, strides = [], [], []
        for x, box, cls, stride in zip(xs, self.cv2, self.cv3, self.strides):
            h, w = x.shape[2], x.shape[3]
            outs.append(torch.cat((box(x), cls(x)), 1).view(b, 4 * self.reg_max + self.nc, -1))
            sy = torch.arange(h, dtype=torch.float32) + 0.5
            sx = torch.arange(w, dtype=torch.float32) + 0.5
            gy, gx = torch.meshgrid(sy, sx, indexing="ij")
            anchors.append(torch.stack((gx, gy), -1).view(-1, 2))
            strides.append(torch.full((h * w, 1), float(stride)))
        y = torch.cat(outs, 2)
        anchor = torch.cat(anchors).transpose(0, 1).unsqueeze(0)   # (1, 2, A)
        stride = torch.cat(strides).transpose(0, 1)                # (1, A)
        box, cls = y.split((4 * self.reg_max, self.nc), 1)
        # DFL: the expected offset under a softmax over reg_max bins, per box side
        dist = box.view(b, 4, self.reg_max, -1).transpose(2, 1).softmax(1)
        dist = (dist * self.proj.view(1, -1, 1, 1)).sum(1)        # (b, 4, A)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = anchor - lt, anchor + rb
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * stride
        return torch.cat((xywh, cls.sigmoid()), 1)


class YoloV8n(nn.Module):
    def __init__(self, nc: int = 80):
        super().__init__()
        self.b0, self.b1 = Conv(3, 16, 3, 2), Conv(16, 32, 3, 2)
        self.b2 = C2f(32, 32, 1, True)
        self.b3, self.b4 = Conv(32, 64, 3, 2), C2f(64, 64, 2, True)          # P3
        self.b5, self.b6 = Conv(64, 128, 3, 2), C2f(128, 128, 2, True)       # P4
        self.b7, self.b8 = Conv(128, 256, 3, 2), C2f(256, 256, 1, True)
        self.b9 = SPPF(256, 256)                                              # P5
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h12, self.h15 = C2f(384, 128, 1, False), C2f(192, 64, 1, False)
        self.h16, self.h18 = Conv(64, 64, 3, 2), C2f(192, 128, 1, False)
        self.h19, self.h21 = Conv(128, 128, 3, 2), C2f(384, 256, 1, False)
        self.detect = Detect(nc, (64, 128, 256))

    def forward(self, x):
        p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p4 = self.b6(self.b5(p3))
        p5 = self.b9(self.b8(self.b7(p4)))
        n4 = self.h12(torch.cat((self.up(p5), p4), 1))
        o3 = self.h15(torch.cat((self.up(n4), p3), 1))
        o4 = self.h18(torch.cat((self.h16(o3), n4), 1))
        o5 = self.h21(torch.cat((self.h19(o4), p5), 1))
        return self.detect((o3, o4, o5))
