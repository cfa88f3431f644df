"""FlagGems' conv2d under aten::convolution_overrideable (flagos_ops_gems/_conv_adapter.py):
the calls it takes and how it hands them over, with torch's conv2d standing in for
FlagGems'."""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from flagos_ops_gems._conv_adapter import conv_kernels


def _adapter(calls: list):
    def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        calls.append((stride, padding, dilation, groups))
        return F.conv2d(input, weight, bias, stride, padding, dilation, groups)

    library = types.SimpleNamespace(ops=types.SimpleNamespace(conv2d=conv2d))
    return conv_kernels(library)["aten::convolution_overrideable"]


def test_forward_2d_convolutions_go_to_flaggems_conv2d() -> None:
    calls: list = []
    conv = _adapter(calls)
    x, w, b = torch.randn(2, 6, 9, 11), torch.randn(4, 3, 3, 2), torch.randn(4)
    got = conv(x, w, b, [2, 1], [1, 0], [1, 2], False, [0, 0], 2)
    torch.testing.assert_close(got, torch.ops.aten.convolution(x, w, b, [2, 1], [1, 0], [1, 2],
                                                               False, [0, 0], 2))
    assert calls == [([2, 1], [1, 0], [1, 2], 2)]
    nhwc = x.to(memory_format=torch.channels_last)
    torch.testing.assert_close(conv(nhwc, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 2),
                               F.conv2d(x, w, None, 1, 0, 1, 2))


def test_what_it_does_not_take_is_declined() -> None:
    calls: list = []
    conv = _adapter(calls)
    x, w = torch.randn(2, 4, 8, 8), torch.randn(4, 4, 3, 3)
    declined = [
        (x, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1),  # transposed
        (x[0], w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),  # unbatched
        (x.double(), w.double(), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),  # float64
        (x.half(), w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),  # dtypes differ
        (torch.randn(2, 4, 8, 8, 8), torch.randn(4, 4, 3, 3, 3), None, [1, 1, 1], [0, 0, 0],
         [1, 1, 1], False, [0, 0, 0], 1),  # 3-d
        (torch.randn(0, 4, 8, 8), w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),  # empty
    ]
    for args in declined:
        assert conv(*args) is NotImplemented
    assert calls == []


def test_no_conv2d_in_the_library_no_adapter() -> None:
    assert conv_kernels(types.SimpleNamespace(ops=types.SimpleNamespace())) == {}
