"""torchvision on CPU-only machines whose torchvision is a CUDA build (our CI: only torch 2.13 CPU exists there,
and the registry's torchvision 0.28 is built for CUDA).

Its compiled ops cannot load there, and `import torchvision` then fails on two fake-kernel registrations for
operators the missing library would have defined (torchvision::nms, qnms). Neither CLIP (open_clip) nor HF
transformers needs torchvision's compiled ops, only its Python parts, but both import it when it is installed.
So, only when that import fails in exactly this way, we define those two operator schemas and import again: the
ops stay unavailable (calling them raises torchvision's own "Couldn't load custom C++ ops"). Where torchvision
imports normally (any machine with a matching build) nothing is changed.
"""
from __future__ import annotations

import importlib.util
import sys

_SCHEMAS = {  # as torchvision/csrc/ops/nms.cpp and ops/quantized/cpu/qnms_kernel.cpp define them
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_libraries = []  # torch.library.Library objects must outlive the import


def import_torchvision():
    """torchvision (with its compiled ops when they load, else without them); None when it is not installed."""
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        import torchvision

        return torchvision
    except RuntimeError as e:
        if not any(f"torchvision::{op}" in str(e) for op in _SCHEMAS):
            raise
    import torch

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS.values():
        library.define(schema)
    _libraries.append(library)
    import torchvision

    return torchvision
